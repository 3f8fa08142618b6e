//! The committer: queued jobs written in shared transactions, one batch at a
//! time, in the order they were queued. A caller that must wait for the
//! queue while no batch is being written writes it itself (the leader of
//! that group commit); a thread of its own writes what nobody waits for.
//!
//! Two uses:
//!
//! - **Group commit** (`Durability::Full`): callers on several threads each
//!   wait for their write, but writes queued while a commit is in progress
//!   share the next one, so eight writers pay for about one fsync, not eight.
//! - **Write-behind** ([`DbBuilder::write_behind`](crate::DbBuilder::write_behind)):
//!   the caller does not wait; the write is committed shortly after, with
//!   whatever else was queued. [`Db::flush`](crate::Db::flush) waits for it.
//!   While nobody waits, the thread opens a transaction at the first queued
//!   job and applies each job as it arrives (on the second core, while the
//!   caller computes its next step), then commits them all once: when
//!   somebody waits, at [`LINGER`] after the first job, or at a full batch.
//!   So the caller's `flush` finds the work done but the last job and the
//!   commit, and the batch still costs one commit.
//!
//! A job that fails (a `Conflict`, say) is rolled back alone and the others
//! commit; a job is never half applied. A batch first runs without
//! savepoints; only if one of its jobs fails is it rolled back and run again
//! with a savepoint per job. Jobs own their data and can run again if the
//! transaction is retried after `Busy`.
//!
//! No code that can panic runs under the lock (queue and counter updates), so
//! a poisoned lock guards consistent state and is taken over; a panicking job
//! is caught and reported as that job's error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::db::CacheTag;
use crate::error::{Error, Result};
use crate::pool::{Pool, Pooled, WriteStart, WriteTurn};

/// A write the committer runs inside a transaction (it may run more than
/// once if the transaction is retried).
pub(crate) type Job = Box<dyn Fn(&Connection) -> Result<()> + Send>;

/// Undoes what submitting a write-behind job did outside the file (values
/// it put in a cache) when the job fails: run before the failure counts as
/// finished, so that no read after `settle` or `flush` sees them.
pub(crate) type Undo = Box<dyn FnOnce() + Send>;

struct Queued {
    job: Job,
    reply: Option<SyncSender<Result<()>>>,
    /// The thread (LangGraph's `thread_id`) a write-behind job writes to,
    /// to whose writes and flushes its failure is reported (`None`: any).
    owner: Option<Box<str>>,
    /// Set when the job commits as the last of its transaction, with
    /// nothing else changed in between (see `Pooled::wrote`).
    tag: CacheTag,
    /// Run if the job fails.
    undo: Option<Undo>,
}

#[derive(Default)]
struct State {
    queue: Vec<Queued>,
    /// Jobs submitted / finished (committed or failed) so far.
    submitted: u64,
    finished: u64,
    /// Failures of write-behind jobs not yet reported: the first of each
    /// owner, oldest first.
    errors: Vec<(Option<Box<str>>, Error)>,
    /// Callers waiting in `flush`/`wait`, or for their own job: no lingering.
    waiters: usize,
    /// A batch is being written (by the thread or by a waiting caller):
    /// nobody else starts one.
    running: bool,
    /// The batch being written is the thread's open transaction, which
    /// takes jobs until it commits: a waiter wakes the thread to commit it.
    streaming: bool,
    stop: bool,
    /// The thread waits on `work` (waking it is a system call: only then).
    sleeping: bool,
    /// Callers waiting on `done`.
    blocked: usize,
}

/// How long the thread waits for more write-behind jobs before committing a
/// batch nobody waits for (more jobs per transaction, fewer wake-ups).
const LINGER: Duration = Duration::from_millis(2);

/// A batch that large is committed at once.
const FULL_BATCH: usize = 256;

