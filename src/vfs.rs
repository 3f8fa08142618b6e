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
//!   write (a full disk) still fails the commit;
//! - before anything else touches the file (a read, a sync, a truncate, its
//!   size, closing it), before a write elsewhere in it, and past 1 MiB (in
//!   writes of 64 KiB: the Unix VFS takes less than 128 KiB per call).
//!
//! Frames of a transaction that are not yet committed are not visible to
//! any reader (the WAL-index does not list them), so holding them in memory
//! changes nothing a reader or a recovery can see; a process that dies
//! first loses a transaction it had not committed. Every other file, and
//! every other operation on a WAL file, goes straight to the wrapped VFS.
//!
//! **Connections using this VFS must not spill** (`PRAGMA cache_spill =
//! OFF`, set by `db::init_connection` on the pooled connections, and by
//! `Db::vacuum` on the connection it opens for a full vacuum when a URI
//! makes that one ours: see [`is_ours`]; a VFS of someone else's layered
//! over this one under another name is not recognised). A transaction
//! larger than the page cache would otherwise write frames to the log
//! before its commit, and two things break: the commit
//! then rewrites the spilled frames' checksums in place, the commit frame's
//! header last and alone (no page follows it, so it stays buffered and a
//! kill loses the whole transaction); and the frames of a transaction that
//! rolls back stay buffered, to be written at the next read over whatever
//! another connection committed at those offsets since. Without spills,
//! frames reach a WAL file only in a commit, and its last frame is the
//! commit frame. (`db::tests::a_transaction_larger_than_the_page_cache_*`
//! and `a_rolled_back_transaction_larger_than_the_page_cache_*`.)

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

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
            vfs.szOsFile = (OFFSET + (*base).szOsFile as usize) as c_int;
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK
        }
    })
}

/// Whether `conn`'s main database was opened through this VFS. A URI can
/// name it (`vfs=agentstate`) whatever VFS the opener asked for, and such a
/// connection must not spill either (see the module docs).
pub(crate) fn is_ours(conn: &rusqlite::Connection) -> bool {
    let mut vfs: *mut ffi::sqlite3_vfs = std::ptr::null_mut();
    // SAFETY: `conn`'s handle is open while it is borrowed, and no other
    // thread uses it meanwhile (a `Connection` is not `Sync`); the file
    // control only writes the main database's VFS pointer into `vfs` (left
    // null on error). SQLite requires a VFS, ours or another, to outlive
    // every connection that uses it, so the pointer and its NUL-terminated
    // name are valid while `conn` is open; only the name is read.
    unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_VFS_POINTER,
            (&raw mut vfs).cast(),
        );
        rc == ffi::SQLITE_OK
            && !vfs.is_null()
            && !(*vfs).zName.is_null()
            && CStr::from_ptr((*vfs).zName) == NAME
    }
}

/// A WAL file: our methods first (SQLite calls them with this pointer),
/// the wrapped file after it, in the same allocation.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// Offset in the file of `buffer[0]`.
    start: i64,
    buffer: Vec<u8>,
    /// The last frame header written was a commit frame's: the data writes
    /// after it (its page, in one write or split at a sync point, and the
    /// padding copies of it that a sync at a sector boundary adds) are
    /// written out at once, as SQLite publishes the commit after them.
    commit: bool,
}

/// Where the wrapped file starts in the allocation (8-byte aligned).
const OFFSET: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

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
        // Any other file is the wrapped VFS's own, in our allocation.
        return base_open(base, name, file, flags, out_flags);
    }
    let real = file.cast::<u8>().add(OFFSET).cast::<ffi::sqlite3_file>();
    let rc = base_open(base, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
        (*file).pMethods = std::ptr::null();
        return if rc == ffi::SQLITE_OK { ffi::SQLITE_CANTOPEN } else { rc };
    }
    file.cast::<WalFile>().write(WalFile {
        base: ffi::sqlite3_file { pMethods: &WAL_METHODS },
        real,
        start: 0,
        buffer: Vec::new(),
        commit: false,
    });
    ffi::SQLITE_OK
}

unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    &mut *file.cast::<WalFile>()
}

unsafe fn methods(f: &WalFile) -> &ffi::sqlite3_io_methods {
    &*(*f.real).pMethods
}

