//! The Store under failure: a reindex that fails midway, writers racing a
//! reindex, absurd dimensions, vectors of an unrecorded embedder, other
//! writers changing the file underneath, and the Store half of a Python
//! saver-and-store file.

use std::time::Duration;

use agentstate::store::{Embedder, Get, IndexConfig, Op, Search, TtlConfig};
use agentstate::{Db, Error, StoreConfig};
use rusqlite::Connection;
use serde_json::json;

mod store_support;
use store_support::*;

/// The `name/dims` the file records for its vectors, if any.
fn recorded_embedder(path: &std::path::Path) -> Option<String> {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT value FROM agentstate_meta WHERE key = 'store.embedder'", [], |r| r.get(0))
        .ok()
}

fn vector_count(path: &std::path::Path) -> i64 {
    Connection::open(path).unwrap().query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap()
}

/// An embedder of any identity whose document embedding fails.
struct FailingDocs(&'static str, usize);

impl Embedder for FailingDocs {
    fn name(&self) -> &str {
        self.0
    }
    fn dims(&self) -> usize {
        self.1
    }
    fn embed_documents(&self, _: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Err("the model went away".into())
    }
    fn embed_query(&self, _: &str) -> Result<Vec<f32>, BoxError> {
        Err("the model went away".into())
    }
}

/// A file indexed with `Literal(3)` over field `v`: items k1 = "1 0 0",
/// k2 = "0 1 0".
fn indexed_file() -> (tempfile::TempDir, std::path::PathBuf, Db) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let db = Db::open(&path).unwrap();
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    s.put(&["n"], "k1", json!({"v": "1 0 0"})).unwrap();
    s.put(&["n"], "k2", json!({"v": "0 1 0"})).unwrap();
    (dir, path, db)
}

/// A reindex is one transaction: the new embedder is recorded together with
/// the new vectors. When it fails midway (here the new embedder fails, as a
/// kill would stop it), the file still records the old embedder over the old
/// vectors, and the old configuration still opens and searches.
#[test]
fn a_failed_reindex_leaves_the_old_embedder_and_vectors() {
    let (_d, path, db) = indexed_file();
    let err = db
        .reindex_store(
            StoreConfig::new().with_index(IndexConfig::new(FailingDocs("other", 2)).with_fields(["v"])),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Embedding { .. }), "{err}");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert_eq!(vector_count(&path), 2);
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
}

/// Runs a hook (another writer's put) the first time it embeds documents,
/// that is after a reindex has read the items and before it writes.
struct Interleaved {
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Embedder for Interleaved {
    fn name(&self) -> &str {
        "literal"
    }
    fn dims(&self) -> usize {
        3
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        if let Some(hook) = self.hook.lock().unwrap().take() {
            hook();
        }
        Ok(texts.iter().map(|t| Literal(3).parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Literal(3).parse(text))
    }
}

/// A put acknowledged while a reindex runs keeps its vector: the reindex
/// re-reads the items inside its write transaction and embeds what changed
/// since it first read them.
#[test]
fn reindex_keeps_the_vectors_of_puts_acknowledged_meanwhile() {
    let (_d, path, db) = indexed_file();
    let other = Db::open(&path).unwrap();
    let hook = move || {
        let s = other
            .store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"])))
            .unwrap();
        s.put(&["n"], "late", json!({"v": "0 0 1"})).unwrap();
        s.put(&["n"], "k1", json!({"v": "1 1 0"})).unwrap();
    };
    let embedder = Interleaved { hook: std::sync::Mutex::new(Some(Box::new(hook))) };
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(embedder).with_fields(["v"]))).unwrap();
    assert_eq!(s.reindex().unwrap(), 3);
    assert_eq!(vector_names(&Connection::open(&path).unwrap(), "late"), vec!["v"]);
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(keys(&hits)[0], "late");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
    let hits = s.search(Search::new(&["n"]).query("1 1 0")).unwrap();
    assert_eq!(keys(&hits)[0], "k1", "the vector of the newer k1");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
}

/// Says it has `dims` dimensions but returns 3-long vectors.
struct Claims(usize);

impl Embedder for Claims {
    fn name(&self) -> &str {
        "claims"
    }
    fn dims(&self) -> usize {
        self.0
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| Literal(3).parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Literal(3).parse(text))
    }
}

