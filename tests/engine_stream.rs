//! `CompiledGraph::stream`: each superstep's updates, then the state, as
//! LangGraph's `stream(..., stream_mode=["updates", "values"])` reports them.

use agentstate::engine::{ChannelSpec, Graph, Reducer, StreamEvent, Update, END, START};
use agentstate::{CheckpointConfig, Db};
use serde_json::{json, Value};

fn value(e: &StreamEvent) -> (&'static str, Value) {
    match e {
        StreamEvent::Updates { node, update } => ("updates", json!({ node.clone(): update })),
        StreamEvent::Values(state) => ("values", Value::Object(state.to_map())),
        _ => ("other", Value::Null),
    }
}

#[test]
fn a_chain_reports_each_step_as_it_completes() {
    let db = Db::open_in_memory().unwrap();
    let graph = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("last", ChannelSpec::last_value())
        .node("a", |_| Ok(Update::new().set("items", json!(["a"])).set("last", json!("a"))))
        .node("b", |_| Ok(Update::new().set("items", json!(["b"]))))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile(db.checkpointer())
        .unwrap();
    let thread = CheckpointConfig::thread("t");
    let saver = db.checkpointer();
    let mut events = vec![];
    let end = graph
        .stream(Some(json!({"items": ["in"]})), &thread, |e| {
            // Reported once the superstep's checkpoint is stored.
            let stored = saver.list(&agentstate::ListQuery::thread("t")).unwrap().len();
            events.push((value(&e), stored));
        })
        .unwrap();
    let got: Vec<(&str, Value)> = events.iter().map(|(e, _)| e.clone()).collect();
    assert_eq!(
        got,
        vec![
            ("values", json!({"items": ["in"]})),
            ("updates", json!({"a": {"items": ["a"], "last": "a"}})),
            ("values", json!({"items": ["in", "a"], "last": "a"})),
            ("updates", json!({"b": {"items": ["b"]}})),
            ("values", json!({"items": ["in", "a", "b"], "last": "a"})),
        ]
    );
    // input checkpoint + one per superstep, each stored before its events.
    let stored: Vec<usize> = events.iter().map(|(_, n)| *n).collect();
    assert_eq!(stored, vec![2, 3, 3, 4, 4]);
    assert_eq!(Value::Object(end.to_map()), json!({"items": ["in", "a", "b"], "last": "a"}));
}
