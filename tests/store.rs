//! The Store's contract through the public API, named after the behaviour
//! each test pins (docs/design.md, sections "Store search", "Namespaces" and
//! "TTL", explains the choices).

use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};

use agentstate::store::{
    Embedder, Get, IndexConfig, ListNamespaces, MatchCondition, Op, OpResult, Put, Search, TtlConfig,
};
use agentstate::{Db, Error, Store, StoreConfig};
use rusqlite::Connection;
use serde_json::{json, Value};

/// Embeds texts like `"1 0 0.5"` as the vector they spell; other texts as a
/// zero vector. Lets tests choose exact vectors.
struct Literal(usize);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Embedder for Literal {
    fn name(&self) -> &str {
        "literal"
    }
    fn dims(&self) -> usize {
        self.0
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| self.parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(self.parse(text))
    }
}

impl Literal {
    fn parse(&self, t: &str) -> Vec<f32> {
        let v: Vec<f32> = t.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if v.len() == self.0 {
            v
        } else {
            vec![0.0; self.0]
        }
    }
}

fn plain() -> Store {
    Db::open_in_memory().unwrap().store(StoreConfig::default()).unwrap()
}

fn literal_store(fields: &[&str]) -> (tempfile::TempDir, Store, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = Db::open(&path).unwrap();
    let store = db
        .store(StoreConfig::default().with_index(IndexConfig::new(Literal(3)).with_fields(fields.to_vec())))
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    (dir, store, conn)
}

