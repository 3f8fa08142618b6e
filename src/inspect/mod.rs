//! What a file holds, read without loading channel values: the threads, a
//! thread's history, file statistics, Store facts and the integrity check.
//!
//! These are the calls an inspector (the `agentstate` command line, a
//! desktop "conversations" view, a monitoring job) needs. They only read,
//! work on a [`Db`] opened read-only (see
//! [`DbBuilder::read_only`](crate::DbBuilder::read_only)), and tolerate a file
//! that lacks the checkpoint or the Store tables (a Store written by Python's
//! `SqliteStore` has no checkpoint tables): what is absent counts as empty.

mod blobs;
mod check;
mod stats;
mod store;

use std::ops::ControlFlow;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

pub(crate) use blobs::BlobScan;
pub use check::{CheckArea, CheckReport, Finding, Severity};
pub use stats::{CheckpointCounts, FileInfo, SchemaVersion, Stats, TableInfo};
pub use store::{ItemInfo, RecordedEmbedder, StoreCounts, VectorDims};

use crate::checkpoint::{CheckpointConfig, Checkpointer, Metadata};
use crate::db::Db;
use crate::error::{Error, Result};

/// Whether the file has table `name`.
pub(crate) fn has_table(conn: &Connection, name: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)")?
        .query_row([name], |r| r.get(0))?)
}

/// Whether the file has agentstate's checkpoint tables. A Python
/// `SqliteSaver`'s `checkpoints` table (a file without
/// `checkpoint_migrations`, opened for its Store) does not count: its rows
/// are another format, and inspection leaves them alone.
pub(crate) fn has_checkpoints(conn: &Connection) -> Result<bool> {
    has_table(conn, "checkpoint_migrations")
}

/// Whether `table` has `column` (Python's oldest Store files lack the TTL
/// columns; files older than incremental blobs lack `base_version`).
pub(crate) fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)")?
        .query_row([table, column], |r| r.get(0))?)
}

/// The SQL aggregate that counts pending writes over `checkpoint_writes`
/// rows: one row per task since migration 7 (`n` writes each), one per
/// write in a file opened read only in an older format.
pub(crate) fn writes_counted(conn: &Connection) -> Result<&'static str> {
    Ok(if has_column(conn, "checkpoint_writes", "n")? { "COALESCE(SUM(n), 0)" } else { "COUNT(*)" })
}

/// `SELECT COUNT(*)`-like queries, as `u64`.
pub(crate) fn count(conn: &Connection, sql: &str, args: impl rusqlite::Params) -> Result<u64> {
    Ok(conn.prepare_cached(sql)?.query_row(args, |r| r.get::<_, i64>(0))?.max(0) as u64)
}

/// One thread at a glance: a row of a "conversations" list.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadSummary {
    /// The thread id.
    pub thread_id: String,
    /// Its checkpoint namespaces, sorted (`""`, the root graph, first).
    pub namespaces: Vec<String>,
    /// Checkpoints over all its namespaces.
    pub checkpoints: u64,
    /// Pending writes over all its checkpoints.
    pub pending_writes: u64,
    /// When its newest checkpoint was written (UTC, `YYYY-MM-DD HH:MM:SS.SSS`).
    pub last_update: String,
    /// The newest checkpoint id of its first namespace (the root graph's if
    /// it has one): the checkpoint a resumed conversation continues from.
    pub latest_checkpoint_id: String,
}

/// One checkpoint without its channel values: what a history view lists.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// The thread.
    pub thread_id: String,
    /// The checkpoint namespace (`""` is the root graph).
    pub checkpoint_ns: String,
    /// The checkpoint id.
    pub checkpoint_id: String,
    /// The checkpoint it was created from, if any (it may have been pruned
    /// since).
    pub parent_checkpoint_id: Option<String>,
    /// Its metadata (`source`, `step`, `run_id`, ...); see
    /// [`Metadata::step`] and [`Metadata::source`].
    pub metadata: Metadata,
    /// When it was written (UTC, `YYYY-MM-DD HH:MM:SS.SSS`).
    pub created_at: String,
    /// The channels its step updated, if recorded.
    pub updated_channels: Option<Vec<String>>,
    /// How many pending writes are stored for it.
    pub pending_writes: u64,
}