struct Shared {
    state: Mutex<State>,
    /// Signals the thread: work queued, a batch finished, or stop.
    work: Condvar,
    /// Signals waiters: a batch finished.
    done: Condvar,
    pool: Arc<Pool>,
    busy: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the queue (the caller holds the lock, no batch is being
    /// written and the queue is not empty) and writes it with the lock
    /// released: at once, or (`stream`) in a transaction the thread keeps
    /// open, which takes every job queued later as it comes and commits
    /// when somebody waits, at `LINGER` after the first job, or at a full
    /// batch. Hands each job's result to its submitter or keeps the first
    /// write-behind failure, and wakes everyone waiting.
    fn write_queue<'s>(&'s self, mut st: MutexGuard<'s, State>, stream: bool) -> MutexGuard<'s, State> {
        st.running = true;
        st.streaming = stream;
        let mut batch = std::mem::take(&mut st.queue);
        drop(st);
        // Whoever writes must leave `running` cleared, or every later wait
        // would hang: a panic outside the jobs fails the batch instead.
        let results = catch_unwind(AssertUnwindSafe(|| match stream {
            true => self.stream_into(&mut batch, Instant::now() + LINGER),
            false => write_batch(&self.pool, self.busy, &batch),
        }))
        .unwrap_or_else(|_| panicked(&batch));
        self.finish(batch, results)
    }

    /// A streamed [`write_queue`](Self::write_queue): `batch` grows by the
    /// jobs taken from the queue; the result of each.
    fn stream_into(&self, batch: &mut Vec<Queued>, deadline: Instant) -> Vec<Result<()>> {
        let open = match Open::begin(&self.pool, self.busy) {
            Ok(open) => open,
            // Busy past the timeout (it was retried) or worse: the batch
            // fails, as a batch that cannot begin does.
            Err(e) => return batch.iter().map(|_| Err(e.replicate())).collect(),
        };
        let mut applied = 0;
        loop {
            while applied < batch.len() {
                if run_job(&batch[applied], &open.conn).is_err() {
                    // Roll back; the batch path runs every job again, each
                    // alone in a savepoint, and commits the others.
                    drop(open);
                    return write_batch(&self.pool, self.busy, batch);
                }
                applied += 1;
            }
            let mut st = self.lock();
            loop {
                let full = batch.len() >= FULL_BATCH;
                if !st.queue.is_empty() && !full {
                    batch.append(&mut st.queue);
                    break;
                }
                let now = Instant::now();
                if full || st.waiters > 0 || st.stop || now >= deadline {
                    drop(st);
                    return match open.commit() {
                        Ok(generation) => committed(batch, generation),
                        // Rolled back: the batch path retries a busy file.
                        Err(Error::Busy) => write_batch(&self.pool, self.busy, batch),
                        Err(e) => batch.iter().map(|_| Err(e.replicate())).collect(),
                    };
                }
                st.sleeping = true;
                st = self.work.wait_timeout(st, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
                st.sleeping = false;
            }
        }
    }

    /// Ends a batch: hands each job's result to its submitter or keeps the
    /// first write-behind failure, counts the jobs finished and wakes
    /// everyone waiting.
    fn finish(&self, batch: Vec<Queued>, results: Vec<Result<()>>) -> MutexGuard<'_, State> {
        let n = batch.len() as u64;
        let mut failed = Vec::new();
        for (q, r) in batch.into_iter().zip(results) {
            if let (Some(undo), Err(_)) = (q.undo, &r) {
                undo();
            }
            match (q.reply, r) {
                (Some(reply), r) => {
                    let _ = reply.send(r);
                }
                (None, Err(e)) => failed.push((q.owner, e)),
                (None, Ok(())) => {}
            }
        }
        let mut st = self.lock();
        st.finished += n;
        st.running = false;
        st.streaming = false;
        for (owner, e) in failed {
            if !st.errors.iter().any(|(o, _)| *o == owner) {
                st.errors.push((owner, e));
            }
        }
        if st.blocked > 0 {
            self.done.notify_all();
        }
        // The thread may have work that queued meanwhile.
        if st.sleeping && !st.queue.is_empty() {
            self.work.notify_one();
        }
        st
    }
}

/// Whose unreported write-behind failures a call reports.
#[derive(Clone, Copy)]
pub(crate) enum Reporter<'a> {
    /// Anyone's (`Db::flush`).
    Any,
    /// Those of the jobs of this owner and of ownerless jobs (a write to
    /// that thread, or `Db::flush_thread`).
    Owner(Option<&'a str>),
}

/// Takes the oldest unreported write-behind failure that `by` reports.
fn take_error(st: &mut State, by: Reporter<'_>) -> Option<Error> {
    let i = st.errors.iter().position(|(o, _)| match by {
        Reporter::Any => true,
        Reporter::Owner(owner) => o.is_none() || o.as_deref() == owner,
    })?;
    Some(st.errors.remove(i).1)
}

/// Every job of `batch` failed: writing it panicked outside the jobs.
fn panicked(batch: &[Queued]) -> Vec<Result<()>> {
    batch
        .iter()
        .map(|_| Err(Error::corrupt("writing a batch panicked; whether it committed is unknown")))
        .collect()
}

/// The thread's open write transaction (see [`Shared::write_queue`]): dropped
/// without [`commit`](Self::commit), it rolls back.
struct Open<'p> {
    conn: Pooled<'p>,
    /// Held until the transaction ends (after `conn` is back in the pool).
    _turn: WriteTurn<'p>,
    /// Taken by [`commit`](Self::commit).
    start: Option<WriteStart<'p>>,
}

