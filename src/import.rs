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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params, params_from_iter, Connection, OpenFlags};
use serde_json::{Map, Value};

use crate::checkpoint::{
    ChannelValue, ChannelVersions, Checkpoint, CheckpointConfig, ExactWrite, Metadata, TypedBytes,
};
use crate::codec::{JsonPlusSerializer, Serializer};
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
// The source file

/// A `SqliteSaver` file, open read-only inside one read transaction.
struct Source {
    conn: Connection,
    /// `writes` has LangGraph 3.1's `task_path` column.
    task_path: bool,
    /// The columns of `store` among those agentstate knows, if the file has one.
    store_columns: Option<Vec<&'static str>>,
    /// The file has `store_vectors`.
    vectors: bool,
}

const CHECKPOINT_COLUMNS: [&str; 7] =
    ["thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata"];
const WRITE_COLUMNS: [&str; 8] =
    ["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"];
const STORE_COLUMNS: [&str; 7] =
    ["prefix", "key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes"];
const VECTOR_COLUMNS: [&str; 6] = ["prefix", "key", "field_name", "embedding", "created_at", "updated_at"];

impl Source {
    fn open(path: &Path) -> Result<Source> {
        let not_saver = |why: &str| {
            Error::InvalidArgument(format!("{} is not a LangGraph SqliteSaver file: {why}", path.display()))
        };
        // Nothing is ever written (`query_only`). A file whose `-wal` holds
        // frames (a Python process has it open, or crashed) is opened
        // read-only: its WAL is read, never folded into the file. Otherwise
        // it is opened without CREATE as the crate's read-only `Db` opens
        // files: reading a WAL-mode file creates `-wal`/`-shm` files, and
        // only a connection that may write removes them when it closes (the
        // WAL is empty then: the file's bytes do not change).
        let wal_frames = std::fs::metadata(sibling(path, "-wal")).is_ok_and(|m| m.len() > 0);
        let writable = std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly());
        let mode = if wal_frames || !writable {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        };
        let conn = Connection::open_with_flags(
            path,
            mode | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        let setup = conn.execute_batch("PRAGMA query_only = ON; BEGIN");
        let columns = |table: &str| -> Result<Vec<String>> {
            let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
            let names =
                stmt.query_map([table], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<_>>()?;
            Ok(names)
        };
        // The first read starts the snapshot every later read sees.
        let tables = setup.map_err(Error::from).and_then(|()| {
            let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
            let names: HashSet<String> =
                stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<rusqlite::Result<_>>()?;
            Ok(names)
        });
        let tables = match tables {
            Ok(t) => t,
            Err(Error::NotAgentstate(_)) => return Err(not_saver("not an SQLite database")),
            Err(e) => return Err(e),
        };
        if tables.contains("checkpoint_migrations") {
            return Err(not_saver("it is an agentstate file already"));
        }
        for (table, wanted) in [("checkpoints", &CHECKPOINT_COLUMNS[..]), ("writes", &WRITE_COLUMNS[..])] {
            if !tables.contains(table) {
                return Err(not_saver(&if tables.contains("store") {
                    format!("it has no `{table}` table (a Store-only file opens in agentstate as it is)")
                } else {
                    format!("it has no `{table}` table")
                }));
            }
            let have = columns(table)?;
            if let Some(missing) = wanted.iter().find(|c| !have.iter().any(|h| h == *c)) {
                return Err(not_saver(&format!("its `{table}` table has no `{missing}` column")));
            }
        }
        let task_path = columns("writes")?.iter().any(|c| c == "task_path");
        let store_columns = if tables.contains("store") {
            let have = columns("store")?;
            if let Some(missing) = STORE_COLUMNS[..3].iter().find(|c| !have.iter().any(|h| h == *c)) {
                return Err(not_saver(&format!("its `store` table has no `{missing}` column")));
            }
            Some(STORE_COLUMNS.iter().copied().filter(|c| have.iter().any(|h| h == c)).collect())
        } else {
            None
        };
        let vectors = store_columns.is_some() && tables.contains("store_vectors") && {
            let have = columns("store_vectors")?;
            VECTOR_COLUMNS.iter().all(|c| have.iter().any(|h| h == c))
        };
        Ok(Source { conn, task_path, store_columns, vectors })
    }
}

/// A text column (thread ids that Python stored as integers read as text).
fn text(v: ValueRef<'_>, what: &str) -> Result<String> {
    match v {
        ValueRef::Text(t) => String::from_utf8(t.to_vec())
            .map_err(|_| Error::corrupt(format!("source {what} is not valid UTF-8"))),
        ValueRef::Integer(i) => Ok(i.to_string()),
        ValueRef::Null => Err(Error::corrupt(format!("source {what} is NULL"))),
        _ => Err(Error::corrupt(format!("source {what} is not text"))),
    }
}

fn opt_text(v: ValueRef<'_>, what: &str) -> Result<Option<String>> {
    match v {
        ValueRef::Null => Ok(None),
        other => text(other, what).map(Some),
    }
}

/// A blob column (text counts too); `None` for NULL.
fn blob<'a>(v: ValueRef<'a>, what: &str) -> Result<Option<&'a [u8]>> {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b)),
        ValueRef::Null => Ok(None),
        _ => Err(Error::corrupt(format!("source {what} is a number, not bytes"))),
    }
}

