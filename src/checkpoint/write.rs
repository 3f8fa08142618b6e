//! Writing checkpoints LangGraph's way: [`Checkpointer::put`] and
//! [`Checkpointer::put_writes`], and what both they and
//! [`Step`](super::Step) plan before a transaction (the blobs a checkpoint
//! stores, its encoded row). The jobs that store them are in
//! [`job`](super::job).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::cache::BlobKey;
use super::delta;
use super::job::{CheckpointJob, Head, WritesJob};
use super::row;
use super::types::{ChannelVersions, Checkpoint, CheckpointConfig, Metadata};
use super::value::ChannelValue;
use super::{merge_metadata, require_thread, special_idx, Checkpointer};
use crate::db::CacheTag;
use crate::error::{Error, Result};
use crate::json::{too_deep, MAX_STORED_DEPTH};

/// A blob a write will store.
pub(super) struct PlannedBlob {
    pub(super) channel: String,
    pub(super) version: String,
    pub(super) value: BlobValue,
    /// (type tag, full bytes); unused for an empty channel.
    pub(super) tag: String,
    pub(super) full: Arc<Vec<u8>>,
    /// The list this process may extend next (for `put`'s delta detection).
    pub(super) appendable: bool,
    /// (base version, delta bytes), if stored as a delta: the elements the
    /// list appends to the base version's list.
    pub(super) delta: Option<(String, Vec<u8>)>,
}

/// What a [`PlannedBlob`] holds.
pub(super) enum BlobValue {
    /// The channel is empty at this version (an `empty` row).
    Empty,
    /// A value this crate encoded (it goes to the value cache).
    Decoded(ChannelValue),
    /// Bytes encoded outside this crate ([`Checkpointer::put_encoded`]).
    Encoded,
}

impl PlannedBlob {
    pub(super) fn empty(channel: &str, version: String) -> PlannedBlob {
        PlannedBlob {
            channel: channel.to_string(),
            version,
            value: BlobValue::Empty,
            tag: "empty".into(),
            full: Arc::default(),
            appendable: false,
            delta: None,
        }
    }
}

/// A checkpoint row (in the [`row`] format: the row's
/// `checkpoint_id` is the checkpoint's id) and the JSON of its metadata,
/// refusing what could not be read back.
///
/// With `mark_empty` (a step: its checkpoint is its parent's plus its
/// updates, so a channel without a value is empty), the row marks every
/// channel without a value empty and no blob row is needed for it. `put`
/// does not: its caller may leave out a value its version already stored
/// (LangGraph's Postgres saver reads that blob), so it stores an `empty`
/// row for a listed channel without a value, as that saver's readers expect.
pub(super) fn encode_row(
    checkpoint: &Checkpoint,
    metadata: &Map<String, Value>,
    mark_empty: bool,
) -> Result<(Vec<u8>, String)> {
    // Both are stored as JSON objects: their values sit one level down.
    if let Some((key, _)) =
        metadata.iter().chain(&checkpoint.extra).find(|(_, v)| too_deep(v, MAX_STORED_DEPTH - 1))
    {
        return Err(Error::InvalidArgument(format!(
            "metadata or checkpoint key '{key}' nests too deeply: stored JSON may nest at most \
             {MAX_STORED_DEPTH} levels of objects and arrays (deeper JSON could not be read back)"
        )));
    }
    Ok((row::encode(checkpoint, mark_empty), serde_json::to_string(metadata)?))
}

