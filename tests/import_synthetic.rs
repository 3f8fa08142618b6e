//! `agentstate::import::import_sqlite_saver` on synthetic SqliteSaver files
//! (written here with the SqliteSaver schema): growing lists, conflicting
//! versions, damaged rows and sources, destinations that exist or cannot be
//! written. Every failure leaves no destination and no temporary file, and
//! the source is never changed. (The LangGraph-written fixture and the CLI:
//! `tests/import.rs`.)

use std::path::Path;

use agentstate::import::import_sqlite_saver;
use agentstate::store::IndexConfig;
use agentstate::{CheckpointConfig, Db, Error, StoreConfig};
use rusqlite::{params, Connection};
use serde_json::json;

mod import_support;
use import_support::*;

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
