//! The partial in-memory copy of a search too large for the search memory
//! budget.
//!
//! When the blocks of a search's prefixes (`cache`) would not fit in the
//! budget, the search runs from the file (`stream`). Rather than stream
//! every vector row, it keeps the first rows under its prefix, in primary-key
//! order, that fit in the budget as a [`Head`]: their `i8` quantisation (the
//! same as the blocks', with each row's proven error bound) and their item's
//! (prefix, key), no values. A search bounds every item of the head from
//! those rows, rescores exactly from the file, best bound first, the items
//! whose bound can still reach the page (after checking in SQL that they are
//! alive and match the filter), and streams only the rows after the head.
//! Results stay exact; memory stays within the budget plus the page.
//!
//! A head holds whole items (an item's rows are contiguous in key order) and
//! is kept while the generations of its prefixes stay.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rusqlite::types::ValueRef;
use rusqlite::{params_from_iter, Connection};

use super::quantised::{row_bytes, Query, Rows};
use super::stream::{item_under, not_a_vector, Range};
use crate::error::Result;

/// What an item costs in a head besides its key: its entry in `items`.
/// (While a search runs, `by_bound` needs 12 bytes more per item: scratch,
/// not the copy.)
const ITEM: usize = 8;

/// What a head costs before its items: the generations it is valid for.
fn fixed_bytes(gens: &[(String, i64)]) -> usize {
    gens.iter().map(|(p, _)| p.len() + 32).sum()
}

/// What a namespace of the head costs.
fn prefix_bytes(p: &str) -> usize {
    p.len() + 24
}

/// The first vector rows under a prefix, quantised (see the module docs).
pub(crate) struct Head {
    /// The searched namespace prefix and the generations of the prefixes
    /// under it when loaded.
    prefix: Vec<String>,
    gens: Vec<(String, i64)>,
    /// Approximately what it holds in memory.
    pub(crate) bytes: usize,
    /// The items of the rows: (index into `prefixes`, end of its key in
    /// `keys`, where the next key starts).
    items: Vec<(u32, u32)>,
    keys: String,
    prefixes: Vec<String>,
    /// The vector rows (rows of one item contiguous), owned by their index
    /// into `items`.
    rows: Rows,
    /// Where the rows to stream start: `None` if the head holds every row,
    /// else after this (prefix, key) (`None` inside: from the first row).
    pub(crate) rest: Option<Option<(String, String)>>,
}

impl Head {
    /// Whether this head answers a search of `prefix` at these generations.
    pub(crate) fn is_for(&self, prefix: &[String], gens: &[(String, i64)], dims: usize) -> bool {
        self.rows.dims() == dims && self.prefix == prefix && self.gens == gens
    }