impl Checkpointer {
    /// Stores `checkpoint` as a child of `config.checkpoint_id` (if any) and
    /// returns its canonical config: LangGraph's `put`.
    ///
    /// Primitive channel values stay inline in the checkpoint row; every
    /// other value is written to `checkpoint_blobs` under its version if its
    /// channel is in `new_versions` (a channel there without a value is
    /// stored as empty). `metadata` is merged with the config's `metadata`
    /// and `extra` entries as LangGraph merges them. Re-putting an existing
    /// id replaces its checkpoint and metadata and keeps its stored parent;
    /// its writes survive.
    ///
    /// Prefer [`step`](Self::step), which computes versions itself. `put`
    /// refuses what would silently lose data:
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `config.thread_id` is empty.
    /// - [`Error::InvalidArgument`] if `checkpoint.id` is empty; if a channel
    ///   has a value but no version; if `new_versions` gives a channel
    ///   another version than `channel_versions`; if a channel whose value is
    ///   not stored inline is left out of `new_versions` and no earlier put
    ///   stored that version (its value would be lost); or if a metadata
    ///   value nests more than 126 levels of objects and arrays (the stored
    ///   JSON could not be read back).
    /// - [`Error::Conflict`] if a version in `new_versions` is already stored
    ///   with another value (a version names one value forever).
    /// - [`Error::Serialization`] if a channel value cannot be encoded.
    /// - [`Error::Busy`], [`Error::DiskFull`], [`Error::Sqlite`] from the
    ///   database; nothing is written then.
    /// - With [`write_behind`](crate::DbBuilder::write_behind), an earlier
    ///   queued write's error (see [`Db::flush`](crate::Db::flush)); this
    ///   call queued nothing then.
    pub fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        metadata: &Metadata,
        new_versions: &ChannelVersions,
    ) -> Result<CheckpointConfig> {
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        let plan = |ch: &str, version, value: Option<&ChannelValue>| match value {
            Some(v) => self.plan_put_blob(thread, ns, ch, version, v),
            None => Ok(PlannedBlob::empty(ch, version)),
        };
        self.put_planned(config, checkpoint, metadata, new_versions, true, plan, |_, _| Ok(None))
    }

    /// `put`'s checks and write; `plan` gives the blob of a channel in
    /// `new_versions` whose value is not stored inline (given its value in
    /// `checkpoint.channel_values`, if any); `unlisted` may give one for a
    /// channel left out of `new_versions`, stored only if its version is not
    /// stored yet (without it, the version must be stored). Without
    /// `verify`, a version in `new_versions` that is already stored keeps
    /// its value too (no byte comparison, no `Conflict`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn put_planned(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        metadata: &Metadata,
        new_versions: &ChannelVersions,
        verify: bool,
        mut plan: impl FnMut(&str, String, Option<&ChannelValue>) -> Result<PlannedBlob>,
        mut unlisted: impl FnMut(&str, String) -> Result<Option<PlannedBlob>>,
    ) -> Result<CheckpointConfig> {
        let planned_at = self.seen.current();
        require_thread(config)?;
        if checkpoint.id.is_empty() {
            return Err(Error::InvalidArgument("checkpoint.id must not be empty".into()));
        }
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        if let Some(ch) =
            checkpoint.channel_values.keys().find(|c| !checkpoint.channel_versions.contains_key(*c))
        {
            return Err(Error::InvalidArgument(format!(
                "channel '{ch}' has a value but no version in channel_versions: it would not be read back"
            )));
        }
        let mut blobs = Vec::new();
        let mut fill = Vec::new();
        // Channels whose stored blob this checkpoint relies on (and whether
        // it has no value for them).
        let mut relied: Vec<(String, String, bool)> = Vec::new();
        for (ch, version) in &checkpoint.channel_versions {
            let value = checkpoint.channel_values.get(ch);
            let inline = value.is_some_and(ChannelValue::is_primitive);
            match new_versions.get(ch) {
                Some(nv) if nv != version => {
                    return Err(Error::InvalidArgument(format!(
                        "channel '{ch}': new_versions says {nv} but channel_versions says {version}"
                    )))
                }
                Some(_) if inline => {}
                Some(_) if verify => blobs.push(plan(ch, version.to_string(), value)?),
                Some(_) => fill.push(plan(ch, version.to_string(), value)?),
                None if inline => {}
                None => match unlisted(ch, version.to_string())? {
                    Some(blob) => fill.push(blob),
                    None => relied.push((ch.clone(), version.to_string(), value.is_none())),
                },
            }
        }
        let metadata = merge_metadata(config, metadata);
        let (checkpoint_row, metadata_json) = encode_row(checkpoint, &metadata, false)?;
        let job = CheckpointJob {
            thread: thread.clone(),
            ns: ns.clone(),
            id: checkpoint.id.clone(),
            parent: config.checkpoint_id.clone(),
            metadata_json,
            checkpoint_row,
            blobs,
            fill,
            relied,
            head: Head::Any,
            retention: self.retention.clone(),
            serde: self.serde.clone(),
            caches: self.caches(),
            planned_at,
            applied_at: super::deletions::UNKNOWN.into(),
        };
        self.submit_checkpoint(job, Vec::new())?;
        Ok(CheckpointConfig::canonical(thread, ns, &checkpoint.id))
    }

    /// Writes a checkpoint job after `writes` (pending writes of other
    /// checkpoints, usually its parent's), in one transaction (in the
    /// caller, through the group committer, or behind the caller: see
    /// [`DbBuilder::write_behind`](crate::DbBuilder::write_behind)), and
    /// remembers its values.
    ///
    /// A write done when the call returns is remembered once it succeeded.
    /// One queued behind the caller is remembered at once (its reads see
    /// it), and if it fails, what this checkpointer cached of its thread is
    /// forgotten before the failure is known to anyone: no read takes a
    /// refused write's value for the file's. (A remembered value never
    /// replaces a cached one: a version holds one value.)
    pub(super) fn submit_checkpoint(&self, job: CheckpointJob, writes: Vec<WritesJob>) -> Result<CacheTag> {
        #[cfg(test)]
        tests::at(tests::Point::Planned);
        let job = Arc::new(job);
        let run = job.clone();
        let apply: crate::commit::Job = Box::new(move |tx| run.apply(tx, &writes));
        // A failed write (rolled back, perhaps with the whole batch it ran
        // in) may have taken or made a count the file does not hold: no
        // count is known after one.
        if !self.db.writes_behind() {
            let tag = self
                .db
                .submit_tagged(apply, Some(&job.thread), None)
                .inspect_err(|_| job.caches.seen.unknown())?;
            if job.remembers() {
                #[cfg(test)]
                tests::at(tests::Point::Committed);
                // Unless a deletion forgot the thread since it committed.
                let at = job.applied_at.load(std::sync::atomic::Ordering::SeqCst);
                self.remember(&job.thread, &job.ns, &job.blobs, Some(at));
            }
            return Ok(tag);
        }
        // A step that continues the head: refused now if another writer of
        // this Db queued a step of the thread that makes another head.
        let claim = match &job.head {
            Head::Is(parent) => Some(Arc::new(super::queued::claim(
                self,
                self.db.queued_heads(),
                &job.thread,
                &job.ns,
                parent.as_deref(),
                &job.id,
            )?)),
            _ => {
                super::queued::forget(self.db.queued_heads(), &job.thread, &job.ns);
                None
            }
        };
        let ran = claim.clone();
        let apply: crate::commit::Job = Box::new(move |tx| {
            apply(tx)?;
            if let Some(c) = &ran {
                c.ran.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(())
        });
        self.remember(&job.thread, &job.ns, &job.blobs, None);
        let (caches, thread, failed) = (self.caches(), job.thread.clone(), claim.clone());
        let undo: crate::commit::Undo = Box::new(move || {
            caches.seen.unknown();
            caches.forget_thread(&thread);
            if let Some(c) = failed {
                c.release();
            }
        });
        // Not queued (an earlier failure of the thread is reported): forgotten now.
        self.db.submit_tagged(apply, Some(&job.thread), Some(undo)).inspect_err(|_| {
            self.forget_thread(&job.thread);
            if let Some(c) = &claim {
                c.release();
            }
        })
    }

    /// A channel value as stored whole: (type tag, bytes).
    pub(super) fn encode_value(&self, value: &ChannelValue) -> Result<(String, Vec<u8>)> {
        match value.as_list() {
            Some(items) => self.serde.dumps_list(&items.iter().collect::<Vec<_>>()),
            None => self.serde.dumps_typed(value.as_value().unwrap_or(&Value::Null)),
        }
    }

    /// Encodes one value `put` stores, as a delta when it extends the list
    /// this process stored last for the channel.
    fn plan_put_blob(
        &self,
        thread: &str,
        ns: &str,
        ch: &str,
        version: String,
        value: &ChannelValue,
    ) -> Result<PlannedBlob> {
        let (tag, bytes) = self.encode_value(value)?;
        let appendable = value.as_list().is_some() && tag == "msgpack" && self.serde.concatenates_arrays();
        Ok(self.plan_bytes(
            thread,
            ns,
            ch,
            version,
            BlobValue::Decoded(value.clone()),
            tag,
            bytes,
            appendable,
        ))
    }

    /// A blob of encoded bytes, planned as a delta of the list this process
    /// stored last for the channel if `appendable` and that list is a
    /// prefix of this one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_bytes(
        &self,
        thread: &str,
        ns: &str,
        ch: &str,
        version: String,
        value: BlobValue,
        tag: String,
        bytes: Vec<u8>,
        appendable: bool,
    ) -> PlannedBlob {
        let delta = appendable
            .then(|| self.bases.get(thread, ns, ch))
            .flatten()
            .filter(|_| bytes.len() >= delta::MIN_DELTA_BASE)
            .and_then(|b| delta::delta(&b.bytes, &bytes).map(|d| (b.version, d)));
        PlannedBlob { channel: ch.to_string(), version, value, tag, full: Arc::new(bytes), appendable, delta }
    }

    /// After a write: the values written go to the value cache, the lists
    /// to the delta bases. (A version that was already stored holds the
    /// same value and bytes, so it is as good a base.) `committed`: the
    /// deletion count the write's transaction left, if it has run: the
    /// values are cached only if no deletion the caches forgot came after
    /// it (see `deletions::Seen::admits`); a write queued behind the caller
    /// is remembered before it runs.
    pub(super) fn remember(&self, thread: &str, ns: &str, blobs: &[PlannedBlob], committed: Option<i64>) {
        let admitted = || committed.is_none_or(|c| self.seen.admits(Some(c)));
        for b in blobs {
            let key: BlobKey = (thread.to_string(), ns.to_string(), b.channel.clone(), b.version.clone());
            let cost = b.full.len() + b.delta.as_ref().map_or(0, |d| d.1.len());
            match &b.value {
                BlobValue::Empty => self.values.insert_new(key, None, 0, admitted),
                BlobValue::Decoded(v) => {
                    // A delta's elements end the list: it starts where they do.
                    let appended = b.delta.as_ref().and_then(|(_, d)| delta::array_header(d));
                    let start = appended.zip(v.as_list()).and_then(|((n, _), l)| l.len().checked_sub(n));
                    if let Some(start) = start {
                        self.starts.insert_new(key.clone(), (b.tag.clone(), start), 0, admitted);
                    }
                    self.values.insert_new(key, Some(v.clone()), cost, admitted)
                }
                BlobValue::Encoded => {}
            }
            if b.appendable {
                let next = delta::Base { version: b.version.clone(), bytes: b.full.clone() };
                self.bases.set(thread, ns, &b.channel, next, admitted);
            }
        }
    }

    /// Stores the writes a task produced for the checkpoint
    /// `config.checkpoint_id`: LangGraph's `put_writes`.
    ///
    /// The write at position `i` gets `idx = i`, except the special channels
    /// (`__error__` -1, `__scheduled__` -2, `__interrupt__` -3, `__resume__`
    /// -4). If every write of the call is special the rows are upserted (last
    /// writer wins); otherwise every row is insert-or-ignore (first writer
    /// wins, so retries are idempotent).
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `thread_id` is empty or `checkpoint_id`
    ///   is missing or empty (an empty id means "the newest" to every read,
    ///   so a write under it could never be read).
    /// - [`Error::Serialization`] if a value cannot be encoded.
    /// - database errors as for [`put`](Self::put); nothing is written then
    ///   (with write-behind, also an earlier queued write's error).
    pub fn put_writes<C: AsRef<str>>(
        &self,
        config: &CheckpointConfig,
        writes: &[(C, Value)],
        task_id: &str,
        task_path: &str,
    ) -> Result<()> {
        self.submit_writes(config, self.encode_writes(writes)?, task_id, task_path)
    }

    /// Writes as `(channel, type tag, bytes)` rows.
    pub(super) fn encode_writes<C: AsRef<str>>(
        &self,
        writes: &[(C, Value)],
    ) -> Result<Vec<(String, String, Vec<u8>)>> {
        let mut rows = Vec::with_capacity(writes.len());
        for (channel, value) in writes {
            let (tag, bytes) = self.serde.dumps_typed(value)?;
            rows.push((channel.as_ref().to_string(), tag, bytes));
        }
        Ok(rows)
    }

    /// `put_writes` of encoded `(channel, type tag, bytes)` rows.
    pub(super) fn submit_writes(
        &self,
        config: &CheckpointConfig,
        rows: Vec<(String, String, Vec<u8>)>,
        task_id: &str,
        task_path: &str,
    ) -> Result<()> {
        match writes_job(config, rows, task_id, task_path)? {
            Some(job) => self.db.submit(Box::new(move |tx| job.apply(tx)), Some(&config.thread_id)),
            None => Ok(()),
        }
    }
}