/// The field names of an item's vectors, sorted.
fn vector_names(conn: &Connection, key: &str) -> Vec<String> {
    conn.prepare("SELECT field_name FROM store_vectors WHERE key = ?1 ORDER BY field_name")
        .unwrap()
        .query_map([key], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn keys(items: &[agentstate::SearchItem]) -> Vec<String> {
    items.iter().map(|i| i.item.key.clone()).collect()
}

fn ns_list(v: &[&[&str]]) -> Vec<Vec<String>> {
    v.iter().map(|n| n.iter().map(|s| s.to_string()).collect()).collect()
}

// ---------------------------------------------------------------- namespaces

#[test]
fn namespace_rules_with_langgraph_messages() {
    let s = plain();
    let msg = |ns: &[&str]| match s.put(ns, "k", json!({})) {
        Err(Error::InvalidNamespace(m)) => m,
        other => panic!("{ns:?}: {other:?}"),
    };
    assert_eq!(msg(&[]), "Namespace cannot be empty.");
    assert!(msg(&["a.b"]).contains("cannot contain periods ('.')"));
    assert!(msg(&[""]).starts_with("Namespace labels cannot be empty strings."));
    assert!(msg(&["langgraph", "x"]).starts_with("Root label for namespace cannot be \"langgraph\"."));
    assert!(matches!(s.put(&["a\0b"], "k", json!({})), Err(Error::InvalidNamespace(_))));
    // Checked on every operation that names a namespace.
    assert!(matches!(s.get(&["a.b"], "k"), Err(Error::InvalidNamespace(_))));
    assert!(matches!(s.delete(&[""], "k"), Err(Error::InvalidNamespace(_))));
    assert!(matches!(s.search(Search::new(&["a.b"])), Err(Error::InvalidNamespace(_))));
    let bad = ListNamespaces::new().prefix(&["a.b"]);
    assert!(matches!(s.list_namespaces(bad), Err(Error::InvalidNamespace(_))));
    // Nothing was written by the failed calls.
    assert!(s.search(Search::all()).unwrap().is_empty());
}

fn put_all(s: &Store, nss: &[&[&str]]) {
    for ns in nss {
        s.put(ns, "k", json!({"ns": ns})).unwrap();
    }
}

#[test]
fn list_namespaces_prefix_suffix_depth_wildcard() {
    let s = plain();
    put_all(
        &s,
        &[&["a", "b", "c"], &["a", "b", "d", "e"], &["a", "b", "d", "i"], &["a", "b", "f"], &["a", "c", "f"]],
    );
    let got = s.list_namespaces(ListNamespaces::new().prefix(&["a", "b"]).max_depth(3)).unwrap();
    assert_eq!(got, ns_list(&[&["a", "b", "c"], &["a", "b", "d"], &["a", "b", "f"]]));
    let got = s.list_namespaces(ListNamespaces::new().suffix(&["f"])).unwrap();
    assert_eq!(got, ns_list(&[&["a", "b", "f"], &["a", "c", "f"]]));
    let got = s.list_namespaces(ListNamespaces::new().prefix(&["a", "*"])).unwrap();
    assert_eq!(got.len(), 5);
}

#[test]
fn label_aligned_suffix_and_wildcard() {
    let s = plain();
    put_all(
        &s,
        &[
            &["uid", "users", "alice"],
            &["uid", "users", "malice"],
            &["uid", "a", "b", "alice"],
            &["users", "alice\n"],
        ],
    );
    let got = s.list_namespaces(ListNamespaces::new().suffix(&["alice"])).unwrap();
    assert_eq!(got, ns_list(&[&["uid", "a", "b", "alice"], &["uid", "users", "alice"]]));
    let got = s.list_namespaces(ListNamespaces::new().prefix(&["uid", "*", "alice"])).unwrap();
    assert_eq!(got, ns_list(&[&["uid", "users", "alice"]]));
}

#[test]
fn metacharacter_labels_are_literal() {
    let s = plain();
    for (label, decoy) in [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXet"),
        ("user_1", "userX1"),
        ("a%b", "aXb"),
        ("plus+", "plusX"),
    ] {
        put_all(&s, &[&[label], &[decoy], &[label, "child"]]);
        let got = s.list_namespaces(ListNamespaces::new().prefix(&[label])).unwrap();
        assert_eq!(got, ns_list(&[&[label], &[label, "child"]]), "{label}");
        let found = s.search(Search::new(&[label])).unwrap();
        assert_eq!(found.len(), 2, "{label}");
        assert!(found.iter().all(|i| i.item.namespace[0] == label));
    }
}

#[test]
fn search_prefix_is_label_aligned_and_case_sensitive() {
    let s = plain();
    put_all(&s, &[&["foo"], &["foo", "child"], &["foobar"], &["foo2"]]);
    let nss = |p: &[&str]| {
        let mut v: Vec<Vec<String>> =
            s.search(Search::new(p)).unwrap().into_iter().map(|i| i.item.namespace.to_vec()).collect();
        v.sort();
        v
    };
    assert_eq!(nss(&["foo"]), ns_list(&[&["foo"], &["foo", "child"]]));
    assert!(nss(&["fo"]).is_empty());
    assert_eq!(nss(&[]).len(), 4);
    assert!(nss(&["Foo"]).is_empty());
}

/// results in tuple order (Python's SqliteStore sorts the dotted
/// text instead and would give `("A",),("a*",),("a-c",),("a","b"),...`).
#[test]
fn tuple_order() {
    let s = plain();
    put_all(&s, &[&["b"], &["a_"], &["a", "b"], &["a-c"], &["a*"], &["A"]]);
    let got = s.list_namespaces(ListNamespaces::new()).unwrap();
    assert_eq!(got, ns_list(&[&["A"], &["a", "b"], &["a*"], &["a-c"], &["a_"], &["b"]]));
}

// ---------------------------------------------------------------- batch

/// reads see the state before the batch; puts to one key
/// collapse to the last; results in op order.
#[test]
fn batch_reads_before_writes() {
    let s = plain();
    s.put(&["n"], "k", json!({"v": 0})).unwrap();
    let ns = vec!["n".to_string()];
    let put = |v: i64| Op::Put(Put::new(&ns, "k", json!({"v": v})));
    let out = s.batch(vec![put(1), Get::new(&ns, "k").into(), put(2), Search::new(&ns).into()]).unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!(out[0], OpResult::Done);
    match &out[1] {
        OpResult::Item(Some(i)) => assert_eq!(i.value, json!({"v": 0})),
        other => panic!("{other:?}"),
    }
    match &out[3] {
        OpResult::Items(v) => assert_eq!(v[0].item.value, json!({"v": 0})),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.get(&["n"], "k").unwrap().unwrap().value, json!({"v": 2}));
}

#[test]
fn batch_is_one_transaction() {
    let s = plain();
    let ns = vec!["n".to_string()];
    let good = Op::Put(Put::new(&ns, "a", json!({})));
    let bad = Op::Put(Put::new(&ns, "b", json!([1])));
    assert!(matches!(s.batch(vec![good, bad]), Err(Error::InvalidArgument(_))));
    assert!(s.get(&["n"], "a").unwrap().is_none(), "nothing of a failed batch is written");
}

// ---------------------------------------------------------------- filters

fn filter_doc_store() -> Store {
    let s = plain();
    s.put(
        &["f"],
        "doc",
        json!({"x": 1, "s": "hi", "b": true, "l": [1, 2], "d": {"y": 2}, "n": null, "f": 1.5}),
    )
    .unwrap();
    s
}

fn count(s: &Store, f: Value) -> usize {
    s.search(Search::new(&["f"]).filter(f)).unwrap().len()
}

/// JSON semantics (`1 == 1.0`; `true` equals only `true`;
/// structural `$eq` on lists; null matches missing).
#[test]
fn filter_semantics() {
    let s = filter_doc_store();
    for f in [
        json!({"x": 1.0}),
        json!({"l": [1, 2]}),
        json!({"missing": null}),
        json!({"x": {"$gt": 0}}),
        json!({"f": {"$lt": 2}}),
        json!({"d.y": 2}),
        json!({"s": {"$gte": "ha"}}),
        json!({"l": {"$eq": [1, 2]}}),
        json!({"missing": {"$ne": "q"}}),
    ] {
        assert_eq!(count(&s, f.clone()), 1, "{f}");
    }
    for f in [json!({"x": true}), json!({"b": 1}), json!({"x": {"$gt": "0"}}), json!({"missing": {"$gt": 1}})]
    {
        assert_eq!(count(&s, f.clone()), 0, "{f}");
    }
}

/// a nested object without `$` keys is a partial match (like
/// InMemoryStore; SqliteStore raises).
#[test]
fn nested_object_is_partial_match() {
    let s = filter_doc_store();
    assert_eq!(count(&s, json!({"d": {"y": 2}})), 1);
    assert_eq!(count(&s, json!({"d": {"y": 3}})), 0);
}

#[test]
fn ne_missing_and_errors() {
    let s = filter_doc_store();
    assert_eq!(count(&s, json!({"missing": {"$ne": 1}})), 1);
    assert_eq!(count(&s, json!({"missing": {"$gt": 1}})), 0);
    let err = s.search(Search::new(&["f"]).filter(json!({"x": {"$foo": 1}}))).unwrap_err();
    assert!(matches!(err, Error::InvalidFilter { .. }));
    assert!(err.to_string().contains("$foo"));
    let err = s.search(Search::new(&["f"]).filter(json!({"bad key": 1}))).unwrap_err();
    assert!(err.to_string().starts_with("Invalid filter key: 'bad key'."));
}

/// `$in $nin $exists $and $or $not`.
#[test]
fn extended_operators() {
    let s = filter_doc_store();
    assert_eq!(count(&s, json!({"x": {"$in": [5, 1]}})), 1);
    assert_eq!(count(&s, json!({"x": {"$nin": [1]}})), 0);
    assert_eq!(count(&s, json!({"n": {"$exists": true}})), 1);
    assert_eq!(count(&s, json!({"zz": {"$exists": true}})), 0);
    assert_eq!(count(&s, json!({"$or": [{"x": 2}, {"s": "hi"}]})), 1);
    assert_eq!(count(&s, json!({"$and": [{"x": 1}, {"s": "no"}]})), 0);
    assert_eq!(count(&s, json!({"$not": {"x": 1}})), 0);
}

// ---------------------------------------------------------------- timestamps and TTL

/// an update keeps `created_at` and moves `updated_at`.
#[test]
fn upsert_keeps_created_at() {
    let (_d, s, conn) = literal_store(&["$"]);
    s.put(&["n"], "k", json!({"v": 1})).unwrap();
    conn.execute(
        "UPDATE store SET created_at = '2000-01-01 00:00:00', updated_at = '2000-01-01 00:00:00'",
        [],
    )
    .unwrap();
    s.put(&["n"], "k", json!({"v": 2})).unwrap();
    let item = s.get(&["n"], "k").unwrap().unwrap();
    let y2000 = UNIX_EPOCH + Duration::from_secs(946_684_800);
    assert_eq!(item.created_at, y2000);
    assert!(item.updated_at > y2000);
    assert!(item.updated_at <= SystemTime::now() + Duration::from_secs(1));
}

fn ttl_store(refresh_on_read: bool) -> (tempfile::TempDir, Store, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let ttl =
        TtlConfig::new().with_refresh_on_read(refresh_on_read).with_default_ttl(Duration::from_secs(600));
    let store = Db::open(&path).unwrap().store(StoreConfig::default().with_ttl(ttl)).unwrap();
    (dir, store, Connection::open(&path).unwrap())
}

fn expiry(conn: &Connection) -> (Option<String>, Option<f64>) {
    conn.query_row("SELECT expires_at, ttl_minutes FROM store", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
}

/// TTL in minutes from `default_ttl`; refresh on read by default
/// (Python's SqliteStore needs `refresh_on_read` spelled out); per-call flag
/// overrides; `no_ttl()` clears it.
#[test]
fn ttl_and_refresh() {
    let (_d, s, conn) = ttl_store(true);
    s.put(&["n"], "k", json!({})).unwrap();
    let (e, m) = expiry(&conn);
    assert_eq!(m, Some(10.0));
    let e = e.unwrap();
    let in_ten: String =
        conn.query_row("SELECT strftime('%Y-%m-%d %H:%M', 'now', '+10 minutes')", [], |r| r.get(0)).unwrap();
    assert!(e.starts_with(&in_ten[..15]), "{e} vs {in_ten}");
    conn.execute("UPDATE store SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 minutes')", [])
        .unwrap();
    let before = expiry(&conn).0.unwrap();
    s.batch(vec![Get::new(&["n"], "k").refresh_ttl(false).into()]).unwrap();
    assert_eq!(expiry(&conn).0.unwrap(), before, "per-call flag off: no refresh");
    s.get(&["n"], "k").unwrap().unwrap();
    assert!(expiry(&conn).0.unwrap() > before, "default: refresh on read");
    conn.execute("UPDATE store SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 minutes')", [])
        .unwrap();
    let before = expiry(&conn).0.unwrap();
    s.search(Search::new(&["n"])).unwrap();
    assert!(expiry(&conn).0.unwrap() > before, "search refreshes too");
    s.put_with(Put::new(&["n"], "k", json!({})).no_ttl()).unwrap();
    assert_eq!(expiry(&conn), (None, None));

    let (_d2, s2, conn2) = ttl_store(false);
    s2.put(&["n"], "k", json!({})).unwrap();
    conn2
        .execute("UPDATE store SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 minutes')", [])
        .unwrap();
    let before = expiry(&conn2).0.unwrap();
    s2.get(&["n"], "k").unwrap().unwrap();
    assert_eq!(expiry(&conn2).0.unwrap(), before, "refresh_on_read=false");
}

/// an expired item is never returned, even before the sweep;
/// the sweep deletes it and its vectors (cascade), and keeps items without
/// expiry.
#[test]
fn expired_never_returned_and_swept_with_vectors() {
    let (_d, s, conn) = literal_store(&["v"]);
    s.put_with(Put::new(&["n"], "old", json!({"v": "1 0 0"})).ttl(Duration::from_secs(300))).unwrap();
    s.put(&["n"], "keep", json!({"v": "0 1 0"})).unwrap();
    conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE key = 'old'", []).unwrap();
    assert!(s.get(&["n"], "old").unwrap().is_none());
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("1 0 0")).unwrap()), vec!["keep"]);
    assert_eq!(keys(&s.search(Search::new(&["n"])).unwrap()), vec!["keep"]);
    conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE key = 'keep'", []).unwrap();
    assert!(s.list_namespaces(ListNamespaces::new()).unwrap().is_empty());
    conn.execute("UPDATE store SET expires_at = NULL WHERE key = 'keep'", []).unwrap();
    assert_eq!(s.sweep_expired().unwrap(), 1);
    let vectors: i64 =
        conn.query_row("SELECT COUNT(*) FROM store_vectors WHERE key = 'old'", [], |r| r.get(0)).unwrap();
    assert_eq!(vectors, 0);
    assert!(s.get(&["n"], "keep").unwrap().is_some());
    assert_eq!(s.sweep_expired().unwrap(), 0);
}