/// Which checkpoints [`Checkpointer::history`] lists.
///
/// ```
/// # use agentstate::inspect::HistoryQuery;
/// let q = HistoryQuery::thread("t1").namespace("").limit(20);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryQuery {
    /// The thread.
    pub thread_id: String,
    /// Only this namespace (every namespace if `None`).
    pub checkpoint_ns: Option<String>,
    /// Only checkpoints whose id sorts below this one (older).
    pub before: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Oldest first instead of newest first.
    pub oldest_first: bool,
}

impl HistoryQuery {
    /// Every checkpoint of `thread_id`, in every namespace, newest first.
    #[must_use]
    pub fn thread(thread_id: impl Into<String>) -> HistoryQuery {
        HistoryQuery {
            thread_id: thread_id.into(),
            checkpoint_ns: None,
            before: None,
            limit: None,
            oldest_first: false,
        }
    }

    /// Only namespace `ns`.
    #[must_use]
    pub fn namespace(mut self, ns: impl Into<String>) -> HistoryQuery {
        self.checkpoint_ns = Some(ns.into());
        self
    }

    /// Only checkpoints older than `checkpoint_id` (the next page after it).
    #[must_use]
    pub fn before(mut self, checkpoint_id: impl Into<String>) -> HistoryQuery {
        self.before = Some(checkpoint_id.into());
        self
    }

    /// At most `n` checkpoints.
    #[must_use]
    pub fn limit(mut self, n: usize) -> HistoryQuery {
        self.limit = Some(n);
        self
    }

    /// Oldest first (default newest first).
    #[must_use]
    pub fn oldest_first(mut self) -> HistoryQuery {
        self.oldest_first = true;
        self
    }
}

/// What a checkpoint id, or a part of one, names in a thread and namespace:
/// the result of [`Checkpointer::resolve_id`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdMatch {
    /// Exactly one checkpoint: its full id.
    One(String),
    /// No checkpoint.
    None,
    /// Several checkpoints contain the text; it needs more characters.
    Ambiguous {
        /// How many checkpoints match.
        matches: usize,
    },
}

/// Rows a thread occupies, in each checkpoint table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadCounts {
    /// Its checkpoints.
    pub checkpoints: u64,
    /// Its channel blobs.
    pub blobs: u64,
    /// Its pending writes.
    pub pending_writes: u64,
}

impl Db {
    /// Whether the file's `checkpoints` (and `writes`) tables are a Python
    /// `SqliteSaver`'s, kept next to a Store: the checkpointer refuses such a
    /// file, and the calls here count its checkpoints as absent. Convert them
    /// with [`import_sqlite_saver`](crate::import::import_sqlite_saver).
    ///
    /// # Errors
    /// Database errors.
    pub fn has_python_saver(&self) -> Result<bool> {
        self.read(|conn| Ok(has_table(conn, "checkpoints")? && !has_checkpoints(conn)?))
    }

    /// Every thread with checkpoints, newest update first (ties by id): a
    /// "conversations" list. Reads one summary row per thread and namespace,
    /// never a channel value.
    ///
    /// # Errors
    /// [`Error::Busy`] if the file stays locked past the busy timeout; other
    /// database errors.
    pub fn threads(&self) -> Result<Vec<ThreadSummary>> {
        self.snapshot(|conn| {
            if !has_checkpoints(conn)? {
                return Ok(vec![]);
            }
            let mut out: Vec<ThreadSummary> = vec![];
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT thread_id, checkpoint_ns, COUNT(*), MAX(created_at), MAX(checkpoint_id), \
                     (SELECT {} FROM checkpoint_writes w WHERE w.thread_id = c.thread_id \
                         AND w.checkpoint_ns = c.checkpoint_ns) \
                 FROM checkpoints c GROUP BY thread_id, checkpoint_ns ORDER BY thread_id, checkpoint_ns",
                writes_counted(conn)?
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let (id, ns, n, last, latest, writes): (String, String, i64, String, String, i64) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?);
                let same = out.last().is_some_and(|t| t.thread_id == id);
                if !same {
                    out.push(ThreadSummary {
                        thread_id: id,
                        namespaces: vec![],
                        checkpoints: 0,
                        pending_writes: 0,
                        last_update: String::new(),
                        latest_checkpoint_id: latest,
                    });
                }
                let Some(t) = out.last_mut() else { continue };
                t.checkpoints += n.max(0) as u64;
                t.pending_writes += writes.max(0) as u64;
                t.namespaces.push(ns);
                if last > t.last_update {
                    t.last_update = last;
                }
            }
            out.sort_by(|a, b| b.last_update.cmp(&a.last_update).then_with(|| a.thread_id.cmp(&b.thread_id)));
            Ok(out)
        })
    }
}

