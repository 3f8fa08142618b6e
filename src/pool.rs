//! A small pool of SQLite connections to one file.
//!
//! Connections are opened lazily up to a maximum and reused last-in,
//! first-out (the most recently used connection has the warmest page and
//! statement caches). A caller that finds every connection in use waits for
//! one to come back, up to a timeout.
//!
//! No code that can panic runs while the pool's lock is held (only a `Vec`
//! push or pop and a counter update), so the lock can never guard
//! half-updated state; a poisoned lock (a panic elsewhere in a thread that
//! held it) is therefore safe to take over, and is.
//!
//! The pool also keeps a generation ([`Pooled::generation`]) that moves
//! whenever the file may have changed: when a connection of the pool comes
//! back having changed rows, and when a connection finds (by SQLite's
//! `PRAGMA data_version`) that another connection, in this process or
//! another, committed since it last looked. A reader that cached something
//! at generation `g` may serve it again while the generation is still `g`.
//! On a WAL file a connection first compares the WAL-index header with the
//! one it saw when it last asked (see [`crate::wal::index_header`]): the
//! same header means no commit since, and the pragma (a read transaction,
//! two file-lock system calls) is skipped.
//!
//! Writers of one pool also take turns here ([`Pool::write_turn`]) before
//! they ask SQLite for the write lock: SQLite's busy handler makes a
//! connection that finds the lock taken sleep (1, 2, 5, 10 ... ms), so
//! threads of one process contending through SQLite alone would spend most
//! of their time asleep. Another process still meets SQLite's lock.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::error::{Error, Result};

type Open = Box<dyn Fn() -> Result<Connection> + Send + Sync>;

pub(crate) struct Pool {
    state: Mutex<State>,
    returned: Condvar,
    max: usize,
    timeout: Duration,
    open: Open,
    /// Whether a writer of this pool has its turn.
    writing: Mutex<Turns>,
    turn_over: Condvar,
    generation: AtomicU64,
    /// Commits through this pool, and the thread that checkpoints the WAL
    /// every so many of them (a file opened for writing), started by the
    /// first nudge (`wal_start`): a handle that only reads, or writes a
    /// little, never pays for a thread.
    commits: AtomicU64,
    wal: std::sync::OnceLock<Option<crate::wal::WalThread>>,
    wal_start: Mutex<Option<WalStart>>,
    /// The file is in WAL mode and its connections may read the WAL-index
    /// (see [`Pooled::generation`]).
    wal_index: bool,
}

/// Starts the WAL checkpoint thread (see [`Pool::checkpoint_wal_with`]).
pub(crate) type WalStart = Box<dyn FnOnce() -> Option<crate::wal::WalThread> + Send>;

/// An idle connection and what it last saw of the file.
struct Slot {
    conn: Connection,
    seen: Seen,
}

/// What a connection last saw of its file's commits.
#[derive(Clone, Copy, Default)]
struct Seen {
    /// `PRAGMA data_version` when last asked (`None`: never asked).
    data_version: Option<i64>,
    /// The WAL-index header read just before `data_version` was asked.
    header: Option<[u32; 12]>,
}

/// The write turn of a pool's writers.
#[derive(Default)]
struct Turns {
    /// A writer has it.
    writing: bool,
    /// Writers waiting for it (ending a turn wakes one only if some wait:
    /// waking costs a system call on every commit).
    waiting: usize,
}

struct State {
    idle: Vec<Slot>,
    /// Connections that exist: idle, lent out, or being opened.
    total: usize,
    /// Callers waiting for a connection to come back (a return wakes one
    /// only if some wait: waking costs a system call).
    waiting: usize,
}

impl Pool {
    /// A pool that already holds `first` and opens up to `max` connections
    /// with `open`; a caller waits at most `timeout` for one.
    pub(crate) fn new(first: Connection, max: usize, timeout: Duration, open: Open) -> Pool {
        Pool {
            state: Mutex::new(State {
                idle: vec![Slot { conn: first, seen: Seen::default() }],
                total: 1,
                waiting: 0,
            }),
            returned: Condvar::new(),
            max: max.max(1),
            timeout,
            open,
            writing: Mutex::default(),
            turn_over: Condvar::new(),
            generation: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            wal: std::sync::OnceLock::new(),
            wal_start: Mutex::new(None),
            wal_index: false,
        }
    }

    /// Lets connections read the WAL-index header: only for a file in WAL
    /// mode (mapping the shared memory of another file would create a
    /// `-shm` file for it). A file leaves WAL mode only once every other
    /// connection is closed, so it stays in it while the pool exists.
    pub(crate) fn with_wal_index(mut self, yes: bool) -> Pool {
        self.wal_index = yes;
        self
    }

    /// Hands WAL checkpoints to the thread `start` starts (`None`: it could
    /// not; the writers' own checkpoints then keep the log bounded), when
    /// the first is due (see [`crate::wal`]).
    pub(crate) fn checkpoint_wal_with(&self, start: WalStart) {
        *self.wal_start.lock().unwrap_or_else(PoisonError::into_inner) = Some(start);
    }

