//! Corrupt and foreign files: truncated files, random bytes, random damage to
//! a real agentstate file, a torn WAL, non-agentstate SQLite databases, a
//! Python `SqliteSaver` file, a schema from a newer agentstate, paths that
//! cannot be opened. Each gives a typed error on open or on first use (or,
//! where the file is acceptable, works), never a panic, and never a hang.
//!
//! `AGENTSTATE_SOAK=1` multiplies the random cases by 20; `AGENTSTATE_SEED`
//! replays a run.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions};
use agentstate::store::{ListNamespaces, Search};
use agentstate::{Checkpoint, CheckpointConfig, Db, Error, ListQuery, Metadata, StoreConfig};
use common::harness::{soak, store_config};
use common::{check_file, report, seed_from_env, Blobs, Rng};
use rusqlite::Connection;
use serde_json::json;

const THREADS: [&str; 3] = ["t0", "t1", "t2"];
const NAMESPACES: [&[&str]; 3] = [&["mem", "alice"], &["mem", "bob"], &["docs"]];

const DIMS: usize = 16;

/// A real agentstate file with checkpoints (blobs, writes, a subgraph
/// namespace) and store items with vectors, closed so that the WAL is merged
/// into it.
fn template(dir: &Path) -> PathBuf {
    let path = dir.join("template.db");
    {
        let db = Db::open(&path).unwrap();
        let saver = db.checkpointer();
        for t in THREADS {
            for ns in ["", "sub:1"] {
                let mut config = CheckpointConfig::thread(t).ns(ns);
                let mut version = None;
                for step in 0..8i64 {
                    let mut cp = Checkpoint::with_id(uuid6(Some(step)).to_string());
                    let v = next_version(version.as_ref());
                    cp.channel_values
                        .insert("messages".into(), (json!([format!("{t} {step}"), {"n": step}])).into());
                    cp.channel_values.insert("count".into(), (json!(step)).into());
                    cp.channel_versions.insert("messages".into(), v.clone());
                    cp.channel_versions.insert("count".into(), v.clone());
                    let nv: ChannelVersions =
                        [("messages".to_string(), v.clone()), ("count".to_string(), v.clone())].into();
                    version = Some(v);
                    let meta = Metadata::new().with("source", "loop").with("step", step).with("run_id", t);
                    config = saver.put(&config, &cp, &meta, &nv).unwrap();
                    saver.put_writes(&config, &[("out", json!({"step": step}))], "task", "").unwrap();
                }
            }
        }
        let store = db.store(store_config(DIMS)).unwrap();
        for (i, ns) in NAMESPACES.iter().enumerate() {
            for k in 0..40 {
                let text = format!("memory {k} of namespace {i} about {}", ["tea", "cats", "rain"][k % 3]);
                store
                    .put(ns, &format!("k{k}"), json!({"text": text, "k": k, "pad": "x".repeat(k * 20)}))
                    .unwrap();
            }
        }
    }
    assert!(!dir.join("template.db-wal").exists(), "closing the last connection merges the WAL");
    check_file(&path, Blobs::AllPresent).unwrap();
    path
}

/// What happened to one damaged file.
#[derive(Debug, Default)]
struct Outcome {
    /// `Db::open` failed with this error.
    open_error: Option<String>,
    /// Operations that failed after a successful open: the error kinds.
    use_errors: Vec<String>,
    /// The operations those were, one per entry of `use_errors`.
    failed_ops: Vec<&'static str>,
    /// Operations that succeeded after a successful open.
    use_ok: usize,
}

/// The error's variant name, for the tallies.
fn variant(e: &Error) -> String {
    let s = format!("{e:?}");
    let end = s.find(|c: char| !c.is_alphanumeric()).unwrap_or(s.len());
    match e.sqlite_code() {
        _ if matches!(e, Error::Sqlite { .. }) => format!("Sqlite({:?}: {e})", e.sqlite_code()),
        _ => s[..end].to_string(),
    }
}

