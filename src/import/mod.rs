//! Importing LangGraph's Python `SqliteSaver` files.
//!
//! [`import_sqlite_saver`] reads a file written by `SqliteSaver`
//! (langgraph-checkpoint-sqlite; tables `checkpoints` and `writes`, each
//! checkpoint row a msgpack map of the whole state) and writes an agentstate
//! file holding the same history: every checkpoint with its id, parent,
//! metadata and channel values, and every pending write with its task id,
//! index, channel, task path and bytes. LangGraph's Python serde (and
//! `agentstate.AgentStateSaver`) reads every value back as it was.
//!
//! How a checkpoint is split (see `docs/design.md`, "Importing SqliteSaver
//! files"):
//!
//! - Each `channel_values` entry is cut out of the checkpoint's msgpack as
//!   its raw bytes: values Rust cannot decode (pydantic messages, any ext
//!   type) are stored unchanged under the tag `msgpack`. Null, bool, integer
//!   (64-bit), finite float and string values go inline into the checkpoint
//!   JSON, as `AgentStateSaver` stores them.
//! - The rest of the checkpoint (`v`, `id`, `ts`, `channel_versions`,
//!   `versions_seen`, `updated_channels`, other keys) is decoded to JSON with
//!   the crate's codec.
//! - Checkpoints are stored oldest first per thread and namespace with
//!   [`Checkpointer::put_encoded`](crate::Checkpointer::put_encoded), each
//!   channel version once (the first checkpoint that names it stores it), so
//!   a message list that grows is stored as its new messages only.
//! - A channel version must name one value: where the source holds two
//!   different values for one (channel, version) (LangGraph never writes
//!   that; a hand-made row might), the import fails with
//!   [`Error::Conflict`] instead of silently keeping one. The same value
//!   encoded twice with other bytes (map keys or a set in another order) is
//!   the same value.
//!
//! The Store tables (`store`, `store_vectors`) of a file that also holds a
//! Python `SqliteStore` are copied row for row: the format is the same.
//! Python records no embedder for its vectors; open the imported Store with
//! the embedder that made them and
//! [`IndexConfig::with_adopt_existing_vectors`](crate::store::IndexConfig::with_adopt_existing_vectors),
//! or re-embed them (`Store::reindex`, `agentstate DST store reindex`).

mod copy;
mod source;
mod split;

use std::path::{Path, PathBuf};

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection, OpenFlags};

use copy::{copy_into, copy_rows};
use source::{Source, STORE_COLUMNS, VECTOR_COLUMNS};

use crate::db::Db;
use crate::error::{Error, Result};

/// What [`import_sqlite_saver`] imported, and the files' sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportReport {
    /// Distinct thread ids (of checkpoints and pending writes).
    pub threads: u64,
    /// Distinct (thread, checkpoint namespace) pairs holding checkpoints.
    pub namespaces: u64,
    /// Checkpoints.
    pub checkpoints: u64,
    /// Pending writes.
    pub writes: u64,
    /// Store items.
    pub store_items: u64,
    /// Store vectors.
    pub store_vectors: u64,
    /// Vectors of the source left out because their item is gone (Python's
    /// `SqliteStore` leaves them behind when it deletes an item).
    pub orphan_vectors_skipped: u64,
    /// The source file's size in bytes (with its `-wal` file, if any).
    pub source_bytes: u64,
    /// The destination file's size in bytes after the import (with its
    /// `-wal` file, if any).
    pub destination_bytes: u64,
    /// True if the destination existed and the import was added to it.
    pub merged: bool,
}

