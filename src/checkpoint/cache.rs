//! The caches of channel values: decoded, and (for reads that return
//! values as stored) assembled bytes.
//!
//! A blob stored for a (thread, namespace, channel, version) never changes,
//! so a value decoded once (or written by this process) can be handed out
//! again as long as it is in memory. The cache is bounded by the encoded size
//! of what it holds; when full, it is emptied (cheap, and a workload that
//! reads the same thread again refills it at once).
//!
//! No code that can panic runs under its lock (map operations only), so a
//! poisoned lock guards consistent data and is taken over.

use crate::hash::FastMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::types::CheckpointTuple;
use super::value::ChannelValue;

/// The default budget: 64 MiB of encoded values.
pub(crate) const DEFAULT_BUDGET: usize = 64 << 20;

/// (thread, namespace, channel, version).
pub(crate) type BlobKey = (String, String, String, String);

/// A [`BlobKey`] borrowed: maps keyed by `BlobKey` are looked up with one
/// (`map.get(&key as &dyn AsKey)`) without building the four strings.
pub(crate) type KeyRef<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The four parts of a blob key, owned or borrowed. Hashes and compares as
/// `BlobKey` does (a tuple hashes its fields in order), so that either
/// finds the other's entry.
pub(crate) trait AsKey {
    fn parts(&self) -> KeyRef<'_>;
}

impl AsKey for BlobKey {
    fn parts(&self) -> KeyRef<'_> {
        (&self.0, &self.1, &self.2, &self.3)
    }
}

impl AsKey for KeyRef<'_> {
    fn parts(&self) -> KeyRef<'_> {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn AsKey + 'a> for BlobKey {
    fn borrow(&self) -> &(dyn AsKey + 'a) {
        self
    }
}

impl std::hash::Hash for dyn AsKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.parts().hash(h);
    }
}

impl PartialEq for dyn AsKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn AsKey + '_ {}

/// Decoded values: `None` for an empty channel.
pub(crate) type ValueCache = BlobCache<Option<ChannelValue>>;

/// Where a list's last delta starts, for the versions stored as a delta:
/// (the delta row's type tag, the index of its first element). A pending
/// write that shares the delta's bytes is the list's elements from there.
pub(crate) type StartCache = BlobCache<(String, usize)>;

/// Full stored bytes, deltas reassembled: (type tag, bytes).
pub(crate) type BytesCache = BlobCache<(String, Arc<Vec<u8>>)>;

/// Values per blob key, bounded by their cost in bytes.
pub(crate) struct BlobCache<V> {
    budget: usize,
    inner: Mutex<Inner<V>>,
}

struct Inner<V> {
    /// The value and its cost.
    map: FastMap<BlobKey, (V, usize)>,
    bytes: usize,
}

impl<V: Clone> BlobCache<V> {
    pub(crate) fn new(budget: usize) -> BlobCache<V> {
        BlobCache { budget, inner: Mutex::new(Inner { map: FastMap::default(), bytes: 0 }) }
    }

    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    fn lock(&self) -> MutexGuard<'_, Inner<V>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value cached for `key`, if any.
    pub(crate) fn get(&self, key: &BlobKey) -> Option<V> {
        self.get_ref(key.parts())
    }

    /// [`get`](Self::get) with a borrowed key.
    pub(crate) fn get_ref(&self, key: KeyRef<'_>) -> Option<V> {
        if self.budget == 0 {
            return None;
        }
        self.lock().map.get(&key as &dyn AsKey).map(|(v, _)| v.clone())
    }

    /// Caches `value` for `key`, counting `cost` bytes against the budget.
    pub(crate) fn insert(&self, key: BlobKey, value: V, cost: usize) {
        self.insert_with(key, value, cost, true);
    }

    /// [`insert`](Self::insert), unless `key` is cached already: the value
    /// of a write not committed yet never replaces one read or written
    /// before (a version holds one value; a write that gives it another is
    /// refused when it commits).
    pub(crate) fn insert_new(&self, key: BlobKey, value: V, cost: usize) {
        self.insert_with(key, value, cost, false);
    }