/// Opens `path` and uses every part of the API on it, reads and writes.
/// Panics are caught by the caller; errors are collected.
fn exercise(path: &Path) -> Outcome {
    let mut out = Outcome::default();
    let db = match Db::builder().pool_size(2).open(path) {
        Ok(db) => db,
        Err(e) => {
            out.open_error = Some(variant(&e));
            return out;
        }
    };
    let mut note = |op: &'static str, r: Result<(), Error>| match r {
        Ok(()) => out.use_ok += 1,
        Err(e) => {
            out.use_errors.push(variant(&e));
            out.failed_ops.push(op);
        }
    };
    let saver = db.checkpointer();
    note("list", saver.list(&ListQuery::all()).map(drop));
    note("list_filter", saver.list(&ListQuery::all().filter(json!({"step": {"$gte": 3}}))).map(drop));
    for t in THREADS {
        note("get_tuple", saver.get_tuple(&CheckpointConfig::thread(t)).map(drop));
        note("get_tuple", saver.get_tuple(&CheckpointConfig::thread(t).ns("sub:1")).map(drop));
    }
    let mut cp = Checkpoint::new();
    cp.channel_values.insert("x".into(), (json!({"new": true})).into());
    cp.channel_versions.insert("x".into(), 1.into());
    let nv: ChannelVersions = [("x".to_string(), 1.into())].into();
    note("put", saver.put(&CheckpointConfig::thread("fresh"), &cp, &Metadata::new(), &nv).map(drop));
    note(
        "put_writes",
        saver
            .put_writes(&CheckpointConfig::thread("fresh").at(&cp.id), &[("w", json!(1))], "t", "")
            .map(drop),
    );
    note("prune", saver.prune(&["t1"], agentstate::PruneStrategy::KeepLatest));
    note("copy_thread", saver.copy_thread("t0", "t0-copy"));
    note("delete_thread", saver.delete_thread("t2"));
    note("delete_for_runs", saver.delete_for_runs(&["r1"]));
    note(
        "apply_retention",
        saver.apply_retention(&agentstate::checkpoint::Retention::keep_last(2)).map(drop),
    );
    if let Ok(Some(head)) = saver.get_tuple(&CheckpointConfig::thread("t0")) {
        note("fork_with", saver.fork_with(&head.config, serde_json::Map::new()).map(drop));
    }
    if let Ok(Some(head)) = saver.get_tuple(&CheckpointConfig::thread("t1")) {
        note("step", saver.step(&head).append("log", [json!({"more": 1})]).commit().map(drop));
    }
    match db.store(store_config(DIMS)) {
        Err(e) => {
            out.use_errors.push(variant(&e));
            out.failed_ops.push("store");
        }
        Ok(store) => {
            note("search", store.search(Search::all().limit(1000)).map(drop));
            note("search", store.search(Search::new(&["mem"]).query("cats")).map(drop));
            note("search", store.search(Search::all().filter(json!({"k": {"$lt": 5}}))).map(drop));
            note("list_namespaces", store.list_namespaces(ListNamespaces::new()).map(drop));
            for ns in NAMESPACES {
                note("store_get", store.get(ns, "k3").map(drop));
            }
            note("store_put", store.put(&["mem", "alice"], "k3", json!({"text": "rewritten"})));
            note("store_delete", store.delete(&["docs"], "k4"));
            note("sweep_expired", store.sweep_expired().map(drop));
            note("reindex", store.reindex().map(drop));
        }
    }
    out
}

/// Runs [`exercise`] on a copy of `bytes` and fails the test on a panic or a
/// slow answer (a retry loop waiting for a timeout).
fn case(dir: &Path, name: &str, bytes: &[u8]) -> Outcome {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    std::fs::write(&path, bytes).unwrap();
    let what = format!("{name} ({} bytes)", bytes.len());
    within(LIMIT, &what, move || exercise(&path))
}

/// The longest a file may take to open and use.
const LIMIT: Duration = Duration::from_secs(5);

