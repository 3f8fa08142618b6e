//! Golden tests of subgraphs (see `engine_golden.rs` for how every golden
//! test compares with LangGraph's recordings): a subgraph's checkpoints,
//! its state seen from the parent, its stream events and its retries.

#[path = "engine_golden/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentstate::engine::{
    interrupt, ChannelSpec, Graph, GraphBuilder, NodeError, Reducer, RetryPolicy, Update, END, START,
};
use harness::{ask_beside_work, counted, fixture, int, one_task_path, py_str, Counts, Harness};
use serde_json::json;

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
    let fan = ask_beside_work(&h.counts);
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
