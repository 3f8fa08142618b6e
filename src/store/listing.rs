//! `list_namespaces`: one pass over the `(prefix, expires_at)` index (its
//! prefixes alone while no item of the store has an expiry), and a small
//! cache of recent answers.
//!
//! An answer depends on the file and on the clock: a namespace is listed
//! while one of its items has not expired. So each answer is read with the
//! time until which it stays true without a write: the earliest instant at
//! which one of the namespaces it counts (those it returns and those its
//! offset skips) loses its last live item. A lone `list_namespaces` is
//! answered from the cache while the file's generation (moved by every
//! commit, by any connection or process) is the one the answer was read at
//! and that instant has not come (nor has the clock been set back before
//! the read); any other call reads the file.

use std::sync::{LazyLock, Mutex};

use rusqlite::types::ValueRef;
use rusqlite::{params_from_iter, Connection};

use super::exec::alive;
use super::namespace::{self, MatchCondition, Namespace};
use super::ops::ListNamespaces;
use crate::checkpoint::id::sqlite_now;
use crate::db::Db;
use crate::error::Result;

/// Answers kept, most recent last.
const ANSWERS: usize = 8;
/// Longer answers are not kept (they would hold their namespaces alive).
const MAX_CACHED_NAMESPACES: usize = 16_384;

/// A `list_namespaces` answer and how long it holds without a write.
struct Listed {
    namespaces: Vec<Namespace>,
    /// The answer holds while the clock, as SQLite's `strftime('%Y-%m-%d
    /// %H:%M:%f', 'now')` text, is at most this; `None`: until a write.
    until: Option<String>,
}

struct Answer {
    query: ListNamespaces,
    generation: u64,
    /// The clock when it was read: a clock set back before it (items that
    /// had expired would be live again) does not use it.
    read_at: String,
    listed: Listed,
}

impl Answer {
    /// Whether the answer is still true at `now` (SQLite's text form), the
    /// file unchanged.
    fn holds_at(&self, now: &str) -> bool {
        self.read_at.as_str() <= now && self.listed.until.as_deref().is_none_or(|u| u >= now)
    }
}

/// Recent answers of lone `list_namespaces` calls.
#[derive(Default)]
pub(crate) struct ListCache(Mutex<Vec<Answer>>);

impl ListCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Answer>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer to `l`, from the cache when it still holds.
    pub(crate) fn list(&self, db: &Db, l: &ListNamespaces) -> Result<Vec<Namespace>> {
        let hit = |generation: u64| {
            let answers = self.lock();
            let a = answers.iter().rev().find(|a| a.generation == generation && a.query == *l)?;
            a.holds_at(&sqlite_now()).then(|| a.listed.namespaces.clone())
        };
        db.cached_snapshot(hit, |conn, generation| {
            let read_at = sqlite_now();
            // The last answer to the same query, even if stale: namespaces
            // it shares with the new one are handed out again, not rebuilt
            // (after a write, most often all of them are the same).
            // (Copied, not taken: another thread may have cached a fresh
            // answer to the same query meanwhile, which must stay whole.)
            let previous =
                self.lock().iter().rev().find(|a| a.query == *l).map(|a| a.listed.namespaces.clone());
            let listed = read(conn, l, &mut Reuse::new(previous.as_deref().unwrap_or_default()))?;
            let out = listed.namespaces.clone();
            if listed.namespaces.len() <= MAX_CACHED_NAMESPACES {
                let mut answers = self.lock();
                answers.retain(|a| a.query != *l && a.generation == generation);
                if answers.len() == ANSWERS {
                    answers.remove(0);
                }
                answers.push(Answer { query: l.clone(), generation, read_at, listed });
            }
            Ok(out)
        })
    }
}

/// The namespaces of `l` as the file holds them now (no cache).
pub(crate) fn list(conn: &Connection, l: &ListNamespaces) -> Result<Vec<Namespace>> {
    Ok(read(conn, l, &mut Reuse::new(&[]))?.namespaces)
}

/// Namespaces of an earlier answer, in the order it listed them, to be
/// handed out again where a new answer lists the same ones in that order.
struct Reuse<'a> {
    earlier: &'a [Namespace],
    next: usize,
}

