//! The Store workload of `shared/peer-bench/bench_store.py` (phases B-D) on
//! agentstate: batch puts of `{"text", "category", "score", "n"}` items with
//! 384-dim deterministic unit vectors, then get / vector search / filter
//! search / vector+filter search at `--n-small` and `--n-large` items, then
//! list_namespaces over 1000 namespaces. Prints one JSON object of medians.
//!
//! `cargo run --release --example bench_store -- [--n-small 10000] [--n-large 50000] [--full]
//! [--search-memory BYTES] [--small-search-memory BYTES]` (`--full` selects `Durability::Full`;
//! `--search-memory` sets the store's search memory budget, default
//! `StoreConfig::DEFAULT_SEARCH_MEMORY`; the 50k vector search is also timed on a store with
//! `--small-search-memory`, default 16 MiB, too small for the in-memory copy; `--namespaces-only`
//! runs the list_namespaces phase alone).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentstate::store::{Embedder, IndexConfig, ListNamespaces, Op, Put, Search, StoreConfig};
use agentstate::{Db, Durability, Result};
use serde_json::{json, Map, Value};

#[path = "common/mod.rs"]
mod common;
use common::{arg, flag, median};

const DIMS: usize = 384;
const TOPICS: [&str; 12] = [
    "rust", "python", "sqlite", "vectors", "graphs", "agents", "memory", "cooking", "travel", "music",
    "finance", "health",
];

/// Deterministic pseudo-random unit vectors seeded by a hash of the text (the
/// Python benchmark uses numpy's generator seeded by blake2b; the values
/// differ, the shape and cost do not).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct RandomUnit;

/// Time spent in `RandomUnit::embed_documents` so far (Python's
/// `EMBED_CALLS["seconds"]`).
static EMBED_NANOS: AtomicU64 = AtomicU64::new(0);

fn embed_secs() -> f64 {
    EMBED_NANOS.load(Ordering::Relaxed) as f64 / 1e9
}

impl RandomUnit {
    fn one(text: &str) -> Vec<f32> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let mut next = || {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            (h >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut v: Vec<f64> = (0..DIMS)
            .map(|_| {
                let (u1, u2) = (next().max(1e-300), next());
                (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            })
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v.into_iter().map(|x| x as f32).collect()
    }
}

impl Embedder for RandomUnit {
    fn name(&self) -> &str {
        "bench-random-unit"
    }
    fn dims(&self) -> usize {
        DIMS
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        // Timed inside the embedder, as the Python benchmark's `embed` times
        // itself: what the store spends embedding is subtracted exactly.
        let t = Instant::now();
        let out = texts.iter().map(|t| Self::one(t)).collect();
        EMBED_NANOS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(out)
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Self::one(text))
    }
}

fn value(i: usize) -> Value {
    let topic = TOPICS[i % TOPICS.len()];
    let txt = format!("document {i} talks about {topic} and how {topic} relates to item {}. ", i * 7 % 1000);
    let text: String = txt.repeat(2).chars().take(120).collect();
    let category = ["a", "b", "c"][i % 3];
    json!({"text": text, "category": category, "score": i % 10, "n": i})
}

fn time<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed().as_secs_f64(), out)
}