// ---------------------------------------------------------------------------
// Splitting a msgpack checkpoint

/// A cursor over msgpack bytes that only finds where values end.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

fn malformed(what: &str) -> Error {
    Error::ser(format!("msgpack: {what}"))
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end =
            self.pos.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| malformed("truncated"))?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn uint(&mut self, n: usize) -> Result<usize> {
        let bytes = self.take(n)?;
        Ok(bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)))
    }

    /// The entry count of a map header.
    fn map_len(&mut self) -> Result<usize> {
        match self.take(1)?[0] {
            m @ 0x80..=0x8f => Ok(usize::from(m & 0x0f)),
            0xde => self.uint(2),
            0xdf => self.uint(4),
            _ => Err(malformed("expected a map")),
        }
    }

    /// A string.
    fn str(&mut self) -> Result<String> {
        let n = match self.take(1)?[0] {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.uint(1)?,
            0xda => self.uint(2)?,
            0xdb => self.uint(4)?,
            _ => return Err(malformed("expected a string key")),
        };
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| malformed("a key is not valid UTF-8"))
    }

    /// The bytes of the next value (ext payloads are not looked into).
    fn value(&mut self) -> Result<&'a [u8]> {
        let start = self.pos;
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let m = self.take(1)?[0];
            let (skip, items) = match m {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
                0x80..=0x8f => (0, 2 * usize::from(m & 0x0f)),
                0x90..=0x9f => (0, usize::from(m & 0x0f)),
                0xa0..=0xbf => (usize::from(m & 0x1f), 0),
                0xc4 | 0xd9 => (self.uint(1)?, 0),
                0xc5 | 0xda => (self.uint(2)?, 0),
                0xc6 | 0xdb => (self.uint(4)?, 0),
                0xc7 => (self.uint(1)? + 1, 0),
                0xc8 => (self.uint(2)? + 1, 0),
                0xc9 => (self.uint(4)?.saturating_add(1), 0),
                0xca | 0xce | 0xd2 => (4, 0),
                0xcb | 0xcf | 0xd3 => (8, 0),
                0xcc | 0xd0 => (1, 0),
                0xcd | 0xd1 => (2, 0),
                0xd4 => (2, 0),
                0xd5 => (3, 0),
                0xd6 => (5, 0),
                0xd7 => (9, 0),
                0xd8 => (17, 0),
                0xdc => (0, self.uint(2)?),
                0xdd => (0, self.uint(4)?),
                0xde => (0, 2 * self.uint(2)?),
                0xdf => (0, self.uint(4)?.saturating_mul(2)),
                _ => return Err(malformed("reserved marker 0xc1")),
            };
            self.take(skip)?;
            pending = pending.saturating_add(items);
            // Every value takes at least a byte: more pending values than
            // bytes left can only be truncated data.
            if pending > self.b.len() - self.pos {
                return Err(malformed("truncated"));
            }
        }
        Ok(&self.b[start..self.pos])
    }
}

/// A checkpoint cut out of its msgpack: the keys other than
/// `channel_values`, decoded, and each channel value's bytes.
struct Split<'a> {
    rest: Map<String, Value>,
    values: Vec<(String, &'a [u8])>,
}

fn split_checkpoint(bytes: &[u8]) -> Result<Split<'_>> {
    let mut c = Cursor { b: bytes, pos: 0 };
    let n = c.map_len()?;
    let mut rest = Map::new();
    let mut values = Vec::new();
    for _ in 0..n {
        let key = c.str()?;
        let raw = c.value()?;
        if key == "channel_values" {
            if raw == [0xc0] {
                continue;
            }
            let mut v = Cursor { b: raw, pos: 0 };
            let m = v.map_len()?;
            values.reserve(m.min(raw.len()));
            for _ in 0..m {
                let ch = v.str()?;
                values.push((ch, v.value()?));
            }
        } else {
            rest.insert(key, JsonPlusSerializer.loads_typed("msgpack", raw)?);
        }
    }
    if c.pos != bytes.len() {
        return Err(malformed("bytes after the checkpoint"));
    }
    Ok(Split { rest, values })
}

