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

use crate::hash::{FastMap, FastState};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use super::pending::WriteRow;
use super::read::{Row, RowRef};
use super::types::{ChannelVersion, ChannelVersions, Checkpoint, CheckpointTuple, Metadata, PendingWrite};
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

/// The pending writes stored as the elements of a list's delta (keyed by
/// the delta's blob key), decoded: (type tag, value). A history read finds
/// them in what it decoded; a read that took its checkpoints from the
/// [`CheckpointCache`] decoded no delta.
pub(crate) type SharedWriteCache = BlobCache<(String, Arc<Value>)>;

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

    /// Caches `value`, read from the file, for `key`, counting `cost` bytes
    /// against the budget, if `admitted` (asked under the cache's lock: see
    /// `deletions::Seen::admits`).
    pub(crate) fn insert(&self, key: BlobKey, value: V, cost: usize, admitted: impl FnOnce() -> bool) {
        self.insert_with(key, value, cost, true, admitted);
    }

    /// [`insert`](Self::insert), unless `key` is cached already: the value
    /// of a write not committed yet never replaces one read or written
    /// before (a version holds one value; a write that gives it another is
    /// refused when it commits).
    /// Asks `admitted` under the lock, as [`insert`](Self::insert) does.
    pub(crate) fn insert_new(&self, key: BlobKey, value: V, cost: usize, admitted: impl FnOnce() -> bool) {
        self.insert_with(key, value, cost, false, admitted);
    }

    fn insert_with(
        &self,
        key: BlobKey,
        value: V,
        cost: usize,
        replace: bool,
        admitted: impl FnOnce() -> bool,
    ) {
        let cost = cost.max(64);
        if cost > self.budget / 4 {
            return;
        }
        let mut inner = self.lock();
        if !admitted() || (!replace && inner.map.contains_key(&key.parts() as &dyn AsKey)) {
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

    /// Drops every entry.
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.bytes = 0;
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

    /// Drops the entries of `keys` (their rows are being deleted).
    pub(crate) fn forget(&self, keys: &[BlobKey]) {
        let mut inner = self.lock();
        for key in keys {
            if let Some((_, cost)) = inner.map.remove(&key.parts() as &dyn AsKey) {
                inner.bytes -= cost;
            }
        }
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

/// Checkpoints as reads assembled them, so that reading a stored checkpoint
/// again hands out the same [`Checkpoint`] and [`Metadata`] instead of
/// decoding its row and building its maps again.
///
/// An entry keeps the row it was built from and is used only for a row
/// equal to it, column for column: whatever rewrote a checkpoint (a delete
/// and a new write under the same id, by this process or another) finds no
/// entry, and channel values are immutable per version, as the value cache
/// assumes. Forgetting a thread (its rows deleted, or a queued write of it
/// refused, whose values reads may have used) also moves an epoch: an entry
/// a read began to build before that is not kept.
///
/// Bounded by its cost in bytes (each row's size plus an estimate of the
/// values it alone holds: list elements are shared between versions and not
/// counted); when full, it is emptied.
pub(crate) struct CheckpointCache {
    budget: usize,
    inner: Mutex<CheckpointInner>,
}

struct CheckpointInner {
    map: FastMap<(u64, usize), CheckpointEntry>,
    bytes: usize,
    epoch: u64,
}

struct CheckpointEntry {
    row: Arc<Row>,
    checkpoint: Arc<Checkpoint>,
    metadata: Arc<Metadata>,
    /// The checkpoint's pending writes, and the `checkpoint_writes` rows
    /// they were decoded from (served only while those are stored alike).
    writes: Option<KnownWrites>,
    /// The entry's cost, its writes' included.
    cost: usize,
    /// The part of `cost` that is its writes'.
    writes_cost: usize,
}

impl CheckpointEntry {
    /// Whether the entry was built from `row` or a row equal to it.
    fn holds(&self, row: &Arc<Row>) -> bool {
        Arc::ptr_eq(&self.row, row) || *self.row == **row
    }
}

/// A checkpoint's `checkpoint_writes` rows, in order, and the pending
/// writes decoded from them.
pub(crate) type KnownWrites = (Arc<[WriteRow]>, Arc<[PendingWrite]>);

/// What an entry costs besides its strings and values (the entry, the
/// tuple's `Arc`s, the row's and the checkpoint's fixed parts).
const ENTRY_COST: usize = 512;

/// A map entry or a string's allocation, besides its bytes.
const ITEM_COST: usize = 48;

impl CheckpointCache {
    pub(crate) fn new(budget: usize) -> CheckpointCache {
        CheckpointCache {
            budget,
            inner: Mutex::new(CheckpointInner { map: FastMap::default(), bytes: 0, epoch: 0 }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CheckpointInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(row: &Row) -> (u64, usize) {
        slot(&row.thread_id, &row.ns, &row.id, row.checkpoint.len())
    }

    /// The epoch to pass to [`insert`](Self::insert) for what is built from
    /// now on.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// The row an entry was built from, if the `checkpoints` row `read` is
    /// equal to it, compared where SQLite holds it: a read of a row already
    /// assembled allocates nothing for it.
    pub(crate) fn row(&self, read: &RowRef<'_>) -> Option<Arc<Row>> {
        if self.budget == 0 {
            return None;
        }
        let slot = slot(read.thread_id, read.ns, read.id, read.checkpoint.len());
        let inner = self.lock();
        let e = inner.map.get(&slot)?;
        read.is(&e.row).then(|| e.row.clone())
    }

    /// The entry for a row equal to `row` (the entry's own, or equal
    /// column for column).
    fn entry<'a>(
        map: &'a FastMap<(u64, usize), CheckpointEntry>,
        row: &Arc<Row>,
    ) -> Option<&'a CheckpointEntry> {
        map.get(&Self::slot(row)).filter(|e| e.holds(row))
    }

    /// The checkpoint and metadata built from a row equal to `row`, if any.
    pub(crate) fn get(&self, row: &Arc<Row>) -> Option<(Arc<Checkpoint>, Arc<Metadata>)> {
        if self.budget == 0 {
            return None;
        }
        let inner = self.lock();
        let e = Self::entry(&inner.map, row)?;
        Some((e.checkpoint.clone(), e.metadata.clone()))
    }

    /// Keeps what was built from `row` since `epoch`, unless a thread was
    /// forgotten meanwhile, it is not `admitted` (asked under the cache's
    /// lock: see `deletions::Seen::admits`) or it costs more than a quarter
    /// of the budget.
    pub(crate) fn insert(
        &self,
        row: &Arc<Row>,
        checkpoint: &Arc<Checkpoint>,
        metadata: &Arc<Metadata>,
        epoch: u64,
        admitted: impl FnOnce() -> bool,
    ) {
        if self.budget == 0 {
            return;
        }
        let limit = self.budget / 4;
        let Some(cost) = entry_cost(row, checkpoint, limit) else { return };
        let slot = Self::slot(row);
        let mut inner = self.lock();
        if inner.epoch != epoch || !admitted() {
            return;
        }
        if inner.bytes + cost > self.budget {
            inner.map.clear();
            inner.bytes = 0;
        }
        let entry = CheckpointEntry {
            row: Arc::clone(row),
            checkpoint: checkpoint.clone(),
            metadata: metadata.clone(),
            writes: None,
            cost,
            writes_cost: 0,
        };
        if let Some(old) = inner.map.insert(slot, entry) {
            inner.bytes -= old.cost;
        }
        inner.bytes += cost;
    }

    /// The pending writes the entry for a row equal to `row` holds, with
    /// the rows they were decoded from (to compare with what is stored
    /// now: see `read::write_rows`).
    pub(crate) fn writes(&self, row: &Arc<Row>) -> Option<KnownWrites> {
        if self.budget == 0 {
            return None;
        }
        let inner = self.lock();
        Self::entry(&inner.map, row)?.writes.clone()
    }

    /// Gives the entry for a row equal to `row` (if there is one: writes
    /// are kept only with their checkpoint) the pending writes decoded from
    /// `stored` since `epoch`, unless a thread was forgotten meanwhile, they
    /// are not `admitted` (as in [`insert`](Self::insert)) or the entry
    /// would cost more than a quarter of the budget.
    pub(crate) fn insert_writes(
        &self,
        row: &Arc<Row>,
        stored: Arc<[WriteRow]>,
        writes: &Arc<[PendingWrite]>,
        epoch: u64,
        admitted: impl FnOnce() -> bool,
    ) {
        if self.budget == 0 {
            return;
        }
        let limit = self.budget / 4;
        let Some(cost) = writes_cost(&stored, writes, limit) else { return };
        let slot = Self::slot(row);
        let mut inner = self.lock();
        if inner.epoch != epoch || !admitted() {
            return;
        }
        let Some(e) = inner.map.get_mut(&slot).filter(|e| e.holds(row)) else { return };
        let total = e.cost - e.writes_cost + cost;
        if total > limit {
            return;
        }
        let before = std::mem::replace(&mut e.cost, total);
        e.writes = Some((stored, writes.clone()));
        e.writes_cost = cost;
        inner.bytes = inner.bytes - before + total;
        if inner.bytes > self.budget {
            inner.map.clear();
            inner.bytes = 0;
        }
    }

    /// Drops every entry and moves the epoch.
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.map.clear();
        inner.bytes = 0;
    }

    /// Drops every entry of `thread` and moves the epoch.
    pub(crate) fn forget_thread(&self, thread: &str) {
        let mut inner = self.lock();
        inner.epoch += 1;
        let mut freed = 0;
        inner.map.retain(|_, e| {
            let keep = e.row.thread_id != thread;
            if !keep {
                freed += e.cost;
            }
            keep
        });
        inner.bytes -= freed;
    }

    /// Drops the entries of the checkpoints `gone` of (`thread`, `ns`), each
    /// an id and the length of its stored `checkpoint` column, and moves the
    /// epoch (their rows are being deleted: the same ids may be stored again
    /// with other values under the same versions). Looked up by slot: no
    /// scan of the cache.
    pub(crate) fn forget_checkpoints(&self, thread: &str, ns: &str, gone: &[(String, usize)]) {
        let mut inner = self.lock();
        inner.epoch += 1;
        for (id, len) in gone {
            let at = slot(thread, ns, id, *len);
            let held = inner
                .map
                .get(&at)
                .is_some_and(|e| e.row.thread_id == thread && e.row.ns == ns && e.row.id == *id);
            if let Some(e) = held.then(|| inner.map.remove(&at)).flatten() {
                inner.bytes -= e.cost;
            }
        }
    }
}

/// Where the entry of a checkpoint (thread, namespace, id) whose stored
/// `checkpoint` column is `len` bytes goes.
fn slot(thread: &str, ns: &str, id: &str, len: usize) -> (u64, usize) {
    (FastState::default().hash_one((thread, ns, id)), len)
}

/// About what an entry for `row` holds in memory, or `None` past `limit`:
/// the row kept to compare, the checkpoint's maps, and its values but the
/// elements of lists (shared between versions: only their pointers count).
fn entry_cost(row: &Row, checkpoint: &Checkpoint, limit: usize) -> Option<usize> {
    let versions = |m: &ChannelVersions| -> usize {
        m.iter()
            .map(|(k, v)| 3 * ITEM_COST + k.len() + if let ChannelVersion::Str(s) = v { s.len() } else { 0 })
            .sum()
    };
    let mut cost = ENTRY_COST
        + row.checkpoint.len()
        + row.metadata.len()
        + 2 * (row.thread_id.len() + row.ns.len() + row.id.len() + ITEM_COST)
        + versions(&checkpoint.channel_versions)
        + checkpoint.versions_seen.iter().map(|(k, m)| 2 * ITEM_COST + k.len() + versions(m)).sum::<usize>();
    for (k, v) in &checkpoint.channel_values {
        cost += 2 * ITEM_COST + k.len();
        match (v.as_value(), v.as_list()) {
            (Some(v), _) => cost += value_size(v, limit.checked_sub(cost)?)?,
            (_, Some(l)) => cost += 16 * l.len(),
            _ => {}
        }
    }
    (cost <= limit).then_some(cost)
}

/// About what pending writes and the rows they came from hold in memory,
/// or `None` past `limit`.
fn writes_cost(stored: &[WriteRow], writes: &[PendingWrite], limit: usize) -> Option<usize> {
    let mut cost: usize =
        stored.iter().map(|w| 3 * ITEM_COST + w.task_path.len() + w.task_id.len() + w.writes.len()).sum();
    for w in writes {
        cost += 3 * ITEM_COST + w.task_id.len() + w.channel.len();
        cost += value_size(&w.value, limit.checked_sub(cost)?)?;
    }
    (cost <= limit).then_some(cost)
}

/// About how many bytes `v` holds, or `None` past `limit` (the walk stops
/// there).
fn value_size(v: &Value, limit: usize) -> Option<usize> {
    let mut size = 0usize;
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        size += 32;
        match v {
            Value::String(s) => size += s.len(),
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(m) => {
                for (k, x) in m {
                    size += k.len() + 32;
                    stack.push(x);
                }
            }
            _ => {}
        }
        if size > limit {
            return None;
        }
    }
    Some(size)
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
            c.insert(key(&format!("t{i}"), &i.to_string()), Some(json!(i).into()), 100, || true);
        }
        for i in 0..500 {
            let (t, v) = (format!("t{i}"), i.to_string());
            assert!(c.get_ref((&t, "", "c", &v)).is_some(), "{i}");
            // Moving a byte between parts is another key.
            assert!(c.get_ref((&t, "", &format!("c{v}"), "")).is_none(), "{i}");
        }
    }

    fn row(thread: &str, id: &str) -> Arc<Row> {
        Arc::new(Row {
            thread_id: thread.into(),
            ns: String::new(),
            id: id.into(),
            parent: None,
            metadata: "{}".into(),
            checkpoint: vec![1, 2, 3],
            format: super::super::row::RowFormat::Msgpack,
        })
    }

    fn shared(doc: Value) -> (Arc<Checkpoint>, Arc<Metadata>) {
        let mut cp = Checkpoint::with_id("x");
        cp.channel_values.insert("doc".into(), doc.into());
        (Arc::new(cp), Arc::new(Metadata::new()))
    }

    /// A row read from SQLite is matched with an entry's column for column,
    /// where SQLite holds it; any difference is a miss.
    #[test]
    fn a_stored_row_is_matched_in_place_column_for_column() {
        let c = CheckpointCache::new(64 << 10);
        let (cp, md) = shared(json!({"a": 1}));
        let kept = row("t", "1");
        c.insert(&kept, &cp, &md, c.epoch(), || true);
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let read = |sql: &str| {
            conn.query_row(sql, [], |r| Ok(RowRef::read(r).ok().and_then(|x| c.row(&x)))).unwrap()
        };
        let hit = read("SELECT 't', '', '1', NULL, '{}', x'010203', 'msgpack'").unwrap();
        assert!(Arc::ptr_eq(&hit, &kept));
        // Metadata as a BLOB of the same bytes is the same row (read_row
        // reads either).
        assert!(read("SELECT 't', '', '1', NULL, CAST('{}' AS BLOB), x'010203', 'msgpack'").is_some());
        for other in [
            "SELECT 't', '', '1', NULL, '{}', x'010204', 'msgpack'",
            "SELECT 't', '', '1', NULL, '{\"s\":1}', x'010203', 'msgpack'",
            "SELECT 't', '', '1', 'p', '{}', x'010203', 'msgpack'",
            "SELECT 't', '', '1', NULL, '{}', x'010203', 'compact'",
            "SELECT 't', 'ns', '1', NULL, '{}', x'010203', 'msgpack'",
            "SELECT 't', '', '2', NULL, '{}', x'010203', 'msgpack'",
            "SELECT 't', '', 1, NULL, '{}', x'010203', 'msgpack'",
        ] {
            assert!(read(other).is_none(), "{other}");
        }
        let mut q = conn.prepare("SELECT 't', '', '1', NULL, '{}', x'010203', 'msgpack'").unwrap();
        let mut rows = q.query([]).unwrap();
        assert!(CheckpointCache::new(0).row(&RowRef::read(rows.next().unwrap().unwrap()).unwrap()).is_none());
    }

    #[test]
    fn checkpoints_are_kept_for_equal_rows_within_budget_and_epoch() {
        let c = CheckpointCache::new(64 << 10);
        let (cp, md) = shared(json!({"a": 1}));
        let epoch = c.epoch();
        c.insert(&row("t", "1"), &cp, &md, epoch, || true);
        assert!(Arc::ptr_eq(&c.get(&row("t", "1")).unwrap().0, &cp));
        // Another row under the same id is not served.
        let mut other = Row::clone(&row("t", "1"));
        other.metadata = "{\"step\": 2}".into();
        assert!(c.get(&Arc::new(other)).is_none());
        // An equal row read anew is served.
        assert!(c.get(&row("t", "1")).is_some());
        // A value past a quarter of the budget is not kept.
        let (big, md2) = shared(json!("x".repeat(20 << 10)));
        c.insert(&row("t", "2"), &big, &md2, epoch, || true);
        assert!(c.get(&row("t", "2")).is_none());
        // The budget holds: many entries never cost more than it.
        for i in 0..200 {
            c.insert(&row("u", &i.to_string()), &cp, &md, epoch, || true);
            assert!(c.lock().bytes <= 64 << 10);
        }
        // Forgetting a thread drops its entries, and what a read began
        // building before is not kept.
        c.insert(&row("v", "1"), &cp, &md, epoch, || true);
        c.forget_thread("v");
        assert!(c.get(&row("v", "1")).is_none());
        c.insert(&row("v", "1"), &cp, &md, epoch, || true);
        assert!(c.get(&row("v", "1")).is_none());
        c.insert(&row("v", "1"), &cp, &md, c.epoch(), || true);
        assert!(c.get(&row("v", "1")).is_some());
    }

    #[test]
    fn stays_within_its_budget_and_forgets_threads() {
        let c = ValueCache::new(1000);
        for i in 0..100 {
            c.insert(key("a", &i.to_string()), Some(json!(i).into()), 100, || true);
            assert!(c.lock().bytes <= 1000);
        }
        c.insert(key("b", "1"), None, 100, || true);
        assert_eq!(c.get(&key("b", "1")), Some(None));
        c.forget_thread("b");
        assert_eq!(c.get(&key("b", "1")), None);
        // Too big for the cache: not kept.
        c.insert(key("a", "big"), Some(json!(1).into()), 600, || true);
        assert_eq!(c.get(&key("a", "big")), None);
    }
}