fn main() -> Result<()> {
    let n_small = arg("--n-small", 10_000);
    let n_large = arg("--n-large", 50_000);
    let batch = arg("--batch", 100);
    let n_ns = arg("--n-ns", 1000);
    let iters = arg("--search-iters", 20);
    let search_memory = arg("--search-memory", StoreConfig::DEFAULT_SEARCH_MEMORY);
    let small_memory = arg("--small-search-memory", 16 << 20);
    let durability = if flag("--full") { Durability::Full } else { Durability::Normal };
    let dir = std::env::temp_dir().join(format!("agentstate-bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut r = Map::new();
    if flag("--namespaces-only") {
        namespaces(durability, &dir, n_ns, &mut r)?;
        let _ = std::fs::remove_dir_all(&dir);
        println!("{}", Value::Object(r));
        return Ok(());
    }

    let db = Db::builder().durability(durability).open(dir.join("batch.db"))?;
    let store = db.store(
        StoreConfig::default()
            .with_index(IndexConfig::new(RandomUnit).with_fields(["text"]))
            .with_search_memory(search_memory),
    )?;
    let ns = vec!["bench".to_string(), "docs".to_string()];
    let mut done = 0;
    // Seconds of the run and of embedding within it (reported apart, as
    // Python reports them).
    let mut put_batches = |upto: usize| -> Result<(f64, f64)> {
        let e0 = embed_secs();
        let t = Instant::now();
        while done < upto {
            let hi = (done + batch).min(upto);
            let ops: Vec<Op> =
                (done..hi).map(|i| Op::Put(Put::new(&ns.clone(), format!("doc-{i:06}"), value(i)))).collect();
            store.batch(ops)?;
            done = hi;
        }
        Ok((t.elapsed().as_secs_f64(), embed_secs() - e0))
    };
    let reads = |n: usize, tag: usize, r: &mut Map<String, Value>| -> Result<()> {
        let mut ts = vec![];
        for j in 0..1000 {
            let k = format!("doc-{:06}", (j * 7919) % n);
            let (t, it) = time(|| store.get(&["bench", "docs"], &k));
            assert!(it?.is_some());
            ts.push(t);
        }
        r.insert(format!("get_us@{tag}"), json!(median(ts) * 1e6));
        let queries: Vec<String> =
            (0..iters).map(|j| format!("what do you know about {} #{j}", TOPICS[j % TOPICS.len()])).collect();
        let mut ts = vec![];
        for q in &queries {
            let (t, res) = time(|| store.search(Search::new(&["bench"]).query(q.clone()).limit(10)));
            let res = res?;
            assert_eq!(res.len(), 10);
            ts.push(t);
        }
        r.insert(format!("vsearch_ms@{tag}"), json!(median(ts) * 1e3));
        let flt = json!({"category": "a", "score": {"$gte": 5}});
        let mut ts = vec![];
        for _ in 0..iters {
            let (t, res) = time(|| store.search(Search::new(&["bench"]).filter(flt.clone()).limit(10)));
            assert_eq!(res?.len(), 10);
            ts.push(t);
        }
        r.insert(format!("filter_search_ms@{tag}"), json!(median(ts) * 1e3));
        let mut ts = vec![];
        for q in &queries {
            let opts = Search::new(&["bench"]).query(q.clone()).filter(json!({"category": "a"})).limit(10);
            let (t, res) = time(|| store.search(opts));
            let res = res?;
            assert!(res.len() == 10 && res.iter().all(|x| x.item.value["category"] == "a"));
            ts.push(t);
        }
        r.insert(format!("vsearch+filter_ms@{tag}"), json!(median(ts) * 1e3));
        Ok(())
    };
    let (el, embed) = put_batches(n_small)?;
    r.insert("put_batch_per_s".into(), json!(n_small as f64 / el));
    r.insert("put_batch_us_per_item_excl_embed".into(), json!((el - embed) / n_small as f64 * 1e6));
    reads(n_small, n_small, &mut r)?;
    if n_large > n_small {
        let (el, _) = put_batches(n_large)?;
        r.insert(format!("put_batch_per_s_to_{n_large}"), json!((n_large - n_small) as f64 / el));
        reads(n_large, n_large, &mut r)?;
        // The same vector searches on a store whose search memory is too
        // small for the in-memory copy: they run from the file.
        let small = db.store(
            StoreConfig::default()
                .with_index(IndexConfig::new(RandomUnit).with_fields(["text"]))
                .with_search_memory(small_memory),
        )?;
        let mut ts = vec![];
        for j in 0..iters {
            let q = format!("what do you know about {} #{j}", TOPICS[j % TOPICS.len()]);
            let (t, res) = time(|| small.search(Search::new(&["bench"]).query(q).limit(10)));
            assert_eq!(res?.len(), 10);
            ts.push(t);
        }
        r.insert(format!("vsearch_ms@{n_large}_search_memory_{small_memory}"), json!(median(ts) * 1e3));
        drop(small);
        // The same vector search once the file also holds as many items in
        // other namespaces: search cost must not depend on them.
        let other = vec!["elsewhere".to_string(), "docs".to_string()];
        for c in (0..n_large).step_by(batch) {
            let ops: Vec<Op> = (c..(c + batch).min(n_large))
                .map(|i| Op::Put(Put::new(&other.clone(), format!("doc-{i:06}"), value(i))))
                .collect();
            store.batch(ops)?;
        }
        let mut ts = vec![];
        for j in 0..iters {
            let q = format!("what do you know about {} #{j}", TOPICS[j % TOPICS.len()]);
            let (t, res) = time(|| store.search(Search::new(&["bench"]).query(q).limit(10)));
            assert_eq!(res?.len(), 10);
            ts.push(t);
        }
        r.insert(format!("vsearch_ms@{n_large}_plus_{n_large}_elsewhere"), json!(median(ts) * 1e3));
    }

    namespaces(durability, &dir, n_ns, &mut r)?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", Value::Object(r));
    Ok(())
}

/// The `list_namespaces` phase: `n_ns` namespaces of 2 items each, every
/// listing timed repeated and right after a write. `--namespaces-only`
/// runs this phase alone (for profiling it).
fn namespaces(
    durability: Durability,
    dir: &std::path::Path,
    n_ns: usize,
    r: &mut Map<String, Value>,
) -> Result<()> {
    let db = Db::builder().durability(durability).open(dir.join("namespaces.db"))?;
    let store = db.store(StoreConfig::default())?;
    let mut ops = vec![];
    for i in 0..n_ns {
        for j in 0..2 {
            ops.push(Op::Put(Put::new(
                &["users".to_string(), format!("user{i:04}"), "memories".to_string()],
                format!("m{j}"),
                json!({"text": format!("mem {i} {j}")}),
            )));
        }
    }
    store.batch(ops)?;
    // Each list twice: repeated (nothing changes between calls, so the
    // store may answer from its recent answers), and right after a write
    // (untimed: an item of user0000 put again, the namespaces unchanged),
    // which reads the file, as every Python call does.
    let list = |name: &str, opts: ListNamespaces, expect: usize, r: &mut Map<String, Value>| -> Result<()> {
        for after_write in [false, true] {
            let mut ts = vec![];
            for _ in 0..20 {
                if after_write {
                    store.put(&["users", "user0000", "memories"], "m0", json!({"text": "mem 0 0"}))?;
                }
                let (t, res) = time(|| store.list_namespaces(opts.clone()));
                assert_eq!(res?.len(), expect);
                ts.push(t);
            }
            let key = if after_write { name.replace("_ms", "_after_write_ms") } else { name.to_string() };
            r.insert(key, json!(median(ts) * 1e3));
        }
        Ok(())
    };
    let all = n_ns + 10;
    let users = vec!["users".to_string()];
    list("list_ns_all_ms", ListNamespaces::new().prefix(&users.clone()).limit(all), n_ns, r)?;
    list("list_ns_noprefix_ms", ListNamespaces::new().limit(all), n_ns, r)?;
    list(
        "list_ns_maxdepth2_ms",
        ListNamespaces::new().prefix(&users.clone()).max_depth(2).limit(all),
        n_ns,
        r,
    )?;
    list("list_ns_suffix_ms", ListNamespaces::new().suffix(&["memories"]).limit(all), n_ns, r)?;
    list("list_ns_default_limit100_ms", ListNamespaces::new().prefix(&users), 100, r)?;
    Ok(())
}
