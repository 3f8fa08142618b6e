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

//!
//! The tests are split by concept: this file holds plain runs, durability,
//! channels, sends, retries and commands; `engine_golden_interrupts.rs`,
//! `engine_golden_state.rs` and `engine_golden_subgraphs.rs` the rest.

#[path = "engine_golden/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentstate::engine::{
    interrupt, remove_message, ChannelSpec, Durability, Goto, Graph, GraphBuilder, NodeError, Reducer,
    RetryPolicy, Send, State, Update, END, START,
};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use harness::{abc, counted, fixture, int, py_str, strs, Counts, Harness};
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

/// `stream` of a Send fan-out whose t2 worker fails once: t1's and t3's
/// updates, then the error; `stream(None)` reports their stored updates as
/// cached before t2 runs.
#[test]
fn stream_send() {
    check_sends("stream_send");
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
