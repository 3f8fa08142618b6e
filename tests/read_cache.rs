//! `get_tuple` answers from memory while the file has not changed, and never
//! once it has: these tests change the file behind a reader's back in every
//! way (another handle, a raw SQLite connection, pending writes, deletes,
//! write-behind) and read again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agentstate::{CheckpointConfig, Db};
use serde_json::json;

fn file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    (dir, path)
}

#[test]
fn a_step_by_another_handle_is_seen_by_the_next_read() {
    let (_d, path) = file();
    let reader = Db::open(&path).unwrap().checkpointer();
    let writer = Db::open(&path).unwrap().checkpointer();
    let config = CheckpointConfig::thread("t");
    let first = writer.start(&config).set("n", json!(1)).commit().unwrap();
    // Read twice: the second answer may come from memory.
    for _ in 0..2 {
        assert_eq!(reader.get_tuple(&config).unwrap().unwrap().checkpoint.id, first.checkpoint.id);
    }
    let second = writer.step(&first).set("n", json!(2)).commit().unwrap();
    let latest = reader.get_tuple(&config).unwrap().unwrap();
    assert_eq!(latest.checkpoint.id, second.checkpoint.id);
    assert_eq!(latest.checkpoint.channel_values["n"], json!(2));
}

#[test]
fn pending_writes_added_elsewhere_appear_on_a_cached_checkpoint() {
    let (_d, path) = file();
    let reader = Db::open(&path).unwrap().checkpointer();
    let writer = Db::open(&path).unwrap().checkpointer();
    let head = writer.start(&CheckpointConfig::thread("t")).set("n", json!(1)).commit().unwrap();
    for _ in 0..2 {
        assert!(reader.get_tuple(&head.config).unwrap().unwrap().pending_writes.is_empty());
    }
    writer.put_writes(&head.config, &[("out".to_string(), json!("x"))], "task", "").unwrap();
    assert_eq!(reader.get_tuple(&head.config).unwrap().unwrap().pending_writes.len(), 1);
}

#[test]
fn a_raw_sqlite_delete_is_seen_by_the_next_read() {
    let (_d, path) = file();
    let saver = Db::open(&path).unwrap().checkpointer();
    let config = CheckpointConfig::thread("t");
    saver.start(&config).set("n", json!(1)).commit().unwrap();
    for _ in 0..2 {
        assert!(saver.get_tuple(&config).unwrap().is_some());
    }
    let raw = agentstate::rusqlite::Connection::open(&path).unwrap();
    raw.execute("DELETE FROM checkpoint_writes WHERE thread_id = 't'", []).unwrap();
    raw.execute("DELETE FROM checkpoints WHERE thread_id = 't'", []).unwrap();
    assert!(saver.get_tuple(&config).unwrap().is_none());
}

#[test]
fn own_writes_and_maintenance_are_seen_at_once() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let config = CheckpointConfig::thread("t");
    let mut head = saver.start(&config).set("n", json!(0)).commit().unwrap();
    for i in 1..5 {
        assert_eq!(saver.get_tuple(&config).unwrap().unwrap().checkpoint.id, head.checkpoint.id);
        head = saver.step(&head).set("n", json!(i)).commit().unwrap();
    }
    // Another checkpointer of the same Db (its own caches) deletes.
    db.checkpointer().delete_thread("t").unwrap();
    assert!(saver.get_tuple(&config).unwrap().is_none());
}

#[test]
fn write_behind_steps_are_seen_by_reads_of_the_same_db() {
    let (_d, path) = file();
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let saver = db.checkpointer();
    let config = CheckpointConfig::thread("t");
    let mut head = saver.start(&config).set("n", json!(0)).commit().unwrap();
    for i in 1..20 {
        head = saver.step(&head).set("n", json!(i)).commit().unwrap();
        let read = saver.get_tuple(&config).unwrap().unwrap();
        assert_eq!(read.checkpoint.id, head.checkpoint.id);
        assert_eq!(read.checkpoint.channel_values["n"], json!(i));
    }
}