/// Converts the LangGraph `SqliteSaver` file `src` (and its `SqliteStore`
/// tables, if it has them) into the agentstate file `dst`.
///
/// `src` is opened read-only and never changed: the import reads one
/// consistent snapshot of it, even while a Python process writes to it.
///
/// - If `dst` does not exist, the file is built under a temporary name in
///   its directory and moved into place when complete: `dst` appears whole
///   or not at all.
/// - If `dst` exists, it must be an agentstate file (it is migrated like
///   [`Db::open`] does); everything is added in one transaction, and nothing
///   if any imported thread already has checkpoints or pending writes there,
///   or any imported Store item already exists ([`Error::Conflict`]):
///   histories are never mixed. Importing several source files into one
///   destination works when their threads and items differ.
///
/// # Errors
/// - [`Error::NotFound`] if `src` does not exist.
/// - [`Error::InvalidArgument`] if `src` is not a `SqliteSaver` file (not
///   SQLite, no `checkpoints`/`writes` tables of that layout, an agentstate
///   file already); if `src` and `dst` are the same file; if `dst` is not a
///   regular file, or does not exist while a `-wal` file of that name does;
///   if a checkpoint is not of type `msgpack`, or has a value for a channel
///   without a version (it could not be read back).
/// - [`Error::Corrupt`] if a source row does not parse (truncated msgpack,
///   metadata that is not a JSON object, a checkpoint without `v`, `id` or
///   `ts`).
/// - [`Error::Conflict`] if `dst` already holds an imported thread or Store
///   item, or records an embedder while the source has vectors; or if the
///   source stores two different values for one channel version.
/// - [`Error::NotAgentstate`], [`Error::SchemaTooNew`] if `dst` exists and
///   is not an agentstate file this build can write.
/// - [`Error::Io`], [`Error::Busy`], [`Error::DiskFull`], [`Error::Sqlite`]
///   from the filesystem and the databases. In every case `dst` is left as
///   it was and no temporary file remains.
pub fn import_sqlite_saver(src: impl AsRef<Path>, dst: impl AsRef<Path>) -> Result<ImportReport> {
    let (src, dst) = (src.as_ref(), dst.as_ref());
    let src_meta = match std::fs::metadata(src) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(Error::InvalidArgument(format!("{}: not a file", src.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotFound(format!("{}: no such file", src.display())))
        }
        Err(e) => return Err(e.into()),
    };
    let dst_exists = match std::fs::metadata(dst) {
        Ok(m) if !m.is_file() => {
            return Err(Error::InvalidArgument(format!("{}: not a regular file", dst.display())))
        }
        Ok(m) => {
            if same_file(src, &src_meta, dst, &m) {
                return Err(Error::InvalidArgument(format!(
                    "{} and {} are the same file: the import writes a separate agentstate file \
                     (their `checkpoints` tables have the same name and another layout)",
                    src.display(),
                    dst.display()
                )));
            }
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    if !dst_exists {
        if let Some(wal) = [sibling(dst, "-wal"), sibling(dst, "-shm")].into_iter().find(|p| p.exists()) {
            return Err(Error::InvalidArgument(format!(
                "{} does not exist but {} does: SQLite would read that file into the new database; \
                 remove it first",
                dst.display(),
                wal.display()
            )));
        }
    }

    if dst_exists {
        // Refused before any work: a file that is not agentstate's (opened
        // read-only, so it is not changed).
        let db = Db::builder().read_only(true).open(dst)?;
        db.for_store().read(|c| checkpoint_tables_are_ours(c, dst))?;
    }
    let source = Source::open(src)?;
    let dir = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name =
        dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "agentstate".into());
    let tmp = TempDb::new(&dir, &name);
    let mut report = {
        let db = Db::open(&tmp.path)?;
        let report = copy_into(&source, &db)?;
        db.flush()?;
        report
        // The Db is dropped here: its connections close and the last one
        // folds the WAL into the file.
    };
    drop(source);
    if dst_exists {
        merge(&tmp.path, dst)?;
        report.merged = true;
    } else {
        place(&tmp.path, dst)?;
    }
    report.source_bytes = size_with_wal(src);
    report.destination_bytes = size_with_wal(dst);
    Ok(report)
}

/// `path` with `suffix` appended to its file name (`a.db` -> `a.db-wal`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn size_with_wal(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    size(path) + size(&sibling(path, "-wal"))
}

