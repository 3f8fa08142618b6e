//! How a checkpointer learns that its caches may hold what the file no
//! longer does.
//!
//! The caches of decoded values (and of the bytes and bases they come from)
//! assume that a (thread, namespace, channel, version) holds one value for
//! good. A deletion breaks that: once a blob row is gone, anyone may store
//! the same version again with another value. The crate's own versions
//! carry a random part and never meet again, but a caller that makes its
//! own (plain integers) may. So every transaction that deletes blob rows
//! counts one in `agentstate_meta` (key [`KEY`]), and a checkpointer reads
//! the count in each transaction that is about to use its caches: if it
//! moved since the caches were last known current, someone else (another
//! checkpointer, `Db` or process) deleted, and the caches are emptied
//! first. A checkpointer's own deletions forget what they delete, and it
//! takes the count they leave as current.
//!
//! A read that runs beside a deletion of the same checkpointer may still be
//! on a snapshot from before it, and decode what was deleted after the
//! deletion forgot it. So a read caches only if its snapshot is as new as
//! every deletion the caches forgot ([`Seen::admits`]): before forgetting
//! anything, a deletion raises [`Seen`]'s forgotten count to the count it
//! leaves (a clear on a moved count, to that count), and a read compares
//! the count of its snapshot with it under the lock of the cache it adds
//! to. Either the read's entry goes in first and the forgetting removes
//! it, or the read sees the raised count and caches nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

use rusqlite::{Connection, OptionalExtension};

use super::cache::BlobKey;

use crate::error::Result;

/// The `agentstate_meta` key of the count.
pub(crate) const KEY: &str = "checkpoint.deletions";

/// The count a checkpointer's caches are current with, shared by its
/// clones; none known at first.
pub(super) struct Seen {
    count: AtomicI64,
    /// The first read was let off reading the count.
    first_read: AtomicBool,
    /// The latest counts this checkpointer's own retention trims made, each
    /// with the blob versions it deleted (a write planned before one of
    /// them may still extend its lists, except those whose base it deleted:
    /// a trim deletes only what no kept checkpoint needs, but another
    /// writer may have made the base one of those).
    own: Mutex<Own>,
    /// The count of the newest deletion the caches forgot (or were emptied
    /// for): a read of an older snapshot may hold what it deleted, and
    /// caches nothing. [`NONE`] before any.
    forgotten: AtomicI64,
}

/// No deletion forgotten yet.
const NONE: i64 = i64::MIN;

/// No count known.
pub(super) const UNKNOWN: i64 = i64::MIN;

/// Own counts remembered.
const OWN: usize = 256;

/// Trimmed blob versions remembered with them (older counts are dropped
/// first: a write planned before them stores its lists whole).
const OWN_KEYS: usize = 4096;

#[derive(Default)]
struct Own {
    counts: VecDeque<(i64, Vec<BlobKey>)>,
    keys: usize,
    /// Deleted by the trim in progress, not yet given a count.
    pending: Vec<BlobKey>,
}

impl Own {
    /// Drops the counts above `count` (made by transactions that rolled
    /// back).
    fn drop_above(&mut self, count: i64) {
        while self.counts.back().is_some_and(|(c, _)| *c > count) {
            if let Some((_, keys)) = self.counts.pop_back() {
                self.keys -= keys.len();
            }
        }
    }
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            count: AtomicI64::new(UNKNOWN),
            first_read: AtomicBool::new(false),
            own: Mutex::default(),
            forgotten: AtomicI64::new(NONE),
        }
    }
}

impl Seen {
    /// Whether a read may skip reading the count: the first read of a
    /// checkpointer that has not read it yet (a fresh process's first read
    /// would pay compiling one more statement, a twentieth of it). Nothing
    /// it could find in the caches was read from the file; what it caches
    /// is dropped by the next read or write, which finds no count known.
    pub(super) fn first_read(&self) -> bool {
        self.count.load(Ordering::SeqCst) == UNKNOWN && !self.first_read.swap(true, Ordering::SeqCst)
    }

    /// Takes `now`, the count read in the current transaction, as current;
    /// whether it was already (the caches are then current too).
    ///
    /// (A read on an older snapshot may set back an older count after a
    /// newer one was taken: the next read then finds the count moved and
    /// empties the caches again, so what that read cached does not stay.)
    pub(super) fn take(&self, now: i64) {
        self.count.store(now, Ordering::SeqCst);
    }