/// A reader skips asking SQLite whether the file changed while the WAL's
/// shared header is the one it saw last. Every commit elsewhere must still
/// be seen by the next read: commits by another `Db` (checkpoints and the
/// Store), by a raw connection, and across WAL restarts (a `TRUNCATE`
/// checkpoint empties the log and starts it again with new salts).
#[test]
fn every_commit_elsewhere_is_seen_across_wal_restarts() {
    let (_d, path) = file();
    let reader_db = Db::open(&path).unwrap();
    let writer_db = Db::open(&path).unwrap();
    let (reader, writer) = (reader_db.checkpointer(), writer_db.checkpointer());
    let rstore = reader_db.store(Default::default()).unwrap();
    let wstore = writer_db.store(Default::default()).unwrap();
    let raw = agentstate::rusqlite::Connection::open(&path).unwrap();
    let config = CheckpointConfig::thread("t");
    let first = writer.start(&config).set("n", json!(0)).commit().unwrap();
    // The raw deletes below remove the head; its parent stays.
    let mut head = writer.step(&first).set("n", json!(0)).commit().unwrap();
    wstore.put(&["ns"], "k", json!({"round": 0})).unwrap();
    for round in 1..=300 {
        // Twice each: the second read may come from memory.
        for _ in 0..2 {
            let latest = reader.get_tuple(&config).unwrap().unwrap();
            assert_eq!(latest.checkpoint.id, head.checkpoint.id, "round {round}");
            let item = rstore.get(&["ns"], "k").unwrap().unwrap();
            assert_eq!(item.value["round"], json!(round - 1), "round {round}");
        }
        if round % 2 == 0 {
            head = writer.step(&head).set("n", json!(round)).commit().unwrap();
            wstore.put(&["ns"], "k", json!({"round": round})).unwrap();
        } else {
            // Through SQLite alone, one commit each.
            raw.execute(
                "DELETE FROM checkpoints WHERE thread_id = 't' AND checkpoint_id = ?1",
                [&head.checkpoint.id],
            )
            .unwrap();
            head = reader.get_tuple(&config).unwrap().unwrap();
            raw.execute(
                "UPDATE store SET value = ?1 WHERE prefix = 'ns' AND key = 'k'",
                [format!("{{\"round\": {round}}}")],
            )
            .unwrap();
        }
        if round % 25 == 0 {
            raw.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).unwrap();
        }
    }
}

/// Puts `values` as a root checkpoint of thread `t` with every channel at
/// `version` (versions a caller makes itself, as plain integers are).
fn put_at(saver: &agentstate::Checkpointer, id: &str, values: serde_json::Value, version: i64) {
    put_after(saver, "t", id, None, values, version);
}

/// A deleted version may be stored again with another value: the values a
/// reader decoded before are not handed out for it. Another handle deletes
/// (`delete_thread`, `prune`) and stores the same ids and versions again;
/// the reader's `get_tuple` and `list` read what the file holds (the
/// crate's own versions carry a random part and never meet again; versions
/// a caller makes, plain integers, do).
#[test]
fn values_stored_again_under_a_deleted_version_are_read_anew() {
    use agentstate::{ListQuery, PruneStrategy};
    let (_d, path) = file();
    let reader = Db::open(&path).unwrap().checkpointer();
    let other = Db::open(&path).unwrap().checkpointer();
    let config = CheckpointConfig::thread("t");
    let id = "1f000000-0000-6000-8000-000000000001";
    let mut round = 0;
    let mut rewrite = |remove: &dyn Fn(&agentstate::Checkpointer)| {
        round += 1;
        remove(&other);
        put_at(&other, id, json!({"m": [format!("round {round}")], "n": round}), 1);
        round
    };
    put_at(&other, id, json!({"m": ["round 0"], "n": 0}), 1);
    let m = |t: &agentstate::CheckpointTuple| t.checkpoint.channel_values["m"].clone();
    let removals: [fn(&agentstate::Checkpointer); 2] =
        [|s| s.delete_thread("t").unwrap(), |s| s.prune(&["t"], PruneStrategy::Delete).unwrap()];
    for remove in removals {
        // Read twice (the second may come from memory) by both reads.
        for _ in 0..2 {
            reader.get_tuple(&config).unwrap().unwrap();
            reader.list(&ListQuery::thread("t")).unwrap();
        }
        let r = rewrite(&remove);
        let want = json!([format!("round {r}")]);
        assert_eq!(m(&reader.get_tuple(&config).unwrap().unwrap()), want);
        assert_eq!(m(&reader.list(&ListQuery::thread("t")).unwrap()[0]), want);
        assert_eq!(m(&reader.get_tuple(&config.clone().at(id)).unwrap().unwrap()), want);
    }
}

