//! The async facade: every call does what its blocking twin does, and none
//! blocks the runtime's thread, even while SQLite makes it wait.

use std::time::{Duration, Instant};

use agentstate::checkpoint::Retention;
use agentstate::store::Search;
use agentstate::{CheckpointConfig, Db, Error, ListQuery, StoreConfig};
use serde_json::json;

#[tokio::test(flavor = "current_thread")]
async fn checkpointer_calls_match_the_blocking_ones() {
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer().into_async();
    let config = CheckpointConfig::thread("t");
    let first = saver.start(config.clone(), |s| s.set("n", json!(0))).await.unwrap();
    let mut head = first.clone();
    for i in 1..5 {
        head = saver.step(head, move |s| s.set("n", json!(i)).append("log", [json!(i)])).await.unwrap();
    }
    // A stale parent is a Conflict, as with the blocking API.
    let stale = saver.step(first, |s| s.set("n", json!(-1))).await;
    assert!(matches!(stale, Err(Error::Conflict(_))), "{stale:?}");
    saver
        .put_writes(head.config.clone(), vec![("out".into(), json!("x"))], "task".into(), "".into())
        .await
        .unwrap();
    let latest = saver.get_tuple(config.clone()).await.unwrap().unwrap();
    assert_eq!(latest.checkpoint.id, head.checkpoint.id);
    assert_eq!(latest.pending_writes.len(), 1);
    assert_eq!(latest, saver.blocking().get_tuple(&config).unwrap().unwrap());
    assert_eq!(saver.list(ListQuery::thread("t")).await.unwrap().len(), 5);
    saver.copy_thread("t".into(), "u".into()).await.unwrap();
    assert_eq!(saver.apply_retention(Retention::keep_last(2)).await.unwrap(), 6);
    saver.delete_thread("u".into()).await.unwrap();
    assert!(saver.get_tuple(CheckpointConfig::thread("u")).await.unwrap().is_none());
    saver.flush().await.unwrap();
    saver.flush_thread("t").await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn store_calls_match_the_blocking_ones() {
    let db = Db::open_in_memory().unwrap();
    let store = db.store(StoreConfig::default()).unwrap().into_async();
    store.put(&["users", "alice"], "prefs", json!({"tea": true})).await.unwrap();
    let item = store.get(&["users", "alice"], "prefs").await.unwrap().unwrap();
    assert_eq!(item.value, json!({"tea": true}));
    assert_eq!(store.search(Search::new(&["users"])).await.unwrap().len(), 1);
    assert_eq!(store.list_namespaces(Default::default()).await.unwrap().len(), 1);
    store.delete(&["users", "alice"], "prefs").await.unwrap();
    assert!(store.blocking().get(&["users", "alice"], "prefs").unwrap().is_none());
    assert_eq!(store.sweep_expired().await.unwrap(), 0);
}

/// Another connection holds the write lock for 300 ms; a put through the
/// facade waits for it, and meanwhile a timer on the same single-threaded
/// runtime keeps ticking: the wait happens off the runtime's thread.
#[tokio::test(flavor = "current_thread")]
async fn a_call_waiting_for_the_lock_does_not_stall_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.db");
    let saver = Db::open(&path).unwrap().checkpointer().into_async();
    let raw = agentstate::rusqlite::Connection::open(&path).unwrap();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        raw.execute_batch("COMMIT").unwrap();
    });
    let start = Instant::now();
    let write = saver.start(CheckpointConfig::thread("t"), |s| s.set("n", json!(1)));
    let ticks = async {
        let mut n = 0;
        while start.elapsed() < Duration::from_millis(250) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            n += 1;
        }
        n
    };
    let (written, ticks) = tokio::join!(write, ticks);
    written.unwrap();
    holder.join().unwrap();
    assert!(start.elapsed() >= Duration::from_millis(290), "the write did not wait for the lock");
    // Stalled, the loop would tick once (after the write).
    assert!(ticks >= 5, "the runtime stalled while the write waited: {ticks} ticks");
}

/// A panic inside a call surfaces in the awaiting task, as from the
/// blocking call.
#[tokio::test(flavor = "current_thread")]
#[should_panic(expected = "built badly")]
async fn a_panic_in_a_call_reaches_the_caller() {
    let saver = Db::open_in_memory().unwrap().checkpointer().into_async();
    let _ = saver.start(CheckpointConfig::thread("t"), |_| panic!("built badly")).await;
}
