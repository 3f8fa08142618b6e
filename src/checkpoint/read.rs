//! Reading checkpoints: rows, their channel values (decoded once, shared)
//! and their pending writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::cache::BlobKey;
use super::delta;
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
    pub(super) checkpoint: String,
}

pub(super) const ROW_COLUMNS: &str =
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, metadata, checkpoint";

pub(super) fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
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

/// The checkpoint JSON as stored: only primitive values inline.
#[derive(Deserialize)]
struct StoredRow {
    v: i64,
    id: String,
    ts: String,
    #[serde(default)]
    channel_values: Map<String, Value>,
    #[serde(default)]
    channel_versions: ChannelVersions,
    #[serde(default)]
    versions_seen: BTreeMap<String, ChannelVersions>,
    #[serde(default)]
    updated_channels: Option<Vec<String>>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// Values decoded during one read, by blob key (`None`: an empty channel).
pub(super) type Memo = HashMap<BlobKey, Option<ChannelValue>>;

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
            let mut out = self.assemble(tx, vec![row], &mut Memo::new())?;
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
        let mut stmt = conn.prepare_cached(
            "SELECT type, blob, base_version FROM checkpoint_blobs \
             WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let stored: StoredRow = serde_json::from_str(&row.checkpoint)
                .map_err(|e| Error::corrupt_from(format!("checkpoint {} does not parse", row.id), e))?;
            let metadata: Metadata = serde_json::from_str(&row.metadata).map_err(|e| {
                Error::corrupt_from(format!("metadata of checkpoint {} does not parse", row.id), e)
            })?;
            let mut inline = stored.channel_values;
            let mut values = BTreeMap::new();
            for (ch, version) in &stored.channel_versions {
                if let Some(v) = inline.remove(ch) {
                    values.insert(ch.clone(), ChannelValue::from(v));
                    continue;
                }
                let key = (row.thread_id.clone(), row.ns.clone(), ch.clone(), version.to_string());
                if let Some(v) = self.load_value(&mut stmt, &key, memo, 0)? {
                    values.insert(ch.clone(), v);
                }
            }
            let checkpoint = Checkpoint {
                v: stored.v,
                id: stored.id,
                ts: stored.ts,
                channel_values: values,
                channel_versions: stored.channel_versions,
                versions_seen: stored.versions_seen,
                updated_channels: stored.updated_channels,
                extra: stored.extra,
            };
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

    /// The value of one blob (`None`: the channel is empty), from the memo of
    /// this read, the shared cache, or the file. A blob stored as a delta is
    /// its base's list (loaded the same way, so shared) plus its own tail.
    fn load_value(
        &self,
        stmt: &mut rusqlite::CachedStatement<'_>,
        key: &BlobKey,
        memo: &mut Memo,
        depth: i64,
    ) -> Result<Option<ChannelValue>> {
        if let Some(v) = memo.get(key) {
            return Ok(v.clone());
        }
        if let Some(v) = self.values.get(key) {
            memo.insert(key.clone(), v.clone());
            return Ok(v);
        }
        let (thread, ns, channel, version) = key;
        type Found = (Option<String>, Option<Vec<u8>>, Option<String>);
        let found: Option<Found> = stmt
            .query_row(params![thread, ns, channel, version], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((tag, bytes, base)) = found else {
            return Err(Error::corrupt(format!(
                "channel '{channel}' version {version} of thread '{thread}' (namespace '{ns}') has no stored value"
            )));
        };
        let tag = tag.unwrap_or_else(|| "null".into());
        let bytes = bytes.unwrap_or_default();
        let cost = bytes.len();
        let value = if tag == "empty" {
            None
        } else if let Some(base) = base {
            if depth >= delta::MAX_CHAIN {
                return Err(Error::corrupt(format!(
                    "blob {channel}@{version} of thread '{thread}': delta chain longer than {}",
                    delta::MAX_CHAIN
                )));
            }
            let base_key = (thread.clone(), ns.clone(), channel.clone(), base);
            let base_value = match self.load_value(stmt, &base_key, memo, depth + 1) {
                Err(Error::Corrupt { message, source }) if depth == 0 => {
                    return Err(Error::Corrupt {
                        message: format!("{message}, but version {version} extends it"),
                        source,
                    })
                }
                other => other?,
            };
            let tail = match self.serde.loads_typed(&tag, &bytes)? {
                Value::Array(items) => items,
                _ => {
                    return Err(Error::corrupt(format!(
                        "blob {channel}@{version} of thread '{thread}': a delta is not a list"
                    )))
                }
            };
            let appended = base_value.and_then(|b| b.appended(tail.into_iter().map(Arc::new)));
            match appended {
                Some(v) => Some(v),
                None => {
                    return Err(Error::corrupt(format!(
                        "blob {channel}@{version} of thread '{thread}': its base is not a list"
                    )))
                }
            }
        } else {
            Some(ChannelValue::from(self.serde.loads_typed(&tag, &bytes)?))
        };
        self.values.insert(key.clone(), value.clone(), cost);
        memo.insert(key.clone(), value.clone());
        Ok(value)
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
                let bytes =
                    r.get_ref(3)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
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
            let bytes = r.get_ref(6)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
            let value = self.serde.loads_typed(tag.as_deref().unwrap_or("null"), bytes)?;
            out.entry(key).or_default().push(PendingWrite { task_id: r.get(3)?, channel: r.get(4)?, value });
        }
        Ok(out)
    }
}

/// The type tag and full bytes of a blob, following its chain of deltas back
/// to the last snapshot (at most [`delta::MAX_CHAIN`] steps) and
/// reassembling them. `None` if the blob does not exist.
pub(super) fn load_blob_bytes(conn: &Connection, key: &BlobKey) -> Result<Option<(String, Vec<u8>)>> {
    type Piece = (Option<String>, Option<Vec<u8>>, Option<String>);
    let mut stmt = conn.prepare_cached(
        "SELECT type, blob, base_version FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
    )?;
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
        top_tag.get_or_insert(tag.unwrap_or_else(|| "null".into()));
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
