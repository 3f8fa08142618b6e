//! The graph of `shared/peer-bench/bench_graph.py` on agentstate's engine:
//! three nodes (`agent` appends an assistant message through the
//! `add_messages` reducer, `tools` sets `scratch`, `finish` bumps `counter`),
//! invoked `--invokes` times on one thread, each invoke adding a user message
//! of `--msg-bytes`. Every checkpoint and pending write is stored as
//! LangGraph stores them.
//!
//! `cargo run --release --example bench_graph -- [--invokes 200] [--msg-bytes 200] [--memory] [--full] [--async | --exit] [--copy-output]`
//!
//! - `--memory`: an in-memory database, the engine without a file;
//! - `--full`: the file's `Durability::Full` (fsync per commit);
//! - `--async`: the graph's `engine::Durability::Async` on a write-behind
//!   `Db` (LangGraph's default `durability="async"`); `--exit`:
//!   `engine::Durability::Exit`; neither: `engine::Durability::Sync`;
//! - `--copy-output`: `invoke` (the state copied into a JSON value) instead
//!   of `invoke_state` (the state shared, as Python returns it).
//!
//! Prints one JSON object.

use std::time::Instant;

use agentstate::engine::{ChannelSpec, Durability as GraphDurability, Graph, Reducer, Update, END, START};
use agentstate::{CheckpointConfig, Db, Durability, Result};
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;
use common::{arg, flag, median};

fn text(i: usize, n: usize) -> String {
    let s = format!("message {i} {}", "lorem ipsum dolor sit amet ".repeat(20));
    s[..n.min(s.len())].to_string()
}

fn main() -> Result<()> {
    let invokes = arg("--invokes", 200);
    let msg_bytes = arg("--msg-bytes", 200);
    let dir = tempfile::tempdir().map_err(|e| agentstate::Error::InvalidArgument(e.to_string()))?;
    let path = dir.path().join("graph.db");
    let db = if flag("--memory") {
        Db::open_in_memory()?
    } else {
        let durability = if flag("--full") { Durability::Full } else { Durability::Normal };
        Db::builder().durability(durability).write_behind(flag("--async")).open(&path)?
    };
    let graph_durability = if flag("--async") {
        GraphDurability::Async
    } else if flag("--exit") {
        GraphDurability::Exit
    } else {
        GraphDurability::Sync
    };
    let copy_output = flag("--copy-output");
    let graph = Graph::builder()
        .state("messages", ChannelSpec::reducer(Reducer::Messages))
        .state("scratch", ChannelSpec::last_value())
        .state("counter", ChannelSpec::last_value())
        .node("agent", move |s| {
            let n = s.get("messages").and_then(Value::as_array).map_or(0, Vec::len);
            Ok(Update::new().set("messages", json!([{"role": "assistant", "content": text(n, msg_bytes)}])))
        })
        .node("tools", |s| {
            let n = s.get("messages").and_then(Value::as_array).map_or(0, Vec::len);
            Ok(Update::new().set("scratch", json!({"last_tool": "search", "n_msgs": n})))
        })
        .node("finish", |s| {
            let c = s.get("counter").and_then(Value::as_i64).unwrap_or(0);
            Ok(Update::new().set("counter", json!(c + 1)))
        })
        .edge(START, "agent")
        .edge("agent", "tools")
        .edge("tools", "finish")
        .edge("finish", END)
        .compile(db.checkpointer())?
        .with_durability(graph_durability);
    let config = CheckpointConfig::thread("bench-thread");
    let mut lat = Vec::with_capacity(invokes);
    let t0 = Instant::now();
    let mut n_messages = None;
    for i in 0..invokes {
        let input = json!({"messages": [{"role": "user", "content": text(i, msg_bytes)}]});
        let t = Instant::now();
        // The output is read, then dropped before the next invoke.
        n_messages = if copy_output {
            graph.invoke(Some(input), &config)?["messages"].as_array().map(Vec::len)
        } else {
            graph.invoke_state(Some(input), &config)?.get("messages").and_then(Value::as_array).map(Vec::len)
        };
        lat.push(t.elapsed().as_secs_f64());
    }
    let el = t0.elapsed().as_secs_f64();
    assert_eq!(n_messages, Some(2 * invokes));
    let k = invokes.min(20);
    let checkpoints = db.threads()?.iter().map(|t| t.checkpoints).sum::<u64>();
    drop(graph);
    drop(db);
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}",
        json!({
            "mode": if flag("--memory") { "memory" } else if flag("--async") { "async" } else if flag("--exit") { "exit" } else { "sync" },
            "invokes_per_s": invokes as f64 / el,
            "ms_per_invoke_median": median(lat.clone()) * 1e3,
            "ms_first20_median": median(lat[..k].to_vec()) * 1e3,
            "ms_last20_median": median(lat[lat.len() - k..].to_vec()) * 1e3,
            "checkpoints": checkpoints,
            "db_bytes_after_close": bytes,
        })
    );
    Ok(())
}