impl<'p> Open<'p> {
    /// `BEGIN IMMEDIATE` on a connection of `pool`, after the process's
    /// other writers (see `Pool::write_turn`); retried while the file is
    /// busy, for at most `busy`.
    fn begin(pool: &'p Pool, busy: Duration) -> Result<Open<'p>> {
        let conn = pool.get()?;
        let turn = pool.write_turn(busy);
        crate::db::retry_busy(busy, || Ok(conn.prepare_cached("BEGIN IMMEDIATE")?.execute([]).map(drop)?))?;
        let mut start = conn.write_start();
        start.observe(&conn)?;
        Ok(Open { conn, _turn: turn, start: Some(start) })
    }

    /// Commits; an error rolls back (when dropped). The generation under
    /// which what the transaction left may be cached (see `Pooled::wrote`).
    fn commit(mut self) -> Result<Option<u64>> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.conn.pool().committed();
        Ok(self.start.take().and_then(|start| self.conn.wrote(start)))
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        // (A failed COMMIT may have ended the transaction.)
        if !self.conn.is_autocommit() {
            let _ = self.conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
        }
    }
}

pub(crate) struct Committer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// Starts the thread; it writes through connections of `pool`.
    pub(crate) fn start(pool: Arc<Pool>, busy: Duration) -> Result<Committer> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            work: Condvar::new(),
            done: Condvar::new(),
            pool,
            busy,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("agentstate-commit".into())
            .spawn(move || run(&worker))
            .map_err(Error::Io)?;
        Ok(Committer { shared, thread: Some(thread) })
    }

    /// Queues `job` and waits for its commit (group commit).
    pub(crate) fn run_and_wait(&self, job: Job, tag: CacheTag) -> Result<()> {
        let (tx, rx) = sync_channel(1);
        let target = {
            let mut st = self.shared.lock();
            st.queue.push(Queued { job, reply: Some(tx), owner: None, tag, undo: None });
            st.submitted += 1;
            st.submitted
        };
        self.wait_for(target);
        rx.recv().unwrap_or_else(|_| Err(Error::corrupt("a finished write left no answer")))
    }

    /// Queues `job`, a write to thread `owner` (`None`: no one thread),
    /// without waiting; or, if an earlier write-behind job of the same
    /// owner (or of none) failed and that was not reported yet, returns its
    /// error and queues nothing: an error means this call wrote nothing (a
    /// caller that gets one does not hold a write that will commit after
    /// all). Another thread's failure is left for that thread. `undo` runs
    /// if the job fails (not if it is not queued).
    pub(crate) fn run_behind(
        &self,
        job: Job,
        tag: CacheTag,
        owner: Option<&str>,
        undo: Option<Undo>,
    ) -> Result<()> {
        let wake = {
            let mut st = self.shared.lock();
            if let Some(earlier) = take_error(&mut st, Reporter::Owner(owner)) {
                return Err(earlier);
            }
            st.queue.push(Queued { job, reply: None, owner: owner.map(Box::from), tag, undo });
            st.submitted += 1;
            // The thread sleeps without work, or waits for more in an open
            // transaction: wake it only then.
            st.sleeping && (st.queue.len() == 1 || st.queue.len() >= FULL_BATCH)
        };
        if wake {
            self.shared.work.notify_one();
        }
        Ok(())
    }

    /// Waits until every job submitted before the call is committed (or has
    /// failed), then reports the first write-behind failure not yet
    /// reported that `by` reports.
    pub(crate) fn flush(&self, by: Reporter<'_>) -> Result<()> {
        self.wait();
        take_error(&mut self.shared.lock(), by).map_or(Ok(()), Err)
    }

    /// Waits until every job submitted before the call is committed (or has
    /// failed); errors stay for the next write or `flush` to report.
    pub(crate) fn wait(&self) {
        let target = self.shared.lock().submitted;
        self.wait_for(target);
    }

    /// Waits until the first `target` jobs submitted are finished. A caller
    /// that would wait while no batch is being written writes the queue
    /// itself, in its own thread: no hand-off to the commit thread and back
    /// (group commit with a leader, as databases do it). Jobs still commit
    /// in the order they were queued: one batch at a time.
    fn wait_for(&self, target: u64) {
        let shared = &*self.shared;
        let mut st = shared.lock();
        st.waiters += 1;
        while st.finished < target {
            if !st.running && !st.queue.is_empty() {
                st = shared.write_queue(st, false);
            } else {
                if st.streaming && st.sleeping {
                    // The thread keeps a transaction open: have it commit.
                    shared.work.notify_one();
                }
                st.blocked += 1;
                st = shared.done.wait(st).unwrap_or_else(PoisonError::into_inner);
                st.blocked -= 1;
            }
        }
        st.waiters -= 1;
    }
}