/// Runs `f` on a thread of its own and returns its result; fails the test
/// if `f` panics or has not returned after `limit` (a hang, or a retry loop
/// waiting for a timeout), without waiting for it: the thread is left
/// behind and the test process ends with the failure.
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("watched: {what}"))
        .spawn(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(Ok(out)) => out,
        Ok(Err(_)) => panic!("panicked on {what}"),
        Err(_) => panic!("{what}: no answer after {limit:?} (hung)"),
    }
}

/// The watchdog fails a call that hangs, and passes results through.
#[test]
fn watchdog_fails_a_hang_without_waiting_for_it() {
    assert_eq!(within(Duration::from_secs(1), "quick", || 7), 7);
    let start = Instant::now();
    let hung = catch_unwind(|| {
        within(Duration::from_millis(200), "sleeper", || std::thread::sleep(Duration::from_secs(30)))
    });
    assert!(hung.is_err() && start.elapsed() < Duration::from_secs(5));
    let panicked = catch_unwind(|| within(Duration::from_secs(5), "panicker", || panic!("inner")));
    assert!(panicked.is_err());
}

#[derive(Default)]
struct Tally {
    cases: u64,
    open_errors: std::collections::BTreeMap<String, u64>,
    use_errors: std::collections::BTreeMap<String, u64>,
    fine: u64,
}

impl Tally {
    fn add(&mut self, o: &Outcome) {
        self.cases += 1;
        if let Some(e) = &o.open_error {
            *self.open_errors.entry(e.clone()).or_default() += 1;
        } else if o.use_errors.is_empty() {
            self.fine += 1;
        }
        for e in &o.use_errors {
            *self.use_errors.entry(e.clone()).or_default() += 1;
        }
    }
}

#[test]
fn truncated_files_give_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(template(dir.path())).unwrap();
    let len = bytes.len();
    let mut cuts: Vec<usize> = vec![1, 16, 50, 99, 100, 101, 512, 4095, 4096, 4097, 8191, len / 2, len - 1];
    cuts.extend((2..len / 4096).map(|p| p * 4096));
    let mut rng = Rng::new(seed_from_env("AGENTSTATE_SEED"));
    cuts.extend((0..20 * soak(20)).map(|_| rng.range(1, len as u64) as usize));
    let mut tally = Tally::default();
    for cut in cuts {
        let o = case(dir.path(), "cut.db", &bytes[..cut]);
        // A file cut inside its first page is refused on open (but see
        // `tiny_files_are_empty_databases`). Past it, SQLite notices the
        // missing pages when it reads them; a cut in pages the exercise does
        // not read (free pages at the end) goes unnoticed.
        if cut == 1 {
            assert!(o.open_error.is_none() && o.use_errors.is_empty(), "{o:?}");
        } else if cut < 4096 {
            assert!(o.open_error.is_some(), "cut at {cut}: {o:?}");
        }
        for e in o.open_error.iter().chain(&o.use_errors) {
            assert!(["NotAgentstate", "Corrupt"].contains(&e.as_str()), "cut at {cut}: {o:?}");
        }
        tally.add(&o);
    }
    report(
        "truncated",
        &[
            ("files", tally.cases),
            ("open_refused", tally.open_errors.values().sum()),
            ("use_refused", tally.cases - tally.open_errors.values().sum::<u64>() - tally.fine),
            ("unnoticed", tally.fine),
        ],
    );
}

/// SQLite takes a file of 0 or 1 byte for an empty database, so agentstate
/// makes it its own (whatever that byte was).
#[test]
fn tiny_files_are_empty_databases() {
    let dir = tempfile::tempdir().unwrap();
    for bytes in [&[][..], &[0u8], &[0xAB]] {
        let o = case(dir.path(), "tiny.db", bytes);
        assert!(o.open_error.is_none() && o.use_errors.is_empty(), "{bytes:?}: {o:?}");
        check_file(&dir.path().join("tiny.db"), Blobs::AllPresent).unwrap();
    }
}

