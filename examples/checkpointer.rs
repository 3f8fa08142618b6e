//! Checkpointer only: a graph with a subgraph, a crash in the middle of a
//! step and its resumption from pending writes, history queries, retention.
//!
//! `cargo run --example checkpointer [path]`

use agentstate::checkpoint::{ChannelVersions, Retention};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata};
use serde_json::{json, Value};

fn step(
    saver: &Checkpointer,
    parent: &CheckpointConfig,
    state: &mut Checkpoint,
    step: i64,
    updates: &[(&str, Value)],
) -> agentstate::Result<CheckpointConfig> {
    let mut changed = ChannelVersions::new();
    for (ch, v) in updates {
        let next = saver.get_next_version(state.channel_versions.get(*ch));
        state.channel_versions.insert(ch.to_string(), next.clone());
        state.channel_values.insert(ch.to_string(), (v.clone()).into());
        changed.insert(ch.to_string(), next);
    }
    state.id = agentstate::checkpoint::uuid6(Some(step)).to_string();
    let meta = Metadata::new().with("source", if step < 0 { "input" } else { "loop" }).with("step", step);
    saver.put(parent, state, &meta, &changed)
}

fn main() -> agentstate::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "agentstate-checkpointer.db".into());
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path)?;
    let saver = db.checkpointer().with_retention(Retention::keep_last(50));

    // The root graph: a research agent.
    let mut root = Checkpoint::new();
    let mut cfg = step(
        &saver,
        &CheckpointConfig::thread("research-7"),
        &mut root,
        -1,
        &[("question", json!("What is WAL mode?"))],
    )?;

    // Step 0 runs two tasks in parallel. One finishes and its output is saved
    // as a pending write; then the process "crashes" before the step's
    // checkpoint is written.
    saver.put_writes(&cfg, &[("notes", json!(["WAL = write-ahead log"]))], "task-search", "search")?;
    println!("crash during step 0: one task's output is already safe as a pending write");

    // Restart: read the latest checkpoint and its pending writes; only the
    // unfinished task runs again.
    let resumed = saver.get_tuple(&CheckpointConfig::thread("research-7"))?.expect("a checkpoint");
    let done: Vec<&str> = resumed.pending_writes.iter().map(|w| w.task_id.as_str()).collect();
    println!("resumed at step {:?}; finished tasks: {done:?}", resumed.metadata.step());
    saver.put_writes(&cfg, &[("draft", json!("Readers do not block writers."))], "task-write", "write")?;
    let mut updates: Vec<(&str, Value)> = vec![];
    for w in saver.get_tuple(&cfg)?.expect("checkpoint").pending_writes.iter() {
        updates.push((if w.channel == "notes" { "notes" } else { "draft" }, w.value.clone()));
    }
    cfg = step(&saver, &cfg, &mut root, 0, &updates)?;

    // A subgraph (namespace "review:<task>") keeps its own history in the
    // same thread.
    let sub = CheckpointConfig::thread("research-7").ns("review:task-9");
    let mut sub_state = Checkpoint::new();
    let sub_cfg = step(&saver, &sub, &mut sub_state, 0, &[("verdict", json!("accurate"))])?;
    println!(
        "subgraph checkpoint {} in namespace {:?}",
        sub_cfg.checkpoint_id.as_deref().unwrap_or("?"),
        sub_cfg.checkpoint_ns
    );

    for i in 1..=5 {
        cfg = step(&saver, &cfg, &mut root, i, &[("draft", json!(format!("Draft revision {i}")))])?;
    }

    println!("\nhistory of the root graph, newest first:");
    for t in saver.list(&ListQuery::thread("research-7").namespace(""))? {
        println!(
            "  step {:>2}  {}",
            t.metadata.step().unwrap_or(0),
            t.checkpoint.channel_values.get("draft").map(|v| v.to_value()).unwrap_or(Value::Null)
        );
    }
    let late = saver.list(&ListQuery::thread("research-7").filter(json!({"step": {"$gte": 4}})))?;
    println!("checkpoints with step >= 4: {}", late.len());
    let all_ns = saver.list(&ListQuery::thread("research-7"))?;
    println!("checkpoints in all namespaces: {}", all_ns.len());

    // Keep only the newest two of each namespace, then give the space back.
    let removed = saver.apply_retention(&Retention::keep_last(2))?;
    println!(
        "\nretention keep_last(2) removed {removed} checkpoints; {} bytes returned to the filesystem",
        db.vacuum()?
    );
    Ok(())
}
