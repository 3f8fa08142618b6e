//! TTL refresh on read, without waiting for the write lock.
//!
//! A read that refreshes TTLs needs to write. Waiting for the write lock
//! would make reads fail with `Busy` whenever another process writes for
//! longer than the busy timeout, so the refresh is tried once, at once, and
//! skipped if another connection holds the lock (or the database is
//! read-only): the read still answers, and reports the expiry it found. The
//! next read that finds the lock free refreshes. A skipped refresh can only
//! let an item expire earlier than refreshing reads would have kept it; it
//! never changes a value.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use rusqlite::ErrorCode;

use super::exec::refresh_ttls;
use crate::db::Db;
use crate::error::{Error, Result};

/// Refreshes the TTLs of `items` if the write lock is free now; returns
/// their new expiries (none if the refresh was skipped).
///
/// # Errors
/// Database errors other than a busy lock or a read-only database.
pub(super) fn refresh_if_free(
    db: &Db,
    items: &[(String, String)],
) -> Result<HashMap<(String, String), SystemTime>> {
    let conn = db.conn()?;
    let waits: i64 = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))?;
    conn.busy_timeout(Duration::ZERO)?;
    let out = (|| {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let refreshed = refresh_ttls(&conn, items)?;
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(refreshed)
    })();
    if !conn.is_autocommit() {
        // Failed after BEGIN: nothing of the refresh stays.
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.busy_timeout(Duration::from_millis(u64::try_from(waits).unwrap_or(0)))?;
    match out {
        Err(Error::Busy) => Ok(HashMap::new()),
        Err(e) if e.sqlite_code() == Some(ErrorCode::ReadOnly) => Ok(HashMap::new()),
        other => other,
    }
}
