//! The WAL-batching VFS (`src/vfs/`) against a model: random
//! transactions on three raw connections through the `agentstate` VFS,
//! configured like the crate's own, with small page caches (100-500 KiB)
//! and an early autocheckpoint (300 pages) so that transactions outgrow
//! them and spill pages to the log before their commit, beside a
//! connection of SQLite's default VFS standing in for another process:
//! large and small transactions, rollbacks, constraint failures,
//! savepoints, forced cache flushes, every checkpoint mode, `VACUUM`,
//! `VACUUM INTO` and the backup API. After every transaction a connection
//! of our VFS other than the writer compares the table's row count and
//! content sums with the model; every 7th, SQLite's own connection checks
//! every row and the file's integrity; every 5th, a copy of the files
//! without `-shm` (what a kill leaves) must recover to the model, as must
//! the last state.
//!
//! `AGENTSTATE_VFS_MODEL_SEEDS=n` runs seeds `1..n` of the `NORMAL` and
//! `FULL` tests (ten times the default under `.ci/soak`). They see what the
//! VFS's two rules for spills prevent (committed rows missing from a killed
//! copy, or a malformed file): the three tests with several connections
//! fail if it keeps what a write transaction left buffered past its end,
//! and the two without `FULL` if it buffers a rewrite of spilled frames
//! (`FULL`'s sync writes it out before the commit is published). The
//! exclusive-mode test, one connection, fails with neither.

use std::collections::BTreeMap;
use std::path::Path;

use agentstate::rusqlite::{self, Connection, OpenFlags};
use agentstate::Db;

mod common;
use common::Rng;

fn flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

fn ours(path: &str, sync: &str, cache_kib: u32, extra: &str) -> Connection {
    let c = Connection::open_with_flags_and_vfs(path, flags(), "agentstate").unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    c.execute_batch(&format!(
        "{extra} PRAGMA synchronous = {sync}; PRAGMA temp_store = MEMORY; PRAGMA cache_size = -{cache_kib}; \
         PRAGMA wal_autocheckpoint = 300;"
    ))
    .unwrap();
    c
}

/// One past the last seed a test runs: `default`, ten times as many under
/// `.ci/soak` (`AGENTSTATE_SOAK`), or `AGENTSTATE_VFS_MODEL_SEEDS`.
fn seeds(default: u64) -> u64 {
    let soak = std::env::var_os("AGENTSTATE_SOAK").is_some();
    std::env::var("AGENTSTATE_VFS_MODEL_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(if soak {
        10 * default
    } else {
        default
    })
}

const VAL: &str = "CAST(printf('%.*c', ?2, char(65 + ?3 % 26)) AS BLOB)";

/// Model: key -> (len, seed) of the blob.
type Model = BTreeMap<i64, (i64, i64)>;

fn check(c: &Connection, model: &Model, at: &str) {
    let bad: i64 = c
        .query_row(
            &format!(
                "SELECT count(*) FROM t WHERE v IS NOT {}",
                VAL.replace("?2", "length(v)").replace("?3", "s")
            ),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bad, 0, "{at}: rows with wrong content");
    let ic: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(ic, "ok", "{at}");
    let mut got = Model::new();
    let mut st = c.prepare("SELECT k, length(v), s FROM t").unwrap();
    let rows =
        st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))).unwrap();
    for r in rows {
        let (k, l, s) = r.unwrap();
        got.insert(k, (l, s));
    }
    if &got != model {
        let extra: Vec<_> = got.iter().filter(|(k, v)| model.get(k) != Some(v)).collect();
        let missing: Vec<_> = model.iter().filter(|(k, v)| got.get(k) != Some(v)).collect();
        panic!("{at}: in file not model {extra:?}; in model not file {missing:?}");
    }
}

fn killed_copy(dir: &Path, to: &Path) -> Connection {
    for f in ["a.db", "a.db-wal"] {
        if dir.join(f).exists() {
            std::fs::copy(dir.join(f), to.join(f)).unwrap();
        } else {
            let _ = std::fs::remove_file(to.join(f));
        }
    }
    let _ = std::fs::remove_file(to.join("a.db-shm"));
    Connection::open(to.join("a.db")).unwrap()
}

