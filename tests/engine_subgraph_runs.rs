//! A subgraph's run under the run of its parent, as in LangGraph 1.2
//! (expected values recorded from LangGraph 1.2.22 with `InMemorySaver` and
//! `durability="sync"`):
//! - its own breakpoints (`interrupt_before` / `interrupt_after` on the
//!   subgraph's builder) pause the whole run: the nested graph's
//!   `GraphInterrupt` (with no interrupts) reaches the parent, whose task
//!   stays unfinished and stores nothing; the parent stops at its
//!   checkpoint, and `invoke(None)` goes on in the subgraph from where it
//!   stopped;
//! - it runs under the parent's recursion limit (LangGraph's subgraphs
//!   inherit the `recursion_limit` config) unless its builder sets its own;
//! - with `Durability::Exit` it stores a checkpoint only where it paused.

use agentstate::engine::{
    interrupt, ChannelSpec, CompiledGraph, Durability, Goto, Graph, GraphBuilder, Reducer, Update, START,
};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use serde_json::json;

fn child() -> GraphBuilder {
    Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .node("s1", |_| Ok(Update::new().set("l", json!(["s1"]))))
        .node("s2", |_| Ok(Update::new().set("l", json!(["s2"]))))
        .edge(START, "s1")
        .edge("s1", "s2")
}

fn parent(sub: GraphBuilder) -> CompiledGraph {
    Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .subgraph("sub", sub)
        .edge(START, "sub")
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap()
}

#[test]
fn a_subgraphs_interrupt_before_pauses_the_parent_and_resumes_in_the_subgraph() {
    let g = parent(child().interrupt_before(["s2"]));
    let t = CheckpointConfig::thread("t");
    assert_eq!(g.invoke(Some(json!({"l": []})), &t).unwrap(), json!({"l": []}));
    let head = g.get_state(&t).unwrap();
    assert_eq!((head.values.clone(), head.next.clone()), (json!({"l": []}), vec!["sub".to_string()]));
    assert_eq!(head.metadata.unwrap().step(), Some(0));
    // The subgraph stopped before s2, in its own namespace.
    let sub = head.tasks[0].subgraph.clone().expect("the paused subgraph's config");
    let inner = g.get_state(&sub).unwrap();
    assert_eq!((inner.values, inner.next), (json!({"l": ["s1"]}), vec!["s2".to_string()]));
    assert!(head.tasks[0].interrupts.is_empty());

    assert_eq!(g.invoke(None, &t).unwrap(), json!({"l": ["s1", "s2"]}));
    let head = g.get_state(&t).unwrap();
    assert_eq!((head.values, head.next), (json!({"l": ["s1", "s2"]}), Vec::<String>::new()));
    assert_eq!(head.metadata.unwrap().step(), Some(1));
}

#[test]
fn a_subgraphs_interrupt_after_pauses_the_parent_too() {
    let g = parent(child().interrupt_after(["s1"]));
    let t = CheckpointConfig::thread("t");
    assert_eq!(g.invoke(Some(json!({"l": []})), &t).unwrap(), json!({"l": []}));
    assert_eq!(g.get_state(&t).unwrap().next, vec!["sub".to_string()]);
    assert_eq!(g.invoke(None, &t).unwrap(), json!({"l": ["s1", "s2"]}));
}

/// A subgraph that counts `n` up to 30, one superstep each.
fn counting(limit: Option<i64>) -> GraphBuilder {
    let b = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("inc", |s| Ok(Update::new().set("n", json!(s["n"].as_i64().unwrap_or(0) + 1))))
        .edge(START, "inc")
        .conditional_edges("inc", |s| {
            Ok(if s["n"].as_i64() < Some(30) { vec![Goto::node("inc")] } else { vec![Goto::end()] })
        });
    match limit {
        Some(l) => b.recursion_limit(l),
        None => b,
    }
}

