//! Removing and copying history: delete, copy, prune, runs, retention,
//! forks.

use std::collections::HashSet;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{Map, Value};

use super::cache::BlobKey;
use super::compact;
use super::deletions;
use super::job::WritesJob;
use super::packed;
use super::retention::Retention;
use super::types::{CheckpointConfig, Metadata, PruneStrategy};
use super::{describe, require_thread, Checkpointer};
use crate::error::{Error, Result};

impl Checkpointer {
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
        let caches = self.caches();
        let mut removed = 0;
        for (thread, ns) in pairs {
            if policy.exempt.contains(&thread) {
                continue;
            }
            removed += self.deleting(true, |tx| trim(tx, &thread, &ns, policy, &caches))?;
        }
        Ok(removed)
    }

    /// Removes every checkpoint, blob and write of `thread_id`, in every
    /// namespace. An unknown thread is a no-op.
    ///
    /// # Errors
    /// Database errors; nothing is deleted then.
    pub fn delete_thread(&self, thread_id: &str) -> Result<()> {
        let caches = self.caches();
        self.deleting(false, |tx| {
            delete_thread_rows(tx, thread_id)?;
            caches.forget_deleted(tx, [thread_id])
        })
    }

    /// Copies every checkpoint, blob and write of thread `src`, in every
    /// namespace, to thread `dst`, keeping ids, parents, metadata and task
    /// paths. `src` is unchanged. A missing `src` leaves
    /// `dst` empty; copying a thread onto itself changes nothing (as
    /// LangGraph's insert-or-ignore copy does).
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `dst` is empty (no read could name it).
    /// - [`Error::Conflict`] if `dst` (another thread) already has
    ///   checkpoints (histories are never mixed: delete `dst` first).
    /// - database errors; nothing is copied then.
    pub fn copy_thread(&self, src: &str, dst: &str) -> Result<()> {
        require_thread(&CheckpointConfig::thread(dst))?;
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
                 (thread_id, checkpoint_ns, channel, version, type, blob, base_version, chain, root_version) \
                 SELECT ?2, checkpoint_ns, channel, version, type, blob, base_version, chain, root_version \
                 FROM checkpoint_blobs WHERE thread_id = ?1",
                [src, dst],
            )?;
            tx.execute(
                "INSERT OR IGNORE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, metadata, checkpoint, created_at) \
                 SELECT ?2, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, metadata, checkpoint, created_at \
                 FROM checkpoints WHERE thread_id = ?1",
                [src, dst],
            )?;
            // Writes the target already holds for the same (checkpoint, task)
            // (writes may precede their checkpoint) are merged as a
            // put_writes would: the stored ones stay.
            let rows: Vec<(String, String, String, String, Vec<u8>)> = tx
                .prepare_cached(
                    "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, writes FROM checkpoint_writes \
                     WHERE thread_id = ?1",
                )?
                .query_map([src], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (ns, checkpoint_id, task_id, task_path, writes) in rows {
                let entries = packed::unpack_row(&writes, src, &checkpoint_id, &task_id)?;
                let job = WritesJob {
                    thread: dst.to_string(),
                    ns,
                    checkpoint_id,
                    task_id,
                    task_path,
                    upsert: false,
                    rows: Vec::new(),
                    target: None,
                };
                // Entries as stored: one that refers to a blob row still does
                // (the blob is copied with the thread).
                job.merge_into(tx, entries)?;
            }
            Ok(())
        })
    }

    /// Shrinks the history of `thread_ids`:
    /// [`PruneStrategy::KeepLatest`] keeps the newest checkpoint of each
    /// (thread, namespace) with its writes; [`PruneStrategy::Delete`] removes
    /// the threads. Blobs that no remaining checkpoint references are
    /// removed. Unknown threads are a no-op; other threads are untouched.
    ///
    /// # Errors
    /// - [`Error::Corrupt`] if a remaining checkpoint's JSON does not parse.
    /// - database errors; nothing is deleted then.
    pub fn prune<S: AsRef<str>>(&self, thread_ids: &[S], strategy: PruneStrategy) -> Result<()> {
        let caches = self.caches();
        self.deleting(false, |tx| {
            for thread in thread_ids {
                let thread = thread.as_ref();
                match strategy {
                    PruneStrategy::Delete => {
                        delete_thread_rows(tx, thread)?;
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
            caches.forget_deleted(tx, thread_ids.iter().map(AsRef::as_ref))
        })
    }

    /// Removes every checkpoint whose `metadata.run_id` is one of `run_ids`,
    /// across threads and namespaces, with its writes; blobs no remaining
    /// checkpoint references are removed. Empty or unknown
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
        let caches = self.caches();
        self.deleting(false, |tx| {
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
            for t in &threads {
                collect_blobs(tx, t)?;
            }
            caches.forget_deleted(tx, threads)
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
    /// - errors of [`get_tuple`](Self::get_tuple) and [`Step::commit`](super::Step::commit).
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
        let (source, step) =
            if values.is_empty() { ("fork", step) } else { ("update", step.saturating_add(1)) };
        let metadata = Metadata::new()
            .with("source", source)
            .with("step", step)
            .with("parents", Value::Object(Map::new()));
        let mut next = self.step(&base).fork().metadata(metadata);
        for (ch, v) in values {
            next = next.set(ch, v);
        }
        Ok(next.commit()?.config)
    }
}

/// Removes the checkpoints of (thread, ns) that `policy` does not keep, their
/// writes, and the blobs nothing kept needs, and has `caches` forget them
/// (a caller that makes its own versions may store a trimmed one again with
/// another value). Returns how many checkpoints.
pub(super) fn trim(
    tx: &Connection,
    thread: &str,
    ns: &str,
    policy: &Retention,
    caches: &super::ThreadCaches,
) -> Result<usize> {
    let victims = policy.victims(tx, thread, ns)?;
    if victims.is_empty() {
        return Ok(0);
    }
    let mut del = tx.prepare_cached(
        "DELETE FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 \
         RETURNING length(CAST(checkpoint AS BLOB))",
    )?;
    let mut gone = Vec::with_capacity(victims.len());
    // (id, the stored checkpoint's length: where its cache entry is.)
    let mut lengths = Vec::with_capacity(victims.len());
    for id in victims {
        let len: Option<i64> = del.query_row(params![thread, ns, id], |r| r.get(0)).optional()?;
        lengths.push((id.clone(), len.and_then(|n| usize::try_from(n).ok()).unwrap_or(0)));
        gone.push((thread.to_string(), ns.to_string(), id));
    }
    delete_writes_of(tx, &gone)?;
    let blobs = collect_blobs(tx, thread)?;
    // (Forgetting is safe whether or not the transaction commits.)
    caches.forget_trimmed(tx, thread, ns, &lengths, &blobs)?;
    Ok(gone.len())
}

/// Deletes every row of `thread` in the three tables; whether blobs were
/// among them (counted: see `deletions`).
fn delete_thread_rows(tx: &Connection, thread: &str) -> Result<bool> {
    let mut blobs = 0;
    for table in ["checkpoints", "checkpoint_blobs", "checkpoint_writes"] {
        let n = tx.prepare_cached(&format!("DELETE FROM {table} WHERE thread_id = ?1"))?.execute([thread])?;
        if table == "checkpoint_blobs" {
            blobs = n;
        }
    }
    if blobs > 0 {
        deletions::bump(tx)?;
    }
    Ok(blobs > 0)
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

/// Deletes the blobs of `thread` that no checkpoint of the thread needs
/// (neither references nor extends through a delta chain), and returns
/// their keys (a deletion is counted: see `deletions`). The same scan
/// serves the integrity check and the statistics.
fn collect_blobs(tx: &Connection, thread: &str) -> Result<Vec<BlobKey>> {
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
    let mut deleted = vec![];
    for (_, keys) in scan.unneeded() {
        for (ns, channel, version) in keys {
            if del.execute(params![thread, ns, channel, compact::blob_key(&version)])? > 0 {
                deleted.push((thread.to_string(), ns, channel, version));
            }
        }
    }
    if !deleted.is_empty() {
        deletions::bump(tx)?;
    }
    Ok(deleted)
}