fn run(seed: u64, sync: &str, uri_extra: &str, conn_extra: &str, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    // Registers the VFS.
    drop(Db::open(&p).unwrap());
    let path = format!("file:{}{}", p.display(), uri_extra);
    let conns: Vec<Connection> = (0..3).map(|i| ours(&path, sync, 100 + 200 * i, conn_extra)).collect();
    conns[0]
        .execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, s INTEGER); CREATE INDEX ts ON t(s)")
        .unwrap();
    let plain = Connection::open(&p).unwrap();
    plain.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    for round in 0..rounds {
        let pick = rng.below(4) as usize;
        let c = if pick == 3 { &plain } else { &conns[pick] };
        let at = format!("seed {seed} round {round}");
        let mut next = model.clone();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        let big = rng.below(6) == 0;
        let n = if big { 150 + rng.below(300) } else { 1 + rng.below(8) };
        let mut failed = false;
        for j in 0..n {
            let k = rng.below(2000) as i64;
            let len = if big { 1000 + rng.below(6000) as i64 } else { 1 + rng.below(9000) as i64 };
            let s = rng.next_u64() as i64 & 0xffff;
            match rng.below(10) {
                0 => {
                    // A constraint failure inside the transaction (statement rollback).
                    if let Some((&k2, _)) = next.iter().next() {
                        let r = c.execute(&format!("INSERT INTO t VALUES (?1, {VAL}, ?3)"), [k2, len, s]);
                        assert!(
                            matches!(&r, Err(rusqlite::Error::SqliteFailure(e, _))
                                if e.code == rusqlite::ErrorCode::ConstraintViolation),
                            "{r:?}"
                        );
                    }
                }
                1 => {
                    // A savepoint rolled back.
                    c.execute_batch("SAVEPOINT sp").unwrap();
                    c.execute("DELETE FROM t WHERE k % 3 = ?1", [k % 3]).unwrap();
                    c.execute(&format!("INSERT OR REPLACE INTO t VALUES (?1, {VAL}, ?3)"), [k, len, s])
                        .unwrap();
                    c.execute_batch("ROLLBACK TO sp; RELEASE sp").unwrap();
                }
                2 => {
                    c.execute("DELETE FROM t WHERE k = ?1", [k]).unwrap();
                    next.remove(&k);
                }
                3 if j % 17 == 0 => {
                    // Paths that might write pages before the commit.
                    c.cache_flush().unwrap();
                    c.execute_batch("PRAGMA shrink_memory").unwrap();
                    unsafe { rusqlite::ffi::sqlite3_release_memory(1 << 30) };
                }
                _ => {
                    c.execute(&format!("INSERT OR REPLACE INTO t VALUES (?1, {VAL}, ?3)"), [k, len, s])
                        .unwrap();
                    next.insert(k, (len, s));
                }
            }
            if rng.below(200) == 0 {
                failed = true;
            }
        }
        let rollback = failed || rng.below(8) == 0;
        if rollback {
            c.execute_batch("ROLLBACK").unwrap();
        } else {
            c.execute_batch("COMMIT").unwrap();
            model = next;
        }
        match rng.below(12) {
            0 => plain.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap(),
            1 => plain.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())).unwrap(),
            2 => plain.query_row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(())).unwrap(),
            3 => conns[rng.below(3) as usize]
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .unwrap(),
            _ => {}
        }
        match rng.below(40) {
            0 => conns[rng.below(3) as usize].execute_batch("VACUUM").unwrap(),
            1 => {
                let into = copy.path().join(format!("into{round}.db"));
                conns[rng.below(3) as usize].execute("VACUUM INTO ?1", [into.to_str().unwrap()]).unwrap();
                let v = Connection::open(&into).unwrap();
                check(&v, &model, &format!("{at} (vacuum into)"));
            }
            2 => {
                // The backup API into a WAL file of our VFS.
                let dest_p = copy.path().join(format!("bk{round}.db"));
                let dest = ours(dest_p.to_str().unwrap(), sync, 100, "PRAGMA journal_mode = WAL;");
                unsafe {
                    use rusqlite::ffi;
                    let b = ffi::sqlite3_backup_init(
                        dest.handle(),
                        c"main".as_ptr(),
                        plain.handle(),
                        c"main".as_ptr(),
                    );
                    assert!(!b.is_null());
                    for step in 0.. {
                        assert!(step < 100_000, "the backup never finished");
                        let rc = ffi::sqlite3_backup_step(b, 7);
                        if rc == ffi::SQLITE_DONE {
                            break;
                        }
                        assert!(
                            rc == ffi::SQLITE_OK || rc == ffi::SQLITE_BUSY || rc == ffi::SQLITE_LOCKED,
                            "rc {rc}"
                        );
                    }
                    assert_eq!(ffi::sqlite3_backup_finish(b), ffi::SQLITE_OK);
                }
                let mode: String = dest.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
                assert_eq!(mode, "wal");
                let bk2 = tempfile::tempdir().unwrap();
                for f in ["", "-wal"] {
                    let from = copy.path().join(format!("bk{round}.db{f}"));
                    if from.exists() {
                        std::fs::copy(&from, bk2.path().join(format!("a.db{f}"))).unwrap();
                    }
                }
                let v = Connection::open(bk2.path().join("a.db")).unwrap();
                check(&v, &model, &format!("{at} (backup, killed copy)"));
            }
            _ => {}
        }
        // Another connection of our VFS reads the committed state.
        let others: Vec<&Connection> = conns.iter().filter(|o| !std::ptr::eq(*o, c)).collect();
        let reader = others[rng.below(others.len() as u64) as usize];
        let sums = reader
            .query_row("SELECT count(*), coalesce(sum(length(v)), 0), coalesce(sum(s), 0) FROM t", [], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            })
            .unwrap();
        let want = (model.len() as i64, model.values().map(|v| v.0).sum(), model.values().map(|v| v.1).sum());
        assert_eq!(sums, want, "{at}: another connection");
        if round % 7 == 0 {
            check(&plain, &model, &at);
        }
        if round % 5 == 0 {
            let k = killed_copy(dir.path(), copy.path());
            check(&k, &model, &format!("{at} (killed copy)"));
        }
    }
    let k = killed_copy(dir.path(), copy.path());
    check(&k, &model, &format!("seed {seed} end (killed copy)"));
}

