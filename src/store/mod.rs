//! Long-term memory: namespaced JSON items shared across threads, with TTL,
//! the [filter language](crate::filter) and exact, max-pooled cosine vector
//! search, in the file format of LangGraph's Python `SqliteStore`.
//!
//! - [`Store`]: the operations ([`get`](Store::get), [`put`](Store::put),
//!   [`delete`](Store::delete), [`search`](Store::search),
//!   [`list_namespaces`](Store::list_namespaces), [`batch`](Store::batch),
//!   [`sweep_expired`](Store::sweep_expired), [`reindex`](Store::reindex));
//! - one type per operation, used by the direct call and by a batch:
//!   [`Get`], [`Put`], [`Search`], [`ListNamespaces`] (in a batch: [`Op`],
//!   answered by [`OpResult`]);
//! - configuration: [`StoreConfig`], [`IndexConfig`], [`TtlConfig`];
//! - results: [`Item`], [`SearchItem`], [`Namespace`];
//! - embeddings: the [`Embedder`] trait and the built-in [`HashEmbedder`].
//!
//! ```
//! use agentstate::store::{IndexConfig, Search, StoreConfig};
//! use agentstate::Db;
//! use serde_json::json;
//!
//! let db = Db::open_in_memory()?;
//! let store = db.store(StoreConfig::new().with_index(IndexConfig::hashed(64)?))?;
//! store.put(&["users", "alice"], "m1", json!({"text": "likes hiking in the alps"}))?;
//! let hits = store.search(Search::new(&["users"]).query("hiking").limit(5))?;
//! assert_eq!(hits[0].item.key, "m1");
//! for ns in store.list_namespaces(Default::default())? {
//!     assert!(store.get(&ns, "m1")?.is_some()); // namespaces go straight back in
//! }
//! # Ok::<(), agentstate::Error>(())
//! ```

mod cache;
mod config;
mod embed;
mod exec;
mod item;
mod listing;
pub(crate) mod namespace;
mod ops;
mod partial;
mod path;
mod quantised;
mod refresh;
mod reindex;
mod stream;

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::Value;

pub use config::{IndexConfig, StoreConfig, TtlConfig, MAX_TTL};
pub use embed::{Embedder, HashEmbedder, MAX_DIMS};
pub use item::{Item, SearchItem};
pub use namespace::{Label, MatchCondition, Namespace};
pub use ops::{Get, ListNamespaces, Op, OpResult, Put, Search};

use crate::db::Db;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use cache::SearchCache;
use path::{configured_fields, IndexField};

/// Long-term memory: namespaced JSON items shared across threads, with TTL,
/// filters and exact vector search. Get one with [`Db::store`]. Cheap to
/// clone; `Send + Sync`. The TTL sweeper (if configured) stops when the last
/// clone is dropped.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    config: StoreConfig,
    fields: Vec<IndexField>,
    /// Set once at open; taken on drop (no lock, so nothing can poison it).
    sweeper: Option<(Sender<()>, JoinHandle<()>)>,
    cache: SearchCache,
    /// Recent answers of `list_namespaces`.
    lists: listing::ListCache,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.sweeper.take() {
            drop(stop);
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("config", &self.inner.config).finish()
    }
}

impl Db {
    /// The Store of this database with `config`.
    ///
    /// With an index, the file must record the configured embedder
    /// (`name/dims`); a file that records none is given this one, unless it
    /// already holds vectors (see
    /// [`IndexConfig::with_adopt_existing_vectors`]). Nothing is written
    /// when the record is already there.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] if the index has 0 dims or more than
    ///   [`MAX_DIMS`], the default TTL is over [`MAX_TTL`] or the sweep
    ///   interval is zero.
    /// - [`Error::EmbedderMismatch`] if the file's vectors were made by
    ///   another embedder (name or dims); use [`Db::reindex_store`].
    /// - [`Error::UnrecordedEmbedder`] if the file holds vectors but records
    ///   no embedder (a file of LangGraph's Python `SqliteStore`) and the
    ///   index does not adopt them; [`Error::DimensionMismatch`] if it adopts
    ///   them but their length is not the index's dims.
    /// - database errors.
    pub fn store(&self, config: StoreConfig) -> Result<Store> {
        config::check(&config)?;
        if let Some(index) = config.index() {
            reindex::check_embedder(&self.for_store(), index)?;
        }
        Store::open(self.for_store(), config)
    }

    /// Like [`Db::store`], but instead of refusing a file whose vectors were
    /// made by another (or an unrecorded) embedder, re-embeds every item
    /// with the configured one and records it, in one transaction
    /// ([`Store::reindex`]).
    ///
    /// # Errors
    /// As [`Db::store`] (except the embedder checks) and [`Store::reindex`];
    /// the file is unchanged then.
    pub fn reindex_store(&self, config: StoreConfig) -> Result<Store> {
        let store = Store::open(self.for_store(), config)?;
        store.reindex()?;
        Ok(store)
    }
}

