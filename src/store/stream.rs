//! Search from the file, in memory bounded by the page (`offset + limit`),
//! for namespaces whose in-memory copy would exceed the store's search
//! memory budget.
//!
//! It returns exactly what the in-memory search (`cache::search`) returns:
//! the same items, order, scores and tie-breaks.
//!
//! - With a query, one pass over the vectors under the prefix computes every
//!   row's cosine similarity in SQL with sqlite-vec (`1 -
//!   vec_distance_cosine`). sqlite-vec accumulates in `f32` without
//!   normalising first, so its score can differ from ours by a few `f32`
//!   roundings per dimension ([`margin`]). A row is skipped only if its SQL
//!   score plus that margin is below the worst of the best `offset + limit`
//!   items found so far; every other row is rescored in Rust exactly as the
//!   in-memory path scores it (normalise in `f64`, then the same `f32` dot
//!   product), after checking that its item is alive and matches the filter
//!   (one primary-key lookup). The best `offset + limit` items are kept,
//!   max-pooled per item. Rows sqlite-vec cannot score (`NULL`: a zero or
//!   non-finite vector, a wrong length, not a blob) are handled in Rust as
//!   the in-memory path handles them.
//! - Items without a score (no vector, all-zero vectors, or no query) come
//!   after the scored ones, newest first; a pass over the items keeps the
//!   newest ones needed to fill the page.
//!
//! sqlite-vec's `f32` sums are within the margin for vectors whose squared
//! norm is a normal `f32` (components within about 1e-18..1e18 in
//! magnitude), which every embedder we know of produces.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{params_from_iter, Connection, OptionalExtension};

use super::cache::{dot, exact_score, unit_vector, wrong_size};
use super::exec::alive;
use super::namespace::{encode_prefix, SEPARATOR};
use super::partial::Head;
use crate::error::Result;
use crate::filter::Filter;
use crate::vector::encode_f32;

/// A page entry: (prefix, key, score).
pub(crate) type StreamHit = (String, String, Option<f64>);

/// The most sqlite-vec's similarity can differ from ours for unit-length
/// comparisons in `dims` dimensions: both sum `dims` products in `f32`
/// (relative error at most `dims * u` each, `u = 2^-24`), sqlite-vec twice
/// more for the norms, plus a few roundings; doubled for safety.
pub(crate) fn margin(dims: usize) -> f64 {
    2.0 * (3.0 * dims as f64 + 16.0) * f64::from(f32::EPSILON / 2.0)
}

/// A namespace prefix as an index range: every encoded prefix equal to it or
/// below it (`p` or `p.*`) lies in `[p, p + "/")`, `/` being the byte after
/// the separator `.`; [`Range::holds`] drops the few others in that range
/// (`p-x`, ...).
pub(super) struct Range {
    exact: String,
    below: String,
}

impl Range {
    pub(super) fn new(prefix: &[String]) -> Option<Range> {
        if prefix.is_empty() {
            return None;
        }
        let exact = encode_prefix(prefix);
        Some(Range { below: format!("{exact}{SEPARATOR}"), exact })
    }

    pub(super) fn sql(range: Option<&Range>, column: &str, args: &mut Vec<SqlValue>) -> String {
        match range {
            None => "1".into(),
            Some(r) => {
                args.push(SqlValue::Text(r.exact.clone()));
                args.push(SqlValue::Text(format!("{}/", r.exact)));
                format!("({column} >= ? AND {column} < ?)")
            }
        }
    }

    /// [`Range::sql`] for the rows after `(prefix, key)` = `after` in key
    /// order (all rows if `None`), a bound the index seeks to.
    fn sql_after(
        range: Option<&Range>,
        after: &Option<(String, String)>,
        args: &mut Vec<SqlValue>,
    ) -> String {
        let Some((p, k)) = after else { return Range::sql(range, "prefix", args) };
        args.push(SqlValue::Text(p.clone()));
        args.push(SqlValue::Text(k.clone()));
        match range {
            None => "(prefix, key) > (?, ?)".into(),
            Some(r) => {
                args.push(SqlValue::Text(format!("{}/", r.exact)));
                "(prefix, key) > (?, ?) AND prefix < ?".into()
            }
        }
    }

