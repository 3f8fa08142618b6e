//! A fault-injecting SQLite VFS for tests: a shim over the default (unix)
//! VFS, registered under the name `faulty` as the process's default VFS,
//! that can make the disk of one database file full or failing. The crate's
//! own VFS (`src/vfs/`, which gathers a commit's WAL frames into one
//! write) wraps the default VFS when the first `Db` opens, so it sits on
//! top of this one and its writes meet the faults ([`under_agentstate`]
//! checks that). Files without a registered [`Disk`] pass straight
//! through.
//!
//! Faults apply to the main database file and its WAL (and rollback
//! journal), never to the `-shm` index, and stay until [`Disk::disarm`]:
//!
//! - [`Fault::Full`]: after `n` more writes, every write that would make a
//!   file longer fails with `SQLITE_FULL` (rewriting existing bytes still
//!   works, as on a real full disk);
//! - [`Fault::WriteError`]: after `n` more writes, every write fails with
//!   `SQLITE_IOERR_WRITE`;
//! - [`Fault::SyncError`]: after `n` more fsyncs, every fsync fails with
//!   `SQLITE_IOERR_FSYNC`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, Once};

use rusqlite::ffi;

/// The VFS's name.
const NAME_C: &[u8] = b"faulty\0";

/// A kind of fault and how many operations pass before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Full(u64),
    WriteError(u64),
    SyncError(u64),
}

#[derive(Default)]
struct Armed {
    fault: Option<Fault>,
    writes: u64,
    syncs: u64,
    injected: u64,
}

/// The disk under one database file.
#[derive(Default)]
pub struct Disk {
    state: Mutex<Armed>,
}

impl Disk {
    /// Starts injecting `fault` (counting from now).
    pub fn arm(&self, fault: Fault) {
        let mut s = self.state.lock().unwrap();
        *s = Armed { fault: Some(fault), ..Armed::default() };
    }

    /// Stops injecting; returns how many operations failed.
    pub fn disarm(&self) -> u64 {
        let mut s = self.state.lock().unwrap();
        s.fault = None;
        s.injected
    }

    /// `Some(code)` if this write must fail; `extends` says whether it
    /// would make the file longer.
    fn on_write(&self, extends: bool) -> Option<c_int> {
        let mut s = self.state.lock().unwrap();
        s.writes += 1;
        let code = match s.fault? {
            Fault::Full(n) if s.writes > n && extends => ffi::SQLITE_FULL,
            Fault::WriteError(n) if s.writes > n => ffi::SQLITE_IOERR_WRITE,
            _ => return None,
        };
        s.injected += 1;
        Some(code)
    }

    fn on_sync(&self) -> Option<c_int> {
        let mut s = self.state.lock().unwrap();
        s.syncs += 1;
        match s.fault? {
            Fault::SyncError(n) if s.syncs > n => {
                s.injected += 1;
                Some(ffi::SQLITE_IOERR_FSYNC)
            }
            _ => None,
        }
    }
}

static DISKS: Mutex<Vec<(String, Arc<Disk>)>> = Mutex::new(Vec::new());
static REAL: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());
static REGISTER: Once = Once::new();

/// Registers the VFS (once per process) and a disk for the database file
/// `path` (whose directory must exist). Returns the disk and the URI to
/// open.
pub fn disk(path: &Path) -> (Arc<Disk>, String) {
    register();
    let dir = std::fs::canonicalize(path.parent().unwrap()).unwrap();
    let full: PathBuf = dir.join(path.file_name().unwrap());
    let disk = Arc::new(Disk::default());
    DISKS.lock().unwrap().push((full.to_string_lossy().into_owned(), disk.clone()));
    (disk, uri(&full))
}

/// The path to open: this VFS is the process's default, under the crate's
/// own (see `register`).
pub fn uri(path: &Path) -> String {
    path.display().to_string()
}

/// Whether the crate's VFS (once a `Db` has opened a file) writes through
/// this one.
pub fn under_agentstate() -> bool {
    // SAFETY: registered VFS objects live as long as the process.
    unsafe {
        let ours = ffi::sqlite3_vfs_find(c"agentstate".as_ptr());
        let faulty = ffi::sqlite3_vfs_find(NAME_C.as_ptr() as *const c_char);
        !ours.is_null() && !faulty.is_null() && (*ours).pAppData == faulty.cast()
    }
}

fn lookup(name: &str) -> Option<Arc<Disk>> {
    let disks = DISKS.lock().unwrap();
    disks
        .iter()
        .find(|(p, _)| {
            name.strip_prefix(p.as_str()).is_some_and(|rest| ["", "-wal", "-journal"].contains(&rest))
        })
        .map(|(_, d)| d.clone())
}

