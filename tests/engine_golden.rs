//! The engine against LangGraph 1.2.22's recordings
//! (`tests/fixtures/engine/*.json`, see `tools/engine_goldens/README.md`).
//!
//! Each test rebuilds a fixture's graphs from their `spec` by hand, runs the
//! fixture's calls on a fresh file, normalises what we stored the way the
//! generator normalises LangGraph's (ids to `c0..`, task ids to
//! `task(cN,name)`, versions to their counters, Python objects to their
//! tagged forms) and compares every checkpoint: versions, versions_seen,
//! updated_channels, metadata, parent, channel values, pending writes (with
//! idx and task path) and next tasks; and each call's output or error, node
//! executions and checkpoints created. Task ids are re-derived from our raw
//! checkpoint ids with LangGraph's formula and the fixture's triggers.

#[path = "engine_golden/harness.rs"]
mod harness;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentstate::engine::{
    interrupt, remove_message, ChannelSpec, Durability, Goto, Graph, GraphBuilder, NodeError, Reducer,
    RetryPolicy, Send, State, Update, END, START,
};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use harness::{counted, fixture, int, one_task_path, py_str, strs, Counts, Harness};
use serde_json::{json, Value};

#[test]
fn linear() {
    let fx = fixture("linear");
    let mut h = Harness::new();
    let mut b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value());
    for n in ["a", "b", "c"] {
        b = b.node(
            n,
            counted(&h.counts, n, move |s| {
                Ok(Update::new().set("items", json!([n])).set("count", json!(int(s, "count") + 1)))
            }),
        );
    }
    h.graph("linear", "main", b.edge(START, "a").edge("a", "b").edge("b", "c").edge("c", END));
    h.check(&fx);
}

#[test]
fn conditional_loop() {
    let fx = fixture("conditional_loop");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("count", ChannelSpec::last_value())
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("count", json!(n)).set("trace", json!([format!("inc{n}")])))
            }),
        )
        .edge(START, "inc")
        .conditional_edges("inc", |s| {
            Ok(vec![if int(s, "count") < 3 { Goto::node("inc") } else { Goto::end() }])
        });
    h.graph("loop", "main", b);
    h.check(&fx);
}