    /// Counts a commit; every [`crate::wal::NUDGE_EVERY`] commits, nudges
    /// the WAL thread.
    pub(crate) fn committed(&self) {
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if n % crate::wal::NUDGE_EVERY == 0 {
            let start = || self.wal_start.lock().unwrap_or_else(PoisonError::into_inner).take()?();
            if let Some(wal) = self.wal.get_or_init(start) {
                wal.nudge();
            }
        }
    }

    /// Waits (at most `timeout`) until no other writer of this pool is
    /// writing, and holds the turn until the returned value drops. After
    /// `timeout` it returns without the turn: the caller then meets SQLite's
    /// own lock and busy timeout, as it would have without the pool (so a
    /// writer that somehow waits on itself is delayed, never deadlocked).
    pub(crate) fn write_turn(&self, timeout: Duration) -> WriteTurn<'_> {
        let deadline = Instant::now() + timeout;
        let mut turns = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        while turns.writing {
            let now = Instant::now();
            if now >= deadline {
                return WriteTurn { pool: None };
            }
            turns.waiting += 1;
            turns =
                self.turn_over.wait_timeout(turns, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
            turns.waiting -= 1;
        }
        turns.writing = true;
        WriteTurn { pool: Some(self) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection: an idle one, a new one if fewer than `max` exist, or the
    /// next one returned.
    ///
    /// # Errors
    /// [`Error::Busy`] if none came back within the timeout; the errors of
    /// opening a connection.
    pub(crate) fn get(&self) -> Result<Pooled<'_>> {
        let deadline = Instant::now() + self.timeout;
        let mut state = self.lock();
        loop {
            if let Some(slot) = state.idle.pop() {
                drop(state);
                return Ok(Pooled::lend(self, slot));
            }
            if state.total < self.max {
                state.total += 1;
                drop(state);
                return match (self.open)() {
                    Ok(conn) => Ok(Pooled::lend(self, Slot { conn, seen: Seen::default() })),
                    Err(e) => {
                        self.lock().total -= 1;
                        self.returned.notify_one();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Busy);
            }
            state.waiting += 1;
            state =
                self.returned.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
            state.waiting -= 1;
        }
    }

    fn put_back(&self, slot: Slot, changes_at_loan: u64) {
        let conn = slot.conn;
        // A connection left inside a transaction (a panic in a caller's
        // closure) is rolled back before anyone else gets it; one that cannot
        // be is dropped.
        let conn =
            if conn.is_autocommit() || conn.execute_batch("ROLLBACK").is_ok() { Some(conn) } else { None };
        // It changed rows (committed, or rolled back: either way what a
        // reader cached may be stale).
        if conn.as_ref().is_none_or(|c| c.total_changes() != changes_at_loan) {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        let mut state = self.lock();
        match conn {
            Some(c) => state.idle.push(Slot { conn: c, seen: slot.seen }),
            None => state.total -= 1,
        }
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.returned.notify_one();
        }
    }
}

/// A writer's turn (see [`Pool::write_turn`]); the next writer's on drop.
pub(crate) struct WriteTurn<'a> {
    pool: Option<&'a Pool>,
}

impl Drop for WriteTurn<'_> {
    fn drop(&mut self) {
        if let Some(pool) = self.pool {
            let mut turns = pool.writing.lock().unwrap_or_else(PoisonError::into_inner);
            turns.writing = false;
            let wake = turns.waiting > 0;
            drop(turns);
            if wake {
                pool.turn_over.notify_one();
            }
        }
    }
}

/// A connection lent by the [`Pool`]; it goes back on drop.
pub(crate) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
    seen: Seen,
    changes_at_loan: u64,
}

impl Deref for Pooled<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        // Only `drop` takes the connection out.
        self.conn.as_ref().unwrap_or_else(|| unreachable!("a pooled connection is present until drop"))
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().unwrap_or_else(|| unreachable!("a pooled connection is present until drop"))
    }
}

impl<'a> Pooled<'a> {
    fn lend(pool: &'a Pool, slot: Slot) -> Pooled<'a> {
        let changes_at_loan = slot.conn.total_changes();
        Pooled { pool, conn: Some(slot.conn), seen: slot.seen, changes_at_loan }
    }

    /// The pool's generation (see the module docs), after moving it if
    /// another connection committed since this one last looked. Call it
    /// outside a transaction, before the reads whose results are cached
    /// with it.
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn generation(&mut self) -> Result<u64> {
        // Read before the pragma: a commit in between moves the header, and
        // the next call asks again.
        // Only once this connection has read the file (it has then mapped
        // the WAL-index), and outside a transaction: inside one the pragma
        // answers for the transaction's snapshot, and a header recorded with
        // it would hide the commits made since.
        debug_assert!(self.is_autocommit(), "generation() inside a transaction");
        let header = match self.pool.wal_index && self.seen.data_version.is_some() && self.is_autocommit() {
            true => crate::wal::index_header(self),
            false => None,
        };
        // (A header is only read once the pragma has been asked.)
        if header.is_some() && header == self.seen.header {
            return Ok(self.pool.generation.load(Ordering::SeqCst));
        }
        let now: i64 = self.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?;
        if self.seen.data_version != Some(now) {
            self.pool.generation.fetch_add(1, Ordering::SeqCst);
            self.seen.data_version = Some(now);
        }
        self.seen.header = header;
        Ok(self.pool.generation.load(Ordering::SeqCst))
    }

    /// What [`generation`](Self::generation) is for a write, read inside
    /// the write's transaction (it holds a current snapshot already, so the
    /// pragma needs no read transaction of its own, two lock calls): see
    /// [`WriteStart::observe`], then [`wrote`](Self::wrote).
    pub(crate) fn write_start(&self) -> WriteStart<'a> {
        WriteStart { pool: self.pool, seen: self.seen.data_version, before: None }
    }

