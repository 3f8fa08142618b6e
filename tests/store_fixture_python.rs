//! The Python-written Store fixture (`tests/fixtures/store/`), checked through
//! the public Store API: namespaces decode and validate, replaying Python's
//! puts reproduces every vector Python stored (field paths and vector names),
//! `Store::search` on the fixture file reproduces Python's ranking and scores,
//! and `Store::list_namespaces` on it agrees with Python's.
//!
//! The last test runs `read_rust_store.py` (the reader later pointed at files
//! written by agentstate) when the Python venv is available, and skips with a
//! printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentstate::store::{Embedder, IndexConfig, ListNamespaces, Namespace, Put, Search, Store};
use agentstate::{Db, StoreConfig};
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn open() -> Connection {
    Connection::open_with_flags(fixture_dir().join("python_store.sqlite"), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A Store over a copy of the fixture file, with the fixture's embedder and
/// fields, and the items the fixture records as expired given a past expiry
/// (whatever this machine's clock says).
fn fixture_store(exp: &Value) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("python_store.sqlite");
    std::fs::copy(fixture_dir().join("python_store.sqlite"), &path).unwrap();
    let conn = Connection::open(&path).unwrap();
    for e in exp["expired"].as_array().unwrap() {
        let prefix = Namespace::try_from(&e["namespace"]).unwrap().to_string();
        conn.execute(
            "UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE prefix = ?1 AND key = ?2",
            [&prefix, e["key"].as_str().unwrap()],
        )
        .unwrap();
    }
    drop(conn);
    let fields = labels(&exp["index_config"]["text_fields"]);
    // Python records no embedder: the fixture's vectors are adopted as
    // LetterCounts'.
    let config = StoreConfig::new()
        .with_index(IndexConfig::new(LetterCounts).with_fields(fields).with_adopt_existing_vectors(true));
    let store = Db::open(&path).unwrap().store(config).unwrap();
    (dir, store)
}

/// The fixture's embedding (`common.py`): counts of the letters a..h in the
/// lowercased text, plus 1 on the first dimension.
struct LetterCounts;

impl LetterCounts {
    fn embed(text: &str) -> Vec<f32> {
        let lower = text.to_lowercase();
        let mut v: Vec<f32> =
            "abcdefgh".chars().map(|c| lower.chars().filter(|&x| x == c).count() as f32).collect();
        v[0] += 1.0;
        v
    }
}

impl Embedder for LetterCounts {
    fn name(&self) -> &str {
        "fixture-letter-counts"
    }
    fn dims(&self) -> usize {
        8
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| Self::embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Self::embed(text))
    }
}

fn labels(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_owned()).collect()
}

/// `(prefix, key) -> value` for every row of the file.
fn rows(conn: &Connection) -> Vec<(String, String, Value)> {
    let mut stmt = conn.prepare("SELECT prefix, key, value FROM store ORDER BY prefix, key").unwrap();
    let rows = stmt
        .query_map([], |r| {
            let value: Vec<u8> = r.get(2)?; // Python binds the JSON as bytes
            Ok((r.get(0)?, r.get(1)?, serde_json::from_slice(&value).unwrap()))
        })
        .unwrap();
    rows.map(|r| r.unwrap()).collect()
}

fn vectors(conn: &Connection) -> Vec<(String, String, String, Vec<u8>)> {
    let mut stmt = conn
        .prepare(
            "SELECT prefix, key, field_name, embedding FROM store_vectors ORDER BY prefix, key, field_name",
        )
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap();
    rows.map(|r| r.unwrap()).collect()
}

#[test]
fn store_fixture_rows_decode_and_validate() {
    let conn = open();
    let exp = expected();
    let migrations: Vec<i64> = conn
        .prepare("SELECT v FROM store_migrations ORDER BY v")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(migrations, [0, 1, 2, 3, 4]);
    let all = rows(&conn);
    assert_eq!(all.len(), exp["puts"].as_array().unwrap().len());
    for (prefix, _, value) in &all {
        let ns = Namespace::new(prefix.split('.')).unwrap();
        assert_eq!(&ns.to_string(), prefix);
        assert!(value.is_object());
    }
    for get in exp["get"].as_array().unwrap() {
        let prefix = Namespace::try_from(&get["namespace"]).unwrap().to_string();
        let found = all.iter().find(|(p, k, _)| *p == prefix && k == get["key"].as_str().unwrap());
        match (&get["item"], found) {
            (Value::Null, None) => {}
            (item, Some((_, _, value))) => assert_eq!(&item["value"], value),
            (item, found) => panic!("{item} vs {found:?}"),
        }
    }
}

