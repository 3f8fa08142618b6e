//! The database files of the WAL-batching VFS: the wrapped VFS's own, with
//! its methods table copied and `xShmLock` (and `xClose`) replaced, so that
//! a connection's WAL file learns when its write transaction ends (see the
//! parent module's docs). The wrapped file stays first in the allocation,
//! so its own methods are called with our pointer; a [`MainTail`] follows
//! it.

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use rusqlite::ffi;

use super::{end_of_write, flush_keep, WalFile};

/// The wrapped VFS's `szOsFile`, set at registration.
pub(super) static BASE_FILE_SIZE: OnceLock<usize> = OnceLock::new();

/// What follows a database file of the wrapped VFS in our allocation (the
/// wrapped file stays first: its own methods are called with our pointer).
#[repr(C)]
pub(super) struct MainTail {
    /// The connection's WAL file while it is open.
    pub(super) wal: *mut WalFile,
}

pub(super) fn tail_offset(base_size: usize) -> usize {
    base_size.next_multiple_of(16)
}

pub(super) unsafe fn main_tail(file: *mut ffi::sqlite3_file) -> *mut MainTail {
    let size = *BASE_FILE_SIZE.get().expect("registered before any file opens");
    file.cast::<u8>().add(tail_offset(size)).cast()
}

/// A database file's methods: the wrapped file's own, with `xShmLock` and
/// `xClose` ours (`original` holds the wrapped ones).
#[repr(C)]
struct MainMethods {
    methods: ffi::sqlite3_io_methods,
    original: *const ffi::sqlite3_io_methods,
}

// SAFETY: the tables are immutable once made, and what they point at (the
// wrapped VFS's method tables) lives as long as the process.
unsafe impl Send for MainMethods {}
unsafe impl Sync for MainMethods {}

/// Our table for database files whose wrapped methods are `original`, made
/// once per distinct table (the Unix VFS has a few: `nolock=1`, ...) and
/// never freed. None if those methods have no shared memory to watch.
pub(super) unsafe fn main_methods(
    original: *const ffi::sqlite3_io_methods,
) -> Option<&'static ffi::sqlite3_io_methods> {
    if original.is_null() || (*original).iVersion < 2 || (*original).xShmLock.is_none() {
        return None;
    }
    let mut tables = main_tables();
    if let Some(t) = tables.iter().find(|t| std::ptr::eq(t.original, original)) {
        return Some(&t.methods);
    }
    let mut methods = std::ptr::read(original);
    methods.xShmLock = Some(main_shm_lock);
    methods.xClose = Some(main_close);
    let table: &'static MainMethods = Box::leak(Box::new(MainMethods { methods, original }));
    tables.push(table);
    Some(&table.methods)
}

/// Our tables for database files, one per wrapped table.
static TABLES: Mutex<Vec<&'static MainMethods>> = Mutex::new(Vec::new());

fn main_tables() -> MutexGuard<'static, Vec<&'static MainMethods>> {
    TABLES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `methods` is one of our tables for database files.
pub(super) fn is_main(methods: *const ffi::sqlite3_io_methods) -> bool {
    main_tables().iter().any(|t| std::ptr::eq(&t.methods, methods))
}

unsafe fn original(file: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    &*(*(*file).pMethods.cast::<MainMethods>()).original
}

/// A database file's shared-memory lock. When the connection lets go of the
/// WAL write lock its write transaction is over: anything its WAL file
/// still buffers was never committed (a commit's frames are written when
/// its commit frame is) and is dropped, never to land on frames another
/// connection commits at the same offsets. Before any other lock call, the
/// buffer is written out.
unsafe extern "C" fn main_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    let wal = (*main_tail(file)).wal;
    let unlock = ffi::SQLITE_SHM_UNLOCK | ffi::SQLITE_SHM_EXCLUSIVE;
    // Offset 0 is SQLite's WAL_WRITE_LOCK.
    let end_of_write_lock = offset == 0 && n >= 1 && flags & unlock == unlock;
    if !wal.is_null() && !end_of_write_lock {
        // Any other lock: what is buffered goes out first. In exclusive
        // locking mode SQLite takes no shared-memory lock, so a rolled-back
        // transaction's frames may still be buffered when the connection
        // leaves that mode: written now, they land beyond the last commit
        // while it still holds the file's exclusive lock, before any other
        // connection can commit there.
        let rc = flush_keep(&mut *wal);
        if rc != ffi::SQLITE_OK && flags & ffi::SQLITE_SHM_LOCK != 0 {
            return rc;
        }
    }
    let rc = match original(file).xShmLock {
        Some(lock) => lock(file, offset, n, flags),
        None => ffi::SQLITE_IOERR_SHMLOCK,
    };
    if end_of_write_lock && !wal.is_null() {
        end_of_write(&mut *wal);
    }
    rc
}

unsafe extern "C" fn main_close(file: *mut ffi::sqlite3_file) -> c_int {
    let tail = main_tail(file);
    if !(*tail).wal.is_null() {
        (*(*tail).wal).main = std::ptr::null_mut();
        (*tail).wal = std::ptr::null_mut();
    }
    match original(file).xClose {
        Some(close) => close(file),
        None => ffi::SQLITE_OK,
    }
}