/// Absurd dimensions (0, 2^32, usize::MAX) are refused with a typed error
/// wherever a dimension comes in, before anything is written: the file
/// keeps its embedder and vectors.
#[test]
fn absurd_dimensions_are_refused_before_anything_changes() {
    for dims in [0, 1 << 32, usize::MAX] {
        assert!(
            matches!(agentstate::store::HashEmbedder::new(dims), Err(Error::InvalidArgument(_))),
            "{dims}"
        );
        assert!(matches!(IndexConfig::hashed(dims), Err(Error::InvalidArgument(_))), "{dims}");
    }
    let (_d, path, db) = indexed_file();
    for dims in [0, 1 << 32, usize::MAX] {
        let cfg = || StoreConfig::new().with_index(IndexConfig::new(Claims(dims)).with_fields(["v"]));
        assert!(matches!(db.store(cfg()), Err(Error::InvalidArgument(_))), "{dims}");
        assert!(matches!(db.reindex_store(cfg()), Err(Error::InvalidArgument(_))), "{dims}");
        assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
        assert_eq!(vector_count(&path), 2);
    }
    // Vectors of the wrong length from an embedder of a sane dimension.
    let err = db
        .reindex_store(StoreConfig::new().with_index(IndexConfig::new(Claims(5)).with_fields(["v"])))
        .unwrap_err();
    assert!(matches!(err, Error::DimensionMismatch { expected: 5, got: 3 }), "{err}");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert_eq!(vector_count(&path), 2);
}

/// A file whose vectors no recorded embedder made (LangGraph's Python
/// `SqliteStore` records none) is refused with an index config, whatever the
/// embedder, because its vectors would be scored against ours; nothing is
/// recorded then. The caller may adopt the vectors (then the embedder is
/// recorded and the file opens normally) or reindex. A file without vectors
/// simply records the embedder.
#[test]
fn vectors_of_an_unrecorded_embedder_are_refused_unless_adopted() {
    let (_d, path, db) = indexed_file();
    Connection::open(&path).unwrap().execute("DELETE FROM agentstate_meta", []).unwrap();
    let hashed = || StoreConfig::new().with_index(IndexConfig::hashed(16).unwrap().with_fields(["v"]));
    let literal = |adopt| {
        StoreConfig::new()
            .with_index(IndexConfig::new(Literal(3)).with_fields(["v"]).with_adopt_existing_vectors(adopt))
    };
    for cfg in [hashed(), literal(false)] {
        match db.store(cfg) {
            Err(Error::UnrecordedEmbedder { vectors: 2, configured }) => {
                assert!(configured.ends_with("/16") || configured == "literal/3", "{configured}")
            }
            other => panic!("{other:?}"),
        }
    }
    // Vectors of another length cannot be adopted.
    let five = StoreConfig::new().with_index(IndexConfig::new(Claims(5)).with_adopt_existing_vectors(true));
    assert!(matches!(db.store(five), Err(Error::DimensionMismatch { expected: 5, got: 3 })));
    assert_eq!(recorded_embedder(&path), None);
    // A plain store needs no embedder.
    assert_eq!(db.store(StoreConfig::new()).unwrap().search(Search::new(&["n"])).unwrap().len(), 2);
    // Adopting on a read-only Db reads without recording.
    let ro = Db::builder().read_only(true).open(&path).unwrap();
    let s = ro.store(literal(true)).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
    drop((s, ro));
    assert_eq!(recorded_embedder(&path), None);
    // Adopting records the embedder: later opens need no flag.
    let s = db.store(literal(true)).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert!(db.store(literal(false)).is_ok());
    assert!(matches!(db.store(hashed()), Err(Error::EmbedderMismatch { .. })));
    // Reindexing replaces unrecorded vectors too.
    Connection::open(&path).unwrap().execute("DELETE FROM agentstate_meta", []).unwrap();
    db.reindex_store(hashed()).unwrap();
    assert_eq!(recorded_embedder(&path).as_deref(), Some("agentstate-hash-v1/16"));
    // No vectors, no record: the embedder is recorded at open.
    let fresh = Db::open_in_memory().unwrap();
    fresh.store(hashed()).unwrap();
    assert!(matches!(fresh.store(literal(false)), Err(Error::EmbedderMismatch { .. })));
}

