//! Reading checkpoints: rows, their channel values (decoded once, shared)
//! and their pending writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::cache::{BlobKey, TupleCache};
use super::compact;
use super::delta;
use super::packed;
use super::row::{self, RowFormat};
use super::types::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, Metadata, PendingWrite};
use super::value::ChannelValue;
use super::{require_thread, Checkpointer};
use crate::error::{Error, Result};

/// A `checkpoints` row before its blobs and writes are attached.
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
/// namespace without one.
pub(super) fn find_row(tx: &Connection, config: &CheckpointConfig) -> Result<Option<Row>> {
    Ok(match &config.checkpoint_id {
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
    let mut stored = match row.format {
        RowFormat::Msgpack => {
            let d = row::decode(&row.checkpoint)
                .map_err(|e| Error::corrupt(format!("checkpoint {}: {e}", row.id)))?;
            StoredRow {
                v: d.v,
                id: String::new(),
                ts: d.ts,
                channel_values: d.channel_values,
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

/// Values decoded during one read, by blob key (`None`: an empty channel).
pub(super) type Memo = HashMap<BlobKey, Option<ChannelValue>>;

/// A `checkpoint_blobs` row as a read needs it.
pub(super) struct BlobRow {
    tag: Option<String>,
    bytes: Option<Vec<u8>>,
    base: Option<String>,
    root: Option<String>,
}

impl BlobRow {
    /// A row from its columns, its versions as they were written.
    fn new(
        tag: Option<String>,
        bytes: Option<Vec<u8>>,
        base: Option<String>,
        root: Option<String>,
    ) -> Result<Self> {
        let base = base.map(compact::blob_version_of).transpose()?;
        let root = root.map(compact::blob_version_of).transpose()?;
        Ok(BlobRow { tag, bytes, base, root })
    }
}

/// True for LangGraph's string versions (`"{counter:032}.{random}"`), whose
/// text order is their counter's order.
fn sorts_by_counter(version: &str) -> bool {
    let b = version.as_bytes();
    b.len() > 32 && b[32] == b'.' && b[..32].iter().all(u8::is_ascii_digit)
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
        build: impl FnOnce(&Connection, Row) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        require_thread(config)?;
        let key = (config.thread_id.clone(), config.checkpoint_ns.clone(), config.checkpoint_id.clone());
        let on = self.values.budget() > 0;
        let hit = |generation| on.then(|| cache.get(&key, generation)).flatten().map(Some);
        self.db.cached_snapshot(hit, |tx, generation| {
            let Some(row) = find_row(tx, config)? else { return Ok(None) };
            let out = build(tx, row)?;
            if let (true, Some(t)) = (on, &out) {
                cache.put(key.clone(), generation, t);
            }
            Ok(out)
        })
    }

    /// The checkpoint of [`get_tuple`](Self::get_tuple), without the rest.
    ///
    /// # Errors
    /// As [`get_tuple`](Self::get_tuple).
    pub fn get(&self, config: &CheckpointConfig) -> Result<Option<Checkpoint>> {
        Ok(self.get_tuple(config)?.map(|t| t.checkpoint))
    }

    /// Attaches values and pending writes to raw rows: each blob is decoded
    /// at most once (and not at all if cached); writes of all rows in one
    /// query.
    pub(super) fn assemble(
        &self,
        conn: &Connection,
        rows: Vec<Row>,
        memo: &mut Memo,
    ) -> Result<Vec<CheckpointTuple>> {
        let mut writes = self.load_writes(conn, &rows)?;
        // With one row nothing else will use the versions a chain passes
        // through: only the row's own goes to the memo.
        let share = rows.len() > 1;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (mut stored, metadata) = parse_row(&row)?;
            let mut inline = std::mem::take(&mut stored.channel_values);
            let mut values = BTreeMap::new();
            for (ch, version) in &stored.channel_versions {
                if let Some(v) = inline.remove(ch) {
                    values.insert(ch.clone(), ChannelValue::from(v));
                    continue;
                }
                let key = (row.thread_id.clone(), row.ns.clone(), ch.clone(), version.to_string());
                if let Some(v) = self.load_value(conn, &key, memo, share)? {
                    values.insert(ch.clone(), v);
                }
            }
            let checkpoint = stored.into_checkpoint(values);
            let key = (row.thread_id.clone(), row.ns.clone(), row.id.clone());
            let pending_writes = writes.remove(&key).unwrap_or_default();
            let (config, parent_config) = row_configs(&row);
            out.push(CheckpointTuple { config, parent_config, checkpoint, metadata, pending_writes });
        }
        Ok(out)
    }

    /// The value of one blob (`None`: the channel is empty), from the memo of
    /// this read, the shared cache, or the file. A blob stored as a delta is
    /// its base's list plus its own elements: the chain back to a value
    /// already decoded (or to its root) is read in one range query, and every
    /// version on the way is built from the one before (sharing it) and,
    /// with `share` (more rows to come in this read), kept in the memo, so
    /// reading a long history decodes each element once.
    fn load_value(
        &self,
        conn: &Connection,
        key: &BlobKey,
        memo: &mut Memo,
        share: bool,
    ) -> Result<Option<ChannelValue>> {
        if let Some(v) = self.known(key, memo) {
            return Ok(v);
        }
        let (thread, ns, channel, _) = key;
        // Deltas from `key` back to where a value is known, newest first.
        let mut path: Vec<(String, String, Vec<u8>)> = Vec::new();
        let mut chain: Option<HashMap<String, BlobRow>> = None;
        let mut version = key.3.clone();
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        let key_of = |v: &str| -> BlobKey { (thread.clone(), ns.clone(), channel.clone(), v.to_string()) };
        let start: Option<ChannelValue> = loop {
            // Stop at a version already decoded (one read per link: with the
            // whole chain in hand, decoding it all is as cheap as looking).
            if !path.is_empty() && chain.is_none() {
                if let Some(v) = self.known(&key_of(&version), memo) {
                    break v;
                }
            }
            let row = match chain.as_mut().and_then(|c| c.remove(&version)) {
                Some(row) => Some(row),
                None => read_blob_row(conn, &key_of(&version))?,
            };
            let Some(row) = row else {
                return Err(Error::corrupt(match path.last() {
                    None => format!(
                        "channel '{channel}' version {version} of thread '{thread}' (namespace '{ns}') has no \
                         stored value"
                    ),
                    Some((k, _, _)) => format!(
                        "blob {channel}@{version} of thread '{thread}' is missing, but version {k} extends it"
                    ),
                }));
            };
            let tag = row.tag.unwrap_or_else(|| "null".into());
            let bytes = row.bytes.unwrap_or_default();
            let Some(base) = row.base else {
                let cur = key_of(&version);
                if tag == "empty" {
                    self.values.insert(cur.clone(), None, 0);
                    memo.insert(cur, None);
                    break None;
                }
                let cost = bytes.len();
                let v = ChannelValue::from(self.serde.loads_typed(&tag, &bytes)?);
                self.values.insert(cur.clone(), Some(v.clone()), cost);
                memo.insert(cur, Some(v.clone()));
                break Some(v);
            };
            // A link read twice (from the chain, then by key) is a loop.
            if path.len() as i64 >= delta::MAX_CHAIN || (chain.is_none() && !seen.insert(base.clone())) {
                return Err(Error::corrupt(format!("blob {channel}@{}: its delta chain loops", key.3)));
            }
            // The rest of the chain in one read (string versions sort by
            // their counter, so a chain lies within [root, version]).
            if chain.is_none() {
                if let Some(root) = row.root.as_deref().filter(|_| sorts_by_counter(&version)) {
                    chain = Some(read_chain(conn, thread, ns, channel, root, &version)?);
                }
            }
            path.push((version, tag, bytes));
            version = base;
        };
        if path.is_empty() {
            return Ok(start);
        }
        // The elements of every delta, oldest first, in one new piece on top
        // of the start: each version on the path is a prefix of it.
        let mut all = Vec::new();
        let mut ends = Vec::with_capacity(path.len());
        for (k, tag, bytes) in path.iter().rev() {
            match self.serde.loads_typed(tag, bytes)? {
                Value::Array(items) => all.extend(items.into_iter().map(Arc::new)),
                _ => {
                    return Err(Error::corrupt(format!(
                        "blob {channel}@{k} of thread '{thread}': a delta is not a list"
                    )))
                }
            }
            ends.push(all.len());
        }
        let start_len = start.as_ref().and_then(|v| v.as_list()).map(|l| l.len());
        let tip = start.as_ref().and_then(|b| b.appended(all));
        let (Some(tip), Some(start_len)) = (tip, start_len) else {
            let k = &path[path.len() - 1].0;
            return Err(Error::corrupt(format!(
                "blob {channel}@{k} of thread '{thread}': its base is not a list"
            )));
        };
        let cost: usize = path.iter().map(|(_, _, b)| b.len()).sum();
        for ((k, _, _), end) in path.into_iter().rev().zip(ends) {
            let v = tip.prefix(start_len + end);
            if k == key.3 {
                self.values.insert(key.clone(), v.clone(), cost);
                memo.insert(key.clone(), v);
            } else if share {
                memo.insert(key_of(&k), v);
            }
        }
        Ok(Some(tip))
    }

    /// A value already decoded: in this read's memo, or in the cache.
    fn known(&self, key: &BlobKey, memo: &mut Memo) -> Option<Option<ChannelValue>> {
        if let Some(v) = memo.get(key) {
            return Some(v.clone());
        }
        let v = self.values.get(key)?;
        memo.insert(key.clone(), v.clone());
        Some(v)
    }

    /// The pending writes of every row, in one query, ordered by
    /// (task_path, task_id, idx) within a checkpoint (LangGraph's `writes_sort_key`).
    fn load_writes(&self, conn: &Connection, rows: &[Row]) -> Result<HashMap<RowKey, Vec<PendingWrite>>> {
        let mut out: HashMap<RowKey, Vec<PendingWrite>> = HashMap::new();
        for_each_write(conn, rows, |key, task_id, channel, tag, bytes| {
            let value = self.serde.loads_typed(tag, bytes)?;
            out.entry(key).or_default().push(PendingWrite { task_id, channel, value });
            Ok(())
        })?;
        Ok(out)
    }
}

/// (thread, namespace, checkpoint id) of a row.
pub(super) type RowKey = (String, String, String);

/// Calls `f(row, task_id, channel, type tag, bytes)` for the pending writes
/// of every row, in one query, ordered by (task_path, task_id, idx),
/// LangGraph's `writes_sort_key` within a row.
pub(super) fn for_each_write(
    conn: &Connection,
    rows: &[Row],
    mut f: impl FnMut(RowKey, String, String, &str, &[u8]) -> Result<()>,
) -> Result<()> {
    // Columns from `at`: task_id, writes.
    let mut call = |key: RowKey, r: &rusqlite::Row<'_>, at: usize| -> Result<()> {
        let task_id: String = r.get(at)?;
        let column = r.get_ref(at + 1)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
        let entries = packed::unpack_row(column, &key.0, &key.2, &task_id)?;
        for e in entries {
            let bytes = match &e.blob {
                None => e.bytes,
                Some(version) => shared_write(conn, &key, &e.channel, version)?,
            };
            f(key.clone(), task_id.clone(), e.channel, e.tag.as_deref().unwrap_or("null"), &bytes)?;
        }
        Ok(())
    };
    if let [row] = rows {
        // One checkpoint (get_tuple): a plain primary-key range.
        let stmt = conn.prepare_cached(
            "SELECT task_id, writes FROM checkpoint_writes \
             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 ORDER BY task_path, task_id",
        );
        let mut stmt = match stmt {
            Err(e) if no_packed_writes(&e) => return for_each_legacy_write(conn, rows, f),
            other => other?,
        };
        let mut q = stmt.query(params![row.thread_id, row.ns, row.id])?;
        while let Some(r) = q.next()? {
            call((row.thread_id.clone(), row.ns.clone(), row.id.clone()), r, 0)?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        return Ok(());
    }
    let keys = Value::Array(
        rows.iter()
            .map(|r| Value::Array(vec![r.thread_id.clone().into(), r.ns.clone().into(), r.id.clone().into()]))
            .collect(),
    )
    .to_string();
    let stmt = conn.prepare_cached(
        "SELECT w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.task_id, w.writes \
         FROM json_each(?1) AS k \
         JOIN checkpoint_writes AS w ON w.thread_id = k.value ->> 0 AND w.checkpoint_ns = k.value ->> 1 \
                                      AND w.checkpoint_id = k.value ->> 2 \
         ORDER BY k.key, w.task_path, w.task_id",
    );
    let mut stmt = match stmt {
        Err(e) if no_packed_writes(&e) => return for_each_legacy_write(conn, rows, f),
        other => other?,
    };
    let mut q = stmt.query([keys])?;
    while let Some(r) = q.next()? {
        call((r.get(0)?, r.get(1)?, r.get(2)?), r, 3)?;
    }
    Ok(())
}

/// The bytes of a pending write stored as a reference to the delta row
/// (`version`, a blob key) of `channel` in the write's thread and namespace.
fn shared_write(conn: &Connection, key: &RowKey, channel: &str, version: &str) -> Result<Vec<u8>> {
    conn.prepare_cached(
        "SELECT blob FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
    )?
    .query_row(params![key.0, key.1, channel, version], |r| r.get::<_, Option<Vec<u8>>>(0))
    .optional()?
    .flatten()
    .ok_or_else(|| {
        Error::corrupt(format!(
            "a pending write on checkpoint {} of thread '{}' is the value of {channel}@{version}, which is missing",
            key.2, key.0
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
    rows: &[Row],
    mut f: impl FnMut(RowKey, String, String, &str, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id, channel, type, blob FROM checkpoint_writes \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3 ORDER BY task_path, task_id, idx",
    )?;
    for row in rows {
        let mut q = stmt.query(params![row.thread_id, row.ns, row.id])?;
        while let Some(r) = q.next()? {
            let tag: Option<String> = r.get(2)?;
            let bytes = r.get_ref(3)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
            let key = (row.thread_id.clone(), row.ns.clone(), row.id.clone());
            f(key, r.get(0)?, r.get(1)?, tag.as_deref().unwrap_or("null"), bytes)?;
        }
    }
    Ok(())
}

/// (thread, namespace, channel).
type ChannelKey = (String, String, String);

/// What one read of stored bytes keeps between blobs: the
/// `checkpoint_blobs` rows read so far, and per channel the last list it
/// handed out (a history read goes newest first, and a version stored as a
/// delta's base is a prefix of the delta's version).
#[derive(Default)]
pub(super) struct Pieces {
    rows: HashMap<BlobKey, BlobRow>,
    last: HashMap<ChannelKey, Last>,
}

/// A list as a range of a shared buffer: `count` elements whose encodings
/// are `buf[start..end]`. Older versions cut from it share the buffer.
struct Last {
    version: String,
    buf: Arc<Vec<u8>>,
    count: usize,
    start: usize,
    end: usize,
}

impl Last {
    /// The full encoding: a header, then the elements.
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.end - self.start + 5);
        delta::write_array_header(&mut out, self.count);
        out.extend_from_slice(&self.buf[self.start..self.end]);
        out
    }
}

impl Pieces {
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.last.clear();
    }

    /// The list of `key`'s version cut from the last list handed out for
    /// its channel, if that one's version is a delta whose base is `key`
    /// (its row read now if this read has not yet).
    fn parent_of_last(&mut self, conn: &Connection, key: &BlobKey) -> Result<Option<Last>> {
        let channel = (key.0.clone(), key.1.clone(), key.2.clone());
        let Some(last) = self.last.get(&channel) else { return Ok(None) };
        let child = (key.0.clone(), key.1.clone(), key.2.clone(), last.version.clone());
        if !self.rows.contains_key(&child) {
            let Some(row) = read_blob_row(conn, &child)? else { return Ok(None) };
            self.rows.insert(child.clone(), row);
        }
        let (Some(last), Some(row)) = (self.last.get(&channel), self.rows.get(&child)) else {
            return Ok(None);
        };
        if row.base.as_deref() != Some(key.3.as_str()) {
            return Ok(None);
        }
        let Some(tail) = row.bytes.as_deref() else { return Ok(None) };
        let Some((tail_count, tail_header)) = delta::array_header(tail) else { return Ok(None) };
        let (Some(count), Some(end)) =
            (last.count.checked_sub(tail_count), last.end.checked_sub(tail.len() - tail_header))
        else {
            return Ok(None);
        };
        if end < last.start {
            return Ok(None);
        }
        Ok(Some(Last { version: key.3.clone(), buf: last.buf.clone(), count, start: last.start, end }))
    }

    /// Remembers `bytes` (a full encoding) as the last list handed out for
    /// `key`'s channel; not a list: nothing to cut from.
    pub(super) fn set_last_shared(&mut self, key: &BlobKey, buf: Arc<Vec<u8>>) {
        let channel = (key.0.clone(), key.1.clone(), key.2.clone());
        match delta::array_header(&buf) {
            Some((count, start)) => {
                let end = buf.len();
                self.last.insert(channel, Last { version: key.3.clone(), buf, count, start, end });
            }
            None => {
                self.last.remove(&channel);
            }
        }
    }
}

/// The type tag and full bytes of a blob, following its chain of deltas back
/// to the full blob it starts from and reassembling them. `None` if the
/// blob does not exist.
pub(super) fn load_blob_bytes(conn: &Connection, key: &BlobKey) -> Result<Option<(String, Vec<u8>)>> {
    blob_bytes(conn, key, &mut Pieces::default())
}

/// [`load_blob_bytes`], keeping the rows it reads in `pieces` (and using
/// those already there): a delta's whole chain is one range read, and the
/// versions of one list read in one history share it.
pub(super) fn blob_bytes(
    conn: &Connection,
    key: &BlobKey,
    pieces: &mut Pieces,
) -> Result<Option<(String, Vec<u8>)>> {
    if let Some(last) = pieces.parent_of_last(conn, key)? {
        let full = last.bytes();
        pieces.last.insert((key.0.clone(), key.1.clone(), key.2.clone()), last);
        return Ok(Some(("msgpack".into(), full)));
    }
    let (thread, ns, channel) = (&key.0, &key.1, &key.2);
    let key_of = |v: &str| -> BlobKey { (thread.clone(), ns.clone(), channel.clone(), v.to_string()) };
    let mut version = key.3.clone();
    // Keys from `key` back to its full blob, newest first.
    let mut path: Vec<BlobKey> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut chain_read = false;
    loop {
        let k = key_of(&version);
        if !pieces.rows.contains_key(&k) {
            let Some(row) = read_blob_row(conn, &k)? else {
                return match path.last() {
                    None => Ok(None),
                    Some(newer) => Err(Error::corrupt(format!(
                        "blob {channel}@{version} of thread '{thread}' is missing, but version {} extends it",
                        newer.3
                    ))),
                };
            };
            // A delta: the rest of its chain in one read.
            if let (false, Some(_), Some(root)) = (chain_read, &row.base, &row.root) {
                if sorts_by_counter(&version) {
                    for (v, r) in read_chain(conn, thread, ns, channel, root, &version)? {
                        pieces.rows.insert(key_of(&v), r);
                    }
                    chain_read = true;
                }
            }
            pieces.rows.insert(k.clone(), row);
        }
        let base = pieces.rows[&k].base.clone();
        path.push(k);
        match base {
            None => break,
            Some(b) => {
                if path.len() as i64 >= delta::MAX_CHAIN || !seen.insert(b.clone()) {
                    return Err(Error::corrupt(format!("blob {channel}@{}: its delta chain loops", key.3)));
                }
                version = b;
            }
        }
    }
    let tag = pieces.rows[&path[0]].tag.clone().unwrap_or_else(|| "null".into());
    let bytes_of = |k: &BlobKey| pieces.rows[k].bytes.as_deref().unwrap_or(&[]);
    if let [only] = path.as_slice() {
        let full = bytes_of(only).to_vec();
        if tag == "msgpack" {
            pieces.set_last_shared(key, Arc::new(full.clone()));
        }
        return Ok(Some((tag, full)));
    }
    let refs: Vec<&[u8]> = path.iter().rev().map(bytes_of).collect();
    let full = delta::assemble(&refs).ok_or_else(|| {
        Error::corrupt(format!("blob {channel}@{} of thread '{thread}': a delta is not a list", key.3))
    })?;
    pieces.set_last_shared(key, Arc::new(full.clone()));
    Ok(Some((tag, full)))
}

/// The `checkpoint_blobs` row of `key`, if there is one. A file opened read
/// only in a format before blob keys (migration 7) holds versions as they
/// are: there a key not found is looked up once more as it is.
fn read_blob_row(conn: &Connection, key: &BlobKey) -> Result<Option<BlobRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT type, blob, base_version, root_version FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
    )?;
    let stored = compact::blob_key(&key.3);
    let mut get = |version: &str| {
        stmt.query_row(params![key.0, key.1, key.2, version], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
    };
    let mut found = get(&stored)?;
    // Only in a file of the older layout (its blobs still have `created_at`):
    // in the current one the plain text may be the key of another version
    // (`~A1.x` is how `{1:032}.x` is keyed), and a missing row must not read
    // as that one.
    if found.is_none()
        && stored != key.3.as_str()
        && crate::inspect::has_column(conn, "checkpoint_blobs", "created_at")?
    {
        found = get(&key.3)?;
    }
    found.map(|(tag, bytes, base, root)| BlobRow::new(tag, bytes, base, root)).transpose()
}

/// The rows of the chain rooted at `root`, up to `version`, by version
/// (string versions sort by counter, so a chain lies within [root,
/// version]).
fn read_chain(
    conn: &Connection,
    thread: &str,
    ns: &str,
    channel: &str,
    root: &str,
    version: &str,
) -> Result<HashMap<String, BlobRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT version, type, blob, base_version, root_version FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version >= ?4 AND version <= ?5 \
           AND (version = ?4 OR root_version = ?4)",
    )?;
    let mut rows =
        stmt.query(params![thread, ns, channel, compact::blob_key(root), compact::blob_key(version)])?;
    let mut out = HashMap::new();
    while let Some(r) = rows.next()? {
        let version = compact::blob_version_of(r.get(0)?)?;
        out.insert(version, BlobRow::new(r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)?);
    }
    Ok(out)
}
