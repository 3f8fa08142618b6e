//! The Store's in-memory search cache.
//!
//! Search runs over a copy of each namespace prefix's items (values as JSON text)
//! and an i8 copy of their unit-normalised vectors, kept per prefix and
//! tagged with the prefix's generation from `agentstate_store_gen` (moved on
//! every change, whoever makes it). A search reads the generations of the
//! prefixes under its namespace prefix in the same snapshot, reloads only
//! the blocks that moved, bounds every candidate's score from the i8 rows
//! (with each row's proven quantisation error), and scores exactly in Rust,
//! from the f32 rows in the file, every candidate whose bound can still
//! reach the page: no approximation. Filters run through the Rust evaluator, which agrees with
//! the SQL compilation on every input (see `filter`'s property tests).
//! Expiry is not cached: expired items are fetched live, by index, per
//! search.
//!
//! The cache holds at most about the store's search memory budget: the
//! blocks a search needs are counted before they are loaded, a search whose
//! blocks would not fit together gets `None` (and runs from the file, see
//! `stream`), and the least recently used blocks are dropped to make room.
//! The filter columns a block builds count too, from the block's next use
//! (a search may run one block's new columns over the budget until then);
//! when a search's own blocks leave no room, their columns go first (they
//! are built again as filters need them), so a search never runs from the
//! file because of columns.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{params_from_iter, Connection};
use serde_json::Value;

use super::namespace::{prefix_range, PrefixRange};
use super::partial::Head;
use super::quantised::{row_bytes, Query, Rows};
use crate::error::{Error, Result};
use crate::filter::Filter;

/// One prefix's items and vectors at one generation.
pub(crate) struct Block {
    gen: i64,
    /// Approximately what it holds in memory.
    pub(crate) bytes: usize,
    pub(crate) items: Vec<CachedItem>,
    /// The unit-normalised vector rows (zero vectors left out; rows of one
    /// item contiguous, owned by their index into `items`), quantised for
    /// pre-scoring. The few items that may reach the page are scored
    /// exactly from the file (`exact_score`): the `f32` rows are not kept
    /// in memory.
    rows: Rows,
    /// Per filter path, the value of every item at that path, extracted on
    /// first use: filters then read one compact column instead of walking
    /// every document's map.
    columns: Mutex<Columns>,
}

/// A block's filter columns and approximately what they hold (charged to
/// the cache's budget at the block's next use, see [`SearchCache::blocks`]);
/// one lock for both, so that a reset clears both.
#[derive(Default)]
struct Columns {
    by_path: HashMap<Vec<String>, Column>,
    bytes: usize,
}

/// A namespace prefix and its block.
pub(crate) type PrefixBlock = (String, Arc<Block>);

/// What a search runs over: the in-memory blocks of the prefixes under its
/// namespace prefix, or, when those would not fit in the budget together,
/// the prefixes' generations (sorted), for the search from the file (see
/// `stream`) and its partial copy (see `partial`).
pub(crate) enum Fit {
    Blocks(Vec<PrefixBlock>),
    TooLarge(Vec<(String, i64)>),
}

/// The values of every item of a block at one path.
type Column = Arc<Vec<Option<Value>>>;

/// Approximately what a column holds in memory: its slots and what their
/// values allocate.
fn column_bytes(col: &[Option<Value>]) -> usize {
    fn heap(v: &Value) -> usize {
        const SLOT: usize = std::mem::size_of::<Value>();
        match v {
            Value::String(s) => s.capacity() + 16,
            Value::Array(a) => a.len() * SLOT + a.iter().map(heap).sum::<usize>() + 16,
            // Entries (key, value, hash) and the index table, both with
            // room to spare (a clone keeps at least three entries).
            Value::Object(m) => {
                let slots = m.len().max(3).next_power_of_two();
                slots * (SLOT + 24 + 8 + 16)
                    + 64
                    + m.iter().map(|(k, v)| k.capacity() + 16 + heap(v)).sum::<usize>()
            }
            _ => 0,
        }
    }
    std::mem::size_of_val(col) + col.iter().flatten().map(heap).sum::<usize>()
}