/// A writer extends the list it stored last as a delta of that version. If
/// another handle deleted the thread and stored that version again with
/// another list, the next version is stored whole: what it reads back is
/// what was put, not the other list with this one's tail.
#[test]
fn a_list_is_not_extended_from_a_version_stored_again_elsewhere() {
    use agentstate::checkpoint::{ChannelVersion, ChannelVersions, Checkpoint, Metadata};
    let (_d, path) = file();
    let writer = Db::open(&path).unwrap().checkpointer();
    let other = Db::open(&path).unwrap().checkpointer();
    // (Lists long enough to be worth a delta.)
    let list =
        |tag: &str, n: usize| json!((0..n).map(|i| format!("{tag} message {i:04}")).collect::<Vec<_>>());
    let first = "1f000000-0000-6000-8000-000000000001";
    put_at(&writer, first, json!({"m": list("mine", 1000)}), 1);
    other.delete_thread("t").unwrap();
    put_at(&other, first, json!({"m": list("theirs", 500)}), 1);
    // Version 2 of `m` extends the writer's version 1 by one element.
    let mut cp = Checkpoint::with_id("1f000000-0000-6000-8000-000000000002");
    cp.channel_values.insert("m".into(), list("mine", 1001).into());
    cp.channel_versions.insert("m".into(), ChannelVersion::Int(2));
    let new: ChannelVersions = [("m".to_string(), ChannelVersion::Int(2))].into_iter().collect();
    writer.put(&CheckpointConfig::thread("t").at(first), &cp, &Metadata::new(), &new).unwrap();
    let fresh = Db::open(&path).unwrap().checkpointer();
    let read = fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(read.checkpoint.channel_values["m"], list("mine", 1001));
    let read = writer.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(read.checkpoint.channel_values["m"], list("mine", 1001));
}

/// Puts `values` (each at `version`) as checkpoint `id` of `thread` after
/// `parent`.
fn put_after(
    saver: &agentstate::Checkpointer,
    thread: &str,
    id: &str,
    parent: Option<&str>,
    values: serde_json::Value,
    version: i64,
) {
    put_after_at(saver, thread, id, parent, values, version, None);
}

/// [`put_after`] with the checkpoint's `ts` given (`None`: now).
fn put_after_at(
    saver: &agentstate::Checkpointer,
    thread: &str,
    id: &str,
    parent: Option<&str>,
    values: serde_json::Value,
    version: i64,
    ts: Option<&str>,
) {
    use agentstate::checkpoint::{ChannelVersion, ChannelVersions, Checkpoint, Metadata};
    let mut cp = Checkpoint::with_id(id);
    if let Some(ts) = ts {
        cp.ts = ts.into();
    }
    let mut new = ChannelVersions::new();
    for (k, v) in values.as_object().unwrap() {
        cp.channel_values.insert(k.clone(), v.clone().into());
        cp.channel_versions.insert(k.clone(), ChannelVersion::Int(version));
        new.insert(k.clone(), ChannelVersion::Int(version));
    }
    let config = CheckpointConfig::thread(thread);
    let config = match parent {
        Some(p) => config.at(p),
        None => config,
    };
    saver.put(&config, &cp, &Metadata::new(), &new).unwrap();
}

