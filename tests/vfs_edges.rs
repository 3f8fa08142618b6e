//! Edge cases of the WAL-batching VFS (`src/vfs/`) that random
//! transactions rarely reach (`tests/vfs_model.rs` covers the rest), each
//! found by a review and failing before its fix: a commit's padding frame
//! split by a sync point into a 24-byte piece, and a connection that leaves
//! exclusive locking mode with a rolled-back transaction's frames buffered.
//! Raw connections through the `agentstate` VFS, checked by connections of
//! SQLite's own.

use std::path::Path;

use agentstate::rusqlite::{Connection, OpenFlags};
use agentstate::Db;

fn flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Registers the crate's VFS (opening a `Db` does).
fn register() {
    let dir = tempfile::tempdir().unwrap();
    drop(Db::open(dir.path().join("r.db")).unwrap());
}

/// Whole frames in `path`'s log, for pages of `page` bytes.
fn frames(path: &Path, page: u64) -> u64 {
    let n = std::fs::metadata(format!("{}-wal", path.display())).map(|m| m.len()).unwrap_or(0);
    n.saturating_sub(32) / (page + 24)
}

/// A connection of ours to `path` with `psow=0` (syncs at 4 KiB sector
/// boundaries, padded with copies of the commit frame), its log filled to
/// `frames` frames by commits of one frame each.
fn padded(path: &Path, page: u32, frames_wanted: u64) -> Connection {
    let c =
        Connection::open_with_flags_and_vfs(format!("file:{}?psow=0", path.display()), flags(), "agentstate")
            .unwrap();
    c.execute_batch(&format!(
        "PRAGMA page_size = {page}; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; \
         PRAGMA synchronous = NORMAL; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB); \
         CREATE TABLE s(x); INSERT INTO s VALUES (0);"
    ))
    .unwrap();
    while frames(path, u64::from(page)) < frames_wanted {
        c.execute_batch("UPDATE s SET x = x + 1").unwrap();
    }
    c
}

/// At `FULL` with `psow=0`, a commit ending where the sync point falls 24
/// bytes into its last padding frame's page: that piece (here with zeros
/// where a header keeps the database size) was taken for a frame header,
/// stayed buffered and was dropped with the write lock. Another connection
/// then read a short log (`SQLITE_IOERR_SHORT_READ`) or, over an older
/// log, wrong bytes.
#[test]
fn a_padding_frame_split_24_bytes_into_its_page_is_written() {
    register();
    // The row's last overflow page starts at byte 5908 of the blob: its
    // bytes 4..8 are zero.
    let mut blob = vec![0xABu8; 10_000];
    blob[5908..5912].fill(0);
    for target in 325..345 {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.db");
        let c = padded(&p, 4096, target);
        c.execute_batch("PRAGMA synchronous = FULL").unwrap();
        c.execute("INSERT INTO t VALUES (1, ?1)", [&blob]).unwrap();
        let other = Connection::open(&p).unwrap();
        let got: Vec<u8> = other.query_row("SELECT v FROM t WHERE k = 1", [], |r| r.get(0)).unwrap();
        assert!(got == blob, "log of {target} frames: another connection read another blob");
    }
}

/// Pages smaller than the 4 KiB sector: the sync point can fall 24 bytes
/// before the end of the last padding frame, whatever those bytes hold.
#[test]
fn a_padding_frame_split_24_bytes_before_its_end_is_written() {
    register();
    for target in 460..470 {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.db");
        let c = padded(&p, 1024, target);
        c.execute_batch("PRAGMA synchronous = FULL; INSERT INTO t VALUES (1, randomblob(100));").unwrap();
        let mine: String = c.query_row("SELECT hex(v) FROM t WHERE k = 1", [], |r| r.get(0)).unwrap();
        let other = Connection::open(&p).unwrap();
        let theirs: String = other.query_row("SELECT hex(v) FROM t WHERE k = 1", [], |r| r.get(0)).unwrap();
        assert_eq!(theirs, mine, "log of {target} frames");
        let (busy, _, _): (i64, i64, i64) = other
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        assert_eq!(busy, 0);
    }
}

/// In exclusive locking mode SQLite takes no shared-memory lock, so the
/// end of a rolled-back transaction that spilled is not seen. Back in
/// `NORMAL` mode, its buffered frames were written at this connection's
/// next read of the log, over what another connection had committed at
/// those offsets meanwhile: "file is not a database", and a killed copy
/// recovered none of the other's rows.
#[test]
fn frames_left_by_exclusive_mode_never_land_on_another_connections_commit() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    drop(Db::open(&p).unwrap());
    let a = Connection::open_with_flags_and_vfs(&p, flags(), "agentstate").unwrap();
    a.execute_batch("PRAGMA cache_size = -100; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB); INSERT INTO t VALUES (0, zeroblob(10));")
        .unwrap();
    let b = Connection::open(&p).unwrap();
    b.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    let _: i64 = a.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).unwrap();
    a.execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN IMMEDIATE;").unwrap();
    for i in 1..60 {
        a.execute("INSERT INTO t VALUES (?1, randomblob(3000))", [i]).unwrap();
    }
    a.execute_batch("ROLLBACK; PRAGMA locking_mode = NORMAL;").unwrap();
    let n: i64 = a.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
    b.execute_batch("BEGIN IMMEDIATE").unwrap();
    for i in 100..140 {
        b.execute("INSERT INTO t VALUES (?1, zeroblob(3000))", [i]).unwrap();
    }
    b.execute_batch("COMMIT").unwrap();
    let count = |c: &Connection| -> i64 {
        c.query_row("SELECT count(*) FROM t WHERE v = zeroblob(3000)", [], |r| r.get(0)).unwrap()
    };
    assert_eq!(count(&a), 40);
    // What a kill leaves now: the files without `-shm`.
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(&p, copy.path().join("a.db")).unwrap();
    std::fs::copy(format!("{}-wal", p.display()), copy.path().join("a.db-wal")).unwrap();
    assert_eq!(count(&Connection::open(copy.path().join("a.db")).unwrap()), 40);
    let c = Connection::open(&p).unwrap();
    assert_eq!(count(&c), 40);
    assert_eq!(c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}