impl Block {
    /// Approximately what the block holds now, its columns included.
    fn held(&self) -> usize {
        self.bytes.saturating_add(lock(&self.columns).bytes)
    }

    /// Drops the block's columns (searches that hold one keep it alive).
    fn drop_columns(&self) {
        *lock(&self.columns) = Columns::default();
    }

    /// The columns of `paths`, in order; those not built yet are built
    /// with one parse of each value for all of them.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if a value does not parse (it did when loaded).
    fn columns(&self, prefix: &str, paths: &[&[String]]) -> Result<Vec<Column>> {
        let mut out: Vec<Option<Column>> = {
            let built = lock(&self.columns);
            paths.iter().map(|p| built.by_path.get(*p).cloned()).collect()
        };
        let missing: Vec<usize> = (0..paths.len()).filter(|i| out[*i].is_none()).collect();
        if !missing.is_empty() {
            let mut cols: Vec<Vec<Option<Value>>> =
                missing.iter().map(|_| Vec::with_capacity(self.items.len())).collect();
            for it in &self.items {
                let value = it.value(prefix)?;
                for (col, i) in cols.iter_mut().zip(&missing) {
                    col.push(Filter::value_at(&value, paths[*i]).cloned());
                }
            }
            let mut guard = lock(&self.columns);
            let built = &mut *guard;
            for (i, col) in missing.into_iter().zip(cols) {
                let col = built
                    .by_path
                    .entry(paths[i].to_vec())
                    .or_insert_with(|| {
                        built.bytes = built.bytes.saturating_add(column_bytes(&col));
                        Arc::new(col)
                    })
                    .clone();
                out[i] = Some(col);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
}

pub(crate) struct CachedItem {
    pub(crate) key: String,
    /// The value's JSON text (checked to parse when the block was loaded).
    text: Box<str>,
    pub(crate) created_at: Box<str>,
    pub(crate) updated_at: Box<str>,
    /// It has a TTL (reads may refresh it).
    pub(crate) has_ttl: bool,
}

impl CachedItem {
    /// The item's value, parsed (it is an item of namespace prefix
    /// `prefix`).
    ///
    /// # Errors
    /// [`Error::Corrupt`] if the text does not parse (it did when loaded).
    pub(crate) fn value(&self, prefix: &str) -> Result<Value> {
        parse_value(&self.text, prefix, &self.key)
    }
}

/// The value of item (`prefix`, `key`) from its JSON text.
///
/// # Errors
/// [`Error::Corrupt`] if the text is not JSON that reads back as a value.
pub(crate) fn parse_value(text: &str, prefix: &str, key: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::corrupt(format!("value of item {prefix}/{key} is not JSON: {e}")))
}

/// A search hit: (prefix, item, score).
pub(crate) type Hit<'a> = (&'a str, &'a CachedItem, Option<f64>);

/// Locks a cache map. The maps are caches of the file: if a thread panicked
/// while holding one (poisoning it), the map is emptied and the lock cleared,
/// so that nothing it held is used again; entries are rebuilt from the file
/// on demand. No caller can observe a half-updated cache.
fn lock<T: Default>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            *g = T::default();
            m.clear_poison();
            g
        }
    }
}

/// The blocks of the searched prefixes, within a memory budget: the least
/// recently used blocks go first when a search needs room.
pub(crate) struct SearchCache {
    budget: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    blocks: HashMap<String, Entry>,
    /// The partial copy of the last search too large for blocks.
    head: Option<Arc<Head>>,
    /// The sum of the entries' `charged` bytes and the head's.
    bytes: usize,
    /// Bumped on every use, to order entries by recency.
    clock: u64,
}

struct Entry {
    block: Arc<Block>,
    used: u64,
    /// What the entry counts for in `CacheState::bytes`: the block's
    /// [`held`](Block::held) bytes when last charged.
    charged: usize,
}

/// The least an item costs in memory besides its key and value text (a
/// `CachedItem`, its two timestamps, allocation overhead).
const ITEM_BYTES: usize = 224;

impl SearchCache {
    /// An empty cache that keeps at most about `budget` bytes.
    pub(crate) fn new(budget: usize) -> SearchCache {
        SearchCache { budget, state: Mutex::default() }
    }

