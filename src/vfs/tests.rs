//! Unit tests of the WAL-batching VFS: the buffering rules, against a
//! fake wrapped file that records its writes.

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

unsafe extern "C" fn fake_write(f: *mut ffi::sqlite3_file, data: *const c_void, n: c_int, at: i64) -> c_int {
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