#[cfg(unix)]
fn same_file(_: &Path, a: &std::fs::Metadata, _: &Path, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &Path, _: &std::fs::Metadata, b: &Path, _: &std::fs::Metadata) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A database file under a temporary name, removed (with its `-wal`,
/// `-shm` and `-journal` files) when dropped.
struct TempDb {
    path: PathBuf,
}

impl TempDb {
    fn new(dir: &Path, name: &str) -> TempDb {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        TempDb { path: dir.join(format!(".{name}.import-{}-{nanos:09}.tmp", std::process::id())) }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for p in [
            self.path.clone(),
            sibling(&self.path, "-wal"),
            sibling(&self.path, "-shm"),
            sibling(&self.path, "-journal"),
        ] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Moves the finished temporary file to `dst`, which must still not exist.
fn place(tmp: &Path, dst: &Path) -> Result<()> {
    std::fs::File::open(tmp)?.sync_all()?;
    let taken = || {
        Error::Conflict(format!(
            "{} was created by someone else during the import; nothing was written",
            dst.display()
        ))
    };
    // A hard link never replaces an existing file; where links are not
    // supported, a rename (after one more look) does the job.
    match std::fs::hard_link(tmp, dst) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(taken()),
        Err(_) => {
            if dst.exists() {
                return Err(taken());
            }
            std::fs::rename(tmp, dst)?;
        }
    }
    #[cfg(unix)]
    if let Some(dir) = dst.parent().filter(|p| !p.as_os_str().is_empty()) {
        // The new directory entry survives a power loss.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Adding to an existing file

const TABLES: [(&str, &[&str]); 5] = [
    (
        "checkpoints",
        &[
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "type",
            "metadata",
            "checkpoint",
            "created_at",
        ],
    ),
    (
        "checkpoint_blobs",
        &[
            "thread_id",
            "checkpoint_ns",
            "channel",
            "version",
            "type",
            "blob",
            "base_version",
            "chain",
            "root_version",
        ],
    ),
    (
        "checkpoint_writes",
        &["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "n", "writes"],
    ),
    ("store", &STORE_COLUMNS),
    ("store_vectors", &VECTOR_COLUMNS),
];

/// [`Error::NotAgentstate`] if the file's `checkpoints` table is not
/// agentstate's (a Python `SqliteSaver`'s beside a Store).
fn checkpoint_tables_are_ours(conn: &Connection, dst: &Path) -> Result<()> {
    let ours: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoint_migrations') \
         OR NOT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints')",
        [],
        |r| r.get(0),
    )?;
    if !ours {
        return Err(Error::NotAgentstate(format!(
            "{}: its `checkpoints` table is a Python SqliteSaver's; import into a new file",
            dst.display()
        )));
    }
    Ok(())
}

/// Adds everything of the finished import `tmp` to the agentstate file `dst`
/// in one transaction, refusing threads and items `dst` already has.
fn merge(tmp: &Path, dst: &Path) -> Result<()> {
    let db = Db::open(dst)?;
    let from = Connection::open_with_flags(
        tmp,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let list = |sql: &str| -> Result<Vec<Vec<SqlValue>>> {
        let mut stmt = from.prepare(sql)?;
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| (0..n).map(|i| r.get::<_, SqlValue>(i)).collect::<rusqlite::Result<Vec<_>>>())?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    };
    let threads = list(
        "SELECT thread_id FROM checkpoints UNION SELECT thread_id FROM checkpoint_writes \
         UNION SELECT thread_id FROM checkpoint_blobs",
    )?;
    let items = list("SELECT prefix, key FROM store")?;
    let vectors: i64 = from.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0))?;
    db.for_store().write(|tx| {
        checkpoint_tables_are_ours(tx, dst)?;
        for t in &threads {
            let taken: bool = tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM checkpoints WHERE thread_id = ?1) \
                 OR EXISTS(SELECT 1 FROM checkpoint_writes WHERE thread_id = ?1) \
                 OR EXISTS(SELECT 1 FROM checkpoint_blobs WHERE thread_id = ?1)",
                params![t[0]],
                |r| r.get(0),
            )?;
            if taken {
                let name = match &t[0] {
                    SqlValue::Text(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                return Err(Error::Conflict(format!(
                    "thread '{name}' already has checkpoints in {}: histories are never mixed; import into \
                     another file, or delete the thread there first",
                    dst.display()
                )));
            }
        }
        for it in &items {
            let taken: bool = tx.query_row(
                "SELECT EXISTS(SELECT 1 FROM store WHERE prefix = ?1 AND key = ?2)",
                params![it[0], it[1]],
                |r| r.get(0),
            )?;
            if taken {
                let text = |v: &SqlValue| match v {
                    SqlValue::Text(s) => s.clone(),
                    other => format!("{other:?}"),
                };
                return Err(Error::Conflict(format!(
                    "Store item '{}' in namespace '{}' already exists in {}; nothing was imported",
                    text(&it[1]),
                    text(&it[0]),
                    dst.display()
                )));
            }
        }
        if vectors > 0 {
            let recorded: Option<String> = tx
                .query_row("SELECT value FROM agentstate_meta WHERE key = 'store.embedder'", [], |r| r.get(0))
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })?;
            if let Some(embedder) = recorded {
                return Err(Error::Conflict(format!(
                    "{} records its vectors as made by {embedder}; the imported vectors come from an embedder \
                     Python does not record: import into another file (or reindex there)",
                    dst.display()
                )));
            }
        }
        for (table, columns) in TABLES {
            copy_rows(&from, tx, table, columns, "")?;
        }
        Ok(())
    })
}
