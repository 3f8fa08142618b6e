//! What a checkpoint write does inside its transaction: the owned jobs
//! ([`CheckpointJob`], [`WritesJob`]) that `put`, `put_writes` and
//! [`Step`](super::Step) hand to the caller's connection or to the commit
//! thread (and that run again if their transaction is retried), and the
//! row writers they share.

use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use super::cache::BlobKey;
use super::chain::load_blob_bytes;
use super::compact;
use super::delta;
use super::maintain::trim;
use super::packed::{self, Entry};
use super::read::{find_row, parse_row};
use super::retention::Retention;
use super::row;
use super::types::{ChannelVersions, CheckpointConfig};
use super::write::{BlobValue, PlannedBlob};
use super::ThreadCaches;
use crate::codec::Serializer;
use crate::error::{Error, Result};

/// The rows of one task's writes to one checkpoint, owned, so that the
/// write can run on the commit thread.
pub(super) struct WritesJob {
    pub(super) thread: String,
    pub(super) ns: String,
    pub(super) checkpoint_id: String,
    pub(super) task_id: String,
    pub(super) task_path: String,
    /// Replace stored rows (special channels) instead of keeping them.
    pub(super) upsert: bool,
    /// (channel, idx, type tag (`None`: NULL), bytes)
    pub(super) rows: Vec<(String, i64, Option<String>, Vec<u8>)>,
    /// The channel versions of the checkpoint the writes are pending on, if
    /// the caller has them (else read when needed).
    pub(super) target: Option<ChannelVersions>,
}

impl WritesJob {
    /// Stores the writes in the task's row of the checkpoint (merged into
    /// the row an earlier call stored, by LangGraph's rules: see
    /// [`packed::merge`]).
    pub(super) fn apply(&self, tx: &Connection) -> Result<()> {
        self.apply_sharing(tx, &[])
    }

    /// [`apply`](Self::apply); a write whose type and bytes are those of a
    /// delta row of `appended` (same channel) refers to that row instead of
    /// holding the bytes again.
    pub(super) fn apply_sharing(&self, tx: &Connection, appended: &[StoredDelta]) -> Result<()> {
        // The versions of the checkpoint the writes are pending on (given,
        // or read once if a write could be one of its lists' appended
        // elements).
        let mut read: Option<Option<ChannelVersions>> = None;
        let mut new: Vec<Entry> = Vec::with_capacity(self.rows.len());
        for (channel, idx, tag, bytes) in &self.rows {
            let mut shared = appended
                .iter()
                .find(|(c, _, t, b)| c == channel && Some(t) == tag.as_ref() && b == bytes)
                .map(|(_, key, _, _)| key.clone());
            if shared.is_none() && tag.as_deref() == Some("msgpack") && delta::array_header(bytes).is_some() {
                if self.target.is_none() && read.is_none() {
                    let config = CheckpointConfig::thread(self.thread.clone())
                        .ns(self.ns.clone())
                        .at(self.checkpoint_id.clone());
                    read = Some(match find_row(tx, &config)? {
                        Some(row) => parse_row(&row).ok().map(|(stored, _)| stored.channel_versions),
                        None => None,
                    });
                }
                let target = self.target.as_ref().or(read.as_ref().and_then(Option::as_ref));
                if let Some(version) = target.and_then(|t| t.get(channel)) {
                    shared = self.own_delta(tx, channel, &version.to_string(), bytes)?;
                }
            }
            new.push(Entry {
                idx: *idx,
                channel: channel.clone(),
                tag: tag.clone(),
                bytes: if shared.is_some() { Vec::new() } else { bytes.clone() },
                blob: shared,
            });
        }
        self.merge_into(tx, new)
    }

    /// The key of `channel`'s delta row at `version` if it holds exactly
    /// `bytes` (a write of the elements its own checkpoint appended).
    fn own_delta(
        &self,
        tx: &Connection,
        channel: &str,
        version: &str,
        bytes: &[u8],
    ) -> Result<Option<String>> {
        let key = compact::blob_key(version).into_owned();
        let same: bool = tx
            .prepare_cached(
                "SELECT blob = ?5 FROM checkpoint_blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                 AND channel = ?3 AND version = ?4 AND type = 'msgpack' AND base_version IS NOT NULL",
            )?
            .query_row(params![self.thread, self.ns, channel, key, bytes], |r| r.get(0))
            .optional()?
            .unwrap_or(false);
        Ok(same.then_some(key))
    }

