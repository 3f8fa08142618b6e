//! The Store over SQLite: LangGraph's `SqliteStore` file format with the fixes
//! of DESIGN.md decisions 10-16.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use serde_json::Value;

use super::cache::{self, normalise, SearchCache};
use super::embed::{embed_documents_checked, embed_query_checked, Embedder};
use super::namespace::{self, prefix_glob, validate_labels, validate_namespace, MatchCondition, PrefixGlob};
use super::path::{configured_fields, field_texts, per_put_fields, IndexField};
use super::types::*;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::json::{too_deep, MAX_STORED_DEPTH};
use crate::vector::{decode_f32, encode_f32};

/// SQL: now, as comparable UTC text with milliseconds.
/// (A scalar subquery, so SQLite computes it once per statement, not per row.)
const NOW: &str = "(SELECT strftime('%Y-%m-%d %H:%M:%f', 'now'))";

/// SQL: the row of `store` (aliased `s`) has not expired.
fn alive(alias: &str) -> String {
    format!("({alias}.expires_at IS NULL OR {alias}.expires_at >= {NOW})")
}

/// SQL: the expiry of a row whose TTL (minutes) is the expression `ttl`.
fn expiry(ttl: &str) -> String {
    format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || printf('%.3f', ({ttl}) * 60.0) || ' seconds')")
}

const EMBEDDER_KEY: &str = "store.embedder";

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
    sweeper: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
    cache: SearchCache,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut s) = self.sweeper.lock() {
            if let Some((stop, handle)) = s.take() {
                drop(stop);
                let _ = handle.join();
            }
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
    /// # Errors
    /// - [`Error::InvalidArgument`] if `dims` is 0, a TTL or interval is
    ///   negative or not finite.
    /// - [`Error::DimensionMismatch`] if the embedder's `dims()` differs from
    ///   `config.index.dims`.
    /// - [`Error::EmbedderMismatch`] if the file's vectors were made by
    ///   another embedder (name or dims); use [`Db::reindex_store`].
    /// - database errors.
    pub fn store(&self, config: StoreConfig) -> Result<Store> {
        Store::open(self.clone(), config, false)
    }

    /// Like [`Db::store`], but instead of refusing a file whose vectors were
    /// made by another embedder, re-embeds every item with the configured one
    /// and records it.
    ///
    /// # Errors
    /// As [`Db::store`] (except the mismatch) and [`Store::reindex`].
    pub fn reindex_store(&self, config: StoreConfig) -> Result<Store> {
        let store = Store::open(self.clone(), config, true)?;
        store.reindex()?;
        Ok(store)
    }
}

/// Options of [`Store::put_with`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PutOptions {
    /// Which vectors to make.
    pub index: Index,
    /// The item's TTL.
    pub ttl: Ttl,
}

/// The TTL of a put.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Ttl {
    /// The store's `default_ttl` (none if not configured).
    #[default]
    Default,
    /// Never expires.
    Never,
    /// Expires this many minutes after the put (or the last read that
    /// refreshed it).
    Minutes(f64),
}

/// Options of [`Store::search`].
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOptions {
    /// Rank by similarity to this text (needs an index).
    pub query: Option<String>,
    /// A filter on the value in the [filter language](crate::filter).
    pub filter: Option<Value>,
    /// At most this many (default 10).
    pub limit: usize,
    /// Skip this many first.
    pub offset: usize,
    /// Refresh the TTL of returned items; `None` = the store's default.
    pub refresh_ttl: Option<bool>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions { query: None, filter: None, limit: 10, offset: 0, refresh_ttl: None }
    }
}

impl SearchOptions {
    /// Rank by similarity to `text`.
    pub fn query(mut self, text: impl Into<String>) -> Self {
        self.query = Some(text.into());
        self
    }

    /// Keep items whose value matches `filter`.
    pub fn filter(mut self, filter: Value) -> Self {
        self.filter = Some(filter);
        self
    }

    /// At most `n` results.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }

