//! Short-term memory: a thread's checkpoints, LangGraph-style.
//!
//! The [`Checkpointer`] follows LangGraph's `BaseCheckpointSaver` contract
//! with the normalised storage of LangGraph's Postgres saver (see
//! `docs/design.md`, "Checkpoint storage"):
//!
//! - `checkpoints` holds each checkpoint's JSON with only primitive channel
//!   values inline (null, bool, number, string), plus its metadata;
//! - `checkpoint_blobs` holds every other channel value once per
//!   `(thread, namespace, channel, version)`; consecutive checkpoints share the
//!   blobs of channels that did not change, and a version once written is
//!   never overwritten;
//! - `checkpoint_writes` holds pending writes, one row per `(checkpoint, task)`
//!   (its writes packed by `idx`).
//!
//! Two ways to write:
//!
//! - [`Checkpointer::step`] (and [`Checkpointer::start`]): say what changed;
//!   the crate assigns versions, ids and `updated_channels`, refuses to
//!   continue from a checkpoint that is no longer the head of its thread
//!   ([`Error::Conflict`]), and returns the new checkpoint without reading it
//!   back. This is the API to build on.
//! - [`Checkpointer::put`]: LangGraph's shape, for compatibility. It refuses
//!   what would lose data (a changed channel missing from `new_versions`, a
//!   version reused for another value) with typed errors.
//!
//! Every call is one transaction: a checkpoint is never visible without its
//! blobs. Values read back are [`ChannelValue`]s, decoded once and shared.

mod cache;
mod chain;
pub(crate) mod compact;
mod deletions;
mod delta;
mod encoded;
mod exact;
pub(crate) mod id;
mod job;
mod list;
mod maintain;
pub(crate) mod packed;
mod pending;
mod queued;
mod read;
mod retention;
pub(crate) mod row;
mod step;
mod types;
mod value;
mod write;

use std::sync::Arc;

use serde_json::{Map, Value};

pub use encoded::{EncodedTuple, EncodedWrite, TypedBytes};
pub(crate) use exact::ExactWrite;
pub(crate) use id::uuid6_after;
pub use id::{next_version, uuid6};
pub use list::ListIter;
pub(crate) use queued::QueuedHeads;
pub use retention::Retention;
pub use step::Step;
pub use types::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, ListQuery, Metadata,
    PendingWrite, PruneStrategy,
};
pub use value::{ChannelValue, ListRef};

use crate::codec::{JsonPlusSerializer, Serializer};
use crate::db::Db;
use crate::error::{Error, Result};

/// The special channels and their fixed write indexes (LangGraph's
/// `WRITES_IDX_MAP`).
const WRITES_IDX_MAP: [(&str, i64); 4] =
    [("__error__", -1), ("__scheduled__", -2), ("__interrupt__", -3), ("__resume__", -4)];

/// Metadata keys never copied from the config into the metadata.
const EXCLUDED_METADATA_KEYS: [&str; 9] = [
    "thread_id",
    "checkpoint_id",
    "checkpoint_ns",
    "checkpoint_map",
    "langgraph_step",
    "langgraph_node",
    "langgraph_triggers",
    "langgraph_path",
    "langgraph_checkpoint_ns",
];

fn special_idx(channel: &str) -> Option<i64> {
    WRITES_IDX_MAP.iter().find(|(c, _)| *c == channel).map(|(_, i)| *i)
}

/// A handle on the checkpoint tables of a [`Db`]. Cheap to clone; `Send +
/// Sync`. Clones share a cache of decoded channel values.
#[derive(Clone)]
pub struct Checkpointer {
    db: Db,
    serde: Arc<dyn Serializer>,
    bases: Arc<delta::BaseCache>,
    values: Arc<cache::ValueCache>,
    /// Assembled stored bytes, for the reads of encoded values.
    /// Where the cached values stored as deltas start their delta.
    starts: Arc<cache::StartCache>,
    encoded: Arc<cache::BytesCache>,
    tuples: Arc<cache::TupleCache>,
    /// Checkpoints assembled by reads, shared by the tuples that hold them.
    checkpoints: Arc<cache::CheckpointCache>,
    shared_writes: Arc<cache::SharedWriteCache>,
    encoded_tuples: Arc<cache::TupleCache<EncodedTuple>>,
    /// The file's count of deletions the caches above are current with.
    seen: Arc<deletions::Seen>,
    retention: Option<Arc<Retention>>,
    /// `put_encoded` keeps a stored version's value instead of comparing
    /// bytes (see [`Checkpointer::with_unstable_encoding`]).
    unstable_encoding: bool,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").field("db", &self.db).finish_non_exhaustive()
    }
}