#[test]
fn node_error_resume() {
    let fx = fixture("node_error_resume");
    let mut h = Harness::new();
    // flaky fails on its first run only (the fixture flips a flag between
    // the failing invoke and the resuming one).
    let fail = Arc::new(Mutex::new(true));
    let flag = fail.clone();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "good",
            counted(&h.counts, "good", |s| {
                Ok(Update::new().set("items", json!(["good"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "flaky",
            counted(&h.counts, "flaky", move |_| {
                let mut f = flag.lock().unwrap();
                if *f {
                    *f = false;
                    return Err(NodeError::with_kind("RuntimeError", "flaky failed"));
                }
                Ok(Update::new().set("items", json!(["flaky"])))
            }),
        )
        .node(
            "after",
            counted(&h.counts, "after", |s| {
                Ok(Update::new().set("items", json!(["after"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "good")
        .edge(START, "flaky")
        .edge("good", "after")
        .edge("flaky", "after")
        .edge("after", END);
    h.graph("error", "main", b);
    h.check(&fx);
    assert!(!*fail.lock().unwrap(), "flaky ran twice");
}

/// The fixtures' linear a -> b -> c graph.
fn abc(counts: &Counts) -> GraphBuilder {
    let mut b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value());
    for n in ["a", "b", "c"] {
        b = b.node(
            n,
            counted(counts, n, move |s| {
                Ok(Update::new().set("items", json!([n])).set("count", json!(int(s, "count") + 1)))
            }),
        );
    }
    b.edge(START, "a").edge("a", "b").edge("b", "c").edge("c", END)
}

#[test]
fn interrupt_resume() {
    let fx = fixture("interrupt_resume");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .state("answer", ChannelSpec::last_value())
        .node(
            "prep",
            counted(&h.counts, "prep", |s| {
                Ok(Update::new().set("items", json!(["prep"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!(["ask"])).set("answer", answer))
            }),
        )
        .node(
            "finish",
            counted(&h.counts, "finish", |s| {
                Ok(Update::new()
                    .set("items", json!([format!("finish:{}", py_str(s.get("answer")))]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "finish")
        .edge("finish", END);
    h.graph("interrupt", "interrupt", b);
    let before = abc(&h.counts).interrupt_before(["b"]);
    h.graph("before", "before", before);
    let after = abc(&h.counts).interrupt_after(["a"]);
    h.graph("after", "after", after);
    h.check(&fx);
}

#[test]
fn command_goto() {
    let fx = fixture("command_goto");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "router",
            counted(&h.counts, "router", |s| {
                let to = if int(s, "count") % 2 == 0 { "left" } else { "right" };
                Ok(Update::new()
                    .set("items", json!(["router"]))
                    .set("count", json!(int(s, "count") + 1))
                    .goto(Goto::node(to)))
            }),
        )
        .node("left", counted(&h.counts, "left", |_| Ok(Update::new().set("items", json!(["left"])))))
        .node("right", counted(&h.counts, "right", |_| Ok(Update::new().set("items", json!(["right"])))))
        .edge(START, "router")
        .edge("left", END)
        .edge("right", END);
    h.graph("goto", "main", b);
    h.check(&fx);
}

#[test]
fn durability_modes() {
    let fx = fixture("durability_modes");
    let mut h = Harness::new();
    let (exit, background) = (abc(&h.counts), abc(&h.counts));
    h.graph_with("exit", "main", exit, Durability::Exit);
    h.graph_with("async", "main", background, Durability::Async);
    h.check(&fx);
}

#[test]
fn exit_durability_stores_the_failed_superstep() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |_| Ok(Update::new().set("n", json!(1))))
        .node("b", |_| Err(NodeError::new("no")))
        .edge(START, "a")
        .edge("a", "b")
        .compile(h.db.checkpointer())
        .unwrap()
        .with_durability(Durability::Exit);
    let cfg = CheckpointConfig::thread("t");
    assert!(matches!(g.invoke(Some(json!({"n": 0})), &cfg), Err(Error::Node { node, .. }) if node == "b"));
    let saver = h.db.checkpointer();
    assert_eq!(saver.list(&ListQuery::thread("t")).unwrap().len(), 1);
    let t = saver.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(t.metadata.step(), Some(1));
    assert_eq!(t.pending_writes.len(), 1);
    assert_eq!(t.pending_writes[0].channel, "__error__");
    // The stored checkpoint is the one b's task id hashed: resuming finds it.
    let next = g.next_tasks(&cfg).unwrap();
    assert_eq!(next[0].id, t.pending_writes[0].task_id);
}

#[test]
fn update_state_fork() {
    let fx = fixture("update_state_fork");
    let mut h = Harness::new();
    let (fork, replay) = (abc(&h.counts), abc(&h.counts));
    h.graph("fork", "main", fork);
    h.graph("replay", "main", replay);
    h.check(&fx);
}

/// New input at an old checkpoint (its step-1 checkpoint: a fork whose
/// input checkpoint's parent is the old one), then at the head addressed by
/// its id.
#[test]
fn input_at_checkpoint() {
    let fx = fixture("input_at_checkpoint");
    let mut h = Harness::new();
    let branch = abc(&h.counts);
    h.graph("branch", "main", branch);
    h.check(&fx);
}

/// The `abc` graph on a fresh file at `durability` (write-behind for
/// `Async`).
fn abc_at(durability: Durability) -> (tempfile::TempDir, Db, agentstate::engine::CompiledGraph) {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::builder().write_behind(durability == Durability::Async).open(dir.path().join("f.db")).unwrap();
    let g = abc(&Counts::default()).compile(db.checkpointer()).unwrap().with_durability(durability);
    (dir, db, g)
}

/// Thread "t" still lists `old_head` (the old branch is kept), and its new
/// head descends from `fork_point`.
fn assert_forked(saver: &agentstate::Checkpointer, old_head: &str, fork_point: &str, durability: Durability) {
    let after = saver.list(&ListQuery::thread("t")).unwrap();
    assert!(after.iter().any(|t| t.checkpoint.id == old_head), "{durability:?}: the old branch is kept");
    let mut cur = after[0].clone();
    while cur.checkpoint.id != fork_point {
        let parent = cur.parent_config.clone().expect("a parent on the way to the fork point");
        cur = saver.get_tuple(&parent).unwrap().unwrap();
    }
}

/// Input at an old checkpoint forks from it at every durability: the run
/// ends in the state the `sync` golden records, the old branch stays in the
/// history, and the new head descends from the addressed checkpoint.
#[test]
fn input_at_a_past_checkpoint_forks_at_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (_dir, db, g) = abc_at(durability);
        let cfg = CheckpointConfig::thread("t");
        g.invoke(Some(json!({"items": ["in"], "count": 0})), &cfg).unwrap();
        let saver = db.checkpointer();
        let history = saver.list(&ListQuery::thread("t")).unwrap();
        let old_head = history[0].checkpoint.id.clone();
        // Exit stores only the run's last checkpoint: fork from it there.
        let at = history.iter().find(|t| t.metadata.step() == Some(1)).unwrap_or(&history[0]);
        let out = g.invoke(Some(json!({"items": ["again"], "count": 100})), &at.config).unwrap();
        let expected = match durability {
            Durability::Exit => json!({"items": ["in", "a", "b", "c", "again", "a", "b", "c"], "count": 103}),
            _ => json!({"items": ["in", "a", "again", "a", "b", "c"], "count": 103}),
        };
        assert_eq!(out, expected, "{durability:?}");
        assert_forked(&saver, &old_head, &at.checkpoint.id, durability);
    }
}

/// Input at the last checkpoint of an earlier run (not the head) forks
/// from it at every durability, `exit` included, and a plain invoke then
/// continues the new branch.
#[test]
fn input_at_an_earlier_runs_checkpoint_forks_at_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (_dir, db, g) = abc_at(durability);
        let cfg = CheckpointConfig::thread("t");
        g.invoke(Some(json!({"items": ["one"], "count": 0})), &cfg).unwrap();
        let saver = db.checkpointer();
        let first = saver.get_tuple(&cfg).unwrap().unwrap();
        g.invoke(Some(json!({"items": ["two"], "count": 0})), &cfg).unwrap();
        let old_head = saver.get_tuple(&cfg).unwrap().unwrap().checkpoint.id.clone();
        let out = g.invoke(Some(json!({"items": ["fork"], "count": 10})), &first.config).unwrap();
        assert_eq!(
            out,
            json!({"items": ["one", "a", "b", "c", "fork", "a", "b", "c"], "count": 13}),
            "{durability:?}"
        );
        assert_forked(&saver, &old_head, &first.checkpoint.id, durability);
        let next = g.invoke(Some(json!({"items": ["more"], "count": 0})), &cfg).unwrap();
        assert_eq!(
            next["items"],
            json!(["one", "a", "b", "c", "fork", "a", "b", "c", "more", "a", "b", "c"])
        );
    }
}

fn subgraph_parent(counts: &Counts, ask: bool) -> GraphBuilder {
    let step = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |s| {
            Ok(Update::new().set("trace", json!([n])).set("count", json!(int(s, "count") + 1)))
        })
    };
    let mut child = Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node("s1", step(counts, "s1"));
    child = if ask {
        child.node(
            "s2",
            counted(counts, "s2", |s| {
                let answer = interrupt(json!("sub approve?"))?;
                let trace = format!("s2:{}", py_str(Some(&answer)));
                Ok(Update::new().set("trace", json!([trace])).set("count", json!(int(s, "count") + 1)))
            }),
        )
    } else {
        child.node("s2", step(counts, "s2"))
    };
    let child = child.edge(START, "s1").edge("s1", "s2").edge("s2", END);
    Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node("pre", step(counts, "pre"))
        .subgraph("sub", child)
        .node("post", step(counts, "post"))
        .edge(START, "pre")
        .edge("pre", "sub")
        .edge("sub", "post")
        .edge("post", END)
}

#[test]
fn subgraph() {
    let fx = fixture("subgraph");
    let mut h = Harness::new();
    let (plain, asking) = (subgraph_parent(&h.counts, false), subgraph_parent(&h.counts, true));
    h.graph("plain", "plain", plain);
    h.graph("interrupted", "interrupted", asking);
    h.check(&fx);
}

/// `subgraph_state`'s child: s1 -> s2, s2 asks `interrupt("sub approve?")`.
fn asking_child(counts: &Counts) -> GraphBuilder {
    let c = counts.clone();
    Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "s1",
            counted(&c, "s1", |s| {
                Ok(Update::new().set("trace", json!(["s1"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "s2",
            counted(&c, "s2", |s| {
                let answer = interrupt(json!("sub approve?"))?;
                let trace = format!("s2:{}", py_str(Some(&answer)));
                Ok(Update::new().set("trace", json!([trace])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "s1")
        .edge("s1", "s2")
        .edge("s2", END)
}

/// pre -> `name` (a subgraph) -> post.
fn around(counts: &Counts, name: &str, sub: GraphBuilder) -> GraphBuilder {
    let step = |n: &'static str| {
        counted(counts, n, move |s| {
            Ok(Update::new().set("trace", json!([n])).set("count", json!(int(s, "count") + 1)))
        })
    };
    Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node("pre", step("pre"))
        .subgraph(name, sub)
        .node("post", step("post"))
        .edge(START, "pre")
        .edge("pre", name)
        .edge(name, "post")
        .edge("post", END)
}

#[test]
fn subgraph_state() {
    let fx = fixture("subgraph_state");
    let mut h = Harness::new();
    let edit = around(&h.counts, "sub", asking_child(&h.counts));
    let mid = Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "m1",
            counted(&h.counts, "m1", |s| {
                Ok(Update::new().set("trace", json!(["m1"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .subgraph("inner", asking_child(&h.counts))
        .edge(START, "m1")
        .edge("m1", "inner")
        .edge("inner", END);
    let nested = around(&h.counts, "mid", mid);
    let before = around(&h.counts, "sub", asking_child(&h.counts)).interrupt_before(["sub"]);
    h.graph("edit", "edit", edit);
    h.graph("answer", "edit", around(&h.counts, "sub", asking_child(&h.counts)));
    h.graph("before", "before", before);
    h.graph("nested", "nested", nested);
    // Thread `answer` updates its subgraph as the interrupted s2: the
    // writes keep s2's task path in our file, as in `update_state_head`.
    h.check_adjusted(&fx, one_task_path);
}

/// `stream(..., subgraphs=True)`: each event with the namespace it comes
/// from, a subgraph's events (its own input state, updates, states and
/// interrupts) before its parent task's; without `subgraphs` none of them.
#[test]
fn stream_subgraphs() {
    let fx = fixture("stream_subgraphs");
    let mut h = Harness::new();
    let one = around(&h.counts, "sub", asking_child(&h.counts));
    let quiet = around(&h.counts, "sub", asking_child(&h.counts));
    let mid = Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "m1",
            counted(&h.counts, "m1", |s| {
                Ok(Update::new().set("trace", json!(["m1"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .subgraph("inner", asking_child(&h.counts))
        .edge(START, "m1")
        .edge("m1", "inner")
        .edge("inner", END);
    let nested = around(&h.counts, "mid", mid);
    let fan = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node("work", counted(&h.counts, "work", |_| Ok(Update::new().set("items", json!(["work"])))))
        .node(
            "join",
            counted(&h.counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "work")
        .edge("ask", "join")
        .edge("work", "join")
        .edge("join", END);
    let outer = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("pre", counted(&h.counts, "pre", |_| Ok(Update::new().set("items", json!(["pre"])))))
        .subgraph("sub", fan)
        .edge(START, "pre")
        .edge("pre", "sub")
        .edge("sub", END);
    h.graph("one", "one", one);
    h.graph("quiet", "one", quiet);
    h.graph("nested", "nested", nested);
    h.graph("fan", "fan", outer);
    h.check(&fx);
}

fn send_graph(counts: &Counts) -> GraphBuilder {
    Graph::builder()
        .state("topics", ChannelSpec::last_value())
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .state("joined", ChannelSpec::last_value())
        .node("plan", counted(counts, "plan", |_| Ok(Update::new().set("topics", json!(["t1", "t2", "t3"])))))
        .node(
            "worker",
            counted(counts, "worker", |s| {
                Ok(Update::new().set("results", json!([format!("done:{}", py_str(s.get("topic")))])))
            }),
        )
        .node(
            "join",
            counted(counts, "join", |s| Ok(Update::new().set("joined", json!(strs(s, "results").join(","))))),
        )
        .edge(START, "plan")
        .conditional_edges("plan", |s| {
            Ok(strs(s, "topics")
                .into_iter()
                .map(|t| Goto::Send(Send::new("worker", json!({"topic": t}))))
                .collect())
        })
        .edge("worker", "join")
        .edge("join", END)
}

fn barrier_graph(counts: &Counts) -> GraphBuilder {
    let mut b = Graph::builder()
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .state("joined", ChannelSpec::last_value());
    for n in ["x", "y1", "y"] {
        b = b.node(n, counted(counts, n, move |_| Ok(Update::new().set("results", json!([n])))));
    }
    b.node(
        "join",
        counted(counts, "join", |s| Ok(Update::new().set("joined", json!(strs(s, "results").join("+"))))),
    )
    .edge(START, "x")
    .edge(START, "y1")
    .edge("y1", "y")
    .join(["x", "y"], "join")
    .edge("join", END)
}

#[test]
fn send_fanout_join() {
    let fx = fixture("send_fanout_join");
    let mut h = Harness::new();
    let (s, b) = (send_graph(&h.counts), barrier_graph(&h.counts));
    h.graph("send", "send", s);
    h.graph("barrier", "barrier", b);
    h.check(&fx);
}

#[test]
fn messages_reducer() {
    let fx = fixture("messages_reducer");
    let mut h = Harness::new();
    let has_m1 = |s: &State| {
        s.get("messages").and_then(Value::as_array).is_some_and(|ms| {
            ms.iter().any(|m| m.pointer("/__ext__/args/id").and_then(Value::as_str) == Some("m1"))
        })
    };
    let b = Graph::builder()
        .state("messages", ChannelSpec::reducer(Reducer::Messages))
        .node(
            "reply",
            counted(&h.counts, "reply", |_| {
                Ok(Update::new()
                    .set("messages", json!([{"role": "assistant", "content": "hello", "id": "m2"}])))
            }),
        )
        .node(
            "edit",
            counted(&h.counts, "edit", |_| {
                Ok(Update::new()
                    .set("messages", json!([{"role": "assistant", "content": "hello (edited)", "id": "m2"}])))
            }),
        )
        .node(
            "prune",
            counted(&h.counts, "prune", move |s| {
                Ok(if has_m1(s) {
                    Update::new().set("messages", json!([remove_message("m1")]))
                } else {
                    Update::new()
                })
            }),
        )
        .edge(START, "reply")
        .edge("reply", "edit")
        .edge("edit", "prune")
        .edge("prune", END);
    h.graph("messages", "main", b);
    h.check(&fx);
}

#[test]
fn custom_channels() {
    let fx = fixture("custom_channels");
    let mut h = Harness::new();
    let add_ints = |a: &Value, b: &Value| Ok(json!(a.as_i64().unwrap_or(0) + b.as_i64().unwrap_or(0)));
    let b = Graph::builder()
        .state("total", ChannelSpec::custom(add_ints, Some(json!(0))))
        .state("scratch", ChannelSpec::ephemeral())
        .state("log", ChannelSpec::topic(true))
        .state("out", ChannelSpec::last_value())
        .node(
            "p",
            counted(&h.counts, "p", |_| {
                Ok(Update::new().set("total", json!(5)).set("scratch", json!("tmp-p")).set("log", json!("p")))
            }),
        )
        .node(
            "q",
            counted(&h.counts, "q", |s| {
                Ok(Update::new()
                    .set("total", json!(7))
                    .set("log", json!(["q1", "q2"]))
                    .set("out", json!(format!("saw:{}", py_str(s.get("scratch"))))))
            }),
        )
        .node(
            "r",
            counted(&h.counts, "r", |s| {
                let out = format!(
                    "{}|scratch:{}|total:{}",
                    py_str(s.get("out")),
                    py_str(s.get("scratch")),
                    int(s, "total")
                );
                Ok(Update::new().set("out", json!(out)))
            }),
        )
        .edge(START, "p")
        .edge("p", "q")
        .edge("q", "r")
        .edge("r", END);
    h.graph("channels", "main", b);
    h.check(&fx);
}

#[test]
fn resume_with_nothing_to_resume_is_a_typed_error() {
    let h = Harness::new();
    let g = Graph::builder()
        .node("a", |_| Ok(Update::new()))
        .edge(START, "a")
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(g.invoke(None, &CheckpointConfig::thread("t")), Err(Error::EmptyInput)));
    assert!(matches!(g.invoke(Some(json!(3)), &CheckpointConfig::thread("t")), Err(Error::InvalidUpdate(_))));
    let looped = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |s| Ok(Update::new().set("n", json!(int(s, "n") + 1))))
        .edge(START, "a")
        .conditional_edges("a", |_| Ok(vec![Goto::node("a")]))
        .recursion_limit(3)
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(
        looped.invoke(Some(json!({"n": 0})), &CheckpointConfig::thread("loop")),
        Err(Error::Recursion { limit: 3 })
    ));
}

#[test]
fn a_panicking_node_fails_its_task_and_history_lists_every_checkpoint() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |s| Ok(Update::new().set("n", json!(int(s, "n") + 1))))
        .node("boom", |s| if int(s, "n") == 1 { panic!("kaboom") } else { Ok(Update::new()) })
        .edge(START, "a")
        .edge("a", "boom")
        .compile(h.db.checkpointer())
        .unwrap();
    let cfg = CheckpointConfig::thread("p");
    let err = g.invoke(Some(json!({"n": 0})), &cfg).unwrap_err();
    match err {
        Error::Node { node, error, .. } => {
            assert_eq!(node, "boom");
            assert_eq!(error.kind(), "Panic");
            assert_eq!(error.message(), "kaboom");
        }
        other => panic!("{other:?}"),
    }
    let latest = h.db.checkpointer().get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(latest.pending_writes[0].value, json!("Panic('kaboom')"));
    let history = g.get_state_history(&cfg).unwrap();
    let steps: Vec<i64> = history.iter().map(|s| s.metadata.as_ref().unwrap().step().unwrap()).collect();
    assert_eq!(steps, [1, 0, -1]);
    assert_eq!(history[0].next, ["boom"]);
    assert_eq!(history[0].values, json!({"n": 1}));
}

#[test]
fn a_growing_append_channel_is_stored_incrementally() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("log", ChannelSpec::reducer(Reducer::Append))
        .node("tick", |s| Ok(Update::new().set("log", json!([format!("entry {}", strs(s, "log").len())]))))
        .edge(START, "tick")
        .conditional_edges("tick", |s| {
            Ok(vec![if strs(s, "log").len() < 40 { Goto::node("tick") } else { Goto::end() }])
        })
        .recursion_limit(100)
        .compile(h.db.checkpointer())
        .unwrap();
    let cfg = CheckpointConfig::thread("grow");
    let out = g.invoke(Some(json!({"log": []})), &cfg).unwrap();
    assert_eq!(out["log"].as_array().unwrap().len(), 40);
    h.db.flush().unwrap();
    let conn = agentstate::rusqlite::Connection::open(&h.path).unwrap();
    let deltas: i64 = conn
        .query_row("SELECT count(*) FROM checkpoint_blobs WHERE channel = 'log' AND chain > 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(deltas > 10, "only {deltas} incremental rows");
    // Read back cold: the whole list.
    let fresh = Db::open(&h.path).unwrap().checkpointer();
    let t = fresh.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(t.checkpoint.channel_values["log"].to_value(), out["log"]);
}

#[test]
fn breakpoints_on_every_node() {
    let h = Harness::new();
    let counts = Counts::default();
    let g = abc(&counts).interrupt_before(["*"]).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("star");
    // "*" stops before a, b and c, not before __start__ (hidden in LangGraph).
    let mut out = g.invoke(Some(json!({"items": [], "count": 0})), &cfg).unwrap();
    let mut stops = 0;
    while !g.next_tasks(&cfg).unwrap().is_empty() {
        stops += 1;
        out = g.invoke(None, &cfg).unwrap();
        assert!(stops < 10);
    }
    assert_eq!(out["items"], json!(["a", "b", "c"]));
    assert_eq!(stops, 3);
}

#[test]
fn the_tasks_of_a_superstep_run_concurrently() {
    let h = Harness::new();
    // Three Sends to a node that sleeps.
    let g = Graph::builder()
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .node("plan", |_| Ok(Update::new()))
        .node("worker", |s| {
            std::thread::sleep(std::time::Duration::from_millis(150));
            Ok(Update::new().set("results", json!([py_str(s.get("topic"))])))
        })
        .edge(START, "plan")
        .conditional_edges("plan", |_| {
            Ok(["t1", "t2", "t3"]
                .iter()
                .map(|t| Goto::Send(Send::new("worker", json!({"topic": t}))))
                .collect())
        })
        .compile(h.db.checkpointer())
        .unwrap();
    let started = std::time::Instant::now();
    let out = g.invoke(Some(json!({"results": []})), &CheckpointConfig::thread("par")).unwrap();
    let took = started.elapsed();
    assert_eq!(out["results"], json!(["t1", "t2", "t3"]), "applied in task path order, not finish order");
    assert!(took < std::time::Duration::from_millis(420), "took {took:?}");
}

/// A node that calls `interrupt()` twice: the second interrupt, raised with
/// one answer given, has its own id (`<task ns>|1`), and the task's
/// `__resume__` write holds the answers it consumed.
#[test]
fn multi_interrupt() {
    let fx = fixture("multi_interrupt");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("answers", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "ask",
            counted(&h.counts, "ask", |s| {
                let first = interrupt(json!("first?"))?;
                let second = interrupt(json!("second?"))?;
                Ok(Update::new()
                    .set("answers", json!([first, second]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "done",
            counted(&h.counts, "done", |s| {
                Ok(Update::new().set("answers", json!(["done"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "ask")
        .edge("ask", "done")
        .edge("done", END);
    h.graph("twice", "main", b);
    h.check(&fx);
}

/// An interrupting task next to one that succeeds (thread "mixed": the
/// resume runs only the interrupted one), and two interrupting tasks in one
/// superstep (thread "both", not resumed: LangGraph refuses a bare resume
/// with two interrupts pending).
#[test]
fn parallel_interrupt() {
    let fx = fixture("parallel_interrupt");
    let mut h = Harness::new();
    let mixed = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("answer", ChannelSpec::last_value())
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new()
                    .set("items", json!([format!("ask:{}", py_str(Some(&answer)))]))
                    .set("answer", answer))
            }),
        )
        .node("work", counted(&h.counts, "work", |_| Ok(Update::new().set("items", json!(["work"])))))
        .node(
            "join",
            counted(&h.counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "work")
        .edge("ask", "join")
        .edge("work", "join")
        .edge("join", END);
    h.graph("mixed", "mixed", mixed);
    let mut both = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("answer", ChannelSpec::last_value());
    for n in ["ask1", "ask2"] {
        both = both
            .node(
                n,
                counted(&h.counts, n, move |_| {
                    let answer = interrupt(json!(format!("{n}?")))?;
                    Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
                }),
            )
            .edge(START, n)
            .edge(n, END);
    }
    h.graph("both", "both", both);
    h.check(&fx);
}

/// A loop that never ends hits the recursion limit: the checkpoints of the
/// steps it ran are stored, with the next task pending; `invoke(None)` gets
/// as many steps again.
#[test]
fn recursion_limit() {
    let fx = fixture("recursion_limit");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("count", ChannelSpec::last_value())
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("count", json!(n)).set("trace", json!([format!("inc{n}")])))
            }),
        )
        .edge(START, "inc")
        .conditional_edges("inc", |_| Ok(vec![Goto::node("inc")]))
        .recursion_limit(3);
    h.graph("forever", "main", b);
    h.check(&fx);
}

/// `update_state` at the thread's head: as a node with a router (the
/// router runs on the updated state), and as an interrupted node (the
/// update answers in its place). Both store the update's writes on the head
/// too, as LangGraph does.
///
/// One difference on purpose (docs/design.md, "The engine"): our file keeps
/// one task path per task and checkpoint, so the update's writes for the
/// interrupted `ask` carry `ask`'s path and sort with its `__interrupt__`
/// write by index, where LangGraph keeps `~__interrupt__, 0000000000` on
/// them.
#[test]
fn update_state_head() {
    let fx = fixture("update_state_head");
    update_state_head_graphs().check_adjusted(&fx, one_task_path);
}

fn update_state_head_graphs() -> Harness {
    let mut h = Harness::new();
    let looped = Graph::builder()
        .state("count", ChannelSpec::last_value())
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("count", json!(n)).set("trace", json!([format!("inc{n}")])))
            }),
        )
        .edge(START, "inc")
        .conditional_edges("inc", |s| {
            Ok(vec![if int(s, "count") < 3 { Goto::node("inc") } else { Goto::end() }])
        });
    h.graph("route", "loop", looped);
    let approve = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .state("answer", ChannelSpec::last_value())
        .node(
            "prep",
            counted(&h.counts, "prep", |s| {
                Ok(Update::new().set("items", json!(["prep"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!(["ask"])).set("answer", answer))
            }),
        )
        .node(
            "finish",
            counted(&h.counts, "finish", |s| {
                Ok(Update::new()
                    .set("items", json!([format!("finish:{}", py_str(s.get("answer")))]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "finish")
        .edge("finish", END);
    h.graph("skip", "approve", approve);
    h
}

/// Sends into a node whose key has a user binary reducer (string
/// concatenation: the order of the writes shows), one Send failing once:
/// the resume reruns only that push task.
#[test]
fn send_reducer_error() {
    check_sends("send_reducer_error");
}

/// The fixture `name` on [`sends_graph`] (its t2 worker failing once).
fn check_sends(name: &str) {
    let fx = fixture(name);
    let mut h = Harness::new();
    let fail = Arc::new(Mutex::new(true));
    let b = sends_graph(&h.counts, &fail);
    h.graph("sends", "main", b);
    h.check(&fx);
    assert!(!*fail.lock().unwrap(), "the t2 worker failed once");
}

/// A task that interrupted, then finished on the resume while its sibling
/// failed again, keeps its `__interrupt__` write next to its output: it
/// counts as finished (get_state shows its output, only the sibling is next)
/// and the next resume does not run it again.
#[test]
fn interrupt_then_error() {
    check_ask_and_flaky("interrupt_then_error");
}

/// The fixture `name` on [`ask_and_flaky`] (flaky runs three times).
fn check_ask_and_flaky(name: &str) {
    let fx = fixture(name);
    let mut h = Harness::new();
    let runs = Arc::new(Mutex::new(0));
    let b = ask_and_flaky(&h.counts, &runs);
    h.graph("mixed", "main", b);
    h.check(&fx);
    assert_eq!(*runs.lock().unwrap(), 3, "flaky ran three times");
}

/// Two interrupts pending in one superstep, answered by id (LangGraph's
/// `Command(resume={id: answer})`): one at a time (the other task stops at
/// its interrupt again), and both in one map.
#[test]
fn resume_by_id() {
    let fx = fixture("resume_by_id");
    let mut h = Harness::new();
    for thread in ["one", "both"] {
        let b = two_askers(&h.counts);
        h.graph(thread, "main", b);
    }
    h.check(&fx);
}

/// `resume_by_id` checks its ids against the interrupts pending on the
/// head (LangGraph's strict resume): none, or one that is not pending, is a
/// typed error and the thread does not move.
#[test]
fn resume_by_id_takes_only_pending_interrupts() {
    let h = Harness::new();
    let g = two_askers(&h.counts).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("t");
    let paused = g.invoke(Some(json!({"items": []})), &cfg).unwrap();
    let ids: Vec<String> =
        agentstate::engine::Interrupt::from_output(&paused).into_iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 2);
    let head = g.get_state(&cfg).unwrap().config;
    let no_answers: [(String, Value); 0] = [];
    assert!(
        matches!(g.resume_by_id(no_answers, &cfg), Err(Error::InvalidArgument(m)) if m.contains(&ids[0]))
    );
    let unknown = "0".repeat(32);
    let err = g.resume_by_id([(unknown.clone(), json!("x")), (ids[0].clone(), json!("A"))], &cfg);
    assert!(matches!(err, Err(Error::InvalidArgument(m)) if m.contains(&unknown)));
    assert_eq!(g.get_state(&cfg).unwrap().config, head, "a refused resume stores nothing");
    // Answering one leaves the other pending; its answer then finishes.
    let out = g.resume_by_id([(ids[1].clone(), json!("B"))], &cfg).unwrap();
    assert_eq!(
        agentstate::engine::Interrupt::from_output(&out).iter().map(|i| &i.id).collect::<Vec<_>>(),
        [&ids[0]]
    );
    let err = g.resume_by_id([(ids[1].clone(), json!("again"))], &cfg);
    assert!(matches!(err, Err(Error::InvalidArgument(_))), "an answered interrupt is not pending");
    let done = g.resume_by_id([(ids[0].clone(), json!("A"))], &cfg).unwrap();
    assert_eq!(done["items"], json!(["ask1:A", "ask2:B", "join:2"]));
}

/// ask1 and ask2 interrupt in one superstep; join waits for both.
fn two_askers(counts: &Counts) -> GraphBuilder {
    let asker = |n: &'static str| {
        counted(counts, n, move |_| {
            let answer = interrupt(json!(format!("{n}?")))?;
            Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
        })
    };
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("ask1", asker("ask1"))
        .node("ask2", asker("ask2"))
        .node(
            "join",
            counted(counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask1")
        .edge(START, "ask2")
        .join(["ask1", "ask2"], "join")
        .edge("join", END)
}

/// prep -> ask -> finish, ask calling `interrupt("approve?")`.
fn prep_ask_finish(counts: &Counts) -> GraphBuilder {
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .state("answer", ChannelSpec::last_value())
        .node(
            "prep",
            counted(counts, "prep", |s| {
                Ok(Update::new().set("items", json!(["prep"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "ask",
            counted(counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!(["ask"])).set("answer", answer))
            }),
        )
        .node(
            "finish",
            counted(counts, "finish", |s| {
                Ok(Update::new()
                    .set("items", json!([format!("finish:{}", py_str(s.get("answer")))]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "finish")
        .edge("finish", END)
}

/// `update_state` without `as_node` (`update_state_inferred`): applied as
/// the last node that finished. Paused before c, the update is b's (c is
/// next again); paused inside ask's `interrupt()`, it is prep's (ask did
/// not finish), so ask runs again and interrupts again.
#[test]
fn update_state_infer() {
    let fx = fixture("update_state_infer");
    let mut h = Harness::new();
    let before_c = abc(&h.counts).interrupt_before(["c"]);
    h.graph("infer", "before_c", before_c);
    let approve = prep_ask_finish(&h.counts);
    h.graph("asked", "approve", approve);
    h.check(&fx);
}

/// Two nodes finishing in the last superstep make an update without
/// `as_node` ambiguous (a typed `InvalidUpdate`, nothing stored), also after
/// an update as one of them; after a join it is the join's.
#[test]
fn update_state_ambiguous() {
    let fx = fixture("update_state_ambiguous");
    let mut h = Harness::new();
    let tag = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |_| Ok(Update::new().set("items", json!([n]))))
    };
    let fan = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("x", tag(&h.counts, "x"))
        .node("y", tag(&h.counts, "y"))
        .edge(START, "x")
        .edge(START, "y")
        .edge("x", END)
        .edge("y", END);
    h.graph("fan", "fan", fan);
    let joined = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("x", tag(&h.counts, "x"))
        .node("y", tag(&h.counts, "y"))
        .node("join", tag(&h.counts, "join"))
        .edge(START, "x")
        .edge(START, "y")
        .edge("x", "join")
        .edge("y", "join")
        .edge("join", END);
    h.graph("joined", "joined", joined);
    h.check(&fx);
}

/// `update_state` on threads with no checkpoint: the update makes the first
/// checkpoint (step 0, no parent), as START when inferred (twice: updates
/// leave `versions_seen` empty) or as a given node; `invoke(None)` goes on
/// from there.
#[test]
fn update_state_empty_thread() {
    let fx = fixture("update_state_empty_thread");
    let mut h = Harness::new();
    let (fresh, fresh_as) = (abc(&h.counts), abc(&h.counts));
    h.graph("fresh", "main", fresh);
    h.graph("fresh_as", "main", fresh_as);
    h.check(&fx);
}

/// What the goldens do not record: an unknown checkpoint id is `NotFound`
/// (LangGraph would start a thread whose first checkpoint's parent is that
/// missing id), an unknown node `InvalidUpdate` with LangGraph's message,
/// and neither stores anything.
#[test]
fn update_state_refusals_store_nothing() {
    let h = Harness::new();
    let g = abc(&h.counts).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("t");
    let missing = cfg.clone().at("1f0c0000-0000-6000-8000-000000000000");
    assert!(matches!(g.update_state_inferred(&missing, json!({"count": 1})), Err(Error::NotFound(_))));
    assert!(matches!(g.update_state(&missing, json!({"count": 1}), "a"), Err(Error::NotFound(_))));
    let err = g.update_state(&cfg, json!({"count": 1}), "zz");
    assert!(matches!(err, Err(Error::InvalidUpdate(m)) if m == "Node zz does not exist"));
    let err = g.update_state_inferred(&cfg, json!([1]));
    assert!(matches!(err, Err(Error::InvalidUpdate(_))));
    assert!(g.get_state(&cfg).unwrap().config.is_none(), "the thread is still empty");
    // An update as __end__ is not one LangGraph accepts either.
    let err = g.update_state(&cfg, json!({"count": 1}), END);
    assert!(matches!(err, Err(Error::InvalidUpdate(m)) if m == "Node __end__ does not exist"));
}

/// `stream` on a chain with a loop: `__start__` reports only the state it
/// makes, a node that writes no state key an empty update (LangGraph's
/// `{node: None}`) and no state after its superstep; `stream(None)` on the
/// finished thread reports the state alone.
#[test]
fn stream_chain() {
    let fx = fixture("stream_chain");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "a",
            counted(&h.counts, "a", |s| {
                Ok(Update::new().set("items", json!(["a"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node("noop", counted(&h.counts, "noop", |_| Ok(Update::new())))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("items", json!([format!("inc{n}")])).set("count", json!(n)))
            }),
        )
        .edge(START, "a")
        .edge("a", "noop")
        .edge("noop", "inc")
        .conditional_edges("inc", |s| {
            Ok(vec![if int(s, "count") < 3 { Goto::node("inc") } else { Goto::end() }])
        });
    h.graph("chain", "main", b);
    h.check(&fx);
}

/// `stream` of runs that pause: an `interrupt()` next to a sibling that
/// finishes (the interrupt, the state with it, the sibling's update, the
/// state with the sibling's write), its resume (the state, the sibling's
/// stored update as cached, the rest), two interrupts in one superstep, and
/// breakpoints before and after a node.
#[test]
fn stream_interrupt() {
    let fx = fixture("stream_interrupt");
    let mut h = Harness::new();
    let pause = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node("work", counted(&h.counts, "work", |_| Ok(Update::new().set("items", json!(["work"])))))
        .node(
            "join",
            counted(&h.counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "work")
        .edge("ask", "join")
        .edge("work", "join")
        .edge("join", END);
    h.graph("pause", "pause", pause);
    let mut two = Graph::builder().state("items", ChannelSpec::reducer(Reducer::Append));
    for n in ["p", "q"] {
        two = two
            .node(
                n,
                counted(&h.counts, n, move |_| {
                    let answer = interrupt(json!(format!("{n}?")))?;
                    Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
                }),
            )
            .edge(START, n)
            .edge(n, END);
    }
    h.graph("two", "two", two);
    let breakpoints = abc(&h.counts).interrupt_before(["b"]).interrupt_after(["c"]);
    h.graph("breakpoints", "breakpoints", breakpoints);
    h.check(&fx);
}

/// `stream` of a Send fan-out whose t2 worker fails once: t1's and t3's
/// updates, then the error; `stream(None)` reports their stored updates as
/// cached before t2 runs.
#[test]
fn stream_send() {
    check_sends("stream_send");
}

/// `stream` of `interrupt_then_error`: a superstep that both pauses and
/// fails reports the interrupt, then fails; the resume reports the answered
/// task's update before the error; the next run reports it as cached.
#[test]
fn stream_interrupt_error() {
    check_ask_and_flaky("stream_interrupt_error");
}

/// Node retry policies: retried inside the task (no checkpoint between
/// attempts), a fresh attempt count on resume, errors `retry_on` leaves
/// out not retried, `interrupt()` not retried.
#[test]
fn retry_policy() {
    let fx = fixture("retry_policy");
    let mut h = Harness::new();
    let fast = || {
        RetryPolicy::new()
            .initial_interval(Duration::from_millis(1))
            .backoff_factor(2.0)
            .max_interval(Duration::from_millis(4))
            .jitter(false)
    };
    // `node` fails with `kind` on its first `times` runs (over the whole
    // test), then writes `["<node>:<run>"]`; `after` counts the items.
    let build =
        |counts: &Counts, node: &'static str, times: usize, kind: &'static str, policy: RetryPolicy| {
            let runs = Arc::new(Mutex::new(0));
            Graph::builder()
                .state("items", ChannelSpec::reducer(Reducer::Append))
                .node(
                    node,
                    counted(counts, node, move |_| {
                        let mut n = runs.lock().unwrap();
                        *n += 1;
                        if *n <= times {
                            return Err(NodeError::with_kind(kind, format!("{node} failed ({n})")));
                        }
                        Ok(Update::new().set("items", json!([format!("{node}:{n}")])))
                    }),
                )
                .node(
                    "after",
                    counted(counts, "after", |s| {
                        Ok(Update::new().set("items", json!([format!("after:{}", strs(s, "items").len())])))
                    }),
                )
                .retry(node, policy)
                .edge(START, node)
                .edge(node, "after")
                .edge("after", END)
        };
    let twice = build(&h.counts, "flaky", 2, "ConnectionError", fast().max_attempts(3));
    h.graph("twice", "twice", twice);
    let exhaust = build(&h.counts, "doomed", 3, "ConnectionError", fast().max_attempts(2));
    h.graph("exhaust", "exhaust", exhaust);
    let no_retry = build(&h.counts, "picky", 1, "ValueError", fast().max_attempts(3));
    h.graph("no_retry", "no_retry", no_retry);
    let only_key =
        build(&h.counts, "narrow", 1, "ConnectionError", fast().max_attempts(3).retry_on_kinds(["KeyError"]));
    h.graph("only_key", "only_key", only_key);
    let ask = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node(
            "after",
            counted(&h.counts, "after", |s| {
                Ok(Update::new().set("items", json!([format!("after:{}", strs(s, "items").len())])))
            }),
        )
        .retry("ask", fast().max_attempts(3))
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END);
    h.graph("ask", "ask", ask);
    h.check(&fx);
}

/// A retry policy on a subgraph node (a retry runs the subgraph afresh in
/// namespace `sub:<task id>|1`, also its stream namespace) and on a node
/// inside a subgraph.
#[test]
fn retry_subgraph() {
    let fx = fixture("retry_subgraph");
    let mut h = Harness::new();
    let policy = || {
        RetryPolicy::new()
            .max_attempts(3)
            .initial_interval(Duration::from_millis(1))
            .max_interval(Duration::from_millis(4))
            .jitter(false)
    };
    let step = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |_| Ok(Update::new().set("trace", json!([n]))))
    };
    let build = |counts: &Counts, flaky: &'static str, outer: bool| {
        let runs = Arc::new(Mutex::new(0));
        let mut child = Graph::builder()
            .state("trace", ChannelSpec::reducer(Reducer::Append))
            .node("s1", step(counts, "s1"))
            .node(
                flaky,
                counted(counts, flaky, move |_| {
                    let mut n = runs.lock().unwrap();
                    *n += 1;
                    if *n <= 1 {
                        return Err(NodeError::with_kind("ConnectionError", format!("{flaky} failed ({n})")));
                    }
                    Ok(Update::new().set("trace", json!([format!("{flaky}:{n}")])))
                }),
            )
            .edge(START, "s1")
            .edge("s1", flaky)
            .edge(flaky, END);
        if !outer {
            child = child.retry(flaky, policy());
        }
        let parent = Graph::builder()
            .state("trace", ChannelSpec::reducer(Reducer::Append))
            .node("pre", step(counts, "pre"))
            .subgraph("sub", child)
            .node("post", step(counts, "post"))
            .edge(START, "pre")
            .edge("pre", "sub")
            .edge("sub", "post")
            .edge("post", END);
        if outer {
            parent.retry("sub", policy())
        } else {
            parent
        }
    };
    let outer = build(&h.counts, "s2", true);
    h.graph("outer", "outer", outer);
    let inner = build(&h.counts, "t2", false);
    h.graph("inner", "inner", inner);
    let streamed = build(&h.counts, "u2", true);
    h.graph("streamed", "streamed", streamed);
    h.check(&fx);
}

/// plan sends t1..t3 to worker (a concat reducer on `log`), then join; the
/// t2 worker fails once while `fail` is set (`send_reducer_error`,
/// `stream_send`).
fn sends_graph(counts: &Counts, fail: &Arc<Mutex<bool>>) -> GraphBuilder {
    let flag = fail.clone();
    let concat = |a: &Value, b: &Value| Ok(json!(format!("{}{}", py_str(Some(a)), py_str(Some(b)))));
    Graph::builder()
        .state("topics", ChannelSpec::last_value())
        .state("log", ChannelSpec::custom(concat, Some(json!(""))))
        .state("joined", ChannelSpec::last_value())
        .node(
            "plan",
            counted(counts, "plan", |_| {
                Ok(Update::new().set("topics", json!(["t1", "t2", "t3"])).set("log", json!("|plan")))
            }),
        )
        .node(
            "worker",
            counted(counts, "worker", move |s| {
                let topic = py_str(s.get("topic"));
                if topic == "t2" && std::mem::replace(&mut *flag.lock().unwrap(), false) {
                    return Err(NodeError::with_kind("ValueError", "t2 failed"));
                }
                Ok(Update::new().set("log", json!(format!("|{topic}"))))
            }),
        )
        .node(
            "join",
            counted(counts, "join", |s| Ok(Update::new().set("joined", json!(py_str(s.get("log")))))),
        )
        .edge(START, "plan")
        .conditional_edges("plan", |s| {
            Ok(strs(s, "topics")
                .into_iter()
                .map(|t| Goto::Send(Send::new("worker", json!({"topic": t}))))
                .collect())
        })
        .edge("worker", "join")
        .edge("join", END)
}

/// ask interrupts, flaky fails its first two runs (counted in `runs`), both
/// join (`interrupt_then_error`, `stream_interrupt_error`).
fn ask_and_flaky(counts: &Counts, runs: &Arc<Mutex<i32>>) -> GraphBuilder {
    let flaky_runs = runs.clone();
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node(
            "flaky",
            counted(counts, "flaky", move |_| {
                let mut n = flaky_runs.lock().unwrap();
                *n += 1;
                if *n <= 2 {
                    return Err(NodeError::with_kind("ValueError", format!("flaky failed ({n})")));
                }
                Ok(Update::new().set("items", json!(["flaky"])))
            }),
        )
        .node(
            "join",
            counted(counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "flaky")
        .edge("ask", "join")
        .edge("flaky", "join")
        .edge("join", END)
}

/// `Command(update=.., goto=..)` as input (`invoke_command`): update only
/// on a finished thread (nothing runs, the writes stay pending on the head
/// and are applied again by the next run and by get_state; a second
/// Command there stores them again, its own last), goto a node nothing else
/// triggers, both, Sends, streamed, and with a resume.
#[test]
fn command_input() {
    let fx = fixture("command_input");
    let mut h = Harness::new();
    let tagged = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |s| {
            Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(s.get("count")))])))
        })
    };
    for thread in ["update", "goto", "both", "send", "streamed"] {
        let b = Graph::builder()
            .state("items", ChannelSpec::reducer(Reducer::Append))
            .state("count", ChannelSpec::last_value())
            .node("a", counted(&h.counts, "a", |_| Ok(Update::new().set("items", json!(["a"])))))
            .node("side", tagged(&h.counts, "side"))
            .node("worker", tagged(&h.counts, "worker"))
            .edge(START, "a")
            .edge("a", END)
            .edge("side", END)
            .edge("worker", END);
        h.graph(thread, "main", b);
    }
    for thread in ["resume", "all"] {
        let ask = counted(&h.counts, "ask", |s| {
            let answer = interrupt(json!("q?"))?;
            let item = format!("ask:{}:{}", py_str(Some(&answer)), py_str(s.get("count")));
            Ok(Update::new().set("items", json!([item])))
        });
        let b = Graph::builder()
            .state("items", ChannelSpec::reducer(Reducer::Append))
            .state("count", ChannelSpec::last_value())
            .node("ask", ask)
            .node("after", tagged(&h.counts, "after"))
            .edge(START, "ask")
            .edge("ask", "after")
            .edge("after", END);
        h.graph(thread, "ask", b);
    }
    h.check(&fx);
}
