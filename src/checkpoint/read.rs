//! Reading checkpoints: rows, their channel values (decoded once, shared)
//! and their pending writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::cache::{AsKey, BlobKey, KeyRef, KnownWrites, TupleCache};
use super::chain;
use super::compact;
use super::packed;
use super::row::{self, RowFormat};
use super::types::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, Metadata, PendingWrite};
use super::value::ChannelValue;
use super::{require_thread, Checkpointer};
use crate::error::{Error, Result};
use crate::hash::FastMap;

/// A `checkpoints` row before its blobs and writes are attached.
#[derive(Clone, PartialEq)]
pub(super) struct Row {
    pub(super) thread_id: String,
    pub(super) ns: String,
    pub(super) id: String,
    pub(super) parent: Option<String>,
    pub(super) metadata: String,
    /// The `checkpoint` column as stored.
    pub(super) checkpoint: Vec<u8>,
    /// The format of `checkpoint`.
    pub(super) format: RowFormat,
}

pub(super) const ROW_COLUMNS: &str =
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata, checkpoint, type";

/// The row `r` (read with [`ROW_COLUMNS`]): the one a cache entry holds if
/// equal (nothing allocated), else read.
pub(super) fn shared_row(saver: &Checkpointer, r: &rusqlite::Row<'_>) -> rusqlite::Result<Arc<Row>> {
    match saver.checkpoints.row(r) {
        Some(row) => Ok(row),
        None => read_row(r).map(Arc::new),
    }
}

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        thread_id: r.get(0)?,
        ns: r.get(1)?,
        id: r.get(2)?,
        parent: r.get(3)?,
        metadata: text_or_blob(r, 4)?,
        checkpoint: match r.get_ref(5)? {
            rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b.to_vec(),
            _ => b"{}".to_vec(),
        },
        format: RowFormat::of(r, 6)?,
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

/// The checkpoint JSON as stored: only primitive values inline.
#[derive(Deserialize)]
pub(super) struct StoredRow {
    pub(super) v: i64,
    /// Absent from compact rows (their `checkpoint_id` column holds it).
    #[serde(default)]
    pub(super) id: String,
    pub(super) ts: String,
    #[serde(default)]
    pub(super) channel_values: Map<String, Value>,
    /// Channels the row marks empty (MessagePack rows since migration 8;
    /// older rows store an `empty` blob instead).
    #[serde(skip)]
    pub(super) empty: Vec<String>,
    #[serde(default)]
    pub(super) channel_versions: ChannelVersions,
    #[serde(default)]
    pub(super) versions_seen: BTreeMap<String, ChannelVersions>,
    #[serde(default)]
    pub(super) updated_channels: Option<Vec<String>>,
    #[serde(flatten)]
    pub(super) extra: Map<String, Value>,
}

/// The row of `config.checkpoint_id`, or the newest of the thread and
/// namespace without one (or with `""`: LangGraph reads an empty id as
/// none).
pub(super) fn find_row(tx: &Connection, config: &CheckpointConfig) -> Result<Option<Row>> {
    query_row(tx, config, read_row)
}

/// [`find_row`], the one a cache entry holds if equal (see [`shared_row`]).
fn find_shared_row(
    saver: &Checkpointer,
    tx: &Connection,
    config: &CheckpointConfig,
) -> Result<Option<Arc<Row>>> {
    query_row(tx, config, |r| shared_row(saver, r))
}

fn query_row<T>(
    tx: &Connection,
    config: &CheckpointConfig,
    read: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Option<T>> {
    Ok(match config.checkpoint_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => tx
            .prepare_cached(&format!(
                "SELECT {ROW_COLUMNS} FROM checkpoints \
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
            ))?
            .query_row(params![config.thread_id, config.checkpoint_ns, id], read)
            .optional()?,
        None => tx
            .prepare_cached(&format!(
                "SELECT {ROW_COLUMNS} FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                 ORDER BY checkpoint_id DESC LIMIT 1"
            ))?
            .query_row(params![config.thread_id, config.checkpoint_ns], read)
            .optional()?,
    })
}

impl StoredRow {
    /// The checkpoint, with `channel_values` for its values.
    pub(super) fn into_checkpoint(self, channel_values: BTreeMap<String, ChannelValue>) -> Checkpoint {
        Checkpoint {
            v: self.v,
            id: self.id,
            ts: self.ts,
            channel_values,
            channel_versions: self.channel_versions,
            versions_seen: self.versions_seen,
            updated_channels: self.updated_channels,
            extra: self.extra,
        }
    }
}

/// The checkpoint and the metadata of a row, parsed.
pub(super) fn parse_row(row: &Row) -> Result<(StoredRow, Metadata)> {
    parse_row_with(row, &mut row::VersionTexts::default())
}