impl Db {
    /// The checkpointer of this database, with LangGraph's serializer.
    pub fn checkpointer(&self) -> Checkpointer {
        Checkpointer {
            db: self.for_checkpointer(),
            serde: Arc::new(JsonPlusSerializer),
            bases: Arc::default(),
            values: Arc::new(cache::ValueCache::new(cache::DEFAULT_BUDGET)),
            starts: Arc::new(cache::StartCache::new(cache::DEFAULT_BUDGET)),
            encoded: Arc::new(cache::BytesCache::new(cache::DEFAULT_BUDGET)),
            tuples: Arc::default(),
            checkpoints: Arc::new(cache::CheckpointCache::new(cache::DEFAULT_BUDGET / 4)),
            shared_writes: Arc::new(cache::SharedWriteCache::new(cache::DEFAULT_BUDGET / 4)),
            encoded_tuples: Arc::default(),
            seen: Arc::default(),
            retention: None,
            unstable_encoding: false,
        }
    }
}

impl Checkpointer {
    /// The same checkpointer with another serializer for channel values and
    /// writes (for example an encrypting wrapper).
    #[must_use]
    pub fn with_serializer(mut self, serializer: impl Serializer) -> Checkpointer {
        self.serde = Arc::new(serializer);
        self.bases = Arc::default();
        self.values = Arc::new(cache::ValueCache::new(self.values.budget()));
        self.tuples = Arc::default();
        self.checkpoints = Arc::new(cache::CheckpointCache::new(self.values.budget() / 4));
        self.shared_writes = Arc::new(cache::SharedWriteCache::new(self.values.budget() / 4));
        // Every cache anew: what they hold is current with `seen`.
        self.starts = Arc::new(cache::StartCache::new(self.values.budget()));
        self.encoded = Arc::new(cache::BytesCache::new(self.values.budget()));
        self.encoded_tuples = Arc::default();
        self.seen = Arc::default();
        self
    }

    /// The same checkpointer with a cache of decoded channel values of about
    /// `bytes` (counted as the encoded size of the values; default 64 MiB;
    /// 0 turns it off). Values are immutable per version, so the cache only
    /// saves decoding. A version deleted (a thread deleted or pruned,
    /// history trimmed) may be stored again with another value by a caller
    /// that makes its own versions, such as plain integers: a delete or
    /// prune through this checkpointer, or a clone of it, empties its
    /// caches of that thread, and any deletion by anyone else (another
    /// checkpointer, `Db` or process) is counted in the file and empties
    /// them before the next read or write uses them; history this
    /// checkpointer's own retention trims is forgotten as it is trimmed. A
    /// read that runs beside such a deletion on a snapshot from before it
    /// caches nothing. The reads of encoded values
    /// ([`get_tuple_encoded`](Self::get_tuple_encoded)) keep the bytes they
    /// reassemble in a second cache of the same size.
    ///
    /// The checkpointer also remembers its last few hundred
    /// [`get_tuple`](Self::get_tuple) (and `get_tuple_encoded`) answers and gives one again, without
    /// a query, while the file has not changed since: no write through this
    /// `Db` and no commit by any other connection or process (SQLite's
    /// `PRAGMA data_version`, asked once per call).
    ///
    /// And it keeps the checkpoints its reads assembled, in a quarter of the
    /// budget (the stored row's size plus the values only that checkpoint
    /// holds): reading a stored checkpoint again, by `get_tuple`, `list` or
    /// `list_iter`, hands out the same [`Arc<Checkpoint>`] and
    /// `Arc<Metadata>` instead of decoding its row again. An entry serves
    /// only a row equal to the one it was built from, so a checkpoint that
    /// was deleted and written again under its id, by anyone, is read anew.
    /// Pending writes can be added later, so their rows are read each time;
    /// the same `Arc<[PendingWrite]>` is handed out again while those rows
    /// are as they were when it was decoded.
    ///
    /// `0` turns all of these off.
    #[must_use]
    pub fn with_value_cache(mut self, bytes: usize) -> Checkpointer {
        self.values = Arc::new(cache::ValueCache::new(bytes));
        self.starts = Arc::new(cache::StartCache::new(bytes));
        self.encoded = Arc::new(cache::BytesCache::new(bytes));
        self.tuples = Arc::default();
        self.checkpoints = Arc::new(cache::CheckpointCache::new(bytes / 4));
        self.shared_writes = Arc::new(cache::SharedWriteCache::new(bytes / 4));
        self.encoded_tuples = Arc::default();
        self.seen = Arc::default();
        self
    }

