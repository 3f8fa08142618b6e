//! `agentstate::import::import_sqlite_saver` and `agentstate import SRC DST`:
//! a file LangGraph's SqliteSaver and SqliteStore wrote
//! (`tests/fixtures/import/`, made by `tools/sqlite_saver_fixture/make.py`)
//! becomes an agentstate file with the same history, byte for byte where
//! bytes were stored; synthetic SqliteSaver files (written here with the
//! SqliteSaver schema) cover growing lists, conflicting versions and
//! damaged rows; every failure leaves no destination and no temporary file,
//! and the source is never changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentstate::checkpoint::TypedBytes;
use agentstate::import::{import_sqlite_saver, ImportReport};
use agentstate::store::{Embedder, IndexConfig, Search};
use agentstate::{CheckpointConfig, Db, Error, JsonPlusSerializer, ListQuery, Serializer, StoreConfig};
use rusqlite::{params, Connection};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_agentstate");

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import/sqlite_saver.sqlite")
}

/// A copy of the fixture in a fresh directory.
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("langgraph.sqlite");
    std::fs::copy(fixture(), &src).unwrap();
    (dir, src)
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn sqlite_value_text(v: rusqlite::types::ValueRef<'_>) -> Option<String> {
    match v {
        rusqlite::types::ValueRef::Text(t) => Some(String::from_utf8(t.to_vec()).unwrap()),
        rusqlite::types::ValueRef::Null => None,
        other => panic!("not text: {other:?}"),
    }
}

/// A checkpoint row of a SqliteSaver file.
struct SrcCheckpoint {
    thread: String,
    ns: String,
    id: String,
    parent: Option<String>,
    checkpoint: Vec<u8>,
    metadata: Value,
}

fn src_checkpoints(src: &Path) -> Vec<SrcCheckpoint> {
    let conn = Connection::open(src).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata \
             FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            assert_eq!(r.get::<_, String>(4)?, "msgpack");
            Ok(SrcCheckpoint {
                thread: r.get(0)?,
                ns: r.get(1)?,
                id: r.get(2)?,
                parent: r.get(3)?,
                checkpoint: r.get(5)?,
                metadata: serde_json::from_slice(&r.get::<_, Vec<u8>>(6)?).unwrap(),
            })
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows
}

/// (thread, ns, checkpoint, task_id, idx, channel, type, bytes, task_path),
/// sorted as get_tuple returns them (LangGraph's writes_sort_key), from the SqliteSaver `writes` table or agentstate's
/// `checkpoint_writes`.
type WriteRow = (String, String, String, String, i64, String, Option<String>, Vec<u8>, String);

fn write_rows(path: &Path, table: &str, blob: &str) -> Vec<WriteRow> {
    let conn = Connection::open(path).unwrap();
    if table == "checkpoint_writes" {
        return packed_write_rows(&conn);
    }
    let mut stmt = conn
        .prepare(&format!(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, {blob}, task_path \
             FROM {table} ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_path, task_id, idx"
        ))
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                sqlite_value_text(r.get_ref(6)?),
                r.get(7)?,
                r.get(8)?,
            ))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows
}

/// agentstate's `checkpoint_writes`: one row per task, its writes packed as
/// a msgpack array of `[idx, channel, type or nil, bytes]` (docs/format.md),
/// read here with rmpv.
fn packed_write_rows(conn: &Connection) -> Vec<WriteRow> {
    let mut stmt = conn
        .prepare(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes FROM checkpoint_writes \
             ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_path, task_id",
        )
        .unwrap();
    let tasks = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Vec<u8>>(5)?,
            ))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    let mut rows = vec![];
    for (thread, ns, id, task, path, packed) in tasks {
        let rmpv::Value::Array(entries) = rmpv::decode::read_value(&mut packed.as_slice()).unwrap() else {
            panic!("packed writes are an array")
        };
        for entry in entries {
            let rmpv::Value::Array(e) = entry else { panic!("an entry is an array") };
            rows.push((
                thread.clone(),
                ns.clone(),
                id.clone(),
                task.clone(),
                e[0].as_i64().unwrap(),
                e[1].as_str().unwrap().to_string(),
                e[2].as_str().map(str::to_string),
                e[3].as_slice().unwrap().to_vec(),
                path.clone(),
            ));
        }
    }
    rows
}

