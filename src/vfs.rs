//! A VFS that writes a commit's WAL frames with one system call.
//!
//! SQLite writes every WAL frame as two `write`s (its 24-byte header, then
//! its page), so a commit that touches six pages costs twelve system calls:
//! about two fifths of what a small commit costs here (BENCHMARKS.md,
//! "Steps"). This VFS wraps the platform's default one and changes one
//! thing: writes to a `-wal` file that continue the previous one are
//! gathered in memory and handed to the wrapped file as one write
//!
//! - when the page of a commit frame (a frame whose header carries the
//!   database size, which only the last frame of a transaction does) has
//!   been written: before SQLite publishes the commit in the WAL-index, and
//!   inside the `write` call whose result SQLite checks, so that a failed
//!   write (a full disk) still fails the commit. Every later write of the
//!   commit (the page split at a sector-boundary sync, padding copies of
//!   the commit frame) is written at once too. A 24-byte write is a frame
//!   header only where a frame starts, by the frame size in the log's own
//!   header (SQLite may also split a page into a 24-byte piece); a WAL
//!   file that cannot read that size buffers nothing;
//! - before anything else touches the file (a read, a sync, a truncate, its
//!   size, closing it), before a write elsewhere in it, and past 1 MiB (in
//!   writes of 64 KiB: the Unix VFS takes less than 128 KiB per call).
//!
//! Frames of a transaction that are not yet committed are not visible to
//! any reader (the WAL-index does not list them), so holding them in memory
//! changes nothing a reader or a recovery can see; a process that dies
//! first loses a transaction it had not committed. Every other file, and
//! every other operation on a WAL file, goes straight to the wrapped VFS
//! (but for a database file's shared-memory lock, below).
//!
//! A transaction larger than the page cache is spilled to the log before
//! its commit, and two more rules keep that safe:
//!
//! - **A rewrite goes out at once.** SQLite rewrites frames the transaction
//!   already wrote (a spilled page changed again; at the commit, the
//!   checksums of the frames from the first rewritten one on, the commit
//!   frame's header last and alone, with no page after it to flush it). A
//!   write below the furthest point the transaction reached is written at
//!   once, after the buffer.
//! - **What a write transaction leaves buffered is dropped at its end.** A
//!   transaction that rolls back leaves spilled frames no commit frame
//!   follows; written later, they would land on whatever another
//!   connection committed at those offsets since. Database files of this
//!   VFS are the wrapped VFS's own with one method changed, `xShmLock`, and
//!   a connection's WAL file is paired with its database file when it opens
//!   (`sqlite3_database_file_object`): when the connection lets go of the
//!   WAL write lock, its WAL file drops its buffer; before any other
//!   shared-memory lock call, it writes its buffer out. A WAL file whose
//!   database file is not ours buffers nothing. (In exclusive locking mode
//!   SQLite takes no such lock, and no other connection can commit: frames
//!   a rolled-back transaction left buffered are written before anything
//!   else, at the latest when the connection takes a lock on leaving that
//!   mode, beyond the last commit, where SQLite itself leaves them.)
//!
//! A deferred write that fails when another operation (a read) writes the
//! buffer out stays buffered, and the error goes to SQLite as it is: it
//! may roll back one statement only and go on with the transaction (a
//! full disk met by a read), or not look at it (a blob read), and the
//! frames it counts on must still reach the file with its next write.
//!
//! (`db::tests::a_transaction_larger_than_the_page_cache_*`,
//! `a_rolled_back_transaction_larger_than_the_page_cache_*`, the model
//! test `tests/vfs_model.rs` and `tests/vfs_edges.rs`.)

