//! Which embedder made a file's vectors: the check (and first recording)
//! when a Store opens, and the reindex that replaces every vector and the
//! record together.
//!
//! The file records `store.embedder` = `name/dims` in `agentstate_meta`.
//! Opening with an index compares it with the configured embedder and
//! writes only when the file records nothing yet. A reindex reads and embeds
//! every item before taking the write lock, then, in one transaction,
//! re-reads the items, embeds those that changed or appeared meanwhile,
//! replaces every vector and records the embedder: a kill at any instant
//! leaves either the old record over the old vectors or the new over the
//! new, and no put acknowledged meanwhile loses its vector.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::config::IndexConfig;
use super::embed::embed_documents_checked;
use super::path::field_texts;
use super::Store;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::vector::encode_f32;

const EMBEDDER_KEY: &str = "store.embedder";

/// `name/dims` of an index's embedder, as the file records it.
fn identity(index: &IndexConfig) -> String {
    format!("{}/{}", index.embedder().name(), index.dims())
}

fn table_exists(conn: &Connection, name: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)")?
        .query_row([name], |r| r.get(0))?)
}

/// The recorded `name/dims`, if any (a file opened read-only may lack the
/// table).
fn recorded(conn: &Connection) -> Result<Option<String>> {
    if !table_exists(conn, "agentstate_meta")? {
        return Ok(None);
    }
    Ok(conn
        .prepare_cached("SELECT value FROM agentstate_meta WHERE key = ?1")?
        .query_row([EMBEDDER_KEY], |r| r.get(0))
        .optional()?)
}

