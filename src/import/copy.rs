//! Copying a source's checkpoints, writes and Store rows into a `Db`.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params_from_iter, Connection};
use serde_json::{Map, Value};

use crate::checkpoint::{
    ChannelValue, ChannelVersions, Checkpoint, CheckpointConfig, ExactWrite, Metadata, TypedBytes,
};
use crate::codec::{JsonPlusSerializer, Serializer};
use crate::db::Db;
use crate::error::{Error, Result};

use super::source::{blob, opt_text, text, Source, VECTOR_COLUMNS};
use super::split::{inline_value, split_checkpoint};
use super::ImportReport;

/// What one (thread, namespace) has stored for a (channel, version).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    Inline(u64),
    Blob(u64),
    Absent,
}

/// One channel value of a source checkpoint (with its msgpack bytes).
pub(super) enum Val<'a> {
    Inline(Value, &'a [u8]),
    Blob(&'a [u8]),
}

pub(super) fn fingerprint(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

pub(super) fn copy_into(source: &Source, db: &Db) -> Result<ImportReport> {
    let saver = db.checkpointer();
    let mut report = ImportReport::default();
    let mut threads: HashSet<String> = HashSet::new();
    // (channel, version) -> what was stored and the checkpoint that stored it,
    // for the (thread, namespace) being read.
    let mut seen: HashMap<(String, String), (Seen, String)> = HashMap::new();
    let mut current: Option<(String, String)> = None;

    let mut stmt = source.conn.prepare(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata \
         FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let thread = text(r.get_ref(0)?, "checkpoints.thread_id")?;
        let ns = opt_text(r.get_ref(1)?, "checkpoints.checkpoint_ns")?.unwrap_or_default();
        let id = text(r.get_ref(2)?, "checkpoints.checkpoint_id")?;
        let parent = opt_text(r.get_ref(3)?, "checkpoints.parent_checkpoint_id")?;
        let here = || format!("checkpoint {id} of thread '{thread}' (namespace '{ns}')");
        let tag = opt_text(r.get_ref(4)?, "checkpoints.type")?;
        if tag.as_deref() != Some("msgpack") {
            return Err(Error::InvalidArgument(format!(
                "{} is stored as {}: only msgpack checkpoints (LangGraph's JsonPlusSerializer, the \
                 default) can be split; an encrypted or pickled checkpoint cannot",
                here(),
                tag.map_or_else(|| "NULL".to_string(), |t| format!("'{t}'"))
            )));
        }
        let bytes = blob(r.get_ref(5)?, "checkpoints.checkpoint")?
            .ok_or_else(|| Error::corrupt(format!("{} is NULL", here())))?;
        let metadata = match blob(r.get_ref(6)?, "checkpoints.metadata")? {
            None => Metadata::new(),
            Some(m) => serde_json::from_slice::<Metadata>(m).map_err(|e| {
                Error::corrupt(format!("the metadata of {} is not a JSON object: {e}", here()))
            })?,
        };
        let split =
            split_checkpoint(bytes).map_err(|e| Error::corrupt(format!("{} does not parse: {e}", here())))?;
        let mut checkpoint: Checkpoint = serde_json::from_value(Value::Object(split.rest))
            .map_err(|e| Error::corrupt(format!("{} is not a LangGraph checkpoint: {e}", here())))?;

        if current.as_ref() != Some(&(thread.clone(), ns.clone())) {
            current = Some((thread.clone(), ns.clone()));
            seen.clear();
            report.namespaces += 1;
        }
        threads.insert(thread.clone());

        let mut vals: BTreeMap<String, Val<'_>> = BTreeMap::new();
        for (ch, raw) in split.values {
            if !checkpoint.channel_versions.contains_key(&ch) {
                return Err(Error::InvalidArgument(format!(
                    "{} has a value for channel '{ch}' but no version for it: agentstate stores a value \
                     per version, so it could not be read back",
                    here()
                )));
            }
            let v = match inline_value(raw) {
                Some(v) => Val::Inline(v, raw),
                None => Val::Blob(raw),
            };
            vals.insert(ch, v);
        }

        let mut values = BTreeMap::new();
        let mut new_versions = ChannelVersions::new();
        for (ch, version) in &checkpoint.channel_versions {
            let now = match vals.get(ch) {
                Some(Val::Inline(_, raw)) => Seen::Inline(fingerprint(raw)),
                Some(Val::Blob(raw)) => Seen::Blob(fingerprint(raw)),
                None => Seen::Absent,
            };
            let key = (ch.clone(), version.to_string());
            match seen.get(&key) {
                None => {
                    match vals.get(ch) {
                        Some(Val::Inline(..)) => {}
                        Some(Val::Blob(raw)) => {
                            values.insert(ch.clone(), TypedBytes::new("msgpack", raw.to_vec()));
                            new_versions.insert(ch.clone(), version.clone());
                        }
                        None => {
                            new_versions.insert(ch.clone(), version.clone());
                        }
                    }
                    seen.insert(key, (now, id.clone()));
                }
                Some((before, _)) if *before == now => {}
                Some((_, first)) => {
                    let first = first.clone();
                    same_value(&saver, &thread, &ns, &first, &id, ch, &key.1, vals.get(ch))?;
                }
            }
        }
        checkpoint.channel_values = vals
            .into_iter()
            .filter_map(|(ch, v)| match v {
                Val::Inline(v, _) => Some((ch, ChannelValue::from(v))),
                Val::Blob(_) => None,
            })
            .collect();
        let mut config = CheckpointConfig::thread(thread.clone()).ns(ns.clone());
        config.checkpoint_id = parent;
        saver.put_encoded(&config, &checkpoint, &values, &metadata, &new_versions)?;
        report.checkpoints += 1;
    }
    drop(rows);
    drop(stmt);

    copy_writes(source, &saver, &mut report, &mut threads)?;
    report.threads = threads.len() as u64;
    copy_store(source, db, &mut report)?;
    keep_times(db)?;
    Ok(report)
}

/// Dates the imported rows by their checkpoint's `ts` instead of the
/// import's clock (checkpoints whose `ts` SQLite cannot read keep the
/// import time), so that `threads` shows when a thread was last active and
/// age-based retention sees their real age.
pub(super) fn keep_times(db: &Db) -> Result<()> {
    db.for_store().write(|tx| {
        tx.execute_batch(
            "UPDATE checkpoints SET created_at = \
                 COALESCE(strftime('%Y-%m-%d %H:%M:%f', CASE WHEN type = 'msgpack' THEN agentstate_row_ts(checkpoint) \
                                                ELSE json_extract(checkpoint, '$.ts') END), created_at);",
        )?;
        Ok(())
    })
}

/// Ok if the value of `ch` at `version` in checkpoint `id` (`now`) is the one
/// checkpoint `first` stored for that version (compared decoded, with sets in
/// any order); [`Error::Conflict`] otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) fn same_value(
    saver: &crate::Checkpointer,
    thread: &str,
    ns: &str,
    first: &str,
    id: &str,
    ch: &str,
    version: &str,
    now: Option<&Val<'_>>,
) -> Result<()> {
    let stored = saver
        .get_tuple_encoded(&CheckpointConfig::thread(thread).ns(ns).at(first))?
        .ok_or_else(|| Error::corrupt(format!("imported checkpoint {first} is missing")))?;
    let before = match (stored.checkpoint.channel_values.get(ch), stored.values.get(ch)) {
        (Some(v), _) => Some(v.to_value()),
        (None, Some(tb)) => Some(JsonPlusSerializer.loads_typed(&tb.tag, &tb.bytes)?),
        (None, None) => None,
    };
    let now = match now {
        Some(Val::Inline(v, _)) => Some(v.clone()),
        Some(Val::Blob(raw)) => Some(JsonPlusSerializer.loads_typed("msgpack", raw)?),
        None => None,
    };
    if before.map(normalize) == now.map(normalize) {
        return Ok(());
    }
    Err(Error::Conflict(format!(
        "thread '{thread}' (namespace '{ns}'): checkpoints {first} and {id} hold different values for channel \
         '{ch}' at the same version {version}; agentstate stores one value per version, so this history cannot \
         be imported without changing one of them"
    )))
}

/// `v` with the elements of Python sets in a fixed order (their encoding
/// follows the set's iteration order, which varies between processes).
pub(super) fn normalize(v: Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::Object(m) => {
            let is_set = m.get(crate::codec::EXT_KEY).is_some_and(|e| {
                e.get("module").and_then(Value::as_str) == Some("builtins")
                    && matches!(e.get("name").and_then(Value::as_str), Some("set" | "frozenset"))
            });
            let mut m: Map<String, Value> = m.into_iter().map(|(k, v)| (k, normalize(v))).collect();
            if is_set {
                if let Some(Value::Array(args)) =
                    m.get_mut(crate::codec::EXT_KEY).and_then(|e| e.get_mut("args"))
                {
                    args.sort_by_cached_key(Value::to_string);
                }
            }
            Value::Object(m)
        }
        other => other,
    }
}