    /// Stores `new` (this job's entries) in the task's row, merged into
    /// what it holds by LangGraph's rules ([`packed::merge`]).
    pub(super) fn merge_into(&self, tx: &Connection, new: Vec<Entry>) -> Result<()> {
        // Most often the task has no row yet: insert it, and merge only if
        // one is there (one B-tree seek instead of a read and then a write).
        let fresh = packed::merge(Vec::new(), new, self.upsert);
        let inserted = tx
            .prepare_cached(
                "INSERT INTO checkpoint_writes \
                 (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, n, writes) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                self.thread,
                self.ns,
                self.checkpoint_id,
                self.task_id,
                self.task_path,
                fresh.len() as i64,
                packed::pack(&fresh)
            ])?;
        if inserted == 1 {
            return Ok(());
        }
        let (path, bytes): (String, Vec<u8>) = tx
            .prepare_cached(
                "SELECT task_path, writes FROM checkpoint_writes \
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 AND task_id = ?4",
            )?
            .query_row(params![self.thread, self.ns, self.checkpoint_id, self.task_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        let old = packed::unpack_row(&bytes, &self.thread, &self.checkpoint_id, &self.task_id)?;
        let merged = packed::merge(old.clone(), fresh, self.upsert);
        if merged == old {
            return Ok(());
        }
        // An upsert replaces the rows it writes, task path included.
        let path = if self.upsert { self.task_path.clone() } else { path };
        self.store(tx, &path, &merged)
    }

    fn store(&self, tx: &Connection, task_path: &str, entries: &[Entry]) -> Result<()> {
        tx.prepare_cached(
            "INSERT OR REPLACE INTO checkpoint_writes \
             (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, n, writes) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            self.thread,
            self.ns,
            self.checkpoint_id,
            self.task_id,
            task_path,
            entries.len() as i64,
            packed::pack(entries)
        ])?;
        Ok(())
    }
}

/// What a checkpoint write requires of the (thread, namespace)'s newest
/// checkpoint when it runs.
pub(super) enum Head {
    /// Nothing (LangGraph's `put`).
    Any,
    /// It must be this checkpoint (`None`: there must be none): a step.
    Is(Option<String>),
    /// This checkpoint must exist: a fork.
    Exists(String),
}

/// One checkpoint write, owned, so that it can run on the commit thread (and
/// again, if its transaction is retried).
pub(super) struct CheckpointJob {
    pub(super) thread: String,
    pub(super) ns: String,
    pub(super) id: String,
    pub(super) parent: Option<String>,
    pub(super) metadata_json: String,
    /// The checkpoint row ([`row`] format).
    pub(super) checkpoint_row: Vec<u8>,
    pub(super) blobs: Vec<PlannedBlob>,
    /// Blobs stored only if their version is not stored yet (the stored
    /// value wins): values of channels left out of `new_versions`.
    pub(super) fill: Vec<PlannedBlob>,
    /// (channel, version, the checkpoint has no value for it) blobs that
    /// must already be stored; one without a value may instead be empty at
    /// that version in the parent's row (see [`parent_marks_empty`]).
    pub(super) relied: Vec<(String, String, bool)>,
    pub(super) head: Head,
    pub(super) retention: Option<Arc<Retention>>,
    /// Encodes a list whole when its planned delta cannot be stored.
    pub(super) serde: Arc<dyn Serializer>,
    /// The writer's caches: a planned delta extends the list its bases
    /// cache remembers, which holds only while no one else has deleted
    /// blobs since (see `deletions`).
    pub(super) caches: ThreadCaches,
    /// The deletion count the caches knew when the blobs were planned (see
    /// `deletions::Seen::extends`).
    pub(super) planned_at: i64,
    /// The count its transaction left (see [`remembers`](Self::remembers)).
    pub(super) applied_at: std::sync::atomic::AtomicI64,
}

