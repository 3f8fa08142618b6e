//! `get_tuple` answers from memory while the file has not changed, and never
//! once it has: these tests change the file behind a reader's back in every
//! way (another handle, a raw SQLite connection, pending writes, deletes,
//! write-behind) and read again.

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