/// Pending writes per transaction.
pub(super) const BATCH: usize = 2000;

pub(super) fn copy_writes(
    source: &Source,
    saver: &crate::Checkpointer,
    report: &mut ImportReport,
    threads: &mut HashSet<String>,
) -> Result<()> {
    let task_path = if source.task_path { "task_path" } else { "''" };
    let mut stmt = source.conn.prepare(&format!(
        "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, {task_path}, idx, channel, type, value \
         FROM writes ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx"
    ))?;
    let mut rows = stmt.query([])?;
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(r) = rows.next()? {
        let w = ExactWrite {
            thread_id: text(r.get_ref(0)?, "writes.thread_id")?,
            checkpoint_ns: opt_text(r.get_ref(1)?, "writes.checkpoint_ns")?.unwrap_or_default(),
            checkpoint_id: text(r.get_ref(2)?, "writes.checkpoint_id")?,
            task_id: text(r.get_ref(3)?, "writes.task_id")?,
            task_path: opt_text(r.get_ref(4)?, "writes.task_path")?.unwrap_or_default(),
            idx: match r.get_ref(5)? {
                ValueRef::Integer(i) => i,
                _ => return Err(Error::corrupt("source writes.idx is not an integer")),
            },
            channel: text(r.get_ref(6)?, "writes.channel")?,
            tag: opt_text(r.get_ref(7)?, "writes.type")?,
            bytes: blob(r.get_ref(8)?, "writes.value")?.unwrap_or_default().to_vec(),
        };
        if !threads.contains(&w.thread_id) {
            threads.insert(w.thread_id.clone());
        }
        batch.push(w);
        if batch.len() == BATCH {
            report.writes += batch.len() as u64;
            saver.put_writes_exact(std::mem::take(&mut batch))?;
        }
    }
    report.writes += batch.len() as u64;
    saver.put_writes_exact(batch)
}

