//! Short-term memory: a thread's checkpoints, LangGraph-style.
//!
//! The [`Checkpointer`] follows LangGraph's `BaseCheckpointSaver` contract
//! (reference sections 1-4) with the Postgres saver's normalised storage
//! (DESIGN.md decision 1):
//!
//! - `checkpoints` holds each checkpoint's JSON with only primitive channel
//!   values inline (null, bool, number, string), plus its metadata;
//! - `checkpoint_blobs` holds every other channel value once per
//!   `(thread, namespace, channel, version)`; consecutive checkpoints share the
//!   blobs of channels that did not change, and a version once written is
//!   never overwritten;
//! - `checkpoint_writes` holds pending writes per `(checkpoint, task, idx)`.
//!
//! Every call is one transaction: a checkpoint is never visible without its
//! blobs.

mod delta;
mod id;
mod retention;
mod types;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{Map, Value};

pub use id::{next_version, now_iso8601, uuid6};
pub use retention::Retention;
pub use types::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, ListQuery, Metadata,
    PendingWrite, PruneStrategy,
};

use crate::codec::{JsonPlusSerializer, Serializer};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::filter::{too_deep, Filter, MAX_STORED_DEPTH};

/// The special channels and their fixed write indexes (LangGraph's
/// `WRITES_IDX_MAP`, reference 1.5).
pub const WRITES_IDX_MAP: [(&str, i64); 4] =
    [("__error__", -1), ("__scheduled__", -2), ("__interrupt__", -3), ("__resume__", -4)];

/// Metadata keys never copied from the config into the metadata (reference 1.3).
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

fn is_primitive(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_))
}

/// A handle on the checkpoint tables of a [`Db`]. Cheap to clone; `Send +
/// Sync`.
#[derive(Clone)]
pub struct Checkpointer {
    db: Db,
    serde: Arc<dyn Serializer>,
    bases: Arc<delta::BaseCache>,
    retention: Option<Arc<Retention>>,
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
            db: self.clone(),
            serde: Arc::new(JsonPlusSerializer),
            bases: Arc::default(),
            retention: None,
        }
    }
}

/// The checkpoint JSON as stored: the checkpoint with only primitive channel
/// values.
#[derive(Serialize)]
struct StoredCheckpoint<'a> {
    v: i64,
    id: &'a str,
    ts: &'a str,
    channel_values: Map<String, Value>,
    channel_versions: &'a ChannelVersions,
    versions_seen: &'a BTreeMap<String, ChannelVersions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_channels: &'a Option<Vec<String>>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// A `checkpoints` row before its blobs and writes are attached.
struct Row {
    thread_id: String,
    ns: String,
    id: String,
    parent: Option<String>,
    metadata: String,
    checkpoint: String,
}

const ROW_COLUMNS: &str =
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata, checkpoint";

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        thread_id: r.get(0)?,
        ns: r.get(1)?,
        id: r.get(2)?,
        parent: r.get(3)?,
        metadata: text_or_blob(r, 4)?,
        checkpoint: text_or_blob(r, 5)?,
    })
}