/// The same with write-behind, where the delta is planned when the write is
/// queued and stored when it runs: a write of another thread queued before
/// it (which notices the deletion first) does not make it trust its plan.
#[test]
fn a_queued_list_is_not_extended_from_a_version_stored_again_elsewhere() {
    let list =
        |tag: &str, n: usize| json!((0..n).map(|i| format!("{tag} message {i:04}")).collect::<Vec<_>>());
    let (_d, path) = file();
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let writer = db.checkpointer();
    let other = Db::open(&path).unwrap().checkpointer();
    let first = "1f000000-0000-6000-8000-000000000001";
    put_after(&writer, "w", first, None, json!({"x": [1]}), 1);
    put_after(&writer, "t", first, None, json!({"m": list("mine", 1000)}), 1);
    db.flush().unwrap();
    other.delete_thread("t").unwrap();
    put_after(&other, "t", first, None, json!({"m": list("theirs", 500)}), 1);
    // Both queued before either runs.
    let raw = agentstate::rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    put_after(&writer, "u", first, None, json!({"x": [2]}), 1);
    put_after(
        &writer,
        "t",
        "1f000000-0000-6000-8000-000000000002",
        Some(first),
        json!({"m": list("mine", 1001)}),
        2,
    );
    raw.execute_batch("COMMIT").unwrap();
    db.flush().unwrap();
    let fresh = Db::open(&path).unwrap().checkpointer();
    let read = fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(read.checkpoint.channel_values["m"], list("mine", 1001));
}

/// A checkpointer made from another with `with_serializer` starts with
/// caches of its own: its first read does not find the other's bytes of a
/// version stored again since.
#[test]
fn a_checkpointer_with_another_serializer_does_not_read_the_others_stale_bytes() {
    let (_d, path) = file();
    let c1 = Db::open(&path).unwrap().checkpointer();
    let other = Db::open(&path).unwrap().checkpointer();
    let id = "1f000000-0000-6000-8000-000000000001";
    put_after(&other, "t", id, None, json!({"m": ["first"]}), 1);
    let config = CheckpointConfig::thread("t");
    c1.get_tuple_encoded(&config).unwrap().unwrap();
    other.delete_thread("t").unwrap();
    put_after(&other, "t", id, None, json!({"m": ["second"]}), 1);
    let c2 = c1.clone().with_serializer(agentstate::JsonPlusSerializer);
    let fresh = Db::open(&path).unwrap().checkpointer().get_tuple_encoded(&config).unwrap().unwrap();
    let encoded = c2.get_tuple_encoded(&config).unwrap().unwrap();
    assert_eq!(encoded.values["m"], fresh.values["m"]);
    let encoded = c1.get_tuple_encoded(&config).unwrap().unwrap();
    assert_eq!(encoded.values["m"], fresh.values["m"]);
    let read = c2.get_tuple(&config).unwrap().unwrap();
    assert_eq!(read.checkpoint.channel_values["m"], json!(["second"]));
}

