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

use std::ops::Deref;
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
}

struct State {
    idle: Vec<Connection>,
    /// Connections that exist: idle, lent out, or being opened.
    total: usize,
}

impl Pool {
    /// A pool that already holds `first` and opens up to `max` connections
    /// with `open`; a caller waits at most `timeout` for one.
    pub(crate) fn new(first: Connection, max: usize, timeout: Duration, open: Open) -> Pool {
        Pool {
            state: Mutex::new(State { idle: vec![first], total: 1 }),
            returned: Condvar::new(),
            max: max.max(1),
            timeout,
            open,
        }
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
            if let Some(conn) = state.idle.pop() {
                return Ok(Pooled { pool: self, conn: Some(conn) });
            }
            if state.total < self.max {
                state.total += 1;
                drop(state);
                return match (self.open)() {
                    Ok(conn) => Ok(Pooled { pool: self, conn: Some(conn) }),
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
            state =
                self.returned.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn put_back(&self, conn: Connection) {
        // A connection left inside a transaction (a panic in a caller's
        // closure) is rolled back before anyone else gets it; one that cannot
        // be is dropped.
        let conn =
            if conn.is_autocommit() || conn.execute_batch("ROLLBACK").is_ok() { Some(conn) } else { None };
        let mut state = self.lock();
        match conn {
            Some(c) => state.idle.push(c),
            None => state.total -= 1,
        }
        drop(state);
        self.returned.notify_one();
    }
}

/// A connection lent by the [`Pool`]; it goes back on drop.
pub(crate) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
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

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put_back(conn);
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
