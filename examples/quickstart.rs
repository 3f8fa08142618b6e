//! The main job: an agent conversation checkpointed step by step in a real
//! file, with pending writes, a rollback that starts a new branch, and the
//! thread's history tree; then long-term memories in the Store, found from
//! another thread by semantic search with a filter, and a TTL'd item
//! expiring.
//!
//! Run with `cargo run --example quickstart [path]` (default
//! `agentstate-quickstart.db`).

use agentstate::checkpoint::ChannelVersions;
use agentstate::store::{IndexConfig, ListNamespaces, Namespace, Put, Search, TtlConfig};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata, StoreConfig};
use serde_json::{json, Map, Value};

fn main() -> agentstate::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "agentstate-quickstart.db".into());
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path)?;
    let saver = db.checkpointer();
    println!("agentstate quickstart: writing {path}\n");

    println!("1. A conversation, checkpointed step by step");
    let mut state = Map::new();
    let mut versions = ChannelVersions::new();
    let mut config = CheckpointConfig::thread("support-42");
    let turns = [
        ("__input__", "human", "Hi! My order #1234 hasn't arrived."),
        ("lookup_order", "tool", "order 1234: shipped 3 days ago, carrier delay"),
        ("agent", "ai", "Your order shipped 3 days ago; the carrier reports a delay."),
        ("agent", "human", "Can I get a refund instead?"),
    ];
    let mut ids = vec![];
    for (step, (node, role, text)) in turns.iter().enumerate() {
        let step = step as i64 - 1;
        if step >= 0 {
            // The node's output is first saved as a pending write on the
            // current checkpoint, so a crash here would not rerun it.
            saver.put_writes(&config, &[("messages", json!({"role": role, "content": text}))], node, "")?;
        }
        config = append_message(&saver, &config, &mut state, &mut versions, step, node, role, text)?;
        println!("   step {step:>2}  {node:<13} {role:>5}: {text}");
        ids.push(config.clone());
    }

    println!("\n2. Time travel: the state at the second checkpoint");
    let past = saver.get_tuple(&ids[1])?.expect("checkpoint exists");
    println!(
        "   {} messages, pending writes: {:?}",
        messages(&past.checkpoint).len(),
        past.pending_writes.iter().map(|w| &w.task_id).collect::<Vec<_>>()
    );

    println!("\n3. Rollback: branch from the second checkpoint with another question");
    let mut edit = Map::new();
    let mut msgs = messages(&past.checkpoint);
    msgs.push(json!({"role": "human", "content": "Actually, can you just update my address?"}));
    edit.insert("messages".into(), Value::Array(msgs));
    let branch = saver.fork_with(&ids[1], edit)?;
    println!("   new checkpoint {} (parent {})", short(&branch), short(&ids[1]));
    println!("   the old branch still ends with: {}", last_text(&saver.get(&ids[3])?.expect("old head")));
    println!("   the new branch ends with:       {}", last_text(&saver.get(&branch)?.expect("new head")));

    println!("\n4. The thread's history tree (newest first)");
    let history = saver.list(&ListQuery::thread("support-42"))?;
    for t in &history {
        let parent = t.parent_config.as_ref().map(short).unwrap_or_else(|| "-".into());
        println!(
            "   {}  parent {:<8}  source {:<6} step {:>2}  {} msgs",
            short(&t.config),
            parent,
            t.metadata.source().unwrap_or("?"),
            t.metadata.step().unwrap_or(0),
            messages(&t.checkpoint).len()
        );
    }
    let filtered = saver.list(&ListQuery::thread("support-42").filter(json!({"step": {"$gte": 1}})))?;
    println!("   checkpoints with step >= 1: {}", filtered.len());

    println!("\n5. Long-term memory: the Store, shared across threads");
    let store = db.store(
        StoreConfig::default()
            .with_index(IndexConfig::hashed(256)?.with_fields(["text"]))
            .with_ttl(TtlConfig::new()),
    )?;
    // Thread support-42 learns facts about the user...
    let memories = [
        ("m1", "prefers refunds to store credit", "preference", 0.9),
        ("m2", "lives in Lyon, France; ships to a parcel locker", "address", 0.8),
        ("m3", "ordered running shoes twice this year", "history", 0.6),
        ("m4", "asked about a refund for a late parcel in March", "history", 0.7),
    ];
    for (key, text, kind, confidence) in memories {
        store.put(
            &["users", "alice", "memories"],
            key,
            json!({"text": text, "kind": kind, "confidence": confidence}),
        )?;
        println!("   put  users/alice/memories/{key}: {text}");
    }
    // ...and a new thread finds them by meaning (lexical here) with a filter.
    let found = store.search(
        Search::new(&["users", "alice"])
            .query("refund for a late delivery")
            .filter(json!({"confidence": {"$gte": 0.7}}))
            .limit(3),
    )?;
    println!("   search 'refund for a late delivery' where confidence >= 0.7:");
    for hit in &found {
        println!("     {:.3}  {}  {}", hit.score.unwrap_or(0.0), hit.item.key, hit.item.value["text"]);
    }

    println!("\n6. A memory with a TTL expires");
    store.put_with(
        Put::new(&["users", "alice", "session"], "cart", json!({"text": "2 items in cart"}))
            .ttl(std::time::Duration::from_millis(600)),
    )?;
    println!(
        "   put  users/alice/session/cart with a TTL of 0.6 s: {}",
        store.get(&["users", "alice", "session"], "cart")?.is_some()
    );
    std::thread::sleep(std::time::Duration::from_millis(900));
    println!(
        "   after 0.9 s, get returns: {:?}",
        store.get(&["users", "alice", "session"], "cart")?.map(|i| i.value)
    );
    println!("   swept {} expired item(s)", store.sweep_expired()?);
    let namespaces = store.list_namespaces(ListNamespaces::new())?;
    println!("   namespaces now: {:?}", namespaces.iter().map(Namespace::labels).collect::<Vec<_>>());

    println!("\nInspect the file with the agentstate CLI:");
    for cmd in [
        "threads",
        "history support-42",
        "show support-42",
        "stats",
        "check",
        "store ns",
        "store search users.alice --query 'late delivery refund' --filter '{\"confidence\": {\"$gte\": 0.7}}'",
    ] {
        println!("   cargo run -q --bin agentstate -- {path} {cmd}");
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn append_message(
    saver: &Checkpointer,
    parent: &CheckpointConfig,
    state: &mut Map<String, Value>,
    versions: &mut ChannelVersions,
    step: i64,
    node: &str,
    role: &str,
    text: &str,
) -> agentstate::Result<CheckpointConfig> {
    let msgs = state.entry("messages").or_insert_with(|| json!([]));
    if let Value::Array(a) = msgs {
        a.push(json!({"role": role, "content": text}));
    }
    let v = saver.get_next_version(versions.get("messages"));
    versions.insert("messages".into(), v.clone());
    let mut cp = Checkpoint::with_id(agentstate::checkpoint::uuid6(Some(step)).to_string());
    cp.set_values(state.clone());
    cp.channel_versions = versions.clone();
    cp.updated_channels = Some(vec!["messages".into()]);
    let source = if step < 0 { "input" } else { "loop" };
    let meta = Metadata::new().with("source", source).with("step", step).with("writer", node);
    saver.put(parent, &cp, &meta, &ChannelVersions::from([("messages".to_string(), v)]))
}

fn messages(cp: &Checkpoint) -> Vec<Value> {
    cp.channel_values.get("messages").and_then(|v| v.to_value().as_array().cloned()).unwrap_or_default()
}

fn last_text(cp: &Checkpoint) -> String {
    messages(cp).last().and_then(|m| m["content"].as_str().map(str::to_string)).unwrap_or_default()
}

fn short(c: &CheckpointConfig) -> String {
    c.checkpoint_id.as_deref().map(|id| id[id.len().saturating_sub(8)..].to_string()).unwrap_or_default()
}
