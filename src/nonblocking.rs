//! An async facade for tokio applications (feature `tokio`).
//!
//! SQLite calls block: a commit waits for the disk, a writer may wait for
//! another process's lock. On a tokio runtime that would stall every task
//! sharing the thread. [`AsyncCheckpointer`] and [`AsyncStore`] run each call
//! on tokio's blocking pool (`spawn_blocking`) and await it, so the runtime's
//! worker threads never wait for SQLite. They are cheap to clone, like the
//! handles they wrap, and each method does exactly what the blocking method
//! of the same name does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agentstate::Result<()> {
//! use agentstate::{CheckpointConfig, Db};
//! use serde_json::json;
//!
//! let db = Db::open_in_memory()?;
//! let saver = db.checkpointer().into_async();
//! let first = saver.start(CheckpointConfig::thread("t"), |s| s.set("topic", json!("rust"))).await?;
//! let next = saver.step(first, |s| s.append("messages", [json!("hi")])).await?;
//! let latest = saver.get_tuple(CheckpointConfig::thread("t")).await?.unwrap();
//! assert_eq!(latest.checkpoint.id, next.checkpoint.id);
//!
//! let store = db.store(Default::default())?.into_async();
//! store.put(&["users", "alice"], "prefs", json!({"tea": true})).await?;
//! assert!(store.get(&["users", "alice"], "prefs").await?.is_some());
//! # Ok(()) }
//! ```
//!
//! A panic inside a call is resumed in the awaiting task, as it would have
//! surfaced from the blocking call. If the runtime shuts down before a call
//! starts, the call returns [`Error::Io`] (of kind `Other`) and did nothing.

use serde_json::Value;

use crate::checkpoint::{ChannelVersions, PruneStrategy, Retention};
use crate::error::{Error, Result};
use crate::store::{Get, Item, ListNamespaces, Namespace, Op, OpResult, Put, Search, SearchItem, Store};
use crate::{Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, ListQuery, Metadata, Step};

/// Runs `f` on tokio's blocking pool and awaits it.
pub(crate) async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => {
            Err(Error::Io(std::io::Error::other("the tokio runtime shut down before the call started")))
        }
    }
}

fn labels<S: AsRef<str>>(namespace: &[S]) -> Vec<String> {
    namespace.iter().map(|s| s.as_ref().to_owned()).collect()
}

impl Checkpointer {
    /// This checkpointer behind an async facade (see [`crate::nonblocking`]).
    pub fn into_async(self) -> AsyncCheckpointer {
        AsyncCheckpointer { saver: self }
    }
}

impl Store {
    /// This Store behind an async facade (see [`crate::nonblocking`]).
    pub fn into_async(self) -> AsyncStore {
        AsyncStore { store: self }
    }
}

/// A [`Checkpointer`] whose calls never block the async runtime.
#[derive(Clone, Debug)]
pub struct AsyncCheckpointer {
    saver: Checkpointer,
}

impl AsyncCheckpointer {
    /// The blocking checkpointer underneath.
    pub fn blocking(&self) -> &Checkpointer {
        &self.saver
    }

