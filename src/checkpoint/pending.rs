//! Reading pending writes: the `checkpoint_writes` rows of a page in one
//! query, put in LangGraph's `writes_sort_key` order, compared in place with
//! what a checkpoint's cache entry decoded from them, and decoded when they
//! differ.

use std::sync::Arc;

use rusqlite::{params, Connection};
use serde_json::Value;

use super::cache::{KeyRef, KnownWrites};
use super::chain;
use super::compact;
use super::packed;
use super::read::{elements_from, Memo, Row};
use super::types::PendingWrite;
use super::Checkpointer;
use crate::error::{Error, Result};

impl Checkpointer {
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

    /// The pending writes of every row, in one query, ordered by
    /// (task_path, task_id, idx) within a checkpoint (LangGraph's
    /// `writes_sort_key`). A row whose writes are stored as they were when
    /// its checkpoint's cache entry took them gets that entry's list.
    pub(super) fn load_writes(
        &self,
        conn: &Connection,
        rows: &[Arc<Row>],
        memo: &Memo,
        epoch: u64,
    ) -> Result<Vec<Arc<[PendingWrite]>>> {
        let known: Vec<Option<KnownWrites>> = rows.iter().map(|r| self.checkpoints.writes(r)).collect();
        let stored: Vec<Option<&[WriteRow]>> =
            known.iter().map(|k| k.as_ref().map(|(rows, _)| &rows[..])).collect();
        let Some(per_row) = write_rows(conn, rows, memo.contiguous(), &stored)? else {
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
            let tasks = match read {
                ReadWrites::Rows(tasks) => tasks,
                ReadWrites::Known => {
                    out.push(known.as_ref().map_or_else(no_writes, |(_, writes)| writes.clone()));
                    continue;
                }
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
            self.checkpoints
                .insert_writes(row, tasks.into(), &writes, epoch, || self.seen.admits(memo.snapshot()));
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
        self.shared_writes.insert(key, (tag.to_owned(), Arc::new(v.clone())), bytes.len(), || {
            self.seen.admits(memo.snapshot())
        });
        Ok(v)
    }
}

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
        let (task_id, writes, task_path) = columns(r)?;
        let w = WriteRow {
            task_path: task_path.to_owned(),
            task_id: task_id.to_owned(),
            writes: writes.to_vec(),
        };
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
        columns(r).is_ok_and(|(task_id, writes, task_path)| {
            self.task_id == task_id && self.writes == writes && self.task_path == task_path
        })
    }
}

/// The columns of a writes row (task_id, writes, task_path) where SQLite
/// holds them; NULL writes are none.
fn columns<'a>(r: &'a rusqlite::Row<'_>) -> rusqlite::Result<(&'a str, &'a [u8], &'a str)> {
    let text = |i| r.get_ref(i)?.as_str().map_err(rusqlite::Error::from);
    let writes = r.get_ref(1)?.as_blob_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default();
    Ok((text(0)?, writes, text(2)?))
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