impl Store {
    fn open(db: Db, config: StoreConfig) -> Result<Store> {
        config::check(&config)?;
        let fields = config.index().map(|index| configured_fields(index.fields())).unwrap_or_default();
        let mut sweeper = None;
        if let Some(every) = config.ttl().and_then(TtlConfig::sweep_interval) {
            let (stop, wait) = mpsc::channel::<()>();
            let db = db.clone();
            let handle =
                std::thread::Builder::new().name("agentstate-ttl-sweeper".into()).spawn(move || loop {
                    match wait.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = exec::sweep(&db);
                        }
                        _ => return,
                    }
                })?;
            sweeper = Some((stop, handle));
        }
        let cache = SearchCache::new(config.search_memory());
        Ok(Store { inner: Arc::new(Inner { db, config, fields, sweeper, cache, lists: Default::default() }) })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The item at (`namespace`, `key`), or `None` (also if it expired).
    /// Refreshes its TTL if the store refreshes on read and the write lock
    /// is free at once (see [`TtlConfig::with_refresh_on_read`]): a read
    /// never waits for, or fails because of, another writer. `namespace` is
    /// anything that is a slice of labels: `&["users", "alice"]`,
    /// `&Namespace`, `&Vec<String>`.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; [`Error::Corrupt`] if the stored row is
    /// not JSON or its timestamps are unreadable; database errors.
    pub fn get<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<Option<Item>> {
        self.get_with(Get::new(namespace, key))
    }

    /// [`get`](Self::get) with the options of a [`Get`].
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_with(&self, get: Get) -> Result<Option<Item>> {
        self.get_one(get)
    }

    /// Stores `value` (a JSON object) at (`namespace`, `key`) with the
    /// store's index fields and default TTL. Replaces an existing item
    /// (keeping its `created_at`) and its vectors.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; [`Error::InvalidArgument`] if `value` is
    /// not an object or nests more than 127 levels of objects and arrays;
    /// [`Error::Embedding`] or [`Error::DimensionMismatch`] if the embedder
    /// fails; [`Error::EmbedderMismatch`] if another handle has reindexed
    /// the file to another embedder since this store opened (open the
    /// store again with that one); database errors. Nothing is written on
    /// error.
    pub fn put<S: AsRef<str>>(&self, namespace: &[S], key: &str, value: Value) -> Result<()> {
        self.put_with(Put::new(namespace, key, value))
    }

    /// Runs one [`Put`]: a write with its own index fields or TTL, or a
    /// delete.
    ///
    /// # Errors
    /// As [`put`](Self::put), and [`Error::InvalidArgument`] for a TTL over
    /// [`MAX_TTL`].
    pub fn put_with(&self, put: Put) -> Result<()> {
        self.batch(vec![Op::Put(put)]).map(|_| ())
    }

    /// Deletes the item (and its vectors). Deleting a missing item is a
    /// no-op.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; database errors.
    pub fn delete<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<()> {
        self.put_with(Put::delete(namespace, key))
    }

    /// Items under the search's namespace prefix (label-aligned), filtered,
    /// then ranked by similarity to its query (best vector per item,
    /// descending; ties by the namespace's `.`-joined text, then key, in
    /// byte order; items without a vector after every scored one, newest
    /// first) or, without a query, newest first (ties as before);
    /// then `offset` and `limit` over that one sequence. Exact: every vector
    /// of every candidate is scored, over an in-memory copy of the searched
    /// prefixes that later searches reuse, or, if that copy would exceed
    /// the [search memory](StoreConfig::with_search_memory), from the file
    /// in memory bounded by `offset + limit` (same results, slower).
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; [`Error::InvalidFilter`];
    /// [`Error::InvalidConfig`] for a query on a store without an index;
    /// [`Error::Embedding`] or [`Error::DimensionMismatch`] if the embedder
    /// fails; [`Error::EmbedderMismatch`] on a store with an index after
    /// another handle reindexed the file to another embedder; [`Error::Corrupt`] if a
    /// stored vector has the wrong length; database errors.
    pub fn search(&self, search: Search) -> Result<Vec<SearchItem>> {
        match self.batch(vec![Op::Search(search)])?.pop() {
            Some(OpResult::Items(items)) => Ok(items),
            _ => Ok(vec![]),
        }
    }

    /// The namespaces holding (unexpired) items, in tuple order.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] for a malformed label; database errors.
    pub fn list_namespaces(&self, list: ListNamespaces) -> Result<Vec<Namespace>> {
        match self.batch(vec![Op::ListNamespaces(list)])?.pop() {
            Some(OpResult::Namespaces(n)) => Ok(n),
            _ => Ok(vec![]),
        }
    }

    /// Deletes every expired item now (with its vectors) and returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn sweep_expired(&self) -> Result<usize> {
        exec::sweep(&self.inner.db)
    }

    /// Re-embeds every item with the configured embedder and fields,
    /// replacing all vectors, and records the embedder in the file. Returns
    /// the number of items. A store without an index removes all vectors
    /// and the record.
    ///
    /// One transaction: a crash at any instant leaves either the old
    /// embedder's record and vectors or the new ones. The embedding happens
    /// before the write lock is taken; items put by other writers meanwhile
    /// are re-read and embedded under the lock, so none loses its vector.
    ///
    /// # Errors
    /// [`Error::Embedding`] or [`Error::DimensionMismatch`] if the embedder
    /// fails; [`Error::Corrupt`] for a stored value that is not JSON;
    /// database errors. All or nothing.
    pub fn reindex(&self) -> Result<usize> {
        self.reindex_all()
    }

    /// Runs `ops` as one transaction and returns one result per op, in order:
    /// every read sees the state before the batch; puts to the same
    /// (namespace, key) collapse to the last one.
    ///
    /// # Errors
    /// Any op's validation error (nothing runs then), embedder errors
    /// ([`Error::EmbedderMismatch`] as for [`put`](Self::put) and
    /// [`search`](Self::search)), and database errors (everything rolls
    /// back).
    pub fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.run_batch(ops)
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Store>();
}
