//! Reads share what they assembled: reading a stored checkpoint again hands
//! out the same `Arc<Checkpoint>`, `Arc<Metadata>` and pending writes, never
//! stale ones (see `Checkpointer::with_value_cache`).

use std::sync::Arc;

use agentstate::checkpoint::{uuid6, ChannelVersion, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, Db, ListQuery, Metadata};
use serde_json::{json, Value};

/// `n` steps through the step API: each appends a message and sets a
/// counter, and stores its parent's task writes (the message it appends,
/// so that write shares the bytes of the list's delta, and the counter).
fn steps(saver: &Checkpointer, thread: &str, n: usize) -> CheckpointTuple {
    let mut head =
        saver.start(&CheckpointConfig::thread(thread)).set("messages", json!([])).commit().unwrap();
    for i in 1..=n {
        let msg = json!({"role": "ai", "content": format!("message {i}"), "id": format!("m{i}")});
        let writes = [("messages", json!([msg.clone()])), ("counter", json!(i))];
        head = saver
            .step(&head)
            .parent_writes(format!("task-{i}"), "", &writes)
            .append("messages", [msg])
            .set("counter", json!(i))
            .commit()
            .unwrap();
    }
    head
}

fn file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    (dir, path)
}

#[test]
fn reading_a_stored_checkpoint_again_hands_out_the_same_one() {
    let (_dir, path) = file();
    let saver = Db::open(&path).unwrap().checkpointer();
    steps(&saver, "t", 20);
    let first = saver.list(&ListQuery::thread("t")).unwrap();
    let again = saver.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(first.len(), 21);
    assert_eq!(first, again);
    for (a, b) in first.iter().zip(&again) {
        assert!(Arc::ptr_eq(&a.checkpoint, &b.checkpoint), "{}", a.checkpoint.id);
        assert!(Arc::ptr_eq(&a.metadata, &b.metadata), "{}", a.checkpoint.id);
        assert!(Arc::ptr_eq(&a.pending_writes, &b.pending_writes), "{}", a.checkpoint.id);
    }
    // get_tuple by id and a page of list_iter find the same ones.
    let mid = &first[10];
    let by_id = saver.get_tuple(&mid.config).unwrap().unwrap();
    assert!(Arc::ptr_eq(&by_id.checkpoint, &mid.checkpoint));
    let page: Vec<_> =
        saver.list_iter(&ListQuery::thread("t").limit(5)).unwrap().map(Result::unwrap).collect();
    assert!(page.iter().zip(&first).all(|(a, b)| Arc::ptr_eq(&a.checkpoint, &b.checkpoint)));
    // What a fresh process reads is equal, pending writes included (some
    // of them share a delta's bytes, which a shared read did not decode).
    let fresh = Db::open(&path).unwrap().checkpointer().list(&ListQuery::thread("t")).unwrap();
    assert_eq!(fresh, again);
    assert_eq!(again[1].pending_writes.len(), 2);
    assert_eq!(
        again[1].pending_writes[0].value,
        json!([{"role": "ai", "content": "message 20", "id": "m20"}])
    );
}

#[test]
fn a_changed_copy_of_a_shared_checkpoint_leaves_the_next_read_alone() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let head = steps(&saver, "t", 3);
    let mut read = saver.get_tuple(&head.config).unwrap().unwrap();
    Arc::make_mut(&mut read.checkpoint).channel_values.insert("counter".into(), json!(99).into());
    Arc::make_mut(&mut read.metadata).0.insert("step".into(), json!(99));
    for t in [
        saver.get_tuple(&head.config).unwrap().unwrap(),
        saver.list(&ListQuery::thread("t")).unwrap().remove(0),
    ] {
        assert_eq!(t.checkpoint.channel_values["counter"], json!(3));
        assert_eq!(t.metadata.step(), Some(2));
    }
}

