//! Two processes running one thread: both continue the same checkpoint, one
//! commits, the other gets a typed `Conflict` (LangGraph would store a second
//! branch and run every node twice). Two `Db` handles on one file stand for
//! the two processes: each has its own connections, as another process would.

use std::sync::{Arc, Barrier};

use agentstate::engine::{ChannelSpec, CompiledGraph, Graph, Reducer, Update, END, START};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use serde_json::json;

/// `prep` then `slow`, with a breakpoint before `slow`; `slow` waits at the
/// barrier, so both runs are inside the same superstep before either commits.
fn graph(db: &Db, barrier: Arc<Barrier>) -> CompiledGraph {
    Graph::builder()
        .state("log", ChannelSpec::reducer(Reducer::Append))
        .node("prep", |_| Ok(Update::new().set("log", json!(["prep"]))))
        .node("slow", move |_| {
            barrier.wait();
            Ok(Update::new().set("log", json!(["slow"])))
        })
        .edge(START, "prep")
        .edge("prep", "slow")
        .edge("slow", END)
        .interrupt_before(["slow"])
        .compile(db.checkpointer())
        .unwrap()
}

#[test]
fn two_runs_continuing_one_thread_one_commits_the_other_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let barrier = Arc::new(Barrier::new(2));
    let (a, b) = (Db::open(&path).unwrap(), Db::open(&path).unwrap());
    let (ga, gb) = (graph(&a, barrier.clone()), graph(&b, barrier));
    let thread = CheckpointConfig::thread("t");
    ga.invoke(Some(json!({"log": []})), &thread).unwrap(); // stops before `slow`
    let before = a.checkpointer().list(&ListQuery::thread("t")).unwrap().len();

    let results: Vec<agentstate::Result<serde_json::Value>> = std::thread::scope(|s| {
        let runs = [&ga, &gb].map(|g| s.spawn(|| g.invoke(None, &thread)));
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let conflicts = results.iter().filter(|r| matches!(r, Err(Error::Conflict(_)))).count();
    assert_eq!((ok, conflicts), (1, 1), "{results:?}");

    // One history: one root, every checkpoint's parent the one before it.
    let history = a.checkpointer().list(&ListQuery::thread("t")).unwrap();
    assert_eq!(history.len(), before + 1, "the losing run stored a checkpoint");
    assert_eq!(history.iter().filter(|t| t.parent_config.is_none()).count(), 1);
    for w in history.windows(2) {
        assert_eq!(w[0].parent_config.as_ref(), Some(&w[1].config));
    }
    let state = ga.get_state(&thread).unwrap();
    assert_eq!(state.values["log"], json!(["prep", "slow"]));
    assert!(state.next.is_empty());
}

/// With `Durability::Async` on a write-behind `Db`, runs of different
/// threads share the queue: a failed write of one thread fails that
/// thread's run, never another's, and is not swallowed by another's flush.
#[test]
fn a_queued_failure_fails_its_own_threads_run_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wb.db");
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let g = Graph::builder()
        .state("log", ChannelSpec::reducer(Reducer::Append))
        .node("one", |_| Ok(Update::new().set("log", json!(["one"]))))
        .edge(START, "one")
        .edge("one", END)
        .compile(db.checkpointer())
        .unwrap()
        .with_durability(agentstate::engine::Durability::Async);
    let (a, b) = (CheckpointConfig::thread("a"), CheckpointConfig::thread("b"));
    g.invoke(Some(json!({"log": []})), &b).unwrap();
    db.flush().unwrap();
    let saver = db.checkpointer();
    let head = saver.get_tuple(&b).unwrap().unwrap();
    // Another process continues "b", out of this Db's sight (a stale step
    // of this Db's own would be refused by `commit` at once).
    Db::open(&path).unwrap().checkpointer().step(&head).set("log", json!(["elsewhere"])).commit().unwrap();
    // Queued, refused when it runs: `head` is no longer the head of "b".
    saver.step(&head).set("log", json!(["stale"])).commit().unwrap();
    let out = g.invoke(Some(json!({"log": []})), &a).unwrap();
    assert_eq!(out["log"], json!(["one"]));
    let run_b = g.invoke(Some(json!({"log": []})), &b);
    assert!(matches!(run_b, Err(Error::Conflict(_))), "{run_b:?}");
    db.flush().unwrap();
}
