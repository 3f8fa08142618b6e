//! Unit tests of `Db`: opening, vacuum, and transactions larger than a
//! connection's page cache through the WAL-batching VFS.

use super::*;

#[test]
fn open_twice_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    drop(Db::open(&p).unwrap());
    let db = Db::open(&p).unwrap();
    let n: i64 =
        db.read(|c| Ok(c.query_row("SELECT COUNT(*) FROM store_migrations", [], |r| r.get(0))?)).unwrap();
    assert_eq!(n, 5);
}

/// Files as a killed process leaves them: `dir`'s database and log,
/// copied while their `Db` is open (no `-shm`: SQLite recovers).
fn killed_copy(from: &std::path::Path, to: &std::path::Path) {
    for f in ["a.db", "a.db-wal"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// Every connection of a `Db` writes its log through the crate's VFS,
/// paired with its database file: what tells a WAL file that a write
/// transaction ended (see `crate::vfs`), and without which it batches
/// nothing.
#[test]
fn every_connection_writes_its_log_through_the_batching_vfs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("a.db")).unwrap();
    db.write(|c| {
        c.execute_batch("CREATE TABLE t(v)")?;
        assert_eq!(crate::vfs::wal_paired(c), Some(true));
        Ok(())
    })
    .unwrap();
    db.read(|c| {
        c.query_row("SELECT count(*) FROM t", [], |_| Ok(()))?;
        assert_eq!(crate::vfs::wal_paired(c), Some(true));
        Ok(())
    })
    .unwrap();
}

/// The pages a transaction changes beyond the page cache go to the log
/// before its commit: a 40 MB transaction keeps its connection's page
/// cache near `PAGE_CACHE_KIB`, not at 40 MB (as it was while the crate's
/// connections did not spill).
#[test]
fn a_transaction_larger_than_the_page_cache_keeps_its_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("a.db")).unwrap();
    let used = |c: &Connection| {
        let (mut now, mut high) = (0, 0);
        // SAFETY: `c` is open and borrowed; the call writes two ints.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                c.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
                &mut now,
                &mut high,
                0,
            )
        };
        assert_eq!(rc, rusqlite::ffi::SQLITE_OK);
        now as usize
    };
    let most = db
        .write(|c| {
            c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")?;
            let mut most = 0;
            for i in 0..10_000 {
                c.execute("INSERT INTO t VALUES (?1, randomblob(4000))", [i])?;
                most = most.max(used(c));
            }
            Ok(most)
        })
        .unwrap();
    // (SQLite's page caches of one process may lend each other pages.)
    assert!(most < 16 << 20, "{most} bytes of page cache");
    let n: i64 = db.read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)).unwrap();
    assert_eq!(n, 10_000);
}

/// Leaves more than two vacuum batches of free pages in `db`'s file.
fn fill_and_free(db: &Db) {
    db.write(|c| {
        c.execute_batch("CREATE TABLE big(v BLOB)")?;
        for _ in 0..(3 * VACUUM_PAGES) {
            c.execute("INSERT INTO big VALUES (zeroblob(4000))", [])?;
        }
        Ok(c.execute_batch("DROP TABLE big")?)
    })
    .unwrap();
}

/// `vacuum` frees a bounded number of pages per transaction, to the end
/// (here more than one batch), on a file this crate created; and
/// rewrites a file without incremental auto-vacuum whole.
#[test]
fn vacuum_frees_every_page_in_batches_and_rewrites_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let ours = Db::open(dir.path().join("a.db")).unwrap();
    fill_and_free(&ours);
    let free = |db: &Db| db.read(|c| Ok(c.query_row("PRAGMA freelist_count", [], |r| r.get::<_, i64>(0))?));
    assert!(free(&ours).unwrap() > 2 * i64::from(VACUUM_PAGES));
    assert!(ours.vacuum().unwrap() > 2 * u64::from(VACUUM_PAGES) * 4096);
    assert_eq!(free(&ours).unwrap(), 0);
    // A file made elsewhere, without incremental auto-vacuum.
    let other = dir.path().join("b.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE keep(x); INSERT INTO keep VALUES (1)")
        .unwrap();
    let db = Db::open(&other).unwrap();
    fill_and_free(&db);
    assert!(db.vacuum().unwrap() > 2 * u64::from(VACUUM_PAGES) * 4096);
    assert_eq!(free(&db).unwrap(), 0);
    assert_eq!(db.read(|c| Ok(c.query_row("SELECT x FROM keep", [], |r| r.get::<_, i64>(0))?)).unwrap(), 1);
}