    /// After this connection committed a write begun with
    /// [`write_start`](Self::write_start): moves the pool's generation past
    /// it now (not when the connection goes back) and returns the new
    /// generation if nothing else moved it since the write observed it. What
    /// the write left in the file may then be cached under that generation:
    /// any later change, observed by any connection, moves it on. `None`:
    /// some other change was observed meanwhile (or the write never
    /// observed); cache nothing.
    pub(crate) fn wrote(&mut self, start: WriteStart<'_>) -> Option<u64> {
        let before = start.before?;
        if self.seen.data_version != start.seen {
            self.seen.data_version = start.seen;
            // The header goes with the pragma's answer: unknown now (this
            // write moved it anyway), so the next read asks again.
            self.seen.header = None;
        }
        let now = self.pool.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.changes_at_loan = self.total_changes();
        (now == before + 1).then_some(now)
    }

    /// The pool this connection came from.
    pub(crate) fn pool(&self) -> &'a Pool {
        self.pool
    }
}

/// A write's view of the pool's generation (see [`Pooled::write_start`]).
pub(crate) struct WriteStart<'a> {
    pool: &'a Pool,
    /// `PRAGMA data_version` as last seen by the connection, then as the
    /// write's transaction read it.
    seen: Option<i64>,
    /// The generation the write starts from, once observed.
    before: Option<u64>,
}

impl WriteStart<'_> {
    /// Inside the write's transaction `tx`: reads `PRAGMA data_version`,
    /// and a change committed elsewhere since the connection last looked
    /// moves the generation first, as [`Pooled::generation`] would have.
    /// (A transaction retried after `Busy` observes again.)
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn observe(&mut self, tx: &Connection) -> Result<()> {
        let data_version: i64 = tx.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?;
        if self.seen != Some(data_version) {
            self.pool.generation.fetch_add(1, Ordering::SeqCst);
            self.seen = Some(data_version);
        }
        self.before = Some(self.pool.generation.load(Ordering::SeqCst));
        Ok(())
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put_back(Slot { conn, seen: self.seen }, self.changes_at_loan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(max: usize, timeout: Duration) -> Pool {
        let first = Connection::open_in_memory().unwrap();
        Pool::new(first, max, timeout, Box::new(|| Ok(Connection::open_in_memory()?)))
    }

    #[test]
    fn writers_take_turns_and_a_turn_waited_for_too_long_is_skipped() {
        let p = pool(2, Duration::from_millis(10));
        let first = p.write_turn(Duration::from_secs(1));
        assert!(first.pool.is_some());
        let skipped = p.write_turn(Duration::from_millis(5));
        assert!(skipped.pool.is_none(), "no turn while another writer has it");
        drop(skipped);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| p.write_turn(Duration::from_secs(5)).pool.is_some());
            std::thread::sleep(Duration::from_millis(20));
            drop(first);
            assert!(waiter.join().unwrap(), "the next writer gets the turn when it is over");
        });
        assert!(p.write_turn(Duration::ZERO).pool.is_some());
    }

    #[test]
    fn reuses_the_most_recent_connection() {
        let p = pool(4, Duration::from_millis(10));
        let a = p.get().unwrap();
        a.execute_batch("CREATE TABLE marker (x)").unwrap();
        drop(a);
        let b = p.get().unwrap();
        b.execute_batch("SELECT * FROM marker").unwrap();
    }

    #[test]
    fn waits_then_reports_busy_when_every_connection_is_lent() {
        let p = pool(2, Duration::from_millis(30));
        let _a = p.get().unwrap();
        let _b = p.get().unwrap();
        let t = Instant::now();
        assert!(matches!(p.get(), Err(Error::Busy)));
        assert!(t.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_connection_returned_inside_a_transaction_is_rolled_back() {
        let p = pool(1, Duration::from_millis(10));
        let a = p.get().unwrap();
        a.execute_batch("CREATE TABLE t (x); BEGIN; INSERT INTO t VALUES (1);").unwrap();
        drop(a);
        let b = p.get().unwrap();
        assert!(b.is_autocommit());
        let n: i64 = b.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn a_waiter_gets_the_connection_another_thread_returns() {
        let p = pool(1, Duration::from_secs(5));
        std::thread::scope(|s| {
            let a = p.get().unwrap();
            let h = s.spawn(|| p.get().map(|_| ()));
            std::thread::sleep(Duration::from_millis(20));
            drop(a);
            h.join().unwrap().unwrap();
        });
    }
}