use std::ffi::{c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use rusqlite::ffi;

/// The name connections open files with.
pub(crate) const NAME: &CStr = c"agentstate";

/// A buffer larger than this is written out at once.
const MAX_BUFFER: usize = 1 << 20;

/// The most one write to the wrapped file may carry: SQLite's Unix VFS
/// takes fewer than 128 KiB per call.
const CHUNK: usize = 1 << 16;

/// Registers the VFS (once per process); false if it could not be, and
/// files then open with SQLite's default VFS.
pub(crate) fn register() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS, which
        // lives as long as the process. The struct we register is leaked,
        // so it does too; it is a copy of the default with our name, file
        // size and xOpen, and `pAppData` pointing at the default.
        unsafe {
            if ffi::sqlite3_initialize() != ffi::SQLITE_OK {
                return false;
            }
            let base = ffi::sqlite3_vfs_find(std::ptr::null());
            if base.is_null() || (*base).xOpen.is_none() {
                return false;
            }
            let mut vfs: ffi::sqlite3_vfs = std::ptr::read(base);
            vfs.pNext = std::ptr::null_mut();
            vfs.zName = NAME.as_ptr();
            vfs.pAppData = base.cast();
            let size = (*base).szOsFile as usize;
            let _ = BASE_FILE_SIZE.set(size);
            vfs.szOsFile = (OFFSET + size).max(tail_offset(size) + std::mem::size_of::<MainTail>()) as c_int;
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK
        }
    })
}

/// Whether `conn`'s main database has its WAL file open through this VFS,
/// paired with the database file (so that it batches its commits): None
/// while no WAL file is open.
#[cfg(test)]
pub(crate) fn wal_paired(conn: &rusqlite::Connection) -> Option<bool> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the file control writes the pager's journal or WAL file into
    // `file`, which lives while `conn` is open and borrowed here.
    unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_JOURNAL_POINTER,
            (&raw mut file).cast(),
        );
        if rc != ffi::SQLITE_OK || file.is_null() || (*file).pMethods.is_null() {
            return None;
        }
        Some(std::ptr::eq((*file).pMethods, &WAL_METHODS) && !wal(file).main.is_null())
    }
}

/// A WAL file: our methods first (SQLite calls them with this pointer),
/// the wrapped file after it, in the same allocation.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// The tail of the connection's database file, which tells this file
    /// when the connection's write transaction ends; null if the database
    /// file is not ours (nothing is buffered then).
    main: *mut MainTail,
    /// Offset in the file of `buffer[0]`.
    start: i64,
    buffer: Vec<u8>,
    /// The end of the furthest write of the current write transaction (0
    /// when none, or the log starts over): a write below it rewrites what
    /// the transaction wrote, and goes to the file at once.
    high: i64,
    /// The size of a frame (24-byte header and page) in this log, 0 while
    /// unknown: a 24-byte write is a frame header only where a frame
    /// starts (SQLite may also write 24 bytes of a page split at a sync
    /// point).
    frame: i64,
    /// The last frame header written was a commit frame's: the data writes
    /// after it (its page, in one write or split at a sync point, and the
    /// padding copies of it that a sync at a sector boundary adds) are
    /// written out at once, as SQLite publishes the commit after them.
    commit: bool,
}

/// Where the wrapped file starts in the allocation (8-byte aligned).
const OFFSET: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

/// The wrapped VFS's `szOsFile`, set at registration.
static BASE_FILE_SIZE: OnceLock<usize> = OnceLock::new();

/// What follows a database file of the wrapped VFS in our allocation (the
/// wrapped file stays first: its own methods are called with our pointer).
#[repr(C)]
struct MainTail {
    /// The connection's WAL file while it is open.
    wal: *mut WalFile,
}

fn tail_offset(base_size: usize) -> usize {
    base_size.next_multiple_of(16)
}

unsafe fn main_tail(file: *mut ffi::sqlite3_file) -> *mut MainTail {
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
unsafe fn main_methods(original: *const ffi::sqlite3_io_methods) -> Option<&'static ffi::sqlite3_io_methods> {
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
fn is_main(methods: *const ffi::sqlite3_io_methods) -> bool {
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

/// The end of a write transaction: what is buffered was not committed.
fn end_of_write(f: &mut WalFile) {
    empty(f);
    f.high = 0;
    f.commit = false;
}

unsafe fn base_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    (*vfs).pAppData.cast()
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let base = base_vfs(vfs);
    let Some(base_open) = (*base).xOpen else { return ffi::SQLITE_ERROR };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Any other file is the wrapped VFS's own, in our allocation; a
        // database file gets our shared-memory lock (`main_shm_lock`).
        let rc = base_open(base, name, file, flags, out_flags);
        if rc == ffi::SQLITE_OK && flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            if let Some(methods) = main_methods((*file).pMethods) {
                main_tail(file).write(MainTail { wal: std::ptr::null_mut() });
                (*file).pMethods = methods;
            }
        }
        return rc;
    }
    let real = file.cast::<u8>().add(OFFSET).cast::<ffi::sqlite3_file>();
    let rc = base_open(base, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
        (*file).pMethods = std::ptr::null();
        return if rc == ffi::SQLITE_OK { ffi::SQLITE_CANTOPEN } else { rc };
    }
    // Paired with its connection's database file, if that is ours.
    let db = ffi::sqlite3_database_file_object(name);
    let main = if !db.is_null() && is_main((*db).pMethods) { main_tail(db) } else { std::ptr::null_mut() };
    let wal = file.cast::<WalFile>();
    wal.write(WalFile {
        base: ffi::sqlite3_file { pMethods: &WAL_METHODS },
        real,
        main,
        start: 0,
        buffer: Vec::new(),
        high: 0,
        frame: 0,
        commit: false,
    });
    if !main.is_null() {
        (*main).wal = wal;
    }
    ffi::SQLITE_OK
}

unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    &mut *file.cast::<WalFile>()
}

unsafe fn methods(f: &WalFile) -> &ffi::sqlite3_io_methods {
    &*(*f.real).pMethods
}

/// Writes the buffer out (one call, or a few: see [`write_out`]); the
/// buffer is empty afterwards, whatever the outcome. For a write or a sync: a
/// failure there fails that write (SQLite then gives up the transaction)
/// or the commit.
unsafe fn flush(f: &mut WalFile) -> c_int {
    let rc = write_out(f);
    empty(f);
    rc
}

/// Empties the buffer; a large transaction's is not kept for every small
/// one after it.
fn empty(f: &mut WalFile) {
    f.buffer.clear();
    if f.buffer.capacity() > 4 * CHUNK {
        f.buffer = Vec::new();
    }
}

/// Writes the buffer out before another operation (a read, the file's
/// size, a lock): on failure the part not written stays buffered and the
/// error (`SQLITE_FULL` for a full disk) goes to the caller. SQLite may
/// answer it by rolling back one statement and going on with the
/// transaction (`SQLITE_FULL` from a read does), or not at all (a blob
/// read only records it): the frames then still reach the file with a
/// later write, or are dropped with the transaction's end.
unsafe fn flush_keep(f: &mut WalFile) -> c_int {
    let rc = write_out(f);
    if rc == ffi::SQLITE_OK {
        empty(f);
    }
    rc
}

/// Writes the buffer to the file in chunks of at most [`CHUNK`]. On
/// failure the part written leaves the buffer (`start` moves past it) and
/// the rest stays; on success the caller empties it.
unsafe fn write_out(f: &mut WalFile) -> c_int {
    if f.buffer.is_empty() {
        return ffi::SQLITE_OK;
    }
    let Some(write) = methods(f).xWrite else { return ffi::SQLITE_IOERR_WRITE };
    let mut done = 0;
    while done < f.buffer.len() {
        let n = CHUNK.min(f.buffer.len() - done);
        let rc = write(f.real, f.buffer[done..].as_ptr().cast(), n as c_int, f.start + done as i64);
        if rc != ffi::SQLITE_OK {
            f.buffer.drain(..done);
            f.start += done as i64;
            return rc;
        }
        done += n;
    }
    ffi::SQLITE_OK
}