    fn holds(range: Option<&Range>, prefix: &str) -> bool {
        range.is_none_or(|r| prefix == r.exact || prefix.starts_with(&r.below))
    }
}

/// A scored item, ordered best first: score descending, then prefix, key.
#[derive(Clone, PartialEq)]
struct Scored {
    score: f32,
    prefix: String,
    key: String,
}

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, o: &Self) -> Ordering {
        f64::from(o.score)
            .total_cmp(&f64::from(self.score))
            .then_with(|| self.prefix.cmp(&o.prefix))
            .then_with(|| self.key.cmp(&o.key))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The best `cap` scored items, max-pooled per item.
struct Best {
    cap: usize,
    set: BTreeSet<Scored>,
    score: HashMap<(String, String), f32>,
}

impl Best {
    fn new(cap: usize) -> Best {
        Best { cap, set: BTreeSet::new(), score: HashMap::new() }
    }

    /// The score below which nothing can enter, once full.
    fn floor(&self) -> Option<f32> {
        if self.set.len() >= self.cap {
            self.set.last().map(|s| s.score)
        } else {
            None
        }
    }

    fn offer(&mut self, prefix: &str, key: &str, score: f32) {
        let id = (prefix.to_string(), key.to_string());
        if let Some(&old) = self.score.get(&id) {
            if score <= old {
                return;
            }
            self.set.remove(&Scored { score: old, prefix: id.0.clone(), key: id.1.clone() });
        }
        let entry = Scored { score, prefix: id.0.clone(), key: id.1.clone() };
        if self.set.len() >= self.cap && self.set.last().is_some_and(|w| *w < entry) {
            self.score.remove(&id);
            return;
        }
        self.score.insert(id, score);
        self.set.insert(entry);
        if self.set.len() > self.cap {
            if let Some(w) = self.set.pop_last() {
                self.score.remove(&(w.prefix, w.key));
            }
        }
    }
}

/// The page of a search over the items under `prefix`, as the in-memory
/// search computes it. `query` is unit-length (or `None`: no scores);
/// `dims` the index dimension.
///
/// `head`: the partial copy of the first vector rows under `prefix` (see
/// `partial`); only the rows after it are streamed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn search(
    conn: &Connection,
    prefix: &[String],
    filter: Option<&Filter>,
    query: Option<&[f32]>,
    dims: Option<usize>,
    head: Option<&Head>,
    limit: usize,
    offset: usize,
) -> Result<Vec<StreamHit>> {
    let want = offset.saturating_add(limit);
    let range = Range::new(prefix);
    let (filter_sql, filter_args) = match filter {
        Some(f) => f.to_sql("s.value"),
        None => ("1".into(), vec![]),
    };
    let mut best = Best::new(want);
    if let (Some(q), Some(dims)) = (query, dims.filter(|d| *d > 0)) {
        if q.len() == dims {
            score_vectors(conn, range.as_ref(), (&filter_sql, &filter_args), q, dims, head, &mut best)?;
        }
    }
    let mut page: Vec<StreamHit> =
        best.set.into_iter().map(|s| (s.prefix, s.key, Some(f64::from(s.score)))).collect();
    if page.len() < want {
        // Every scored item is in `page` (nothing was skipped: the set never
        // filled); the rest are unscored, newest first.
        let scored: HashSet<(&str, &str)> = page.iter().map(|(p, k, _)| (p.as_str(), k.as_str())).collect();
        let newest =
            newest_unscored(conn, range.as_ref(), (&filter_sql, &filter_args), &scored, want - page.len())?;
        page.extend(newest.into_iter().map(|(_, p, k)| (p, k, None)));
    }
    Ok(page.into_iter().skip(offset).take(limit).collect())
}

