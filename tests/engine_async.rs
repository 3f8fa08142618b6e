//! Async nodes on tokio: `ainvoke` runs the graph off the runtime's worker
//! threads, async nodes run on the runtime (several of a superstep at once),
//! `interrupt()` works inside them, and the checkpoints are the same as with
//! sync nodes.

use std::time::{Duration, Instant};

use agentstate::engine::{interrupt, ChannelSpec, Graph, Interrupt, Reducer, Update, END, START};
use agentstate::{CheckpointConfig, Db, ListQuery};
use serde_json::{json, Value};

/// How many 10 ms sleeps the runtime completes in `span`: a stalled
/// runtime (a worker blocked by the graph) completes one or two.
async fn ticks_for(span: Duration) -> usize {
    let mut n = 0;
    let until = Instant::now() + span;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
        n += 1;
    }
    n
}

fn fan_out(db: &Db) -> agentstate::engine::CompiledGraph {
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .async_node("x", |_| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Update::new().set("items", json!(["x"])))
        })
        .async_node("y", |_| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Update::new().set("items", json!(["y"])))
        })
        .node("z", |_| Ok(Update::new().set("items", json!(["z"]))))
        .edge(START, "x")
        .edge(START, "y")
        .join(["x", "y"], "z")
        .edge("z", END)
        .compile(db.checkpointer())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_nodes_of_a_superstep_run_together_and_store_what_sync_nodes_would() {
    let db = Db::open_in_memory().unwrap();
    let graph = fan_out(&db);
    let start = Instant::now();
    let out = graph.ainvoke(Some(json!({"items": []})), CheckpointConfig::thread("t")).await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(590), "the two 300 ms nodes ran one after the other");
    assert_eq!(Value::Object(out.to_map()), json!({"items": ["x", "y", "z"]}));
    assert_eq!(db.checkpointer().list(&ListQuery::thread("t")).unwrap().len(), 4);
}

#[tokio::test(flavor = "current_thread")]
async fn a_single_threaded_runtime_keeps_running_while_a_graph_runs() {
    let db = Db::open_in_memory().unwrap();
    let graph = fan_out(&db);
    let ticks = ticks_for(Duration::from_millis(250));
    let (out, ticks) =
        tokio::join!(graph.ainvoke(Some(json!({"items": []})), CheckpointConfig::thread("t")), ticks);
    assert_eq!(Value::Object(out.unwrap().to_map()), json!({"items": ["x", "y", "z"]}));
    // Stalled, the loop would tick once or twice (after the graph).
    assert!(ticks >= 6, "the runtime stalled while the graph ran: {ticks} ticks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_node_can_interrupt_and_be_resumed() {
    let db = Db::open_in_memory().unwrap();
    let graph = Graph::builder()
        .state("answer", ChannelSpec::last_value())
        .async_node("ask", |_| async {
            tokio::task::yield_now().await;
            let answer = interrupt(json!("approve?"))?;
            Ok(Update::new().set("answer", answer))
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile(db.checkpointer())
        .unwrap();
    let thread = CheckpointConfig::thread("t");
    let paused = graph.ainvoke(Some(json!({})), thread.clone()).await.unwrap();
    let paused = Value::Object(paused.to_map());
    assert_eq!(Interrupt::from_output(&paused)[0].value, json!("approve?"));
    let done = graph.aresume(json!("yes"), thread).await.unwrap();
    assert_eq!(Value::Object(done.to_map())["answer"], json!("yes"));
}

#[test]
fn an_async_node_outside_a_runtime_is_a_typed_error() {
    let db = Db::open_in_memory().unwrap();
    let graph = fan_out(&db);
    let err = graph.invoke(Some(json!({"items": []})), &CheckpointConfig::thread("t")).unwrap_err();
    assert!(matches!(err, agentstate::Error::Node { .. }), "{err:?}");
    assert!(err.to_string().contains("ainvoke"), "{err}");
}

/// A retried async node: the sleeps between attempts do not stall a
/// single-threaded runtime (the run is on the blocking pool), and only the
/// successful attempt's writes are stored.
#[tokio::test(flavor = "current_thread")]
async fn a_retried_async_node_sleeps_off_the_runtime() {
    use agentstate::engine::{NodeError, RetryPolicy};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let db = Db::open_in_memory().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let graph = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .async_node("llm", move |_| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if n < 3 {
                    return Err(NodeError::with_kind("RateLimitError", format!("busy ({n})")));
                }
                Ok(Update::new().set("items", json!([format!("llm:{n}")])))
            }
        })
        .retry("llm", RetryPolicy::new().initial_interval(Duration::from_millis(100)).jitter(false))
        .edge(START, "llm")
        .edge("llm", END)
        .compile(db.checkpointer())
        .unwrap();
    let ticks = ticks_for(Duration::from_millis(250));
    let start = Instant::now();
    let (out, ticks) =
        tokio::join!(graph.ainvoke(Some(json!({"items": []})), CheckpointConfig::thread("t")), ticks);
    // 100 ms then 200 ms between the three attempts.
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    assert_eq!(Value::Object(out.unwrap().to_map()), json!({"items": ["llm:3"]}));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(ticks >= 6, "the runtime stalled during the retries: {ticks} ticks");
    let saver = db.checkpointer();
    let history = saver.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(history.len(), 3, "no checkpoint between attempts");
    assert!(history.iter().all(|t| t.pending_writes.iter().all(|w| w.channel != "__error__")));
}