fn read_entry(thread_id: &str, r: &rusqlite::Row<'_>) -> Result<HistoryEntry> {
    let metadata: Option<String> = r.get(3)?;
    let metadata = match metadata.map(|m| serde_json::from_str::<Value>(&m)) {
        Some(Ok(Value::Object(m))) => Metadata(m),
        _ => Metadata::new(),
    };
    let updated: Option<String> = r.get(5)?;
    Ok(HistoryEntry {
        thread_id: thread_id.to_string(),
        checkpoint_ns: r.get(0)?,
        checkpoint_id: r.get(1)?,
        parent_checkpoint_id: r.get::<_, Option<String>>(2)?.filter(|p| !p.is_empty()),
        metadata,
        created_at: r.get(4)?,
        updated_channels: updated.and_then(|u| serde_json::from_str(&u).ok()),
        pending_writes: r.get::<_, i64>(6)?.max(0) as u64,
    })
}

/// The columns [`read_entry`] reads, from `checkpoints c`.
fn entry_columns(conn: &Connection) -> Result<String> {
    Ok(format!(
        "c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, CAST(c.metadata AS TEXT), \
         c.created_at, CASE WHEN c.type = 'msgpack' THEN agentstate_row_updated(c.checkpoint) \
                      ELSE json_extract(c.checkpoint, '$.updated_channels') END, \
         (SELECT {} FROM checkpoint_writes w WHERE w.thread_id = c.thread_id \
            AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)",
        writes_counted(conn)?
    ))
}

impl Checkpointer {
    /// Streams a thread's history to `f`, one [`HistoryEntry`] at a time,
    /// without channel values (no blob is read) and in constant memory; `f`
    /// returns [`ControlFlow::Break`] to stop early. Grouped by namespace
    /// (sorted); within one, newest first unless the query asks for oldest
    /// first. The whole walk sees one snapshot of the file.
    ///
    /// An unknown thread yields nothing (see [`has_thread`](Self::has_thread)).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the thread id is empty; [`Error::Busy`] and
    /// other database errors.
    pub fn history_each(
        &self,
        query: &HistoryQuery,
        mut f: impl FnMut(HistoryEntry) -> ControlFlow<()>,
    ) -> Result<()> {
        if query.thread_id.is_empty() {
            return Err(Error::InvalidConfig("thread_id must not be empty".into()));
        }
        if query.limit == Some(0) {
            return Ok(());
        }
        self.db().snapshot(|conn| {
            if !has_checkpoints(conn)? {
                return Ok(());
            }
            let mut sql = format!("SELECT {} FROM checkpoints c WHERE c.thread_id = ?", entry_columns(conn)?);
            let mut args: Vec<&str> = vec![&query.thread_id];
            if let Some(ns) = &query.checkpoint_ns {
                sql.push_str(" AND c.checkpoint_ns = ?");
                args.push(ns);
            }
            if let Some(before) = &query.before {
                sql.push_str(" AND c.checkpoint_id < ?");
                args.push(before);
            }
            sql.push_str(if query.oldest_first {
                " ORDER BY c.checkpoint_ns, c.checkpoint_id"
            } else {
                " ORDER BY c.checkpoint_ns, c.checkpoint_id DESC"
            });
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
            let mut left = query.limit.unwrap_or(usize::MAX);
            while let Some(r) = rows.next()? {
                if f(read_entry(&query.thread_id, r)?).is_break() {
                    break;
                }
                left -= 1;
                if left == 0 {
                    break;
                }
            }
            Ok(())
        })
    }