/// The checkpointer's own retention deletes versions no kept checkpoint
/// needs; one stored again through it with another value reads back as
/// stored, not as the value it decoded before the trim.
#[test]
fn a_version_trimmed_by_own_retention_and_stored_again_is_read_anew() {
    use agentstate::checkpoint::Retention;
    use agentstate::ListQuery;
    let (_d, path) = file();
    let saver = Db::open(&path).unwrap().checkpointer();
    let ids = ["1f000000-0000-6000-8000-000000000001", "1f000000-0000-6000-8000-000000000002"];
    let third = "1f000000-0000-6000-8000-000000000003";
    put_after(&saver, "t", ids[0], None, json!({"m": ["first"]}), 1);
    put_after(&saver, "t", ids[1], Some(ids[0]), json!({"m": ["second"]}), 2);
    let m = |t: &agentstate::CheckpointTuple| t.checkpoint.channel_values["m"].clone();
    for _ in 0..2 {
        let at = CheckpointConfig::thread("t").at(ids[0]);
        assert_eq!(m(&saver.get_tuple(&at).unwrap().unwrap()), json!(["first"]));
        saver.list(&ListQuery::thread("t")).unwrap();
    }
    assert_eq!(saver.apply_retention(&Retention::keep_last(1)).unwrap(), 1);
    put_after(&saver, "t", third, Some(ids[1]), json!({"m": ["third"]}), 1);
    let latest = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(latest.checkpoint.id, third);
    assert_eq!(m(&latest), json!(["third"]));
    assert_eq!(m(&saver.list(&ListQuery::thread("t")).unwrap()[0]), json!(["third"]));
    let fresh = Db::open(&path).unwrap().checkpointer();
    assert_eq!(m(&fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap()), json!(["third"]));
    // A trimmed checkpoint stored again under its id, versions and time
    // (its row the same), with another value.
    let put_fixed = |id: &str, parent: Option<&str>, value: serde_json::Value, version: i64| {
        put_after_at(
            &saver,
            "u",
            id,
            parent,
            json!({ "m": value }),
            version,
            Some("2026-01-01T00:00:00+00:00"),
        );
    };
    put_fixed(ids[0], None, json!(["a"]), 1);
    put_fixed(ids[1], Some(ids[0]), json!(["b"]), 2);
    let at = CheckpointConfig::thread("u").at(ids[0]);
    for _ in 0..2 {
        assert_eq!(m(&saver.get_tuple(&at).unwrap().unwrap()), json!(["a"]));
    }
    saver.apply_retention(&Retention::keep_last(1)).unwrap();
    assert!(saver.get_tuple(&at).unwrap().is_none());
    put_fixed(ids[0], None, json!(["a again"]), 1);
    assert_eq!(m(&saver.get_tuple(&at).unwrap().unwrap()), json!(["a again"]));
}

/// The same when retention is applied on write (a write trims its thread
/// once it holds a few checkpoints more than allowed).
#[test]
fn a_version_trimmed_on_write_and_stored_again_is_read_anew() {
    use agentstate::checkpoint::Retention;
    let (_d, path) = file();
    let trimming = Db::open(&path).unwrap().checkpointer().with_retention(Retention::keep_last(1));
    let m = |t: &agentstate::CheckpointTuple| t.checkpoint.channel_values["m"].clone();
    let id = |i: usize| format!("1f000000-0000-6000-8000-{i:012}");
    let mut parent: Option<String> = None;
    for i in 1..=12 {
        put_after(&trimming, "w", &id(i), parent.as_deref(), json!({"m": [format!("v{i}")]}), i as i64);
        let at = CheckpointConfig::thread("w").at(id(i));
        assert_eq!(m(&trimming.get_tuple(&at).unwrap().unwrap()), json!([format!("v{i}")]));
        parent = Some(id(i));
    }
    let w = CheckpointConfig::thread("w");
    assert!(trimming.get_tuple(&w.clone().at(id(1))).unwrap().is_none(), "trimmed on write");
    put_after(&trimming, "w", &id(13), parent.as_deref(), json!({"m": ["v1 again"]}), 1);
    assert_eq!(m(&trimming.get_tuple(&w).unwrap().unwrap()), json!(["v1 again"]));
}

/// A serializer that, once armed, stops inside the decoding of a value
/// holding `"first"` until released: a read is then held between taking its
/// snapshot and caching what it decoded.
#[derive(Clone, Default)]
struct Gate {
    armed: Arc<AtomicBool>,
    entered: Arc<(Mutex<bool>, Condvar)>,
    released: Arc<(Mutex<bool>, Condvar)>,
}