/// A stored `embedding` of item (`p`, `k`) that is not a vector of this
/// index (not a blob of `dims` floats): corrupt if the item exists (as in
/// memory), `Ok` for an orphan row, which every search ignores. `exists`:
/// `SELECT 1 FROM store WHERE prefix = ?1 AND key = ?2`.
pub(super) fn not_a_vector(
    exists: &mut rusqlite::CachedStatement<'_>,
    p: &str,
    k: &str,
    stored: ValueRef<'_>,
    dims: usize,
) -> Result<()> {
    if exists.query_row([p, k], |_| Ok(())).optional()?.is_none() {
        return Ok(());
    }
    match stored {
        ValueRef::Blob(b) => Err(wrong_size(p, k, b.len(), dims)),
        _ => Err(rusqlite::Error::from(rusqlite::types::FromSqlError::InvalidType).into()),
    }
}

/// The (prefix, key) in a row's first two columns, if its prefix is under
/// `range` (`None` for the few others an index range holds).
pub(super) fn item_under<'r>(
    r: &'r rusqlite::Row<'_>,
    range: Option<&Range>,
) -> Result<Option<(&'r str, &'r str)>> {
    let p = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
    if !Range::holds(range, p) {
        return Ok(None);
    }
    Ok(Some((p, r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?)))
}

fn score_vectors(
    conn: &Connection,
    range: Option<&Range>,
    (filter_sql, filter_args): (&str, &[SqlValue]),
    q: &[f32],
    dims: usize,
    head: Option<&Head>,
    best: &mut Best,
) -> Result<()> {
    let mut check = conn.prepare_cached(&format!(
        "SELECT 1 FROM store s WHERE s.prefix = ? AND s.key = ? AND {} AND ({filter_sql})",
        alive("s")
    ))?;
    let mut valid = |p: &str, k: &str| -> Result<bool> {
        let mut a = vec![SqlValue::Text(p.to_string()), SqlValue::Text(k.to_string())];
        a.extend_from_slice(filter_args);
        Ok(check.query_row(params_from_iter(a.iter()), |_| Ok(())).optional()?.is_some())
    };
    // The head's items first, best bound first: the page they fill lets the
    // stream below skip most rows.
    let mut rest = Some(None);
    if let Some(h) = head {
        for (bound, p, k) in h.by_bound(q) {
            if best.floor().is_some_and(|floor| bound < floor) {
                break;
            }
            if valid(p, k)? {
                if let Some(score) = exact_score(conn, p, k, q)? {
                    best.offer(p, k, score);
                }
            }
        }
        rest = h.rest.clone();
    }
    let Some(rest) = rest else { return Ok(()) };
    let bytes = dims * 4;
    let mut args = vec![SqlValue::Integer(bytes as i64), SqlValue::Blob(encode_f32(q))];
    let sql = format!(
        "SELECT prefix, key, CASE WHEN typeof(embedding) = 'blob' AND length(embedding) = ? \
         THEN 1.0 - vec_distance_cosine(embedding, ?) END, embedding FROM store_vectors WHERE {}",
        Range::sql_after(range, &rest, &mut args)
    );
    let mut exists = conn.prepare_cached("SELECT 1 FROM store WHERE prefix = ?1 AND key = ?2")?;
    let margin = margin(dims);
    let mut last: Option<(String, String, bool)> = None;
    let mut v: Vec<f32> = Vec::with_capacity(dims);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(args.iter()))?;
    while let Some(r) = rows.next()? {
        let Some((p, k)) = item_under(r, range)? else { continue };
        let approx: Option<f64> = r.get(2)?;
        let blob = match (approx, r.get_ref(3)?) {
            (Some(s), ValueRef::Blob(b)) if s.is_finite() => {
                if best.floor().is_some_and(|floor| s + margin < f64::from(floor)) {
                    continue;
                }
                b
            }
            (_, ValueRef::Null) => continue,
            (_, ValueRef::Blob(b)) if b.len() == bytes => b,
            (_, other) => {
                not_a_vector(&mut exists, p, k, other, dims)?;
                continue;
            }
        };
        let ok = match &last {
            Some((lp, lk, ok)) if lp == p && lk == k => *ok,
            _ => {
                let ok = valid(p, k)?;
                last = Some((p.to_string(), k.to_string(), ok));
                ok
            }
        };
        if !ok {
            continue;
        }
        if unit_vector(blob, &mut v) {
            best.offer(p, k, dot(q, &v));
        }
    }
    Ok(())
}