    /// The count known now (planning a write takes it: see
    /// [`extends`](Self::extends)).
    pub(super) fn current(&self) -> i64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Forgets the count and the own ones (a transaction that took or made
    /// one failed, and may have been rolled back): the next use empties
    /// the caches, and no write planned before extends its lists.
    pub(super) fn unknown(&self) {
        self.count.store(UNKNOWN, Ordering::SeqCst);
        *self.own.lock().unwrap_or_else(PoisonError::into_inner) = Own::default();
    }

    /// Before the caches forget what a deletion leaving count `count`
    /// deleted (or are emptied because the count moved to `count`): reads
    /// of snapshots older than that cache nothing from now on.
    pub(super) fn forgetting(&self, count: i64) {
        self.forgotten.fetch_max(count, Ordering::SeqCst);
    }

    /// In a write transaction, which reads the newest count `latest`: a
    /// forgotten count above it was made by a deletion that rolled back
    /// (counts only grow), which deleted nothing; reads of `latest` cache
    /// again. Own trims recorded above it rolled back too: dropped.
    pub(super) fn settle(&self, latest: i64) {
        self.forgotten.fetch_min(latest, Ordering::SeqCst);
        self.own.lock().unwrap_or_else(PoisonError::into_inner).drop_above(latest);
    }

    /// Whether a read of the snapshot whose count is `snapshot` (`None`: a
    /// first read, which did not read it) may cache what it decoded. Ask
    /// under the lock of the cache it adds to (see the module docs).
    pub(super) fn admits(&self, snapshot: Option<i64>) -> bool {
        let forgotten = self.forgotten.load(Ordering::SeqCst);
        snapshot.map_or(forgotten == NONE, |count| count >= forgotten)
    }

    /// The trim in progress deleted the blob versions `keys`: they go with
    /// the count [`own`](Self::own) records next.
    pub(super) fn trimmed(&self, keys: &[BlobKey]) {
        self.own.lock().unwrap_or_else(PoisonError::into_inner).pending.extend_from_slice(keys);
    }

    /// Counts `from + 1 ..= to` were made by this checkpointer's trims
    /// (which deleted the versions given to [`trimmed`](Self::trimmed)
    /// since the last call).
    pub(super) fn own(&self, from: i64, to: i64) {
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        // Counts above `from` recorded before were made by a transaction
        // that rolled back and ran again (a busy commit retried, a batch
        // run again): this run's trims replace them.
        own.drop_above(from);
        let mut pending = std::mem::take(&mut own.pending);
        for c in from.saturating_add(1)..=to {
            let keys = if c == to { std::mem::take(&mut pending) } else { Vec::new() };
            own.keys += keys.len();
            own.counts.push_back((c, keys));
        }
        while own.counts.len() > OWN || (own.keys > OWN_KEYS && own.counts.len() > 1) {
            if let Some((_, keys)) = own.counts.pop_front() {
                own.keys -= keys.len();
            }
        }
    }

    /// Whether a write planned when the count was `planned` (its lists as
    /// deltas of what the checkpointer remembered then) may still store
    /// them so when the file's count is `now`: no deletion since, or only
    /// this checkpointer's own trims. `Some`: yes, except deltas of the
    /// blob versions given (those trims deleted them, and another caller
    /// may have stored them again with other values since).
    pub(super) fn extends(&self, planned: i64, now: i64) -> Option<Vec<BlobKey>> {
        if planned == UNKNOWN || planned > now {
            return None;
        }
        let own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        let mut deleted = Vec::new();
        for c in planned + 1..=now {
            let (_, keys) = own.counts.iter().find(|(o, _)| *o == c)?;
            deleted.extend(keys.iter().cloned());
        }
        Some(deleted)
    }
}

/// The count in the file (0 before any deletion, and in a file older than
/// `agentstate_meta`, which only a read-only handle opens as it is).
pub(super) fn count(conn: &Connection) -> Result<i64> {
    let mut stmt =
        match conn.prepare_cached("SELECT CAST(value AS INTEGER) FROM agentstate_meta WHERE key = ?1") {
            Ok(stmt) => stmt,
            Err(e) if !has_meta(conn)? => {
                drop(e);
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        };
    Ok(stmt.query_row([KEY], |r| r.get::<_, Option<i64>>(0)).optional()?.flatten().unwrap_or(0))
}

fn has_meta(conn: &Connection) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentstate_meta')",
        [],
        |r| r.get(0),
    )?)
}

/// Counts one deletion, inside the transaction that deletes.
pub(super) fn bump(tx: &Connection) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO agentstate_meta (key, value) VALUES (?1, '1') \
         ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
    )?
    .execute([KEY])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Seen;

    #[test]
    fn reads_of_snapshots_older_than_a_forgotten_deletion_cache_nothing() {
        let seen = Seen::default();
        // Nothing forgotten: every read caches, a first read (no count) too.
        assert!(seen.admits(None) && seen.admits(Some(0)));
        seen.forgetting(3);
        assert!(!seen.admits(None), "a first read may be older than the deletion");
        assert!(!seen.admits(Some(2)));
        assert!(seen.admits(Some(3)) && seen.admits(Some(4)));
        // An older count never lowers it.
        seen.forgetting(1);
        assert!(!seen.admits(Some(2)));
        // A write transaction finds 3 committed: nothing to settle.
        seen.settle(3);
        assert!(!seen.admits(Some(2)) && seen.admits(Some(3)));
        // A deletion that made 4 and rolled back: the next write finds 3.
        seen.forgetting(4);
        assert!(!seen.admits(Some(3)));
        seen.settle(3);
        assert!(seen.admits(Some(3)));
    }

    #[test]
    fn a_write_extends_past_own_trims_but_not_the_versions_they_deleted() {
        let key = |v: &str| ("t".to_string(), String::new(), "m".to_string(), v.to_string());
        let seen = Seen::default();
        assert_eq!(seen.extends(2, 2), Some(vec![]), "nothing deleted since");
        assert_eq!(seen.extends(2, 3), None, "someone else's deletion");
        seen.trimmed(&[key("1")]);
        seen.own(2, 3);
        assert_eq!(seen.extends(2, 3), Some(vec![key("1")]));
        assert_eq!(seen.extends(3, 3), Some(vec![]), "planned after the trim");
        // A delete (not a trim) is not recorded as own.
        assert_eq!(seen.extends(2, 4), None);
        // The trim's transaction rolled back and ran again, deleting more:
        // the second run's versions count.
        seen.trimmed(&[key("1"), key("2")]);
        seen.own(2, 3);
        assert_eq!(seen.extends(2, 3), Some(vec![key("1"), key("2")]));
        // It rolled back and the next write transaction finds 2: what it
        // recorded goes, and the count 3 someone else makes is not own.
        seen.settle(2);
        assert_eq!(seen.extends(2, 3), None);
        seen.own(2, 3);
        seen.unknown();
        assert_eq!(seen.extends(2, 3), None, "forgotten with the count");
    }
}
