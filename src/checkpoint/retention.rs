//! Retention: how much history a thread keeps.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::{params, Connection};

use crate::error::Result;

/// What history to keep, per (thread, namespace). Set it with
/// [`Checkpointer::with_retention`](super::Checkpointer::with_retention): it is
/// then applied on write (a thread is trimmed once it holds a few checkpoints
/// more than allowed) and by
/// [`apply_retention`](super::Checkpointer::apply_retention) on demand.
///
/// The newest checkpoint of a (thread, namespace) is never removed, whatever
/// its age or the numbers given (a `keep_last` of 0 keeps one, of
/// `usize::MAX` keeps everything; a `max_age` longer than any checkpoint can
/// be old removes nothing); delete the thread for that. Blobs a kept
/// checkpoint or a kept incremental chain needs are never removed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Retention {
    /// Keep at most this many newest checkpoints.
    pub keep_last: Option<usize>,
    /// Remove checkpoints written longer ago than this.
    pub max_age: Option<Duration>,
    /// Threads never trimmed.
    pub exempt: HashSet<String>,
}

impl Retention {
    /// Keep the newest `n` checkpoints (at least 1).
    pub fn keep_last(n: usize) -> Retention {
        Retention { keep_last: Some(n.max(1)), ..Retention::default() }
    }

    /// Also remove checkpoints older than `age`.
    pub fn max_age(mut self, age: Duration) -> Retention {
        self.max_age = Some(age);
        self
    }

    /// Never trim `thread`.
    pub fn exempt(mut self, thread: impl Into<String>) -> Retention {
        self.exempt.insert(thread.into());
        self
    }

    /// How many checkpoints over `keep_last` a write lets accumulate before
    /// it trims (so trimming is amortised over several writes).
    const SLACK: usize = 8;

    /// True if a write to (thread, ns) should trim now.
    pub(crate) fn due(&self, conn: &Connection, thread: &str, ns: &str) -> Result<bool> {
        if self.exempt.contains(thread) {
            return Ok(false);
        }
        if let Some(n) = self.keep_last {
            let over: bool = conn
                .prepare_cached(
                    "SELECT EXISTS(SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                     ORDER BY checkpoint_id DESC LIMIT 1 OFFSET ?3)",
                )?
                .query_row(params![thread, ns, sql_count(n.saturating_add(Self::SLACK))], |r| r.get(0))?;
            if over {
                return Ok(true);
            }
        }
        if let Some(age) = self.max_age.and_then(age_modifier) {
            let old: bool = conn
                .prepare_cached(
                    "SELECT COALESCE((SELECT created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?3) \
                     FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                     ORDER BY checkpoint_id LIMIT 1), 0)",
                )?
                .query_row(params![thread, ns, age], |r| r.get(0))?;
            if old {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The checkpoints of (thread, ns) this policy removes.
    pub(crate) fn victims(&self, conn: &Connection, thread: &str, ns: &str) -> Result<Vec<String>> {
        if self.exempt.contains(thread) {
            return Ok(vec![]);
        }
        let mut out: Vec<String> = vec![];
        if let Some(n) = self.keep_last {
            out.extend(
                conn.prepare_cached(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                     ORDER BY checkpoint_id DESC LIMIT -1 OFFSET ?3",
                )?
                .query_map(params![thread, ns, sql_count(n.max(1))], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?,
            );
        }
        if let Some(age) = self.max_age.and_then(age_modifier) {
            out.extend(
                conn.prepare_cached(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                     AND created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?3) \
                     AND checkpoint_id < (SELECT MAX(checkpoint_id) FROM checkpoints \
                                          WHERE thread_id = ?1 AND checkpoint_ns = ?2)",
                )?
                .query_map(params![thread, ns, age], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?,
            );
        }
        out.sort();
        out.dedup();
        // Whatever the rules above computed, the newest checkpoint stays.
        let newest: Option<String> = conn
            .prepare_cached(
                "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2",
            )?
            .query_row(params![thread, ns], |r| r.get(0))?;
        out.retain(|id| Some(id) != newest.as_ref());
        Ok(out)
    }
}

/// A count as an SQL integer: SQLite's integers are `i64`, and anything
/// larger means "all of them" (a negative `LIMIT`/`OFFSET` would mean the
/// opposite).
fn sql_count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The longest `max_age` that is compared: a thousand years. No checkpoint
/// is older, and SQLite's date arithmetic only covers the years 0 to 9999.
const MAX_AGE: Duration = Duration::from_secs(1000 * 366 * 24 * 3600);

/// `-<seconds> seconds` for SQLite's date functions, or `None` for an age
/// no checkpoint can have (over [`MAX_AGE`]).
fn age_modifier(age: Duration) -> Option<String> {
    (age <= MAX_AGE).then(|| format!("-{:.3} seconds", age.as_secs_f64()))
}