/// A change to a vector alone (another writer updating `store_vectors`, not
/// `store`) moves the search generation: a long-lived Store scores the new
/// vector.
#[test]
fn a_vector_changed_alone_by_another_writer_is_seen_by_search() {
    let (_d, path, db) = indexed_file();
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert!(hits.iter().all(|h| h.score.unwrap().abs() < 1e-6));
    let raw = Connection::open(&path).unwrap();
    let blob: Vec<u8> = [0f32, 0.0, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    raw.execute("UPDATE store_vectors SET embedding = ?1 WHERE key = 'k2'", [&blob]).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(keys(&hits)[0], "k2");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6, "{hits:?}");
    raw.execute("DELETE FROM store_vectors WHERE key = 'k2'", []).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(hits.iter().find(|h| h.item.key == "k2").unwrap().score, None);
    let orphan: Vec<u8> = [0f32, 1.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    raw.execute(
        "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES ('n', 'k2', 'v', ?1)",
        [&orphan],
    )
    .unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 1 0")).unwrap();
    assert_eq!(keys(&hits)[0], "k2");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
}

/// Reads never fail because of the TTL refresh: while another connection
/// holds the write lock, get and search answer at once (the refresh is
/// skipped), and opening a Store whose embedder is already recorded writes
/// nothing, so it does not wait for the lock either.
#[test]
fn reads_and_opens_do_not_wait_for_another_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.db");
    let db = Db::builder().busy_timeout(Duration::from_millis(400)).open(&path).unwrap();
    let cfg = || {
        StoreConfig::new()
            .with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))
            .with_ttl(TtlConfig::new().with_default_ttl(Duration::from_secs(600)))
    };
    let s = db.store(cfg()).unwrap();
    s.put(&["n"], "k", json!({"v": "1 0 0"})).unwrap();
    let before = s.get(&["n"], "k").unwrap().unwrap().expires_at.unwrap();
    let writer = Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE; INSERT INTO agentstate_meta VALUES ('x', 'y')").unwrap();
    let t = std::time::Instant::now();
    let got = s.get(&["n"], "k").unwrap().unwrap();
    assert!(got.expires_at.unwrap() >= before);
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("1 0 0")).unwrap()), vec!["k"]);
    assert_eq!(
        s.batch(vec![Op::Get(Get::new(&["n"], "k")), Op::Search(Search::new(&["n"]))]).unwrap().len(),
        2
    );
    let again = db.store(cfg()).unwrap();
    assert!(again.get(&["n"], "k").unwrap().is_some());
    assert!(t.elapsed() < Duration::from_millis(400), "{:?}", t.elapsed());
    writer.execute_batch("COMMIT").unwrap();
    // With the lock free again, reads refresh.
    std::thread::sleep(Duration::from_millis(1100));
    let after = s.get(&["n"], "k").unwrap().unwrap().expires_at.unwrap();
    assert!(after > before);
}

/// The schema rows and contents of a Python `SqliteSaver`'s two tables.
fn saver_tables(path: &std::path::Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut out: Vec<String> = conn
        .prepare(
            "SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master \
             WHERE tbl_name IN ('checkpoints', 'writes') ORDER BY name",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for table in ["checkpoints", "writes"] {
        let rows: Vec<String> = conn
            .prepare(&format!("SELECT quote(thread_id) || quote(checkpoint_id) || quote(type) FROM {table}"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        out.extend(rows);
    }
    out
}

/// A Python file holding both a `SqliteSaver` (tables `checkpoints` and
/// `writes`, no migration table) and a `SqliteStore`: its Store half opens
/// and reads, its saver tables are left exactly as they were, and the
/// checkpointer refuses the file with a typed error instead of misreading
/// Python's rows.
#[test]
fn the_store_half_of_a_python_saver_and_store_file_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("python_both.sqlite");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/python_store.sqlite");
    std::fs::copy(fixture, &path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
               checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, \
               PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)); \
             CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
               checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, \
               type TEXT, value BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)); \
             INSERT INTO checkpoints VALUES ('t', '', '1ef', NULL, 'msgpack', x'80', x'7b7d'); \
             INSERT INTO writes VALUES ('t', '', '1ef', 'task', 0, 'c', 'msgpack', x'01');",
        )
        .unwrap();
    let before = saver_tables(&path);
    let db = Db::open(&path).unwrap();
    let store = db.store(StoreConfig::new()).unwrap();
    let item = store.get(&["users", "alice", "memories"], "m1").unwrap();
    assert!(item.is_some());
    assert!(!store.search(Search::new(&["docs"])).unwrap().is_empty());
    store.put(&["rust"], "k", json!({"written": "by agentstate"})).unwrap();
    assert!(store.get(&["rust"], "k").unwrap().is_some());
    let saver = db.checkpointer();
    let err = saver.get_tuple(&agentstate::CheckpointConfig::thread("t")).unwrap_err();
    assert!(matches!(err, Error::NotAgentstate(_)), "{err}");
    assert!(err.to_string().contains("SqliteSaver"), "{err}");
    assert!(saver.delete_thread("t").is_err());
    // Inspection sees the Store half and no agentstate checkpoints.
    assert!(db.threads().unwrap().is_empty());
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    let stats = db.stats().unwrap();
    assert!(stats.store.items > 0, "{stats:?}");
    drop((store, saver, db));
    let ro = Db::builder().read_only(true).open(&path).unwrap();
    assert!(ro.store(StoreConfig::new()).unwrap().get(&["rust"], "k").unwrap().is_some());
    drop(ro);
    assert_eq!(saver_tables(&path), before, "the saver's tables are untouched");
    let ours: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('checkpoint_migrations', 'checkpoint_blobs', \
             'checkpoint_writes')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ours, 0, "no checkpoint table of ours is mixed into the saver's");
}