    /// Skip the first `n` results.
    pub fn offset(mut self, n: usize) -> Self {
        self.offset = n;
        self
    }
}

/// Options of [`Store::list_namespaces`].
#[derive(Clone, Debug, PartialEq)]
pub struct ListNamespacesOptions {
    /// Namespaces starting with these labels (`*` = any one label).
    pub prefix: Vec<String>,
    /// Namespaces ending with these labels (`*` = any one label).
    pub suffix: Vec<String>,
    /// Truncate to this many labels.
    pub max_depth: Option<usize>,
    /// At most this many (default 100).
    pub limit: usize,
    /// Skip this many first.
    pub offset: usize,
}

impl Default for ListNamespacesOptions {
    fn default() -> Self {
        ListNamespacesOptions { prefix: vec![], suffix: vec![], max_depth: None, limit: 100, offset: 0 }
    }
}

fn labels(ns: &[&str]) -> Vec<String> {
    ns.iter().map(|s| s.to_string()).collect()
}

fn check_ttl(minutes: f64) -> Result<()> {
    if !minutes.is_finite() || minutes < 0.0 {
        return Err(Error::InvalidArgument(format!(
            "a TTL must be a finite number of minutes >= 0, got {minutes}"
        )));
    }
    Ok(())
}

/// A put after validation and embedding, ready to write.
struct PreparedPut {
    prefix: String,
    key: String,
    value: Option<String>,
    ttl: Option<f64>,
    /// `(field_name, text)` to embed.
    texts: Vec<(String, String)>,
    vectors: Vec<(String, Vec<u8>)>,
}