    /// The current blocks of every prefix under `prefix`, reloading those whose
    /// generation moved; [`Fit::TooLarge`] if they would not fit in the
    /// budget together (search from the file then). `dims` is the index
    /// dimension (`None`: no vectors).
    pub(crate) fn blocks(&self, conn: &Connection, prefix: &[String], dims: Option<usize>) -> Result<Fit> {
        let mut sql = String::from("SELECT prefix, gen FROM agentstate_store_gen");
        let mut args: Vec<String> = vec![];
        if let Some(PrefixRange { exact, from, until }) = prefix_range(prefix) {
            sql.push_str(" WHERE ");
            sql.push_str(&PrefixRange::sql("prefix"));
            args.extend([exact, from, until]);
        }
        let gens: Vec<(String, i64)> = conn
            .prepare_cached(&sql)?
            .query_map(params_from_iter(args.iter()), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let too_large = || {
            let mut all = gens.clone();
            all.sort_unstable();
            Fit::TooLarge(all)
        };
        // Fresh blocks from the cache; the others are loaded below.
        let mut found: Vec<(String, i64, Option<Arc<Block>>)> = Vec::with_capacity(gens.len());
        let mut bytes = 0usize;
        {
            let mut guard = lock(&self.state);
            let st = &mut *guard;
            st.clock += 1;
            let now = st.clock;
            for (p, gen) in gens.iter().cloned() {
                let fresh = st.blocks.get_mut(&p).filter(|e| {
                    e.block.gen == gen && (dims.is_none() || e.block.rows.dims() == dims.unwrap_or(0))
                });
                match fresh {
                    Some(e) => {
                        e.used = now;
                        // Columns built since the block was last charged.
                        recharge(&mut st.bytes, e);
                        // Whether the search fits counts its blocks without
                        // their columns: those can go to make room (see
                        // `shed`, which keeps these blocks).
                        bytes = bytes.saturating_add(e.block.bytes);
                        found.push((p, gen, Some(e.block.clone())));
                    }
                    None => found.push((p, gen, None)),
                }
            }
            shed(st, self.budget, found.iter().map(|(p, _, _)| p.as_str()));
        }
        // What the missing blocks cost at least, from two index-only counts
        // each (which their loading sizes its arrays from), before loading
        // any of them.
        let mut counts: Vec<Option<Counts>> = vec![None; found.len()];
        let mut need = bytes;
        for ((p, _, b), count) in found.iter().zip(&mut counts) {
            if b.is_none() {
                let c = Counts::of(conn, p, dims)?;
                need = need.saturating_add(c.least(dims));
                if need > self.budget {
                    return Ok(too_large());
                }
                *count = Some(c);
            }
        }
        let mut loaded = vec![];
        // A count exactly for each block not found fresh.
        for ((p, gen, slot), count) in found.iter_mut().zip(counts) {
            let Some(count) = count else { continue };
            let Some(b) = load(conn, p, *gen, dims, count, self.budget.saturating_sub(bytes))? else {
                return Ok(too_large());
            };
            bytes = bytes.saturating_add(b.bytes);
            let b = Arc::new(b);
            loaded.push((p.clone(), b.clone()));
            *slot = Some(b);
        }
        if !loaded.is_empty() {
            self.insert(loaded, &found);
        }
        Ok(Fit::Blocks(
            found
                .into_iter()
                .filter_map(|(p, _, b)| b.map(|b| (p, b)))
                .filter(|(_, b)| !b.items.is_empty())
                .collect(),
        ))
    }

    /// The partial copy of the vector rows under `prefix` for a search whose
    /// blocks are too large (`gens`: [`Fit::TooLarge`]'s generations), kept
    /// while those generations stay. It gets what the blocks held leave of
    /// the budget: blocks are never evicted for it (so searches that
    /// alternate between a small namespace and a large one keep both), and
    /// the old copy goes before the new one is loaded.
    pub(crate) fn head(
        &self,
        conn: &Connection,
        prefix: &[String],
        gens: Vec<(String, i64)>,
        dims: usize,
    ) -> Result<Arc<Head>> {
        let allowance = {
            let mut st = lock(&self.state);
            if let Some(h) = st.head.as_ref().filter(|h| h.is_for(prefix, &gens, dims)) {
                return Ok(h.clone());
            }
            if let Some(old) = st.head.take() {
                st.bytes = st.bytes.saturating_sub(old.bytes);
            }
            self.budget.saturating_sub(st.bytes)
        };
        let head = Arc::new(Head::load(conn, prefix, gens, dims, allowance)?);
        let mut st = lock(&self.state);
        if let Some(old) = st.head.take() {
            // Another search stored one meanwhile.
            st.bytes = st.bytes.saturating_sub(old.bytes);
        }
        st.bytes = st.bytes.saturating_add(head.bytes);
        st.head = Some(head.clone());
        if st.bytes > self.budget {
            // Blocks loaded meanwhile took the room: this search uses the
            // copy, later ones reload it.
            st.bytes = st.bytes.saturating_sub(head.bytes);
            st.head = None;
        }
        Ok(head)
    }

    /// Adds freshly loaded blocks, then drops the least recently used blocks
    /// that this search does not use until the cache is within its budget.
    fn insert(&self, loaded: Vec<(String, Arc<Block>)>, used: &[(String, i64, Option<Arc<Block>>)]) {
        let mut st = lock(&self.state);
        st.clock += 1;
        let now = st.clock;
        for (p, block) in loaded {
            let charged = block.held();
            st.bytes = st.bytes.saturating_add(charged);
            if let Some(old) = st.blocks.insert(p, Entry { block, used: now, charged }) {
                st.bytes = st.bytes.saturating_sub(old.charged);
            }
        }
        shed(&mut st, self.budget, used.iter().map(|(p, _, _)| p.as_str()));
    }

    /// The approximate bytes the cache holds now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }
}

/// Brings the cache within `limit` bytes if it is over: the least recently
/// used blocks not in `used` first, then the filter columns of the blocks in
/// `used` (built again as filters need them), then the partial copy.
fn shed<'a>(st: &mut CacheState, limit: usize, used: impl Iterator<Item = &'a str>) {
    if st.bytes <= limit {
        return;
    }
    let keep: HashSet<&str> = used.collect();
    evict(st, limit, &keep);
    if st.bytes > limit {
        for p in &keep {
            if let Some(e) = st.blocks.get_mut(*p) {
                e.block.drop_columns();
                recharge(&mut st.bytes, e);
            }
        }
    }
    if st.bytes > limit {
        if let Some(h) = st.head.take() {
            st.bytes = st.bytes.saturating_sub(h.bytes);
        }
    }
}