/// The frame size a log header (the first 32 bytes of a `-wal` file)
/// gives, if it is one.
fn frame_size(header: &[u8]) -> Option<i64> {
    let word = |i: usize| header.get(i..i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let magic = word(0)?;
    let page = word(8)?;
    let valid = (magic == 0x377f_0682 || magic == 0x377f_0683)
        && page.is_power_of_two()
        && (512..=65536).contains(&page);
    valid.then(|| i64::from(page) + 24)
}

/// The frame size of the log `f` continues, read from the file's header
/// (its caller writes the buffer out first); 0 if that is not a log header.
unsafe fn read_frame_size(f: &mut WalFile) -> i64 {
    let Some(read) = methods(f).xRead else { return 0 };
    let mut header = [0u8; 32];
    if read(f.real, header.as_mut_ptr().cast(), 32, 0) != ffi::SQLITE_OK {
        return 0;
    }
    frame_size(&header).unwrap_or(0)
}

unsafe extern "C" fn wal_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    n: c_int,
    offset: i64,
) -> c_int {
    let f = wal(file);
    let Ok(len) = usize::try_from(n) else { return ffi::SQLITE_IOERR_WRITE };
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
    let contiguous = !f.buffer.is_empty() && offset == f.start + f.buffer.len() as i64;
    if !contiguous {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if offset == 0 {
        // The log's header: the log starts over.
        f.high = 0;
        if let Some(frame) = frame_size(bytes) {
            f.frame = frame;
        }
    }
    // A frame header, where a frame starts in the log (the size read from
    // the log's header if this file has not written it).
    if len == 24 && f.frame == 0 && !f.main.is_null() {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        f.frame = read_frame_size(f);
    }
    let header = len == 24 && f.frame > 0 && offset >= 32 && (offset - 32) % f.frame == 0;
    if f.main.is_null() || f.frame == 0 || (!contiguous && offset < f.high) {
        // Unpaired, nothing may wait for the transaction's end; without
        // the frame size, no header is told from a piece of a page; and a
        // rewrite (a spilled page changed again, the checksums a commit
        // rewrites over spilled frames, frames after a savepoint's
        // rollback) goes out in SQLite's order, at once.
        return match methods(f).xWrite {
            Some(write) => write(f.real, data, n, offset),
            None => ffi::SQLITE_IOERR_WRITE,
        };
    }
    if f.buffer.is_empty() {
        f.start = offset;
    }
    f.buffer.extend_from_slice(bytes);
    f.high = f.high.max(offset + len as i64);
    if header {
        // Bytes 4..8 are the database size after a commit frame, 0 for
        // any other frame.
        f.commit = bytes[4..8] != [0, 0, 0, 0];
    } else if f.commit {
        return flush(f);
    }
    if f.buffer.len() >= MAX_BUFFER {
        return flush(f);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn wal_close(file: *mut ffi::sqlite3_file) -> c_int {
    let f = wal(file);
    if !f.main.is_null() {
        (*f.main).wal = std::ptr::null_mut();
        f.main = std::ptr::null_mut();
    }
    let flushed = flush(f);
    let closed = match methods(f).xClose {
        Some(close) => close(f.real),
        None => ffi::SQLITE_OK,
    };
    std::ptr::drop_in_place(file.cast::<WalFile>());
    (*file).pMethods = std::ptr::null();
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

/// The wrapped file's method `$m`, after writing the buffer out.
macro_rules! forward {
    ($name:ident, $m:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let f = wal(file);
            let rc = flush_keep(f);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            match methods(f).$m {
                Some(m) => m(f.real $(, $arg)*),
                None => ffi::SQLITE_IOERR,
            }
        }
    };
}

forward!(wal_read, xRead, (data: *mut c_void, n: c_int, offset: i64));
forward!(wal_truncate, xTruncate, (size: i64));

/// A sync, after writing the buffer out (a failure fails the commit that
/// syncs, whole: its code is kept, `SQLITE_FULL` for a full disk).
unsafe extern "C" fn wal_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let f = wal(file);
    let rc = flush(f);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(f).xSync {
        Some(sync) => sync(f.real, flags),
        None => ffi::SQLITE_IOERR_FSYNC,
    }
}
forward!(wal_file_size, xFileSize, (size: *mut i64));
forward!(wal_lock, xLock, (level: c_int));
forward!(wal_unlock, xUnlock, (level: c_int));
forward!(wal_check_reserved, xCheckReservedLock, (out: *mut c_int));

unsafe extern "C" fn wal_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    let f = wal(file);
    let rc = flush_keep(f);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods(f).xFileControl {
        Some(m) => m(f.real, op, arg),
        None => ffi::SQLITE_NOTFOUND,
    }
}

unsafe extern "C" fn wal_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let f = wal(file);
    methods(f).xSectorSize.map_or(4096, |m| m(f.real))
}

unsafe extern "C" fn wal_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let f = wal(file);
    methods(f).xDeviceCharacteristics.map_or(0, |m| m(f.real))
}