impl Drop for Committer {
    /// Writes what is queued, then stops the thread.
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.queue.is_empty() || st.running {
            if st.stop && !st.running && st.queue.is_empty() {
                return;
            }
            st.sleeping = true;
            st = shared.work.wait(st).unwrap_or_else(PoisonError::into_inner);
            st.sleeping = false;
            continue;
        }
        // Nobody waits: open a transaction that takes the jobs as they come
        // (a caller who starts waiting meanwhile has it committed).
        // Otherwise write what is queued at once.
        let stream = st.waiters == 0 && !st.stop;
        st = shared.write_queue(st, stream);
    }
}

/// Runs every job of `batch` in one transaction; the result of each. A job
/// that fails is rolled back alone and the others commit; if the
/// transaction itself fails, every job fails with that error.
fn write_batch(pool: &Pool, busy: Duration, batch: &[Queued]) -> Vec<Result<()>> {
    // First without savepoints (their statement journal copies every page a
    // job touches): if every job succeeds, that is the commit. A job alone
    // needs nothing more; otherwise a failure rolls the whole transaction
    // back and the batch runs again with a savepoint per job (jobs can run
    // again: see `Job`).
    let all = pool.get().and_then(|mut conn| {
        let mut start = conn.write_start();
        crate::db::write_on(&mut conn, busy, |tx| {
            start.observe(tx)?;
            batch.iter().try_for_each(|q| run_job(q, tx))
        })?;
        Ok(conn.wrote(start))
    });
    match all {
        Ok(generation) => return committed(batch, generation),
        Err(e) if batch.len() == 1 || matches!(e, Error::Busy) => {
            return batch.iter().map(|_| Err(e.replicate())).collect();
        }
        Err(_) => {}
    }
    let mut results: Vec<Result<()>> = Vec::new();
    let outcome = pool.get().and_then(|mut conn| {
        crate::db::write_on(&mut conn, busy, |tx| {
            results.clear();
            for q in batch {
                tx.prepare_cached("SAVEPOINT job")?.execute([])?;
                match run_job(q, tx) {
                    Ok(()) => tx.prepare_cached("RELEASE job")?.execute([]).map(drop)?,
                    // A busy database must retry the whole transaction.
                    Err(Error::Busy) => return Err(Error::Busy),
                    Err(e) => {
                        tx.prepare_cached("ROLLBACK TO job")?.execute([])?;
                        tx.prepare_cached("RELEASE job")?.execute([])?;
                        results.push(Err(e));
                        continue;
                    }
                }
                results.push(Ok(()));
            }
            Ok(())
        })
    });
    match outcome {
        Ok(()) => results,
        Err(e) => batch.iter().map(|_| Err(e.replicate())).collect(),
    }
}

/// The results of `batch`, committed whole: all `Ok`; the last job's tag is
/// `generation` (what the others wrote may since have changed).
fn committed(batch: &[Queued], generation: Option<u64>) -> Vec<Result<()>> {
    if let (Some(last), Some(g)) = (batch.last(), generation) {
        last.tag.set(g);
    }
    batch.iter().map(|_| Ok(())).collect()
}

/// Runs one job; a panic is that job's error.
fn run_job(q: &Queued, tx: &Connection) -> Result<()> {
    catch_unwind(AssertUnwindSafe(|| (q.job)(tx)))
        .unwrap_or_else(|_| Err(Error::corrupt("a write job panicked; it was rolled back")))
}