/// The `n` newest matching items not in `scored`: (updated_at, prefix, key),
/// newest first, ties by prefix then key.
fn newest_unscored(
    conn: &Connection,
    range: Option<&Range>,
    (filter_sql, filter_args): (&str, &[SqlValue]),
    scored: &HashSet<(&str, &str)>,
    n: usize,
) -> Result<Vec<(String, String, String)>> {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Newest(std::cmp::Reverse<String>, String, String);
    let mut args = vec![];
    let sql = format!(
        "SELECT s.prefix, s.key, s.updated_at FROM store s WHERE {} AND {} AND ({filter_sql})",
        Range::sql(range, "s.prefix", &mut args),
        alive("s")
    );
    args.extend_from_slice(filter_args);
    let mut top: BTreeSet<Newest> = BTreeSet::new();
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(args.iter()))?;
    while let Some(r) = rows.next()? {
        let Some((p, k)) = item_under(r, range)? else { continue };
        if scored.contains(&(p, k)) {
            continue;
        }
        let updated: Option<String> = r.get(2)?;
        let entry = Newest(std::cmp::Reverse(updated.unwrap_or_default()), p.to_string(), k.to_string());
        if top.len() >= n && top.last().is_some_and(|w| *w < entry) {
            continue;
        }
        top.insert(entry);
        if top.len() > n {
            top.pop_last();
        }
    }
    Ok(top.into_iter().map(|Newest(u, p, k)| (u.0, p, k)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cache::normalise;

    #[test]
    fn sqlite_vec_scores_zero_vectors_as_null_and_is_within_the_margin() {
        let conn = Connection::open_in_memory().unwrap();
        crate::vector::register(&conn).unwrap();
        let d: Option<f64> = conn
            .query_row(
                "SELECT 1.0 - vec_distance_cosine(?1, ?2)",
                [encode_f32(&[0.0, 0.0, 0.0]), encode_f32(&[1.0, 0.0, 0.0])],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(d, None);
        let dims = 384;
        let mut a: Vec<f32> = (0..dims).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let mut b: Vec<f32> = (0..dims).map(|i| ((i * 53 % 97) as f32 - 48.0) / 3.0).collect();
        let sql: f64 = conn
            .query_row("SELECT 1.0 - vec_distance_cosine(?1, ?2)", [encode_f32(&a), encode_f32(&b)], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(normalise(&mut a) && normalise(&mut b));
        let ours = f64::from(dot(&a, &b));
        assert!((sql - ours).abs() <= margin(dims), "{sql} vs {ours}");
        assert!(margin(dims) < 2e-4);
    }

    #[test]
    fn the_range_holds_the_prefix_and_what_is_below_it_only() {
        let r = Range::new(&["a".to_string(), "b".to_string()]);
        assert!(Range::holds(r.as_ref(), "a.b"));
        assert!(Range::holds(r.as_ref(), "a.b.c"));
        assert!(!Range::holds(r.as_ref(), "a.b-c"));
        assert!(!Range::holds(r.as_ref(), "a.bc"));
        assert!(Range::holds(None, "anything"));
    }

    #[test]
    fn best_keeps_the_top_items_max_pooled() {
        let mut b = Best::new(2);
        b.offer("p", "a", 0.5);
        b.offer("p", "b", 0.4);
        b.offer("p", "c", 0.45);
        b.offer("p", "b", 0.9);
        b.offer("p", "a", 0.1);
        let got: Vec<(String, f32)> = b.set.into_iter().map(|s| (s.key, s.score)).collect();
        assert_eq!(got, vec![("b".to_string(), 0.9), ("a".to_string(), 0.5)]);
    }
}
