//! [`Db::stats`]: sizes and counts of everything in the file.

use std::collections::HashMap;

use rusqlite::Connection;

use super::{count, has_checkpoints, has_table, BlobScan, StoreCounts};
use crate::db::{known_versions, Db};
use crate::error::Result;

/// The tables listed first by [`Db::stats`], in this order.
const MAIN_TABLES: [&str; 5] =
    ["checkpoints", "checkpoint_blobs", "checkpoint_writes", "store", "store_vectors"];

/// The database file's size and pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileInfo {
    /// The main file's size in bytes (page bytes for an in-memory database).
    pub bytes: u64,
    /// The write-ahead log's size in bytes (0 if there is none).
    pub wal_bytes: u64,
    /// SQLite's page size.
    pub page_size: u64,
    /// Pages in the file.
    pub pages: u64,
    /// Pages on the free list (what [`Db::vacuum`] returns).
    pub free_pages: u64,
}

/// One migration series: the version the file has reached and the newest this
/// build knows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaVersion {
    /// The series' table (`checkpoint_migrations`, `store_migrations`,
    /// `vector_migrations`, `agentstate_migrations`).
    pub series: String,
    /// The highest migration applied, or `None` if the file lacks the series.
    pub version: Option<i64>,
    /// The highest migration this build knows.
    pub supported: i64,
}

/// One table: rows and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableInfo {
    /// The table's name.
    pub name: String,
    /// Its rows.
    pub rows: u64,
    /// The bytes of its pages and its indexes' pages, if SQLite was built
    /// with the `dbstat` table.
    pub bytes: Option<u64>,
}

/// The checkpoint tables at a glance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointCounts {
    /// Threads with checkpoints.
    pub threads: u64,
    /// Distinct (thread, namespace) pairs.
    pub namespaces: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Pending writes.
    pub pending_writes: u64,
    /// Checkpoints that have pending writes.
    pub checkpoints_with_pending_writes: u64,
    /// Channel blobs.
    pub blobs: u64,
    /// Channel values read from a blob, summed over every checkpoint.
    pub blob_references: u64,
    /// Blobs named by two checkpoints or more.
    pub shared_blobs: u64,
    /// Blobs no checkpoint names that an incremental blob still needed
    /// extends: needed, kept by every cleanup.
    pub delta_bases: u64,
    /// Blobs nothing needs (space only; prune and retention remove them).
    pub unreferenced_blobs: u64,
    /// Channel versions a checkpoint names that have no blob (corruption).
    pub missing_blobs: u64,
}

/// What [`Db::stats`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// The file's size and pages.
    pub file: FileInfo,
    /// The migration series.
    pub schema: Vec<SchemaVersion>,
    /// Every table (the checkpoint and Store tables first).
    pub tables: Vec<TableInfo>,
    /// The checkpoint tables.
    pub checkpoints: CheckpointCounts,
    /// The Store.
    pub store: StoreCounts,
}

impl Db {
    /// The migration version of each series in the file, next to the newest
    /// this build knows.
    ///
    /// # Errors
    /// Database errors.
    pub fn schema_versions(&self) -> Result<Vec<SchemaVersion>> {
        self.read(|conn| {
            let mut out = vec![];
            for (series, supported) in known_versions() {
                let version = if has_table(conn, series)? {
                    conn.query_row(&format!("SELECT MAX(v) FROM {series}"), [], |r| r.get(0))?
                } else {
                    None
                };
                out.push(SchemaVersion { series: series.to_string(), version, supported });
            }
            Ok(out)
        })
    }

    /// Sizes and counts of everything in the file: pages, migration versions,
    /// rows and bytes per table, checkpoints, blobs (shared, needed as delta
    /// bases, unreferenced, missing), Store items, TTLs and vectors. Reads
    /// every checkpoint's channel versions (not its values): linear in the
    /// number of checkpoints.
    ///
    /// # Errors
    /// [`Error::Busy`](crate::Error::Busy) and other database errors.
    pub fn stats(&self) -> Result<Stats> {
        let schema = self.schema_versions()?;
        let store = self.store_counts()?;
        let path = self.path().map(|p| p.to_path_buf());
        self.snapshot(|conn| {
            let mut file = FileInfo {
                page_size: count(conn, "PRAGMA page_size", [])?,
                pages: count(conn, "PRAGMA page_count", [])?,
                free_pages: count(conn, "PRAGMA freelist_count", [])?,
                ..FileInfo::default()
            };
            file.bytes = file.page_size * file.pages;
            if let Some(path) = &path {
                file.bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(file.bytes);
                let mut wal = path.clone().into_os_string();
                wal.push("-wal");
                file.wal_bytes = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
            }
            let sizes = table_bytes(conn);
            let mut tables = vec![];
            for name in table_names(conn)? {
                let rows = count(conn, &format!("SELECT COUNT(*) FROM {}", quote_ident(&name)), [])?;
                let bytes = sizes.as_ref().map(|s| s.get(&name).copied().unwrap_or(0));
                tables.push(TableInfo { name, rows, bytes });
            }
            let checkpoints = checkpoint_counts(conn)?;
            Ok(Stats { file, schema, tables, checkpoints, store })
        })
    }
}

fn checkpoint_counts(conn: &Connection) -> Result<CheckpointCounts> {
    let mut c = CheckpointCounts::default();
    if !has_checkpoints(conn)? {
        return Ok(c);
    }
    c.threads = count(conn, "SELECT COUNT(DISTINCT thread_id) FROM checkpoints", [])?;
    c.namespaces =
        count(conn, "SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints)", [])?;
    c.pending_writes =
        count(conn, &format!("SELECT {} FROM checkpoint_writes", super::writes_counted(conn)?), [])?;
    c.checkpoints_with_pending_writes = count(
        conn,
        "SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id FROM checkpoint_writes)",
        [],
    )?;
    let scan = BlobScan::run(conn, None, || {})?;
    c.checkpoints = scan.checkpoints;
    c.blobs = scan.blobs();
    c.blob_references = scan.references;
    c.shared_blobs = scan.shared();
    c.delta_bases = scan.delta_bases();
    c.unreferenced_blobs = scan.unneeded().iter().map(|(_, keys)| keys.len() as u64).sum();
    c.missing_blobs = scan.missing.len() as u64;
    Ok(c)
}

/// Bytes (pages) of each table with its indexes, if SQLite has `dbstat`.
fn table_bytes(conn: &Connection) -> Option<HashMap<String, u64>> {
    let mut stmt = conn
        .prepare(
            "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat AS d JOIN sqlite_master AS m ON m.name = d.name \
             GROUP BY m.tbl_name",
        )
        .ok()?;
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))).ok()?;
    rows.collect::<rusqlite::Result<HashMap<_, _>>>().ok()
}

fn table_names(conn: &Connection) -> Result<Vec<String>> {
    let mut names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let rank = |n: &str| MAIN_TABLES.iter().position(|m| *m == n).unwrap_or(MAIN_TABLES.len());
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    Ok(names)
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
