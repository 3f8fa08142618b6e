//! `update_state` at an `interrupt()`: values given as null (LangGraph's
//! `values=None`) count the node as finished with no state writes, exactly
//! as `{}` does; LangGraph's special `as_node` values are typed errors until
//! they are supported. (Expected values recorded from LangGraph 1.2.22 with
//! `InMemorySaver`.)

use agentstate::engine::{interrupt, ChannelSpec, CompiledGraph, Graph, Reducer, Update, START};
use agentstate::{CheckpointConfig, Db, Error};
use serde_json::{json, Value};

/// `a`, then `ask` (which interrupts), then `b`; `l` appends.
fn asking() -> CompiledGraph {
    Graph::builder()
        .state("l", ChannelSpec::reducer(Reducer::Append))
        .node("a", |_| Ok(Update::new().set("l", json!(["a"]))))
        .node("ask", |_| {
            interrupt(json!("q"))?;
            Ok(Update::new().set("l", json!(["ask"])))
        })
        .node("b", |_| Ok(Update::new().set("l", json!(["b"]))))
        .edge(START, "a")
        .edge("a", "ask")
        .edge("ask", "b")
        .compile(Db::open_in_memory().unwrap().checkpointer())
        .unwrap()
}

#[test]
fn null_values_finish_the_node_with_no_writes_as_an_empty_object_does() {
    for values in [Value::Null, json!({})] {
        let g = asking();
        let t = CheckpointConfig::thread("t");
        g.invoke(Some(json!({"l": ["in"]})), &t).unwrap();
        g.update_state(&t, values.clone(), "ask").unwrap();
        let head = g.get_state(&t).unwrap();
        assert_eq!((head.next, head.values), (vec!["b".to_string()], json!({"l": ["in", "a"]})), "{values}");
        let meta = head.metadata.unwrap();
        assert_eq!((meta.source(), meta.step()), (Some("update"), Some(2)), "{values}");
        assert_eq!(g.invoke(None, &t).unwrap(), json!({"l": ["in", "a", "b"]}), "{values}");
    }
}

#[test]
fn special_as_node_values_are_typed_errors_that_store_nothing() {
    let g = asking();
    let t = CheckpointConfig::thread("t");
    g.invoke(Some(json!({"l": ["in"]})), &t).unwrap();
    let before = g.checkpointer().list(&agentstate::ListQuery::thread("t")).unwrap().len();
    for node in ["__end__", "__input__", "__copy__"] {
        let err = g.update_state(&t, Value::Null, node).unwrap_err();
        assert!(matches!(&err, Error::InvalidUpdate(m) if m.contains("does not exist")), "{node}: {err:?}");
    }
    assert_eq!(g.checkpointer().list(&agentstate::ListQuery::thread("t")).unwrap().len(), before);
    let err = g.update_state(&t, json!([1]), "ask").unwrap_err();
    assert!(matches!(err, Error::InvalidUpdate(_)), "{err:?}");
}