/// The raw msgpack bytes of each `channel_values` entry of a checkpoint
/// (re-encoded by rmpv, after checking that rmpv re-encodes the whole
/// checkpoint to the very bytes Python wrote).
fn raw_channel_values(checkpoint: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let v = rmpv::decode::read_value(&mut &checkpoint[..]).unwrap();
    let mut again = Vec::new();
    rmpv::encode::write_value(&mut again, &v).unwrap();
    assert_eq!(again, checkpoint, "rmpv re-encodes Python's msgpack exactly");
    let rmpv::Value::Map(entries) = v else { panic!("a checkpoint is a map") };
    let mut out = BTreeMap::new();
    for (k, val) in entries {
        if k.as_str() == Some("channel_values") {
            let rmpv::Value::Map(values) = val else { panic!("channel_values is a map") };
            for (ch, value) in values {
                let mut bytes = Vec::new();
                rmpv::encode::write_value(&mut bytes, &value).unwrap();
                out.insert(ch.as_str().unwrap().to_string(), bytes);
            }
        }
    }
    out
}

fn is_inline(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(_) | Value::String(_)) || v.as_i64().is_some() || v.is_f64()
}

/// Every checkpoint of `src` reads back from `dst` with the same parent,
/// metadata, checkpoint (decoded), channel value bytes and pending writes;
/// every write row is stored with its idx, type, bytes and task path.
fn assert_same_history(src: &Path, dst: &Path) {
    let db = Db::builder().read_only(true).open(dst).unwrap();
    let saver = db.checkpointer();
    let checkpoints = src_checkpoints(src);
    assert!(!checkpoints.is_empty());
    let src_writes = write_rows(src, "writes", "value");
    for c in &checkpoints {
        let config = CheckpointConfig::thread(c.thread.as_str()).ns(c.ns.as_str()).at(c.id.as_str());
        let t = saver.get_tuple(&config).unwrap().unwrap_or_else(|| panic!("{} missing", c.id));
        assert_eq!(t.parent_config.and_then(|p| p.checkpoint_id), c.parent, "parent of {}", c.id);
        assert_eq!(Value::Object(t.metadata.0.clone()), c.metadata, "metadata of {}", c.id);
        let mut expected = JsonPlusSerializer.loads_typed("msgpack", &c.checkpoint).unwrap();
        // agentstate leaves out an updated_channels that is None (LangGraph
        // reads both with .get()).
        if expected["updated_channels"].is_null() {
            expected.as_object_mut().unwrap().remove("updated_channels");
        }
        assert_eq!(serde_json::to_value(&*t.checkpoint).unwrap(), expected, "checkpoint {}", c.id);

        let e = saver.get_tuple_encoded(&config).unwrap().unwrap();
        let raw = raw_channel_values(&c.checkpoint);
        assert_eq!(
            raw.keys().collect::<Vec<_>>(),
            e.checkpoint
                .channel_values
                .keys()
                .chain(e.values.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>(),
            "channels of {}",
            c.id
        );
        for (ch, bytes) in &raw {
            let decoded = JsonPlusSerializer.loads_typed("msgpack", bytes).unwrap();
            if is_inline(&decoded) {
                assert_eq!(e.checkpoint.channel_values[ch].to_value(), decoded, "inline {ch} of {}", c.id);
            } else {
                assert_eq!(
                    e.values[ch],
                    TypedBytes::new("msgpack", bytes.clone()),
                    "bytes of {ch} of {}",
                    c.id
                );
            }
        }
        let want: Vec<(String, String, Option<String>, Vec<u8>)> = src_writes
            .iter()
            .filter(|w| w.0 == c.thread && w.1 == c.ns && w.2 == c.id)
            .map(|w| (w.3.clone(), w.5.clone(), w.6.clone(), w.7.clone()))
            .collect();
        let got: Vec<(String, String, Option<String>, Vec<u8>)> = e
            .pending_writes
            .iter()
            .map(|w| (w.task_id.clone(), w.channel.clone(), Some(w.value.tag.clone()), w.value.bytes.clone()))
            .collect();
        assert_eq!(got, want, "pending writes of {}", c.id);
    }
    // Per thread and namespace, list gives the same ids newest first.
    let mut threads: Vec<&str> = checkpoints.iter().map(|c| c.thread.as_str()).collect();
    threads.dedup();
    for thread in threads {
        let mut want: Vec<&str> =
            checkpoints.iter().filter(|c| c.thread == thread).map(|c| c.id.as_str()).collect();
        want.sort_unstable_by(|a, b| b.cmp(a));
        let got: Vec<String> = saver
            .list(&ListQuery::thread(thread))
            .unwrap()
            .into_iter()
            .map(|t| t.config.checkpoint_id.unwrap())
            .collect();
        assert_eq!(got, want, "history of {thread}");
    }
    // Every write row, idx and task path included.
    assert_eq!(write_rows(dst, "checkpoint_writes", "blob"), src_writes);
}

/// The fixture's embedder (tools/sqlite_saver_fixture/make.py).
struct FixtureEmbed;

impl Embedder for FixtureEmbed {
    fn name(&self) -> &str {
        "fixture"
    }
    fn dims(&self) -> usize {
        4
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, agentstate::BoxError> {
        Ok(texts.iter().map(|t| embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, agentstate::BoxError> {
        Ok(embed(text))
    }
}

fn embed(t: &str) -> Vec<f32> {
    let n = |c: char| t.chars().filter(|x| *x == c).count() as f32;
    vec![1.0 + n('a'), n('e'), n('i'), (t.chars().count() % 7) as f32]
}

#[test]
fn a_langgraph_file_imports_with_its_whole_history_and_store() {
    let (dir, src) = fixture_copy();
    let before = std::fs::read(&src).unwrap();
    let dst = dir.path().join("agent.db");
    let report = import_sqlite_saver(&src, &dst).unwrap();

    // The source is untouched and nothing but the destination was left.
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_eq!(listing(dir.path()), ["agent.db", "langgraph.sqlite"]);

    let conn = Connection::open(&src).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64;
    assert_eq!(report.checkpoints, count("SELECT COUNT(*) FROM checkpoints"));
    assert_eq!(report.writes, count("SELECT COUNT(*) FROM writes"));
    assert_eq!(report.threads, 5);
    assert_eq!(
        report.namespaces,
        count("SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints)")
    );
    assert_eq!(report.namespaces, 6, "the subgraph has its own namespace");
    assert_eq!(report.store_items, 4);
    assert_eq!(report.store_vectors, 3);
    assert_eq!(report.orphan_vectors_skipped, 1, "the deleted item's vector");
    assert_eq!(report.source_bytes, before.len() as u64);
    assert_eq!(report.destination_bytes, std::fs::metadata(&dst).unwrap().len());
    assert!(!report.merged);
    drop(conn);

    assert_same_history(&src, &dst);

    // The file passes agentstate's own check.
    let db = Db::open(&dst).unwrap();
    let check = db.check().unwrap();
    assert!(check.findings.is_empty(), "{:?}", check.findings);

    // Imported rows are dated by their checkpoint's ts.
    let conn = Connection::open(&dst).unwrap();
    let all = db.checkpointer().list(&agentstate::ListQuery::all()).unwrap();
    assert!(!all.is_empty());
    for t in all {
        let dated: bool = conn
            .query_row(
                "SELECT created_at = strftime('%Y-%m-%d %H:%M:%f', ?1) FROM checkpoints WHERE checkpoint_id = ?2",
                [&t.checkpoint.ts, &t.checkpoint.id],
                |r| r.get(0),
            )
            .unwrap();
        assert!(dated, "{} {}", t.checkpoint.id, t.checkpoint.ts);
    }

    // The Store: Python recorded no embedder, so the vectors must be
    // adopted (or reindexed) before a store with an index opens.
    let index = || IndexConfig::new(FixtureEmbed).with_fields(["text"]);
    assert!(matches!(
        db.store(StoreConfig::new().with_index(index())),
        Err(Error::UnrecordedEmbedder { vectors: 3, .. })
    ));
    let store = db.store(StoreConfig::new().with_index(index().with_adopt_existing_vectors(true))).unwrap();
    assert_eq!(
        store.get(&["users", "alice"], "m1").unwrap().unwrap().value,
        json!({"text": "likes hiking", "score": 0.9})
    );
    assert_eq!(
        store.get(&["docs"], "readme").unwrap().unwrap().value,
        json!({"text": "one file", "version": 1})
    );
    assert!(store.get(&["docs"], "gone").unwrap().is_none());
    let hits = store.search(Search::new(&["users"]).query("likes hiking")).unwrap();
    assert_eq!(hits[0].item.namespace.labels(), ["users", "alice"]);
    assert_eq!(hits[0].item.key, "m1");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6, "the stored vector is Python's");
}

#[test]
fn the_fixture_file_itself_is_read_without_any_change() {
    // The committed fixture (a WAL-mode file without -wal/-shm, as a closed
    // SqliteSaver leaves it) is imported in place: not a byte changes and
    // no -wal/-shm file appears beside it.
    let src = fixture();
    let dir = src.parent().unwrap().to_path_buf();
    let before = (std::fs::read(&src).unwrap(), listing(&dir));
    let out = tempfile::tempdir().unwrap();
    let report = import_sqlite_saver(&src, out.path().join("a.db")).unwrap();
    assert_eq!(report.checkpoints, 36);
    assert_eq!((std::fs::read(&src).unwrap(), listing(&dir)), before);
}

#[test]
fn a_source_that_python_is_writing_is_read_as_one_snapshot_and_left_alone() {
    let (dir, src) = fixture_copy();
    // A writer that keeps the file open with uncheckpointed frames in its WAL.
    let writer = Connection::open(&src).unwrap();
    writer.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
    writer
        .execute(
            "INSERT INTO checkpoints SELECT 'live', checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, \
             checkpoint, metadata FROM checkpoints WHERE thread_id = 'chat'",
            [],
        )
        .unwrap();
    let wal = dir.path().join("langgraph.sqlite-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);
    let before = (std::fs::read(&src).unwrap(), std::fs::read(&wal).unwrap());

    let dst = dir.path().join("agent.db");
    let report = import_sqlite_saver(&src, &dst).unwrap();
    assert_eq!(report.threads, 6, "the rows in the WAL are read");
    assert_eq!((std::fs::read(&src).unwrap(), std::fs::read(&wal).unwrap()), before);
    let db = Db::open(&dst).unwrap();
    assert_eq!(db.checkpointer().list(&ListQuery::thread("live")).unwrap().len(), 16);
    drop(writer);
}

// ---------------------------------------------------------------------------
// Synthetic SqliteSaver files

/// A file with SqliteSaver's schema (as `SqliteSaver.setup()` creates it).
fn saver_file(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE IF NOT EXISTS checkpoints (
             thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL,
             parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB,
             PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
         CREATE TABLE IF NOT EXISTS writes (
             thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL,
             task_id TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', idx INTEGER NOT NULL,
             channel TEXT NOT NULL, type TEXT, value BLOB,
             PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));",
    )
    .unwrap();
    conn
}

fn s(x: &str) -> rmpv::Value {
    rmpv::Value::from(x)
}

fn map(entries: Vec<(&str, rmpv::Value)>) -> rmpv::Value {
    rmpv::Value::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn version(n: u32) -> rmpv::Value {
    s(&format!("{n:032}.0.5"))
}

fn checkpoint_id(n: u32) -> String {
    format!("1f000000-0000-6000-8000-{n:012}")
}

/// Checkpoint `n` with `values` (channel -> (value, version)).
fn checkpoint(n: u32, values: Vec<(&str, Option<rmpv::Value>, u32)>) -> Vec<u8> {
    let channel_values = values.iter().filter_map(|(ch, v, _)| v.clone().map(|v| (*ch, v))).collect();
    let versions = values.iter().map(|(ch, _, ver)| (*ch, version(*ver))).collect();
    let cp = map(vec![
        ("v", rmpv::Value::from(4)),
        ("ts", s("2025-01-01T00:00:00.000000+00:00")),
        ("id", s(&checkpoint_id(n))),
        ("channel_values", map(channel_values)),
        ("channel_versions", map(versions)),
        ("versions_seen", map(vec![])),
        ("updated_channels", rmpv::Value::Nil),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &cp).unwrap();
    out
}

fn put(conn: &Connection, thread: &str, n: u32, parent: Option<u32>, tag: &str, bytes: &[u8]) {
    conn.execute(
        "INSERT INTO checkpoints VALUES (?1, '', ?2, ?3, ?4, ?5, ?6)",
        params![
            thread,
            checkpoint_id(n),
            parent.map(checkpoint_id),
            tag,
            bytes,
            br#"{"source":"loop","step":1}"#.to_vec()
        ],
    )
    .unwrap();
}

/// Runs an import that must fail: no destination, no temporary file, the
/// source unchanged. Returns the error.
fn fails(src: &Path, dst: &Path) -> Error {
    let dir = dst.parent().unwrap();
    let before_src = std::fs::read(src).ok();
    let before_dir = listing(dir);
    let before_dst = std::fs::read(dst).ok();
    let err = import_sqlite_saver(src, dst).unwrap_err();
    assert_eq!(listing(dir), before_dir, "{err}: files left behind");
    assert_eq!(std::fs::read(src).ok(), before_src, "{err}: the source changed");
    assert_eq!(std::fs::read(dst).ok(), before_dst, "{err}: the destination changed");
    err
}

#[test]
fn a_growing_list_is_stored_as_its_new_elements() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.sqlite");
    let conn = saver_file(&src);
    let mut messages = Vec::new();
    for n in 0..80u32 {
        messages.push(s(&format!("message {n} {}", "lorem ipsum ".repeat(100))));
        let cp = checkpoint(
            n,
            vec![
                ("messages", Some(rmpv::Value::Array(messages.clone())), n + 1),
                ("turn", Some(n.into()), n + 1),
            ],
        );
        put(&conn, "t", n, n.checked_sub(1), "msgpack", &cp);
    }
    drop(conn);
    let dst = dir.path().join("agent.db");
    let report = import_sqlite_saver(&src, &dst).unwrap();
    assert_eq!(report.checkpoints, 80);
    assert_same_history(&src, &dst);
    // Whole states in every row grow quadratically; tails grow linearly.
    assert!(report.destination_bytes * 10 < report.source_bytes, "{report:?}");
    let conn = Connection::open(&dst).unwrap();
    let tails: i64 = conn
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert!(tails > 70, "{tails} incremental blobs");
}

#[test]
fn one_value_per_version_or_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    // The same set encoded in another order at the same version is the same
    // value; a set element is a string, so Python's order varies by process.
    let set = |items: &[&str]| {
        let payload = rmpv::Value::Array(vec![
            s("builtins"),
            s("set"),
            rmpv::Value::Array(items.iter().map(|x| s(x)).collect()),
        ]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &payload).unwrap();
        rmpv::Value::Ext(0, bytes)
    };
    let src = dir.path().join("sets.sqlite");
    let conn = saver_file(&src);
    put(&conn, "t", 1, None, "msgpack", &checkpoint(1, vec![("seen", Some(set(&["a", "b"])), 1)]));
    put(&conn, "t", 2, Some(1), "msgpack", &checkpoint(2, vec![("seen", Some(set(&["b", "a"])), 1)]));
    drop(conn);
    let dst = dir.path().join("sets.db");
    import_sqlite_saver(&src, &dst).unwrap();
    let db = Db::open(&dst).unwrap();
    let t = db.checkpointer().get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(t.checkpoint.channel_values["seen"].to_value()["__ext__"]["args"], json!(["a", "b"]));

    // Two different values for one version cannot both be kept: refused.
    let src = dir.path().join("conflict.sqlite");
    let conn = saver_file(&src);
    put(
        &conn,
        "t",
        1,
        None,
        "msgpack",
        &checkpoint(1, vec![("x", Some(rmpv::Value::Array(vec![1.into()])), 1)]),
    );
    put(
        &conn,
        "t",
        2,
        Some(1),
        "msgpack",
        &checkpoint(2, vec![("x", Some(rmpv::Value::Array(vec![2.into()])), 1)]),
    );
    drop(conn);
    let err = fails(&src, &dir.path().join("conflict.db"));
    assert!(matches!(&err, Error::Conflict(m) if m.contains("channel 'x'")), "{err}");

    // A value at one checkpoint and none at another, for one version: the same.
    let src = dir.path().join("vanished.sqlite");
    let conn = saver_file(&src);
    put(&conn, "t", 1, None, "msgpack", &checkpoint(1, vec![("x", Some(rmpv::Value::Array(vec![])), 1)]));
    put(&conn, "t", 2, Some(1), "msgpack", &checkpoint(2, vec![("x", None, 1)]));
    drop(conn);
    assert!(matches!(fails(&src, &dir.path().join("vanished.db")), Error::Conflict(_)));
}

#[test]
fn sources_that_cannot_be_imported_are_typed_errors_that_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out.db");

    let missing = dir.path().join("missing.sqlite");
    assert!(matches!(fails(&missing, &dst), Error::NotFound(_)));

    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some text that is long enough to look like one".repeat(20),
    )
    .unwrap();
    let err = fails(&text, &dst);
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("not an SQLite database")), "{err}");

    let ours = dir.path().join("ours.db");
    drop(Db::open(&ours).unwrap());
    let err = fails(&ours, &dst);
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("agentstate file already")), "{err}");

    let store_only = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/python_store.sqlite");
    let copy = dir.path().join("store.sqlite");
    std::fs::copy(store_only, &copy).unwrap();
    let err = fails(&copy, &dst);
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("Store-only")), "{err}");

    let other = dir.path().join("other.sqlite");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE checkpoints (id INTEGER); CREATE TABLE writes (x);")
        .unwrap();
    let err = fails(&other, &dst);
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("no `thread_id` column")), "{err}");

    // Rows this importer cannot split, or that are damaged; the bad row
    // comes after good ones, so the failure happens mid-import.
    type Case = (&'static str, &'static str, Vec<u8>, fn(&Error) -> bool);
    let cases: Vec<Case> = vec![
        (
            "pickle",
            "pickle",
            b"\x80\x04".to_vec(),
            |e| matches!(e, Error::InvalidArgument(m) if m.contains("'pickle'")),
        ),
        ("truncated", "msgpack", checkpoint(9, vec![("x", Some(1.into()), 1)])[..20].to_vec(), |e| {
            matches!(e, Error::Corrupt { .. })
        }),
        (
            "no version",
            "msgpack",
            {
                let mut cp = checkpoint(9, vec![("x", Some(1.into()), 1)]);
                // Rename the version's key: a value whose channel has no version.
                let at = cp.windows(2).rposition(|w| w == b"\xa1x").unwrap();
                cp[at + 1] = b'y';
                cp
            },
            |e| matches!(e, Error::InvalidArgument(m) if m.contains("no version")),
        ),
    ];
    for (name, tag, bytes, expected) in cases {
        let src = dir.path().join(format!("{}.sqlite", name.replace(' ', "_")));
        let conn = saver_file(&src);
        for n in 1..=3 {
            put(
                &conn,
                "a",
                n,
                n.checked_sub(1).filter(|p| *p > 0),
                "msgpack",
                &checkpoint(n, vec![("x", Some(n.into()), n)]),
            );
        }
        put(&conn, "b", 9, None, tag, &bytes);
        drop(conn);
        let err = fails(&src, &dst);
        assert!(expected(&err), "{name}: {err}");
    }
}