impl<'a> Reuse<'a> {
    fn new(earlier: &'a [Namespace]) -> Reuse<'a> {
        Reuse { earlier, next: 0 }
    }

    /// The namespace encoded as `p`: the earlier answer's if it comes next
    /// there (earlier ones that sort before `p` in byte order are passed
    /// over: answers are in that order), otherwise decoded.
    fn get(&mut self, p: &str) -> Namespace {
        while let Some(ns) = self.earlier.get(self.next) {
            match cmp_encoded_bytes(ns, p) {
                std::cmp::Ordering::Less => self.next += 1,
                std::cmp::Ordering::Equal => {
                    self.next += 1;
                    return ns.clone();
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        decode(p)
    }
}

/// How a namespace's encoded form (its labels joined by the separator)
/// compares with `p` byte by byte, without building it.
fn cmp_encoded_bytes(ns: &Namespace, p: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let mut rest = p.as_bytes();
    for (i, label) in ns.labels().iter().enumerate() {
        if i > 0 {
            let Some((&b, after)) = rest.split_first() else { return Greater };
            if b != namespace::SEPARATOR as u8 {
                return (namespace::SEPARATOR as u8).cmp(&b);
            }
            rest = after;
        }
        let label = label.as_bytes();
        let n = label.len().min(rest.len());
        match label[..n].cmp(&rest[..n]) {
            Equal if label.len() > n => return Greater,
            Equal => rest = &rest[n..],
            other => return other,
        }
    }
    if rest.is_empty() {
        Equal
    } else {
        Less
    }
}

/// The labels of an encoded prefix cut to `depth` labels.
fn cut(p: &str, depth: Option<usize>) -> &str {
    match depth {
        Some(0) => "",
        Some(d) => p.match_indices(namespace::SEPARATOR).nth(d - 1).map_or(p, |(i, _)| &p[..i]),
        None => p,
    }
}

/// How long one listed namespace stays listed, from the expiries of its
/// live rows: while its latest expiry has not passed, or until a write if
/// one of them never expires (NULL; also a BLOB, which sorts after every
/// text and so is never below the clock).
#[derive(Default)]
struct Group {
    never: bool,
    latest: Option<String>,
}

impl Group {
    fn add(&mut self, expires_at: ValueRef<'_>) {
        match expires_at {
            ValueRef::Text(t) => {
                let t = String::from_utf8_lossy(t);
                if self.latest.as_deref().is_none_or(|l| *t > *l) {
                    self.latest = Some(t.into_owned());
                }
            }
            // (A number sorts below every text: such a row is never alive
            // and never read here.)
            _ => self.never = true,
        }
    }

    fn merge(&mut self, other: Group) {
        self.never |= other.never;
        if other.latest > self.latest {
            self.latest = other.latest;
        }
    }
}

/// The earliest instant one of the groups seen stops being listed.
#[derive(Default)]
struct Until(Option<String>);

impl Until {
    fn add(&mut self, g: &Group) {
        if g.never {
            return;
        }
        if let Some(t) = &g.latest {
            if self.0.as_ref().is_none_or(|u| t < u) {
                self.0 = Some(t.clone());
            }
        }
    }
}

fn read(conn: &Connection, l: &ListNamespaces, reuse: &mut Reuse<'_>) -> Result<Listed> {
    if l.limit == 0 {
        return Ok(Listed { namespaces: vec![], until: None });
    }
    // Push one literal prefix down to the index as a range (a bound GLOB
    // pattern would make SQLite re-prepare the statement on every call);
    // match the rest on the encoded text.
    let pushed = l.conditions.iter().position(|c| c.literal_prefix().is_some());
    let range =
        pushed.and_then(|i| l.conditions[i].literal_prefix()).and_then(|lit| namespace::prefix_range(&lit));
    let rest: Vec<&MatchCondition> =
        l.conditions.iter().enumerate().filter(|(i, _)| Some(*i) != pushed).map(|(_, c)| c).collect();
    let holds = |p: &str| {
        range.as_ref().is_none_or(|r| p == r.exact || p.starts_with(&r.from))
            && rest.iter().all(|c| c.matches_encoded(p))
    };
    // Index order: by prefix, then expiry (NULL first).
    static ALL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT prefix, expires_at FROM store s INDEXED BY agentstate_store_prefix_expires \
             WHERE {} ORDER BY prefix, expires_at",
            alive("s")
        )
    });
    static RANGE: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT prefix, expires_at FROM store s INDEXED BY agentstate_store_prefix_expires \
             WHERE {} AND s.prefix >= ?1 AND s.prefix < ?2 ORDER BY prefix, expires_at",
            alive("s")
        )
    });
    // A store none of whose items has an expiry (one seek in the expiry
    // index, in this snapshot) reads no expiries.
    const ANY_EXPIRY: &str = "SELECT EXISTS (SELECT 1 FROM store WHERE expires_at IS NOT NULL)";
    const TIMELESS_ALL: &str =
        "SELECT prefix FROM store s INDEXED BY agentstate_store_prefix_expires ORDER BY prefix";
    const TIMELESS_RANGE: &str = "SELECT prefix FROM store s INDEXED BY agentstate_store_prefix_expires \
         WHERE s.prefix >= ?1 AND s.prefix < ?2 ORDER BY prefix";
    let timeless = !conn.prepare_cached(ANY_EXPIRY)?.query_row([], |r| r.get::<_, bool>(0))?;
    let sql = match (timeless, range.is_some()) {
        (true, true) => TIMELESS_RANGE,
        (true, false) => TIMELESS_ALL,
        (false, true) => &RANGE,
        (false, false) => &ALL,
    };
    let mut stmt = conn.prepare_cached(sql)?;
    // [exact, until): the prefix and everything below it (and a few
    // siblings such as "a.b-c", which `holds` leaves out).
    let args: Vec<&str> = range.iter().flat_map(|r| [r.exact.as_str(), r.until.as_str()]).collect();
    // SQLite returns byte order, which is tuple order unless a label holds a
    // byte that sorts below the '.' separator. While no namespace seen has
    // one, no later one can sort before those seen: decode the page as the
    // rows come and stop at the first row after it. Otherwise collect
    // everything and sort.
    let want = l.offset.saturating_add(l.limit);
    let mut page: Vec<Namespace> = Vec::with_capacity(l.limit.min(1024));
    let mut until = Until::default();
    let mut group = Group::default();
    let mut last = String::new();
    // The last prefix that passed, as stored: its further rows (one per
    // item) only add their expiry.
    let mut last_row: Vec<u8> = vec![];
    let mut distinct = 0usize;
    let mut unusual = false;
    let mut full = false;
    {
        let mut rows = stmt.query(params_from_iter(&args))?;
        while let Some(r) = rows.next()? {
            let raw = r.get_ref(0)?;
            if matches!(raw, ValueRef::Text(t) if distinct > 0 && t == last_row.as_slice()) {
                group.add(expiry(r, timeless)?);
                continue;
            }
            let p = raw.as_str().map_err(rusqlite::Error::from)?;
            if !holds(p) {
                continue;
            }
            last_row.clear();
            last_row.extend_from_slice(p.as_bytes());
            if p.bytes().any(|b| b < b'.') {
                unusual = true;
                break;
            }
            let c = cut(p, l.max_depth);
            if distinct == 0 || last != c {
                if distinct > 0 {
                    until.add(&std::mem::take(&mut group));
                }
                if distinct >= want {
                    full = true;
                    break;
                }
                last.clear();
                last.push_str(c);
                if distinct >= l.offset {
                    page.push(reuse.get(c));
                }
                distinct += 1;
            }
            group.add(expiry(r, timeless)?);
        }
    }
    if !unusual {
        if distinct > 0 && !full {
            until.add(&group);
        }
        return Ok(Listed { namespaces: page, until: until.0 });
    }
    let mut found: Vec<(String, Group)> = vec![];
    let mut rows = stmt.query(params_from_iter(&args))?;
    while let Some(r) = rows.next()? {
        let p = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
        if holds(p) {
            let mut g = Group::default();
            g.add(expiry(r, timeless)?);
            found.push((cut(p, l.max_depth).to_string(), g));
        }
    }
    found.sort_by(|a, b| namespace::cmp_encoded(&a.0, &b.0));
    let mut groups: Vec<(String, Group)> = vec![];
    for (c, g) in found {
        match groups.last_mut() {
            Some(last) if last.0 == c => last.1.merge(g),
            _ => groups.push((c, g)),
        }
    }
    groups.truncate(want);
    let mut until = Until::default();
    groups.iter().for_each(|g| until.add(&g.1));
    let namespaces = groups.iter().skip(l.offset).map(|g| decode(&g.0)).collect();
    Ok(Listed { namespaces, until: until.0 })
}