/// Writes the buffer out (one call); the buffer is empty afterwards,
/// whatever the outcome.
unsafe fn flush(f: &mut WalFile) -> c_int {
    if f.buffer.is_empty() {
        return ffi::SQLITE_OK;
    }
    let Some(write) = methods(f).xWrite else { return ffi::SQLITE_IOERR_WRITE };
    let mut rc = ffi::SQLITE_OK;
    let mut at = f.start;
    for chunk in f.buffer.chunks(CHUNK) {
        rc = write(f.real, chunk.as_ptr().cast(), chunk.len() as c_int, at);
        if rc != ffi::SQLITE_OK {
            break;
        }
        at += chunk.len() as i64;
    }
    f.buffer.clear();
    // A large transaction's buffer is not kept for every small one after it.
    if f.buffer.capacity() > 4 * CHUNK {
        f.buffer = Vec::new();
    }
    rc
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
    if !f.buffer.is_empty() && offset != f.start + f.buffer.len() as i64 {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if f.buffer.is_empty() {
        f.start = offset;
    }
    f.buffer.extend_from_slice(bytes);
    if len == 24 {
        // A frame header: bytes 4..8 are the database size after a commit
        // frame, 0 for any other frame.
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
            let rc = flush(f);
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
forward!(wal_sync, xSync, (flags: c_int));
forward!(wal_file_size, xFileSize, (size: *mut i64));
forward!(wal_lock, xLock, (level: c_int));
forward!(wal_unlock, xUnlock, (level: c_int));
forward!(wal_check_reserved, xCheckReservedLock, (out: *mut c_int));

unsafe extern "C" fn wal_file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    let f = wal(file);
    let rc = flush(f);
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

    unsafe extern "C" fn fake_read(_: *mut ffi::sqlite3_file, _: *mut c_void, _: c_int, _: i64) -> c_int {
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

    /// A connection through this VFS is told apart from one through
    /// SQLite's default, whichever way it was named.
    #[test]
    fn a_connection_knows_whether_it_writes_through_this_vfs() {
        assert!(register());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.db");
        let plain = rusqlite::Connection::open(&p).unwrap();
        assert!(!is_ours(&plain));
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_URI;
        let named = rusqlite::Connection::open_with_flags_and_vfs(&p, flags, NAME).unwrap();
        assert!(is_ours(&named));
        let uri = format!("file:{}?vfs=agentstate", p.display());
        assert!(is_ours(&rusqlite::Connection::open_with_flags(uri, flags).unwrap()));
    }

    fn files() -> (Box<Fake>, Box<WalFile>) {
        let mut fake = Box::new(Fake {
            base: ffi::sqlite3_file { pMethods: &FAKE },
            writes: vec![],
            bytes: vec![],
            full: false,
        });
        let real = (&raw mut *fake).cast();
        let wal = Box::new(WalFile {
            base: ffi::sqlite3_file { pMethods: &WAL_METHODS },
            real,
            start: 0,
            buffer: vec![],
            commit: false,
        });
        (fake, wal)
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
        let (fake, mut wal) = files();
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
        let (fake, mut wal) = files();
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
        let (mut fake, mut wal) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        fake.full = true;
        assert_eq!(frame(&mut wal, 32 + 4120, true, 2), ffi::SQLITE_FULL);
        assert!(wal.buffer.is_empty());
        fake.full = false;
        // The next transaction starts afresh.
        assert_eq!(frame(&mut wal, 32, true, 4), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120)]);
    }

    #[test]
    fn a_write_elsewhere_or_a_read_writes_the_buffer_first_and_large_ones_go_in_chunks() {
        let (fake, mut wal) = files();
        assert_eq!(frame(&mut wal, 32, false, 1), ffi::SQLITE_OK);
        // A frame rewritten in place (not contiguous).
        assert_eq!(write(&mut wal, 56, &[5; 4096]), ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120)]);
        let mut out = [0u8; 8];
        // SAFETY: as in `write`.
        let rc = unsafe { wal_read((&raw mut *wal).cast(), out.as_mut_ptr().cast(), 8, 0) };
        assert_eq!(rc, ffi::SQLITE_OK);
        assert_eq!(fake.writes, [(32, 4120), (56, 4096)]);
        // 40 frames without a commit, then one: chunks of at most 64 KiB.
        let mut at = 32 + 4120;
        for i in 0..40 {
            assert_eq!(frame(&mut wal, at, i == 39, 6), ffi::SQLITE_OK);
            at += 4120;
        }
        let (firsts, total): (Vec<usize>, usize) =
            (fake.writes[2..].iter().map(|w| w.1).collect(), fake.writes[2..].iter().map(|w| w.1).sum());
        assert_eq!(total, 40 * 4120);
        assert!(firsts.iter().all(|n| *n <= CHUNK));
    }
}