/// The job of one `put_writes` call of encoded `(channel, type tag, bytes)`
/// rows (`None`: no rows, nothing to write), with LangGraph's idx map: a
/// call whose writes all go to special channels replaces stored rows.
///
/// # Errors
/// [`Error::InvalidConfig`] if the thread id is empty or `config` names no
/// checkpoint.
pub(super) fn writes_job(
    config: &CheckpointConfig,
    rows: Vec<(String, String, Vec<u8>)>,
    task_id: &str,
    task_path: &str,
) -> Result<Option<WritesJob>> {
    require_thread(config)?;
    let checkpoint_id =
        config.checkpoint_id.as_deref().filter(|id| !id.is_empty()).ok_or_else(|| {
            Error::InvalidConfig("put_writes needs config.checkpoint_id (not empty)".into())
        })?;
    if rows.is_empty() {
        return Ok(None);
    }
    let all_special = rows.iter().all(|(c, _, _)| special_idx(c).is_some());
    Ok(Some(WritesJob {
        thread: config.thread_id.clone(),
        ns: config.checkpoint_ns.clone(),
        checkpoint_id: checkpoint_id.to_string(),
        task_id: task_id.to_string(),
        task_path: task_path.to_string(),
        upsert: all_special,
        rows: rows
            .into_iter()
            .enumerate()
            .map(|(i, (c, t, b))| {
                let idx = special_idx(&c).unwrap_or(i as i64);
                (c, idx, Some(t), b)
            })
            .collect(),
        target: None,
    }))
}

