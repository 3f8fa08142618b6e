//! The inspection API: thread listing, history without values, id
//! resolution, statistics, the typed integrity check and read-only opening.

use std::ops::ControlFlow;
use std::path::Path;

mod common;

use agentstate::checkpoint::Retention;
use agentstate::inspect::{Finding, HistoryQuery, IdMatch, Severity};
use agentstate::store::IndexConfig;
use agentstate::{CheckpointConfig, Db, StoreConfig};
use common::chain;
use serde_json::json;

fn file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    (dir, path)
}

#[test]
fn threads_lists_each_thread_newest_activity_first() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    chain(&saver, "old", "", 2);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let ids = chain(&saver, "new", "", 3);
    chain(&saver, "new", "child:1", 1);
    saver
        .put_writes(&CheckpointConfig::thread("new").at(ids[2].clone()), &[("x", json!(1))], "t", "")
        .unwrap();

    let threads = db.threads().unwrap();
    assert_eq!(threads.iter().map(|t| t.thread_id.as_str()).collect::<Vec<_>>(), ["new", "old"]);
    let new = &threads[0];
    assert_eq!(new.checkpoints, 4);
    assert_eq!(new.namespaces, ["", "child:1"]);
    assert_eq!(new.pending_writes, 1);
    assert_eq!(new.latest_checkpoint_id, ids[2], "the root namespace's newest checkpoint");
    assert!(new.last_update >= threads[1].last_update);
}

