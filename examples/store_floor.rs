//! What SQLite alone costs for the rows a Store batch put writes: the floor
//! under `bench_store`'s `put_batch_us_per_item_excl_embed`.
//!
//! Raw rusqlite, no agentstate code: `bench_store`'s items (the same JSON
//! values, one 384-dim f32 vector each) put in batches of 100, one
//! `BEGIN IMMEDIATE ... COMMIT` per batch, cached single-row upserts, the
//! Store's pragmas (WAL, `synchronous=FULL` unless `--normal`, 4 KiB pages).
//! Three schemas, each on a fresh file:
//! - `python`: exactly LangGraph's `SqliteStore` tables and indexes (what
//!   its own batch put writes to);
//! - `indexed`: plus agentstate's `(prefix, expires_at)` index;
//! - `agentstate`: plus the generation table and its triggers, standing
//!   aside while the batch holds `agentstate_store_quiet`'s row, and one
//!   generation bump per prefix, as `Store::batch` writes.
//!
//! ```text
//! cargo run --release --example store_floor -- [--items 10000] [--normal]
//! ```
//!
//! Prints one JSON object: microseconds per item for each schema.

use std::time::Instant;

use agentstate::rusqlite::{params, Connection};
use serde_json::{json, Map, Value};

#[path = "common/mod.rs"]
mod common;
use common::{arg, flag};

const PYTHON: &str = "
    CREATE TABLE store (prefix text NOT NULL, key text NOT NULL, value text NOT NULL,
        created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        expires_at TIMESTAMP, ttl_minutes REAL, PRIMARY KEY (prefix, key));
    CREATE INDEX store_prefix_idx ON store (prefix);
    CREATE INDEX idx_store_expires_at ON store (expires_at) WHERE expires_at IS NOT NULL;
    CREATE TABLE store_vectors (prefix text NOT NULL, key text NOT NULL, field_name text NOT NULL,
        embedding BLOB, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
        updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (prefix, key, field_name),
        FOREIGN KEY (prefix, key) REFERENCES store(prefix, key) ON DELETE CASCADE);";

const INDEX: &str = "CREATE INDEX agentstate_store_prefix_expires ON store (prefix, expires_at);";

const GENERATIONS: &str = "
    CREATE TABLE agentstate_store_gen (prefix TEXT PRIMARY KEY, gen INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE agentstate_store_quiet (x INTEGER PRIMARY KEY);
    CREATE TRIGGER agentstate_store_ins AFTER INSERT ON store
    WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
        INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
            WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
        UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
    END;
    CREATE TRIGGER agentstate_vectors_ins AFTER INSERT ON store_vectors
    WHEN NOT EXISTS (SELECT 1 FROM agentstate_store_quiet) BEGIN
        INSERT INTO agentstate_store_gen (prefix, gen) SELECT NEW.prefix, 0
            WHERE NOT EXISTS (SELECT 1 FROM agentstate_store_gen WHERE prefix = NEW.prefix);
        UPDATE agentstate_store_gen SET gen = gen + 1 WHERE prefix = NEW.prefix;
    END;";

/// `bench_store`'s item value for item `i`.
fn value(i: usize) -> String {
    let topic = ["memory", "agents", "storage", "search", "graphs"][i % 5];
    let txt = format!("document {i} talks about {topic} and how {topic} relates to item {}. ", i * 7 % 1000);
    let text: String = txt.repeat(2).chars().take(120).collect();
    let category = ["a", "b", "c"][i % 3];
    json!({"text": text, "category": category, "score": i % 10, "n": i}).to_string()
}

fn vector(i: usize) -> Vec<u8> {
    (0..384).flat_map(|d| (((i * 31 + d * 7) % 101) as f32 / 101.0).to_le_bytes()).collect()
}

/// Microseconds per item of `items` puts in batches of 100 on a fresh file.
fn run(dir: &std::path::Path, name: &str, schema: &[&str], items: usize, full: bool) -> f64 {
    let path = dir.join(format!("{name}.db"));
    let conn = Connection::open(&path).expect("open");
    let sync = if full { "FULL" } else { "NORMAL" };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; \
         PRAGMA cache_size = -16000;"
    ))
    .expect("pragmas");
    for s in schema {
        conn.execute_batch(s).expect("schema");
    }
    let generations = schema.contains(&GENERATIONS);
    let values: Vec<(String, Vec<u8>)> = (0..items).map(|i| (value(i), vector(i))).collect();
    let t = Instant::now();
    for (b, batch) in values.chunks(100).enumerate() {
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        if generations {
            conn.prepare_cached("INSERT OR REPLACE INTO agentstate_store_quiet (x) VALUES (1)")
                .and_then(|mut s| s.execute([]))
                .expect("quiet");
        }
        let mut item = conn
            .prepare_cached(
                "INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) \
                 VALUES (?1, ?2, ?3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL) \
                 ON CONFLICT (prefix, key) DO UPDATE SET value = excluded.value, updated_at = CURRENT_TIMESTAMP",
            )
            .expect("item");
        let mut vec = conn
            .prepare_cached(
                "INSERT INTO store_vectors (prefix, key, field_name, embedding, created_at, updated_at) \
                 VALUES (?1, ?2, 'text', ?3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP) \
                 ON CONFLICT (prefix, key, field_name) DO UPDATE SET embedding = excluded.embedding",
            )
            .expect("vector");
        for (j, (v, e)) in batch.iter().enumerate() {
            let key = format!("doc-{:06}", b * 100 + j);
            item.execute(params!["bench.docs", key, v]).expect("put item");
            vec.execute(params!["bench.docs", key, e]).expect("put vector");
        }
        if generations {
            conn.prepare_cached(
                "INSERT INTO agentstate_store_gen (prefix, gen) VALUES (?1, 1) \
                 ON CONFLICT (prefix) DO UPDATE SET gen = gen + 1",
            )
            .and_then(|mut s| s.execute(["bench.docs"]))
            .expect("bump");
            conn.prepare_cached("DELETE FROM agentstate_store_quiet")
                .and_then(|mut s| s.execute([]))
                .expect("quiet");
        }
        conn.execute_batch("COMMIT").expect("commit");
    }
    t.elapsed().as_secs_f64() / items as f64 * 1e6
}

fn main() {
    let items = arg("--items", 10_000);
    let full = !flag("--normal");
    let dir = std::env::temp_dir().join(format!("agentstate-store-floor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut out = Map::new();
    out.insert("items".into(), json!(items));
    out.insert("synchronous".into(), json!(if full { "FULL" } else { "NORMAL" }));
    for (name, schema) in [
        ("python_us_per_item", vec![PYTHON]),
        ("indexed_us_per_item", vec![PYTHON, INDEX]),
        ("agentstate_us_per_item", vec![PYTHON, INDEX, GENERATIONS]),
    ] {
        out.insert(name.into(), json!(run(&dir, name, &schema, items, full)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", Value::Object(out));
}
