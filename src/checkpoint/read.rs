//! Reading checkpoints: rows, their channel values (decoded once, shared)
//! and their pending writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::cache::{AsKey, BlobKey, KeyRef, TupleCache};
use super::chain;
use super::compact;
use super::row::{self, RowFormat};
use super::types::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, Metadata};
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
    let read = RowRef::read(r)?;
    Ok(saver.checkpoints.row(&read).unwrap_or_else(|| Arc::new(read.to_owned())))
}

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    RowRef::read(r).map(|row| row.to_owned())
}

/// A `checkpoints` row where SQLite holds it (read with [`ROW_COLUMNS`]):
/// what each column means, decided once for [`Row`] and for comparing with
/// one in place.
pub(super) struct RowRef<'a> {
    pub(super) thread_id: &'a str,
    pub(super) ns: &'a str,
    pub(super) id: &'a str,
    parent: Option<&'a str>,
    /// TEXT or a BLOB of UTF-8; `{}` if NULL.
    metadata: &'a [u8],
    /// TEXT or BLOB; `{}` if neither.
    pub(super) checkpoint: &'a [u8],
    format: RowFormat,
}

impl<'a> RowRef<'a> {
    pub(super) fn read(r: &'a rusqlite::Row<'_>) -> rusqlite::Result<RowRef<'a>> {
        use rusqlite::types::ValueRef;
        let text = |i| r.get_ref(i)?.as_str().map_err(rusqlite::Error::from);
        Ok(RowRef {
            thread_id: text(0)?,
            ns: text(1)?,
            id: text(2)?,
            parent: r.get_ref(3)?.as_str_or_null().map_err(rusqlite::Error::from)?,
            metadata: match r.get_ref(4)? {
                ValueRef::Text(t) | ValueRef::Blob(t) => t,
                ValueRef::Null => b"{}",
                _ => {
                    return Err(rusqlite::Error::InvalidColumnType(
                        4,
                        "metadata".into(),
                        rusqlite::types::Type::Integer,
                    ))
                }
            },
            checkpoint: match r.get_ref(5)? {
                ValueRef::Text(b) | ValueRef::Blob(b) => b,
                _ => b"{}",
            },
            format: RowFormat::of(r, 6)?,
        })
    }

    fn to_owned(&self) -> Row {
        Row {
            thread_id: self.thread_id.to_owned(),
            ns: self.ns.to_owned(),
            id: self.id.to_owned(),
            parent: self.parent.map(str::to_owned),
            metadata: String::from_utf8_lossy(self.metadata).into_owned(),
            checkpoint: self.checkpoint.to_vec(),
            format: self.format,
        }
    }

    /// Whether `row` was read from a row like this one, column for column.
    pub(super) fn is(&self, row: &Row) -> bool {
        row.thread_id == self.thread_id
            && row.ns == self.ns
            && row.id == self.id
            && row.parent.as_deref() == self.parent
            && row.metadata.as_bytes() == self.metadata
            && row.checkpoint == self.checkpoint
            && row.format == self.format
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

/// What `read` makes of the row of [`find_row`].
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
    /// The deletion count of the read's snapshot (`None`: not read), which
    /// decides whether what it decoded may be cached (see
    /// `deletions::Seen::admits`).
    snapshot: Option<i64>,
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
    /// The memo of one read of the snapshot whose deletion count is
    /// `snapshot` (see the field).
    pub(super) fn at(snapshot: Option<i64>) -> Memo {
        Memo { snapshot, ..Memo::default() }
    }

    /// A read of the snapshot whose deletion count is `count` goes on with
    /// this memo (a listing's next page).
    pub(super) fn read_at(&mut self, count: i64) {
        self.snapshot = Some(count);
    }

    /// The snapshot's deletion count (see the field).
    pub(super) fn snapshot(&self) -> Option<i64> {
        self.snapshot
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
    pub(super) fn write_from_delta(&self, key: KeyRef<'_>, tag: &str) -> Option<Value> {
        let d = self.deltas.get(&key as &dyn AsKey).filter(|d| d.tag == tag)?;
        elements_from(&d.list, d.start)
    }
}

/// The elements of the list `value` from `start` on, copied into an array:
/// the value of a pending write that shares a delta's bytes.
pub(super) fn elements_from(value: &ChannelValue, start: usize) -> Option<Value> {
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
        self.cached_tuple(&self.tuples, config, |tx, row, snapshot| {
            Ok(self.assemble(tx, vec![row], &mut Memo::at(snapshot))?.pop())
        })
    }

    /// What `build` makes of the row `config` names (the newest without an
    /// id), given again from `cache` while the file's generation has not
    /// moved: no write through this `Db`, no commit by anyone else. `build`
    /// is given the deletion count of the read's snapshot (see
    /// [`Memo::at`]).
    pub(super) fn cached_tuple<T: Clone>(
        &self,
        cache: &TupleCache<T>,
        config: &CheckpointConfig,
        build: impl FnOnce(&Connection, Arc<Row>, Option<i64>) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        require_thread(config)?;
        let key = (config.thread_id.clone(), config.checkpoint_ns.clone(), config.checkpoint_id.clone());
        let on = self.values.budget() > 0;
        let hit = |generation| on.then(|| cache.get(&key, generation)).flatten().map(Some);
        self.db.cached_snapshot(hit, |tx, generation| {
            let snapshot = self.caches().sync_read(tx)?;
            let Some(row) = find_shared_row(self, tx, config)? else { return Ok(None) };
            let out = build(tx, row, snapshot)?;
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
                self.checkpoints
                    .insert(row, &checkpoint, &metadata, epoch, || self.seen.admits(memo.snapshot));
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
            self.values.insert(cur.clone(), start.clone(), cost, || self.seen.admits(memo.snapshot));
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
                    self.starts.insert(named.clone(), (tag.clone(), start_len + begin), 0, || {
                        self.seen.admits(memo.snapshot)
                    });
                }
                memo.deltas
                    .insert(key_of(&stored), Delta { tag, list: list.clone(), start: start_len + begin });
                memo.values.insert(named, Some(list));
            }
        }
        self.values.insert(key.clone(), Some(tip.clone()), cost, || self.seen.admits(memo.snapshot));
        memo.values.insert(key.clone(), Some(tip.clone()));
        Ok(Some(tip))
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
