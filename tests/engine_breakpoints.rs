//! A subgraph's own breakpoints (`interrupt_before` / `interrupt_after` on
//! the subgraph's builder) pause the whole run, as in LangGraph 1.2, where
//! the nested graph's `GraphInterrupt` (with no interrupts) reaches the
//! parent: the parent's task stays unfinished and stores nothing, the parent
//! stops at its checkpoint, and `invoke(None)` goes on in the subgraph from
//! where it stopped. (Expected values recorded from LangGraph 1.2.22 with
//! `InMemorySaver` and `durability="sync"`.)

use agentstate::engine::{ChannelSpec, CompiledGraph, Graph, GraphBuilder, Reducer, Update, START};
use agentstate::{CheckpointConfig, Db};
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
