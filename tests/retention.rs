//! Retention policies and space reclaim (issue #7).

use std::time::Duration;

use agentstate::checkpoint::{next_version, uuid6, ChannelVersion, ChannelVersions, Retention};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata};
use rusqlite::Connection;
use serde_json::{json, Value};

/// Appends one large message per step to thread `t` and returns the
/// configs and lists written.
fn conversation(s: &Checkpointer, thread: &str, steps: usize) -> Vec<(CheckpointConfig, Vec<Value>)> {
    let mut out: Vec<(CheckpointConfig, Vec<Value>)> = vec![];
    let mut version: Option<ChannelVersion> = None;
    let mut list = vec![];
    let mut parent = CheckpointConfig::thread(thread);
    for i in 0..steps {
        list.push(json!({"n": i, "content": "x".repeat(400)}));
        let v = next_version(version.as_ref());
        let mut cp = Checkpoint::with_id(uuid6(Some(i as i64)).to_string());
        cp.channel_values.insert("messages".into(), (Value::Array(list.clone())).into());
        cp.channel_versions.insert("messages".into(), v.clone());
        let nv: ChannelVersions = [("messages".to_string(), v.clone())].into_iter().collect();
        parent = s.put(&parent, &cp, &Metadata::new().with("step", i as i64), &nv).unwrap();
        s.put_writes(&parent, &[("out", json!(i))], "task", "").unwrap();
        version = Some(v);
        out.push((parent.clone(), list.clone()));
    }
    out
}

#[test]
fn keep_last_trims_on_write_and_keeps_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let s =
        Db::open(&path).unwrap().checkpointer().with_retention(Retention::keep_last(10).exempt("keep-all"));
    let written = conversation(&s, "t", 120);
    conversation(&s, "keep-all", 30);
    let left = s.list(&ListQuery::thread("t")).unwrap();
    assert!(left.len() >= 10 && left.len() <= 10 + 8, "{} left", left.len());
    // What is kept reads back exactly, writes included.
    for t in &left {
        let (_, list) = written.iter().find(|(c, _)| c.checkpoint_id == t.config.checkpoint_id).unwrap();
        assert_eq!(t.checkpoint.channel_values["messages"], Value::Array(list.clone()));
        assert_eq!(t.pending_writes.len(), 1);
    }
    assert_eq!(s.list(&ListQuery::thread("keep-all")).unwrap().len(), 30, "exempt threads are never trimmed");
    // No write or blob is left for a removed checkpoint; a fresh reader (no
    // in-memory cache) still reads the kept ones.
    let conn = Connection::open(&path).unwrap();
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM checkpoint_writes w WHERE NOT EXISTS (SELECT 1 FROM checkpoints c \
             WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
    let fresh = Db::open(&path).unwrap().checkpointer();
    let newest = fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(newest.checkpoint.channel_values["messages"], Value::Array(written.last().unwrap().1.clone()));

    // On demand, with a stricter policy.
    let removed = s.apply_retention(&Retention::keep_last(3)).unwrap();
    assert!(removed > 0);
    assert_eq!(s.list(&ListQuery::thread("t")).unwrap().len(), 3);
    assert_eq!(s.list(&ListQuery::thread("keep-all")).unwrap().len(), 3);
    for t in fresh.list(&ListQuery::thread("t")).unwrap() {
        let (_, list) = written.iter().find(|(c, _)| c.checkpoint_id == t.config.checkpoint_id).unwrap();
        assert_eq!(t.checkpoint.channel_values["messages"], Value::Array(list.clone()));
    }
}

#[test]
fn max_age_keeps_the_newest_checkpoint() {
    let s = Db::open_in_memory().unwrap().checkpointer();
    conversation(&s, "t", 5);
    std::thread::sleep(Duration::from_millis(1200));
    let removed = s.apply_retention(&Retention::default().max_age(Duration::from_secs(1))).unwrap();
    assert_eq!(removed, 4);
    let left = s.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].metadata.step(), Some(4));
}

#[test]
fn vacuum_returns_space_after_a_delete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let db = Db::open(&path).unwrap();
    let s = db.checkpointer();
    conversation(&s, "t", 150);
    let _ = db.vacuum().unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    s.delete_thread("t").unwrap();
    let freed = db.vacuum().unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(freed > 0, "freed {freed}");
    assert!(after < before / 2, "{before} -> {after}");
    let mode: i64 =
        Connection::open(&path).unwrap().query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, 2, "new files use incremental auto-vacuum");
}

/// Whatever the numbers, retention never removes the newest checkpoint:
/// a keep-last of `usize::MAX` keeps everything (on write and on demand), a
/// keep-last of 0 keeps one, and a max age of any `Duration` (up to
/// `Duration::MAX`) keeps at least the newest.
#[test]
fn huge_or_zero_limits_never_remove_the_newest_checkpoint() {
    let s = Db::open_in_memory().unwrap().checkpointer().with_retention(Retention::keep_last(usize::MAX));
    conversation(&s, "t", 12);
    assert_eq!(s.list(&ListQuery::thread("t")).unwrap().len(), 12, "trimmed on write");
    assert_eq!(s.apply_retention(&Retention::keep_last(usize::MAX)).unwrap(), 0);
    let near_max = Retention { keep_last: Some(usize::MAX - 3), ..Retention::default() };
    assert_eq!(s.apply_retention(&near_max).unwrap(), 0);
    for age in [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(1 << 40),
        Duration::from_secs_f64(1e12),
    ] {
        assert_eq!(s.apply_retention(&Retention::default().max_age(age)).unwrap(), 0, "{age:?}");
    }
    assert_eq!(s.list(&ListQuery::thread("t")).unwrap().len(), 12);
    let zero = Retention { keep_last: Some(0), ..Retention::default() };
    assert_eq!(s.apply_retention(&zero).unwrap(), 11);
    assert_eq!(s.apply_retention(&Retention::default().max_age(Duration::ZERO)).unwrap(), 0);
    let left = s.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].metadata.step(), Some(11));
}
