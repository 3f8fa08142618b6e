//! Listing checkpoints: [`Checkpointer::list`] and the streaming
//! [`ListIter`].

use std::sync::Arc;

use rusqlite::params_from_iter;

use rusqlite::Connection;

use super::chain::Pieces;
use super::read::{shared_row, Memo, Row, ROW_COLUMNS};
use super::types::{CheckpointConfig, CheckpointTuple, ListQuery};
use super::Checkpointer;
use crate::error::Result;
use crate::filter::Filter;

/// Checkpoints fetched per page by a [`ListIter`].
const PAGE: usize = 64;

/// Decoded values a [`ListIter`] keeps between pages at most.
const MEMO_ENTRIES: usize = 16 * 1024;

impl Checkpointer {
    /// The checkpoints matching `query`, newest first (by id, across threads
    /// and namespaces), each with its values and pending writes. The metadata
    /// filter uses the [filter language](crate::filter).
    ///
    /// This collects [`list_iter`](Self::list_iter); iterate that instead to keep
    /// memory constant on long threads.
    ///
    /// # Errors
    /// - [`Error::InvalidFilter`](crate::Error::InvalidFilter) if the filter
    ///   does not parse or is too large ([`Filter::parse`](crate::Filter::parse)).
    /// - decoding and database errors as for
    ///   [`get_tuple`](Self::get_tuple).
    pub fn list(&self, query: &ListQuery) -> Result<Vec<CheckpointTuple>> {
        self.list_iter(query)?.collect()
    }

    /// The checkpoints of [`list`](Self::list), one at a time: pages of a few
    /// dozen rows are read as the iterator advances, so memory stays constant
    /// however long the history (values shared between versions are decoded
    /// once per page at most). Each page is one consistent read; checkpoints
    /// written while iterating may or may not appear.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`](crate::Error::InvalidFilter) at once if the
    /// filter does not parse or is too large, and database errors at once when the query
    /// names a thread but no namespace (its namespaces are looked up first);
    /// each item may then be a decoding or database error, after which the
    /// iterator ends.
    pub fn list_iter(&self, query: &ListQuery) -> Result<ListIter> {
        self.list_with(query, |saver, tx, rows, memo, _| saver.assemble(tx, rows, memo), |t| &t.config)
    }

    /// A [`ListIter`] whose pages `assemble` makes from rows.
    pub(super) fn list_with<T>(
        &self,
        query: &ListQuery,
        assemble: Assemble<T>,
        config_of: fn(&T) -> &CheckpointConfig,
    ) -> Result<ListIter<T>> {
        let filter = query.filter.as_ref().map(Filter::parse).transpose()?;
        // The conditions every page shares.
        let mut sql = String::new();
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(t) = &query.thread_id {
            sql.push_str(" AND thread_id = ?");
            args.push(t.clone().into());
        }
        // A thread listed across namespaces most often has one: listed as
        // that namespace, its pages are read in key order, not sorted (a
        // sort would read every row of the thread for every page).
        let ns = match (&query.checkpoint_ns, &query.thread_id) {
            (None, Some(thread)) => self.only_namespace(thread)?,
            (ns, _) => ns.clone(),
        };
        if let Some(ns) = &ns {
            sql.push_str(" AND checkpoint_ns = ?");
            args.push(ns.clone().into());
        }
        // An empty id is none, as in LangGraph's `list(config)`.
        if let Some(id) = query.checkpoint_id.as_deref().filter(|id| !id.is_empty()) {
            sql.push_str(" AND checkpoint_id = ?");
            args.push(id.to_owned().into());
        }
        if let Some(f) = &filter {
            let (expr, params) = f.to_sql("metadata");
            sql.push_str(" AND (");
            sql.push_str(&expr);
            sql.push(')');
            args.extend(params);
        }
        // Pages continue below the last row returned: (id, thread, ns)
        // descending is a total order; within one thread and namespace the
        // id alone is (and lets SQLite seek in the primary key).
        let one_chain = query.thread_id.is_some() && ns.is_some();
        // The page's size is written into the SQL, not bound: SQLite plans
        // with a bound LIMIT's value, so it compiles a statement again each
        // time one is bound (about 190k instructions, most of a short list).
        let order = format!(" ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC LIMIT {LIMIT}");
        let before = if query.before.is_some() { " AND checkpoint_id < ?" } else { "" };
        let (first_page, next_page) = if one_chain {
            let page =
                |cond: &str| format!("SELECT {ROW_COLUMNS} FROM checkpoints WHERE 1{sql}{cond}{order}");
            (page(before), page(" AND checkpoint_id < ?"))
        } else {
            // Across threads or namespaces the page is sorted: sort the keys
            // (the key index alone, unless a filter reads the metadata), then
            // read the page's rows by key.
            let columns: Vec<String> = ROW_COLUMNS.split(", ").map(|c| format!("c.{c}")).collect();
            let page = |cond: &str| {
                format!(
                    "SELECT {} FROM (SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints \
                     WHERE 1{sql}{cond}{order}) AS k \
                     JOIN checkpoints AS c ON c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns \
                                          AND c.checkpoint_id = k.checkpoint_id \
                     ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC",
                    columns.join(", ")
                )
            };
            (page(before), page(" AND (checkpoint_id, thread_id, checkpoint_ns) < (?, ?, ?)"))
        };
        Ok(ListIter {
            saver: self.clone(),
            first_page,
            next_page,
            args,
            one_chain,
            before: query.before.clone(),
            remaining: query.limit,
            last: None,
            page: Vec::new().into_iter(),
            memo: Memo::for_pages(one_chain && filter.is_none()),
            pieces: Pieces::default(),
            memo_count: None,
            assemble,
            config_of,
            done: false,
        })
    }
}