/// The value to store inline if `raw` is null, a bool, a 64-bit integer, a
/// finite float or a string (as `AgentStateSaver` stores them).
fn inline_value(raw: &[u8]) -> Option<Value> {
    let first = *raw.first()?;
    let scalar = matches!(
        first,
        0x00..=0x7f | 0xe0..=0xff | 0xa0..=0xbf | 0xc0 | 0xc2 | 0xc3 | 0xcb..=0xd3 | 0xd9..=0xdb
    );
    if !scalar {
        return None;
    }
    match JsonPlusSerializer.loads_typed("msgpack", raw).ok()? {
        v @ (Value::Null | Value::Bool(_) | Value::String(_)) => Some(v),
        Value::Number(n) if n.is_i64() || n.is_f64() => Some(Value::Number(n)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Copying

/// What one (thread, namespace) has stored for a (channel, version).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Inline(u64),
    Blob(u64),
    Absent,
}

/// One channel value of a source checkpoint (with its msgpack bytes).
enum Val<'a> {
    Inline(Value, &'a [u8]),
    Blob(&'a [u8]),
}

fn fingerprint(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

fn copy_into(source: &Source, db: &Db) -> Result<ImportReport> {
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
/// age-based retention sees their real age. A pending write gets its
/// checkpoint's time.
fn keep_times(db: &Db) -> Result<()> {
    db.for_store().write(|tx| {
        tx.execute_batch(
            "UPDATE checkpoints SET created_at = \
                 COALESCE(strftime('%Y-%m-%d %H:%M:%f', json_extract(checkpoint, '$.ts')), created_at); \
             UPDATE checkpoint_writes SET created_at = COALESCE((SELECT c.created_at FROM checkpoints AS c \
                 WHERE c.thread_id = checkpoint_writes.thread_id AND c.checkpoint_ns = checkpoint_writes.checkpoint_ns \
                   AND c.checkpoint_id = checkpoint_writes.checkpoint_id), created_at);",
        )?;
        Ok(())
    })
}

/// Ok if the value of `ch` at `version` in checkpoint `id` (`now`) is the one
/// checkpoint `first` stored for that version (compared decoded, with sets in
/// any order); [`Error::Conflict`] otherwise.
#[allow(clippy::too_many_arguments)]
fn same_value(
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
fn normalize(v: Value) -> Value {
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
const BATCH: usize = 2000;

fn copy_writes(
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
fn copy_rows(
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
const LIVE_VECTORS: &str =
    "WHERE EXISTS (SELECT 1 FROM store AS s WHERE s.prefix = store_vectors.prefix AND s.key = store_vectors.key)";

fn copy_store(source: &Source, db: &Db, report: &mut ImportReport) -> Result<()> {
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
            "created_at",
            "base_version",
            "chain",
            "root_version",
        ],
    ),
    (
        "checkpoint_writes",
        &[
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            "channel",
            "type",
            "blob",
            "task_path",
            "created_at",
        ],
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
                return Err(Error::Conflict(format!(
                    "Store item {:?}/{:?} already exists in {}; nothing was imported",
                    it[0],
                    it[1],
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Vec<u8> {
        let cp = json!({
            "v": 4, "id": "1", "ts": "t",
            "channel_values": {"messages": [{"__bytes__": "00ff"}, "hi", 1.5, [1, {"a": null}]], "n": 7},
            "channel_versions": {"messages": "1", "n": "1"},
            "versions_seen": {}, "updated_channels": null
        });
        JsonPlusSerializer.dumps_typed(&cp).unwrap().1
    }

    #[test]
    fn a_checkpoint_splits_into_its_values_bytes() {
        let bytes = sample();
        let split = split_checkpoint(&bytes).unwrap();
        let names: Vec<&str> = split.values.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["messages", "n"]);
        let messages = JsonPlusSerializer.loads_typed("msgpack", split.values[0].1).unwrap();
        assert_eq!(messages, json!([{"__bytes__": "00ff"}, "hi", 1.5, [1, {"a": null}]]));
        assert_eq!(inline_value(split.values[1].1), Some(json!(7)));
        assert_eq!(inline_value(split.values[0].1), None);
        assert_eq!(split.rest["channel_versions"], json!({"messages": "1", "n": "1"}));
        assert!(!split.rest.contains_key("channel_values"));
    }

    #[test]
    fn damaged_msgpack_is_an_error_never_a_panic() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(split_checkpoint(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        for at in 0..bytes.len() {
            for b in [0x00, 0xc1, 0xdd, 0xdf, 0xc9, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = b;
                let _ = split_checkpoint(&damaged);
            }
        }
        // Huge counts in a few bytes are refused without allocating them.
        assert!(split_checkpoint(&[0x81, 0xa1, b'x', 0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(split_checkpoint(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