#[test]
fn random_bytes_are_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed_from_env("AGENTSTATE_SEED"));
    let mut files = 0;
    for size in [2usize, 15, 100, 4096, 65536] {
        for _ in 0..4 * soak(20) {
            let bytes: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
            let o = case(dir.path(), "random.db", &bytes);
            assert_eq!(o.open_error.as_deref(), Some("NotAgentstate"), "{size} random bytes: {o:?}");
            files += 1;
        }
    }
    // The right magic, then garbage or zeros.
    for fill in [None, Some(0u8)] {
        let mut bytes = b"SQLite format 3\0".to_vec();
        bytes.extend((0..8192).map(|_| fill.unwrap_or(rng.next_u64() as u8)));
        let o = case(dir.path(), "magic.db", &bytes);
        let e = o.open_error.as_deref().or(o.use_errors.first().map(String::as_str));
        assert!(matches!(e, Some("NotAgentstate" | "Corrupt")), "magic + {fill:?}: {o:?}");
        files += 1;
    }
    report("random_bytes", &[("files", files)]);
}

/// Random damage to a real file: flipped bits, overwritten ranges, zeroed
/// pages. SQLite does not checksum pages, so some damage goes unnoticed
/// (a flipped bit inside a stored string is still a valid string); what
/// matters is that nothing panics and every refusal is a typed error.
#[test]
fn damaged_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(template(dir.path())).unwrap();
    let seed = seed_from_env("AGENTSTATE_SEED");
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    for i in 0..150 * soak(20) {
        let mut b = bytes.clone();
        let how = rng.below(3);
        match how {
            0 => {
                for _ in 0..rng.range(1, 9) {
                    let at = rng.below(b.len() as u64) as usize;
                    b[at] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let n = rng.range(16, 513) as usize;
                let at = rng.below((b.len() - n) as u64) as usize;
                b[at..at + n].iter_mut().for_each(|x| *x = rng.next_u64() as u8);
            }
            _ => {
                let page = rng.below((b.len() / 4096) as u64) as usize;
                b[page * 4096..(page + 1) * 4096].iter_mut().for_each(|x| *x = 0);
            }
        }
        let o = catch_unwind(AssertUnwindSafe(|| case(dir.path(), "damaged.db", &b)))
            .unwrap_or_else(|_| panic!("case {i} (seed {seed}, damage kind {how}) panicked"));
        let ops = o.open_error.iter().map(|_| "open").chain(o.failed_ops.iter().copied());
        for (e, op) in o.open_error.iter().chain(&o.use_errors).zip(ops) {
            let kind = e.split('(').next().unwrap_or_default();
            // `Sqlite`: SQLite's JSON functions (metadata filters, prune)
            // meeting damaged JSON text say "malformed JSON".
            // `EmbedderMismatch`, `UnrecordedEmbedder`: the damage hit the
            // recorded embedder (changed it, or erased it while vectors
            // remain). `NotFound`: a flipped bit in a row's checkpoint_id
            // (the index still finds the row by its old key, so the read
            // returns an id no lookup finds; seed 1795553007537302479).
            let anywhere = [
                "NotAgentstate",
                "Corrupt",
                "Serialization",
                "UnknownSerialization",
                "Sqlite",
                "SchemaTooNew",
                "EmbedderMismatch",
                "UnrecordedEmbedder",
                "NotFound",
            ];
            // From `step` only: `InvalidArgument`, damage turned the head's
            // id into text that is not a UUID and sorts after the ids the
            // clock gives, so no new id can sort after it, as
            // `Step::commit` documents (seed 1796255721433037832); and
            // `Conflict`, a damaged index led the read of thread `t1`'s head
            // to another thread's row, whose own head the index then does
            // not find (seed 1796274609332179012: "checkpoint ... is no
            // longer the newest of thread 'fresh' ... the thread has no
            // checkpoint any more").
            let here = op == "step" && matches!(kind, "InvalidArgument" | "Conflict");
            assert!(
                anywhere.contains(&kind) || here,
                "case {i} (seed {seed}): unexpected error kind {e} from {op}: {o:?}"
            );
        }
        tally.add(&o);
    }
    eprintln!("damaged files: open errors {:?}, use errors {:?}", tally.open_errors, tally.use_errors);
    report(
        "damaged",
        &[
            ("files", tally.cases),
            ("open_refused", tally.open_errors.values().sum()),
            ("unnoticed", tally.fine),
            ("use_errors", tally.use_errors.values().sum()),
        ],
    );
}

