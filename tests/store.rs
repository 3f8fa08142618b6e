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

mod store_support;
use store_support::*;

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

/// The search cache keeps each value as its JSON text and parses it when a
/// page or a filter needs it: values come back whole, filters see them, and
/// a value damaged behind the store (raw SQL) is `Error::Corrupt` for every
/// search of its namespace, never an item dropped or a panic.
#[test]
fn search_returns_whole_values_and_a_damaged_value_is_corrupt() {
    let (_dir, store, raw) = literal_store(&["v"]);
    let deep = json!({"v": "1 0 0", "n": {"x": [1, 2.5, "s", null, true]}, "t": "é \"q\""});
    store.put(&["n"], "k1", deep.clone()).unwrap();
    store.put(&["n"], "k2", json!({"v": "0 1 0", "n": {"x": []}})).unwrap();
    let got = store.search(Search::new(&["n"]).query("1 0 0")).unwrap();
    assert_eq!(keys(&got), vec!["k1", "k2"]);
    assert_eq!(got[0].item.value, deep);
    let got =
        store.search(Search::new(&["n"]).filter(json!({"n.x": {"$eq": [1, 2.5, "s", null, true]}}))).unwrap();
    assert_eq!(keys(&got), vec!["k1"]);
    // Damaged behind the store: cut short, and JSON that other writers
    // produce but that does not read back as a value (a number beyond f64,
    // a lone surrogate from Python's json.dumps, nesting past the limit).
    let deep_128 = format!("{{\"v\": \"0 1 0\", \"d\": {}{}}}", "[".repeat(128), "]".repeat(128));
    for bad in [
        r#"{"v": "0 1 0", "#.to_string(),
        r#"{"v": "0 1 0", "t": 1, "big": 1e400}"#.to_string(),
        format!(r#"{{"v": "0 1 0", "t": 1, "big": 1{}}}"#, "0".repeat(400)),
        r#"{"v": "0 1 0", "t": 1, "s": "\ud800"}"#.to_string(),
        deep_128,
    ] {
        raw.execute("UPDATE store SET value = ?1 WHERE key = 'k2'", [&bad]).unwrap();
        for search in [
            Search::new(&["n"]).query("1 0 0").limit(1),
            Search::new(&["n"]),
            Search::new(&["n"]).filter(json!({"t": 1})),
        ] {
            match store.search(search) {
                Err(Error::Corrupt { message, .. }) => assert!(message.contains("n/k2"), "{message}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
    // Still readable item by item.
    assert_eq!(store.get(&["n"], "k1").unwrap().unwrap().value, deep);
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