/// [`parse_row`], building version texts through `texts`.
fn parse_row_with(row: &Row, texts: &mut row::VersionTexts) -> Result<(StoredRow, Metadata)> {
    let mut stored = match row.format {
        RowFormat::Msgpack => {
            let d = row::decode_with(&row.checkpoint, texts)
                .map_err(|e| Error::corrupt(format!("checkpoint {}: {e}", row.id)))?;
            StoredRow {
                v: d.v,
                id: String::new(),
                ts: d.ts,
                channel_values: d.channel_values,
                empty: d.empty,
                channel_versions: d.channel_versions,
                versions_seen: d.versions_seen,
                updated_channels: d.updated_channels,
                extra: d.extra,
            }
        }
        RowFormat::Json | RowFormat::Compact => {
            serde_json::from_str(&String::from_utf8_lossy(&row.checkpoint))
                .map_err(|e| Error::corrupt_from(format!("checkpoint {} does not parse", row.id), e))?
        }
    };
    if stored.id.is_empty() {
        stored.id.clone_from(&row.id);
    }
    if row.format == RowFormat::Compact {
        let bad = |v: String| {
            Error::corrupt(format!("checkpoint {}: version {v:?} is not a stored version", row.id))
        };
        compact::expand_all(&mut stored.channel_versions).map_err(bad)?;
        for seen in stored.versions_seen.values_mut() {
            compact::expand_all(seen).map_err(bad)?;
        }
    }
    let metadata: Metadata = serde_json::from_str(&row.metadata)
        .map_err(|e| Error::corrupt_from(format!("metadata of checkpoint {} does not parse", row.id), e))?;
    Ok((stored, metadata))
}

/// The canonical config of a row, and of its parent.
pub(super) fn row_configs(row: &Row) -> (CheckpointConfig, Option<CheckpointConfig>) {
    let parent = row
        .parent
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| CheckpointConfig::canonical(&row.thread_id, &row.ns, p));
    (CheckpointConfig::canonical(&row.thread_id, &row.ns, &row.id), parent)
}

/// What one read keeps of the blobs it decoded.
#[derive(Default)]
pub(super) struct Memo {
    /// Values by blob key (`None`: an empty channel).
    values: FastMap<BlobKey, Option<ChannelValue>>,
    /// The deltas decoded on the way (a history read), by the
    /// `checkpoint_blobs` row's stored key: a pending write that shares a
    /// delta's bytes (see `packed::Entry::blob`) is its elements.
    deltas: FastMap<BlobKey, Delta>,
    /// Version texts built.
    texts: row::VersionTexts,
    /// Pages hold every checkpoint of their thread and namespace between
    /// their first and last id (a history read without a filter): their
    /// writes are read as one key range.
    contiguous: bool,
    /// Checkpoints this read assembled and gave to the shared cache.
    shared: usize,
}

/// A read gives the shared checkpoint cache its first this many checkpoints
/// only: a history read that streams past more would churn the cache (its
/// budget holds about that many) and keep memory a stream frees.
const SHARED_PER_READ: usize = 1024;

/// A delta's elements: `list` from `start` on, decoded from bytes of type
/// `tag`.
struct Delta {
    tag: String,
    list: ChannelValue,
    start: usize,
}

impl Memo {
    pub(super) fn new() -> Memo {
        Memo::default()
    }

    /// Whether pages are contiguous (see the field).
    pub(super) fn contiguous(&self) -> bool {
        self.contiguous
    }

    /// The memo of a listing whose pages are `contiguous` (see the field).
    pub(super) fn for_pages(contiguous: bool) -> Memo {
        Memo { contiguous, ..Memo::default() }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.values.len() + self.deltas.len()
    }

    pub(super) fn clear(&mut self) {
        self.values.clear();
        self.deltas.clear();
    }

    /// The value of a pending write stored as the bytes of the blob row
    /// `key` (a stored key), of type `tag`, if this read decoded that row:
    /// the same elements, copied (a write's value is owned).
    fn write_from_delta(&self, key: KeyRef<'_>, tag: &str) -> Option<Value> {
        let d = self.deltas.get(&key as &dyn AsKey).filter(|d| d.tag == tag)?;
        elements_from(&d.list, d.start)
    }
}

/// The elements of the list `value` from `start` on, copied into an array:
/// the value of a pending write that shares a delta's bytes.
fn elements_from(value: &ChannelValue, start: usize) -> Option<Value> {
    let list = value.as_list()?;
    let items: Option<Vec<Value>> = (start..list.len()).map(|i| list.get(i).cloned()).collect();
    items.map(Value::Array)
}