#[test]
fn background_sweeper_runs_and_stops_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sw.db");
    let db = Db::open(&path).unwrap();
    let ttl = TtlConfig::new().with_sweep_interval(Duration::from_millis(60));
    let s = db.store(StoreConfig::default().with_ttl(ttl)).unwrap();
    s.put_with(Put::new(&["n"], "k", json!({})).ttl(Duration::from_secs(60))).unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00'", []).unwrap();
    let mut n = 1;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        n = conn.query_row("SELECT COUNT(*) FROM store", [], |r| r.get::<_, i64>(0)).unwrap();
        if n == 0 {
            break;
        }
    }
    assert_eq!(n, 0, "the sweeper deleted the expired row");
    drop(s); // joins the sweeper thread; would hang if it did not stop
}

// ---------------------------------------------------------------- vectors

/// exact cosine, max-pooled per item.
#[test]
fn cosine_max_pooled() {
    let (_d, s, _c) = literal_store(&["a", "b"]);
    s.put(&["n"], "same", json!({"a": "1 0 0"})).unwrap();
    s.put(&["n"], "ortho", json!({"a": "0 1 0"})).unwrap();
    s.put(&["n"], "zero", json!({"a": "0 0 0"})).unwrap();
    s.put(&["n"], "two", json!({"a": "0 1 0", "b": "1 1 0"})).unwrap();
    let got = s.search(Search::new(&["n"]).query("1 0 0")).unwrap();
    let scores: Vec<(String, Option<f64>)> = got.iter().map(|i| (i.item.key.clone(), i.score)).collect();
    assert_eq!(scores[0].0, "same");
    assert!((scores[0].1.unwrap() - 1.0).abs() < 1e-6);
    assert_eq!(scores[1].0, "two");
    assert!(
        (scores[1].1.unwrap() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6,
        "max over its two vectors"
    );
    assert_eq!(scores[2].0, "ortho");
    assert!(scores[2].1.unwrap().abs() < 1e-6);
    assert_eq!(scores[3], ("zero".to_string(), None), "a zero vector has no score");
    assert_eq!(got.len(), 4, "each item once");
}

/// items with no vector follow the scored ones with score None;
/// offset counts over the whole sequence.
#[test]
fn unscored_items_follow() {
    let (_d, s, _c) = literal_store(&["v"]);
    s.put(&["n"], "a", json!({"v": "1 0 0"})).unwrap();
    s.put_with(Put::new(&["n"], "plain", json!({"v": "1 0 0"})).no_index()).unwrap();
    let got = s.search(Search::new(&["n"]).query("1 0 0")).unwrap();
    assert_eq!(keys(&got), vec!["a", "plain"]);
    assert_eq!(got[1].score, None);
    let got = s.search(Search::new(&["n"]).query("1 0 0").limit(1)).unwrap();
    assert_eq!(keys(&got), vec!["a"]);
    let got = s.search(Search::new(&["n"]).query("1 0 0").offset(1)).unwrap();
    assert_eq!(keys(&got), vec!["plain"]);
}

/// the configured `fields` are honoured (Python's SqliteStore
/// embeds the whole document instead), and a per-put `index` overrides them.
#[test]
fn fields_honoured_and_per_put_override() {
    let (_d, s, conn) = literal_store(&["text"]);
    s.put(&["n"], "k", json!({"text": "1 0 0", "other": "0 1 0"})).unwrap();
    let names = |key: &str| vector_names(&conn, key);
    assert_eq!(names("k"), vec!["text"]);
    s.put_with(Put::new(&["n"], "k", json!({"text": "1 0 0", "other": "0 1 0"})).index_fields(["other"]))
        .unwrap();
    assert_eq!(names("k"), vec!["other"], "re-indexing replaces all old vectors");
}

/// Case 48: vector field names; per-put `["$"]` embeds nothing (LangGraph's
/// quirk, kept).
#[test]
fn vector_field_names() {
    let (_d, s, conn) = literal_store(&["$"]);
    let names = |key: &str| vector_names(&conn, key);
    s.put_with(
        Put::new(&["n"], "two", json!({"text": "abcd", "arr": ["a", "bb"]})).index_fields(["text", "arr[*]"]),
    )
    .unwrap();
    assert_eq!(names("two"), vec!["arr[*].0", "arr[*].1", "text"]);
    s.put_with(
        Put::new(&["n"], "one", json!({"text": "abcd", "arr": ["a"]})).index_fields(["text", "arr[*]"]),
    )
    .unwrap();
    assert_eq!(names("one"), vec!["arr[*]", "text"]);
    s.put_with(Put::new(&["n"], "dollar", json!({"text": "abcd"})).index_fields(["$"])).unwrap();
    assert!(names("dollar").is_empty());
    s.put(&["n"], "whole", json!({"text": "abcd"})).unwrap();
    assert_eq!(names("whole"), vec!["$"]);
}

/// deleting an item removes its vectors (foreign keys on), so a
/// re-put with `index=false` is not found through stale vectors.
#[test]
fn no_stale_vectors() {
    let (_d, s, conn) = literal_store(&["v"]);
    s.put(&["n"], "k", json!({"v": "1 0 0"})).unwrap();
    s.delete(&["n"], "k").unwrap();
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 0);
    s.put_with(Put::new(&["n"], "k", json!({"v": "1 0 0"})).no_index()).unwrap();
    let got = s.search(Search::new(&["n"]).query("1 0 0")).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].score, None, "found as an unscored item, not through a stale vector");
}

/// offset and limit count distinct items after pooling (Python
/// returns [] here).
#[test]
fn offset_after_pooling() {
    let (_d, s, _c) = literal_store(&["a", "b"]);
    s.put(&["n"], "top", json!({"a": "1 0 0", "b": "1 0.1 0"})).unwrap();
    s.put(&["n"], "second", json!({"a": "1 1 0"})).unwrap();
    let got = s.search(Search::new(&["n"]).query("1 0 0").limit(1).offset(1)).unwrap();
    assert_eq!(keys(&got), vec!["second"]);
}

#[test]
fn limits_and_offsets() {
    let s = plain();
    s.put(&["n"], "a", json!({})).unwrap();
    assert!(s.search(Search::new(&["n"]).limit(0)).unwrap().is_empty());
    assert!(s.list_namespaces(ListNamespaces::new().limit(0)).unwrap().is_empty());
    assert!(s.search(Search::new(&["n"]).offset(10)).unwrap().is_empty());
}

/// ties are broken deterministically (namespace, then key).
#[test]
fn ties_are_deterministic() {
    let (_d, s, _c) = literal_store(&["v"]);
    for k in ["c", "a", "b"] {
        s.put(&["n"], k, json!({"v": "1 0 0"})).unwrap();
    }
    let got = s.search(Search::new(&["n"]).query("1 0 0")).unwrap();
    assert_eq!(keys(&got), vec!["a", "b", "c"]);
}

/// the embedder that made the vectors is recorded; another one
/// is refused until a reindex.
#[test]
fn embedder_identity_and_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.db");
    let db = Db::open(&path).unwrap();
    let s =
        db.store(StoreConfig::default().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    s.put(&["n"], "k", json!({"v": "1 0 0", "text": "running shoes"})).unwrap();
    drop(s);
    let other = StoreConfig::default().with_index(IndexConfig::hashed(16).unwrap().with_fields(["text"]));
    match db.store(other.clone()) {
        Err(Error::EmbedderMismatch { stored, configured }) => {
            assert_eq!(stored, "literal/3");
            assert_eq!(configured, "agentstate-hash-v1/16");
        }
        other => panic!("{other:?}"),
    }
    let s = db.reindex_store(other.clone()).unwrap();
    let got = s.search(Search::all().query("shoes for running")).unwrap();
    assert!(got[0].score.unwrap() > 0.1);
    drop(s);
    db.store(other).unwrap();
}