#[test]
fn store_fixture_vectors_are_reproduced_by_replaying_the_puts() {
    let conn = open();
    let exp = expected();
    let all = rows(&conn);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.db");
    let fields = labels(&exp["index_config"]["text_fields"]);
    let store = Db::open(&path)
        .unwrap()
        .store(StoreConfig::new().with_index(IndexConfig::new(LetterCounts).with_fields(fields)))
        .unwrap();
    for put in exp["puts"].as_array().unwrap() {
        let ns = Namespace::try_from(&put["namespace"]).unwrap();
        let key = put["key"].as_str().unwrap();
        let value = all.iter().find(|(p, k, _)| *p == ns.to_string() && k == key).unwrap().2.clone();
        let op = Put::new(&ns, key, value);
        let op = match &put["index"] {
            Value::Null => op,
            Value::Bool(false) => op.no_index(),
            list => op.index_fields(labels(list)),
        };
        store.put_with(op).unwrap();
    }
    let stored = vectors(&conn);
    let replayed = vectors(&Connection::open(&path).unwrap());
    assert_eq!(replayed, stored);
    assert!(stored.iter().any(|(_, _, name, _)| name == "tags[*].1"), "an item with several vectors");
}

#[test]
fn store_fixture_vector_search_is_reproduced_exactly() {
    let exp = expected();
    let q = &exp["search_query"];
    let (_dir, store) = fixture_store(&exp);
    let hits = store
        .search(
            Search::new(&labels(&q["prefix"]))
                .query(q["query"].as_str().unwrap())
                .limit(q["limit"].as_u64().unwrap() as usize),
        )
        .unwrap();
    let results = q["results"].as_array().unwrap();
    assert_eq!(hits.len(), results.len());
    for (hit, r) in hits.iter().zip(results) {
        assert_eq!(hit.item.namespace, Namespace::try_from(&r["namespace"]).unwrap());
        assert_eq!(hit.item.key, r["key"].as_str().unwrap());
        assert_eq!(hit.item.value, r["value"]);
        // Python's scores come from sqlite-vec (f32 sums), rounded to 6 places.
        let (got, want) = (hit.score.unwrap(), r["score"].as_f64().unwrap());
        assert!((got - want).abs() < 1e-5, "{}: {got} vs {want}", hit.item.key);
    }
}

#[test]
fn store_fixture_list_namespaces_is_reproduced() {
    let exp = expected();
    let (_dir, store) = fixture_store(&exp);
    let as_lists = |v: &Value| -> Vec<Vec<String>> { v.as_array().unwrap().iter().map(labels).collect() };
    let list = |l: ListNamespaces| -> Vec<Vec<String>> {
        store.list_namespaces(l).unwrap().into_iter().map(Namespace::into_labels).collect()
    };
    // No label here contains a character below '.', so Python's text order
    // and agentstate's tuple order agree on this data.
    assert_eq!(list(ListNamespaces::new()), as_lists(&exp["list_namespaces"]));
    assert_eq!(
        list(ListNamespaces::new().prefix(&["users"]).max_depth(2)),
        as_lists(&exp["list_namespaces_prefix_users_depth_2"])
    );
    assert_eq!(
        list(ListNamespaces::new().suffix(&["memories"])),
        as_lists(&exp["list_namespaces_suffix_memories"])
    );
}

/// The Python interpreter of the fixture venv: `$AGENTSTATE_STORE_PYTHON`, or
/// `/tmp/storevenv/bin/python` (see tests/fixtures/store/README.md).
fn venv_python() -> Option<PathBuf> {
    let p = std::env::var_os("AGENTSTATE_STORE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/storevenv/bin/python"));
    p.exists().then_some(p)
}

#[test]
#[cfg_attr(
    not(python_venv),
    ignore = "needs the Python venv: set AGENTSTATE_STORE_PYTHON (see tests/fixtures/store/README.md)"
)]
fn store_fixture_read_rust_store_script_runs() {
    let Some(python) = venv_python() else {
        panic!(
            "no Python venv with langgraph-checkpoint-sqlite at $AGENTSTATE_STORE_PYTHON or \
             /tmp/storevenv/bin/python (see tests/fixtures/store/README.md)"
        );
    };
    let exp = expected();
    let q = &exp["search_query"];
    let out = Command::new(&python)
        .arg(fixture_dir().join("read_rust_store.py"))
        .arg(fixture_dir().join("python_store.sqlite"))
        .args(["--query", q["query"].as_str().unwrap()])
        .args(["--prefix", &labels(&q["prefix"]).join(".")])
        .args(["--limit", &q["limit"].to_string()])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(3), "{} cannot load SQLite extensions", python.display());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["list_namespaces"], exp["list_namespaces"]);
    assert_eq!(got["search"], q["results"]);
    assert_eq!(got["items"].as_array().unwrap().len(), exp["puts"].as_array().unwrap().len());
}
