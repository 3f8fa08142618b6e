//! A LangGraph-style agent loop on the superstep engine: a `messages` state
//! with `add_messages`, a model node, a tool node behind a conditional edge,
//! a human approval through `interrupt()`, and a resume in a second
//! `invoke` — every checkpoint stored as LangGraph 1.2 stores it.
//!
//! ```text
//! cargo run --example graph                      # in memory
//! cargo run --example graph -- FILE [--pause | --resume]
//! ```
//!
//! With a file, the thread outlives the process: `--pause` stops at the
//! approval, `--resume` answers it. Either half may be LangGraph in Python
//! on the same file (`python/tests/test_engine_interop.py` does both).

use agentstate::engine::{interrupt, ChannelSpec, Goto, Graph, Interrupt, Reducer, State, Update, START};
use agentstate::{CheckpointConfig, Db};
use serde_json::{json, Value};

/// How many messages the state holds.
fn turns(s: &State) -> usize {
    s.get("messages").and_then(Value::as_array).map_or(0, Vec::len)
}

fn main() -> agentstate::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (pause, resume) = (args.iter().any(|a| a == "--pause"), args.iter().any(|a| a == "--resume"));
    let db = match args.iter().find(|a| !a.starts_with("--")) {
        Some(path) => Db::open(path)?,
        None => Db::open_in_memory()?,
    };
    let graph = Graph::builder()
        .state("messages", ChannelSpec::reducer(Reducer::Messages))
        .state("approved", ChannelSpec::last_value())
        .node("model", |s| {
            let reply = if turns(s) < 3 { "calling the weather tool" } else { "It is sunny." };
            Ok(Update::new().set("messages", json!([{"role": "assistant", "content": reply}])))
        })
        .node("tool", |_| {
            let answer = interrupt(json!("run the weather tool?"))?;
            let content = if answer == json!("yes") { "sunny, 21C" } else { "tool refused" };
            Ok(Update::new()
                .set("approved", answer)
                .set("messages", json!([{"role": "tool", "content": content, "tool_call_id": "t1"}])))
        })
        .edge(START, "model")
        .conditional_edges("model", |s| Ok(vec![if turns(s) < 3 { Goto::node("tool") } else { Goto::end() }]))
        .edge("tool", "model")
        .compile(db.checkpointer())?;

    let thread = CheckpointConfig::thread("weather");
    if !resume {
        let paused =
            graph.invoke(Some(json!({"messages": [{"role": "user", "content": "weather?"}]})), &thread)?;
        println!("paused: {}", Interrupt::from_output(&paused)[0].value);
        if pause {
            return Ok(());
        }
    }
    let done = graph.resume(json!("yes"), &thread)?;
    println!("{} messages, approved = {}", done["messages"].as_array().map_or(0, Vec::len), done["approved"]);
    println!("{} checkpoints", graph.get_state_history(&thread)?.len());
    Ok(())
}
