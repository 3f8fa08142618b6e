//! Store only, with your own embedder: namespaced memories, semantic search
//! with a filter, per-item TTL, and listing namespaces.
//!
//! The embedder here is a toy "bag of topics" model; plug a real one (an
//! ONNX model, an HTTP client to your embedding service, ...) into the same
//! trait. `cargo run --example store_custom_embedder [path]`

use std::time::Duration;

use agentstate::store::{Embedder, IndexConfig, ListNamespaces, Put, Search, TtlConfig};
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
    // Any error type works: the Store wraps it in `Error::Embedding` and keeps
    // it as the `source()`.
    fn embed_documents(
        &self,
        texts: &[String],
    ) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(texts.iter().map(|t| Topics::embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Topics::embed(text))
    }
}

fn main() -> agentstate::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "agentstate-store.db".into());
    let _ = std::fs::remove_file(&path);
    let db = Db::open(&path)?;
    let store = db.store(
        StoreConfig::default()
            .with_index(IndexConfig::new(Topics).with_fields(["text"]))
            .with_ttl(TtlConfig::new().with_sweep_interval(Duration::from_secs(5 * 60))),
    )?;

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
        Put::new(&["users", "maya", "session"], "cart", json!({"text": "pizza order in progress"}))
            .ttl(Duration::from_secs(30 * 60)),
    )?;

    println!("Where should Maya have dinner? (her memories, confidence >= 0.8)");
    let hits = store.search(
        Search::new(&["users", "maya"])
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
    let opts = ListNamespaces::new().prefix(&["users"]).max_depth(2);
    for ns in store.list_namespaces(opts)? {
        println!("  {}", ns.join("/"));
    }
    println!("\nnamespaces ending in 'memories':");
    let opts = ListNamespaces::new().suffix(&["memories"]);
    for ns in store.list_namespaces(opts)? {
        println!("  {}", ns.join("/"));
    }
    Ok(())
}
