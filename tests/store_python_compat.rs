//! A file written by Python's SqliteStore opens here
//! (read, search, update through the `Store` API), and a file this crate
//! wrote (the same fixture after our updates) opens in Python.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentstate::store::{Embedder, IndexConfig, ListNamespaces, Search};
use agentstate::{Db, Store, StoreConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
use serde_json::{json, Value};

/// The fixture's embedding (tests/fixtures/store/README.md): counts of the
/// letters a..h in the lowercased text, plus 1 on the first dimension.
struct LetterCounts;

impl Embedder for LetterCounts {
    fn name(&self) -> &str {
        "fixture-letter-counts"
    }
    fn dims(&self) -> usize {
        8
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(embed(text))
    }
}

fn embed(text: &str) -> Vec<f32> {
    let lower = text.to_lowercase();
    let mut v: Vec<f32> =
        "abcdefgh".chars().map(|c| lower.chars().filter(|&x| x == c).count() as f32).collect();
    v[0] += 1.0;
    v
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store")
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap()).unwrap()
}

fn open_copy() -> (tempfile::TempDir, PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("python_store.sqlite");
    std::fs::copy(fixture_dir().join("python_store.sqlite"), &path).unwrap();
    let db = Db::open(&path).unwrap();
    let store = db
        .store(StoreConfig::default().with_index(
            // Python records no embedder: its vectors are adopted as LetterCounts'.
            IndexConfig::new(LetterCounts).with_fields(["text"]).with_adopt_existing_vectors(true),
        ))
        .unwrap();
    (dir, path, store)
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn python_file_reads_and_searches_like_python() {
    let (_d, _p, store) = open_copy();
    let exp = expected();
    for g in exp["get"].as_array().unwrap() {
        let ns = strs(&g["namespace"]);
        let ns: Vec<&str> = ns.iter().map(String::as_str).collect();
        let got = store.get(&ns, g["key"].as_str().unwrap()).unwrap();
        match &g["item"] {
            Value::Null => assert!(got.is_none()),
            item => assert_eq!(got.unwrap().value, item["value"], "get {:?}", g["key"]),
        }
    }
    for e in exp["expired"].as_array().unwrap() {
        let ns = strs(&e["namespace"]);
        let ns: Vec<&str> = ns.iter().map(String::as_str).collect();
        assert!(
            store.get(&ns, e["key"].as_str().unwrap()).unwrap().is_none(),
            "expired items are never returned"
        );
    }
    let sq = &exp["search_query"];
    let prefix = strs(&sq["prefix"]);
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let hits = store
        .search(
            Search::new(&prefix)
                .query(sq["query"].as_str().unwrap())
                .limit(sq["limit"].as_u64().unwrap() as usize),
        )
        .unwrap();
    let want = sq["results"].as_array().unwrap();
    assert_eq!(hits.len(), want.len());
    for (h, w) in hits.iter().zip(want) {
        assert_eq!(h.item.namespace, strs(&w["namespace"]));
        assert_eq!(h.item.key, w["key"].as_str().unwrap());
        assert!((h.score.unwrap() - w["score"].as_f64().unwrap()).abs() < 1e-5);
    }
    let listed = store.list_namespaces(ListNamespaces::new()).unwrap();
    let want: Vec<Vec<String>> = exp["list_namespaces"].as_array().unwrap().iter().map(strs).collect();
    assert_eq!(listed, want);
}

#[test]
#[cfg_attr(
    not(python_venv),
    ignore = "needs the Python venv: set AGENTSTATE_STORE_PYTHON (see tests/fixtures/store/README.md)"
)]
fn python_file_updates_in_place() {
    let (_d, path, store) = open_copy();
    store
        .put(&["users", "alice", "memories"], "m9", json!({"text": "Alice bakes bagels", "importance": 4}))
        .unwrap();
    store
        .put(
            &["users", "alice", "memories"],
            "m1",
            json!({"text": "Alice now prefers cycling", "importance": 6}),
        )
        .unwrap();
    store.delete(&["users", "bob", "memories"], "m3").unwrap();
    let hits = store.search(Search::new(&["users", "alice"]).query("bagel bakery").limit(1)).unwrap();
    assert_eq!(hits[0].item.key, "m9");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM store_vectors v WHERE NOT EXISTS (SELECT 1 FROM store s WHERE s.prefix = v.prefix AND s.key = v.key)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
    let m1_vectors: Vec<String> = conn
        .prepare("SELECT field_name FROM store_vectors WHERE prefix = 'users.alice.memories' AND key = 'm1'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<std::result::Result<_, _>>()
        .unwrap();
    assert_eq!(m1_vectors, vec!["text"]);
    drop(store);
    drop(conn);

    // And Python reads the file this crate wrote.
    let python = std::env::var_os("AGENTSTATE_STORE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/storevenv/bin/python"));
    assert!(python.exists(), "no Python venv at {} (see tests/fixtures/store/README.md)", python.display());
    let out = Command::new(&python)
        .arg(fixture_dir().join("read_rust_store.py"))
        .arg(&path)
        .args(["--query", "bagel bakery", "--prefix", "users.alice", "--limit", "1"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(3), "{} cannot load SQLite extensions", python.display());
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["search"][0]["key"], "m9", "{read}");
    let keys: Vec<&str> =
        read["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert!(keys.contains(&"m9"));
}