impl Gate {
    fn wait(flag: &(Mutex<bool>, Condvar)) {
        let set = flag.0.lock().unwrap();
        let (set, _) = flag.1.wait_timeout_while(set, Duration::from_secs(30), |set| !*set).unwrap();
        assert!(*set, "the gate was never reached");
    }

    fn set(flag: &(Mutex<bool>, Condvar)) {
        *flag.0.lock().unwrap() = true;
        flag.1.notify_all();
    }
}

impl agentstate::Serializer for Gate {
    fn dumps_typed(&self, value: &serde_json::Value) -> agentstate::Result<(String, Vec<u8>)> {
        agentstate::JsonPlusSerializer.dumps_typed(value)
    }

    fn loads_typed(&self, tag: &str, bytes: &[u8]) -> agentstate::Result<serde_json::Value> {
        let v = agentstate::JsonPlusSerializer.loads_typed(tag, bytes)?;
        if v.to_string().contains("\"first\"") && self.armed.swap(false, Ordering::SeqCst) {
            Gate::set(&self.entered);
            Gate::wait(&self.released);
        }
        Ok(v)
    }
}

/// A read of `c1` held inside its snapshot while `delete` removes the
/// version it is decoding (`m` at 1) and that version is stored again with
/// another value: what the held read decoded must not be served after it.
fn held_read_then(delete: impl FnOnce(&agentstate::Checkpointer)) {
    let (_d, path) = file();
    let gate = Gate::default();
    let writer = Db::open(&path).unwrap().checkpointer();
    let ids = ["1f000000-0000-6000-8000-000000000001", "1f000000-0000-6000-8000-000000000002"];
    put_after(&writer, "t", ids[0], None, json!({"m": ["first"]}), 1);
    put_after(&writer, "t", ids[1], Some(ids[0]), json!({"m": ["second"]}), 2);
    // Its caches empty: the held read decodes `m` at 1.
    let saver = Db::open(&path).unwrap().checkpointer().with_serializer(gate.clone());
    gate.armed.store(true, Ordering::SeqCst);
    let held = {
        let saver = saver.clone();
        std::thread::spawn(move || saver.get_tuple(&CheckpointConfig::thread("t").at(ids[0])).unwrap())
    };
    Gate::wait(&gate.entered);
    delete(&saver);
    let third = "1f000000-0000-6000-8000-000000000003";
    put_after(&saver, "t", third, None, json!({"m": ["third"]}), 1);
    Gate::set(&gate.released);
    let old = held.join().unwrap().expect("the held read's snapshot still holds c1");
    assert_eq!(old.checkpoint.channel_values["m"], json!(["first"]));
    let latest = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(latest.checkpoint.id, third);
    assert_eq!(latest.checkpoint.channel_values["m"], json!(["third"]));
    let fresh = Db::open(&path).unwrap().checkpointer();
    let stored = fresh.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(stored.checkpoint.channel_values["m"], json!(["third"]));
}

#[test]
fn a_read_held_across_a_trim_does_not_cache_the_trimmed_value() {
    held_read_then(|saver| {
        assert_eq!(saver.apply_retention(&agentstate::checkpoint::Retention::keep_last(1)).unwrap(), 1);
        // Only c2 is left: the next put continues from it.
    });
}

#[test]
fn a_read_held_across_a_thread_delete_does_not_cache_the_deleted_value() {
    held_read_then(|saver| saver.delete_thread("t").unwrap());
}

#[test]
fn a_read_held_across_a_delete_by_another_handle_does_not_cache_the_deleted_value() {
    held_read_then(|saver| {
        let other = Db::open(saver.db().path().unwrap()).unwrap().checkpointer();
        other.delete_thread("t").unwrap();
        // The held read's checkpointer learns of it by its next read.
        assert!(saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().is_none());
    });
}