impl Store {
    fn open(db: Db, config: StoreConfig, allow_mismatch: bool) -> Result<Store> {
        if let Some(ttl) = &config.ttl {
            if let Some(t) = ttl.default_ttl {
                check_ttl(t)?;
            }
            if let Some(i) = ttl.sweep_interval_minutes {
                if !i.is_finite() || i <= 0.0 {
                    return Err(Error::InvalidArgument(format!(
                        "sweep_interval_minutes must be a finite number > 0, got {i}"
                    )));
                }
            }
        }
        let mut fields = vec![];
        if let Some(index) = &config.index {
            if index.dims == 0 {
                return Err(Error::InvalidArgument("index dims must be > 0".into()));
            }
            if index.embedder.dims() != index.dims {
                return Err(Error::DimensionMismatch { expected: index.dims, got: index.embedder.dims() });
            }
            fields = configured_fields(&index.fields);
            let identity = format!("{}/{}", index.embedder.name(), index.dims);
            db.write(|tx| {
                let stored: Option<String> = tx
                    .query_row("SELECT value FROM agentstate_meta WHERE key = ?1", [EMBEDDER_KEY], |r| {
                        r.get(0)
                    })
                    .optional()?;
                match stored {
                    Some(s) if s == identity => Ok(()),
                    Some(s) if !allow_mismatch => {
                        Err(Error::EmbedderMismatch { stored: s, configured: identity.clone() })
                    }
                    _ => {
                        tx.execute(
                            "INSERT INTO agentstate_meta (key, value) VALUES (?1, ?2) \
                             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            [EMBEDDER_KEY, &identity],
                        )?;
                        Ok(())
                    }
                }
            })?;
        }
        let inner =
            Arc::new(Inner { db, config, fields, sweeper: Mutex::new(None), cache: SearchCache::default() });
        if let Some(minutes) = inner.config.ttl.as_ref().and_then(|t| t.sweep_interval_minutes) {
            let (stop, wait) = mpsc::channel::<()>();
            let db = inner.db.clone();
            let every = Duration::from_secs_f64(minutes * 60.0);
            let handle =
                std::thread::Builder::new().name("agentstate-ttl-sweeper".into()).spawn(move || loop {
                    match wait.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = sweep(&db);
                        }
                        _ => return,
                    }
                })?;
            if let Ok(mut s) = inner.sweeper.lock() {
                *s = Some((stop, handle));
            }
        }
        Ok(Store { inner })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// The item at (`namespace`, `key`), or `None` (also if it expired).
    /// Refreshes its TTL if the store refreshes on read.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; database and decoding errors.
    pub fn get(&self, namespace: &[&str], key: &str) -> Result<Option<Item>> {
        let op = GetOp { namespace: labels(namespace), key: key.into(), refresh_ttl: None };
        match self.batch(vec![Op::Get(op)])?.pop() {
            Some(OpResult::Item(item)) => Ok(item),
            _ => Ok(None),
        }
    }

    /// Stores `value` (a JSON object) at (`namespace`, `key`) with the
    /// store's default index fields and TTL. Replaces an existing item
    /// (keeping its `created_at`) and its vectors.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; [`Error::InvalidArgument`] if `value` is
    /// not an object or nests more than 127 levels of objects and arrays;
    /// embedder errors; database errors. Nothing is written on error.
    pub fn put(&self, namespace: &[&str], key: &str, value: Value) -> Result<()> {
        self.put_with(namespace, key, value, PutOptions::default())
    }

    /// [`put`](Self::put) with an explicit index choice and TTL.
    ///
    /// # Errors
    /// As [`put`](Self::put), and [`Error::InvalidArgument`] for a negative
    /// or non-finite TTL.
    pub fn put_with(&self, namespace: &[&str], key: &str, value: Value, options: PutOptions) -> Result<()> {
        let ttl = match options.ttl {
            Ttl::Default => self.inner.config.ttl.as_ref().and_then(|t| t.default_ttl),
            Ttl::Never => None,
            Ttl::Minutes(m) => Some(m),
        };
        let op = PutOp {
            namespace: labels(namespace),
            key: key.into(),
            value: Some(value),
            index: options.index,
            ttl,
        };
        self.batch(vec![Op::Put(op)]).map(|_| ())
    }

    /// Deletes the item (and its vectors). Deleting a missing item is a
    /// no-op.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; database errors.
    pub fn delete(&self, namespace: &[&str], key: &str) -> Result<()> {
        let op = PutOp {
            namespace: labels(namespace),
            key: key.into(),
            value: None,
            index: Index::Default,
            ttl: None,
        };
        self.batch(vec![Op::Put(op)]).map(|_| ())
    }

    /// Items under the namespace `prefix` (label-aligned), filtered, and
    /// ranked by similarity to `options.query` if the store has an index;
    /// otherwise newest first. See DESIGN.md decision 12 for the ordering of
    /// items without vectors.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`]; [`Error::InvalidFilter`]; embedder
    /// errors; [`Error::Corrupt`] if a stored vector has the wrong length;
    /// database errors.
    pub fn search(&self, prefix: &[&str], options: SearchOptions) -> Result<Vec<SearchItem>> {
        let op = SearchOp {
            namespace_prefix: labels(prefix),
            filter: options.filter,
            limit: options.limit,
            offset: options.offset,
            query: options.query,
            refresh_ttl: options.refresh_ttl,
        };
        match self.batch(vec![Op::Search(op)])?.pop() {
            Some(OpResult::Items(items)) => Ok(items),
            _ => Ok(vec![]),
        }
    }

    /// The namespaces holding (unexpired) items, in tuple order.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] for a malformed label; database errors.
    pub fn list_namespaces(&self, options: ListNamespacesOptions) -> Result<Vec<Vec<String>>> {
        let mut match_conditions = vec![];
        if !options.prefix.is_empty() {
            match_conditions.push(MatchCondition::prefix(options.prefix));
        }
        if !options.suffix.is_empty() {
            match_conditions.push(MatchCondition::suffix(options.suffix));
        }
        let op = ListNamespacesOp {
            match_conditions,
            max_depth: options.max_depth,
            limit: options.limit,
            offset: options.offset,
        };
        match self.batch(vec![Op::ListNamespaces(op)])?.pop() {
            Some(OpResult::Namespaces(n)) => Ok(n),
            _ => Ok(vec![]),
        }
    }

    /// Deletes every expired item now (with its vectors) and returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn sweep_expired(&self) -> Result<usize> {
        sweep(&self.inner.db)
    }

    /// Re-embeds every item with the configured embedder and fields,
    /// replacing all vectors, and records the embedder in the file. Returns
    /// the number of items. A store without an index removes all vectors.
    ///
    /// # Errors
    /// Embedder errors; database errors. All or nothing.
    pub fn reindex(&self) -> Result<usize> {
        let rows: Vec<(String, String, String)> = self.inner.db.read(|c| {
            Ok(c.prepare("SELECT prefix, key, CAST(value AS TEXT) FROM store")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?)
        })?;
        let mut all = Vec::with_capacity(rows.len());
        for (prefix, key, value) in rows {
            let parsed: Value = serde_json::from_str(&value)
                .map_err(|e| Error::corrupt(format!("item {prefix}/{key}: {e}")))?;
            let texts = self.texts_for(&parsed, &Index::Default);
            all.push(PreparedPut { prefix, key, value: None, ttl: None, texts, vectors: vec![] });
        }
        self.embed_puts(&mut all)?;
        self.inner.db.write(|tx| {
            tx.execute("DELETE FROM store_vectors", [])?;
            for p in &all {
                insert_vectors(tx, p)?;
            }
            // Vector writes alone fire no generation trigger.
            tx.execute("UPDATE agentstate_store_gen SET gen = gen + 1", [])?;
            Ok(())
        })?;
        Ok(all.len())
    }

    /// Runs `ops` as one transaction and returns one result per op, in order
    /// (DESIGN.md decision 15): every read sees the state before the batch;
    /// puts to the same (namespace, key) collapse to the last one.
    ///
    /// # Errors
    /// Any op's validation error (nothing runs then), embedder errors, and
    /// database errors (everything rolls back).
    pub fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        // 1. Validate everything and do the slow work (embedding) before
        //    taking any lock.
        let mut filters: HashMap<usize, Option<Filter>> = HashMap::new();
        let mut queries: HashMap<usize, Vec<f32>> = HashMap::new();
        let mut puts: Vec<PreparedPut> = vec![];
        let mut put_slot: HashMap<(String, String), usize> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Get(g) => {
                    validate_namespace(&g.namespace)?;
                }
                Op::Search(s) => {
                    validate_labels(&s.namespace_prefix)?;
                    filters.insert(i, s.filter.as_ref().map(Filter::parse).transpose()?);
                    if let (Some(q), Some(index)) = (&s.query, &self.inner.config.index) {
                        // Checked like documents: the right length, finite.
                        let v = embed_query_checked(index.embedder.as_ref(), q)?;
                        queries.insert(i, v);
                    }
                }
                Op::ListNamespaces(l) => {
                    for c in &l.match_conditions {
                        c.validate()?;
                    }
                }
                Op::Put(p) => {
                    validate_namespace(&p.namespace)?;
                    let prefix = namespace::encode_prefix(&p.namespace);
                    let prepared = match &p.value {
                        None => PreparedPut {
                            prefix,
                            key: p.key.clone(),
                            value: None,
                            ttl: None,
                            texts: vec![],
                            vectors: vec![],
                        },
                        Some(v) => {
                            if !v.is_object() {
                                return Err(Error::InvalidArgument(format!(
                                    "a store value must be a JSON object, got {}",
                                    kind(v)
                                )));
                            }
                            if too_deep(v, MAX_STORED_DEPTH) {
                                return Err(Error::InvalidArgument(format!(
                                    "a store value may nest at most {MAX_STORED_DEPTH} levels of objects \
                                     and arrays (deeper JSON could not be read back)"
                                )));
                            }
                            if let Some(t) = p.ttl {
                                check_ttl(t)?;
                            }
                            PreparedPut {
                                prefix,
                                key: p.key.clone(),
                                value: Some(serde_json::to_string(v)?),
                                ttl: p.ttl,
                                texts: self.texts_for(v, &p.index),
                                vectors: vec![],
                            }
                        }
                    };
                    let slot = (prepared.prefix.clone(), prepared.key.clone());
                    match put_slot.get(&slot) {
                        Some(&at) => puts[at] = prepared,
                        None => {
                            put_slot.insert(slot, puts.len());
                            puts.push(prepared);
                        }
                    }
                }
            }
        }
        // Embed the surviving puts in one call.
        self.embed_puts(&mut puts)?;

        // 2. Reads against the state before the batch, collecting the items
        //    whose TTL a read refreshes; then refreshes and puts. A batch
        //    without puts reads in a snapshot and takes the write lock only
        //    if something needs refreshing.
        let run = |conn: &Connection, refresh: &mut Vec<(String, String)>| -> Result<Vec<OpResult>> {
            let mut out = Vec::with_capacity(ops.len());
            for (i, op) in ops.iter().enumerate() {
                out.push(match op {
                    Op::Get(g) => OpResult::Item(self.do_get(conn, g, refresh)?),
                    Op::Search(s) => OpResult::Items(self.do_search(
                        conn,
                        s,
                        filters.get(&i).and_then(Option::as_ref),
                        queries.get(&i).map(Vec::as_slice),
                        refresh,
                    )?),
                    Op::ListNamespaces(l) => OpResult::Namespaces(do_list(conn, l)?),
                    Op::Put(_) => OpResult::Done,
                });
            }
            Ok(out)
        };
        if !puts.is_empty() {
            return self.inner.db.write(|tx| {
                let mut refresh = vec![];
                let out = run(tx, &mut refresh)?;
                refresh_ttls(tx, &refresh)?;
                for p in &puts {
                    write_put(tx, p)?;
                }
                Ok(out)
            });
        }
        let mut refresh = vec![];
        // A lone get or list_namespaces is one SELECT, atomic by itself; only
        // multi-statement reads need an explicit snapshot.
        let single_statement = matches!(ops.as_slice(), [Op::Get(_)] | [Op::ListNamespaces(_)]);
        let out = if single_statement {
            self.inner.db.read(|conn| run(conn, &mut refresh))?
        } else {
            self.inner.db.snapshot(|tx| run(tx, &mut refresh))?
        };
        if !refresh.is_empty() {
            self.inner.db.write(|tx| refresh_ttls(tx, &refresh))?;
        }
        Ok(out)
    }

    fn refresh(&self, flag: Option<bool>) -> bool {
        flag.unwrap_or_else(|| self.inner.config.ttl.as_ref().map(|t| t.refresh_on_read).unwrap_or(true))
    }

    fn texts_for(&self, value: &Value, index: &Index) -> Vec<(String, String)> {
        if self.inner.config.index.is_none() {
            return vec![];
        }
        match index {
            Index::Off => vec![],
            Index::Default => field_texts(value, &self.inner.fields),
            Index::Fields(paths) => field_texts(value, &per_put_fields(paths)),
        }
    }

    fn embed_puts(&self, puts: &mut [PreparedPut]) -> Result<()> {
        let Some(cfg) = &self.inner.config.index else { return Ok(()) };
        let mut texts: Vec<String> = vec![];
        let mut owners: Vec<(usize, String)> = vec![];
        for (i, p) in puts.iter_mut().enumerate() {
            for (name, text) in std::mem::take(&mut p.texts) {
                owners.push((i, name));
                texts.push(text);
            }
        }
        if texts.is_empty() {
            return Ok(());
        }
        let vecs = embed_documents_checked(cfg.embedder.as_ref(), &texts)?;
        for ((i, name), v) in owners.into_iter().zip(vecs) {
            puts[i].vectors.push((name, encode_f32(&v)));
        }
        Ok(())
    }

    fn do_get(
        &self,
        conn: &Connection,
        g: &GetOp,
        refresh: &mut Vec<(String, String)>,
    ) -> Result<Option<Item>> {
        let prefix = namespace::encode_prefix(&g.namespace);
        let row = conn
            .prepare_cached(&format!(
                "SELECT CAST(value AS TEXT), created_at, updated_at, ttl_minutes IS NOT NULL FROM store s \
                 WHERE prefix = ?1 AND key = ?2 AND {}",
                alive("s")
            ))?
            .query_row([&prefix, &g.key], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get::<_, bool>(3)?))
            })
            .optional()?;
        let Some((v, c, u, has_ttl)) = row else { return Ok(None) };
        if has_ttl && self.refresh(g.refresh_ttl) {
            refresh.push((prefix, g.key.clone()));
        }
        item(g.namespace.clone(), g.key.clone(), &v, c, u).map(Some)
    }

    /// Search through the in-memory cache (see `cache`): the prefixes under
    /// the namespace prefix, live expiry, the Rust filter evaluator, exact
    /// max-pooled cosine.
    fn do_search(
        &self,
        conn: &Connection,
        s: &SearchOp,
        filter: Option<&Filter>,
        query: Option<&[f32]>,
        refresh: &mut Vec<(String, String)>,
    ) -> Result<Vec<SearchItem>> {
        if s.limit == 0 {
            return Ok(vec![]);
        }
        let dims = self.inner.config.index.as_ref().map(|i| i.dims);
        let blocks = self.inner.cache.blocks(conn, &s.namespace_prefix, dims)?;
        let expired = expired_items(conn)?;
        // A zero query has no direction: nothing gets a score.
        let unit = query
            .map(<[f32]>::to_vec)
            .filter(|q| q.iter().any(|x| *x != 0.0))
            .and_then(|mut q| normalise(&mut q).then_some(q));
        let hits = cache::search(&blocks, &expired, filter, unit.as_deref(), s.limit, s.offset);
        let wants_refresh = self.refresh(s.refresh_ttl);
        let mut out = Vec::with_capacity(hits.len());
        for (prefix, it, score) in hits {
            if wants_refresh && it.has_ttl {
                refresh.push((prefix.to_string(), it.key.clone()));
            }
            out.push(SearchItem {
                item: Item {
                    namespace: namespace::decode_prefix(prefix),
                    key: it.key.clone(),
                    value: it.value.clone(),
                    created_at: it.created_at.clone(),
                    updated_at: it.updated_at.clone(),
                },
                score,
            });
        }
        Ok(out)
    }
}