    /// [`Checkpointer::start`] then [`Step::commit`]: the first checkpoint of
    /// `config`'s thread, made by `build` from an empty step.
    ///
    /// # Errors
    /// As [`Step::commit`].
    pub async fn start(
        &self,
        config: CheckpointConfig,
        build: impl for<'a> FnOnce(Step<'a>) -> Step<'a> + Send + 'static,
    ) -> Result<CheckpointTuple> {
        let saver = self.saver.clone();
        off_thread(move || build(saver.start(&config)).commit()).await
    }

    /// [`Checkpointer::step`] then [`Step::commit`]: the checkpoint after
    /// `parent`, made by `build`.
    ///
    /// # Errors
    /// As [`Step::commit`] ([`Error::Conflict`] if `parent` is no longer the
    /// head of its thread, unless `build` forks).
    pub async fn step(
        &self,
        parent: CheckpointTuple,
        build: impl for<'a> FnOnce(Step<'a>) -> Step<'a> + Send + 'static,
    ) -> Result<CheckpointTuple> {
        let saver = self.saver.clone();
        off_thread(move || build(saver.step(&parent)).commit()).await
    }

    /// [`Checkpointer::get_tuple`].
    ///
    /// # Errors
    /// As [`Checkpointer::get_tuple`].
    pub async fn get_tuple(&self, config: CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        let saver = self.saver.clone();
        off_thread(move || saver.get_tuple(&config)).await
    }

    /// [`Checkpointer::list`].
    ///
    /// # Errors
    /// As [`Checkpointer::list`].
    pub async fn list(&self, query: ListQuery) -> Result<Vec<CheckpointTuple>> {
        let saver = self.saver.clone();
        off_thread(move || saver.list(&query)).await
    }

    /// [`Checkpointer::put`].
    ///
    /// # Errors
    /// As [`Checkpointer::put`].
    pub async fn put(
        &self,
        config: CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: Metadata,
        new_versions: ChannelVersions,
    ) -> Result<CheckpointConfig> {
        let saver = self.saver.clone();
        off_thread(move || saver.put(&config, &checkpoint, &metadata, &new_versions)).await
    }

    /// [`Checkpointer::put_writes`].
    ///
    /// # Errors
    /// As [`Checkpointer::put_writes`].
    pub async fn put_writes(
        &self,
        config: CheckpointConfig,
        writes: Vec<(String, Value)>,
        task_id: String,
        task_path: String,
    ) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.put_writes(&config, &writes, &task_id, &task_path)).await
    }

    /// [`Checkpointer::delete_thread`].
    ///
    /// # Errors
    /// As [`Checkpointer::delete_thread`].
    pub async fn delete_thread(&self, thread_id: String) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.delete_thread(&thread_id)).await
    }

    /// [`Checkpointer::copy_thread`].
    ///
    /// # Errors
    /// As [`Checkpointer::copy_thread`].
    pub async fn copy_thread(&self, src: String, dst: String) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.copy_thread(&src, &dst)).await
    }

    /// [`Checkpointer::prune`].
    ///
    /// # Errors
    /// As [`Checkpointer::prune`].
    pub async fn prune(&self, thread_ids: Vec<String>, strategy: PruneStrategy) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.prune(&thread_ids, strategy)).await
    }

    /// [`Checkpointer::delete_for_runs`].
    ///
    /// # Errors
    /// As [`Checkpointer::delete_for_runs`].
    pub async fn delete_for_runs(&self, run_ids: Vec<String>) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.delete_for_runs(&run_ids)).await
    }

    /// [`Checkpointer::apply_retention`].
    ///
    /// # Errors
    /// As [`Checkpointer::apply_retention`].
    pub async fn apply_retention(&self, policy: Retention) -> Result<usize> {
        let saver = self.saver.clone();
        off_thread(move || saver.apply_retention(&policy)).await
    }

    /// [`Db::flush`](crate::Db::flush) of the checkpointer's database.
    ///
    /// # Errors
    /// As [`Db::flush`](crate::Db::flush).
    pub async fn flush(&self) -> Result<()> {
        let saver = self.saver.clone();
        off_thread(move || saver.db().flush()).await
    }

    /// [`Db::flush_thread`](crate::Db::flush_thread) of the checkpointer's
    /// database.
    ///
    /// # Errors
    /// As [`Db::flush_thread`](crate::Db::flush_thread).
    pub async fn flush_thread(&self, thread_id: &str) -> Result<()> {
        let (saver, thread_id) = (self.saver.clone(), thread_id.to_string());
        off_thread(move || saver.db().flush_thread(&thread_id)).await
    }
}

/// A [`Store`] whose calls never block the async runtime.
#[derive(Clone, Debug)]
pub struct AsyncStore {
    store: Store,
}

impl AsyncStore {
    /// The blocking Store underneath.
    pub fn blocking(&self) -> &Store {
        &self.store
    }

    /// [`Store::get`].
    ///
    /// # Errors
    /// As [`Store::get`].
    pub async fn get<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<Option<Item>> {
        self.get_with(Get::new(namespace, key)).await
    }

    /// [`Store::get_with`].
    ///
    /// # Errors
    /// As [`Store::get_with`].
    pub async fn get_with(&self, get: Get) -> Result<Option<Item>> {
        let store = self.store.clone();
        off_thread(move || store.get_with(get)).await
    }

    /// [`Store::put`].
    ///
    /// # Errors
    /// As [`Store::put`].
    pub async fn put<S: AsRef<str>>(&self, namespace: &[S], key: &str, value: Value) -> Result<()> {
        let (store, namespace, key) = (self.store.clone(), labels(namespace), key.to_owned());
        off_thread(move || store.put(&namespace, &key, value)).await
    }

    /// [`Store::put_with`].
    ///
    /// # Errors
    /// As [`Store::put_with`].
    pub async fn put_with(&self, put: Put) -> Result<()> {
        let store = self.store.clone();
        off_thread(move || store.put_with(put)).await
    }

    /// [`Store::delete`].
    ///
    /// # Errors
    /// As [`Store::delete`].
    pub async fn delete<S: AsRef<str>>(&self, namespace: &[S], key: &str) -> Result<()> {
        let (store, namespace, key) = (self.store.clone(), labels(namespace), key.to_owned());
        off_thread(move || store.delete(&namespace, &key)).await
    }

    /// [`Store::search`].
    ///
    /// # Errors
    /// As [`Store::search`].
    pub async fn search(&self, search: Search) -> Result<Vec<SearchItem>> {
        let store = self.store.clone();
        off_thread(move || store.search(search)).await
    }

    /// [`Store::list_namespaces`].
    ///
    /// # Errors
    /// As [`Store::list_namespaces`].
    pub async fn list_namespaces(&self, list: ListNamespaces) -> Result<Vec<Namespace>> {
        let store = self.store.clone();
        off_thread(move || store.list_namespaces(list)).await
    }

    /// [`Store::batch`].
    ///
    /// # Errors
    /// As [`Store::batch`].
    pub async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let store = self.store.clone();
        off_thread(move || store.batch(ops)).await
    }

    /// [`Store::sweep_expired`].
    ///
    /// # Errors
    /// As [`Store::sweep_expired`].
    pub async fn sweep_expired(&self) -> Result<usize> {
        let store = self.store.clone();
        off_thread(move || store.sweep_expired()).await
    }
}
