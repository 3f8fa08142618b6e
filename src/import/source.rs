//! The source: a `SqliteSaver` file, read-only.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use super::sibling;
use crate::error::{Error, Result};

/// A `SqliteSaver` file, open read-only inside one read transaction.
pub(super) struct Source {
    pub(super) conn: Connection,
    /// `writes` has LangGraph 3.1's `task_path` column.
    pub(super) task_path: bool,
    /// The columns of `store` among those agentstate knows, if the file has one.
    pub(super) store_columns: Option<Vec<&'static str>>,
    /// The file has `store_vectors`.
    pub(super) vectors: bool,
}

pub(super) const CHECKPOINT_COLUMNS: [&str; 7] =
    ["thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata"];
pub(super) const WRITE_COLUMNS: [&str; 8] =
    ["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"];
pub(super) const STORE_COLUMNS: [&str; 7] =
    ["prefix", "key", "value", "created_at", "updated_at", "expires_at", "ttl_minutes"];
pub(super) const VECTOR_COLUMNS: [&str; 6] =
    ["prefix", "key", "field_name", "embedding", "created_at", "updated_at"];

impl Source {
    pub(super) fn open(path: &Path) -> Result<Source> {
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
pub(super) fn text(v: ValueRef<'_>, what: &str) -> Result<String> {
    match v {
        ValueRef::Text(t) => String::from_utf8(t.to_vec())
            .map_err(|_| Error::corrupt(format!("source {what} is not valid UTF-8"))),
        ValueRef::Integer(i) => Ok(i.to_string()),
        ValueRef::Null => Err(Error::corrupt(format!("source {what} is NULL"))),
        _ => Err(Error::corrupt(format!("source {what} is not text"))),
    }
}

pub(super) fn opt_text(v: ValueRef<'_>, what: &str) -> Result<Option<String>> {
    match v {
        ValueRef::Null => Ok(None),
        other => text(other, what).map(Some),
    }
}

/// A blob column (text counts too); `None` for NULL.
pub(super) fn blob<'a>(v: ValueRef<'a>, what: &str) -> Result<Option<&'a [u8]>> {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b)),
        ValueRef::Null => Ok(None),
        _ => Err(Error::corrupt(format!("source {what} is a number, not bytes"))),
    }
}