/// Charges `e`'s block at what it holds now (its columns grew or were
/// dropped since it was last charged) in the cache's total `bytes`.
fn recharge(bytes: &mut usize, e: &mut Entry) {
    let held = e.block.held();
    *bytes = bytes.saturating_sub(e.charged).saturating_add(held);
    e.charged = held;
}

/// Drops the least recently used blocks not in `keep` until the cache holds
/// at most `limit` bytes (or nothing else can go).
fn evict(st: &mut CacheState, limit: usize, keep: &HashSet<&str>) {
    if st.bytes <= limit {
        return;
    }
    let mut victims: Vec<(u64, String)> = st
        .blocks
        .iter()
        .filter(|(p, _)| !keep.contains(p.as_str()))
        .map(|(p, e)| (e.used, p.clone()))
        .collect();
    victims.sort_unstable();
    for (_, p) in victims {
        if st.bytes <= limit {
            break;
        }
        if let Some(e) = st.blocks.remove(&p) {
            st.bytes = st.bytes.saturating_sub(e.charged);
        }
    }
}

/// How many items and vector rows a prefix has (index-only counts).
#[derive(Clone, Copy)]
struct Counts {
    items: usize,
    rows: usize,
}

impl Counts {
    /// The counts of `prefix` (no rows counted without `dims`).
    fn of(conn: &Connection, prefix: &str, dims: Option<usize>) -> Result<Counts> {
        let count = |sql: &str| -> Result<usize> {
            let n: i64 = conn.prepare_cached(sql)?.query_row([prefix], |r| r.get(0))?;
            Ok(n.max(0) as usize)
        };
        let items = count("SELECT count(*) FROM store WHERE prefix = ?1")?;
        let rows = match dims {
            Some(_) => count("SELECT count(*) FROM store_vectors WHERE prefix = ?1")?,
            None => 0,
        };
        Ok(Counts { items, rows })
    }