fn vector_count(conn: &Connection) -> Result<u64> {
    if !table_exists(conn, "store_vectors")? {
        return Ok(0);
    }
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// Checks that every stored vector has `dims` entries (before adopting
/// vectors of an unrecorded embedder).
///
/// # Errors
/// [`Error::DimensionMismatch`] naming the first other length found.
fn check_lengths(conn: &Connection, dims: usize) -> Result<()> {
    let bytes = i64::try_from(dims * 4).unwrap_or(i64::MAX);
    let other: Option<i64> = conn
        .query_row(
            "SELECT length(embedding) FROM store_vectors WHERE length(embedding) IS NOT ?1 LIMIT 1",
            [bytes],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    match other {
        Some(len) => {
            Err(Error::DimensionMismatch { expected: dims, got: usize::try_from(len / 4).unwrap_or(0) })
        }
        None => Ok(()),
    }
}

fn record(conn: &Connection, identity: &str) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO agentstate_meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute([EMBEDDER_KEY, identity])?;
    Ok(())
}

/// What opening with an index must do to the file.
#[derive(PartialEq)]
enum Needs {
    Nothing,
    Record,
}

fn decide(conn: &Connection, index: &IndexConfig, identity: &str) -> Result<Needs> {
    match recorded(conn)? {
        Some(s) if s == identity => Ok(Needs::Nothing),
        Some(s) => Err(Error::EmbedderMismatch { stored: s, configured: identity.to_string() }),
        None => {
            let vectors = vector_count(conn)?;
            if vectors > 0 && !index.adopt_existing_vectors() {
                return Err(Error::UnrecordedEmbedder { vectors, configured: identity.to_string() });
            }
            if vectors > 0 {
                check_lengths(conn, index.dims())?;
            }
            Ok(Needs::Record)
        }
    }
}

/// Checks, inside the transaction of a write that stores vectors or of a
/// search that ranks by a query, that the file still records `index`'s
/// embedder: another handle may have reindexed it to another one since this
/// store opened, and this store's vectors and queries would then be
/// measured against vectors of another space. A file that records none
/// (its record removed by another writer) is not refused here.
///
/// # Errors
/// [`Error::EmbedderMismatch`]; database errors.
pub(super) fn ensure_current(conn: &Connection, index: &IndexConfig) -> Result<()> {
    match recorded(conn)? {
        Some(stored) if stored != identity(index) => {
            Err(Error::EmbedderMismatch { stored, configured: identity(index) })
        }
        _ => Ok(()),
    }
}

/// Checks that the file's vectors are `index`'s, recording it if the file
/// records no embedder yet (and holds no vectors, or the caller adopts
/// them). Writes nothing when the record is already there, or when the
/// database is read-only.
///
/// # Errors
/// [`Error::EmbedderMismatch`], [`Error::UnrecordedEmbedder`]; database
/// errors.
pub(super) fn check_embedder(db: &Db, index: &IndexConfig) -> Result<()> {
    let identity = identity(index);
    // One snapshot: `decide` reads the record, then counts vectors, and a
    // store opening beside this one may record its embedder and write
    // vectors between two autocommit reads (seen as a spurious
    // UnrecordedEmbedder by the race suite).
    let done = db.snapshot(|c| {
        let needs = decide(c, index, &identity)?;
        let read_only: bool = c.query_row("PRAGMA query_only", [], |r| r.get(0))?;
        Ok(needs == Needs::Nothing || read_only)
    })?;
    if done {
        return Ok(());
    }
    // Decided again under the lock: another process may have recorded an
    // embedder or written vectors since.
    db.write(|tx| {
        if decide(tx, index, &identity)? == Needs::Record {
            record(tx, &identity)?;
        }
        Ok(())
    })
}

/// One item as read for a reindex: (prefix, key) -> value text.
type Rows = HashMap<(String, String), String>;

/// The vectors of one item: (field name, encoded vector).
type Vectors = Vec<(String, Vec<u8>)>;

fn read_rows(conn: &Connection) -> Result<Rows> {
    let mut stmt = conn.prepare("SELECT prefix, key, CAST(value AS TEXT) FROM store")?;
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

impl Store {
    /// Embeds the configured fields of these items, in one embedder call.
    fn embed_rows<'a>(
        &self,
        rows: impl Iterator<Item = (&'a (String, String), &'a String)>,
    ) -> Result<HashMap<(String, String), Vectors>> {
        let mut out: HashMap<(String, String), Vectors> = HashMap::new();
        let Some(index) = self.inner.config.index() else { return Ok(out) };
        let mut texts: Vec<String> = vec![];
        let mut owners: Vec<(&(String, String), String)> = vec![];
        for (id, value) in rows {
            let parsed: Value = serde_json::from_str(value)
                .map_err(|e| Error::corrupt(format!("item {}/{}: {e}", id.0, id.1)))?;
            out.insert(id.clone(), vec![]);
            for (field, text) in field_texts(&parsed, &self.inner.fields) {
                owners.push((id, field));
                texts.push(text);
            }
        }
        let vectors = embed_documents_checked(index.embedder().as_ref(), &texts)?;
        for ((id, field), v) in owners.into_iter().zip(vectors) {
            if let Some(list) = out.get_mut(id) {
                list.push((field, encode_f32(&v)));
            }
        }
        Ok(out)
    }

    pub(super) fn reindex_all(&self) -> Result<usize> {
        // The slow part (embedding) before the lock ...
        let first = self.inner.db.read(read_rows)?;
        let early = self.embed_rows(first.iter())?;
        let identity = self.inner.config.index().map(identity);
        self.inner.db.write(|tx| {
            // ... and, under it, the items written since.
            let now = read_rows(tx)?;
            let late = self.embed_rows(now.iter().filter(|(id, value)| first.get(*id) != Some(*value)))?;
            tx.execute("DELETE FROM store_vectors", [])?;
            let mut ins = tx.prepare_cached(
                "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for id in now.keys() {
                let vectors = late.get(id).or_else(|| early.get(id)).map_or(&[][..], Vec::as_slice);
                for (field, blob) in vectors {
                    ins.execute(params![id.0, id.1, field, blob])?;
                }
            }
            match &identity {
                Some(identity) => record(tx, identity)?,
                None => {
                    tx.execute("DELETE FROM agentstate_meta WHERE key = ?1", [EMBEDDER_KEY])?;
                }
            }
            // (The triggers on `store_vectors` moved the generation of every
            // prefix whose vectors changed: search caches reload them.)
            Ok(now.len())
        })
    }
}