#[test]
fn history_streams_entries_without_values_with_limit_and_before() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let ids = chain(&saver, "t", "", 5);

    let all = saver.history(&HistoryQuery::thread("t")).unwrap();
    let got: Vec<&str> = all.iter().map(|e| e.checkpoint_id.as_str()).collect();
    let mut newest_first: Vec<&str> = ids.iter().map(String::as_str).collect();
    newest_first.reverse();
    assert_eq!(got, newest_first);
    assert_eq!(all[0].parent_checkpoint_id.as_deref(), Some(ids[3].as_str()));
    assert_eq!(all[0].metadata.step(), Some(4));
    assert_eq!(all[0].metadata.source(), Some("loop"));
    assert!(!all[0].created_at.is_empty());

    let page = saver.history(&HistoryQuery::thread("t").before(ids[3].clone()).limit(2)).unwrap();
    assert_eq!(
        page.iter().map(|e| e.checkpoint_id.clone()).collect::<Vec<_>>(),
        [ids[2].clone(), ids[1].clone()]
    );

    let oldest = saver.history(&HistoryQuery::thread("t").namespace("").oldest_first().limit(1)).unwrap();
    assert_eq!(oldest[0].checkpoint_id, ids[0]);

    let mut seen = 0;
    saver
        .history_each(&HistoryQuery::thread("t"), |_| {
            seen += 1;
            if seen == 2 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(seen, 2, "the callback stops the walk");
    assert!(saver.history(&HistoryQuery::thread("nope")).unwrap().is_empty());
    assert!(saver.history(&HistoryQuery::thread("")).is_err());

    let entry = saver.history_entry(&CheckpointConfig::thread("t").at(ids[1].clone())).unwrap().unwrap();
    assert_eq!(entry.checkpoint_id, ids[1]);
    let latest = saver.history_entry(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(latest.checkpoint_id, ids[4]);
}

#[test]
fn resolve_id_finds_a_unique_part_and_reports_ambiguity() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let ids = chain(&saver, "t", "", 3);
    assert_eq!(saver.resolve_id("t", "", &ids[1]).unwrap(), IdMatch::One(ids[1].clone()));
    let tail = &ids[2][ids[2].len() - 12..];
    assert_eq!(saver.resolve_id("t", "", tail).unwrap(), IdMatch::One(ids[2].clone()));
    assert_eq!(saver.resolve_id("t", "", "-").unwrap(), IdMatch::Ambiguous { matches: 3 });
    assert_eq!(saver.resolve_id("t", "", "zzzz").unwrap(), IdMatch::None);
    assert!(saver.resolve_id("t", "", "").is_err());
    assert!(saver.has_thread("t").unwrap());
    assert!(!saver.has_thread("u").unwrap());
    let counts = saver.thread_counts("t").unwrap();
    assert_eq!((counts.checkpoints, counts.blobs, counts.pending_writes), (3, 3, 0));
}

#[test]
fn check_reports_corruption_and_leftovers_by_kind() {
    let (_dir, path) = file();
    {
        let db = Db::open(&path).unwrap();
        chain(&db.checkpointer(), "t", "", 3);
        let store = db
            .store(StoreConfig::default().with_index(IndexConfig::hashed(16).unwrap().with_fields(["text"])))
            .unwrap();
        store.put(&["docs"], "a", json!({"text": "hello"})).unwrap();
        let report = db.check().unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert_eq!((report.checkpoints, report.blobs, report.items, report.vectors), (3, 3, 1, 1));
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
         DELETE FROM checkpoint_blobs WHERE version = (SELECT MIN(version) FROM checkpoint_blobs);
         INSERT INTO store_vectors (prefix, key, field_name, embedding)
             SELECT 'ghost', 'k', field_name, embedding FROM store_vectors;",
    )
    .unwrap();
    drop(conn);
    let db = Db::builder().read_only(true).open(&path).unwrap();
    let report = db.check().unwrap();
    let missing = report.findings.iter().filter(|f| matches!(f, Finding::MissingBlob { .. })).count();
    assert_eq!(missing, 1, "{:?}", report.findings);
    assert!(report.findings.iter().all(|f| !matches!(f, Finding::UnreferencedBlobs { .. })));
    let orphan = report.findings.iter().find(|f| matches!(f, Finding::OrphanVectors { .. })).unwrap();
    assert!(
        orphan.to_string().starts_with("vectors (text) of item ghost/k, which does not exist"),
        "{orphan}"
    );
    assert_eq!(orphan.severity(), Severity::Leftover, "Python's SqliteStore leaves these; reads skip them");
    assert!(!report.is_ok());
    assert_eq!(
        report.findings.iter().find(|f| matches!(f, Finding::MissingBlob { .. })).unwrap().severity(),
        Severity::Corruption
    );
}

#[test]
fn stats_counts_rows_blobs_schema_and_the_recorded_embedder() {
    let (_dir, path) = file();
    let db = Db::open(&path).unwrap();
    chain(&db.checkpointer(), "t", "", 2);
    db.store(StoreConfig::default().with_index(IndexConfig::hashed(16).unwrap().with_fields(["text"])))
        .unwrap()
        .put(&["docs"], "a", json!({"text": "hello"}))
        .unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.checkpoints.checkpoints, 2);
    assert_eq!(s.checkpoints.threads, 1);
    assert_eq!(s.checkpoints.blobs, 2);
    assert_eq!(s.checkpoints.unreferenced_blobs, 0);
    assert_eq!(s.store.items, 1);
    assert_eq!(s.store.vectors, 1);
    assert_eq!(s.store.vector_dims[0].dims, 16);
    assert_eq!(s.store.embedder.as_ref().unwrap().to_string(), "agentstate-hash-v1/16");
    assert_eq!(s.store.embedder.as_ref().unwrap().dims, Some(16));
    assert!(s.file.bytes > 0 && s.file.pages > 0);
    assert!(s.schema.iter().all(|v| v.version == Some(v.supported)), "{:?}", s.schema);
    assert_eq!(s.tables[0].name, "checkpoints");
    assert_eq!(s.tables[0].rows, 2);
    let info = db.item_info(&["docs"], "a").unwrap().unwrap();
    assert_eq!(info.vector_fields, ["text"]);
    assert!(!info.expired);
    assert!(db.item_info(&["docs"], "b").unwrap().is_none());
    assert!(db.item_info(&[], "b").is_err(), "an invalid namespace is an error");
    assert_eq!(db.vector_field_names().unwrap(), ["text"]);
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn read_only_open_changes_nothing_and_refuses_writes() {
    let (dir, path) = file();
    {
        let db = Db::open(&path).unwrap();
        chain(&db.checkpointer(), "t", "", 2);
    }
    let before = snapshot(dir.path());
    assert_eq!(
        before.len(),
        1,
        "only the database file: {:?}",
        before.iter().map(|b| &b.0).collect::<Vec<_>>()
    );
    {
        let db = Db::builder().read_only(true).open(&path).unwrap();
        assert_eq!(db.threads().unwrap().len(), 1);
        db.check().unwrap();
        db.stats().unwrap();
        assert!(db.checkpointer().delete_thread("t").is_err(), "a read-only Db refuses writes");
    }
    assert_eq!(snapshot(dir.path()), before, "no byte changed, no -wal/-shm left behind");

    let missing = dir.path().join("missing.db");
    assert!(Db::builder().read_only(true).open(&missing).is_err());
    assert!(!missing.exists(), "a read-only open creates nothing");

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let e = Db::builder().read_only(true).open(&empty).unwrap_err();
    assert!(matches!(e, agentstate::Error::NotAgentstate(_)), "{e}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
}

#[test]
fn delta_bases_count_as_needed_not_unreferenced() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    chain(&saver, "t", "", 12);
    let removed = saver.apply_retention(&Retention::keep_last(1)).unwrap();
    assert_eq!(removed, 11);
    let s = db.stats().unwrap();
    assert!(s.checkpoints.delta_bases > 0, "the kept checkpoint's list is a delta: {:?}", s.checkpoints);
    assert_eq!(s.checkpoints.unreferenced_blobs, 0, "{:?}", s.checkpoints);
    let report = db.check().unwrap();
    assert!(
        report.findings.iter().all(|f| !matches!(f, Finding::UnreferencedBlobs { .. })),
        "{:?}",
        report.findings
    );
    let latest = saver.get(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(latest.channel_values["messages"].as_list().unwrap().len(), 12);
}

#[test]
fn repair_orphan_vectors_deletes_only_vectors_without_their_item() {
    let (_dir, path) = file();
    let db = Db::open(&path).unwrap();
    let store = db
        .store(StoreConfig::default().with_index(IndexConfig::hashed(16).unwrap().with_fields(["text"])))
        .unwrap();
    store.put(&["docs"], "a", json!({"text": "hello"})).unwrap();
    store.put(&["docs"], "b", json!({"text": "world"})).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM store WHERE key = 'b';")
        .unwrap();
    assert_eq!(db.repair_orphan_vectors().unwrap(), 1);
    assert_eq!(db.repair_orphan_vectors().unwrap(), 0);
    assert!(db.check().unwrap().findings.is_empty());
    assert_eq!(db.store_counts().unwrap().vectors, 1);
}