#[test]
fn index_dims_are_the_embedders() {
    let cfg = IndexConfig::new(Literal(3));
    assert_eq!(cfg.dims(), 3);
    let db = Db::open_in_memory().unwrap();
    assert!(matches!(
        db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(0)))),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn values_must_be_objects_and_ttls_in_range() {
    let s = plain();
    assert!(matches!(s.put(&["n"], "k", json!([1])), Err(Error::InvalidArgument(_))));
    let bad = Put::new(&["n"], "k", json!({})).ttl(Duration::MAX);
    assert!(matches!(s.put_with(bad), Err(Error::InvalidArgument(_))));
    let bad = Put::new(&["n"], "k", json!({})).ttl(agentstate::store::MAX_TTL + Duration::from_secs(1));
    assert!(matches!(s.put_with(bad), Err(Error::InvalidArgument(_))));
    let far = Put::new(&["n"], "k", json!({})).ttl(agentstate::store::MAX_TTL);
    s.put_with(far).unwrap();
    let item = s.get(&["n"], "k").unwrap().unwrap();
    assert!(item.expires_at.unwrap() > SystemTime::now() + Duration::from_secs(1_000 * 365 * 86_400));
    let cfg = StoreConfig::new().with_ttl(TtlConfig::new().with_default_ttl(Duration::MAX));
    assert!(matches!(Db::open_in_memory().unwrap().store(cfg), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_query_on_a_store_without_an_index_is_an_invalid_config() {
    let s = plain();
    s.put(&["n"], "k", json!({"text": "x"})).unwrap();
    assert!(matches!(s.search(Search::new(&["n"]).query("x")), Err(Error::InvalidConfig(_))));
    assert_eq!(s.search(Search::new(&["n"])).unwrap().len(), 1);
}

#[test]
fn items_report_their_expiry_and_reads_report_the_refreshed_one() {
    let (_d, s, conn) = ttl_store(true);
    s.put(&["n"], "k", json!({})).unwrap();
    conn.execute("UPDATE store SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 minutes')", [])
        .unwrap();
    let soon = SystemTime::now() + Duration::from_secs(120);
    let item = s.get(&["n"], "k").unwrap().unwrap();
    assert!(item.expires_at.unwrap() > soon, "the refreshed expiry (10 minutes) is reported");
    let hit = &s.search(Search::new(&["n"])).unwrap()[0];
    assert!(hit.item.expires_at.unwrap() > soon);
    let kept = s.get_with(Get::new(&["n"], "k").refresh_ttl(false)).unwrap().unwrap();
    assert!(kept.expires_at.is_some());
    s.put_with(Put::new(&["n"], "k", json!({})).no_ttl()).unwrap();
    assert_eq!(s.get(&["n"], "k").unwrap().unwrap().expires_at, None);
}

#[test]
fn namespaces_from_list_namespaces_go_straight_back_in() {
    let s = plain();
    s.put(&["users", "alice"], "k", json!({"v": 1})).unwrap();
    for ns in s.list_namespaces(ListNamespaces::new()).unwrap() {
        assert!(s.get(&ns, "k").unwrap().is_some());
        let item = s.search(Search::new(&ns)).unwrap().remove(0).item;
        s.put(&item.namespace, "k2", json!({})).unwrap();
        let owned: Vec<String> = ns.to_vec();
        assert!(s.get(&owned, "k2").unwrap().is_some());
        s.delete(&ns[..], "k2").unwrap();
    }
    assert_eq!(s.list_namespaces(ListNamespaces::new().max_depth(0)).unwrap()[0].len(), 0);
}

#[test]
fn an_embedders_own_error_is_the_source_of_the_embedding_error() {
    #[derive(Debug)]
    struct Down;
    impl std::fmt::Display for Down {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("model is down")
        }
    }
    impl std::error::Error for Down {}
    struct Failing;
    impl Embedder for Failing {
        fn name(&self) -> &str {
            "failing"
        }
        fn dims(&self) -> usize {
            2
        }
        fn embed_documents(&self, _: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
            Err(Box::new(Down))
        }
        fn embed_query(&self, _: &str) -> Result<Vec<f32>, BoxError> {
            Err("no queries today".into())
        }
    }
    let s = Db::open_in_memory()
        .unwrap()
        .store(StoreConfig::new().with_index(IndexConfig::new(Failing)))
        .unwrap();
    let err = s.put(&["n"], "k", json!({"a": 1})).unwrap_err();
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.downcast_ref::<Down>().is_some(), "{err}");
    assert!(err.to_string().contains("model is down"));
    let err = s.search(Search::all().query("q")).unwrap_err();
    assert!(matches!(&err, Error::Embedding { source: Some(_), .. }), "{err}");
}

#[test]
fn one_file_serves_checkpoints_and_store() {
    let db = Db::open_in_memory().unwrap();
    let store = db.store(StoreConfig::default()).unwrap();
    let saver = db.checkpointer();
    store.put(&["users", "alice"], "prefs", json!({"lang": "en"})).unwrap();
    let cfg = saver
        .put(
            &agentstate::CheckpointConfig::thread("t"),
            &agentstate::Checkpoint::new(),
            &agentstate::Metadata::new(),
            &Default::default(),
        )
        .unwrap();
    assert!(saver.get_tuple(&cfg).unwrap().is_some());
    assert_eq!(store.get(&["users", "alice"], "prefs").unwrap().unwrap().value, json!({"lang": "en"}));
    let _ = MatchCondition::prefix(["users"]);
}

/// Search runs over an in-memory cache; a change made by any other writer
/// (another `Db`, another process, Python, raw SQL) is seen by the next
/// search, because triggers bump a per-namespace generation.
#[test]
fn search_cache_sees_every_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let cfg = || StoreConfig::default().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]));
    let a = Db::open(&path).unwrap().store(cfg()).unwrap();
    let b = Db::open(&path).unwrap().store(cfg()).unwrap();
    a.put(&["n"], "k1", json!({"v": "1 0 0"})).unwrap();
    assert_eq!(keys(&b.search(Search::new(&["n"]).query("1 0 0")).unwrap()), vec!["k1"]);
    a.put(&["n"], "k2", json!({"v": "0 1 0"})).unwrap();
    a.put(&["n"], "k1", json!({"v": "0 0 1"})).unwrap();
    let got = b.search(Search::new(&["n"]).query("0 1 0")).unwrap();
    assert_eq!(keys(&got), vec!["k2", "k1"]);
    assert_eq!(got[1].item.value, json!({"v": "0 0 1"}));
    let raw = Connection::open(&path).unwrap();
    raw.execute("DELETE FROM store WHERE key = 'k2'", []).unwrap();
    raw.execute("UPDATE store SET value = '{\"v\": \"0 0 1\", \"w\": 1}' WHERE key = 'k1'", []).unwrap();
    let got = b.search(Search::new(&["n"]).filter(json!({"w": 1}))).unwrap();
    assert_eq!(keys(&got), vec!["k1"]);
    assert_eq!(b.search(Search::new(&["n"])).unwrap().len(), 1);
}

// ---------------------------------------------------------------- reliability

/// The `name/dims` the file records for its vectors, if any.
fn recorded_embedder(path: &std::path::Path) -> Option<String> {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT value FROM agentstate_meta WHERE key = 'store.embedder'", [], |r| r.get(0))
        .ok()
}

fn vector_count(path: &std::path::Path) -> i64 {
    Connection::open(path).unwrap().query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap()
}

/// An embedder of any identity whose document embedding fails.
struct FailingDocs(&'static str, usize);

impl Embedder for FailingDocs {
    fn name(&self) -> &str {
        self.0
    }
    fn dims(&self) -> usize {
        self.1
    }
    fn embed_documents(&self, _: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Err("the model went away".into())
    }
    fn embed_query(&self, _: &str) -> Result<Vec<f32>, BoxError> {
        Err("the model went away".into())
    }
}

/// A file indexed with `Literal(3)` over field `v`: items k1 = "1 0 0",
/// k2 = "0 1 0".
fn indexed_file() -> (tempfile::TempDir, std::path::PathBuf, Db) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let db = Db::open(&path).unwrap();
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    s.put(&["n"], "k1", json!({"v": "1 0 0"})).unwrap();
    s.put(&["n"], "k2", json!({"v": "0 1 0"})).unwrap();
    (dir, path, db)
}

/// A reindex is one transaction: the new embedder is recorded together with
/// the new vectors. When it fails midway (here the new embedder fails, as a
/// kill would stop it), the file still records the old embedder over the old
/// vectors, and the old configuration still opens and searches.
#[test]
fn a_failed_reindex_leaves_the_old_embedder_and_vectors() {
    let (_d, path, db) = indexed_file();
    let err = db
        .reindex_store(
            StoreConfig::new().with_index(IndexConfig::new(FailingDocs("other", 2)).with_fields(["v"])),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Embedding { .. }), "{err}");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert_eq!(vector_count(&path), 2);
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
}