    /// The same checkpointer, trimming history by `policy` as it writes: once
    /// a (thread, namespace) holds a few checkpoints more than the policy
    /// allows, the write that notices removes the surplus (with their writes
    /// and the blobs nothing kept needs) in the same transaction.
    #[must_use]
    pub fn with_retention(mut self, policy: Retention) -> Checkpointer {
        self.retention = Some(Arc::new(policy));
        self
    }

    /// The same checkpointer, for values encoded by a serializer that may
    /// give one value different bytes each time (encryption with a random
    /// nonce, unordered collections): [`put_encoded`](Self::put_encoded) then
    /// keeps the value first stored for a (channel, version) when it is put
    /// again, as LangGraph's Postgres saver does, instead of comparing bytes
    /// and refusing a difference with [`Error::Conflict`]. The price: a
    /// version reused for another value is no longer detected. Decoded
    /// writes (`put`, `step`) are not affected.
    #[must_use]
    pub fn with_unstable_encoding(mut self) -> Checkpointer {
        self.unstable_encoding = true;
        self
    }

    /// The database this checkpointer writes to.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The version after `current` in LangGraph's string format; see
    /// [`next_version`].
    pub fn get_next_version(&self, current: Option<&ChannelVersion>) -> ChannelVersion {
        next_version(current)
    }

    /// Runs `f`, which may delete blob rows, in a write transaction: the
    /// caches are synced first and take the count it leaves as current;
    /// if the transaction fails, no count is known (the next use empties
    /// the caches). `trims`: `f` only trims history (see
    /// [`ThreadCaches::deleted`]).
    fn deleting<T>(&self, trims: bool, mut f: impl FnMut(&rusqlite::Connection) -> Result<T>) -> Result<T> {
        let caches = self.caches();
        self.db
            .write(|tx| {
                let since = caches.sync_write(tx)?;
                let out = f(tx).and_then(|out| caches.deleted(tx, since, trims).map(|_| out));
                if out.is_err() {
                    // Rolled back: the count it made is never committed.
                    // Settled while the transaction still holds the write
                    // lock, so that no other deletion commits in between.
                    // (A failed commit leaves it to the next write.)
                    caches.seen.settle(since);
                }
                out
            })
            .inspect_err(|_| caches.seen.unknown())
    }

    /// Forgets cached state of `thread` (its rows are being deleted).
    fn forget_thread(&self, thread: &str) {
        self.caches().forget_thread(thread);
    }

    /// The caches keyed by thread, shared with this checkpointer's clones.
    fn caches(&self) -> ThreadCaches {
        ThreadCaches {
            bases: self.bases.clone(),
            values: self.values.clone(),
            starts: self.starts.clone(),
            encoded: self.encoded.clone(),
            checkpoints: self.checkpoints.clone(),
            shared_writes: self.shared_writes.clone(),
            seen: self.seen.clone(),
        }
    }
}

/// A checkpointer's caches keyed by thread, without its `Db`: a job queued
/// behind the caller holds them to forget what it cached if it fails (a
/// `Db` held there would keep the committer alive from its own queue).
struct ThreadCaches {
    bases: Arc<delta::BaseCache>,
    values: Arc<cache::ValueCache>,
    starts: Arc<cache::StartCache>,
    encoded: Arc<cache::BytesCache>,
    checkpoints: Arc<cache::CheckpointCache>,
    shared_writes: Arc<cache::SharedWriteCache>,
    seen: Arc<deletions::Seen>,
}

impl ThreadCaches {
    /// Inside a transaction, before the caches are used: empties them if
    /// blobs were deleted since they were last known current (by someone
    /// else: see `deletions`). The count read.
    fn sync(&self, tx: &rusqlite::Connection) -> Result<i64> {
        let now = deletions::count(tx)?;
        // Emptied before the count is taken: a write planned meanwhile
        // plans under the old count, or without the caches.
        if self.seen.current() != now {
            self.seen.forgetting(now);
            self.clear();
        }
        self.seen.take(now);
        Ok(now)
    }

    /// [`sync`](Self::sync) in a write transaction (its snapshot is the
    /// newest): see `deletions::Seen::settle`.
    fn sync_write(&self, tx: &rusqlite::Connection) -> Result<i64> {
        let now = self.sync(tx)?;
        self.seen.settle(now);
        Ok(now)
    }

    /// [`sync`](Self::sync) for a read; the first read of a checkpointer
    /// skips it (see `deletions::Seen::first_read`).
    /// The count read (`None`: skipped), which what the read caches is
    /// admitted by (see `deletions::Seen::admits`).
    fn sync_read(&self, tx: &rusqlite::Connection) -> Result<Option<i64>> {
        if self.seen.first_read() {
            return Ok(None);
        }
        self.sync(tx).map(Some)
    }