    /// The least a block of these counts costs: its items and vector rows
    /// at their fixed sizes.
    fn least(&self, dims: Option<usize>) -> usize {
        let rows = dims.map_or(0, |d| self.rows.saturating_mul(row_bytes(d)));
        self.items.saturating_mul(ITEM_BYTES).saturating_add(rows)
    }
}

/// Loads the block of `prefix`, whose `counts` size its arrays; `None` as
/// soon as it would cost more than `allowance` bytes.
fn load(
    conn: &Connection,
    prefix: &str,
    gen: i64,
    dims: Option<usize>,
    counts: Counts,
    allowance: usize,
) -> Result<Option<Block>> {
    // Items and vectors both in key order (each from its primary key
    // index): a vector's item is found by walking the items alongside, and
    // vector rows go straight into the block, each item's rows contiguous.
    let mut bytes = 0usize;
    // Sized from the count: a vector grown by doubling holds up to twice
    // what it needs.
    if counts.items.saturating_mul(ITEM_BYTES) > allowance {
        return Ok(None);
    }
    let mut items = Vec::with_capacity(counts.items);
    {
        let mut stmt = conn.prepare_cached(
            "SELECT key, CAST(value AS TEXT), created_at, updated_at, ttl_minutes IS NOT NULL FROM store \
             WHERE prefix = ?1 ORDER BY key",
        )?;
        let mut rows = stmt.query([prefix])?;
        while let Some(r) = rows.next()? {
            let key: String = r.get(0)?;
            let text = r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
            bytes = bytes.saturating_add(ITEM_BYTES + key.len() + text.len());
            if bytes > allowance {
                return Ok(None);
            }
            // Parsed as a page will parse it (the depth limit, number range
            // and escapes checked alike), not kept parsed.
            drop(parse_value(text, prefix, &key)?);
            let time = |i| -> rusqlite::Result<Box<str>> {
                Ok(r.get::<_, Option<String>>(i)?.unwrap_or_default().into_boxed_str())
            };
            items.push(CachedItem {
                text: text.into(),
                key,
                created_at: time(2)?,
                updated_at: time(3)?,
                has_ttl: r.get(4)?,
            });
        }
    }
    let mut block =
        Block { gen, bytes, items, rows: Rows::new(dims.unwrap_or(0)), columns: Mutex::default() };
    let Some(dims) = dims else { return Ok(Some(block)) };
    // Sized once from the count: no reallocation, whose old and new arrays
    // would both be alive while it copies.
    let count = counts.rows;
    if block.bytes.saturating_add(count.saturating_mul(row_bytes(dims))) > allowance {
        return Ok(None);
    }
    block.rows.reserve_exact(count);
    let mut stmt = conn.prepare_cached(
        "SELECT key, embedding FROM store_vectors WHERE prefix = ?1 ORDER BY key, field_name",
    )?;
    let mut rows = stmt.query([prefix])?;
    let mut at = 0usize;
    let mut v: Vec<f32> = Vec::with_capacity(dims);
    while let Some(r) = rows.next()? {
        let key = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
        while at < block.items.len() && block.items[at].key.as_str() < key {
            at += 1;
        }
        if at == block.items.len() || block.items[at].key != key {
            continue; // an orphan vector (files written without foreign keys)
        }
        let Some(blob) = r.get_ref(1)?.as_blob_or_null().map_err(rusqlite::Error::from)? else {
            continue;
        };
        if blob.len() != dims * 4 {
            return Err(wrong_size(prefix, key, blob.len(), dims));
        }
        block.rows.push(blob, at as u32, &mut v);
    }
    block.bytes = block.bytes.saturating_add(count.saturating_mul(row_bytes(dims)));
    Ok(Some(block))
}