impl CheckpointJob {
    /// After the job committed in the caller: whether what it wrote may be
    /// remembered (as values and as bases to extend), which holds while no
    /// one else has deleted since (a read that saw a deletion in between
    /// emptied the caches; remembering after it would bring back a base
    /// that may be gone).
    pub(super) fn remembers(&self) -> bool {
        self.applied_at.load(std::sync::atomic::Ordering::SeqCst) == self.caches.seen.current()
    }

    /// Stores the checkpoint, its blobs, and `writes` (pending writes of
    /// its parent's tasks, made before it: a write whose bytes are exactly
    /// the elements this checkpoint appends to a list is stored as a
    /// reference to that blob row, not a second time).
    pub(super) fn apply(&self, tx: &Connection, writes: &[WritesJob]) -> Result<()> {
        let (thread, ns) = (&self.thread, &self.ns);
        match &self.head {
            Head::Any => {}
            Head::Is(parent) => {
                let head = head_id(tx, thread, ns)?;
                if head != *parent {
                    return Err(not_head(thread, ns, parent.as_deref(), head.as_deref()));
                }
            }
            Head::Exists(parent) => {
                let stored = |id: &str| -> Result<bool> {
                    Ok(tx
                        .prepare_cached(
                            "SELECT EXISTS(SELECT 1 FROM checkpoints \
                             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3)",
                        )?
                        .query_row(params![thread, ns, id], |r| r.get(0))?)
                };
                if !stored(parent)? {
                    return Err(Error::NotFound(format!(
                        "checkpoint {parent} of thread '{thread}' (namespace '{ns}') to fork from"
                    )));
                }
                // A fork's id (given by `Step::id`) sorts after its parent's,
                // not after every checkpoint's: it may name one that exists,
                // which a step never replaces. (A step that continues the
                // head sorts after every checkpoint of the thread.)
                if stored(&self.id)? {
                    return Err(Error::Conflict(format!(
                        "checkpoint {} of thread '{thread}' (namespace '{ns}') already exists: a step never \
                         replaces a checkpoint; give the fork another id",
                        self.id
                    )));
                }
            }
        }
        let mut exists = tx.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM checkpoint_blobs \
             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4)",
        )?;
        for (ch, version, valueless) in &self.relied {
            let key = compact::blob_key(version);
            if exists.query_row(params![thread, ns, ch, key], |r| r.get::<_, bool>(0))? {
                continue;
            }
            // A step left it empty at this version without a blob row: so
            // is this checkpoint, now with one (its row does not mark it).
            if *valueless && parent_marks_empty(tx, thread, ns, self.parent.as_deref(), ch, version)? {
                tx.prepare_cached(
                    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob, chain) \
                     VALUES (?1, ?2, ?3, ?4, 'empty', NULL, 0)",
                )?
                .execute(params![thread, ns, ch, key])?;
            } else {
                return Err(Error::InvalidArgument(format!(
                    "channel '{ch}' is at version {version}, which no earlier put stored, and is not in \
                     new_versions: its value would be lost (list every changed channel in new_versions)"
                )));
            }
        }
        // Someone else deleted blobs since the bases were remembered: the
        // versions they name may hold other lists now, so lists are stored
        // whole.
        let mut now = self.caches.sync_write(tx)?;
        let extend = self.caches.seen.extends(self.planned_at, now);
        let extend = extend.as_deref();
        let mut appended = write_blobs(tx, thread, ns, &self.blobs, &*self.serde, true, extend)?;
        appended.extend(write_blobs(tx, thread, ns, &self.fill, &*self.serde, false, extend)?);
        for w in writes {
            let shared: &[StoredDelta] = if (&w.thread, &w.ns) == (thread, ns) { &appended } else { &[] };
            w.apply_sharing(tx, shared)?;
        }
        insert_checkpoint(
            tx,
            thread,
            ns,
            &self.id,
            self.parent.as_deref(),
            &self.metadata_json,
            &self.checkpoint_row,
        )?;
        if let Some(policy) = &self.retention {
            if policy.due(tx, thread, ns)? && trim(tx, thread, ns, policy, &self.caches)? > 0 {
                now = self.caches.deleted(tx, now, true)?;
            }
        }
        self.applied_at.store(now, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// A delta row a write just inserted: (channel, version key, type tag,
/// the row's bytes).
pub(super) type StoredDelta = (String, String, String, Vec<u8>);

/// Inserts `blobs` (a delta only if its base is still there, as the next
/// link of the base's chain). A version already stored is left as it is;
/// with `verify` it must hold the same value, another value is
/// [`Error::Conflict`]. Returns the delta rows it inserted.
pub(super) fn write_blobs(
    tx: &Connection,
    thread: &str,
    ns: &str,
    blobs: &[PlannedBlob],
    serde: &dyn Serializer,
    verify: bool,
    extend: Option<&[BlobKey]>,
) -> Result<Vec<StoredDelta>> {
    let mut appended = Vec::new();
    let mut ins = tx.prepare_cached(
        "INSERT INTO checkpoint_blobs \
         (thread_id, checkpoint_ns, channel, version, type, blob, base_version, chain, root_version) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
    )?;
    let mut base_row = tx.prepare_cached(
        "SELECT base_version, root_version, chain FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4 AND type = 'msgpack'",
    )?;
    for b in blobs {
        // (base, delta bytes, chain position, chain root)
        let mut delta = None;
        // Planned deltas are stored as such if `extend` allows (see
        // `deletions::Seen::extends`) and their base is not among the
        // versions it lists as trimmed since.
        let whole = |base: &str| {
            extend.is_none_or(|gone| {
                gone.iter().any(|k| (&*k.0, &*k.1, &*k.2, &*k.3) == (thread, ns, &*b.channel, base))
            })
        };
        if let Some((base, bytes)) = b.delta.as_ref().filter(|(base, _)| !whole(base)) {
            type BaseRow = (Option<String>, Option<String>, i64);
            let found: Option<BaseRow> = base_row
                .query_row(params![thread, ns, b.channel, compact::blob_key(base)], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let found = match found {
                Some((base, root, chain)) => Some((
                    base.map(compact::blob_version_of).transpose()?,
                    root.map(compact::blob_version_of).transpose()?,
                    chain,
                )),
                None => None,
            };
            // A full blob roots a chain; a delta continues its base's chain
            // (a delta of a file older than chain roots starts none).
            let root = match &found {
                Some((None, _, _)) => Some(base.clone()),
                Some((Some(_), root, _)) => root.clone(),
                None => None,
            };
            // A base at the largest chain position (a damaged file) is
            // extended by no delta: the list is stored whole.
            let next = found.as_ref().and_then(|(_, _, chain)| chain.checked_add(1));
            if let (Some(chain), Some(root)) = (next, root) {
                delta = Some((base, bytes, chain, root));
            }
        }
        // A step plans only the appended elements: without a base to extend,
        // the list is stored whole.
        let whole;
        let full: &[u8] = if delta.is_none() && b.full.is_empty() && b.delta.is_some() {
            let list = match &b.value {
                BlobValue::Decoded(v) => v.as_list(),
                _ => None,
            };
            whole = match list {
                Some(items) => serde.dumps_list(&items.iter().collect::<Vec<_>>())?.1,
                None => Vec::new(),
            };
            &whole
        } else {
            &b.full
        };
        type Cols<'a> = (Option<&'a [u8]>, Option<&'a String>, i64, Option<String>);
        let (bytes, base, chain, root): Cols<'_> = match (&b.value, delta) {
            (BlobValue::Empty, _) => (None, None, 0, None),
            (_, Some((base, bytes, chain, root))) => (Some(bytes), Some(base), chain, Some(root)),
            (_, None) => (Some(full), None, 0, None),
        };
        let key = |v: &str| compact::blob_key(v).into_owned();
        let inserted = ins.execute(params![
            thread,
            ns,
            b.channel,
            key(&b.version),
            b.tag,
            bytes,
            base.map(|v| key(v)),
            chain,
            root.map(|v| key(&v))
        ])? == 1;
        if !inserted && verify {
            same_as_stored(tx, thread, ns, b)?;
        }
        if let (true, Some(_), Some(bytes)) = (inserted, base, bytes) {
            appended.push((b.channel.clone(), key(&b.version), b.tag.clone(), bytes.to_vec()));
        }
    }
    Ok(appended)
}

/// [`Error::Conflict`] unless the stored blob of `b`'s version holds `b`'s
/// value (a retried write is fine; a reused version is not).
fn same_as_stored(tx: &Connection, thread: &str, ns: &str, b: &PlannedBlob) -> Result<()> {
    let key: BlobKey = (thread.to_string(), ns.to_string(), b.channel.clone(), b.version.clone());
    let same = match (load_blob_bytes(tx, &key)?, &b.value) {
        (Some((tag, _)), BlobValue::Empty) => tag == "empty",
        (Some((tag, bytes)), _) => tag == b.tag && bytes == *b.full,
        (None, _) => false,
    };
    if same {
        return Ok(());
    }
    Err(Error::Conflict(format!(
        "channel '{}' version {} of thread '{thread}' already holds another value: a changed value needs a new \
         version",
        b.channel, b.version
    )))
}

/// Whether the checkpoint `parent` of (thread, ns) marks `channel` empty
/// at `version` in its row (a step's row does: see
/// [`encode_row`](super::write::encode_row)).
fn parent_marks_empty(
    tx: &Connection,
    thread: &str,
    ns: &str,
    parent: Option<&str>,
    channel: &str,
    version: &str,
) -> Result<bool> {
    let Some(parent) = parent else { return Ok(false) };
    let Some(row) = find_row(tx, &CheckpointConfig::canonical(thread, ns, parent))? else { return Ok(false) };
    // A damaged parent marks nothing: the put is refused as it was.
    let Ok((stored, _)) = parse_row(&row) else { return Ok(false) };
    Ok(stored.empty.iter().any(|c| c == channel)
        && stored.channel_versions.get(channel).is_some_and(|v| v.to_string() == version))
}

/// The id of the newest checkpoint of (`thread`, `ns`).
pub(super) fn head_id(tx: &Connection, thread: &str, ns: &str) -> Result<Option<String>> {
    Ok(tx
        .prepare_cached(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
             ORDER BY checkpoint_id DESC LIMIT 1",
        )?
        .query_row(params![thread, ns], |r| r.get(0))
        .optional()?)
}

/// The `Conflict` of a step that continues `parent` (`None`: a thread's
/// first checkpoint) when the head of (`thread`, `ns`) is `head`.
pub(super) fn not_head(thread: &str, ns: &str, parent: Option<&str>, head: Option<&str>) -> Error {
    Error::Conflict(match (parent, head) {
        (None, h) => format!(
            "thread '{thread}' (namespace '{ns}') already has checkpoint {}: continue it with step()",
            h.unwrap_or("<none>")
        ),
        (Some(p), None) => format!(
            "checkpoint {p} is no longer the newest of thread '{thread}' (namespace '{ns}'): the thread has no \
             checkpoint any more (it was deleted meanwhile); start it again"
        ),
        (Some(p), Some(h)) => format!(
            "checkpoint {p} is no longer the newest of thread '{thread}' (namespace '{ns}'; newest: {h}): another \
             writer continued it; read the newest and retry, or fork on purpose"
        ),
    })
}

/// Inserts (or, for an existing id, replaces) a checkpoint row.
pub(super) fn insert_checkpoint(
    tx: &Connection,
    thread: &str,
    ns: &str,
    id: &str,
    parent: Option<&str>,
    metadata_json: &str,
    checkpoint_row: &[u8],
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO checkpoints \
         (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, metadata, checkpoint, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) \
         DO UPDATE SET type = excluded.type, checkpoint = excluded.checkpoint, metadata = excluded.metadata",
    )?
    // The column's default, `strftime('%Y-%m-%d %H:%M:%f', 'now')`, made
    // here: SQLite parses that format on every insert.
    .execute(params![thread, ns, id, parent, row::TYPE, metadata_json, checkpoint_row, super::id::sqlite_now()])?;
    Ok(())
}
