//! The Store's in-memory search cache.
//!
//! Search runs over a copy of each namespace prefix's items (parsed values)
//! and unit-normalised vectors, kept per prefix and tagged with the prefix's
//! generation from `agentstate_store_gen` (bumped by triggers on every change,
//! whoever makes it). A search reads the generations of the prefixes under its
//! namespace prefix in the same snapshot, reloads only the blocks that moved,
//! and scores exactly in Rust: every vector of every candidate, no
//! approximation. Filters run through the Rust evaluator, which agrees with
//! the SQL compilation on every input (see `filter`'s property tests).
//! Expiry is not cached: expired items are fetched live, by index, per
//! search.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rusqlite::{params_from_iter, Connection};
use serde_json::Value;

use super::namespace::{prefix_glob, PrefixGlob};
use crate::error::{Error, Result};
use crate::filter::Filter;

/// One prefix's items and vectors at one generation.
pub(crate) struct Block {
    gen: i64,
    pub(crate) items: Vec<CachedItem>,
    dims: usize,
    /// Row-major, unit-normalised; zero vectors are left out.
    vectors: Vec<f32>,
    /// The item (index into `items`) each vector row belongs to.
    owners: Vec<u32>,
}

pub(crate) struct CachedItem {
    pub(crate) key: String,
    pub(crate) value: Value,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    /// It has a TTL (reads may refresh it).
    pub(crate) has_ttl: bool,
}

/// A search hit: (prefix, item, score).
pub(crate) type Hit<'a> = (&'a str, &'a CachedItem, Option<f64>);

#[derive(Default)]
pub(crate) struct SearchCache {
    blocks: Mutex<HashMap<String, Arc<Block>>>,
}

impl SearchCache {
    /// The current blocks of every prefix under `prefix`, reloading those whose
    /// generation moved. `dims` is the index dimension (`None`: no vectors).
    pub(crate) fn blocks(
        &self,
        conn: &Connection,
        prefix: &[String],
        dims: Option<usize>,
    ) -> Result<Vec<(String, Arc<Block>)>> {
        let mut sql = String::from("SELECT prefix, gen FROM agentstate_store_gen");
        let mut args: Vec<String> = vec![];
        if let Some(PrefixGlob { exact, glob }) = prefix_glob(prefix) {
            sql.push_str(" WHERE ");
            sql.push_str(&PrefixGlob::sql("prefix"));
            args.push(exact);
            args.push(glob);
        }
        let gens: Vec<(String, i64)> = conn
            .prepare_cached(&sql)?
            .query_map(params_from_iter(args.iter()), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(gens.len());
        for (p, gen) in gens {
            let cached = self.blocks.lock().ok().and_then(|m| m.get(&p).cloned());
            let block = match cached {
                Some(b) if b.gen == gen && (dims.is_none() || b.dims == dims.unwrap_or(0)) => b,
                _ => {
                    let b = Arc::new(load(conn, &p, gen, dims)?);
                    if let Ok(mut m) = self.blocks.lock() {
                        m.insert(p.clone(), b.clone());
                    }
                    b
                }
            };
            if !block.items.is_empty() {
                out.push((p, block));
            }
        }
        Ok(out)
    }
}

fn load(conn: &Connection, prefix: &str, gen: i64, dims: Option<usize>) -> Result<Block> {
    let mut items = vec![];
    let mut index: HashMap<String, u32> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(
            "SELECT key, CAST(value AS TEXT), created_at, updated_at, ttl_minutes IS NOT NULL FROM store WHERE prefix = ?1",
        )?;
        let mut rows = stmt.query([prefix])?;
        while let Some(r) = rows.next()? {
            let key: String = r.get(0)?;
            let text: String = r.get(1)?;
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| Error::corrupt(format!("value of item {prefix}/{key} is not JSON: {e}")))?;
            index.insert(key.clone(), items.len() as u32);
            items.push(CachedItem {
                key,
                value,
                created_at: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                updated_at: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                has_ttl: r.get(4)?,
            });
        }
    }
    let mut vectors = vec![];
    let mut owners = vec![];
    if let Some(dims) = dims {
        let mut stmt = conn.prepare_cached("SELECT key, embedding FROM store_vectors WHERE prefix = ?1")?;
        let mut rows = stmt.query([prefix])?;
        while let Some(r) = rows.next()? {
            let key = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            let Some(&owner) = index.get(key) else { continue };
            let Some(blob) = r.get_ref(1)?.as_blob_or_null().map_err(rusqlite::Error::from)? else {
                continue;
            };
            if blob.len() != dims * 4 {
                return Err(Error::corrupt(format!(
                    "vector of item {prefix}/{key} has {} bytes, expected {} ({dims} dims)",
                    blob.len(),
                    dims * 4
                )));
            }
            let start = vectors.len();
            vectors.extend(blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            if normalise(&mut vectors[start..]) {
                owners.push(owner);
            } else {
                vectors.truncate(start);
            }
        }
    }
    Ok(Block { gen, items, dims: dims.unwrap_or(0), vectors, owners })
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
fn dot(a: &[f32], b: &[f32]) -> f32 {
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
/// `offset`/`limit` over that one sequence (DESIGN.md decision 12).
pub(crate) fn search<'a>(
    blocks: &'a [(String, Arc<Block>)],
    expired: &HashSet<(String, String)>,
    filter: Option<&Filter>,
    query: Option<&[f32]>,
    limit: usize,
    offset: usize,
) -> Vec<Hit<'a>> {
    let want = offset.saturating_add(limit);
    let mut scored: Vec<Hit<'a>> = vec![];
    let mut unscored: Vec<Hit<'a>> = vec![];
    for (prefix, block) in blocks {
        let candidate: Vec<bool> = block
            .items
            .iter()
            .map(|it| {
                (expired.is_empty() || !expired.contains(&(prefix.clone(), it.key.clone())))
                    && filter.is_none_or_matches(&it.value)
            })
            .collect();
        let mut best: Vec<f32> = vec![f32::NEG_INFINITY; block.items.len()];
        if let Some(q) = query {
            if block.dims == q.len() {
                for (row, &owner) in block.vectors.chunks_exact(block.dims).zip(&block.owners) {
                    let o = owner as usize;
                    if candidate[o] {
                        let s = dot(q, row);
                        if s > best[o] {
                            best[o] = s;
                        }
                    }
                }
            }
        }
        for (i, it) in block.items.iter().enumerate() {
            if !candidate[i] {
                continue;
            }
            if query.is_some() && best[i] > f32::NEG_INFINITY {
                scored.push((prefix.as_str(), it, Some(f64::from(best[i]))));
            } else {
                unscored.push((prefix.as_str(), it, None));
            }
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
    seq.into_iter().skip(offset).take(limit).collect()
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

trait MatchesOpt {
    fn is_none_or_matches(&self, doc: &Value) -> bool;
}

impl MatchesOpt for Option<&Filter> {
    fn is_none_or_matches(&self, doc: &Value) -> bool {
        match self {
            None => true,
            Some(f) => f.matches(doc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.1).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
    }

    #[test]
    fn top_keeps_the_first_n_sorted() {
        let mut v = vec![5, 1, 4, 2, 3];
        top(&mut v, 3, |a, b| a.cmp(b));
        assert_eq!(v, vec![1, 2, 3]);
        let mut v = vec![2, 1];
        top(&mut v, 0, |a, b| a.cmp(b));
        assert!(v.is_empty());
    }
}
