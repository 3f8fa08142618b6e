//! The Python-written Store fixture (`tests/fixtures/store/`, DESIGN.md
//! decision 10), checked against the database-free building blocks of
//! `agentstate::store`: namespaces decode and validate, the field paths and
//! vector names reproduce every vector Python stored, exact max-pooled cosine
//! search reproduces Python's ranking and scores, and the namespace listing
//! helper agrees with Python's `list_namespaces`.
//!
//! The last test runs `read_rust_store.py` (the reader later pointed at files
//! written by agentstate) when the Python venv is available, and skips with a
//! printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentstate::store::namespace::{decode_prefix, list_namespaces, MatchCondition, Namespace};
use agentstate::store::path::{configured_fields, field_texts, per_put_fields};
use agentstate::store::{cosine, Embedder};
use agentstate::Result;
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
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| Self::embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(Self::embed(text))
    }
}

fn labels(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_owned()).collect()
}

fn f32_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
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
        let ns = Namespace::from_prefix(prefix).unwrap();
        assert_eq!(&ns.encode(), prefix);
        assert!(value.is_object());
    }
    for get in exp["get"].as_array().unwrap() {
        let prefix = Namespace::try_from(&get["namespace"]).unwrap().encode();
        let found = all.iter().find(|(p, k, _)| *p == prefix && k == get["key"].as_str().unwrap());
        match (&get["item"], found) {
            (Value::Null, None) => {}
            (item, Some((_, _, value))) => assert_eq!(&item["value"], value),
            (item, found) => panic!("{item} vs {found:?}"),
        }
    }
}

#[test]
fn store_fixture_vectors_are_reproduced_by_field_paths() {
    let conn = open();
    let exp = expected();
    let configured: Vec<String> = labels(&exp["index_config"]["text_fields"]);
    let all = rows(&conn);
    let stored = vectors(&conn);
    let mut checked = 0;
    for put in exp["puts"].as_array().unwrap() {
        let prefix = Namespace::try_from(&put["namespace"]).unwrap().encode();
        let key = put["key"].as_str().unwrap();
        let value = &all.iter().find(|(p, k, _)| *p == prefix && k == key).unwrap().2;
        let fields = match &put["index"] {
            Value::Null => configured_fields(&configured),
            Value::Bool(false) => vec![],
            list => per_put_fields(&labels(list)),
        };
        let mut want: Vec<(String, Vec<u8>)> = field_texts(value, &fields)
            .into_iter()
            .map(|(name, text)| (name, f32_blob(&LetterCounts::embed(&text))))
            .collect();
        want.sort();
        let got: Vec<(String, Vec<u8>)> = stored
            .iter()
            .filter(|(p, k, _, _)| *p == prefix && k == key)
            .map(|(_, _, name, blob)| (name.clone(), blob.clone()))
            .collect();
        assert_eq!(got, want, "{prefix} {key}");
        checked += got.len();
    }
    assert_eq!(checked, stored.len());
    assert!(stored.iter().any(|(_, _, name, _)| name == "tags[*].1"), "an item with several vectors");
}

#[test]
fn store_fixture_vector_search_is_reproduced_exactly() {
    let conn = open();
    let exp = expected();
    let q = &exp["search_query"];
    let condition = MatchCondition::prefix(labels(&q["prefix"]));
    let limit = q["limit"].as_u64().unwrap() as usize;
    let expired: Vec<(String, String)> = exp["expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (Namespace::try_from(&e["namespace"]).unwrap().encode(), e["key"].as_str().unwrap().to_owned())
        })
        .collect();
    let query = LetterCounts.embed_query(q["query"].as_str().unwrap()).unwrap();

    // Exact search: score every vector, keep each item's best, drop expired.
    let mut best: Vec<((String, String), f32)> = Vec::new();
    for (prefix, key, _, blob) in vectors(&conn) {
        let id = (prefix.clone(), key.clone());
        if !condition.matches_encoded(&prefix) || expired.contains(&id) {
            continue;
        }
        let v: Vec<f32> =
            blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let Some(score) = cosine(&query, &v) else { continue };
        match best.iter_mut().find(|(i, _)| *i == id) {
            Some(slot) => slot.1 = slot.1.max(score),
            None => best.push((id, score)),
        }
    }
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    best.truncate(limit);

    let results = q["results"].as_array().unwrap();
    assert_eq!(best.len(), results.len());
    for ((id, score), r) in best.iter().zip(results) {
        assert_eq!(id.0, Namespace::try_from(&r["namespace"]).unwrap().encode());
        assert_eq!(id.1, r["key"].as_str().unwrap());
        // Python's scores come from sqlite-vec (f32 sums), rounded to 6 places.
        let want = r["score"].as_f64().unwrap();
        assert!((f64::from(*score) - want).abs() < 1e-5, "{id:?}: {score} vs {want}");
    }
}

#[test]
fn store_fixture_list_namespaces_is_reproduced() {
    let conn = open();
    let exp = expected();
    let mut prefixes: Vec<Vec<String>> = rows(&conn).into_iter().map(|(p, _, _)| decode_prefix(&p)).collect();
    prefixes.dedup();
    let as_lists = |v: &Value| -> Vec<Vec<String>> { v.as_array().unwrap().iter().map(labels).collect() };
    // No label here contains a character below '.', so Python's text order
    // and agentstate's tuple order agree on this data (DESIGN decision 13).
    assert_eq!(list_namespaces(&prefixes, &[], None, 100, 0), as_lists(&exp["list_namespaces"]));
    assert_eq!(
        list_namespaces(&prefixes, &[MatchCondition::prefix(["users"])], Some(2), 100, 0),
        as_lists(&exp["list_namespaces_prefix_users_depth_2"])
    );
    assert_eq!(
        list_namespaces(&prefixes, &[MatchCondition::suffix(["memories"])], None, 100, 0),
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