/// A read-only handle (the builder's flag, or a `mode=ro` URI) never
/// rewrites the file: a full vacuum is refused, the file unchanged.
#[test]
fn vacuum_of_a_read_only_handle_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.db");
    Connection::open(&p).unwrap().execute_batch("CREATE TABLE keep(x)").unwrap();
    drop(Db::open(&p).unwrap());
    Connection::open(&p)
        .unwrap()
        .execute_batch(
            "CREATE TABLE big(v BLOB);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
             INSERT INTO big SELECT zeroblob(4000) FROM n; DROP TABLE big;",
        )
        .unwrap();
    let pages = || -> (i64, i64) {
        let c = Connection::open_with_flags(&p, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        (
            c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap(),
            c.query_row("PRAGMA freelist_count", [], |r| r.get(0)).unwrap(),
        )
    };
    let before = pages();
    assert!(before.1 >= 500);
    let ro = Db::builder().read_only(true).open(&p).unwrap();
    assert!(ro.vacuum().is_err());
    drop(ro);
    assert_eq!(pages(), before);
    let uri = Db::open(format!("file:{}?mode=ro", p.display())).unwrap();
    assert!(uri.vacuum().is_err());
    drop(uri);
    assert_eq!(pages(), before);
}

/// With `psow=0` in the URI and `Full`, SQLite syncs the log at a sector
/// boundary, splitting a commit frame's page and padding with copies of
/// it: another connection reads every commit whole.
#[test]
fn commits_with_sector_padding_are_whole_for_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    let db = Db::builder().durability(Durability::Full).open(format!("file:{}?psow=0", p.display())).unwrap();
    db.write(|c| Ok(c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")?)).unwrap();
    let other = Connection::open(&p).unwrap();
    for i in 0..40i64 {
        db.write(|c| {
            for j in 0..(i % 7 + 1) {
                c.execute("INSERT INTO t VALUES (?1, randomblob(3000))", [i * 100 + j])?;
            }
            Ok(())
        })
        .unwrap();
        let check = other.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0));
        assert_eq!(check.ok().as_deref(), Some("ok"), "after commit {i}");
        if i % 10 == 9 {
            other.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())).unwrap();
        }
    }
}

/// A transaction that dirties more pages than a connection's page cache
/// holds, and writes again a page it wrote early: acknowledged, it is in
/// the files a kill leaves. (With SQLite spilling pages to the log
/// mid-transaction, the commit rewrote the spilled frames' checksums,
/// the commit frame's last, and the WAL-batching VFS kept that one in
/// memory: a kill lost the whole transaction.)
#[test]
fn a_transaction_larger_than_the_page_cache_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("a.db")).unwrap();
    db.write(|c| {
        c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")?;
        for i in 0..3000 {
            c.execute("INSERT INTO t VALUES (?1, zeroblob(2000))", [i])?;
        }
        c.execute("UPDATE t SET v = zeroblob(2100) WHERE k = 0", [])?;
        Ok(())
    })
    .unwrap();
    let copy = tempfile::tempdir().unwrap();
    killed_copy(dir.path(), copy.path());
    drop(db);
    let c = Connection::open(copy.path().join("a.db")).unwrap();
    assert_eq!(c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).unwrap(), 3000);
    assert_eq!(c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}

/// A transaction larger than the page cache that rolls back leaves
/// nothing behind that could land later on what another connection
/// committed. (Spilled frames stayed in the WAL-batching VFS's buffer
/// after the rollback and were written out over the other connection's
/// frames at the next read: a malformed database.)
#[test]
fn a_rolled_back_transaction_larger_than_the_page_cache_leaves_other_commits_alone() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    let a = Db::open(&p).unwrap();
    let b = Db::open(&p).unwrap();
    a.write(
        |c| Ok(c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB); CREATE TABLE u(v BLOB)")?),
    )
    .unwrap();
    // An empty log, so that the rolled-back transaction's frames would
    // sit where the next commit goes.
    Connection::open(&p).unwrap().query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
    let rolled_back = a.write(|c| {
        for i in 0..42 {
            c.execute("INSERT INTO t VALUES (?1, randomblob(100000))", [i])?;
        }
        Err::<(), _>(Error::InvalidArgument("roll back".into()))
    });
    assert!(rolled_back.is_err());
    b.write(|c| Ok(c.execute("INSERT INTO u VALUES (zeroblob(3000))", []).map(drop)?)).unwrap();
    let n: i64 = a.read(|c| Ok(c.query_row("SELECT count(*) FROM u", [], |r| r.get(0))?)).unwrap();
    assert_eq!(n, 1);
    let c = Connection::open(&p).unwrap();
    assert_eq!(c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
    let v: Vec<u8> = c.query_row("SELECT v FROM u", [], |r| r.get(0)).unwrap();
    assert_eq!(v, vec![0u8; 3000]);
    assert_eq!(c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).unwrap(), 0);
}
