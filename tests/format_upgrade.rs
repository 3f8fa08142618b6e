//! A file written by the previous checkpoint format (checkpoint_migrations
//! 5: full-length versions and an `id` in every checkpoint row, pending
//! writes in a rowid table) opens, is upgraded in place, and reads back
//! exactly as that version read it (docs/format.md, "Checkpoint rows").
//!
//! The fixture `tests/fixtures/format/v5.sqlite` and what that version listed
//! from it, `v5.json`, were written by the commit before migration 6: 38
//! checkpoints (a thread of 31 with message deltas, a fork, a subgraph
//! namespace, LangGraph `put`s with integer versions and with string
//! versions that start with `~`), each with its pending writes.

use agentstate::{CheckpointConfig, Db, ListQuery};
use serde_json::{json, Value};

fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    std::fs::copy("tests/fixtures/format/v5.sqlite", &path).unwrap();
    (dir, path)
}

fn listed(db: &Db) -> Vec<Value> {
    db.checkpointer()
        .list(&ListQuery::all())
        .unwrap()
        .into_iter()
        .map(|t| {
            json!({
                "config": [t.config.thread_id, t.config.checkpoint_ns, t.config.checkpoint_id],
                "parent": t.parent_config.map(|p| p.checkpoint_id),
                "checkpoint": t.checkpoint,
                "metadata": t.metadata,
                "pending_writes": t.pending_writes,
            })
        })
        .collect()
}

fn sql<T: rusqlite::types::FromSql>(path: &std::path::Path, q: &str) -> T {
    rusqlite::Connection::open(path).unwrap().query_row(q, [], |r| r.get(0)).unwrap()
}

#[test]
fn a_previous_format_file_reads_back_as_it_was_written() {
    let (_dir, path) = fixture();
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string("tests/fixtures/format/v5.json").unwrap()).unwrap();
    let db = Db::open(&path).unwrap();
    let now = listed(&db);
    assert_eq!(now.len(), 38);
    assert_eq!(now, expected);
    drop(db);
    assert_eq!(sql::<i64>(&path, "SELECT max(v) FROM checkpoint_migrations"), 6);
    let ddl: String = sql(&path, "SELECT sql FROM sqlite_master WHERE name = 'checkpoint_writes'");
    assert!(ddl.contains("WITHOUT ROWID"), "{ddl}");
    assert_eq!(sql::<i64>(&path, "SELECT count(*) FROM checkpoint_writes"), 60);
    // Old rows stay as they were (no `type`); the upgraded file reads the
    // same after a reopen.
    assert_eq!(sql::<i64>(&path, "SELECT count(*) FROM checkpoints WHERE type IS NULL"), 38);
    assert_eq!(listed(&Db::open(&path).unwrap()), expected);
}

#[test]
fn an_upgraded_thread_continues_in_the_compact_format() {
    let (_dir, path) = fixture();
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    // The newest checkpoint of "t" is the fork (12 messages).
    let head = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(head.checkpoint.channel_values["messages"].as_list().unwrap().len(), 12);
    let next = saver
        .step(&head)
        .parent_writes("task", "~path", &[("n", json!(99))])
        .append("messages", [json!("after the upgrade")])
        .set("n", json!(99))
        .commit()
        .unwrap();
    let back = saver.get_tuple(&next.config).unwrap().unwrap();
    assert_eq!(back.checkpoint, next.checkpoint);
    assert_eq!(back.checkpoint.channel_values["messages"].as_list().unwrap().len(), 13);
    assert_eq!(saver.get_tuple(&head.config).unwrap().unwrap().pending_writes.len(), 1);
    // The new row is compact: no zero padding, no id; and the integrity
    // check finds every blob of old and new rows.
    drop((saver, db));
    let stored: String = sql(&path, "SELECT checkpoint FROM checkpoints WHERE type = 'compact'");
    assert!(!stored.contains("00000000") && !stored.contains(&next.checkpoint.id), "{stored}");
    let report = Db::open(&path).unwrap().check().unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.checkpoints, 39);
}

/// Versions in the compact format come back exactly as written, also the
/// ones that look like its own encoding (docs/format.md).
#[test]
fn every_kind_of_version_round_trips_through_a_compact_row() {
    use agentstate::checkpoint::{ChannelVersion, ChannelVersions};
    use agentstate::{Checkpoint, Metadata};
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let versions = [
        ChannelVersion::Str(format!("{:032}.0.5", 7)),
        ChannelVersion::Str(format!("{:032}.1", 0)),
        ChannelVersion::Str("~7.0.5".into()),
        ChannelVersion::Str("~".into()),
        ChannelVersion::Str("7.x".into()),
        ChannelVersion::Int(i64::MAX),
        ChannelVersion::Int(-1),
    ];
    let mut cp = Checkpoint::with_id(agentstate::checkpoint::uuid6(Some(0)).to_string());
    let mut seen = ChannelVersions::new();
    for (i, v) in versions.iter().enumerate() {
        cp.channel_versions.insert(format!("c{i}"), v.clone());
        cp.channel_values.insert(format!("c{i}"), json!(i).into());
        seen.insert(format!("c{i}"), v.clone());
    }
    cp.versions_seen.insert("node".into(), seen);
    let new_versions = cp.channel_versions.clone();
    let config = saver
        .put(&CheckpointConfig::thread("t"), &cp, &Metadata::new().with("step", -1), &new_versions)
        .unwrap();
    let back = saver.get_tuple(&config).unwrap().unwrap().checkpoint;
    assert_eq!(back.channel_versions, cp.channel_versions);
    assert_eq!(back.versions_seen, cp.versions_seen);
    assert_eq!(back.id, cp.id);
}