/// Runs a hook (another writer's put) the first time it embeds documents,
/// that is after a reindex has read the items and before it writes.
struct Interleaved {
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Embedder for Interleaved {
    fn name(&self) -> &str {
        "literal"
    }
    fn dims(&self) -> usize {
        3
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        if let Some(hook) = self.hook.lock().unwrap().take() {
            hook();
        }
        Ok(texts.iter().map(|t| Literal(3).parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Literal(3).parse(text))
    }
}

/// A put acknowledged while a reindex runs keeps its vector: the reindex
/// re-reads the items inside its write transaction and embeds what changed
/// since it first read them.
#[test]
fn reindex_keeps_the_vectors_of_puts_acknowledged_meanwhile() {
    let (_d, path, db) = indexed_file();
    let other = Db::open(&path).unwrap();
    let hook = move || {
        let s = other
            .store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"])))
            .unwrap();
        s.put(&["n"], "late", json!({"v": "0 0 1"})).unwrap();
        s.put(&["n"], "k1", json!({"v": "1 1 0"})).unwrap();
    };
    let embedder = Interleaved { hook: std::sync::Mutex::new(Some(Box::new(hook))) };
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(embedder).with_fields(["v"]))).unwrap();
    assert_eq!(s.reindex().unwrap(), 3);
    assert_eq!(vector_names(&Connection::open(&path).unwrap(), "late"), vec!["v"]);
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(keys(&hits)[0], "late");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
    let hits = s.search(Search::new(&["n"]).query("1 1 0")).unwrap();
    assert_eq!(keys(&hits)[0], "k1", "the vector of the newer k1");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
}

/// Says it has `dims` dimensions but returns 3-long vectors.
struct Claims(usize);

impl Embedder for Claims {
    fn name(&self) -> &str {
        "claims"
    }
    fn dims(&self) -> usize {
        self.0
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| Literal(3).parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, BoxError> {
        Ok(Literal(3).parse(text))
    }
}

/// Absurd dimensions (0, 2^32, usize::MAX) are refused with a typed error
/// wherever a dimension comes in, before anything is written: the file
/// keeps its embedder and vectors.
#[test]
fn absurd_dimensions_are_refused_before_anything_changes() {
    for dims in [0, 1 << 32, usize::MAX] {
        assert!(
            matches!(agentstate::store::HashEmbedder::new(dims), Err(Error::InvalidArgument(_))),
            "{dims}"
        );
        assert!(matches!(IndexConfig::hashed(dims), Err(Error::InvalidArgument(_))), "{dims}");
    }
    let (_d, path, db) = indexed_file();
    for dims in [0, 1 << 32, usize::MAX] {
        let cfg = || StoreConfig::new().with_index(IndexConfig::new(Claims(dims)).with_fields(["v"]));
        assert!(matches!(db.store(cfg()), Err(Error::InvalidArgument(_))), "{dims}");
        assert!(matches!(db.reindex_store(cfg()), Err(Error::InvalidArgument(_))), "{dims}");
        assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
        assert_eq!(vector_count(&path), 2);
    }
    // Vectors of the wrong length from an embedder of a sane dimension.
    let err = db
        .reindex_store(StoreConfig::new().with_index(IndexConfig::new(Claims(5)).with_fields(["v"])))
        .unwrap_err();
    assert!(matches!(err, Error::DimensionMismatch { expected: 5, got: 3 }), "{err}");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert_eq!(vector_count(&path), 2);
}

/// A file whose vectors no recorded embedder made (LangGraph's Python
/// `SqliteStore` records none) is refused with an index config, whatever the
/// embedder, because its vectors would be scored against ours; nothing is
/// recorded then. The caller may adopt the vectors (then the embedder is
/// recorded and the file opens normally) or reindex. A file without vectors
/// simply records the embedder.
#[test]
fn vectors_of_an_unrecorded_embedder_are_refused_unless_adopted() {
    let (_d, path, db) = indexed_file();
    Connection::open(&path).unwrap().execute("DELETE FROM agentstate_meta", []).unwrap();
    let hashed = || StoreConfig::new().with_index(IndexConfig::hashed(16).unwrap().with_fields(["v"]));
    let literal = |adopt| {
        StoreConfig::new()
            .with_index(IndexConfig::new(Literal(3)).with_fields(["v"]).with_adopt_existing_vectors(adopt))
    };
    for cfg in [hashed(), literal(false)] {
        match db.store(cfg) {
            Err(Error::UnrecordedEmbedder { vectors: 2, configured }) => {
                assert!(configured.ends_with("/16") || configured == "literal/3", "{configured}")
            }
            other => panic!("{other:?}"),
        }
    }
    // Vectors of another length cannot be adopted.
    let five = StoreConfig::new().with_index(IndexConfig::new(Claims(5)).with_adopt_existing_vectors(true));
    assert!(matches!(db.store(five), Err(Error::DimensionMismatch { expected: 5, got: 3 })));
    assert_eq!(recorded_embedder(&path), None);
    // A plain store needs no embedder.
    assert_eq!(db.store(StoreConfig::new()).unwrap().search(Search::new(&["n"])).unwrap().len(), 2);
    // Adopting on a read-only Db reads without recording.
    let ro = Db::builder().read_only(true).open(&path).unwrap();
    let s = ro.store(literal(true)).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
    drop((s, ro));
    assert_eq!(recorded_embedder(&path), None);
    // Adopting records the embedder: later opens need no flag.
    let s = db.store(literal(true)).unwrap();
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("0 1 0")).unwrap())[0], "k2");
    assert_eq!(recorded_embedder(&path).as_deref(), Some("literal/3"));
    assert!(db.store(literal(false)).is_ok());
    assert!(matches!(db.store(hashed()), Err(Error::EmbedderMismatch { .. })));
    // Reindexing replaces unrecorded vectors too.
    Connection::open(&path).unwrap().execute("DELETE FROM agentstate_meta", []).unwrap();
    db.reindex_store(hashed()).unwrap();
    assert_eq!(recorded_embedder(&path).as_deref(), Some("agentstate-hash-v1/16"));
    // No vectors, no record: the embedder is recorded at open.
    let fresh = Db::open_in_memory().unwrap();
    fresh.store(hashed()).unwrap();
    assert!(matches!(fresh.store(literal(false)), Err(Error::EmbedderMismatch { .. })));
}