impl Checkpointer {
    /// The one namespace `thread` has checkpoints in, if it has exactly one
    /// (two seeks of the key index: its lowest and its highest).
    fn only_namespace(&self, thread: &str) -> Result<Option<String>> {
        self.db.read(|conn| {
            let (lo, hi): (Option<String>, Option<String>) = conn
                .prepare_cached(
                    "SELECT (SELECT checkpoint_ns FROM checkpoints WHERE thread_id = ?1 \
                             ORDER BY checkpoint_ns LIMIT 1), \
                            (SELECT checkpoint_ns FROM checkpoints WHERE thread_id = ?1 \
                             ORDER BY checkpoint_ns DESC LIMIT 1)",
                )?
                .query_row([thread], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(lo.filter(|lo| hi.as_ref() == Some(lo)))
        })
    }
}

/// Where a page's SQL takes its `LIMIT` (see [`with_limit`]).
const LIMIT: &str = "{limit}";

/// `sql` with its page size: one statement per size (at most [`PAGE`]) in
/// the connection's statement cache.
fn with_limit(sql: &str, n: usize) -> String {
    sql.replacen(LIMIT, &n.to_string(), 1)
}

/// Makes a page of items from rows (with the read's decoded values and raw
/// blob rows to share).
pub(super) type Assemble<T> =
    fn(&Checkpointer, &Connection, Vec<Arc<Row>>, &mut Memo, &mut Pieces) -> Result<Vec<T>>;

/// The checkpoints of a [`ListQuery`], newest first, read a page at a time.
/// Made by [`Checkpointer::list_iter`] (decoded [`CheckpointTuple`]s) and
/// [`Checkpointer::list_encoded`] ([`EncodedTuple`](super::EncodedTuple)s).
pub struct ListIter<T = CheckpointTuple> {
    saver: Checkpointer,
    /// The SQL of the first page and of the next ones, `LIMIT` left to
    /// [`with_limit`].
    first_page: String,
    next_page: String,
    args: Vec<rusqlite::types::Value>,
    one_chain: bool,
    before: Option<String>,
    remaining: Option<usize>,
    /// (id, thread, ns) of the last row fetched.
    last: Option<(String, String, String)>,
    page: std::vec::IntoIter<T>,
    memo: Memo,
    pieces: Pieces,
    /// The deletion count the memo was filled under (see `deletions`).
    memo_count: Option<i64>,
    assemble: Assemble<T>,
    config_of: fn(&T) -> &CheckpointConfig,
    done: bool,
}

impl<T> std::fmt::Debug for ListIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListIter").field("remaining", &self.remaining).finish_non_exhaustive()
    }
}