/// A WAL full of garbage beside a valid file is ignored (its header does not
/// check out); a real WAL cut anywhere replays up to its last whole commit.
#[test]
fn torn_or_garbage_wal_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let tpl = template(dir.path());
    let bytes = std::fs::read(&tpl).unwrap();
    let mut rng = Rng::new(seed_from_env("AGENTSTATE_SEED"));

    // Garbage WAL.
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, &bytes).unwrap();
    let wal: Vec<u8> = (0..100_000).map(|_| rng.next_u64() as u8).collect();
    std::fs::write(dir.path().join("garbage.db-wal"), wal).unwrap();
    let o = exercise(&path);
    assert!(o.open_error.is_none() && o.use_errors.is_empty(), "{o:?}");
    check_file(&path, Blobs::AllPresent).unwrap();

    // A real WAL: 30 more commits, copied while the writer still has the
    // file open (what a crash leaves), then cut at random places.
    let live = dir.path().join("live.db");
    std::fs::write(&live, &bytes).unwrap();
    let db = Db::open(&live).unwrap();
    let saver = db.checkpointer();
    let mut config = CheckpointConfig::thread("walled");
    let mut ids = vec![];
    for step in 0..30i64 {
        let mut cp = Checkpoint::new();
        cp.channel_values.insert("v".into(), (json!([step])).into());
        cp.channel_versions.insert("v".into(), (step + 1).into());
        let nv: ChannelVersions = [("v".to_string(), (step + 1).into())].into();
        config = saver.put(&config, &cp, &Metadata::new().with("step", step), &nv).unwrap();
        ids.push(cp.id);
    }
    let main = std::fs::read(&live).unwrap();
    let wal = std::fs::read(dir.path().join("live.db-wal")).unwrap();
    drop(saver);
    drop(db);
    let mut cuts = vec![0, 31, 32, 33, wal.len() - 1, wal.len()];
    cuts.extend((0..10 * soak(20)).map(|_| rng.below(wal.len() as u64) as usize));
    let mut seen = std::collections::BTreeSet::new();
    for cut in cuts {
        let path = dir.path().join("torn.db");
        let _ = std::fs::remove_file(dir.path().join("torn.db-shm"));
        std::fs::write(&path, &main).unwrap();
        std::fs::write(dir.path().join("torn.db-wal"), &wal[..cut]).unwrap();
        let saver = Db::open(&path).unwrap().checkpointer();
        let kept = saver.list(&ListQuery::thread("walled")).unwrap();
        // A prefix of the commits, each whole.
        let got: Vec<String> = kept.iter().rev().map(|t| t.checkpoint.id.clone()).collect();
        assert_eq!(got, ids[..got.len()], "cut at {cut}");
        for t in &kept {
            let step = t.metadata.step().unwrap();
            assert_eq!(t.checkpoint.channel_values["v"], json!([step]));
        }
        seen.insert(got.len());
        drop(saver);
        check_file(&path, Blobs::AllPresent).unwrap();
    }
    assert!(seen.contains(&30) && seen.contains(&0), "{seen:?}");
    report("torn_wal", &[("wal_cuts", 16 + 10 * (soak(20) - 1)), ("distinct_prefixes", seen.len() as u64)]);
}

/// An application's own SQLite database: agentstate adds its tables next to
/// the application's and leaves those alone (this is how an app embeds
/// agentstate in its database). The file is switched to WAL mode.
#[test]
fn foreign_database_with_unrelated_tables_is_shared() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO users (name) VALUES ('ada'), ('grace'); \
             CREATE TABLE notes (body TEXT);",
        )
        .unwrap();
    }
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let mut cp = Checkpoint::new();
    cp.channel_values.insert("m".into(), (json!(["hi"])).into());
    cp.channel_versions.insert("m".into(), 1.into());
    saver
        .put(&CheckpointConfig::thread("t"), &cp, &Metadata::new(), &[("m".to_string(), 1.into())].into())
        .unwrap();
    db.store(StoreConfig::default()).unwrap().put(&["n"], "k", json!({"a": 1})).unwrap();
    drop(saver);
    drop(db);
    let c = Connection::open(&path).unwrap();
    let names: Vec<String> = c
        .prepare("SELECT name FROM users ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names, ["ada", "grace"]);
    let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    check_file(&path, Blobs::AllPresent).unwrap();
}