    /// At the end of a transaction that began with [`sync`](Self::sync)
    /// and deleted: what it deleted was this checkpointer's own (it holds
    /// the write lock, and forgot what it deleted), so the caches stay
    /// current with the count it leaves, which it returns. If it only
    /// `trims` history (retention: only what no kept checkpoint needs), a
    /// write planned before it may still store its lists as deltas of what
    /// the checkpointer cached then (see `deletions::Seen::extends`); not
    /// after a delete or prune, which may remove the versions such a write
    /// extends, and let them be stored again with other values before it
    /// runs.
    fn deleted(&self, tx: &rusqlite::Connection, since: i64, trims: bool) -> Result<i64> {
        let now = deletions::count(tx)?;
        self.seen.forgetting(now);
        if trims {
            self.seen.own(since, now);
        }
        self.seen.take(now);
        Ok(now)
    }

    fn clear(&self) {
        self.bases.clear();
        self.values.clear();
        self.starts.clear();
        self.encoded.clear();
        self.checkpoints.clear();
        self.shared_writes.clear();
    }

    /// Inside a transaction that deleted rows of `threads`: forgets those
    /// threads, after no read of an older snapshot may cache any more (see
    /// `deletions`).
    fn forget_deleted<'a>(
        &self,
        tx: &rusqlite::Connection,
        threads: impl IntoIterator<Item = &'a str>,
    ) -> Result<()> {
        self.seen.forgetting(deletions::count(tx)?);
        for thread in threads {
            self.forget_thread(thread);
        }
        Ok(())
    }

    /// Forgets what retention trims in transaction `tx`: the checkpoints
    /// `gone` of (`thread`, `ns`) (id, stored length) and the blob versions
    /// `blobs`, after no read of an older snapshot may cache any more (see
    /// `deletions`). Other versions and checkpoints stay.
    fn forget_trimmed(
        &self,
        tx: &rusqlite::Connection,
        thread: &str,
        ns: &str,
        gone: &[(String, usize)],
        blobs: &[cache::BlobKey],
    ) -> Result<()> {
        self.seen.forgetting(deletions::count(tx)?);
        self.seen.trimmed(blobs);
        self.bases.forget(blobs);
        self.values.forget(blobs);
        self.starts.forget(blobs);
        self.encoded.forget(blobs);
        // Keyed by the stored blob key, not the version.
        let stored: Vec<cache::BlobKey> = blobs
            .iter()
            .map(|(t, ns, ch, v)| (t.clone(), ns.clone(), ch.clone(), compact::blob_key(v).into_owned()))
            .collect();
        self.shared_writes.forget(&stored);
        self.checkpoints.forget_checkpoints(thread, ns, gone);
        Ok(())
    }

    fn forget_thread(&self, thread: &str) {
        self.bases.forget_thread(thread);
        self.values.forget_thread(thread);
        self.starts.forget_thread(thread);
        self.encoded.forget_thread(thread);
        self.checkpoints.forget_thread(thread);
        self.shared_writes.forget_thread(thread);
    }
}

fn require_thread(config: &CheckpointConfig) -> Result<()> {
    if config.thread_id.is_empty() {
        return Err(Error::InvalidConfig("thread_id must not be empty".into()));
    }
    Ok(())
}

fn describe(config: &CheckpointConfig) -> String {
    match &config.checkpoint_id {
        Some(id) => format!("thread '{}' ns '{}' id {id}", config.thread_id, config.checkpoint_ns),
        None => format!("thread '{}' ns '{}'", config.thread_id, config.checkpoint_ns),
    }
}

/// LangGraph's `get_checkpoint_metadata`: the metadata with NULs removed from
/// top-level strings, plus the config's `metadata` then `configurable`
/// entries that are new, not excluded, not `__`-prefixed and a string, number
/// or bool.
fn merge_metadata(config: &CheckpointConfig, metadata: &Metadata) -> Map<String, Value> {
    let strip = |v: &Value| match v {
        Value::String(s) if s.contains('\0') => Value::String(s.replace('\0', "")),
        other => other.clone(),
    };
    let mut out: Map<String, Value> = metadata.0.iter().map(|(k, v)| (k.clone(), strip(v))).collect();
    for (k, v) in config.metadata.iter().chain(config.extra.iter()) {
        if out.contains_key(k) || EXCLUDED_METADATA_KEYS.contains(&k.as_str()) || k.starts_with("__") {
            continue;
        }
        if matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
            out.insert(k.clone(), strip(v));
        }
    }
    out
}
