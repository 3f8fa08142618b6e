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
use std::sync::OnceLock;

use rusqlite::ffi;

mod db_file;

use db_file::{is_main, main_methods, main_tail, tail_offset, MainTail, BASE_FILE_SIZE};

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

/// The open file of `conn`'s main database that the file control `op`
/// hands out (`SQLITE_FCNTL_FILE_POINTER`: the database file;
/// `SQLITE_FCNTL_JOURNAL_POINTER`: its journal or WAL file), if there is
/// one. It stays valid while `conn` is open.
pub(crate) fn open_file(conn: &rusqlite::Connection, op: c_int) -> Option<*mut ffi::sqlite3_file> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `conn` is borrowed, so its handle is open and no other thread
    // uses it meanwhile (a `Connection` is not `Sync`); the file control
    // only writes a file pointer into `file` (left null if there is none),
    // and a non-null one points at a file SQLite keeps open.
    unsafe {
        let rc = ffi::sqlite3_file_control(conn.handle(), c"main".as_ptr(), op, (&raw mut file).cast());
        (rc == ffi::SQLITE_OK && !file.is_null() && !(*file).pMethods.is_null()).then_some(file)
    }
}

/// Whether `conn`'s main database has its WAL file open through this VFS,
/// paired with the database file (so that it batches its commits): None
/// while no WAL file is open.
#[cfg(test)]
pub(crate) fn wal_paired(conn: &rusqlite::Connection) -> Option<bool> {
    let file = open_file(conn, ffi::SQLITE_FCNTL_JOURNAL_POINTER)?;
    // SAFETY: `open_file` hands out an open file; ours when its methods
    // are `WAL_METHODS`, and only then read as a `WalFile`.
    unsafe { Some(std::ptr::eq((*file).pMethods, &WAL_METHODS) && !wal(file).main.is_null()) }
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
mod tests;