#[test]
fn destinations_are_checked_and_an_existing_file_takes_the_import_whole_or_not_at_all() {
    let (dir, src) = fixture_copy();

    // The same file, by name or through a hard link.
    assert!(matches!(fails(&src, &src), Error::InvalidArgument(m) if m.contains("same file")));
    let link = dir.path().join("link.sqlite");
    std::fs::hard_link(&src, &link).unwrap();
    assert!(matches!(fails(&src, &link), Error::InvalidArgument(m) if m.contains("same file")));
    std::fs::remove_file(&link).unwrap();

    // A stale WAL beside a missing destination would be read into it.
    let stale = dir.path().join("stale.db-wal");
    std::fs::write(&stale, b"old").unwrap();
    assert!(
        matches!(fails(&src, &dir.path().join("stale.db")), Error::InvalidArgument(m) if m.contains("-wal"))
    );
    std::fs::remove_file(&stale).unwrap();

    // Not an agentstate file, or a SqliteSaver file: refused, unchanged.
    let text = dir.path().join("text.db");
    std::fs::write(&text, "hello").unwrap();
    assert!(matches!(fails(&src, &text), Error::NotAgentstate(_)));
    let other_saver = dir.path().join("saver.sqlite");
    std::fs::copy(&src, &other_saver).unwrap();
    assert!(matches!(fails(&src, &other_saver), Error::NotAgentstate(_)));

    // An agentstate file with other threads and items takes the import.
    let dst = dir.path().join("agent.db");
    {
        let db = Db::open(&dst).unwrap();
        db.checkpointer().start(&CheckpointConfig::thread("mine")).set("x", json!([1, 2])).commit().unwrap();
        db.store(StoreConfig::new()).unwrap().put(&["users", "carol"], "k", json!({"a": 1})).unwrap();
    }
    let report = import_sqlite_saver(&src, &dst).unwrap();
    assert!(report.merged);
    assert_eq!((report.checkpoints, report.store_items), (36, 4));
    assert_same_history(&src, &dst);
    let db = Db::open(&dst).unwrap();
    let threads: Vec<String> = db.threads().unwrap().into_iter().map(|t| t.thread_id).collect();
    assert_eq!(threads.len(), 6);
    assert!(threads.contains(&"mine".to_string()));
    assert!(db.check().unwrap().findings.is_empty());

    // Importing it again would mix histories: refused, nothing added.
    let counts = |db: &Db| {
        let s = db.stats().unwrap();
        (s.checkpoints.checkpoints, s.checkpoints.pending_writes, s.checkpoints.blobs, s.store.items)
    };
    let before = counts(&db);
    drop(db);
    let err = import_sqlite_saver(&src, &dst).unwrap_err();
    assert!(matches!(&err, Error::Conflict(m) if m.contains("already has checkpoints")), "{err}");
    let db = Db::open(&dst).unwrap();
    assert_eq!(counts(&db), before);
    assert_eq!(listing(dir.path()).iter().filter(|n| n.contains(".import-")).count(), 0);

    // Only a Store item in common is a conflict too.
    let dst2 = dir.path().join("agent2.db");
    Db::open(&dst2)
        .unwrap()
        .store(StoreConfig::new())
        .unwrap()
        .put(&["docs"], "readme", json!({"mine": true}))
        .unwrap();
    let err = import_sqlite_saver(&src, &dst2).unwrap_err();
    assert!(matches!(&err, Error::Conflict(m) if m.contains("readme")), "{err}");
    let db2 = Db::open(&dst2).unwrap();
    assert_eq!(db2.stats().unwrap().checkpoints.checkpoints, 0);

    // A file whose vectors are recorded as another embedder's does not take
    // Python's unrecorded ones.
    let dst3 = dir.path().join("agent3.db");
    Db::open(&dst3)
        .unwrap()
        .store(StoreConfig::new().with_index(IndexConfig::hashed(16).unwrap()))
        .unwrap()
        .put(&["notes"], "n", json!({"text": "hello"}))
        .unwrap();
    let err = import_sqlite_saver(&src, &dst3).unwrap_err();
    assert!(matches!(&err, Error::Conflict(m) if m.contains("agentstate-hash-v1")), "{err}");
    assert_eq!(Db::open(&dst3).unwrap().stats().unwrap().checkpoints.checkpoints, 0);

    // A Python SqliteStore file (no checkpoints of its own) takes it.
    let store_file = dir.path().join("python_store.sqlite");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/python_store.sqlite"),
        &store_file,
    )
    .unwrap();
    // It holds a docs/readme too: a conflict, until that item is gone.
    let err = import_sqlite_saver(&src, &store_file).unwrap_err();
    assert!(matches!(&err, Error::Conflict(m) if m.contains("readme")), "{err}");
    Connection::open(&store_file).unwrap().execute("DELETE FROM store WHERE key = 'readme'", []).unwrap();
    // Its own vectors come from an embedder it does not record either.
    let report = import_sqlite_saver(&src, &store_file).unwrap();
    assert!(report.merged);
    assert_same_history(&src, &store_file);
    assert_eq!(
        db2.store(StoreConfig::new()).unwrap().get(&["docs"], "readme").unwrap().unwrap().value,
        json!({"mine": true})
    );
}