impl<T> ListIter<T> {
    fn fetch(&mut self) -> Result<Vec<T>> {
        let want = self.remaining.map_or(PAGE, |r| r.min(PAGE));
        if want == 0 {
            return Ok(Vec::new());
        }
        let mut args = self.args.clone();
        let sql = match &self.last {
            None => {
                if let Some(b) = &self.before {
                    args.push(b.clone().into());
                }
                &self.first_page
            }
            Some((id, thread, ns)) => {
                args.push(id.clone().into());
                if !self.one_chain {
                    args.push(thread.clone().into());
                    args.push(ns.clone().into());
                }
                &self.next_page
            }
        };
        let sql = with_limit(sql, want);
        let saver = &self.saver;
        let tuples = saver.db.snapshot(|tx| {
            // What the memo carries from the last page holds while no
            // deletion, by anyone, came between. (Not `sync_read`: its
            // first read's caches would be dropped at the second page.)
            let now = saver.caches().sync(tx)?;
            if self.memo_count.replace(now) != Some(now) {
                self.memo.clear();
                self.pieces.clear();
            }
            self.memo.read_at(now);
            let rows = tx
                .prepare_cached(&sql)?
                .query_map(params_from_iter(args.iter()), |r| shared_row(saver, r))?
                .collect::<rusqlite::Result<Vec<Arc<Row>>>>()?;
            (self.assemble)(saver, tx, rows, &mut self.memo, &mut self.pieces)
        })?;
        // The memo carries values (cheap shared prefixes of one list) and
        // the raw rows of delta chains from page to page; bounded, so memory
        // stays constant.
        if self.memo.len() > MEMO_ENTRIES {
            self.memo.clear();
        }
        if self.pieces.len() > MEMO_ENTRIES {
            self.pieces.clear();
        }
        if let Some(t) = tuples.last() {
            let c = (self.config_of)(t);
            self.last = Some((
                c.checkpoint_id.clone().unwrap_or_default(),
                c.thread_id.clone(),
                c.checkpoint_ns.clone(),
            ));
        }
        if let Some(r) = &mut self.remaining {
            *r -= tuples.len();
        }
        if tuples.len() < want {
            self.done = true;
        }
        Ok(tuples)
    }
}

impl<T> Iterator for ListIter<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if let Some(t) = self.page.next() {
            return Some(Ok(t));
        }
        if self.done {
            return None;
        }
        match self.fetch() {
            Ok(tuples) => {
                if tuples.is_empty() {
                    self.done = true;
                }
                self.page = tuples.into_iter();
                self.page.next().map(Ok)
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Db;
    use rusqlite::StatementStatus;
    use serde_json::json;

    /// A page's statement is compiled once: SQLite compiles a statement
    /// again each time a value is bound to a `LIMIT` it planned with, so the
    /// page size is written into the SQL.
    #[test]
    fn pages_are_not_compiled_again_per_list() {
        let db = Db::open_in_memory().unwrap();
        let saver = db.checkpointer();
        let mut head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
        for i in 1..5 {
            head = saver.step(&head).set("n", json!(i)).commit().unwrap();
        }
        for query in [
            ListQuery::thread("t").filter(json!({"step": 1})),
            ListQuery::all().filter(json!({"source": "loop"})).limit(2),
        ] {
            let pages = saver.list_iter(&query).unwrap();
            let sql = with_limit(&pages.first_page, 2);
            db.read(|conn| {
                let mut stmt = conn.prepare(&sql)?;
                for _ in 0..3 {
                    stmt.query(params_from_iter(pages.args.iter()))?.next()?;
                }
                assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
                Ok(())
            })
            .unwrap();
        }
    }
}