/// A stored vector (little-endian `f32`) in `v`, scaled to unit length as
/// every search path scores it; false for a zero or non-finite vector.
pub(crate) fn unit_vector(blob: &[u8], v: &mut Vec<f32>) -> bool {
    v.clear();
    v.extend(blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    normalise(v)
}

/// A stored vector of another size than the index's `dims`.
pub(crate) fn wrong_size(prefix: &str, key: &str, bytes: usize, dims: usize) -> Error {
    Error::corrupt(format!(
        "vector of item {prefix}/{key} has {bytes} bytes, expected {} ({dims} dims)",
        dims * 4
    ))
}

/// Scales `v` to unit length; false (and `v` untouched) for a zero vector.
pub(crate) fn normalise(v: &mut [f32]) -> bool {
    let n = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if n == 0.0 || !n.is_finite() {
        return false;
    }
    v.iter_mut().for_each(|x| *x = (f64::from(*x) / n) as f32);
    true
}

/// Dot product, written so the compiler vectorises it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// The page of a search over `blocks`: candidates are the items not in
/// `expired` that match `filter`. With a (unit) `query`, scored items come
/// first (max over each item's vectors, descending, ties by prefix then
/// key), then unscored ones; without, everything newest first. Then
/// `offset`/`limit` over that one sequence (docs/design.md, "Store search").
pub(crate) fn search<'a>(
    blocks: &'a [(String, Arc<Block>)],
    expired: &HashSet<(String, String)>,
    filter: Option<&Filter>,
    query: Option<&[f32]>,
    limit: usize,
    offset: usize,
    exact: &mut dyn FnMut(&str, &str) -> Result<Option<f32>>,
) -> Result<Vec<Hit<'a>>> {
    let want = offset.saturating_add(limit);
    let mut scored: Vec<Hit<'a>> = vec![];
    let mut unscored: Vec<Hit<'a>> = vec![];
    // Candidates per block, and for a query the bounds of each candidate's
    // best score from the quantised rows.
    let mut cands: Vec<Vec<bool>> = Vec::with_capacity(blocks.len());
    let mut bounds: Vec<Vec<(f32, f32)>> = Vec::with_capacity(blocks.len());
    let prepared = query.map(|q| (q, Query::new(q)));
    for (prefix, block) in blocks {
        let columns: Vec<(&[String], Column)> = match filter {
            Some(f) => {
                let paths = f.paths();
                let cols = block.columns(prefix, &paths)?;
                paths.into_iter().zip(cols).collect()
            }
            None => vec![],
        };
        let candidate: Vec<bool> = block
            .items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                (expired.is_empty() || !expired.contains(&(prefix.clone(), it.key.clone())))
                    && match filter {
                        None => true,
                        Some(f) => f.matches_with(|p| {
                            columns
                                .iter()
                                .find(|(cp, _)| std::ptr::eq(*cp, p) || *cp == p)
                                .and_then(|(_, c)| c[i].as_ref())
                        }),
                    }
            })
            .collect();
        let mut b = vec![(f32::NEG_INFINITY, f32::NEG_INFINITY); block.items.len()];
        if let Some((q, prepared)) = &prepared {
            if q.len() == block.rows.dims() && !q.is_empty() {
                let owners = block.rows.owners();
                let rows = block.rows.bounds_where(prepared, |row| candidate[owners[row] as usize]);
                for ((l, h), &owner) in rows.into_iter().zip(owners) {
                    let (lo, hi) = &mut b[owner as usize];
                    *lo = lo.max(l);
                    *hi = hi.max(h);
                }
            }
        }
        cands.push(candidate);
        bounds.push(b);
    }
    // Only items whose upper bound reaches the want-th best lower bound can
    // be in the page: score exactly those, with their f32 rows from the file.
    let threshold = if query.is_some() {
        let mut lows: Vec<f32> =
            bounds.iter().flatten().map(|(lo, _)| *lo).filter(|lo| *lo > f32::NEG_INFINITY).collect();
        if lows.len() >= want && want > 0 {
            let (_, nth, _) = lows.select_nth_unstable_by(want - 1, |a, b| b.total_cmp(a));
            *nth
        } else {
            f32::NEG_INFINITY
        }
    } else {
        f32::NEG_INFINITY
    };
    // Items that may reach the page, by upper bound.
    let mut pending: Vec<(f32, &'a str, &'a CachedItem)> = vec![];
    for (((prefix, block), candidate), b) in blocks.iter().zip(&cands).zip(&bounds) {
        for (i, it) in block.items.iter().enumerate() {
            if !candidate[i] {
                continue;
            }
            let (_, hi) = b[i];
            if query.is_some() && hi > f32::NEG_INFINITY {
                if hi >= threshold {
                    pending.push((hi, prefix.as_str(), it));
                }
            } else {
                unscored.push((prefix.as_str(), it, None));
            }
        }
    }
    // Best upper bound first; once `want` exact scores are known, an item
    // whose upper bound is below the lowest of them cannot reach the page,
    // nor can any after it.
    pending.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut best: Vec<f32> = Vec::with_capacity(want.min(pending.len()));
    for (hi, prefix, it) in pending {
        if want > 0 && best.len() == want && hi < best[want - 1] {
            break;
        }
        match exact(prefix, &it.key)? {
            Some(score) => {
                let at = best.partition_point(|x| *x >= score);
                if at < want {
                    best.insert(at, score);
                    best.truncate(want);
                }
                scored.push((prefix, it, Some(f64::from(score))));
            }
            // Not in this snapshot's file (the block was loaded from the
            // same snapshot, so this does not happen): unscored.
            None => unscored.push((prefix, it, None)),
        }
    }
    let by_name = |a: &Hit<'_>, b: &Hit<'_>| a.0.cmp(b.0).then_with(|| a.1.key.cmp(&b.1.key));
    let newest = |a: &Hit<'_>, b: &Hit<'_>| b.1.updated_at.cmp(&a.1.updated_at).then_with(|| by_name(a, b));
    let best_first = |a: &Hit<'_>, b: &Hit<'_>| {
        b.2.unwrap_or(0.0).total_cmp(&a.2.unwrap_or(0.0)).then_with(|| by_name(a, b))
    };
    top(&mut scored, want, best_first);
    let mut seq = scored;
    if seq.len() < want {
        top(&mut unscored, want - seq.len(), newest);
        seq.extend(unscored);
    }
    Ok(seq.into_iter().skip(offset).take(limit).collect())
}

