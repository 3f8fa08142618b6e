//! A run starts from the channels the thread's previous run ended with
//! (when they are still the head checkpoint's): every way the head can move
//! meanwhile makes it read the stored state instead. And `Durability::Async`
//! has stored everything once `invoke` returns.

use agentstate::engine::{ChannelSpec, CompiledGraph, Durability, Graph, Reducer, Update, END, START};
use agentstate::{CheckpointConfig, Db};
use serde_json::{json, Value};

fn graph(db: &Db) -> CompiledGraph {
    Graph::builder()
        .state("messages", ChannelSpec::reducer(Reducer::Messages))
        .state("n", ChannelSpec::last_value())
        .node("agent", |s| {
            let n = s.get("messages").and_then(Value::as_array).map_or(0, Vec::len);
            Ok(Update::new()
                .set("messages", json!([{"role": "assistant", "content": format!("seen {n}")}]))
                .set("n", json!(n)))
        })
        .edge(START, "agent")
        .edge("agent", END)
        .compile(db.checkpointer())
        .unwrap()
}

fn contents(v: &Value) -> Vec<String> {
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["__ext__"]["args"]["content"].as_str().unwrap().to_string())
        .collect()
}

fn say(s: &str) -> Option<Value> {
    Some(json!({"messages": [{"role": "user", "content": s}]}))
}

#[test]
fn a_run_sees_what_others_stored_since_its_last_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let db = Db::open(&path).unwrap();
    let (a, b) = (graph(&db), graph(&Db::open(&path).unwrap()));
    let t = CheckpointConfig::thread("t");
    a.invoke(say("1"), &t).unwrap();
    a.invoke(say("2"), &t).unwrap();
    // Another graph (its own kept channels, another Db handle) continues
    // the thread.
    b.invoke(say("3"), &t).unwrap();
    let out = a.invoke(say("4"), &t).unwrap();
    assert_eq!(contents(&out), ["1", "seen 1", "2", "seen 3", "3", "seen 5", "4", "seen 7"]);
    // update_state moves the head too.
    let head = a.get_state(&t).unwrap().config.unwrap();
    a.update_state(&head, json!({"messages": [{"role": "user", "content": "edited"}]}), "agent").unwrap();
    let out = a.invoke(say("5"), &t).unwrap();
    assert_eq!(out["n"], json!(10));
    assert_eq!(contents(&out)[8], "edited");
    // invoke_state shares what invoke copies.
    let shared = a.invoke_state(say("6"), &t).unwrap();
    let copied = a.get_state(&t).unwrap().values;
    assert_eq!(Value::Object(shared.to_map()), copied);
    // Replaying an older checkpoint starts from its own state.
    let history = a.get_state_history(&t).unwrap();
    let old = history.iter().find(|s| s.values["n"] == json!(1)).unwrap().config.clone().unwrap();
    // A config that names a checkpoint lists that one alone (LangGraph's
    // `get_state_history` passes the config to the saver's `list`).
    let one = a.get_state_history(&old).unwrap();
    assert_eq!(one.iter().map(|s| s.config.clone().unwrap()).collect::<Vec<_>>(), vec![old.clone()]);
    let replayed = a.invoke(None, &old).unwrap();
    assert_eq!(replayed["messages"].as_array().unwrap().len(), 4);
    let out = a.invoke(say("7"), &t).unwrap();
    assert_eq!(out["messages"].as_array().unwrap().len(), 6);
}

/// The head a run stored is reused without reading it back only while the
/// file is unchanged: a thread deleted, or written through another handle
/// on the same `Db` or another `Db` on the file, in between is seen by the
/// next run. The same with `Durability::Async` on a write-behind `Db`, where
/// the head is known unchanged only once its queued commit happened.
#[test]
fn the_stored_head_is_reused_only_while_the_file_is_unchanged() {
    for (behind, durability) in
        [(false, Durability::Sync), (true, Durability::Async), (true, Durability::Sync)]
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head.db");
        let db = Db::builder().write_behind(behind).open(&path).unwrap();
        let a = graph(&db).with_durability(durability);
        let t = CheckpointConfig::thread("t");
        a.invoke(say("1"), &t).unwrap();
        assert_eq!(contents(&a.invoke(say("2"), &t).unwrap()), ["1", "seen 1", "2", "seen 3"]);
        db.checkpointer().delete_thread("t").unwrap();
        assert_eq!(contents(&a.invoke(say("3"), &t).unwrap()), ["3", "seen 1"]);
        // Another checkpointer on the same Db continues the thread by hand.
        let saver = db.checkpointer();
        let head = saver.get_tuple(&t).unwrap().unwrap();
        saver.step(&head).set("n", json!(42)).commit().unwrap();
        let out = a.invoke(say("4"), &t).unwrap();
        assert_eq!(contents(&out), ["3", "seen 1", "4", "seen 3"]);
        assert_eq!(a.get_state(&t).unwrap().values, out);
        // Another Db on the file does.
        let other = Db::open(&path).unwrap().checkpointer();
        let head = other.get_tuple(&t).unwrap().unwrap();
        other
            .step(&head)
            .append("messages", [json!({"type": "human", "content": "aside", "id": "x"})])
            .commit()
            .unwrap();
        let out = a.invoke(say("5"), &t).unwrap();
        assert_eq!(contents(&out)[4..], ["aside", "5", "seen 6"], "write-behind {behind}, {durability:?}");
        // A write right after the run (queued, on a write-behind Db) is
        // seen too.
        a.invoke(say("6"), &t).unwrap();
        let head = saver.get_tuple(&t).unwrap().unwrap();
        saver.step(&head).set("n", json!(7)).commit().unwrap();
        assert_eq!(a.invoke(None, &t).unwrap()["n"], json!(7), "write-behind {behind}, {durability:?}");
    }
}

#[test]
fn async_durability_has_stored_everything_when_invoke_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("async.db");
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let g = graph(&db).with_durability(Durability::Async);
    let t = CheckpointConfig::thread("t");
    for i in 0..5 {
        g.invoke(say(&i.to_string()), &t).unwrap();
        // A separate handle reads the file: no queue to wait for there.
        let other = Db::open(&path).unwrap();
        let tuple = other.checkpointer().get_tuple(&t).unwrap().unwrap();
        assert_eq!(tuple.checkpoint.channel_values["messages"].as_list().unwrap().len(), 2 * (i + 1));
        assert_eq!(other.threads().unwrap()[0].checkpoints, 3 * (i as u64 + 1));
    }
}

/// `Durability::Sync` on a `Db` whose checkpoint writes are queued
/// (write-behind): each checkpoint is nevertheless in the file before the
/// next superstep runs. The second node looks from another connection.
#[test]
fn sync_runs_store_each_checkpoint_before_the_next_superstep_even_with_write_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sync.db");
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let seen_by_another = std::sync::Arc::new(std::sync::Mutex::new(0usize));
    let (p, seen) = (path.clone(), seen_by_another.clone());
    let graph = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("first", |_| Ok(Update::new().set("n", json!(1))))
        .node("second", move |_| {
            let other = Db::open(&p).unwrap().checkpointer();
            *seen.lock().unwrap() = other.list(&agentstate::ListQuery::thread("t")).unwrap().len();
            Ok(Update::new().set("n", json!(2)))
        })
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile(db.checkpointer())
        .unwrap()
        .with_durability(Durability::Sync);
    graph.invoke(Some(json!({"n": 0})), &CheckpointConfig::thread("t")).unwrap();
    // The input checkpoint, the one after `__start__` and the one after
    // `first` were in the file when `second` ran.
    assert_eq!(*seen_by_another.lock().unwrap(), 3);
}