    /// Loads the vector rows under `prefix` in key order, whole items, while
    /// they fit in `allowance` bytes.
    ///
    /// # Errors
    /// A stored vector of the wrong size (or not a blob) whose item exists
    /// is [`Error::Corrupt`](crate::Error::Corrupt), as in every search
    /// path; SQLite errors.
    pub(crate) fn load(
        conn: &Connection,
        prefix: &[String],
        gens: Vec<(String, i64)>,
        dims: usize,
        allowance: usize,
    ) -> Result<Head> {
        let mut head = Head {
            prefix: prefix.to_vec(),
            bytes: fixed_bytes(&gens),
            gens,
            items: vec![],
            keys: String::new(),
            prefixes: vec![],
            rows: Rows::new(dims),
            rest: None,
        };
        let range = Range::new(prefix);
        let mut args = vec![];
        let sql = format!(
            "SELECT prefix, key, embedding FROM store_vectors WHERE {} ORDER BY prefix, key, field_name",
            Range::sql(range.as_ref(), "prefix", &mut args)
        );
        // Sized once (an index-only count): growing by doubling would hold
        // the old and new arrays at once, half again the budget.
        let mut count_args = vec![];
        let count_sql = format!(
            "SELECT count(*) FROM store_vectors WHERE {}",
            Range::sql(range.as_ref(), "prefix", &mut count_args)
        );
        let count: i64 =
            conn.prepare_cached(&count_sql)?.query_row(params_from_iter(count_args.iter()), |r| r.get(0))?;
        head.rows.reserve_exact((count.max(0) as usize).min(allowance / row_bytes(dims) + 8));
        let mut exists = conn.prepare_cached("SELECT 1 FROM store WHERE prefix = ?1 AND key = ?2")?;
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params_from_iter(args.iter()))?;
        let mut v: Vec<f32> = Vec::with_capacity(dims);
        // The first row of the current item, to cut there if it overflows.
        let mut item_rows = 0usize;
        while let Some(r) = rows.next()? {
            let Some((p, k)) = item_under(r, range.as_ref())? else { continue };
            let same = head.items.len().checked_sub(1).is_some_and(|i| head.item(i) == (p, k));
            if !same {
                if head.bytes > allowance {
                    // The previous item did not fit: drop it, stream from it.
                    head.cut(item_rows);
                    break;
                }
                if head.prefixes.last().is_none_or(|lp| lp != p) {
                    head.prefixes.push(p.to_string());
                    head.bytes = head.bytes.saturating_add(prefix_bytes(p));
                }
                let (Ok(prefix), Ok(end)) =
                    (u32::try_from(head.prefixes.len() - 1), u32::try_from(head.keys.len() + k.len()))
                else {
                    // More keys than a u32 can index: stream from this item.
                    head.stop();
                    break;
                };
                head.keys.push_str(k);
                head.items.push((prefix, end));
                head.bytes = head.bytes.saturating_add(ITEM + k.len());
                item_rows = head.rows.len();
            }
            let blob = match r.get_ref(2)? {
                ValueRef::Null => continue,
                ValueRef::Blob(b) if b.len() == dims * 4 => b,
                other => {
                    not_a_vector(&mut exists, p, k, other, dims)?;
                    continue;
                }
            };
            if head.rows.push(blob, (head.items.len() - 1) as u32, &mut v) {
                head.bytes = head.bytes.saturating_add(row_bytes(dims));
            }
        }
        if head.rest.is_none() && head.bytes > allowance {
            // The last item did not fit either.
            head.cut(item_rows);
        }
        head.rows.shrink_to_fit();
        head.keys.shrink_to_fit();
        head.items.shrink_to_fit();
        Ok(head)
    }

    /// Drops the last item (whose rows start at `from`): the rows to stream
    /// start with it.
    fn cut(&mut self, from: usize) {
        if self.items.pop().is_some() {
            let start = self.items.last().map_or(0, |(_, end)| *end as usize);
            self.keys.truncate(start);
        }
        // A namespace only the dropped item was in goes too.
        let used = self.items.last().map_or(0, |(p, _)| *p as usize + 1);
        self.prefixes.truncate(used);
        self.rows.truncate(from);
        self.stop();
    }

    /// Ends the head at its last item: the rows after it are streamed.
    fn stop(&mut self) {
        self.rest = Some(self.items.len().checked_sub(1).map(|i| {
            let (p, k) = self.item(i);
            (p.to_string(), k.to_string())
        }));
        self.bytes = fixed_bytes(&self.gens)
            + self.items.len() * ITEM
            + self.keys.len()
            + self.prefixes.iter().map(|p| prefix_bytes(p)).sum::<usize>()
            + self.rows.len() * row_bytes(self.rows.dims());
    }

    /// Item `i`'s (prefix, key).
    fn item(&self, i: usize) -> (&str, &str) {
        let (p, end) = self.items[i];
        let start = if i == 0 { 0 } else { self.items[i - 1].1 as usize };
        (self.prefixes[p as usize].as_str(), &self.keys[start..end as usize])
    }

    /// The items of the head whose upper bound for unit query `q`, best
    /// first, lazily: (upper bound, prefix, key). A caller stops once the
    /// bound falls below its page.
    pub(crate) fn by_bound<'a>(&'a self, q: &[f32]) -> impl Iterator<Item = (f32, &'a str, &'a str)> + 'a {
        let mut hi = vec![f32::NEG_INFINITY; self.items.len()];
        let rows = self.rows.bounds_where(&Query::new(q), |_| true);
        for ((_, h), &owner) in rows.into_iter().zip(self.rows.owners()) {
            let at = &mut hi[owner as usize];
            *at = at.max(h);
        }
        let mut heap: BinaryHeap<Bound> = hi
            .into_iter()
            .enumerate()
            .filter(|(_, h)| *h > f32::NEG_INFINITY)
            .map(|(i, h)| Bound(h, i as u32))
            .collect();
        std::iter::from_fn(move || heap.pop()).map(move |Bound(h, i)| {
            let (p, k) = self.item(i as usize);
            (h, p, k)
        })
    }
}