/// The exact max-pooled score of item (`prefix`, `key`) for the unit query
/// `q`: the best dot product of `q` with any of its vectors in the file,
/// each normalised as the cache's rows are (zero vectors left out); `None`
/// if it has none.
///
/// # Errors
/// [`Error::Corrupt`] for a vector of another size than `q`; database
/// errors.
pub(crate) fn exact_score(conn: &Connection, prefix: &str, key: &str, q: &[f32]) -> Result<Option<f32>> {
    let mut stmt =
        conn.prepare_cached("SELECT embedding FROM store_vectors WHERE prefix = ?1 AND key = ?2")?;
    let mut rows = stmt.query([prefix, key])?;
    let mut best: Option<f32> = None;
    let mut v: Vec<f32> = Vec::with_capacity(q.len());
    while let Some(r) = rows.next()? {
        let Some(blob) = r.get_ref(0)?.as_blob_or_null().map_err(rusqlite::Error::from)? else {
            continue;
        };
        if blob.len() != q.len() * 4 {
            return Err(wrong_size(prefix, key, blob.len(), q.len()));
        }
        if unit_vector(blob, &mut v) {
            let s = dot(q, &v);
            best = Some(best.map_or(s, |b| b.max(s)));
        }
    }
    Ok(best)
}

/// Keeps the first `n` of `v` in `cmp` order, sorted.
fn top<T>(v: &mut Vec<T>, n: usize, cmp: impl Fn(&T, &T) -> Ordering) {
    if n < v.len() {
        if n == 0 {
            v.clear();
            return;
        }
        v.select_nth_unstable_by(n - 1, &cmp);
        v.truncate(n);
    }
    v.sort_by(cmp);
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