/// A checkpoint deleted and written again under the same id (here by
/// another `Db` on the file, as another process would) is read anew: an
/// entry serves only the row it was built from.
#[test]
fn a_checkpoint_written_again_under_its_id_is_read_anew() {
    let (_dir, path) = file();
    let reader = Db::open(&path).unwrap().checkpointer();
    let writer = Db::open(&path).unwrap().checkpointer();
    let id = uuid6(Some(1)).to_string();
    let put = |value: Value, version: &str, step: i64| {
        let mut cp = Checkpoint::with_id(&id);
        cp.channel_values.insert("doc".into(), value.into());
        cp.channel_versions.insert("doc".into(), ChannelVersion::Str(version.into()));
        let nv: ChannelVersions = cp.channel_versions.clone();
        let meta = Metadata::new().with("source", "input").with("step", step);
        writer.put(&CheckpointConfig::thread("t"), &cp, &meta, &nv).unwrap();
    };
    put(json!({"v": 1}), "1.1", 1);
    let config = CheckpointConfig::thread("t").at(&id);
    for _ in 0..2 {
        let t = reader.get_tuple(&config).unwrap().unwrap();
        assert_eq!(
            (t.checkpoint.channel_values["doc"].to_value(), t.metadata.step()),
            (json!({"v": 1}), Some(1))
        );
        assert_eq!(reader.list(&ListQuery::thread("t")).unwrap()[0].metadata.step(), Some(1));
    }
    writer.delete_thread("t").unwrap();
    put(json!({"v": 2}), "2.1", 2);
    let t = reader.get_tuple(&config).unwrap().unwrap();
    assert_eq!(
        (t.checkpoint.channel_values["doc"].to_value(), t.metadata.step()),
        (json!({"v": 2}), Some(2))
    );
    let listed = reader.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(listed[0].checkpoint.channel_values["doc"], json!({"v": 2}));
    // Writes added later to a shared checkpoint are read.
    writer.put_writes(&config, &[("doc", json!({"v": 3}))], "task", "").unwrap();
    let t = reader.list(&ListQuery::thread("t")).unwrap().remove(0);
    assert!(Arc::ptr_eq(&t.checkpoint, &listed[0].checkpoint));
    assert_eq!(t.pending_writes.len(), 1);
    // So are writes a task replaces (special channels are upserted).
    writer.put_writes(&config, &[("__error__", json!("first"))], "task", "").unwrap();
    assert_eq!(reader.get_tuple(&config).unwrap().unwrap().pending_writes[0].value, json!("first"));
    writer.put_writes(&config, &[("__error__", json!("second"))], "task", "").unwrap();
    for t in
        [reader.get_tuple(&config).unwrap().unwrap(), reader.list(&ListQuery::thread("t")).unwrap().remove(0)]
    {
        let writes: Vec<_> = t.pending_writes.iter().map(|w| (w.channel.as_str(), &w.value)).collect();
        assert_eq!(writes, [("__error__", &json!("second")), ("doc", &json!({"v": 3}))]);
    }
}

/// Pending writes come ordered by (task_path, task_id), LangGraph's
/// `writes_sort_key` (reference: `get_tuple`, "pending_writes"), whichever
/// read assembles them and whether or not they were shared.
#[test]
fn pending_writes_are_ordered_by_task_path_then_task_id_on_every_read() {
    let (_dir, path) = file();
    let saver = Db::open(&path).unwrap().checkpointer();
    let head = steps(&saver, "t", 2);
    let parent = head.parent_config.clone().unwrap();
    for (task, path) in [("a", "~z"), ("c", "~a"), ("b", "~a"), ("d", "")] {
        saver.put_writes(&parent, &[("counter", json!(task))], task, path).unwrap();
    }
    let order = |t: &CheckpointTuple| -> Vec<String> {
        t.pending_writes.iter().filter(|w| w.channel == "counter").map(|w| w.task_id.clone()).collect()
    };
    // "task-2" is the step's own task, stored with path "".
    let want = ["d", "task-2", "b", "c", "a"];
    let fresh = || Db::open(&path).unwrap().checkpointer();
    let read_all = |saver: &Checkpointer, want: &[&str]| {
        for _ in 0..2 {
            assert_eq!(order(&saver.get_tuple(&parent).unwrap().unwrap()), want);
            let listed = saver.list(&ListQuery::thread("t")).unwrap();
            assert_eq!(order(&listed[1]), want);
            let across = saver.list(&ListQuery::all()).unwrap();
            assert_eq!(order(&across[1]), want);
        }
    };
    let (reader, other) = (fresh(), fresh());
    for saver in [&saver, &reader] {
        read_all(saver, &want);
    }
    // A task added in the middle (by another handle, as another process
    // would), and one task's writes replaced, after the lists were shared.
    other.put_writes(&parent, &[("counter", json!("bb"))], "bb", "~a").unwrap();
    other.put_writes(&parent, &[("__error__", json!("late"))], "c", "~a").unwrap();
    let want = ["d", "task-2", "b", "bb", "c", "a"];
    for saver in [&saver, &reader, &fresh()] {
        read_all(saver, &want);
        let t = saver.get_tuple(&parent).unwrap().unwrap();
        assert!(t.pending_writes.iter().any(|w| w.task_id == "c" && w.value == json!("late")));
    }
}

#[test]
fn a_value_cache_of_zero_shares_nothing() {
    let saver = Db::open_in_memory().unwrap().checkpointer().with_value_cache(0);
    let head = steps(&saver, "t", 3);
    let a = saver.get_tuple(&head.config).unwrap().unwrap();
    let b = saver.get_tuple(&head.config).unwrap().unwrap();
    assert_eq!(a, b);
    assert!(!Arc::ptr_eq(&a.checkpoint, &b.checkpoint));
}