/// A change to a vector alone (another writer updating `store_vectors`, not
/// `store`) moves the search generation: a long-lived Store scores the new
/// vector.
#[test]
fn a_vector_changed_alone_by_another_writer_is_seen_by_search() {
    let (_d, path, db) = indexed_file();
    let s = db.store(StoreConfig::new().with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert!(hits.iter().all(|h| h.score.unwrap().abs() < 1e-6));
    let raw = Connection::open(&path).unwrap();
    let blob: Vec<u8> = [0f32, 0.0, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    raw.execute("UPDATE store_vectors SET embedding = ?1 WHERE key = 'k2'", [&blob]).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(keys(&hits)[0], "k2");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6, "{hits:?}");
    raw.execute("DELETE FROM store_vectors WHERE key = 'k2'", []).unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 0 1")).unwrap();
    assert_eq!(hits.iter().find(|h| h.item.key == "k2").unwrap().score, None);
    let orphan: Vec<u8> = [0f32, 1.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    raw.execute(
        "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES ('n', 'k2', 'v', ?1)",
        [&orphan],
    )
    .unwrap();
    let hits = s.search(Search::new(&["n"]).query("0 1 0")).unwrap();
    assert_eq!(keys(&hits)[0], "k2");
    assert!((hits[0].score.unwrap() - 1.0).abs() < 1e-6);
}

/// Reads never fail because of the TTL refresh: while another connection
/// holds the write lock, get and search answer at once (the refresh is
/// skipped), and opening a Store whose embedder is already recorded writes
/// nothing, so it does not wait for the lock either.
#[test]
fn reads_and_opens_do_not_wait_for_another_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.db");
    let db = Db::builder().busy_timeout(Duration::from_millis(400)).open(&path).unwrap();
    let cfg = || {
        StoreConfig::new()
            .with_index(IndexConfig::new(Literal(3)).with_fields(["v"]))
            .with_ttl(TtlConfig::new().with_default_ttl(Duration::from_secs(600)))
    };
    let s = db.store(cfg()).unwrap();
    s.put(&["n"], "k", json!({"v": "1 0 0"})).unwrap();
    let before = s.get(&["n"], "k").unwrap().unwrap().expires_at.unwrap();
    let writer = Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE; INSERT INTO agentstate_meta VALUES ('x', 'y')").unwrap();
    let t = std::time::Instant::now();
    let got = s.get(&["n"], "k").unwrap().unwrap();
    assert!(got.expires_at.unwrap() >= before);
    assert_eq!(keys(&s.search(Search::new(&["n"]).query("1 0 0")).unwrap()), vec!["k"]);
    assert_eq!(
        s.batch(vec![Op::Get(Get::new(&["n"], "k")), Op::Search(Search::new(&["n"]))]).unwrap().len(),
        2
    );
    let again = db.store(cfg()).unwrap();
    assert!(again.get(&["n"], "k").unwrap().is_some());
    assert!(t.elapsed() < Duration::from_millis(400), "{:?}", t.elapsed());
    writer.execute_batch("COMMIT").unwrap();
    // With the lock free again, reads refresh.
    std::thread::sleep(Duration::from_millis(1100));
    let after = s.get(&["n"], "k").unwrap().unwrap().expires_at.unwrap();
    assert!(after > before);
}

/// The schema rows and contents of a Python `SqliteSaver`'s two tables.
fn saver_tables(path: &std::path::Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut out: Vec<String> = conn
        .prepare(
            "SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master \
             WHERE tbl_name IN ('checkpoints', 'writes') ORDER BY name",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for table in ["checkpoints", "writes"] {
        let rows: Vec<String> = conn
            .prepare(&format!("SELECT quote(thread_id) || quote(checkpoint_id) || quote(type) FROM {table}"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        out.extend(rows);
    }
    out
}

/// A Python file holding both a `SqliteSaver` (tables `checkpoints` and
/// `writes`, no migration table) and a `SqliteStore`: its Store half opens
/// and reads, its saver tables are left exactly as they were, and the
/// checkpointer refuses the file with a typed error instead of misreading
/// Python's rows.
#[test]
fn the_store_half_of_a_python_saver_and_store_file_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("python_both.sqlite");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/python_store.sqlite");
    std::fs::copy(fixture, &path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
               checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, \
               PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)); \
             CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', \
               checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, \
               type TEXT, value BLOB, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)); \
             INSERT INTO checkpoints VALUES ('t', '', '1ef', NULL, 'msgpack', x'80', x'7b7d'); \
             INSERT INTO writes VALUES ('t', '', '1ef', 'task', 0, 'c', 'msgpack', x'01');",
        )
        .unwrap();
    let before = saver_tables(&path);
    let db = Db::open(&path).unwrap();
    let store = db.store(StoreConfig::new()).unwrap();
    let item = store.get(&["users", "alice", "memories"], "m1").unwrap();
    assert!(item.is_some());
    assert!(!store.search(Search::new(&["docs"])).unwrap().is_empty());
    store.put(&["rust"], "k", json!({"written": "by agentstate"})).unwrap();
    assert!(store.get(&["rust"], "k").unwrap().is_some());
    let saver = db.checkpointer();
    let err = saver.get_tuple(&agentstate::CheckpointConfig::thread("t")).unwrap_err();
    assert!(matches!(err, Error::NotAgentstate(_)), "{err}");
    assert!(err.to_string().contains("SqliteSaver"), "{err}");
    assert!(saver.delete_thread("t").is_err());
    // Inspection sees the Store half and no agentstate checkpoints.
    assert!(db.threads().unwrap().is_empty());
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    let stats = db.stats().unwrap();
    assert!(stats.store.items > 0, "{stats:?}");
    drop((store, saver, db));
    let ro = Db::builder().read_only(true).open(&path).unwrap();
    assert!(ro.store(StoreConfig::new()).unwrap().get(&["rust"], "k").unwrap().is_some());
    drop(ro);
    assert_eq!(saver_tables(&path), before, "the saver's tables are untouched");
    let ours: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('checkpoint_migrations', 'checkpoint_blobs', \
             'checkpoint_writes')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ours, 0, "no checkpoint table of ours is mixed into the saver's");
}

// ------------------------------------------------- search memory budget

mod search_memory {
    use super::*;
    use proptest::prelude::*;

    const NAMESPACES: [&[&str]; 5] = [&["a"], &["a", "b"], &["a-b"], &["a", "b", "c"], &["z"]];

    /// One item: its namespace, vectors (as `Literal` texts; `None` for no
    /// index), a category, a number, and whether it has already expired.
    type Spec = (usize, Option<(Vec<i8>, Vec<i8>)>, bool, i64, bool);

    fn spec() -> impl Strategy<Value = Spec> {
        let v = prop::collection::vec(-2i8..=2, 3);
        (
            0..NAMESPACES.len(),
            prop::option::weighted(0.8, (v.clone(), v)),
            any::<bool>(),
            0..5i64,
            prop::bool::weighted(0.15),
        )
    }

    fn text(v: &[i8]) -> String {
        v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ")
    }

    type Page = Vec<(Vec<String>, String, Value, Option<f64>, SystemTime, SystemTime)>;