/// The sorted names of `channels`.
pub(super) fn sorted(channels: impl IntoIterator<Item = String>) -> Vec<String> {
    channels.into_iter().collect::<BTreeSet<_>>().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::json;

    use crate::checkpoint::{ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, Metadata};
    use crate::{Checkpointer, Db};

    /// Where a write in the caller stops to run the hook its thread set.
    #[derive(Clone, Copy, PartialEq)]
    pub(super) enum Point {
        /// Planned (its lists as deltas of what the checkpointer cached),
        /// not yet written.
        Planned,
        /// Committed, its values not yet cached.
        Committed,
    }

    type Hook = (Point, Box<dyn FnOnce()>);

    thread_local! {
        /// Runs once, in the writing thread, when a write reaches the point.
        static HOOK: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn at(point: Point) {
        let hook = HOOK.with(|h| {
            let mut h = h.borrow_mut();
            h.as_ref().is_some_and(|(p, _)| *p == point).then(|| h.take()).flatten()
        });
        if let Some((_, f)) = hook {
            f();
        }
    }

    fn set(point: Point, f: impl FnOnce() + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some((point, Box::new(f))));
    }

    fn hook_ran() -> bool {
        HOOK.with(|h| h.borrow().is_none())
    }

    /// A LangGraph-shaped put of `m` at `version` (a caller's own
    /// versions: plain integers) after `parent`.
    fn put_m(saver: &Checkpointer, id: &str, parent: Option<&str>, m: serde_json::Value, version: i64) {
        put_at(saver, id, parent, m, ChannelVersion::Int(version));
    }

    /// [`put_m`] at any version.
    fn put_at(
        saver: &Checkpointer,
        id: &str,
        parent: Option<&str>,
        m: serde_json::Value,
        version: ChannelVersion,
    ) {
        let mut cp = Checkpoint::with_id(id);
        cp.channel_values.insert("m".into(), m.into());
        cp.channel_versions.insert("m".into(), version.clone());
        let mut new = ChannelVersions::new();
        new.insert("m".into(), version);
        let config = CheckpointConfig::thread("t");
        let config = match parent {
            Some(p) => config.at(p),
            None => config,
        };
        saver.put(&config, &cp, &Metadata::new(), &new).unwrap();
    }

    /// On another thread, as another caller of the same checkpointer would.
    fn elsewhere(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    /// Another thread deletes the thread between a put's commit and the
    /// put's values going to the caches: they stay out, so the version
    /// stored again with another value reads back as stored.
    #[test]
    fn a_write_is_not_remembered_after_a_delete_that_followed_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let saver = Db::open(dir.path().join("c.db")).unwrap().checkpointer();
        let other = saver.clone();
        set(Point::Committed, move || elsewhere(move || other.delete_thread("t").unwrap()));
        put_m(&saver, "1f000000-0000-6000-8000-000000000001", None, json!(["first"]), 1);
        assert!(hook_ran());
        put_m(&saver, "1f000000-0000-6000-8000-000000000002", None, json!(["second"]), 1);
        let read = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
        assert_eq!(read.checkpoint.channel_values["m"], json!(["second"]));
    }

    /// A write planned as a delta of a version, then the thread deleted
    /// and that version stored again with another value (by another caller
    /// of the same checkpointer) before the write runs: the write stores
    /// its list whole, not as a delta of the other value.
    #[test]
    fn a_write_planned_before_a_delete_does_not_extend_a_version_stored_again() {
        let list =
            |tag: &str, n: usize| json!((0..n).map(|i| format!("{tag} message {i:04}")).collect::<Vec<_>>());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let saver = Db::open(&path).unwrap().checkpointer();
        let ids = ["1f000000-0000-6000-8000-000000000001", "1f000000-0000-6000-8000-000000000002"];
        put_m(&saver, ids[0], None, list("mine", 1000), 1);
        let other = saver.clone();
        set(Point::Planned, move || {
            elsewhere(move || {
                other.delete_thread("t").unwrap();
                put_m(&other, ids[0], None, list("theirs", 500), 1);
            })
        });
        put_m(&saver, ids[1], Some(ids[0]), list("mine", 1001), 2);
        assert!(hook_ran());
        let fresh = Db::open(&path).unwrap().checkpointer();
        let read = fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
        assert_eq!(read.checkpoint.id, ids[1]);
        let m = &read.checkpoint.channel_values["m"];
        assert!(*m == list("mine", 1001), "stored as a delta of theirs: {}", &m.to_string()[..60]);
    }

    /// The same through a retention trim of the checkpointer: another
    /// writer makes the planned write's base fall out of the window, the
    /// trim deletes it, and it is stored again with another value before
    /// the write runs. With plain integers and with LangGraph's padded
    /// string versions (stored under a shorter key).
    #[test]
    fn a_write_planned_before_a_trim_does_not_extend_a_trimmed_version_stored_again() {
        let list =
            |tag: &str, n: usize| json!((0..n).map(|i| format!("{tag} message {i:04}")).collect::<Vec<_>>());
        let int = |n: i64| ChannelVersion::Int(n);
        let padded = |n: i64| ChannelVersion::Str(format!("{n:032}.0.5"));
        for version in [int, padded] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("c.db");
            let saver = Db::open(&path).unwrap().checkpointer();
            let id = |n: u32| format!("1f000000-0000-6000-8000-{n:012}");
            put_at(&saver, &id(1), None, list("mine", 1000), version(1));
            let other = saver.clone();
            let (newer, again) = (id(3), id(4));
            set(Point::Planned, move || {
                elsewhere(move || {
                    put_at(&other, &newer, None, list("newer", 3), version(7));
                    assert_eq!(
                        other.apply_retention(&crate::checkpoint::Retention::keep_last(1)).unwrap(),
                        1
                    );
                    put_at(&other, &again, None, list("theirs", 500), version(1));
                })
            });
            put_at(&saver, &id(2), Some(&id(1)), list("mine", 1001), version(2));
            assert!(hook_ran());
            let fresh = Db::open(&path).unwrap().checkpointer();
            let read = fresh.get_tuple(&CheckpointConfig::thread("t").at(id(2))).unwrap().unwrap();
            let m = &read.checkpoint.channel_values["m"];
            assert!(*m == list("mine", 1001), "stored as a delta of theirs: {}", &m.to_string()[..60]);
        }
    }
}