fn register() {
    REGISTER.call_once(|| unsafe {
        let real = ffi::sqlite3_vfs_find(ptr::null());
        assert!(!real.is_null(), "no default VFS");
        REAL.store(real, Ordering::SeqCst);
        // Everything but xOpen (and the file methods) is the real VFS's.
        let mut vfs: ffi::sqlite3_vfs = ptr::read(real);
        vfs.szOsFile = (std::mem::size_of::<File>() + (*real).szOsFile as usize) as c_int;
        vfs.zName = NAME_C.as_ptr() as *const c_char;
        vfs.pNext = ptr::null_mut();
        vfs.xOpen = Some(x_open);
        let vfs = Box::into_raw(Box::new(vfs));
        // The default: the crate's own VFS (`agentstate`, which wraps the
        // default VFS when the first `Db` opens) then sits on top of this
        // one, so faults reach the writes it makes.
        let rc = ffi::sqlite3_vfs_register(vfs, 1);
        assert_eq!(rc, ffi::SQLITE_OK, "register the VFS");
    });
}

/// Our file: the methods pointer SQLite sees, the disk (if any), and the
/// real file, which lives in the same allocation right after this struct.
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    disk: *const Disk,
    real: *mut ffi::sqlite3_file,
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let f = file as *mut File;
    let real_vfs = REAL.load(Ordering::SeqCst);
    let real = (file as *mut u8).add(std::mem::size_of::<File>()) as *mut ffi::sqlite3_file;
    (*f).base.pMethods = ptr::null();
    (*f).disk = ptr::null();
    (*f).real = real;
    let rc = ((*real_vfs).xOpen.unwrap())(real_vfs, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let kinds = ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_WAL | ffi::SQLITE_OPEN_MAIN_JOURNAL;
    if !name.is_null() && flags & kinds != 0 {
        if let Some(d) = lookup(&CStr::from_ptr(name).to_string_lossy()) {
            (*f).disk = Arc::into_raw(d);
        }
    }
    (*f).base.pMethods = &METHODS;
    rc
}

unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    (*(f as *mut File)).real
}

unsafe fn methods<'a>(f: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    &*(*real(f)).pMethods
}

unsafe fn disk_of<'a>(f: *mut ffi::sqlite3_file) -> Option<&'a Disk> {
    (*(f as *mut File)).disk.as_ref()
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    let rc = (methods(f).xClose.unwrap())(real(f));
    let file = f as *mut File;
    if !(*file).disk.is_null() {
        drop(Arc::from_raw((*file).disk));
        (*file).disk = ptr::null();
    }
    rc
}

unsafe extern "C" fn x_read(f: *mut ffi::sqlite3_file, buf: *mut c_void, n: c_int, off: i64) -> c_int {
    (methods(f).xRead.unwrap())(real(f), buf, n, off)
}

unsafe extern "C" fn x_write(f: *mut ffi::sqlite3_file, buf: *const c_void, n: c_int, off: i64) -> c_int {
    if let Some(d) = disk_of(f) {
        let mut size: i64 = 0;
        let rc = (methods(f).xFileSize.unwrap())(real(f), &mut size);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        if let Some(code) = d.on_write(off + i64::from(n) > size) {
            return code;
        }
    }
    (methods(f).xWrite.unwrap())(real(f), buf, n, off)
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    (methods(f).xTruncate.unwrap())(real(f), size)
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    if let Some(code) = disk_of(f).and_then(Disk::on_sync) {
        return code;
    }
    (methods(f).xSync.unwrap())(real(f), flags)
}

unsafe extern "C" fn x_file_size(f: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    (methods(f).xFileSize.unwrap())(real(f), size)
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    (methods(f).xLock.unwrap())(real(f), level)
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    (methods(f).xUnlock.unwrap())(real(f), level)
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    (methods(f).xCheckReservedLock.unwrap())(real(f), out)
}

unsafe extern "C" fn x_file_control(f: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    (methods(f).xFileControl.unwrap())(real(f), op, arg)
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    (methods(f).xSectorSize.unwrap())(real(f))
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    (methods(f).xDeviceCharacteristics.unwrap())(real(f))
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    match methods(f).xShmMap {
        Some(m) => m(real(f), page, size, extend, out),
        None => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn x_shm_lock(f: *mut ffi::sqlite3_file, offset: c_int, n: c_int, flags: c_int) -> c_int {
    match methods(f).xShmLock {
        Some(m) => m(real(f), offset, n, flags),
        None => ffi::SQLITE_IOERR,
    }
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    if let Some(m) = methods(f).xShmBarrier {
        m(real(f))
    }
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    match methods(f).xShmUnmap {
        Some(m) => m(real(f), delete),
        None => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn x_fetch(f: *mut ffi::sqlite3_file, off: i64, n: c_int, out: *mut *mut c_void) -> c_int {
    match methods(f).xFetch {
        Some(m) => m(real(f), off, n, out),
        None => {
            *out = ptr::null_mut();
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn x_unfetch(f: *mut ffi::sqlite3_file, off: i64, p: *mut c_void) -> c_int {
    match methods(f).xUnfetch {
        Some(m) => m(real(f), off, p),
        None => ffi::SQLITE_OK,
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};