/// The (prefix, key) of every expired, unswept item: found through the
/// partial index on `expires_at`, so it costs what has expired, not what the
/// namespace holds. (Filtering by prefix here would steer SQLite to the
/// prefix index and a scan of the namespace.)
fn expired_items(conn: &Connection) -> Result<HashSet<(String, String)>> {
    let rows = conn
        .prepare_cached(&format!(
            "SELECT prefix, key FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"
        ))?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Pushes the expiry of these (unexpired, TTL'd) items forward by their TTL.
fn refresh_ttls(conn: &Connection, items: &[(String, String)]) -> Result<()> {
    let mut up = conn.prepare_cached(&format!(
        "UPDATE store SET expires_at = {} WHERE prefix = ?1 AND key = ?2 AND ttl_minutes IS NOT NULL AND {}",
        expiry("ttl_minutes"),
        alive("store")
    ))?;
    for (p, k) in items {
        up.execute([p, k])?;
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn item(
    namespace: Vec<String>,
    key: String,
    value: &str,
    created_at: String,
    updated_at: String,
) -> Result<Item> {
    let value: Value = serde_json::from_str(value).map_err(|e| {
        Error::corrupt(format!("value of item {}/{key} is not JSON: {e}", namespace.join(".")))
    })?;
    Ok(Item { namespace, key, value, created_at, updated_at })
}

fn write_put(conn: &Connection, p: &PreparedPut) -> Result<()> {
    match &p.value {
        None => {
            conn.prepare_cached("DELETE FROM store WHERE prefix = ?1 AND key = ?2")?
                .execute([&p.prefix, &p.key])?;
            // Files written by Python without foreign keys may hold orphans.
            conn.prepare_cached("DELETE FROM store_vectors WHERE prefix = ?1 AND key = ?2")?
                .execute([&p.prefix, &p.key])?;
        }
        Some(value) => {
            conn.prepare_cached(&format!(
                "INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) \
                 VALUES (?1, ?2, ?3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, \
                         CASE WHEN ?4 IS NULL THEN NULL ELSE {} END, ?4) \
                 ON CONFLICT (prefix, key) DO UPDATE SET \
                   value = excluded.value, updated_at = excluded.updated_at, \
                   created_at = CASE WHEN {} THEN store.created_at ELSE excluded.created_at END, \
                   expires_at = excluded.expires_at, ttl_minutes = excluded.ttl_minutes",
                expiry("?4"),
                alive("store")
            ))?
            .execute(params![p.prefix, p.key, value, p.ttl])?;
            conn.prepare_cached("DELETE FROM store_vectors WHERE prefix = ?1 AND key = ?2")?
                .execute([&p.prefix, &p.key])?;
            insert_vectors(conn, p)?;
        }
    }
    Ok(())
}

fn insert_vectors(conn: &Connection, p: &PreparedPut) -> Result<()> {
    let mut ins = conn.prepare_cached(
        "INSERT OR REPLACE INTO store_vectors (prefix, key, field_name, embedding) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (field, blob) in &p.vectors {
        ins.execute(params![p.prefix, p.key, field, blob])?;
    }
    Ok(())
}

fn do_list(conn: &Connection, l: &ListNamespacesOp) -> Result<Vec<Vec<String>>> {
    if l.limit == 0 {
        return Ok(vec![]);
    }
    // Push one literal prefix down to the index; match the rest on the
    // encoded text, sort in tuple order, and decode only the page.
    let mut sql = format!(
        "SELECT DISTINCT prefix FROM store s INDEXED BY agentstate_store_prefix_expires WHERE {}",
        alive("s")
    );
    let mut args: Vec<String> = vec![];
    if let Some(lit) = l.match_conditions.iter().find_map(MatchCondition::literal_prefix) {
        if let Some(PrefixGlob { exact, glob }) = prefix_glob(&lit) {
            sql.push_str(" AND ");
            sql.push_str(&PrefixGlob::sql("s.prefix"));
            args.push(exact);
            args.push(glob);
        }
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(args.iter()))?;
    let mut found: Vec<String> = vec![];
    while let Some(r) = rows.next()? {
        let p = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
        if l.match_conditions.iter().all(|c| c.matches_encoded(p)) {
            let cut = match l.max_depth {
                Some(d) => p.match_indices('.').nth(d.wrapping_sub(1)).map_or(p, |(i, _)| &p[..i]),
                None => p,
            };
            let cut = if l.max_depth == Some(0) { "" } else { cut };
            if found.last().map(String::as_str) != Some(cut) {
                found.push(cut.to_string());
            }
        }
    }
    // SQLite returned byte order, which is tuple order unless a label holds a
    // byte that sorts below the '.' separator.
    if found.iter().any(|p| p.bytes().any(|b| b < b'.')) {
        found.sort_by(|a, b| namespace::cmp_encoded(a, b));
    }
    found.dedup();
    Ok(found
        .iter()
        .skip(l.offset)
        .take(l.limit)
        .map(|p| if p.is_empty() { vec![] } else { namespace::decode_prefix(p) })
        .collect())
}

fn sweep(db: &Db) -> Result<usize> {
    db.write(|tx| {
        let n = tx
            .execute(&format!("DELETE FROM store WHERE expires_at IS NOT NULL AND expires_at < {NOW}"), [])?;
        // Vectors go by cascade; orphans left by Python writers go too.
        tx.execute(
            "DELETE FROM store_vectors WHERE NOT EXISTS \
             (SELECT 1 FROM store s WHERE s.prefix = store_vectors.prefix AND s.key = store_vectors.key)",
            [],
        )?;
        Ok(n)
    })
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Store>();
    let _ = decode_f32;
    let _: Option<&dyn Embedder> = None;
}
