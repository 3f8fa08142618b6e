//! WAL checkpoints on a thread of their own.
//!
//! SQLite copies the write-ahead log back into the database file (a WAL
//! checkpoint, nothing to do with LangGraph's checkpoints) when a commit
//! finds the log longer than `wal_autocheckpoint` pages, inside that commit:
//! the writer that crosses the line pays for copying a thousand pages and two
//! fsyncs, a stall of milliseconds every few hundred steps (a tenth of a
//! step loop's time here). A file `Db` instead nudges this thread every
//! [`NUDGE_EVERY`] commits (starting it at the first nudge); it runs a `PASSIVE` checkpoint on its own
//! connection (which never blocks writers or readers) while the writers go
//! on. Writers keep SQLite's own check at a higher threshold
//! ([`FALLBACK_PAGES`]), so the log is copied back and reused even if this
//! thread falls behind. That is no hard bound on the `-wal` file: a
//! writer's checkpoint that finds another one running (this thread's, or
//! another handle's) gives up, and one that cannot reach the log's end (a
//! reader of an older snapshot) does not let the log start over, so the
//! file grows on until a later one succeeds (10-11 MiB with one handle
//! writing small commits in a loop, 14-25 MiB with two, here). A
//! checkpoint changes no data and is crash-safe at any instant (SQLite
//! replays or discards the log on the next open).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::error::{Error, Result};

/// Commits between two nudges.
pub(crate) const NUDGE_EVERY: u64 = 100;

/// `wal_autocheckpoint` of the writing connections: a checkpoint inside a
/// commit only when the log has grown past this many pages (8 MiB at 4 KiB
/// pages; SQLite's default is 1000). Under a steady stream of commits the
/// log rarely gets fully copied back between two of them, so it is reused
/// from its start only after such a checkpoint: the `-wal` file reaches at
/// least this size (4 MiB with SQLite's default), more when that
/// checkpoint fails (see the module docs).
pub(crate) const FALLBACK_PAGES: u32 = 2000;

#[derive(Default)]
struct State {
    pending: bool,
    stop: bool,
}

type Shared = (Mutex<State>, Condvar);

/// The thread; dropping it stops it (after the checkpoint it is running).
pub(crate) struct WalThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl WalThread {
    /// Starts the thread; `open` gives it a connection of its own to the
    /// file when it first has work (opening a `Db` does not wait for it).
    pub(crate) fn start(open: impl FnOnce() -> Result<Connection> + Send + 'static) -> Result<WalThread> {
        let shared: Arc<Shared> = Arc::default();
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("agentstate-wal".into())
            .spawn(move || run(&worker, open))
            .map_err(Error::Io)?;
        Ok(WalThread { shared, thread: Some(thread) })
    }

    /// Asks for a checkpoint soon; never waits.
    pub(crate) fn nudge(&self) {
        let (state, wake) = &*self.shared;
        state.lock().unwrap_or_else(PoisonError::into_inner).pending = true;
        wake.notify_one();
    }
}

impl Drop for WalThread {
    fn drop(&mut self) {
        let (state, wake) = &*self.shared;
        state.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run((state, wake): &Shared, open: impl FnOnce() -> Result<Connection>) {
    let mut open = Some(open);
    let mut conn: Option<Connection> = None;
    loop {
        {
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            while !st.pending && !st.stop {
                st = wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.stop {
                return;
            }
            st.pending = false;
        }
        if let Some(open) = open.take() {
            conn = open().ok();
        }
        // No connection, busy or failing: the writers' own checkpoint past
        // the fallback keeps the log bounded; nothing depends on this one.
        if let Some(conn) = &conn {
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
    }
}

/// The WAL-index header of `conn`'s file as SQLite's own readers see it
/// (`walIndexTryHdr` in SQLite's `wal.c`): the first 48 bytes of the shared
/// memory that every connection to a WAL file maps (the `-shm` file),
/// which every commit, by any connection of any process, rewrites (its
/// change counter, last frame and salts move). SQLite decides whether its
/// page cache is stale, and `PRAGMA data_version` whether to move, by
/// comparing this header with the copy it saw last; a caller that saw the
/// same header before may conclude the same without the two file-lock
/// system calls that beginning a read transaction costs.
///
/// `None` when no consistent header can be read without SQLite's help: the
/// VFS maps no shared memory (an in-memory file), the region is not mapped
/// yet, a writer is updating it right now (its two copies differ), it is
/// not initialised, or its layout version is not the one this reads
/// (3007000, unchanged since SQLite 3.7.0). Call it only on a connection
/// that has read a file in WAL mode: on another, mapping the region could
/// create a `-shm` file. Unix only: on Windows SQLite guards its reads of
/// the mapping against page-in errors (structured exceptions) and a plain
/// read could not; there the caller asks SQLite.
#[cfg(unix)]
pub(crate) fn index_header(conn: &Connection) -> Option<[u32; 12]> {
    use rusqlite::ffi;
    use std::sync::atomic::{fence, AtomicU32, Ordering};
    // The wal-index is mapped in regions of this size (WALINDEX_PGSZ).
    const REGION: std::ffi::c_int = 32768;
    // WALINDEX_MAX_VERSION: the header's first word.
    const LAYOUT: u32 = 3_007_000;
    // SAFETY: `conn` is borrowed, so its handle is open and no statement of
    // it runs while we look (a `Connection` is not `Sync`). The file pointer
    // SQLite hands out stays valid while the connection is open; `xShmMap`
    // of region 0 without extending returns the mapping the connection
    // already holds (page-aligned, valid until the connection closes). It
    // is only read here, word by word as atomics (other threads of this
    // process and other processes write it), in SQLite's order: copy 0, a
    // barrier, copy 1 (a writer writes copy 1 first), so that equal copies
    // are a header that was current at some instant.
    let file = crate::vfs::open_file(conn, ffi::SQLITE_FCNTL_FILE_POINTER)?;
    unsafe {
        let methods = &*(*file).pMethods;
        if methods.iVersion < 2 {
            return None;
        }
        let map = methods.xShmMap?;
        let mut region: *mut std::ffi::c_void = std::ptr::null_mut();
        if map(file, 0, REGION, 0, &raw mut region) != ffi::SQLITE_OK || region.is_null() {
            return None;
        }
        let words = region.cast::<u32>();
        if !words.is_aligned() {
            return None;
        }
        let mut copies = [[0u32; 12]; 2];
        for (c, copy) in copies.iter_mut().enumerate() {
            if c == 1 {
                fence(Ordering::Acquire);
            }
            for (i, w) in copy.iter_mut().enumerate() {
                *w = AtomicU32::from_ptr(words.add(c * 12 + i)).load(Ordering::Relaxed);
            }
        }
        // Byte 12 of the header is `isInit`.
        let initialised = copies[0][3].to_ne_bytes()[0] != 0;
        (copies[0] == copies[1] && copies[0][0] == LAYOUT && initialised).then_some(copies[0])
    }
}

/// See the Unix version: elsewhere the caller always asks SQLite.
#[cfg(not(unix))]
pub(crate) fn index_header(_conn: &Connection) -> Option<[u32; 12]> {
    None
}