/// Reads a column written as TEXT or as a BLOB of UTF-8.
fn text_or_blob(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    match r.get_ref(i)? {
        ValueRef::Text(t) | ValueRef::Blob(t) => Ok(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Null => Ok("{}".into()),
        _ => Err(rusqlite::Error::InvalidColumnType(i, "metadata".into(), rusqlite::types::Type::Integer)),
    }
}

impl Checkpointer {
    /// The same checkpointer with another serializer for channel values and
    /// writes (for example an encrypting wrapper).
    pub fn with_serializer(mut self, serializer: impl Serializer) -> Checkpointer {
        self.serde = Arc::new(serializer);
        self.bases = Arc::default();
        self
    }

    /// The same checkpointer, trimming history by `policy` as it writes: once
    /// a (thread, namespace) holds a few checkpoints more than the policy
    /// allows, the `put` that notices removes the surplus (with their writes
    /// and the blobs nothing kept needs) in the same transaction.
    pub fn with_retention(mut self, policy: Retention) -> Checkpointer {
        self.retention = Some(Arc::new(policy));
        self
    }

    /// Applies `policy` to every (thread, namespace) now, one transaction
    /// each, and returns how many checkpoints it removed.
    ///
    /// # Errors
    /// Database errors; a (thread, namespace) already trimmed stays trimmed.
    pub fn apply_retention(&self, policy: &Retention) -> Result<usize> {
        let pairs: Vec<(String, String)> = self.db.read(|c| {
            Ok(c.prepare("SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?)
        })?;
        let mut removed = 0;
        for (thread, ns) in pairs {
            if policy.exempt.contains(&thread) {
                continue;
            }
            removed += self.db.write(|tx| trim(tx, &thread, &ns, policy))?;
        }
        Ok(removed)
    }

    /// The database this checkpointer writes to.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The version after `current` in LangGraph's string format (reference
    /// 1.7); see [`next_version`].
    pub fn get_next_version(&self, current: Option<&ChannelVersion>) -> ChannelVersion {
        next_version(current)
    }

    /// Stores `checkpoint` as a child of `config.checkpoint_id` (if any) and
    /// returns its canonical config (reference 2.1).
    ///
    /// Primitive channel values stay inline in the checkpoint row; every other
    /// value is written to `checkpoint_blobs` only if its channel is in
    /// `new_versions`, keyed by that version, and only if that version has no
    /// blob yet (first writer wins). The caller guarantees that unchanged
    /// channels' versions were stored by an earlier put, exactly as with
    /// LangGraph's Postgres saver. `metadata` is merged with the config's
    /// `metadata` and `extra` entries (reference 1.3). Re-putting an existing
    /// id replaces its checkpoint and metadata and keeps its stored parent
    /// (DESIGN.md decision 3); its writes survive.
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `config.thread_id` is empty.
    /// - [`Error::InvalidArgument`] if `checkpoint.id` is empty, or if a
    ///   metadata value (or a checkpoint key this crate does not name) nests
    ///   more than 126 levels of objects and arrays (the stored JSON object
    ///   would be deeper than 127 levels, which could not be read back).
    /// - [`Error::Serialization`] if a channel value cannot be encoded.
    /// - [`Error::Busy`], [`Error::DiskFull`], [`Error::Sqlite`] from the
    ///   database; nothing is written then.
    pub fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        metadata: &Metadata,
        new_versions: &ChannelVersions,
    ) -> Result<CheckpointConfig> {
        require_thread(config)?;
        if checkpoint.id.is_empty() {
            return Err(Error::InvalidArgument("checkpoint.id must not be empty".into()));
        }
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        let mut inline = Map::new();
        let mut blobs: Vec<PlannedBlob<'_>> = Vec::new();
        for (ch, value) in &checkpoint.channel_values {
            if is_primitive(value) {
                inline.insert(ch.clone(), value.clone());
            } else if let Some(version) = new_versions.get(ch) {
                let (tag, bytes) = self.serde.dumps_typed(value)?;
                let appendable = value.is_array() && tag == "msgpack" && self.serde.concatenates_arrays();
                let delta = appendable
                    .then(|| self.bases.get(thread, ns, ch))
                    .flatten()
                    .filter(|b| b.chain < delta::MAX_CHAIN && bytes.len() >= delta::MIN_DELTA_BASE)
                    .and_then(|b| delta::delta(&b.bytes, &bytes).map(|d| (b.version, d, b.chain + 1)));
                blobs.push(PlannedBlob {
                    channel: ch,
                    version: version.to_string(),
                    tag,
                    full: Arc::new(bytes),
                    appendable,
                    delta,
                });
            }
        }
        let stored = StoredCheckpoint {
            v: checkpoint.v,
            id: &checkpoint.id,
            ts: &checkpoint.ts,
            channel_values: inline,
            channel_versions: &checkpoint.channel_versions,
            versions_seen: &checkpoint.versions_seen,
            updated_channels: &checkpoint.updated_channels,
            extra: &checkpoint.extra,
        };
        let metadata = merge_metadata(config, metadata);
        // Both are stored as JSON objects: their values sit one level down.
        if let Some((key, _)) =
            metadata.iter().chain(&checkpoint.extra).find(|(_, v)| too_deep(v, MAX_STORED_DEPTH - 1))
        {
            return Err(Error::InvalidArgument(format!(
                "metadata or checkpoint key '{key}' nests too deeply: stored JSON may nest at most \
                 {MAX_STORED_DEPTH} levels of objects and arrays (deeper JSON could not be read back)"
            )));
        }
        let checkpoint_json = serde_json::to_string(&stored)?;
        let metadata_json = serde_json::to_string(&metadata)?;
        let mut cache_updates: Vec<(&str, Option<delta::Base>)> = vec![];
        self.db.write(|tx| {
            cache_updates.clear();
            let mut ins = tx.prepare_cached(
                "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob, base_version, chain) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
            )?;
            let mut has_base = tx.prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM checkpoint_blobs \
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4)",
            )?;
            for b in &blobs {
                // A delta only if its base is (still) there in this transaction.
                let mut delta = None;
                if let Some((base, bytes, chain)) = &b.delta {
                    if has_base.query_row(params![thread, ns, b.channel, base], |r| r.get::<_, bool>(0))? {
                        delta = Some((base, bytes, *chain));
                    }
                }
                let (bytes, base, chain): (&[u8], Option<&String>, i64) = match delta {
                    Some((base, bytes, chain)) => (bytes, Some(base), chain),
                    None => (&b.full, None, 0),
                };
                let inserted = ins.execute(params![thread, ns, b.channel, b.version, b.tag, bytes, base, chain])?;
                let next = (inserted == 1 && b.appendable)
                    .then(|| delta::Base { version: b.version.clone(), bytes: b.full.clone(), chain });
                cache_updates.push((b.channel, next));
            }
            tx.prepare_cached(
                "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata, checkpoint) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) \
                 DO UPDATE SET checkpoint = excluded.checkpoint, metadata = excluded.metadata",
            )?
            .execute(params![thread, ns, checkpoint.id, config.checkpoint_id, metadata_json, checkpoint_json])?;
            if let Some(policy) = &self.retention {
                if policy.due(tx, thread, ns)? {
                    trim(tx, thread, ns, policy)?;
                }
            }
            Ok(())
        })?;
        for (ch, base) in cache_updates {
            self.bases.set(thread, ns, ch, base);
        }
        Ok(CheckpointConfig::canonical(thread, ns, &checkpoint.id))
    }

    /// Stores the writes a task produced for the checkpoint
    /// `config.checkpoint_id` (reference 2.2 and 1.5).
    ///
    /// The write at position `i` gets `idx = i`, except the special channels
    /// of [`WRITES_IDX_MAP`]. If every write of the call is special the rows
    /// are upserted (last writer wins); otherwise every row is
    /// insert-or-ignore (first writer wins, so retries are idempotent).
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `thread_id` is empty or `checkpoint_id`
    ///   is missing.
    /// - [`Error::Serialization`] if a value cannot be encoded.
    /// - database errors as for [`put`](Self::put); nothing is written then.
    pub fn put_writes<C: AsRef<str>>(
        &self,
        config: &CheckpointConfig,
        writes: &[(C, Value)],
        task_id: &str,
        task_path: &str,
    ) -> Result<()> {
        require_thread(config)?;
        let checkpoint_id = config
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| Error::InvalidConfig("put_writes needs config.checkpoint_id".into()))?;
        if writes.is_empty() {
            return Ok(());
        }
        let all_special = writes.iter().all(|(c, _)| special_idx(c.as_ref()).is_some());
        let mut rows = Vec::with_capacity(writes.len());
        for (i, (channel, value)) in writes.iter().enumerate() {
            let channel = channel.as_ref();
            let idx = special_idx(channel).unwrap_or(i as i64);
            let (tag, bytes) = self.serde.dumps_typed(value)?;
            rows.push((channel, idx, tag, bytes));
        }
        let sql = if all_special {
            "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) \
             DO UPDATE SET channel = excluded.channel, type = excluded.type, blob = excluded.blob"
        } else {
            "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING"
        };
        self.db.write(|tx| {
            let mut stmt = tx.prepare_cached(sql)?;
            for (channel, idx, tag, bytes) in &rows {
                stmt.execute(params![
                    config.thread_id,
                    config.checkpoint_ns,
                    checkpoint_id,
                    task_id,
                    idx,
                    channel,
                    tag,
                    bytes,
                    task_path
                ])?;
            }
            Ok(())
        })
    }

    /// The checkpoint `config.checkpoint_id` of the thread and namespace, or
    /// the latest one if no id is given, with its pending writes (reference
    /// 2.3). `None` if there is none.
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `thread_id` is empty.
    /// - [`Error::Corrupt`] if a stored row does not parse.
    /// - [`Error::UnknownSerialization`] / [`Error::Serialization`] if a
    ///   stored value cannot be decoded.
    /// - database errors.
    pub fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        require_thread(config)?;
        self.db.snapshot(|tx| {
            let row = match &config.checkpoint_id {
                Some(id) => tx
                    .prepare_cached(&format!(
                        "SELECT {ROW_COLUMNS} FROM checkpoints \
                         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
                    ))?
                    .query_row(params![config.thread_id, config.checkpoint_ns, id], read_row)
                    .optional()?,
                None => tx
                    .prepare_cached(&format!(
                        "SELECT {ROW_COLUMNS} FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                         ORDER BY checkpoint_id DESC LIMIT 1"
                    ))?
                    .query_row(params![config.thread_id, config.checkpoint_ns], read_row)
                    .optional()?,
            };
            let Some(row) = row else { return Ok(None) };
            let mut out = self.assemble(tx, vec![row])?;
            Ok(out.pop())
        })
    }

    /// The checkpoint of [`get_tuple`](Self::get_tuple), without the rest.
    ///
    /// # Errors
    /// As [`get_tuple`](Self::get_tuple).
    pub fn get(&self, config: &CheckpointConfig) -> Result<Option<Checkpoint>> {
        Ok(self.get_tuple(config)?.map(|t| t.checkpoint))
    }

    /// The checkpoints matching `query`, newest first (by id, across threads
    /// and namespaces), each with its pending writes (reference 2.4, DESIGN.md
    /// decision 4). The metadata filter uses the [filter language](crate::filter).
    ///
    /// # Errors
    /// - [`Error::InvalidFilter`] if the filter does not parse.
    /// - decoding and database errors as for [`get_tuple`](Self::get_tuple).
    pub fn list(&self, query: &ListQuery) -> Result<Vec<CheckpointTuple>> {
        let filter = query.filter.as_ref().map(Filter::parse).transpose()?;
        if query.limit == Some(0) {
            return Ok(Vec::new());
        }
        let mut sql = format!("SELECT {ROW_COLUMNS} FROM checkpoints WHERE 1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(t) = &query.thread_id {
            sql.push_str(" AND thread_id = ?");
            args.push(t.clone().into());
        }
        if let Some(ns) = &query.checkpoint_ns {
            sql.push_str(" AND checkpoint_ns = ?");
            args.push(ns.clone().into());
        }
        if let Some(id) = &query.checkpoint_id {
            sql.push_str(" AND checkpoint_id = ?");
            args.push(id.clone().into());
        }
        if let Some(f) = &filter {
            let (expr, params) = f.to_sql("metadata");
            sql.push_str(" AND (");
            sql.push_str(&expr);
            sql.push(')');
            args.extend(params);
        }
        if let Some(b) = &query.before {
            sql.push_str(" AND checkpoint_id < ?");
            args.push(b.clone().into());
        }
        sql.push_str(" ORDER BY checkpoint_id DESC");
        if let Some(n) = query.limit {
            sql.push_str(" LIMIT ?");
            args.push((n.min(i64::MAX as usize) as i64).into());
        }
        self.db.snapshot(|tx| {
            let rows = tx
                .prepare_cached(&sql)?
                .query_map(params_from_iter(args.iter()), read_row)?
                .collect::<rusqlite::Result<Vec<Row>>>()?;
            self.assemble(tx, rows)
        })
    }

    /// Removes every checkpoint, blob and write of `thread_id`, in every
    /// namespace (reference 2.5). An unknown thread is a no-op.
    ///
    /// # Errors
    /// Database errors; nothing is deleted then.
    pub fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.bases.forget_thread(thread_id);
        self.db.write(|tx| {
            for table in ["checkpoints", "checkpoint_blobs", "checkpoint_writes"] {
                tx.prepare_cached(&format!("DELETE FROM {table} WHERE thread_id = ?1"))?
                    .execute([thread_id])?;
            }
            Ok(())
        })
    }

    /// Copies every checkpoint, blob and write of thread `src`, in every
    /// namespace, to thread `dst`, keeping ids, parents, metadata and task
    /// paths (reference 2.6). `src` is unchanged. A missing `src` leaves
    /// `dst` empty.
    ///
    /// # Errors
    /// - [`Error::Conflict`] if `dst` already has checkpoints (histories are
    ///   never mixed: delete `dst` first).
    /// - database errors; nothing is copied then.
    pub fn copy_thread(&self, src: &str, dst: &str) -> Result<()> {
        if src == dst {
            return Ok(());
        }
        self.db.write(|tx| {
            let taken: bool = tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM checkpoints WHERE thread_id = ?1)",
                [dst],
                |r| r.get(0),
            )?;
            if taken {
                return Err(Error::Conflict(format!(
                    "thread '{dst}' already has checkpoints; delete it before copying onto it"
                )));
            }
            tx.execute(
                "INSERT OR IGNORE INTO checkpoint_blobs \
                 (thread_id, checkpoint_ns, channel, version, type, blob, base_version, chain, created_at) \
                 SELECT ?2, checkpoint_ns, channel, version, type, blob, base_version, chain, created_at \
                 FROM checkpoint_blobs WHERE thread_id = ?1",
                [src, dst],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, metadata, checkpoint, created_at) \
                 SELECT ?2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, metadata, checkpoint, created_at \
                 FROM checkpoints WHERE thread_id = ?1",
                [src, dst],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, created_at) \
                 SELECT ?2, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, created_at \
                 FROM checkpoint_writes WHERE thread_id = ?1",
                [src, dst],
            )?;
            Ok(())
        })
    }

    /// Shrinks the history of `thread_ids` (reference 2.6):
    /// [`PruneStrategy::KeepLatest`] keeps the newest checkpoint of each
    /// (thread, namespace) with its writes; [`PruneStrategy::Delete`] removes
    /// the threads. Blobs that no remaining checkpoint references are
    /// removed. Unknown threads are a no-op; other threads are untouched.
    ///
    /// # Errors
    /// - [`Error::Corrupt`] if a remaining checkpoint's JSON does not parse.
    /// - database errors; nothing is deleted then.
    pub fn prune<S: AsRef<str>>(&self, thread_ids: &[S], strategy: PruneStrategy) -> Result<()> {
        for t in thread_ids {
            self.bases.forget_thread(t.as_ref());
        }
        self.db.write(|tx| {
            for thread in thread_ids {
                let thread = thread.as_ref();
                match strategy {
                    PruneStrategy::Delete => {
                        for table in ["checkpoints", "checkpoint_blobs", "checkpoint_writes"] {
                            tx.prepare_cached(&format!("DELETE FROM {table} WHERE thread_id = ?1"))?
                                .execute([thread])?;
                        }
                    }
                    PruneStrategy::KeepLatest => {
                        let gone: Vec<(String, String, String)> = tx
                            .prepare_cached(
                                "DELETE FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id < \
                                 (SELECT MAX(c.checkpoint_id) FROM checkpoints c \
                                  WHERE c.thread_id = ?1 AND c.checkpoint_ns = checkpoints.checkpoint_ns) \
                                 RETURNING thread_id, checkpoint_ns, checkpoint_id",
                            )?
                            .query_map([thread], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                            .collect::<rusqlite::Result<_>>()?;
                        delete_writes_of(tx, &gone)?;
                        collect_blobs(tx, thread)?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Removes every checkpoint whose `metadata.run_id` is one of `run_ids`,
    /// across threads and namespaces, with its writes; blobs no remaining
    /// checkpoint references are removed (reference 2.6). Empty or unknown
    /// ids are a no-op.
    ///
    /// # Errors
    /// As [`prune`](Self::prune).
    pub fn delete_for_runs<S: AsRef<str>>(&self, run_ids: &[S]) -> Result<()> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let ids = Value::Array(run_ids.iter().map(|s| Value::String(s.as_ref().to_string())).collect());
        let ids = ids.to_string();
        self.db.write(|tx| {
            let gone: Vec<(String, String, String)> = tx
                .prepare_cached(
                    "DELETE FROM checkpoints WHERE json_extract(metadata, '$.run_id') IS NOT NULL \
                     AND json_extract(metadata, '$.run_id') IN (SELECT value FROM json_each(?1)) \
                     RETURNING thread_id, checkpoint_ns, checkpoint_id",
                )?
                .query_map([&ids], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            delete_writes_of(tx, &gone)?;
            let threads: HashSet<&str> = gone.iter().map(|(t, _, _)| t.as_str()).collect();
            for t in threads {
                self.bases.forget_thread(t);
                collect_blobs(tx, t)?;
            }
            Ok(())
        })
    }

    /// Forks the history: a new checkpoint whose parent is the checkpoint
    /// `config` names (or the latest), with the same channel values and
    /// versions (blobs are shared, never copied) and metadata
    /// `{"source": "fork", "step": <the old step>, "parents": {}}`. The old
    /// branch stays readable. Returns the new checkpoint's config.
    ///
    /// # Errors
    /// - [`Error::NotFound`] if `config` names no checkpoint.
    /// - errors of [`get_tuple`](Self::get_tuple) and [`put`](Self::put).
    pub fn fork(&self, config: &CheckpointConfig) -> Result<CheckpointConfig> {
        self.fork_with(config, Map::new())
    }

    /// Like [`fork`](Self::fork), but replaces the given channel values (no
    /// reducers are applied: this is storage, not a graph runtime). Changed
    /// channels get new versions; the metadata source is `"update"` and the
    /// step is the old one plus one. With no values this is `fork`.
    ///
    /// # Errors
    /// As [`fork`](Self::fork).
    pub fn fork_with(
        &self,
        config: &CheckpointConfig,
        values: Map<String, Value>,
    ) -> Result<CheckpointConfig> {
        let base = self
            .get_tuple(config)?
            .ok_or_else(|| Error::NotFound(format!("no checkpoint for {}", describe(config))))?;
        let step = base.metadata.step().unwrap_or(-1);
        let (source, step) = if values.is_empty() { ("fork", step) } else { ("update", step + 1) };
        let mut cp = base.checkpoint.clone();
        cp.id = uuid6(Some(step)).to_string();
        cp.ts = now_iso8601();
        let mut new_versions = ChannelVersions::new();
        let mut updated: Vec<String> = Vec::new();
        for (ch, v) in values {
            let version = next_version(cp.channel_versions.get(&ch));
            cp.channel_versions.insert(ch.clone(), version.clone());
            new_versions.insert(ch.clone(), version);
            cp.channel_values.insert(ch.clone(), v);
            updated.push(ch);
        }
        updated.sort();
        cp.updated_channels = Some(updated);
        let metadata = Metadata::new()
            .with("source", source)
            .with("step", step)
            .with("parents", Value::Object(Map::new()));
        let parent = CheckpointConfig::canonical(
            &base.config.thread_id,
            &base.config.checkpoint_ns,
            &base.checkpoint.id,
        );
        self.put(&parent, &cp, &metadata, &new_versions)
    }

    /// Attaches values and pending writes to raw rows: blobs are fetched once
    /// per distinct (namespace, channel, version); writes of all rows in one
    /// query.
    fn assemble(&self, conn: &Connection, rows: Vec<Row>) -> Result<Vec<CheckpointTuple>> {
        type BlobKey = (String, String, String, String);
        let mut writes = self.load_writes(conn, &rows)?;
        // Pass 1: parse the rows and count how many of them use each blob.
        let mut parsed = Vec::with_capacity(rows.len());
        let mut uses: HashMap<BlobKey, usize> = HashMap::new();
        for row in rows {
            let checkpoint: Checkpoint = serde_json::from_str(&row.checkpoint)
                .map_err(|e| Error::corrupt(format!("checkpoint {} does not parse: {e}", row.id)))?;
            let metadata: Metadata = serde_json::from_str(&row.metadata).map_err(|e| {
                Error::corrupt(format!("metadata of checkpoint {} does not parse: {e}", row.id))
            })?;
            for (ch, version) in &checkpoint.channel_versions {
                if !checkpoint.channel_values.contains_key(ch) {
                    let key = (row.thread_id.clone(), row.ns.clone(), ch.clone(), version.to_string());
                    *uses.entry(key).or_default() += 1;
                }
            }
            parsed.push((row, checkpoint, metadata));
        }
        // Pass 2: decode each blob once; the last user takes it, the others
        // get clones.
        let mut blobs: HashMap<BlobKey, Option<Value>> = HashMap::with_capacity(uses.len());
        {
            let mut stmt = conn.prepare_cached(
                "SELECT type, blob, base_version FROM checkpoint_blobs \
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
            )?;
            for key in uses.keys() {
                // The version this process wrote last is in memory, whole.
                if let Some(b) = self.bases.get(&key.0, &key.1, &key.2).filter(|b| b.version == key.3) {
                    blobs.insert(key.clone(), Some(self.serde.loads_typed("msgpack", &b.bytes)?));
                    continue;
                }
                let v = match load_blob(&mut stmt, key)? {
                    Some((tag, _)) if tag == "empty" => None,
                    Some((tag, bytes)) => Some(self.serde.loads_typed(&tag, &bytes)?),
                    None => None,
                };
                blobs.insert(key.clone(), v);
            }
        }
        let mut out = Vec::with_capacity(parsed.len());
        for (row, mut checkpoint, metadata) in parsed {
            let mut inline = std::mem::take(&mut checkpoint.channel_values);
            let mut values = Map::new();
            for (ch, version) in &checkpoint.channel_versions {
                if let Some(v) = inline.remove(ch) {
                    values.insert(ch.clone(), v);
                    continue;
                }
                let key = (row.thread_id.clone(), row.ns.clone(), ch.clone(), version.to_string());
                let left = uses.get_mut(&key).map(|n| {
                    *n -= 1;
                    *n
                });
                let value = match left {
                    Some(0) => blobs.remove(&key).flatten(),
                    _ => blobs.get(&key).cloned().flatten(),
                };
                if let Some(v) = value {
                    values.insert(ch.clone(), v);
                }
            }
            checkpoint.channel_values = values;
            let key = (row.thread_id.clone(), row.ns.clone(), row.id.clone());
            let pending_writes = writes.remove(&key).unwrap_or_default();
            out.push(CheckpointTuple {
                config: CheckpointConfig::canonical(&row.thread_id, &row.ns, &row.id),
                parent_config: row
                    .parent
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .map(|p| CheckpointConfig::canonical(&row.thread_id, &row.ns, p)),
                checkpoint,
                metadata,
                pending_writes,
            });
        }
        Ok(out)
    }

    /// The pending writes of every row, in one query, ordered by
    /// (task_id, idx) within a checkpoint.
    #[allow(clippy::type_complexity)]
    fn load_writes(
        &self,
        conn: &Connection,
        rows: &[Row],
    ) -> Result<HashMap<(String, String, String), Vec<PendingWrite>>> {
        let mut out: HashMap<(String, String, String), Vec<PendingWrite>> = HashMap::new();
        if rows.is_empty() {
            return Ok(out);
        }
        if let [row] = rows {
            // One checkpoint (get_tuple): a plain primary-key range.
            let mut stmt = conn.prepare_cached(
                "SELECT task_id, channel, type, blob FROM checkpoint_writes \
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 ORDER BY task_id, idx",
            )?;
            let mut q = stmt.query(params![row.thread_id, row.ns, row.id])?;
            let mut list = vec![];
            while let Some(r) = q.next()? {
                let tag: Option<String> = r.get(2)?;
                let bytes = r.get_ref(3)?.as_blob().map_err(rusqlite::Error::from)?;
                let value = self.serde.loads_typed(tag.as_deref().unwrap_or("null"), bytes)?;
                list.push(PendingWrite { task_id: r.get(0)?, channel: r.get(1)?, value });
            }
            if !list.is_empty() {
                out.insert((row.thread_id.clone(), row.ns.clone(), row.id.clone()), list);
            }
            return Ok(out);
        }
        let keys = Value::Array(
            rows.iter()
                .map(|r| {
                    Value::Array(vec![r.thread_id.clone().into(), r.ns.clone().into(), r.id.clone().into()])
                })
                .collect(),
        )
        .to_string();
        let mut stmt = conn.prepare_cached(
            "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.channel, w.type, w.blob \
             FROM json_each(?1) AS k \
             JOIN checkpoint_writes AS w ON w.thread_id = k.value ->> 0 AND w.checkpoint_ns = k.value ->> 1 \
                                          AND w.checkpoint_id = k.value ->> 2 \
             ORDER BY k.key, w.task_id, w.idx",
        )?;
        let mut q = stmt.query([keys])?;
        while let Some(r) = q.next()? {
            let key: (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let tag: Option<String> = r.get(5)?;
            let bytes: Vec<u8> = r.get(6)?;
            let value = self.serde.loads_typed(tag.as_deref().unwrap_or("null"), &bytes)?;
            out.entry(key).or_default().push(PendingWrite { task_id: r.get(3)?, channel: r.get(4)?, value });
        }
        Ok(out)
    }
}

/// A blob `put` will write: the full encoding, and, when the list extends
/// the last one this process stored for the channel, the delta against it.
struct PlannedBlob<'a> {
    channel: &'a str,
    version: String,
    tag: String,
    full: Arc<Vec<u8>>,
    appendable: bool,
    /// (base version, delta bytes, chain length)
    delta: Option<(String, Vec<u8>, i64)>,
}

/// The type tag and full bytes of a blob, following its chain of deltas back
/// to the last snapshot (at most [`delta::MAX_CHAIN`] steps) and
/// reassembling them. `None` if the blob does not exist.
fn load_blob(
    stmt: &mut rusqlite::CachedStatement<'_>,
    key: &(String, String, String, String),
) -> Result<Option<(String, Vec<u8>)>> {
    type Piece = (String, Option<Vec<u8>>, Option<String>);
    let (thread, ns, channel) = (&key.0, &key.1, &key.2);
    let mut version = key.3.clone();
    let mut pieces: Vec<Vec<u8>> = vec![];
    let mut top_tag: Option<String> = None;
    loop {
        let found: Option<Piece> = stmt
            .query_row(params![thread, ns, channel, version], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((tag, bytes, base)) = found else {
            return match top_tag {
                None => Ok(None),
                Some(_) => Err(Error::corrupt(format!(
                    "blob {channel}@{version} of thread '{thread}' is missing but a newer version extends it"
                ))),
            };
        };
        top_tag.get_or_insert(tag);
        pieces.push(bytes.unwrap_or_default());
        match base {
            None => break,
            Some(b) if (pieces.len() as i64) <= delta::MAX_CHAIN => version = b,
            Some(_) => {
                return Err(Error::corrupt(format!(
                    "blob {channel}@{} of thread '{thread}': delta chain longer than {}",
                    key.3,
                    delta::MAX_CHAIN
                )))
            }
        }
    }
    let tag = top_tag.unwrap_or_default();
    if pieces.len() == 1 {
        return Ok(pieces.pop().map(|p| (tag, p)));
    }
    pieces.reverse();
    let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
    let full = delta::assemble(&refs).ok_or_else(|| {
        Error::corrupt(format!("blob {channel}@{} of thread '{thread}': a delta is not a list", key.3))
    })?;
    Ok(Some((tag, full)))
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

/// LangGraph's `get_checkpoint_metadata` (reference 1.3): the metadata with
/// NULs removed from top-level strings, plus the config's `metadata` then
/// `configurable` entries that are new, not excluded, not `__`-prefixed and
/// a string, number or bool.
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

/// Removes the checkpoints of (thread, ns) that `policy` does not keep, their
/// writes, and the blobs nothing kept needs. Returns how many checkpoints.
fn trim(tx: &Connection, thread: &str, ns: &str, policy: &Retention) -> Result<usize> {
    let victims = policy.victims(tx, thread, ns)?;
    if victims.is_empty() {
        return Ok(0);
    }
    let mut del = tx.prepare_cached(
        "DELETE FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3",
    )?;
    let mut gone = Vec::with_capacity(victims.len());
    for id in victims {
        del.execute(params![thread, ns, id])?;
        gone.push((thread.to_string(), ns.to_string(), id));
    }
    delete_writes_of(tx, &gone)?;
    collect_blobs(tx, thread)?;
    Ok(gone.len())
}

fn delete_writes_of(tx: &Connection, gone: &[(String, String, String)]) -> Result<()> {
    let mut stmt = tx.prepare_cached(
        "DELETE FROM checkpoint_writes WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3",
    )?;
    for (t, ns, id) in gone {
        stmt.execute(params![t, ns, id])?;
    }
    Ok(())
}

/// Deletes the blobs of `thread` that nothing needs: no checkpoint of the
/// thread names them and no needed incremental blob extends them (the same
/// rule the integrity check and the statistics use).
fn collect_blobs(tx: &Connection, thread: &str) -> Result<()> {
    let scan = crate::inspect::BlobScan::run(tx, Some(thread), || {})?;
    if let Some(u) = scan.unparsable.first() {
        return Err(Error::corrupt(format!(
            "checkpoint {} of thread '{thread}': {}",
            u.checkpoint_id, u.reason
        )));
    }
    let mut del = tx.prepare_cached(
        "DELETE FROM checkpoint_blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
    )?;
    for (_, keys) in scan.unneeded() {
        for (ns, channel, version) in keys {
            del.execute(params![thread, ns, channel, version])?;
        }
    }
    Ok(())
}