/// An item's upper bound, ordered by bound.
struct Bound(f32, u32);

impl PartialEq for Bound {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Bound {}

impl Ord for Bound {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then_with(|| o.1.cmp(&self.1))
    }
}

impl PartialOrd for Bound {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::store::cache::{Fit, SearchCache};

    /// A search too large for the budget gets a partial copy of what the
    /// blocks held leave (they are not evicted for it), kept while nothing
    /// changes; the cache stays within the budget throughout.
    #[test]
    fn a_partial_copy_takes_what_the_blocks_leave_of_the_budget() {
        use crate::store::{IndexConfig, Put, Store, StoreConfig};
        let db = crate::Db::open_in_memory().unwrap();
        let store: Store = db.store(StoreConfig::new().with_index(IndexConfig::hashed(16).unwrap())).unwrap();
        for i in 0..300 {
            store
                .put_with(Put::new(&["big"], format!("k{i:03}"), serde_json::json!({"t": format!("w{i}")})))
                .unwrap();
        }
        for i in 0..5 {
            store.put_with(Put::new(&["small"], format!("k{i}"), serde_json::json!({"t": "x"}))).unwrap();
        }
        let (big, small) = (vec!["big".to_string()], vec!["small".to_string()]);
        let block =
            |cache: &SearchCache, ns: &[String]| match db.read(|c| cache.blocks(c, ns, Some(16))).unwrap() {
                Fit::Blocks(b) => Some(b[0].1.clone()),
                Fit::TooLarge(_) => None,
            };
        let small_bytes = block(&SearchCache::new(usize::MAX), &small).unwrap().bytes;
        let budget = small_bytes + 4000;
        let cache = SearchCache::new(budget);
        let held = block(&cache, &small).unwrap();
        let head = || {
            db.read(|c| match cache.blocks(c, &big, Some(16))? {
                Fit::TooLarge(gens) => cache.head(c, &big, gens, 16),
                Fit::Blocks(_) => panic!("the big namespace fits"),
            })
            .unwrap()
        };
        let first = head();
        assert!(first.rest.as_ref().is_some_and(Option::is_some), "a part, not all nor nothing");
        assert!(first.bytes <= budget - small_bytes);
        assert!(cache.bytes() <= budget);
        // Both stay: no reload of either.
        assert!(Arc::ptr_eq(&head(), &first));
        assert!(Arc::ptr_eq(&block(&cache, &small).unwrap(), &held));
        assert!(Arc::ptr_eq(&head(), &first));
        // A write under the prefix makes a new copy.
        store.put_with(Put::new(&["big"], "k000", serde_json::json!({"t": "changed"}))).unwrap();
        assert!(!Arc::ptr_eq(&head(), &first));
        assert!(cache.bytes() <= budget);
        // No budget: the copy holds nothing and the cache stays empty.
        let none = SearchCache::new(0);
        let empty = db
            .read(|c| match none.blocks(c, &big, Some(16))? {
                Fit::TooLarge(gens) => none.head(c, &big, gens, 16),
                Fit::Blocks(_) => panic!("nothing fits a budget of 0"),
            })
            .unwrap();
        assert_eq!(empty.rest, Some(None));
        assert_eq!(none.bytes(), 0);
    }
}