    fn page(s: &Store, search: Search) -> Page {
        s.search(search.refresh_ttl(false))
            .unwrap()
            .into_iter()
            .map(|h| {
                let it = h.item;
                (it.namespace.to_vec(), it.key, it.value, h.score, it.created_at, it.updated_at)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Searching from the file (a budget too small for the in-memory
        /// copy) gives the same pages as searching in memory: same items,
        /// order, scores (max-pooled), unscored items last, expired items
        /// never, filters applied, offset and limit over distinct items.
        #[test]
        fn a_tiny_search_memory_gives_the_same_pages_as_the_default(
            items in prop::collection::vec(spec(), 0..40),
            searches in prop::collection::vec(
                (0..NAMESPACES.len() + 1, prop::option::of(prop::collection::vec(-2i8..=2, 3)),
                 0..3usize, 1..8usize, 0..6usize),
                1..6),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path().join("s.db")).unwrap();
            let index = || IndexConfig::new(Literal(3)).with_fields(["x", "y"]);
            let roomy = db.store(StoreConfig::default().with_index(index())).unwrap();
            let tiny = db.store(StoreConfig::default().with_index(index()).with_search_memory(0)).unwrap();
            let some = db.store(StoreConfig::default().with_index(index()).with_search_memory(3000)).unwrap();
            // Budgets that hold part of the vector rows in memory (the
            // partial copy) and stream the rest.
            let parts: Vec<Store> = [200, 700, 1500]
                .into_iter()
                .map(|m| db.store(StoreConfig::default().with_index(index()).with_search_memory(m)).unwrap())
                .collect();
            let mut ops = vec![];
            for (i, (ns, vectors, cat, n, expired)) in items.iter().enumerate() {
                let mut value = json!({"c": if *cat { "a" } else { "b" }, "n": n});
                let put = match vectors {
                    Some((x, y)) => {
                        value["x"] = json!(text(x));
                        value["y"] = json!(text(y));
                        Put::new(NAMESPACES[*ns], format!("k{}", i % 17), value)
                    }
                    None => Put::new(NAMESPACES[*ns], format!("k{}", i % 17), value).no_index(),
                };
                ops.push(Op::Put(if *expired { put.ttl(Duration::from_millis(1)) } else { put }));
            }
            roomy.batch(ops).unwrap();
            std::thread::sleep(Duration::from_millis(10));
            for (prefix, query, filter, limit, offset) in searches {
                let mut search = match prefix {
                    0 => Search::all(),
                    p => Search::new(NAMESPACES[p - 1]),
                };
                if let Some(q) = query {
                    search = search.query(text(&q));
                }
                match filter {
                    1 => search = search.filter(json!({"c": "a"})),
                    2 => search = search.filter(json!({"n": {"$gte": 2}})),
                    _ => {}
                }
                let search = search.limit(limit).offset(offset);
                let want = page(&roomy, search.clone());
                prop_assert_eq!(&page(&tiny, search.clone()), &want);
                for part in &parts {
                    prop_assert_eq!(&page(part, search.clone()), &want);
                }
                prop_assert_eq!(&page(&some, search), &want);
            }
        }
    }

    /// Deterministic `Literal` texts of `dims` components in [-1, 1], from an
    /// xorshift stream seeded with `seed`.
    fn literal_vectors(mut seed: u64, dims: usize) -> impl FnMut() -> String {
        move || {
            (0..dims)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    format!("{:.3}", (seed % 2001) as f64 / 1000.0 - 1.0)
                })
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    /// A store of `db` indexing field `x` as `dims` literal numbers, with a
    /// search memory budget (`None`: the default).
    fn literal_store(db: &Db, dims: usize, memory: Option<usize>) -> Store {
        let config = StoreConfig::default().with_index(IndexConfig::new(Literal(dims)).with_fields(["x"]));
        db.store(match memory {
            Some(m) => config.with_search_memory(m),
            None => config,
        })
        .unwrap()
    }

    /// Searches under a budget that holds part of the vectors, from two
    /// threads beside a writer: puts in another namespace (the partial copy
    /// stays) and rewrites of searched items with their own values (it
    /// reloads, maybe in both threads at once) never change a page, and
    /// nothing fails.
    #[test]
    fn searches_over_budget_from_several_threads_beside_a_writer() {
        use std::sync::atomic::{AtomicBool, Ordering};
        const DIMS: usize = 8;
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("s.db")).unwrap();
        let roomy = literal_store(&db, DIMS, None);
        let small = literal_store(&db, DIMS, Some(4_000));
        let mut vector = literal_vectors(0x2545_f491_4f6c_dd1d, DIMS);
        let values: Vec<Value> = (0..300).map(|_| json!({"x": vector()})).collect();
        for (i, v) in values.iter().enumerate() {
            roomy.put(&["a"], &format!("k{i:03}"), v.clone()).unwrap();
        }
        let queries: Vec<String> = (0..4).map(|_| vector()).collect();
        let keys_and_scores = |store: &Store, q: &str| -> Vec<(String, Option<f64>)> {
            store
                .search(Search::new(&["a"]).query(q).limit(10))
                .unwrap()
                .into_iter()
                .map(|h| (h.item.key, h.score))
                .collect()
        };
        let want: Vec<_> = queries.iter().map(|q| keys_and_scores(&roomy, q)).collect();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut rounds = 0;
                    while !stop.load(Ordering::SeqCst) || rounds == 0 {
                        for (q, want) in queries.iter().zip(&want) {
                            assert_eq!(&keys_and_scores(&small, q), want);
                        }
                        rounds += 1;
                    }
                });
            }
            for n in 0..120 {
                if n % 2 == 0 {
                    roomy.put(&["other"], &format!("k{n}"), json!({"x": "1 0 0 0 0 0 0 0"})).unwrap();
                } else {
                    let i = (n * 37) % values.len();
                    roomy.put(&["a"], &format!("k{i:03}"), values[i].clone()).unwrap();
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
    }

    /// A budget too small for the namespace's in-memory copy keeps the first
    /// vector rows that fit (no values) and streams the rest: pages equal the
    /// in-memory ones with 16 dimensions and 600 items, for budgets that hold
    /// none, a part, and every row, after writes that move the copy, and for
    /// items another namespace sorts among (`a-b` lies between `a` and `a.b`).
    #[test]
    fn a_partial_copy_in_memory_gives_the_same_pages_as_the_default() {
        const DIMS: usize = 16;
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path().join("s.db")).unwrap();
        let roomy = literal_store(&db, DIMS, None);
        let budgets = [0, 2_000, 9_000, 20_000, 60_000];
        let stores: Vec<Store> = budgets.iter().map(|m| literal_store(&db, DIMS, Some(*m))).collect();
        let mut vector = literal_vectors(0x9e37_79b9_7f4a_7c15, DIMS);
        let put = |store: &Store, ns: &[&str], i: usize, x: String| {
            store
                .put(ns, &format!("k{i:04}"), json!({"x": x, "c": if i % 3 == 0 { "a" } else { "b" }}))
                .unwrap();
        };
        for i in 0..600 {
            let ns: &[&str] = match i % 7 {
                0 => &["a-b"],
                1 => &["a", "c"],
                _ => &["a", "b"],
            };
            put(&roomy, ns, i, vector());
        }
        let queries: Vec<String> = (0..6).map(|_| vector()).collect();
        let check = |round: &str| {
            for q in &queries {
                for (filter, limit, offset) in [(None, 10, 0), (Some(json!({"c": "a"})), 7, 3)] {
                    let mut search = Search::new(&["a"]).query(q.clone()).limit(limit).offset(offset);
                    if let Some(f) = &filter {
                        search = search.filter(f.clone());
                    }
                    let want = page(&roomy, search.clone());
                    assert_eq!(want.len(), limit, "{round}");
                    for (store, budget) in stores.iter().zip(budgets) {
                        assert_eq!(page(store, search.clone()), want, "{round}: budget {budget}");
                    }
                }
            }
        };
        check("first");
        // Writes move the copy: a new best item, one deleted, one re-put.
        put(&roomy, &["a", "b"], 9_999, queries[0].clone());
        roomy.delete(&["a", "b"], "k0002").unwrap();
        put(&roomy, &["a", "c"], 1, queries[1].clone());
        check("after writes");
    }
}

// ------------------------------------------------------ list_namespaces

fn names(s: &Store, list: ListNamespaces) -> Vec<String> {
    s.list_namespaces(list).unwrap().iter().map(|n| n.join(".")).collect()
}