fn sqlite_file(path: &Path, ddl: &str) -> Vec<u8> {
    {
        let c = Connection::open(path).unwrap();
        c.execute_batch(ddl).unwrap();
    }
    std::fs::read(path).unwrap()
}

/// A file agentstate refuses is left exactly as it was.
fn assert_refused(path: &Path, before: &[u8], want: &str) -> Error {
    let err = Db::open(path).expect_err("the file must be refused");
    assert_eq!(variant(&err), want, "{err}");
    assert!(std::fs::read(path).unwrap() == before, "a refused file must be left untouched");
    err
}

#[test]
fn python_sqlitesaver_file_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("py.db");
    let before = sqlite_file(
        &path,
        "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
           checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, \
           PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)); \
         CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
           checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, \
           type TEXT, value BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)); \
         INSERT INTO checkpoints VALUES ('t', '', '1', NULL, 'msgpack', x'80', '{}');",
    );
    let err = assert_refused(&path, &before, "NotAgentstate");
    assert!(err.to_string().contains("SqliteSaver"), "{err}");

    let path = dir.path().join("store.db");
    let before = sqlite_file(&path, "CREATE TABLE store (prefix TEXT, key TEXT, value TEXT);");
    assert_refused(&path, &before, "NotAgentstate");
}

#[test]
fn newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let tpl = template(dir.path());
    for series in ["checkpoint_migrations", "store_migrations", "vector_migrations", "agentstate_migrations"]
    {
        let path = dir.path().join(format!("{series}.db"));
        std::fs::copy(&tpl, &path).unwrap();
        {
            let c = Connection::open(&path).unwrap();
            c.execute(&format!("INSERT INTO {series} (v) VALUES (999)"), []).unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        match assert_refused(&path, &before, "SchemaTooNew") {
            Error::SchemaTooNew { table, found, supported } => {
                assert_eq!((table, found), (series, 999));
                assert!(supported < 999);
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Paths SQLite cannot open fail at once with a typed error (not after the
/// connection pool's 30 s retry).
#[test]
fn unopenable_paths_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no").join("such").join("dir.db");
    for path in [missing, dir.path().to_path_buf()] {
        let p = path.clone();
        let err =
            within(LIMIT, &path.display().to_string(), move || Db::open(p).expect_err("cannot be opened"));
        assert_eq!(err.sqlite_code(), Some(rusqlite::ErrorCode::CannotOpen), "{err:?}");
    }
}

/// A read-only file (SQLite URI `mode=ro`): reads work, writes fail with a
/// typed error and change nothing.
#[test]
fn read_only_file_reads_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let tpl = template(dir.path());
    let before = std::fs::read(&tpl).unwrap();
    let db = Db::open(format!("file:{}?mode=ro", tpl.display())).unwrap();
    let saver = db.checkpointer();
    assert_eq!(saver.list(&ListQuery::thread("t0")).unwrap().len(), 16);
    let err = saver.delete_thread("t0").unwrap_err();
    assert_eq!(err.sqlite_code(), Some(rusqlite::ErrorCode::ReadOnly), "{err:?}");
    let store = db.store(StoreConfig::default()).unwrap();
    assert_eq!(store.search(Search::new(&["docs"]).limit(100)).unwrap().len(), 40);
    let err = store.put(&["docs"], "k0", json!({})).unwrap_err();
    assert_eq!(err.sqlite_code(), Some(rusqlite::ErrorCode::ReadOnly), "{err:?}");
    drop((saver, store, db));
    assert!(std::fs::read(&tpl).unwrap() == before, "a read-only file must be left untouched");
}