    /// A thread's history as a list; see [`history_each`](Self::history_each),
    /// which streams it.
    ///
    /// # Errors
    /// As [`history_each`](Self::history_each).
    pub fn history(&self, query: &HistoryQuery) -> Result<Vec<HistoryEntry>> {
        let mut out = vec![];
        self.history_each(query, |e| {
            out.push(e);
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// The history entry of the checkpoint `config` names (its latest if the
    /// config has no checkpoint id), or `None`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the thread id is empty; database errors.
    pub fn history_entry(&self, config: &CheckpointConfig) -> Result<Option<HistoryEntry>> {
        let Some(id) = &config.checkpoint_id else {
            let query =
                HistoryQuery::thread(config.thread_id.clone()).namespace(config.checkpoint_ns.clone());
            return Ok(self.history(&query.limit(1))?.pop());
        };
        if config.thread_id.is_empty() {
            return Err(Error::InvalidConfig("thread_id must not be empty".into()));
        }
        self.db().snapshot(|conn| {
            if !has_checkpoints(conn)? {
                return Ok(None);
            }
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {} FROM checkpoints c \
                 WHERE c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = ?3",
                entry_columns(conn)?
            ))?;
            let mut rows = stmt.query(params![config.thread_id, config.checkpoint_ns, id])?;
            rows.next()?.map(|r| read_entry(&config.thread_id, r)).transpose()
        })
    }

    /// Whether `thread_id` has any checkpoint.
    ///
    /// # Errors
    /// Database errors.
    pub fn has_thread(&self, thread_id: &str) -> Result<bool> {
        self.db().read(|conn| {
            if !has_checkpoints(conn)? {
                return Ok(false);
            }
            Ok(conn
                .prepare_cached("SELECT EXISTS(SELECT 1 FROM checkpoints WHERE thread_id = ?1)")?
                .query_row([thread_id], |r| r.get(0))?)
        })
    }

    /// The full id of the checkpoint of (`thread_id`, `ns`) that `given`
    /// names: the id itself, or a unique part of one (ids written by one run
    /// share their first characters: the distinctive ones are in the middle
    /// and at the end).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `given` is empty; database errors.
    pub fn resolve_id(&self, thread_id: &str, ns: &str, given: &str) -> Result<IdMatch> {
        if given.is_empty() {
            return Err(Error::InvalidArgument("an empty checkpoint id".into()));
        }
        self.db().snapshot(|conn| {
            if !has_checkpoints(conn)? {
                return Ok(IdMatch::None);
            }
            let exact: Option<String> = conn
                .prepare_cached(
                    "SELECT checkpoint_id FROM checkpoints \
                     WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3",
                )?
                .query_row([thread_id, ns, given], |r| r.get(0))
                .optional()?;
            if let Some(id) = exact {
                return Ok(IdMatch::One(id));
            }
            let mut stmt = conn.prepare_cached(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                 AND instr(checkpoint_id, ?3) > 0 ORDER BY checkpoint_id LIMIT 2",
            )?;
            let mut found: Vec<String> =
                stmt.query_map([thread_id, ns, given], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
            Ok(match found.len() {
                0 => IdMatch::None,
                1 => IdMatch::One(found.remove(0)),
                _ => IdMatch::Ambiguous {
                    matches: count(
                        conn,
                        "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                         AND instr(checkpoint_id, ?3) > 0",
                        [thread_id, ns, given],
                    )? as usize,
                },
            })
        })
    }

    /// The rows `thread_id` occupies (all zero for an unknown thread).
    ///
    /// # Errors
    /// Database errors.
    pub fn thread_counts(&self, thread_id: &str) -> Result<ThreadCounts> {
        self.db().snapshot(|conn| {
            let mut out = ThreadCounts::default();
            for (table, n) in [
                ("checkpoints", &mut out.checkpoints),
                ("checkpoint_blobs", &mut out.blobs),
                ("checkpoint_writes", &mut out.pending_writes),
            ] {
                if has_table(conn, table)? {
                    *n = count(
                        conn,
                        &format!("SELECT COUNT(*) FROM {table} WHERE thread_id = ?1"),
                        [thread_id],
                    )?;
                }
            }
            Ok(out)
        })
    }
}
