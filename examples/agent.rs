//! An agent in about 40 lines: plan, a human approval, then act and reflect
//! in a loop; killed in the middle of its work and resumed without redoing
//! what it had finished.
//!
//! ```sh
//! cargo run --example agent -- /tmp/agent.db       # plans, then waits for approval
//! cargo run --example agent -- /tmp/agent.db yes   # approved: acts, and dies during step 2
//! cargo run --example agent -- /tmp/agent.db       # resumes: only step 2 onwards runs
//! ```

use agentstate::engine::{interrupt, ChannelSpec, Goto, Graph, Interrupt, Reducer, State, Update, START};
use agentstate::{CheckpointConfig, Db};
use serde_json::{json, Value};

fn done(s: &State) -> usize {
    s.get("log").and_then(Value::as_array).map_or(0, |l| l.len().saturating_sub(1))
}

fn main() -> agentstate::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "agent.db".into());
    let crash_marker = format!("{path}.crashed");
    let graph = Graph::builder()
        .state("steps", ChannelSpec::last_value())
        .state("log", ChannelSpec::reducer(Reducer::Append))
        .node("plan", |_| {
            println!("plan: search, compare, book");
            Ok(Update::new().set("steps", json!(["search", "compare", "book"])))
        })
        .node("approve", |s| {
            let answer = interrupt(json!({"run this plan?": s.get("steps")}))?;
            Ok(Update::new().set("log", json!([format!("approved: {}", answer.as_str().unwrap_or("?"))])))
        })
        .node("act", move |s| {
            let step =
                s.get("steps").and_then(|p| p.get(done(s))).and_then(Value::as_str).unwrap_or("?").to_owned();
            if done(s) == 1 && std::fs::File::create_new(&crash_marker).is_ok() {
                println!("act: {step} ... killed");
                std::process::exit(137); // as a SIGKILL: nothing of this step is stored
            }
            println!("act: {step}");
            Ok(Update::new().set("log", json!([format!("did {step}")])))
        })
        .node("reflect", |s| {
            Ok(Update::new().goto(if done(s) < 3 { Goto::node("act") } else { Goto::end() }))
        })
        .edge(START, "plan")
        .edge("plan", "approve")
        .edge("approve", "act")
        .edge("act", "reflect")
        .compile(Db::open(&path)?.checkpointer())?;

    let thread = CheckpointConfig::thread("errand");
    let out = match (graph.get_state(&thread)?.config, std::env::args().nth(2)) {
        (None, _) => graph.invoke(Some(json!({"log": []})), &thread)?,
        (Some(_), Some(answer)) => graph.resume(json!(answer), &thread)?,
        (Some(_), None) => graph.invoke(None, &thread)?, // after a crash: go on
    };
    match Interrupt::from_output(&out).first() {
        Some(i) => println!("waiting: {}", i.value),
        None => println!("log: {}", out["log"]),
    }
    Ok(())
}