// ---------------------------------------------------------------------------
// The CLI

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(args: &[&std::ffi::OsStr]) -> Out {
    let out = Command::new(BIN).args(args).output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn cli_import(src: &Path, dst: &Path, json: bool) -> Out {
    let mut args = vec!["import".as_ref(), src.as_os_str(), dst.as_os_str()];
    if json {
        args.push("--json".as_ref());
    }
    cli(&args)
}

fn cli_fails(out: &Out, code: i32) -> &str {
    assert_eq!(out.code, code, "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    assert!(out.stderr.starts_with("error: ") && !out.stderr.contains("panicked"), "{}", out.stderr);
    out.stderr.trim_end()
}

#[test]
fn cli_imports_a_real_file_and_reports_it() {
    let (dir, src) = fixture_copy();
    let before = std::fs::read(&src).unwrap();
    let dst = dir.path().join("agent.db");
    let out = cli_import(&src, &dst, true);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stderr, "");
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["checkpoints"], 36);
    assert_eq!(report["pending_writes"], 69);
    assert_eq!(report["threads"], 5);
    assert_eq!(report["store_items"], 4);
    assert_eq!(report["store_vectors"], 3);
    assert_eq!(report["merged"], false);
    assert_eq!(report["source_bytes"], before.len());
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_same_history(&src, &dst);

    // The other commands read the result.
    let threads = cli(&[dst.as_os_str(), "threads".as_ref(), "--json".as_ref()]);
    assert_eq!(threads.code, 0, "{}", threads.stderr);
    assert_eq!(serde_json::from_str::<Value>(&threads.stdout).unwrap().as_array().unwrap().len(), 5);
    let check = cli(&[dst.as_os_str(), "check".as_ref()]);
    assert_eq!(check.code, 0, "{}", check.stdout);

    // Text: what was imported, the sizes, and what to do about the vectors.
    let dst2 = dir.path().join("agent2.db");
    let out = cli_import(&src, &dst2, false);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("5 threads (6 namespaces with checkpoints), 36 checkpoints, 69 pending writes"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("store: 4 items, 3 vectors (1 vector of deleted items left out)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("store reindex"), "{}", out.stdout);

    // Again onto the same file: a conflict, nothing written.
    let out = cli_import(&src, &dst, false);
    assert!(cli_fails(&out, 4).contains("already has checkpoints"));
}

#[test]
fn cli_errors_are_one_line_with_their_exit_code_and_leave_nothing() {
    let (dir, src) = fixture_copy();
    let before = listing(dir.path());
    let dst = dir.path().join("out.db");
    cli_fails(&cli_import(&dir.path().join("nope.sqlite"), &dst, false), 3);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "plain text, not SQLite at all; long enough to have a header").unwrap();
    assert!(cli_fails(&cli_import(&text, &dst, false), 2).contains("not a LangGraph SqliteSaver file"));
    std::fs::remove_file(&text).unwrap();
    assert!(cli_fails(&cli_import(&src, &src, true), 2).contains("same file"));
    let out = cli(&["import".as_ref(), src.as_os_str()]);
    assert_eq!(out.code, 2);
    assert_eq!(listing(dir.path()), before);
    let help = cli(&["import".as_ref(), "--help".as_ref()]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("SqliteSaver"));
    let main_help = cli(&["--help".as_ref()]);
    assert!(main_help.stdout.contains("agentstate import SRC DST"));
}

#[test]
fn report_fields_are_plain_numbers() {
    // The report is a plain value: comparable, cloneable, printable.
    let r = ImportReport::default();
    assert_eq!(r.clone(), r);
    assert!(format!("{r:?}").contains("checkpoints"));
}