impl Checkpointer {
    /// The checkpoint `config.checkpoint_id` of the thread and namespace, or
    /// the latest one if no id is given, with its pending writes. `None` if
    /// there is none.
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `thread_id` is empty.
    /// - [`Error::Corrupt`] if a stored row does not parse, or a channel's
    ///   value is missing from the file.
    /// - [`Error::UnknownSerialization`] / [`Error::Serialization`] if a
    ///   stored value cannot be decoded.
    /// - database errors.
    pub fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>> {
        self.cached_tuple(&self.tuples, config, |tx, row| {
            Ok(self.assemble(tx, vec![row], &mut Memo::new())?.pop())
        })
    }

    /// What `build` makes of the row `config` names (the newest without an
    /// id), given again from `cache` while the file's generation has not
    /// moved: no write through this `Db`, no commit by anyone else.
    pub(super) fn cached_tuple<T: Clone>(
        &self,
        cache: &TupleCache<T>,
        config: &CheckpointConfig,
        build: impl FnOnce(&Connection, Arc<Row>) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        require_thread(config)?;
        let key = (config.thread_id.clone(), config.checkpoint_ns.clone(), config.checkpoint_id.clone());
        let on = self.values.budget() > 0;
        let hit = |generation| on.then(|| cache.get(&key, generation)).flatten().map(Some);
        self.db.cached_snapshot(hit, |tx, generation| {
            let Some(row) = find_shared_row(self, tx, config)? else { return Ok(None) };
            let out = build(tx, row)?;
            if let (true, Some(t)) = (on, &out) {
                cache.put(key.clone(), generation, t);
            }
            Ok(out)
        })
    }

    /// The file's generation now (see `Pooled::generation`): it moves with
    /// every change to the file, by this process or another.
    pub(crate) fn generation(&self) -> Result<u64> {
        self.db.settle();
        self.db.conn()?.generation()
    }

    /// The checkpoint of [`get_tuple`](Self::get_tuple), without the rest.
    ///
    /// # Errors
    /// As [`get_tuple`](Self::get_tuple).
    pub fn get(&self, config: &CheckpointConfig) -> Result<Option<Checkpoint>> {
        Ok(self.get_tuple(config)?.map(|t| Arc::unwrap_or_clone(t.checkpoint)))
    }

    /// Attaches values and pending writes to raw rows: each blob is decoded
    /// at most once (and not at all if cached); writes of all rows in one
    /// query.
    pub(super) fn assemble(
        &self,
        conn: &Connection,
        rows: Vec<Arc<Row>>,
        memo: &mut Memo,
    ) -> Result<Vec<CheckpointTuple>> {
        // With one row nothing else will use the versions a chain passes
        // through: only the row's own goes to the memo.
        let share = rows.len() > 1;
        let mut out = Vec::with_capacity(rows.len());
        let epoch = self.checkpoints.epoch();
        // Values first: a pending write may share the bytes of a delta their
        // chains decoded.
        for row in &rows {
            let (config, parent_config) = row_configs(row);
            if let Some((checkpoint, metadata)) = self.checkpoints.get(row) {
                out.push((config, parent_config, checkpoint, metadata));
                continue;
            }
            let (mut stored, metadata) = parse_row_with(row, &mut memo.texts)?;
            let mut inline = std::mem::take(&mut stored.channel_values);
            let mut values = BTreeMap::new();
            for (ch, version) in &stored.channel_versions {
                if let Some(v) = inline.remove(ch) {
                    values.insert(ch.clone(), ChannelValue::from(v));
                    continue;
                }
                if stored.empty.contains(ch) {
                    continue;
                }
                let text = version.text();
                let v = match self.known((&row.thread_id, &row.ns, ch, &text), memo) {
                    Some(v) => v,
                    None => {
                        let key = (row.thread_id.clone(), row.ns.clone(), ch.clone(), text.into_owned());
                        self.load_value(conn, &key, memo, share)?
                    }
                };
                if let Some(v) = v {
                    values.insert(ch.clone(), v);
                }
            }
            let checkpoint = Arc::new(stored.into_checkpoint(values));
            let metadata = Arc::new(metadata);
            if memo.shared < SHARED_PER_READ {
                memo.shared += 1;
                self.checkpoints.insert(row, &checkpoint, &metadata, epoch);
            }
            out.push((config, parent_config, checkpoint, metadata));
        }
        let writes = self.load_writes(conn, &rows, memo, epoch)?;
        Ok(out
            .into_iter()
            .zip(writes)
            .map(|((config, parent_config, checkpoint, metadata), pending_writes)| CheckpointTuple {
                config,
                parent_config,
                checkpoint,
                metadata,
                pending_writes,
            })
            .collect())
    }

