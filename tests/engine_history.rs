//! `CompiledGraph::state_history`: LangGraph's `get_state_history(config,
//! filter=, before=, limit=)`, which hands its arguments to the saver's
//! `list` with the config's namespace filled in (`""`, the root graph's,
//! when the config has none) and shows each listed checkpoint as
//! `get_state` shows it (reference: "list" in LangGraph's persistence
//! layer: newest first, `before` strictly older, `limit` after the
//! filter).

use agentstate::engine::{
    interrupt, ChannelSpec, CompiledGraph, Graph, Reducer, StateSnapshot, Update, END, START,
};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use serde_json::{json, Value};

fn counter() -> CompiledGraph {
    let graph = Graph::builder()
        .state("n", ChannelSpec::reducer(Reducer::Add))
        .node("inc", |_| Ok(Update::new().set("n", json!(1))))
        .edge(START, "inc")
        .edge("inc", END)
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap();
    for _ in 0..3 {
        graph.invoke(Some(json!({"n": 1})), &CheckpointConfig::thread("t")).unwrap();
    }
    graph
}

fn ids(states: &[StateSnapshot]) -> Vec<String> {
    states.iter().map(|s| s.config.as_ref().unwrap().checkpoint_id.clone().unwrap()).collect()
}

fn history(g: &CompiledGraph, q: &ListQuery) -> Vec<StateSnapshot> {
    g.state_history(q).unwrap().collect::<agentstate::Result<_>>().unwrap()
}

#[test]
fn filter_before_and_limit_narrow_the_history_as_langgraphs_list_does() {
    let g = counter();
    let all = g.get_state_history(&CheckpointConfig::thread("t")).unwrap();
    // Three checkpoints a run: its input (step -1), then steps 0 and 1.
    assert_eq!(all.len(), 9);
    let n: Vec<Value> = all.iter().map(|s| s.values["n"].clone()).collect();
    // (The first run's input checkpoint has no value yet.)
    assert_eq!(
        n,
        [json!(6), json!(5), json!(4), json!(4), json!(3), json!(2), json!(2), json!(1), Value::Null]
    );
    // Each state is the one get_state shows for that checkpoint.
    for s in &all {
        assert_eq!(&g.get_state(s.config.as_ref().unwrap()).unwrap(), s);
    }

    let q = ListQuery::thread("t");
    assert_eq!(history(&g, &q.clone().limit(4)), all[..4]);
    let third = ids(&all)[2].clone();
    assert_eq!(history(&g, &q.clone().before(third.clone())), all[3..]);
    assert_eq!(history(&g, &q.clone().before(third).limit(2)), all[3..5]);
    // The limit counts what the filter let through.
    let inputs: Vec<_> =
        all.iter().filter(|s| s.metadata.as_ref().unwrap().source() == Some("input")).cloned().collect();
    assert_eq!(inputs.len(), 3);
    assert_eq!(history(&g, &q.clone().filter(json!({"source": "input"}))), inputs);
    assert_eq!(history(&g, &q.clone().filter(json!({"source": "input"})).limit(1)), inputs[..1]);
    // Steps go on across runs (-1 to 1, 2 to 4, 5 to 7): the last run's.
    assert_eq!(history(&g, &q.clone().filter(json!({"step": {"$gte": 5}}))), all[..3]);
    assert!(history(&g, &q.limit(0)).is_empty());
}

#[test]
fn a_query_without_a_namespace_reads_the_root_graphs_and_a_subgraphs_namespace_its_own() {
    let child = Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .node("ask", |_| {
            let answer = interrupt(json!("ok?"))?;
            Ok(Update::new().set("l", json!([answer])))
        })
        .edge(START, "ask");
    let g = Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .subgraph("sub", child)
        .edge(START, "sub")
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap();
    let t = CheckpointConfig::thread("t");
    g.invoke(Some(json!({"l": ["in"]})), &t).unwrap();
    let sub = g.get_state(&t).unwrap().tasks[0].subgraph.clone().expect("the paused subgraph");
    assert!(!sub.checkpoint_ns.is_empty());

    let root = history(&g, &ListQuery::thread("t"));
    assert_eq!(root, g.get_state_history(&t).unwrap());
    assert!(root.iter().all(|s| s.config.as_ref().unwrap().checkpoint_ns.is_empty()));
    let inner = history(&g, &ListQuery::thread("t").namespace(sub.checkpoint_ns.clone()));
    assert!(!inner.is_empty());
    assert!(inner.iter().all(|s| s.config.as_ref().unwrap().checkpoint_ns == sub.checkpoint_ns));
    assert_eq!(inner[0].next, ["ask"]);
    assert_eq!(inner, g.get_state_history(&sub).unwrap());
}

#[test]
fn a_history_needs_a_thread_and_a_filter_that_parses() {
    let g = counter();
    assert!(matches!(g.state_history(&ListQuery::all()), Err(Error::InvalidConfig(_))));
    let bad = ListQuery::thread("t").filter(json!({"step": {"$near": 1}}));
    assert!(matches!(g.state_history(&bad), Err(Error::InvalidFilter { .. })));
    // A thread with no checkpoint has no history.
    assert_eq!(g.state_history(&ListQuery::thread("none")).unwrap().count(), 0);
}