#[test]
fn random_transactions_match_the_model_after_every_kill_at_normal() {
    for seed in 1..seeds(4) {
        run(seed * 7919, "NORMAL", "", "", 120);
    }
}

#[test]
fn random_transactions_match_the_model_after_every_kill_at_full_with_psow_0() {
    for seed in 1..seeds(3) {
        run(seed * 104729, "FULL", "?psow=0", "", 100);
    }
}

#[test]
fn random_transactions_match_the_model_with_a_journal_size_limit() {
    for seed in 1..3 {
        run(seed * 31337, "NORMAL", "", "PRAGMA journal_size_limit = 8192;", 100);
    }
}

#[test]
fn exclusive_locking_mode_matches_the_model_after_every_kill() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    drop(Db::open(&p).unwrap());
    let c = ours(p.to_str().unwrap(), "NORMAL", 100, "PRAGMA locking_mode = EXCLUSIVE;");
    c.execute_batch("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, s INTEGER)").unwrap();
    let mut rng = Rng::new(99);
    let mut model = Model::new();
    for round in 0..80 {
        c.execute_batch("BEGIN").unwrap();
        let n = if round % 5 == 0 { 300 } else { 3 };
        let mut next = model.clone();
        for _ in 0..n {
            let k = rng.below(1500) as i64;
            let len = 1 + rng.below(5000) as i64;
            let s = rng.below(60000) as i64;
            c.execute(&format!("INSERT OR REPLACE INTO t VALUES (?1, {VAL}, ?3)"), [k, len, s]).unwrap();
            next.insert(k, (len, s));
        }
        if round % 7 == 3 {
            c.execute_batch("ROLLBACK").unwrap();
        } else {
            c.execute_batch("COMMIT").unwrap();
            model = next;
        }
        if round % 11 == 0 {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
        }
        let k = killed_copy(dir.path(), copy.path());
        check(&k, &model, &format!("exclusive round {round} (killed copy)"));
    }
}