fn counting_parent(parent_limit: i64, child_limit: Option<i64>) -> CompiledGraph {
    Graph::builder()
        .state("n", ChannelSpec::last_value())
        .subgraph("sub", counting(child_limit))
        .edge(START, "sub")
        .recursion_limit(parent_limit)
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap()
}

#[test]
fn a_subgraph_runs_under_its_parents_recursion_limit_unless_it_sets_its_own() {
    let t = CheckpointConfig::thread("t");
    // 30 supersteps in the subgraph: over LangGraph's default 25, under 100.
    assert_eq!(counting_parent(100, None).invoke(Some(json!({"n": 0})), &t).unwrap(), json!({"n": 30}));
    let failed = |g: CompiledGraph| match g.invoke(Some(json!({"n": 0})), &t) {
        Err(Error::Node { node, error, .. }) => (node, error.kind().to_string(), error.message().to_string()),
        other => panic!("{other:?}"),
    };
    let (node, kind, message) = failed(counting_parent(5, None));
    assert_eq!((node.as_str(), kind.as_str()), ("sub", "GraphRecursionError"));
    assert!(message.starts_with("Recursion limit of 5 reached"), "{message}");
    // Its own limit wins, either way.
    assert_eq!(counting_parent(5, Some(40)).invoke(Some(json!({"n": 0})), &t).unwrap(), json!({"n": 30}));
    let (_, kind, message) = failed(counting_parent(100, Some(10)));
    assert_eq!(kind, "GraphRecursionError");
    assert!(message.starts_with("Recursion limit of 10 reached"), "{message}");
}

/// With `Durability::Exit`, a subgraph that runs to its end stores nothing
/// in its namespace (its parent's checkpoint holds the result); one paused
/// by `interrupt()` stores the checkpoint it paused at, and nothing more
/// when it then finishes. LangGraph 1.2.22: thread X1 stores one checkpoint
/// (root, step 2); X2 stores root step 1, the subgraph's step 1 and root
/// step 2.
#[test]
fn in_exit_mode_a_subgraph_stores_only_where_it_paused() {
    let sub = Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .state("ask", ChannelSpec::last_value())
        .node("s1", |_| Ok(Update::new().set("l", json!(["s1"]))))
        .node("s2", |s| {
            if s["ask"] == json!(true) {
                let answer = interrupt(json!("q"))?;
                return Ok(Update::new().set("l", json!([format!("s2:{}", answer.as_str().unwrap_or(""))])));
            }
            Ok(Update::new().set("l", json!(["s2"])))
        })
        .edge(START, "s1")
        .edge("s1", "s2");
    let g = Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .state("ask", ChannelSpec::last_value())
        .node("a", |_| Ok(Update::new().set("l", json!(["a"]))))
        .subgraph("sub", sub)
        .edge(START, "a")
        .edge("a", "sub")
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap()
        .with_durability(Durability::Exit);
    // (namespace is the root's, step) of every stored checkpoint, oldest first.
    let stored = |thread: &str| {
        let mut all: Vec<(bool, Option<i64>)> = g
            .checkpointer()
            .list(&ListQuery::thread(thread))
            .unwrap()
            .iter()
            .map(|t| (t.config.checkpoint_ns.is_empty(), t.metadata.step()))
            .collect();
        all.reverse();
        all
    };
    let out = g.invoke(Some(json!({"l": [], "ask": false})), &CheckpointConfig::thread("x1")).unwrap();
    assert_eq!(out, json!({"l": ["a", "a", "s1", "s2"], "ask": false}));
    assert_eq!(stored("x1"), vec![(true, Some(2))]);

    let x2 = CheckpointConfig::thread("x2");
    g.invoke(Some(json!({"l": [], "ask": true})), &x2).unwrap();
    assert_eq!(g.resume(json!("y"), &x2).unwrap(), json!({"l": ["a", "a", "s1", "s2:y"], "ask": true}));
    let mut got = stored("x2");
    got.sort_by_key(|(root, step)| (*step, !*root));
    assert_eq!(got, vec![(true, Some(1)), (false, Some(1)), (true, Some(2))]);
}