    fn insert_with(&self, key: BlobKey, value: V, cost: usize, replace: bool) {
        let cost = cost.max(64);
        if cost > self.budget / 4 {
            return;
        }
        let mut inner = self.lock();
        if !replace && inner.map.contains_key(&key.parts() as &dyn AsKey) {
            return;
        }
        if inner.bytes + cost > self.budget {
            inner.map.clear();
            inner.bytes = 0;
        }
        if let Some((_, old)) = inner.map.insert(key, (value, cost)) {
            inner.bytes -= old;
        }
        inner.bytes += cost;
    }

    /// Drops every entry of `thread`.
    pub(crate) fn forget_thread(&self, thread: &str) {
        let mut inner = self.lock();
        let mut freed = 0;
        inner.map.retain(|k, (_, cost)| {
            let keep = k.0 != thread;
            if !keep {
                freed += *cost;
            }
            keep
        });
        inner.bytes -= freed;
    }
}

/// (thread, namespace, checkpoint id or `None` for the latest).
pub(crate) type TupleKey = (String, String, Option<String>);

/// How many tuples [`TupleCache`] holds before it is emptied.
const TUPLES: usize = 256;

/// The tuples `get_tuple` returned, each with the generation of the file it
/// was read at (see `Pooled::generation`): one is handed out again only while
/// the generation has not moved, so nothing written since, by anyone, can be
/// missing from it. Channel values inside are shared (`Arc`), so a hit costs
/// the clone of a few small maps.
pub(crate) struct TupleCache<T = CheckpointTuple> {
    inner: Mutex<FastMap<TupleKey, (u64, T)>>,
}

impl<T> Default for TupleCache<T> {
    fn default() -> Self {
        TupleCache { inner: Mutex::new(FastMap::default()) }
    }
}

impl<T: Clone> TupleCache<T> {
    fn lock(&self) -> MutexGuard<'_, FastMap<TupleKey, (u64, T)>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tuple cached for `key` at `generation`, if any.
    pub(crate) fn get(&self, key: &TupleKey, generation: u64) -> Option<T> {
        let map = self.lock();
        map.get(key).filter(|(g, _)| *g == generation).map(|(_, t)| t.clone())
    }

    /// Caches `tuple` as read at `generation`.
    pub(crate) fn put(&self, key: TupleKey, generation: u64, tuple: &T) {
        let mut map = self.lock();
        if map.len() >= TUPLES {
            map.retain(|_, (g, _)| *g == generation);
            if map.len() >= TUPLES {
                map.clear();
            }
        }
        map.insert(key, (generation, tuple.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(t: &str, v: &str) -> BlobKey {
        (t.into(), String::new(), "c".into(), v.into())
    }

    #[test]
    fn a_borrowed_key_finds_what_an_owned_one_stored() {
        let c = ValueCache::new(1 << 20);
        for i in 0..500 {
            c.insert(key(&format!("t{i}"), &i.to_string()), Some(json!(i).into()), 100);
        }
        for i in 0..500 {
            let (t, v) = (format!("t{i}"), i.to_string());
            assert!(c.get_ref((&t, "", "c", &v)).is_some(), "{i}");
            // Moving a byte between parts is another key.
            assert!(c.get_ref((&t, "", &format!("c{v}"), "")).is_none(), "{i}");
        }
    }

    #[test]
    fn stays_within_its_budget_and_forgets_threads() {
        let c = ValueCache::new(1000);
        for i in 0..100 {
            c.insert(key("a", &i.to_string()), Some(json!(i).into()), 100);
            assert!(c.lock().bytes <= 1000);
        }
        c.insert(key("b", "1"), None, 100);
        assert_eq!(c.get(&key("b", "1")), Some(None));
        c.forget_thread("b");
        assert_eq!(c.get(&key("b", "1")), None);
        // Too big for the cache: not kept.
        c.insert(key("a", "big"), Some(json!(1).into()), 600);
        assert_eq!(c.get(&key("a", "big")), None);
    }
}