/// Copies rows of `table` (the `columns` the source has) from `from` into
/// the same columns of `tx`, `sql_where` selecting them.
pub(super) fn copy_rows(
    from: &Connection,
    tx: &Connection,
    table: &str,
    columns: &[&str],
    sql_where: &str,
) -> Result<u64> {
    let cols = columns.join(", ");
    let mut read = from.prepare(&format!("SELECT {cols} FROM {table} {sql_where}"))?;
    let marks = (1..=columns.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
    let mut write = tx.prepare(&format!("INSERT INTO {table} ({cols}) VALUES ({marks})"))?;
    let mut rows = read.query([])?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        let vals =
            (0..columns.len()).map(|i| r.get::<_, SqlValue>(i)).collect::<rusqlite::Result<Vec<_>>>()?;
        write.execute(params_from_iter(vals))?;
        n += 1;
    }
    Ok(n)
}

/// Vectors whose item exists (the others would break the foreign key).
pub(super) const LIVE_VECTORS: &str =
    "WHERE EXISTS (SELECT 1 FROM store AS s WHERE s.prefix = store_vectors.prefix AND s.key = store_vectors.key)";

pub(super) fn copy_store(source: &Source, db: &Db, report: &mut ImportReport) -> Result<()> {
    let Some(columns) = &source.store_columns else { return Ok(()) };
    let db = db.for_store();
    report.store_items = db.write(|tx| copy_rows(&source.conn, tx, "store", columns, ""))?;
    if source.vectors {
        report.store_vectors =
            db.write(|tx| copy_rows(&source.conn, tx, "store_vectors", &VECTOR_COLUMNS, LIVE_VECTORS))?;
        let all: i64 = source.conn.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0))?;
        report.orphan_vectors_skipped = (all as u64).saturating_sub(report.store_vectors);
    }
    Ok(())
}