/// The expiry of a listing's row: its second column, or none (NULL, never
/// expires) if the listing is `timeless`.
fn expiry<'r>(r: &'r rusqlite::Row<'_>, timeless: bool) -> rusqlite::Result<ValueRef<'r>> {
    if timeless {
        Ok(ValueRef::Null)
    } else {
        r.get_ref(1)
    }
}

/// An encoded prefix as a namespace (`""`: the empty namespace).
fn decode(p: &str) -> Namespace {
    if p.is_empty() {
        return Namespace::from_labels(vec![]);
    }
    Namespace::from_encoded(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(read_at: &str, until: Option<&str>) -> Answer {
        Answer {
            query: ListNamespaces::new(),
            generation: 1,
            read_at: read_at.into(),
            listed: Listed { namespaces: vec![], until: until.map(Into::into) },
        }
    }

    #[test]
    fn an_answer_holds_from_its_read_until_its_first_expiry() {
        let (before, at, after) =
            ("2026-12-01 10:00:00.000", "2026-12-01 10:00:05.000", "2026-12-01 10:00:09.999");
        assert!(answer(before, None).holds_at(after));
        assert!(answer(before, Some(at)).holds_at(at));
        assert!(!answer(before, Some(at)).holds_at(after));
        // A clock set back before the read: items that had expired are
        // live again.
        assert!(!answer(at, None).holds_at(before));
    }

    fn ns(labels: &[&str]) -> Namespace {
        Namespace::from_labels(labels.iter().map(|l| l.to_string()).collect())
    }

    #[test]
    fn a_namespace_compares_with_an_encoded_prefix_as_its_joined_bytes() {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let cases: &[(&[&str], &str)] = &[
            (&[], ""),
            (&[], "a"),
            (&["a"], ""),
            (&["a"], "a"),
            (&["a"], "a.b"),
            (&["a", "b"], "a"),
            (&["a", "b"], "a.b"),
            (&["a", "b"], "ab"),
            (&["ab"], "a.b"),
            (&["a", "b"], "a.c"),
            (&["a", "bc"], "a.b"),
            (&["a", "b"], "a-b"),
            (&["a", "b"], "a."),
            (&["users", "u1", "memories"], "users.u1.memories"),
            (&["users", "u1", "memories"], "users.u10.memories"),
        ];
        for (labels, p) in cases {
            let joined = labels.join(".");
            let want = joined.as_bytes().cmp(p.as_bytes());
            assert_eq!(cmp_encoded_bytes(&ns(labels), p), want, "{labels:?} vs {p:?}");
        }
        assert_eq!(cmp_encoded_bytes(&ns(&["a", "b"]), "a.b"), Equal);
        assert_eq!(cmp_encoded_bytes(&ns(&["a"]), "a.b"), Less);
        assert_eq!(cmp_encoded_bytes(&ns(&["b"]), "a.b"), Greater);
    }

    #[test]
    fn an_earlier_answer_hands_out_the_namespaces_it_shares_and_only_those() {
        let earlier = vec![ns(&["a"]), ns(&["a", "x"]), ns(&["b"]), ns(&["d"])];
        let mut reuse = Reuse::new(&earlier);
        let got: Vec<Namespace> = ["a", "a.y", "b", "c", "d", "e"].iter().map(|p| reuse.get(p)).collect();
        assert_eq!(got, vec![ns(&["a"]), ns(&["a", "y"]), ns(&["b"]), ns(&["c"]), ns(&["d"]), ns(&["e"])]);
        // Shared, not rebuilt: the same allocation.
        for (i, j) in [(0, 0), (2, 2), (4, 3)] {
            assert!(std::ptr::eq(got[i].labels().as_ptr(), earlier[j].labels().as_ptr()));
        }
        assert!(!std::ptr::eq(got[1].labels().as_ptr(), earlier[1].labels().as_ptr()));
        // The empty namespace (max_depth 0) is one too.
        let empty = vec![ns(&[])];
        assert_eq!(Reuse::new(&empty).get(""), ns(&[]));
    }
}