/// A store opened before another handle reindexed the file to another
/// embedder writes no vector of the old one and ranks no query against the
/// new vectors: `EmbedderMismatch` for its puts with vectors and its
/// searches (which read the vectors), nothing written. Gets and puts
/// without vectors still work.
#[test]
fn a_store_opened_before_another_handles_reindex_is_refused_where_vectors_matter() {
    let (_d, path, db) = indexed_file();
    let old =
        db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    let other = Db::open(&path).unwrap();
    let new_index = IndexConfig::new(Literal(2)).with_fields(["v"]);
    other.reindex_store(StoreConfig::new().with_index(new_index)).unwrap();
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/2"));
    let before = vector_count(&path);

    let put = old.put(&["n"], "k3", json!({"v": "0 0 1"}));
    assert!(matches!(&put, Err(Error::EmbedderMismatch { stored, .. }) if stored == "literal/2"), "{put:?}");
    let search = old.search(Search::new(&["n"]).query("1 0 0"));
    assert!(matches!(&search, Err(Error::EmbedderMismatch { .. })), "{search:?}");
    assert_eq!(vector_count(&path), before);
    assert!(old.get(&["n"], "k3").unwrap().is_none());

    assert!(old.get(&["n"], "k1").unwrap().is_some());
    assert!(matches!(old.search(Search::new(&["n"])), Err(Error::EmbedderMismatch { .. })));
    old.put_with(agentstate::store::Put::new(&["n"], "plain", json!({"x": 1})).no_index()).unwrap();
    assert_eq!(vector_count(&path), before);
    // The same handle opened again with the new embedder works.
    let fresh =
        db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(2)).with_fields(["v"]))).unwrap();
    fresh.put(&["n"], "k3", json!({"v": "0 1"})).unwrap();
    assert_eq!(keys(&fresh.search(Search::new(&["n"]).query("0 1")).unwrap())[0], "k3");
}

/// A batch that dirties more pages than SQLite's page cache holds, and
/// writes pages again after dirtying many others (every item rewritten, in
/// another order than it was written), is in the files a kill leaves once
/// `batch` returns: copied while the `Db` is still open (no `-shm`, so
/// SQLite recovers from the log alone).
#[test]
fn a_batch_larger_than_the_page_cache_survives_a_kill() {
    let n = 2500;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.db");
    let db = Db::open(&p).unwrap();
    let store = db.store(StoreConfig::default()).unwrap();
    let keys: Vec<usize> = (0..n).map(|i| (i * 7919) % n).collect();
    for chunk in keys.chunks(50) {
        let ops = chunk
            .iter()
            .map(|k| {
                Op::Put(agentstate::store::Put::new(
                    &["n"],
                    format!("k{k:05}"),
                    json!({"v": "a".repeat(1500)}),
                ))
            })
            .collect();
        store.batch(ops).unwrap();
    }
    let ops = (0..n)
        .map(|k| {
            Op::Put(agentstate::store::Put::new(&["n"], format!("k{k:05}"), json!({"v": "b".repeat(1500)})))
        })
        .collect();
    store.batch(ops).unwrap();
    let copy = tempfile::tempdir().unwrap();
    for f in ["a.db", "a.db-wal"] {
        std::fs::copy(dir.path().join(f), copy.path().join(f)).unwrap();
    }
    drop((store, db));
    let c = Connection::open(copy.path().join("a.db")).unwrap();
    let new: i64 =
        c.query_row("SELECT count(*) FROM store WHERE value LIKE '%bbb%'", [], |r| r.get(0)).unwrap();
    assert_eq!(new, n as i64, "the acknowledged batch is in the files");
    assert_eq!(c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)).unwrap(), "ok");
}