/// A lone `list_namespaces` may be answered from recent answers (see
/// `src/store/listing.rs`); every commit moves them on, whoever makes it:
/// this store, another `Db` on the file, or a plain SQLite connection.
#[test]
fn repeated_list_namespaces_see_every_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let s = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
    let other = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
    let raw = Connection::open(&path).unwrap();
    let all = || ListNamespaces::new().limit(10);
    s.put(&["a"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a"]);
    assert_eq!(names(&s, all()), ["a"]);
    s.put(&["b"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a", "b"]);
    other.put(&["c"], "k", json!({})).unwrap();
    assert_eq!(names(&s, all()), ["a", "b", "c"]);
    raw.execute("DELETE FROM store WHERE prefix = 'a'", []).unwrap();
    assert_eq!(names(&s, all()), ["b", "c"]);
    assert_eq!(names(&s, all().offset(1)), ["c"]);
    assert_eq!(names(&s, all()), ["b", "c"]);
    other.delete(&["b"], "k").unwrap();
    assert_eq!(names(&s, all()), ["c"]);
    // The same answers as a batch, which reads the file every time.
    let batch = s.batch(vec![all().into(), all().offset(1).into()]).unwrap();
    assert!(matches!(&batch[0], OpResult::Namespaces(n) if n.len() == 1 && n[0] == ["c"]));
    assert!(matches!(&batch[1], OpResult::Namespaces(n) if n.is_empty()));
}

/// Expiry needs no write: a namespace leaves the answer once its last live
/// item expires, also when the answer is repeated, when the namespace was
/// skipped by the offset, and when it is one of several cut to one by
/// `max_depth` (the cut stays while one of them lives).
#[test]
fn repeated_list_namespaces_drop_what_expires_meanwhile() {
    let (_d, s, conn) = literal_store(&[]);
    for ns in ["a", "b", "c", "x.1", "x.2", "y.1", "y.2"] {
        s.put(&ns.split('.').collect::<Vec<_>>(), "k", json!({})).unwrap();
    }
    s.put(&["b"], "k2", json!({})).unwrap();
    // Expire soon: a, x.1, y.1 and one of b's two items; y.2 a bit later.
    let soon = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1.5 seconds')";
    let later = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+600 seconds')";
    let set = |prefix: &str, key: &str, at: &str| {
        conn.execute(
            &format!("UPDATE store SET expires_at = {at} WHERE prefix = ?1 AND key = ?2"),
            [prefix, key],
        )
        .unwrap();
    };
    for (p, k) in [("a", "k"), ("b", "k"), ("x.1", "k"), ("y.1", "k")] {
        set(p, k, soon);
    }
    set("y.2", "k", later);
    let all = || ListNamespaces::new().limit(20);
    let top = || ListNamespaces::new().max_depth(1).limit(20);
    let skip = || ListNamespaces::new().max_depth(1).offset(1).limit(2);
    for _ in 0..2 {
        assert_eq!(names(&s, all()), ["a", "b", "c", "x.1", "x.2", "y.1", "y.2"]);
        assert_eq!(names(&s, top()), ["a", "b", "c", "x", "y"]);
        assert_eq!(names(&s, skip()), ["b", "c"]);
    }
    std::thread::sleep(Duration::from_millis(2_000));
    for _ in 0..2 {
        assert_eq!(names(&s, all()), ["b", "c", "x.2", "y.2"]);
        assert_eq!(names(&s, top()), ["b", "c", "x", "y"]);
        assert_eq!(names(&s, skip()), ["c", "x"]);
    }
}

mod list_namespaces_model {
    use super::*;
    use proptest::prelude::*;

    /// Labels that sort around the `.` separator: `-` and ` ` sort below it.
    const LABELS: [&str; 5] = ["a", "a-b", "a b", "b", "ab"];

    /// One step of a store's life between listings.
    #[derive(Clone, Debug)]
    enum Act {
        /// Put item `key` in the namespace (indexes into LABELS).
        Put(Vec<usize>, u8),
        /// Delete it.
        Delete(Vec<usize>, u8),
        /// Expire it (its `expires_at` in the past, by another connection).
        Expire(Vec<usize>, u8),
        /// List twice with nothing in between (the second may be a recent
        /// answer): (prefix, max_depth, offset, limit).
        List(Option<Vec<usize>>, Option<usize>, usize, usize),
    }

    /// A query: (prefix, max_depth, offset, limit).
    type Query = (Option<&'static [usize]>, Option<usize>, usize, usize);

    /// A few queries, asked again and again between writes.
    const QUERIES: [Query; 4] =
        [(None, None, 0, 5), (Some(&[0]), None, 0, 5), (None, Some(1), 0, 5), (None, None, 1, 2)];

    fn act() -> impl Strategy<Value = Act> {
        let ns = || prop::collection::vec(0..LABELS.len(), 1..4);
        prop_oneof![
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Put(n, k)),
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Delete(n, k)),
            (ns(), 0..3u8).prop_map(|(n, k)| Act::Expire(n, k)),
            (
                prop::option::of(prop::collection::vec(0..LABELS.len(), 0..3)),
                prop::option::of(0..4usize),
                0..3usize,
                1..6usize
            )
                .prop_map(|(p, d, o, l)| Act::List(p, d, o, l)),
            (0..QUERIES.len()).prop_map(|q| {
                let (p, d, o, l) = QUERIES[q];
                Act::List(p.map(<[usize]>::to_vec), d, o, l)
            }),
            (0..QUERIES.len()).prop_map(|q| {
                let (p, d, o, l) = QUERIES[q];
                Act::List(p.map(<[usize]>::to_vec), d, o, l)
            }),
        ]
    }

    fn labels(n: &[usize]) -> Vec<String> {
        n.iter().map(|&i| LABELS[i].to_string()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever happens between listings (puts and deletes by the store,
        /// expiries written by another connection), a lone list_namespaces,
        /// asked twice, answers what a batch (which reads the file) answers,
        /// and what a model of the live items gives.
        #[test]
        fn repeated_lists_match_the_file_and_a_model(acts in prop::collection::vec(act(), 1..24)) {
            let (_d, s, conn) = literal_store(&[]);
            let mut live: std::collections::BTreeSet<(Vec<String>, u8)> = Default::default();
            for a in acts {
                match a {
                    Act::Put(n, k) => {
                        s.put(&labels(&n), &format!("k{k}"), json!({})).unwrap();
                        live.insert((labels(&n), k));
                    }
                    Act::Delete(n, k) => {
                        s.delete(&labels(&n), &format!("k{k}")).unwrap();
                        live.remove(&(labels(&n), k));
                    }
                    Act::Expire(n, k) => {
                        conn.execute(
                            "UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE prefix = ?1 AND key = ?2",
                            [labels(&n).join("."), format!("k{k}")],
                        )
                        .unwrap();
                        live.remove(&(labels(&n), k));
                    }
                    Act::List(prefix, depth, offset, limit) => {
                        let mut list = ListNamespaces::new().offset(offset).limit(limit);
                        if let Some(p) = &prefix {
                            list = list.prefix(&labels(p));
                        }
                        if let Some(d) = depth {
                            list = list.max_depth(d);
                        }
                        let prefix = prefix.map(|p| labels(&p));
                        let mut want: Vec<Vec<String>> = live
                            .iter()
                            .map(|(n, _)| n)
                            .filter(|n| prefix.as_ref().is_none_or(|p| n.starts_with(p)))
                            .map(|n| match depth { Some(d) => n.iter().take(d).cloned().collect(), None => n.clone() })
                            .collect();
                        want.sort();
                        want.dedup();
                        let want: Vec<Vec<String>> = want.into_iter().skip(offset).take(limit).collect();
                        let got = |s: &Store| -> Vec<Vec<String>> {
                            s.list_namespaces(list.clone()).unwrap().into_iter().map(|n| n.to_vec()).collect()
                        };
                        prop_assert_eq!(got(&s), want.clone());
                        prop_assert_eq!(got(&s), want.clone());
                        let batch = s.batch(vec![list.clone().into(), list.clone().into()]).unwrap();
                        for r in batch {
                            let OpResult::Namespaces(n) = r else { panic!("not namespaces") };
                            let n: Vec<Vec<String>> = n.into_iter().map(|n| n.to_vec()).collect();
                            prop_assert_eq!(n, want.clone());
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// list_namespaces returns the distinct namespaces (cut to max_depth)
        /// that match every condition, in tuple order, then offset and limit,
        /// whatever bytes the labels hold.
        #[test]
        fn list_namespaces_pages_follow_tuple_order(
            nss in prop::collection::btree_set(prop::collection::vec(0..LABELS.len(), 1..4), 1..12),
            prefix in prop::option::of(prop::collection::vec(0..LABELS.len(), 0..3)),
            suffix in prop::option::of(0..LABELS.len()),
            depth in prop::option::of(0..4usize),
            offset in 0..4usize,
            limit in 1..8usize,
        ) {
            let s = plain();
            let nss: Vec<Vec<String>> =
                nss.iter().map(|n| n.iter().map(|&i| LABELS[i].to_string()).collect()).collect();
            for ns in &nss {
                s.put(ns, "k", json!({})).unwrap();
            }
            let mut list = ListNamespaces::new().offset(offset).limit(limit);
            let prefix: Option<Vec<String>> = prefix.map(|p| p.iter().map(|&i| LABELS[i].to_string()).collect());
            if let Some(p) = &prefix {
                list = list.prefix(p);
            }
            if let Some(x) = suffix {
                list = list.suffix(&[LABELS[x]]);
            }
            if let Some(d) = depth {
                list = list.max_depth(d);
            }
            let mut want: Vec<Vec<String>> = nss
                .iter()
                .filter(|n| prefix.as_ref().is_none_or(|p| n.starts_with(p)))
                .filter(|n| suffix.is_none_or(|x| n.last().map(String::as_str) == Some(LABELS[x])))
                .map(|n| match depth { Some(d) => n.iter().take(d).cloned().collect(), None => n.clone() })
                .collect();
            want.sort();
            want.dedup();
            let want: Vec<Vec<String>> = want.into_iter().skip(offset).take(limit).collect();
            let got: Vec<Vec<String>> =
                s.list_namespaces(list).unwrap().into_iter().map(|n| n.to_vec()).collect();
            prop_assert_eq!(got, want);
        }
    }
}

/// A batch moves the generation of each prefix it writes once, itself (not
/// twice per item through the triggers), and leaves no trace of how; another
/// writer's change still moves it through the triggers, and search, which
/// reloads a prefix when its generation moves, sees both.
#[test]
fn a_batch_moves_each_prefix_generation_once_and_other_writers_still_move_it() {
    use rusqlite::OptionalExtension;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = Db::open(&path).unwrap();
    let store = db.store(StoreConfig::default()).unwrap();
    let raw = Connection::open(&path).unwrap();
    let gen = |p: &str| -> Option<i64> {
        raw.query_row("SELECT gen FROM agentstate_store_gen WHERE prefix = ?1", [p], |r| r.get(0))
            .optional()
            .unwrap()
    };
    let ops = (0..50)
        .flat_map(|i| {
            [
                Op::Put(Put::new(&["a"], format!("k{i}"), json!({"i": i}))),
                Op::Put(Put::new(&["b", "c"], format!("k{i}"), json!({"i": i}))),
            ]
        })
        .collect();
    store.batch(ops).unwrap();
    assert_eq!((gen("a"), gen("b.c")), (Some(1), Some(1)));
    let quiet: i64 = raw.query_row("SELECT count(*) FROM agentstate_store_quiet", [], |r| r.get(0)).unwrap();
    assert_eq!(quiet, 0);
    assert_eq!(store.search(Search::new(&["a"]).limit(100)).unwrap().len(), 50);
    store.put(&["a"], "k0", json!({"i": -1})).unwrap();
    assert_eq!(gen("a"), Some(2));
    // Another writer, through SQLite alone.
    raw.execute("DELETE FROM store WHERE prefix = 'a' AND key = 'k1'", []).unwrap();
    assert!(gen("a") > Some(2));
    raw.execute("UPDATE store SET value = '{\"i\": 99}' WHERE prefix = 'b.c' AND key = 'k2'", []).unwrap();
    assert!(gen("b.c") > Some(1));
    assert_eq!(store.search(Search::new(&["a"]).limit(100)).unwrap().len(), 49);
    let hit = store.search(Search::new(&["b"]).filter(json!({"i": 99})).limit(10)).unwrap();
    assert_eq!(hit.len(), 1);
}