    /// The value of one blob (`None`: the channel is empty) that is neither
    /// in the memo of this read nor in the shared cache ([`known`](Self::known),
    /// which the caller asked): from the file. A blob stored as a delta is
    /// its base's list plus its own elements: its chain is read newest first
    /// in one range query (stopping early if the tip's base is already
    /// decoded), each row decoded straight from the query's buffer, and
    /// every version on the way is built from the one before (sharing it)
    /// and, with `share` (more rows to come in this read), kept in the memo,
    /// so reading a long history decodes each element once.
    fn load_value(
        &self,
        conn: &Connection,
        key: &BlobKey,
        memo: &mut Memo,
        share: bool,
    ) -> Result<Option<ChannelValue>> {
        let (thread, ns, channel, _) = key;
        let key_of = |v: &str| -> BlobKey { (thread.clone(), ns.clone(), channel.clone(), v.to_string()) };
        // The deltas from `key` back, newest first: (their names if
        // `share`, elements, stored size).
        let mut deltas: Vec<(Option<DeltaName>, Vec<Value>, usize)> = Vec::new();
        // Where the deltas start: a value stored whole, or one already known.
        let mut start: Option<Start> = None;
        let visit = |link: chain::Link<'_>| -> Result<bool> {
            let version = |stored: &str| link.version(stored);
            let Some(base) = link.base else {
                // Stored whole: decoded here, cached below with its size.
                let v = match link.tag {
                    "empty" => None,
                    tag => Some(ChannelValue::from(self.serde.loads_typed(tag, link.bytes)?)),
                };
                start = Some((v, Some((version(link.key)?, link.bytes.len()))));
                return Ok(false);
            };
            let items = match self.serde.loads_typed(link.tag, link.bytes)? {
                Value::Array(items) => items,
                _ => {
                    return Err(Error::corrupt(format!(
                        "blob {channel}@{} of thread '{thread}': a delta is not a list",
                        version(link.key)?
                    )))
                }
            };
            let first = deltas.is_empty();
            let named = share.then(|| {
                Ok::<_, Error>(DeltaName {
                    version: version(link.key)?,
                    stored: link.key.to_string(),
                    tag: link.tag.to_string(),
                })
            });
            deltas.push((named.transpose()?, items, link.bytes.len()));
            // After the tip: stop at a base already decoded (one look; with
            // the chain streaming in, decoding on is as cheap as looking).
            if first {
                if let Some(v) = self.known((thread, ns, channel, &version(base)?), memo) {
                    start = Some((v, None));
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let walked = chain::walk_version(conn, (thread, ns, channel), &key.3, visit)?;
        if let chain::Walk::Missing { key: missing, newer } = walked {
            let missing = compact::blob_version(&missing).map_or(missing.clone(), |v| v.into_owned());
            return Err(Error::corrupt(match newer {
                None => format!(
                    "channel '{channel}' version {missing} of thread '{thread}' (namespace '{ns}') has no stored \
                     value"
                ),
                Some(k) => format!(
                    "blob {channel}@{missing} of thread '{thread}' is missing, but version {} extends it",
                    compact::blob_version(&k).map_or(k.clone(), |v| v.into_owned())
                ),
            }));
        }
        let Some((start, whole)) = start else {
            return Err(Error::corrupt(format!("blob {channel}@{} of thread '{thread}': no value", key.3)));
        };
        if let Some((version, cost)) = whole {
            let cur = key_of(&version);
            self.values.insert(cur.clone(), start.clone(), cost);
            memo.values.insert(cur, start.clone());
        }
        if deltas.is_empty() {
            return Ok(start);
        }
        // The elements of every delta, oldest first, in one new piece on top
        // of the start: each version on the way is a prefix of it.
        let cost: usize = deltas.iter().map(|d| d.2).sum();
        let mut all = Vec::with_capacity(deltas.iter().map(|d| d.1.len()).sum());
        let mut ends = Vec::with_capacity(deltas.len());
        for (named, items, _) in deltas.into_iter().rev() {
            let begin = all.len();
            all.extend(items.into_iter().map(Arc::new));
            ends.push((named, begin, all.len()));
        }
        let start_len = start.as_ref().and_then(|v| v.as_list()).map(|l| l.len());
        let (Some(tip), Some(start_len)) = (start.as_ref().and_then(|b| b.appended(all)), start_len) else {
            return Err(Error::corrupt(format!(
                "blob {channel}@{} of thread '{thread}': its base is not a list",
                key.3
            )));
        };
        if share {
            for (named, begin, end) in ends {
                let (Some(DeltaName { version, stored, tag }), Some(list)) =
                    (named, tip.prefix(start_len + end))
                else {
                    continue;
                };
                let named = key_of(&version);
                if named == *key {
                    // The tip goes to the value cache (below): so does
                    // where its delta starts.
                    self.starts.insert(named.clone(), (tag.clone(), start_len + begin), 0);
                }
                memo.deltas
                    .insert(key_of(&stored), Delta { tag, list: list.clone(), start: start_len + begin });
                memo.values.insert(named, Some(list));
            }
        }
        self.values.insert(key.clone(), Some(tip.clone()), cost);
        memo.values.insert(key.clone(), Some(tip.clone()));
        Ok(Some(tip))
    }

    /// The value of a pending write stored as the bytes of the blob row
    /// `at` (a stored key), of type `tag`, from the value cache: the
    /// elements of that version's list from where its delta starts, if
    /// both are cached (the process wrote or read that version).
    fn write_from_cache(&self, at: KeyRef<'_>, tag: &str) -> Option<Value> {
        let version = compact::blob_version(at.3)?;
        let key = (at.0, at.1, at.2, &*version);
        let (delta_tag, start) = self.starts.get_ref(key)?;
        if delta_tag != tag {
            return None;
        }
        elements_from(&self.values.get_ref(key)??, start)
    }

    /// A value already decoded: in this read's memo, or in the cache (taken
    /// from there each time: a lookup under an uncontended lock costs less
    /// than copying the key into the memo).
    fn known(&self, key: KeyRef<'_>, memo: &Memo) -> Option<Option<ChannelValue>> {
        if let Some(v) = memo.values.get(&key as &dyn AsKey) {
            return Some(v.clone());
        }
        self.values.get_ref(key)
    }

    /// The pending writes of every row, in one query, ordered by
    /// (task_path, task_id, idx) within a checkpoint (LangGraph's
    /// `writes_sort_key`). A row whose writes are stored as they were when
    /// its checkpoint's cache entry took them gets that entry's list.
    fn load_writes(
        &self,
        conn: &Connection,
        rows: &[Arc<Row>],
        memo: &Memo,
        epoch: u64,
    ) -> Result<Vec<Arc<[PendingWrite]>>> {
        let known: Vec<Option<KnownWrites>> = rows.iter().map(|r| self.checkpoints.writes(r)).collect();
        let stored: Vec<Option<&[WriteRow]>> =
            known.iter().map(|k| k.as_ref().map(|(rows, _)| &rows[..])).collect();
        let Some(per_row) = write_rows(conn, rows, memo.contiguous, &stored)? else {
            let mut out: Vec<Vec<PendingWrite>> = rows.iter().map(|_| Vec::new()).collect();
            for_each_legacy_write(conn, rows, |i, task_id, channel, tag, stored| {
                let value = self.write_value(conn, &rows[i], memo, &channel, tag, stored)?;
                out[i].push(PendingWrite { task_id, channel, value });
                Ok(())
            })?;
            return Ok(out.into_iter().map(Arc::from).collect());
        };
        let mut out = Vec::with_capacity(rows.len());
        for ((row, read), known) in rows.iter().zip(per_row).zip(&known) {
            let tasks = match (read, known) {
                (ReadWrites::Known, Some((_, writes))) => {
                    out.push(writes.clone());
                    continue;
                }
                (ReadWrites::Known, None) => Vec::new(),
                (ReadWrites::Rows(tasks), _) => tasks,
            };
            if tasks.is_empty() {
                out.push(no_writes());
                continue;
            }
            let mut writes = Vec::new();
            for WriteRow { task_id, writes: bytes, .. } in &tasks {
                unpack_writes(row, task_id, bytes, |channel, tag, stored| {
                    let value = self.write_value(conn, row, memo, &channel, tag, stored)?;
                    writes.push(PendingWrite { task_id: task_id.clone(), channel, value });
                    Ok(())
                })?;
            }
            let writes: Arc<[PendingWrite]> = writes.into();
            self.checkpoints.insert_writes(row, tasks.into(), &writes, epoch);
            out.push(writes);
        }
        Ok(out)
    }

    /// The value of one pending write of checkpoint `row`.
    fn write_value(
        &self,
        conn: &Connection,
        row: &Row,
        memo: &Memo,
        channel: &str,
        tag: &str,
        stored: Stored<'_>,
    ) -> Result<Value> {
        let blob = match stored {
            Stored::Bytes(bytes) => return self.serde.loads_typed(tag, bytes),
            Stored::Blob(blob) => blob,
        };
        let at = (row.thread_id.as_str(), row.ns.as_str(), channel, blob);
        if let Some(v) = memo.write_from_delta(at, tag).or_else(|| self.write_from_cache(at, tag)) {
            return Ok(v);
        }
        if let Some((_, v)) = self.shared_writes.get_ref(at).filter(|(t, _)| t == tag) {
            return Ok(Value::clone(&v));
        }
        let bytes = shared_write(conn, row, channel, blob)?;
        let v = self.serde.loads_typed(tag, &bytes)?;
        let key = (row.thread_id.clone(), row.ns.clone(), channel.to_owned(), blob.to_owned());
        self.shared_writes.insert(key, (tag.to_owned(), Arc::new(v.clone())), bytes.len());
        Ok(v)
    }
}

/// A delta row read by a history read: its version, its stored key and its
/// type tag.
struct DeltaName {
    version: String,
    stored: String,
    tag: String,
}

/// Where a chain's deltas start: a value, and (version, stored size) if it
/// was read now (stored whole) rather than already known.
type Start = (Option<ChannelValue>, Option<(String, usize)>);

/// Where a pending write's bytes are.
pub(super) enum Stored<'a> {
    /// Here.
    Bytes(&'a [u8]),
    /// In the `checkpoint_blobs` row of this stored key (in the write's
    /// thread, namespace and channel): see [`shared_write`].
    Blob(&'a str),
}

/// The pending writes of a checkpoint that has none (one list for all).
pub(super) fn no_writes() -> Arc<[PendingWrite]> {
    static NONE: std::sync::OnceLock<Arc<[PendingWrite]>> = std::sync::OnceLock::new();
    NONE.get_or_init(|| Arc::from([])).clone()
}

/// One `checkpoint_writes` row: the pending writes of one task.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WriteRow {
    pub(crate) task_path: String,
    pub(crate) task_id: String,
    /// The writes, packed (see [`packed::unpack`]).
    pub(crate) writes: Vec<u8>,
}

/// Calls `f(i, task_id, channel, type tag, bytes)` for the pending writes
/// of every row (`i`: its index in `rows`), in one query, rows in order,
/// each row's ordered by (task_path, task_id, idx), LangGraph's
/// `writes_sort_key`. `contiguous`: as in [`write_rows`].
pub(super) fn for_each_write(
    conn: &Connection,
    rows: &[Arc<Row>],
    contiguous: bool,
    mut f: impl FnMut(usize, String, String, &str, Stored<'_>) -> Result<()>,
) -> Result<()> {
    let Some(per_row) = write_rows(conn, rows, contiguous, &[])? else {
        return for_each_legacy_write(conn, rows, f);
    };
    for (i, (row, read)) in rows.iter().zip(per_row).enumerate() {
        let ReadWrites::Rows(tasks) = read else { continue };
        for WriteRow { task_id, writes, .. } in &tasks {
            unpack_writes(row, task_id, writes, |channel, tag, stored| {
                f(i, task_id.clone(), channel, tag, stored)
            })?;
        }
    }
    Ok(())
}

/// Calls `f(channel, type tag, bytes)` for each write packed in `bytes`,
/// the row of task `task_id` on checkpoint `row`.
///
/// # Errors
/// [`Error::Corrupt`] if `bytes` does not parse; what `f` returns.
fn unpack_writes(
    row: &Row,
    task_id: &str,
    bytes: &[u8],
    mut f: impl FnMut(String, &str, Stored<'_>) -> Result<()>,
) -> Result<()> {
    for packed::Entry { channel, tag, bytes, blob, .. } in
        packed::unpack_row(bytes, &row.thread_id, &row.id, task_id)?
    {
        let stored = match &blob {
            None => Stored::Bytes(&bytes),
            Some(at) => Stored::Blob(at),
        };
        f(channel, tag.as_deref().unwrap_or("null"), stored)?;
    }
    Ok(())
}

/// The writes rows of one checkpoint, in key order ([`Reading::push`]
/// orders them by path).
const WRITES_OF_ONE: &str = "SELECT task_id, writes, task_path FROM checkpoint_writes \
     WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 ORDER BY task_id";

/// The writes rows of a key range of checkpoints, newest first, in key
/// order backwards: the primary key read backwards, with no sorter (by
/// `task_id` ascending SQLite would sort each checkpoint's rows).
const WRITES_OF_RANGE: &str = "SELECT task_id, writes, task_path, checkpoint_id FROM checkpoint_writes \
     WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id BETWEEN ?3 AND ?4 \
     ORDER BY checkpoint_id DESC, task_id DESC";

/// The `checkpoint_writes` rows of every row, in one query, each row's
/// ordered by (task_path, task_id), LangGraph's `writes_sort_key`; `None`
/// on a file of one row per write (see [`for_each_legacy_write`]).
/// `contiguous`: the rows are every checkpoint of one thread and namespace
/// between the first and the last id, newest first. `known[i]`: the rows
/// row `i`'s writes were last read as (from its cache entry); if they are
/// stored alike, it reads as [`ReadWrites::Known`] and nothing is copied.
///
/// # Errors
/// [`Error::Corrupt`] if a writes row names no row asked for; database
/// errors.
pub(super) fn write_rows(
    conn: &Connection,
    rows: &[Arc<Row>],
    contiguous: bool,
    known: &[Option<&[WriteRow]>],
) -> Result<Option<Vec<ReadWrites>>> {
    let mut out: Vec<Reading<'_>> = (0..rows.len())
        .map(|i| match known.get(i).copied().flatten() {
            Some(k) if k.len() <= 64 => Reading::Matching(k, 0),
            _ => Reading::Rows(Vec::new()),
        })
        .collect();
    // Columns: task_id, writes, task_path.
    let mut push = |i: usize, r: &rusqlite::Row<'_>| -> Result<()> {
        let slot = out.get_mut(i).ok_or_else(|| Error::corrupt("a pending write of no row asked for"))?;
        slot.push(r)
    };
    if let [row] = rows {
        // One checkpoint (get_tuple): a plain primary-key range.
        let stmt = conn.prepare_cached(WRITES_OF_ONE);
        let mut stmt = match stmt {
            Err(e) if no_packed_writes(&e) => return Ok(None),
            other => other?,
        };
        let mut q = stmt.query(params![row.thread_id, row.ns, row.id])?;
        while let Some(r) = q.next()? {
            push(0, r)?;
        }
        return Ok(Some(out.into_iter().map(Reading::finish).collect()));
    }
    let Some(first) = rows.first() else { return Ok(Some(Vec::new())) };
    // A page of one thread and namespace (a thread's history) names only
    // its ids: no JSON to take apart per key. (CROSS JOIN keeps the keys
    // the outer loop: SQLite would otherwise scan the thread's writes and
    // look each one up among the keys.)
    let one_chain = rows.iter().all(|r| r.thread_id == first.thread_id && r.ns == first.ns);
    if contiguous && one_chain && rows.windows(2).all(|w| w[0].id > w[1].id) {
        // One key range, newest first; a write of a checkpoint the page
        // does not hold (none, if the page is what it says) is skipped.
        let Some(last) = rows.last() else { return Ok(Some(Vec::new())) };
        let mut stmt = match conn.prepare_cached(WRITES_OF_RANGE) {
            Err(e) if no_packed_writes(&e) => return Ok(None),
            other => other?,
        };
        let mut q = stmt.query(params![first.thread_id, first.ns, last.id, first.id])?;
        let mut i = 0;
        while let Some(r) = q.next()? {
            let id = r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
            while rows.get(i).is_some_and(|row| row.id.as_str() > id) {
                i += 1;
            }
            if rows.get(i).is_some_and(|row| row.id == id) {
                push(i, r)?;
            }
        }
        return Ok(Some(out.into_iter().map(Reading::finish).collect()));
    }
    let (sql, keys) = if one_chain {
        (
            "SELECT w.task_id, w.writes, w.task_path, k.key \
             FROM json_each(?1) AS k \
             CROSS JOIN checkpoint_writes AS w \
                  ON w.thread_id = ?2 AND w.checkpoint_ns = ?3 AND w.checkpoint_id = k.value \
             ORDER BY k.key, w.task_path, w.task_id",
            rows.iter().map(|r| r.id.clone().into()).collect(),
        )
    } else {
        (
            "SELECT w.task_id, w.writes, w.task_path, k.key \
             FROM json_each(?1) AS k \
             JOIN checkpoint_writes AS w ON w.thread_id = k.value ->> 0 AND w.checkpoint_ns = k.value ->> 1 \
                                          AND w.checkpoint_id = k.value ->> 2 \
             ORDER BY k.key, w.task_path, w.task_id",
            rows.iter()
                .map(|r| {
                    Value::Array(vec![r.thread_id.clone().into(), r.ns.clone().into(), r.id.clone().into()])
                })
                .collect(),
        )
    };
    let mut stmt = match conn.prepare_cached(sql) {
        Err(e) if no_packed_writes(&e) => return Ok(None),
        other => other?,
    };
    let keys = Value::Array(keys).to_string();
    let mut q =
        if one_chain { stmt.query(params![keys, first.thread_id, first.ns])? } else { stmt.query([keys])? };
    while let Some(r) = q.next()? {
        let i: i64 = r.get(3)?;
        push(usize::try_from(i).unwrap_or(usize::MAX), r)?;
    }
    Ok(Some(out.into_iter().map(Reading::finish).collect()))
}

/// What [`write_rows`] read of one checkpoint's writes.
pub(super) enum ReadWrites {
    /// Exactly the rows it was given as known for it.
    Known,
    /// These rows, in (task_path, task_id) order.
    Rows(Vec<WriteRow>),
}

/// One checkpoint's writes rows while [`write_rows`] reads them.
enum Reading<'k> {
    /// Each row read so far is one of these known ones (the bits of those
    /// seen, at most 64): compared where SQLite holds it, nothing copied.
    Matching(&'k [WriteRow], u64),
    /// The rows read, in order.
    Rows(Vec<WriteRow>),
}

impl Reading<'_> {
    /// Takes the row `r` (columns: task_id, writes, task_path). Rows come in
    /// key order (by task_id): SQLite ordering them by path too would cost
    /// a sorter per query, so each checkpoint's few are put in order here.
    fn push(&mut self, r: &rusqlite::Row<'_>) -> Result<()> {
        if let Reading::Matching(known, seen) = self {
            match known.iter().position(|w| w.is(r)) {
                Some(j) if *seen & (1 << j) == 0 => {
                    *seen |= 1 << j;
                    return Ok(());
                }
                _ => *self = Reading::Rows(Self::seen(known, *seen)),
            }
        }
        let Reading::Rows(rows) = self else { return Ok(()) };
        let writes = r.get_ref(1)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
        let w = WriteRow { task_path: r.get(2)?, task_id: r.get(0)?, writes: writes.to_vec() };
        let at = rows.partition_point(|x| (&x.task_path, &x.task_id) <= (&w.task_path, &w.task_id));
        rows.insert(at, w);
        Ok(())
    }

    /// The known rows whose bits are set in `seen` (in their order).
    fn seen(known: &[WriteRow], seen: u64) -> Vec<WriteRow> {
        known.iter().enumerate().filter(|(j, _)| seen & (1 << j) != 0).map(|(_, w)| w.clone()).collect()
    }

    fn finish(self) -> ReadWrites {
        match self {
            Reading::Matching(known, seen) if seen.count_ones() as usize == known.len() => ReadWrites::Known,
            Reading::Matching(known, seen) => ReadWrites::Rows(Self::seen(known, seen)),
            Reading::Rows(rows) => ReadWrites::Rows(rows),
        }
    }
}

impl WriteRow {
    /// Whether the row `r` (columns: task_id, writes, task_path) is this one.
    fn is(&self, r: &rusqlite::Row<'_>) -> bool {
        let text = |i| r.get_ref(i).ok().and_then(|v| v.as_str().ok());
        let writes = r.get_ref(1).ok().and_then(|v| v.as_blob_or_null().ok()).map(Option::unwrap_or_default);
        text(0) == Some(self.task_id.as_str())
            && writes == Some(self.writes.as_slice())
            && text(2) == Some(self.task_path.as_str())
    }
}

/// The bytes of a pending write stored as a reference to the delta row
/// (`version`, a blob key) of `channel` in the write's thread and namespace.
/// The bytes of a pending write of checkpoint `key` stored as the
/// `checkpoint_blobs` row `version` (a stored key) of its channel.
///
/// # Errors
/// [`Error::Corrupt`] if there is no such row; database errors.
pub(super) fn shared_write(conn: &Connection, row: &Row, channel: &str, version: &str) -> Result<Vec<u8>> {
    // The first row of a chain walk is the row itself (one statement for
    // every blob read: a fresh connection prepares it once).
    let mut bytes = None;
    chain::walk(conn, (&row.thread_id, &row.ns, channel), version, |link| {
        bytes = Some(link.bytes.to_vec());
        Ok(false)
    })?;
    bytes.ok_or_else(|| {
        Error::corrupt(format!(
            "a pending write on checkpoint {} of thread '{}' is the value of {channel}@{version}, which is missing",
            row.id, row.thread_id
        ))
    })
}

/// Whether preparing a query failed because `checkpoint_writes` has one row
/// per write: a file in a format before migration 7, opened read only.
fn no_packed_writes(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqlInputError { msg, .. } | rusqlite::Error::SqliteFailure(_, Some(msg)) => {
            msg.contains("no such column")
        }
        _ => false,
    }
}

/// [`for_each_write`] on a table of one row per write (before migration 7).
fn for_each_legacy_write(
    conn: &Connection,
    rows: &[Arc<Row>],
    mut f: impl FnMut(usize, String, String, &str, Stored<'_>) -> Result<()>,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id, channel, type, blob FROM checkpoint_writes \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 ORDER BY task_path, task_id, idx",
    )?;
    for (i, row) in rows.iter().enumerate() {
        let mut q = stmt.query(params![row.thread_id, row.ns, row.id])?;
        while let Some(r) = q.next()? {
            let tag: Option<String> = r.get(2)?;
            let bytes = r.get_ref(3)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
            f(i, r.get(0)?, r.get(1)?, tag.as_deref().unwrap_or("null"), Stored::Bytes(bytes))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Db;

    /// The writes of a checkpoint and of a page are read in primary-key
    /// order, forwards or backwards: no temporary b-tree (a sorter per
    /// query, about a thousand instructions a checkpoint).
    #[test]
    fn writes_are_read_without_a_sort() {
        let db = Db::open_in_memory().unwrap();
        db.read(|conn| {
            for sql in [WRITES_OF_ONE, WRITES_OF_RANGE] {
                let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let args = rusqlite::params_from_iter(std::iter::repeat_n("x", plan.parameter_count()));
                let steps: Vec<String> =
                    plan.query_map(args, |r| r.get(3))?.collect::<rusqlite::Result<_>>()?;
                assert!(steps.iter().all(|s| !s.contains("TEMP B-TREE")), "{sql}: {steps:?}");
                assert!(steps.iter().any(|s| s.contains("PRIMARY KEY")), "{sql}: {steps:?}");
            }
            Ok(())
        })
        .unwrap();
    }
}