// Version 2: a WAL file is never memory-mapped (`xFetch` is for database
// files), and has no shared memory of its own.
static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(wal_close),
    xRead: Some(wal_read),
    xWrite: Some(wal_write),
    xTruncate: Some(wal_truncate),
    xSync: Some(wal_sync),
    xFileSize: Some(wal_file_size),
    xLock: Some(wal_lock),
    xUnlock: Some(wal_unlock),
    xCheckReservedLock: Some(wal_check_reserved),
    xFileControl: Some(wal_file_control),
    xSectorSize: Some(wal_sector_size),
    xDeviceCharacteristics: Some(wal_device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped file that records the writes it gets, or fails them all
    /// with a full disk.
    #[repr(C)]
    struct Fake {
        base: ffi::sqlite3_file,
        writes: Vec<(i64, usize)>,
        bytes: Vec<u8>,
        full: bool,
    }

    unsafe extern "C" fn fake_write(
        f: *mut ffi::sqlite3_file,
        data: *const c_void,
        n: c_int,
        at: i64,
    ) -> c_int {
        let f = &mut *f.cast::<Fake>();
        if f.full {
            return ffi::SQLITE_FULL;
        }
        let n = n as usize;
        assert!(n <= CHUNK, "a write of {n} bytes");
        f.writes.push((at, n));
        let end = at as usize + n;
        if f.bytes.len() < end {
            f.bytes.resize(end, 0);
        }
        f.bytes[at as usize..end].copy_from_slice(std::slice::from_raw_parts(data.cast(), n));
        ffi::SQLITE_OK
    }

    unsafe extern "C" fn fake_read(f: *mut ffi::sqlite3_file, data: *mut c_void, n: c_int, at: i64) -> c_int {
        let f = &*f.cast::<Fake>();
        let out = std::slice::from_raw_parts_mut(data.cast::<u8>(), n as usize);
        for (i, b) in out.iter_mut().enumerate() {
            *b = f.bytes.get(at as usize + i).copied().unwrap_or(0);
        }
        ffi::SQLITE_OK
    }

    static FAKE: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
        iVersion: 1,
        xClose: None,
        xRead: Some(fake_read),
        xWrite: Some(fake_write),
        xTruncate: None,
        xSync: None,
        xFileSize: None,
        xLock: None,
        xUnlock: None,
        xCheckReservedLock: None,
        xFileControl: None,
        xSectorSize: None,
        xDeviceCharacteristics: None,
        xShmMap: None,
        xShmLock: None,
        xShmBarrier: None,
        xShmUnmap: None,
        xFetch: None,
        xUnfetch: None,
    };

    /// A WAL file over a `Fake`, paired with a database file's tail.
    fn files() -> (Box<Fake>, Box<WalFile>, Box<MainTail>) {
        let mut fake = Box::new(Fake {
            base: ffi::sqlite3_file { pMethods: &FAKE },
            writes: vec![],
            bytes: vec![],
            full: false,
        });
        let real = (&raw mut *fake).cast();
        let mut main = Box::new(MainTail { wal: std::ptr::null_mut() });
        let mut wal = Box::new(WalFile {
            base: ffi::sqlite3_file { pMethods: &WAL_METHODS },
            real,
            main: &raw mut *main,
            start: 0,
            buffer: vec![],
            high: 0,
            frame: 4120,
            commit: false,
        });
        main.wal = &raw mut *wal;
        (fake, wal, main)
    }

    fn write(wal: &mut WalFile, at: i64, bytes: &[u8]) -> c_int {
        // SAFETY: `wal` wraps a live `Fake`.
        unsafe { wal_write((&raw mut *wal).cast(), bytes.as_ptr().cast(), bytes.len() as c_int, at) }
    }

    /// A frame (header, then page) at `at`; a commit frame carries the
    /// database size.
    fn frame(wal: &mut WalFile, at: i64, commit: bool, fill: u8) -> c_int {
        let mut header = [fill; 24];
        header[4..8].copy_from_slice(&(if commit { 7u32 } else { 0 }).to_be_bytes());
        let rc = write(wal, at, &header);
        assert_eq!(rc, ffi::SQLITE_OK);
        write(wal, at + 24, &[fill; 4096])
    }

    #[test]
    fn a_transaction_reaches_the_file_in_one_write_when_its_commit_frame_is_written() {
        let (fake, mut wal, _main) = files();
        assert_eq!(write(&mut wal, 0, &[9; 32]), ffi::SQLITE_OK);
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        assert_eq!(frame(&mut wal, 32 + 4120, false, 2), ffi::SQLITE_OK);
        assert!(fake.writes.is_empty(), "nothing before the commit frame");
        assert_eq!(frame(&mut wal, 32 + 2 * 4120, true, 3), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(0, 32 + 3 * 4120)]);
        assert_eq!(fake.bytes[32 + 2 * 4120 + 30], 3);
        assert!(wal.buffer.is_empty());
    }

    /// With a sync at a sector boundary (`psow=0`, `Full`), SQLite splits a
    /// commit frame's page at the sync point and adds padding copies of the
    /// commit frame: every part reaches the file before SQLite publishes
    /// the commit, none stays buffered.
    #[test]
    fn every_part_of_a_commit_frame_and_its_padding_is_written_at_once() {
        let (fake, mut wal, _main) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        let mut header = [2u8; 24];
        header[4..8].copy_from_slice(&7u32.to_be_bytes());
        let at = 32 + 4120;
        assert_eq!(write(&mut wal, at, &header), ffi::SQLITE_OK);
        assert_eq!(write(&mut wal, at + 24, &[2; 1000]), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120 + 24 + 1000)]);
        // (The sync at the split point writes nothing buffered.)
        assert_eq!(write(&mut wal, at + 24 + 1000, &[2; 3096]), ffi::SQLITE_OK);
        assert_eq!(fake.writes.last(), Some(&(at + 24 + 1000, 3096)));
        // A padding copy of the commit frame.
        assert_eq!(write(&mut wal, at + 4120, &header), ffi::SQLITE_OK);
        assert_eq!(write(&mut wal, at + 4120 + 24, &[2; 4096]), ffi::SQLITE_OK);
        assert_eq!(fake.writes.last(), Some(&(at + 4120, 4120)));
        assert!(wal.buffer.is_empty());
        // The next transaction is gathered again.
        assert_eq!(frame(&mut wal, at + 2 * 4120, false, 3), ffi::SQLITE_OK);
        assert!(!wal.buffer.is_empty());
    }

    #[test]
    fn a_failed_write_fails_the_commit_frame_and_drops_the_buffer() {
        let (mut fake, mut wal, _main) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        fake.full = true;
        assert_eq!(frame(&mut wal, 32 + 4120, true, 2), ffi::SQLITE_FULL);
        assert!(wal.buffer.is_empty());
        fake.full = false;
        // The failed commit rolls back, letting go of the write lock; the
        // next transaction starts afresh.
        end_of_write(&mut wal);
        assert_eq!(frame(&mut wal, 32, true, 4), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120)]);
    }

    #[test]
    fn a_rewrite_goes_out_at_once_after_the_buffer_and_large_ones_go_in_chunks() {
        let (fake, mut wal, _main) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        // A spilled frame's page changed again, rewritten in place.
        assert_eq!(write(&mut wal, 56, &[5; 4096]), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120), (56, 4096)]);
        // A commit's checksums rewritten over the frames before it: the
        // commit frame's header last and alone, yet on the file at once.
        let mut header = [8u8; 24];
        header[4..8].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(write(&mut wal, 32, &header), ffi::SQLITE_OK);
        assert_eq!(fake.writes.last(), Some(&(32, 24)));
        assert!(wal.buffer.is_empty());
        let mut out = [0u8; 8];
        // SAFETY: as in `write`.
        let rc = unsafe { wal_read((&raw mut *wal).cast(), out.as_mut_ptr().cast(), 8, 0) };
        assert_eq!(rc, ffi::SQLITE_OK);
        assert_eq!(fake.writes.len(), 3);
        // 40 frames without a commit, then one: chunks of at most 64 KiB.
        let mut at = 32 + 4120;
        for i in 0..40 {
            assert_eq!(frame(&mut wal, at, i == 39, 6), ffi::SQLITE_OK);
            at += 4120;
        }
        let (firsts, total): (Vec<usize>, usize) =
            (fake.writes[3..].iter().map(|w| w.1).collect(), fake.writes[3..].iter().map(|w| w.1).sum());
        assert_eq!(total, 40 * 4120);
        assert!(firsts.iter().all(|n| *n <= CHUNK));
    }

    /// Frames still buffered when the connection lets go of the write lock
    /// were never committed (spilled, then rolled back): they are dropped,
    /// and the next transaction, at the same offsets, is gathered afresh.
    #[test]
    fn what_a_write_transaction_leaves_buffered_at_its_end_is_dropped() {
        let (fake, mut wal, main) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        assert_eq!(frame(&mut wal, 32 + 4120, false, 2), ffi::SQLITE_OK);
        // SAFETY: `main` points at `wal`, as the open pairs them.
        end_of_write(unsafe { &mut *main.wal });
        assert!(wal.buffer.is_empty());
        assert_eq!(frame(&mut wal, 32, true, 3), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120)]);
        assert_eq!(fake.bytes[40], 3);
    }

    /// A WAL file whose database file is not ours cannot know when a
    /// transaction ends: it buffers nothing.
    #[test]
    fn an_unpaired_wal_file_writes_through() {
        let (fake, mut wal, _main) = files();
        wal.main = std::ptr::null_mut();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 24), (56, 4096)]);
    }

    /// A log header for pages of `page` bytes.
    fn log_header(page: u32) -> [u8; 32] {
        let mut h = [0u8; 32];
        h[0..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        h[8..12].copy_from_slice(&page.to_be_bytes());
        h
    }

    /// With `psow=0` at `Full`, SQLite may split a padding frame's page at
    /// a sync point 24 bytes into it, or 24 bytes before its end: a piece
    /// of a page, not a header (it starts where no frame does), written at
    /// once after a commit frame's header like any other part of it, even
    /// when its bytes 4..8 are zero.
    #[test]
    fn a_24_byte_piece_of_a_commit_frames_page_is_not_taken_for_a_header() {
        let (fake, mut wal, _main) = files();
        let mut header = [2u8; 24];
        header[4..8].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(write(&mut wal, 32, &header), ffi::SQLITE_OK);
        assert_eq!(write(&mut wal, 56, &[0; 24]), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 48)]);
        assert_eq!(write(&mut wal, 80, &[0; 4072]), ffi::SQLITE_OK);
        assert_eq!(fake.writes.last(), Some(&(80, 4072)));
        // The last 24 bytes of a page, alone.
        assert_eq!(write(&mut wal, 32 + 4120, &header), ffi::SQLITE_OK);
        assert_eq!(write(&mut wal, 32 + 4120 + 24, &[0; 4072]), ffi::SQLITE_OK);
        assert_eq!(write(&mut wal, 32 + 4120 + 24 + 4072, &[0; 24]), ffi::SQLITE_OK);
        assert_eq!(fake.writes.last(), Some(&(32 + 4120 + 24 + 4072, 24)));
        assert!(wal.buffer.is_empty());
    }

    /// Where frames start comes from the log's header: as this file writes
    /// it when the log starts over, or read from the file when another
    /// connection did. Without it, nothing is buffered.
    #[test]
    fn the_frame_size_comes_from_the_logs_header() {
        let (_fake, mut wal, _main) = files();
        wal.frame = 0;
        assert_eq!(write(&mut wal, 0, &log_header(1024)), ffi::SQLITE_OK);
        assert_eq!(wal.frame, 1048);
        let (mut other, mut second, _m) = files();
        second.frame = 0;
        other.bytes = log_header(512).to_vec();
        assert_eq!(frame(&mut second, 32, false, 1), ffi::SQLITE_OK);
        assert_eq!(second.frame, 536);
        // No log header in the file: written through.
        let (bare, mut third, _m) = files();
        third.frame = 0;
        assert_eq!(write(&mut third, 32, &[1; 24]), ffi::SQLITE_OK);
        assert_eq!(third.frame, 0);
        assert_eq!(bare.writes, [(32, 24)]);
    }

    /// A write that fails when a read writes the buffer out (a full disk)
    /// leaves what it could not write buffered, and the read fails with
    /// SQLite's code for it: the transaction may go on and commit, with
    /// every frame it wrote.
    #[test]
    fn a_failed_write_before_a_read_keeps_the_buffer() {
        let (mut fake, mut wal, _main) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        fake.full = true;
        let mut out = [0u8; 8];
        // SAFETY: as in `write`.
        let rc = unsafe { wal_read((&raw mut *wal).cast(), out.as_mut_ptr().cast(), 8, 32) };
        assert_eq!(rc, ffi::SQLITE_FULL);
        assert_eq!(wal.buffer.len(), 4120);
        fake.full = false;
        assert_eq!(frame(&mut wal, 32 + 4120, true, 2), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 2 * 4120)]);
    }
}
