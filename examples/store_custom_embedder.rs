//! Store only, with your own embedder: namespaced memories, semantic search
//! with a filter, per-item TTL, and listing namespaces.
//!
//! The embedder here is a toy "bag of topics" model; plug a real one (an
//! ONNX model, an HTTP client to your embedding service, ...) into the same
//! trait. `cargo run --example store_custom_embedder [path]`

use agentstate::store::{
    Embedder, IndexConfig, ListNamespacesOptions, PutOptions, SearchOptions, Ttl, TtlConfig,
};
use agentstate::{Db, StoreConfig};
use serde_json::json;

/// One dimension per topic; a text scores on the topics whose words it uses.
struct Topics;

const TOPICS: [&[&str]; 4] = [
    &["food", "pizza", "pasta", "vegetarian", "dinner", "restaurant"],
    &["travel", "flight", "hotel", "trip", "lisbon", "train"],
    &["work", "meeting", "deadline", "report", "manager"],
    &["health", "allergy", "peanuts", "doctor", "run", "sleep"],
];

impl Topics {
    fn embed(text: &str) -> Vec<f32> {
        let lower = text.to_lowercase();
        TOPICS.iter().map(|words| words.iter().filter(|w| lower.contains(*w)).count() as f32).collect()
    }
}

impl Embedder for Topics {
    fn name(&self) -> &str {
        "example-topics-v1"
    }
    fn dims(&self) -> usize {
        TOPICS.len()
    }
    fn embed_documents(&self, texts: &[String]) -> agentstate::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| Topics::embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> agentstate::Result<Vec<f32>> {
        Ok(Topics::embed(text))
    }
}

fn main() -> agentstate::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "agentstate-store.db".into());
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path)?;
    let store =
        db.store(StoreConfig::default().with_index(IndexConfig::new(Topics).fields(["text"])).with_ttl(
            TtlConfig { default_ttl: None, refresh_on_read: true, sweep_interval_minutes: Some(5.0) },
        ))?;

    let memories = [
        (["users", "maya", "memories"], "m1", "Vegetarian; loves pasta and small restaurants", 0.9),
        (["users", "maya", "memories"], "m2", "Allergy: peanuts", 1.0),
        (["users", "maya", "memories"], "m3", "Booked a train trip to Lisbon in May", 0.7),
        (["users", "maya", "work"], "w1", "Weekly report deadline on Fridays", 0.6),
        (["users", "omar", "memories"], "m1", "Runs every morning, sleeps early", 0.8),
    ];
    for (ns, key, text, confidence) in memories {
        store.put(&ns, key, json!({"text": text, "confidence": confidence}))?;
    }
    store.put_with(
        &["users", "maya", "session"],
        "cart",
        json!({"text": "pizza order in progress"}),
        PutOptions { ttl: Ttl::Minutes(30.0), ..PutOptions::default() },
    )?;

    println!("Where should Maya have dinner? (her memories, confidence >= 0.8)");
    let hits = store.search(
        &["users", "maya"],
        SearchOptions::default()
            .query("dinner at a restaurant, any food allergy?")
            .filter(json!({"confidence": {"$gte": 0.8}})),
    )?;
    for h in &hits {
        println!(
            "  {:>5.2}  {}/{}  {}",
            h.score.unwrap_or(0.0),
            h.item.namespace.join("/"),
            h.item.key,
            h.item.value["text"]
        );
    }

    println!("\nnamespaces under users, two levels deep:");
    let opts =
        ListNamespacesOptions { prefix: vec!["users".into()], max_depth: Some(2), ..Default::default() };
    for ns in store.list_namespaces(opts)? {
        println!("  {}", ns.join("/"));
    }
    println!("\nnamespaces ending in 'memories':");
    let opts = ListNamespacesOptions { suffix: vec!["memories".into()], ..Default::default() };
    for ns in store.list_namespaces(opts)? {
        println!("  {}", ns.join("/"));
    }
    Ok(())
}
