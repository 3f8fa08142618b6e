//! The Store's contract through the public API. Test names cite the case of
//! section 14 of `shared/reference/langgraph-persistence.md` (`ref14_n`) or
//! the DESIGN.md decision (`decision_n`) they pin.

use std::time::Duration;

use agentstate::store::{
    Embedder, GetOp, Index, IndexConfig, ListNamespacesOptions, MatchCondition, Op, OpResult, PutOp,
    PutOptions, SearchOp, SearchOptions, Ttl, TtlConfig,
};
use agentstate::{Db, Error, Store, StoreConfig};
use rusqlite::Connection;
use serde_json::{json, Value};

/// Embeds texts like `"1 0 0.5"` as the vector they spell; other texts as a
/// zero vector. Lets tests choose exact vectors.
struct Literal(usize);

impl Embedder for Literal {
    fn name(&self) -> &str {
        "literal"
    }
    fn dims(&self) -> usize {
        self.0
    }
    fn embed_documents(&self, texts: &[String]) -> agentstate::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.parse(t)).collect())
    }
    fn embed_query(&self, text: &str) -> agentstate::Result<Vec<f32>> {
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
        .store(StoreConfig::default().with_index(IndexConfig::new(Literal(3)).fields(fields.to_vec())))
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
fn ref14_42_decision_13_namespace_rules_with_langgraph_messages() {
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
    assert!(matches!(s.search(&["a.b"], SearchOptions::default()), Err(Error::InvalidNamespace(_))));
    let bad = ListNamespacesOptions { prefix: vec!["a.b".into()], ..Default::default() };
    assert!(matches!(s.list_namespaces(bad), Err(Error::InvalidNamespace(_))));
    // Nothing was written by the failed calls.
    assert!(s.search(&[], SearchOptions::default()).unwrap().is_empty());
}

fn put_all(s: &Store, nss: &[&[&str]]) {
    for ns in nss {
        s.put(ns, "k", json!({"ns": ns})).unwrap();
    }
}

#[test]
fn ref14_49_list_namespaces_prefix_suffix_depth_wildcard() {
    let s = plain();
    put_all(
        &s,
        &[&["a", "b", "c"], &["a", "b", "d", "e"], &["a", "b", "d", "i"], &["a", "b", "f"], &["a", "c", "f"]],
    );
    let got = s
        .list_namespaces(ListNamespacesOptions {
            prefix: vec!["a".into(), "b".into()],
            max_depth: Some(3),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(got, ns_list(&[&["a", "b", "c"], &["a", "b", "d"], &["a", "b", "f"]]));
    let got =
        s.list_namespaces(ListNamespacesOptions { suffix: vec!["f".into()], ..Default::default() }).unwrap();
    assert_eq!(got, ns_list(&[&["a", "b", "f"], &["a", "c", "f"]]));
    let got = s
        .list_namespaces(ListNamespacesOptions { prefix: vec!["a".into(), "*".into()], ..Default::default() })
        .unwrap();
    assert_eq!(got.len(), 5);
}

#[test]
fn ref14_50_label_aligned_suffix_and_wildcard() {
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
    let got = s
        .list_namespaces(ListNamespacesOptions { suffix: vec!["alice".into()], ..Default::default() })
        .unwrap();
    assert_eq!(got, ns_list(&[&["uid", "a", "b", "alice"], &["uid", "users", "alice"]]));
    let got = s
        .list_namespaces(ListNamespacesOptions {
            prefix: vec!["uid".into(), "*".into(), "alice".into()],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(got, ns_list(&[&["uid", "users", "alice"]]));
}

#[test]
fn ref14_51_metacharacter_labels_are_literal() {
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
        let got = s
            .list_namespaces(ListNamespacesOptions { prefix: vec![label.into()], ..Default::default() })
            .unwrap();
        assert_eq!(got, ns_list(&[&[label], &[label, "child"]]), "{label}");
        let found = s.search(&[label], SearchOptions::default()).unwrap();
        assert_eq!(found.len(), 2, "{label}");
        assert!(found.iter().all(|i| i.item.namespace[0] == label));
    }
}

#[test]
fn ref14_52_search_prefix_is_label_aligned_and_case_sensitive() {
    let s = plain();
    put_all(&s, &[&["foo"], &["foo", "child"], &["foobar"], &["foo2"]]);
    let nss = |p: &[&str]| {
        let mut v: Vec<Vec<String>> =
            s.search(p, SearchOptions::default()).unwrap().into_iter().map(|i| i.item.namespace).collect();
        v.sort();
        v
    };
    assert_eq!(nss(&["foo"]), ns_list(&[&["foo"], &["foo", "child"]]));
    assert!(nss(&["fo"]).is_empty());
    assert_eq!(nss(&[]).len(), 4);
    assert!(nss(&["Foo"]).is_empty());
}

/// Decision 13: results in tuple order (Python's SqliteStore sorts the dotted
/// text instead and would give `("A",),("a*",),("a-c",),("a","b"),...`).
#[test]
fn ref14_53_decision_13_tuple_order() {
    let s = plain();
    put_all(&s, &[&["b"], &["a_"], &["a", "b"], &["a-c"], &["a*"], &["A"]]);
    let got = s.list_namespaces(ListNamespacesOptions::default()).unwrap();
    assert_eq!(got, ns_list(&[&["A"], &["a", "b"], &["a*"], &["a-c"], &["a_"], &["b"]]));
}

// ---------------------------------------------------------------- batch

/// Decision 15: reads see the state before the batch; puts to one key
/// collapse to the last; results in op order.
#[test]
fn ref14_54_decision_15_batch_reads_before_writes() {
    let s = plain();
    s.put(&["n"], "k", json!({"v": 0})).unwrap();
    let ns = vec!["n".to_string()];
    let put = |v: i64| {
        Op::Put(PutOp {
            namespace: ns.clone(),
            key: "k".into(),
            value: Some(json!({"v": v})),
            index: Index::Default,
            ttl: None,
        })
    };
    let out = s
        .batch(vec![
            put(1),
            Op::Get(GetOp { namespace: ns.clone(), key: "k".into(), refresh_ttl: None }),
            put(2),
            Op::Search(SearchOp { namespace_prefix: ns.clone(), ..Default::default() }),
        ])
        .unwrap();
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
fn decision_15_batch_is_one_transaction() {
    let s = plain();
    let ns = vec!["n".to_string()];
    let good = Op::Put(PutOp {
        namespace: ns.clone(),
        key: "a".into(),
        value: Some(json!({})),
        index: Index::Default,
        ttl: None,
    });
    let bad = Op::Put(PutOp {
        namespace: ns,
        key: "b".into(),
        value: Some(json!([1])),
        index: Index::Default,
        ttl: None,
    });
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
    s.search(&["f"], SearchOptions::default().filter(f)).unwrap().len()
}

/// Decision 8: JSON semantics (`1 == 1.0`; `true` equals only `true`;
/// structural `$eq` on lists; null matches missing).
#[test]
fn ref14_55_decision_8_filter_semantics() {
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

/// Decision 8: a nested object without `$` keys is a partial match (like
/// InMemoryStore; SqliteStore raises).
#[test]
fn ref14_56_decision_8_nested_object_is_partial_match() {
    let s = filter_doc_store();
    assert_eq!(count(&s, json!({"d": {"y": 2}})), 1);
    assert_eq!(count(&s, json!({"d": {"y": 3}})), 0);
}

#[test]
fn ref14_57_decision_8_ne_missing_and_errors() {
    let s = filter_doc_store();
    assert_eq!(count(&s, json!({"missing": {"$ne": 1}})), 1);
    assert_eq!(count(&s, json!({"missing": {"$gt": 1}})), 0);
    let err = s.search(&["f"], SearchOptions::default().filter(json!({"x": {"$foo": 1}}))).unwrap_err();
    assert!(matches!(err, Error::InvalidFilter { .. }));
    assert!(err.to_string().contains("$foo"));
    let err = s.search(&["f"], SearchOptions::default().filter(json!({"bad key": 1}))).unwrap_err();
    assert!(err.to_string().starts_with("Invalid filter key: 'bad key'."));
}

/// Decision 9: `$in $nin $exists $and $or $not`.
#[test]
fn decision_9_extended_operators() {
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

/// Decision 11: an update keeps `created_at` and moves `updated_at`.
#[test]
fn ref14_59_decision_11_upsert_keeps_created_at() {
    let (_d, s, conn) = literal_store(&["$"]);
    s.put(&["n"], "k", json!({"v": 1})).unwrap();
    conn.execute(
        "UPDATE store SET created_at = '2000-01-01 00:00:00', updated_at = '2000-01-01 00:00:00'",
        [],
    )
    .unwrap();
    s.put(&["n"], "k", json!({"v": 2})).unwrap();
    let item = s.get(&["n"], "k").unwrap().unwrap();
    assert_eq!(item.created_at, "2000-01-01 00:00:00");
    assert_ne!(item.updated_at, "2000-01-01 00:00:00");
}

fn ttl_store(refresh_on_read: bool) -> (tempfile::TempDir, Store, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let ttl = TtlConfig { refresh_on_read, default_ttl: Some(10.0), sweep_interval_minutes: None };
    let store = Db::open(&path).unwrap().store(StoreConfig::default().with_ttl(ttl)).unwrap();
    (dir, store, Connection::open(&path).unwrap())
}

fn expiry(conn: &Connection) -> (Option<String>, Option<f64>) {
    conn.query_row("SELECT expires_at, ttl_minutes FROM store", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
}

/// Decision 14: TTL in minutes from `default_ttl`; refresh on read by default
/// (Python's SqliteStore needs `refresh_on_read` spelled out); per-call flag
/// overrides; `Ttl::Never` clears it.
#[test]
fn ref14_60_decision_14_ttl_and_refresh() {
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
    s.batch(vec![Op::Get(GetOp { namespace: vec!["n".into()], key: "k".into(), refresh_ttl: Some(false) })])
        .unwrap();
    assert_eq!(expiry(&conn).0.unwrap(), before, "per-call flag off: no refresh");
    s.get(&["n"], "k").unwrap().unwrap();
    assert!(expiry(&conn).0.unwrap() > before, "default: refresh on read");
    conn.execute("UPDATE store SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 minutes')", [])
        .unwrap();
    let before = expiry(&conn).0.unwrap();
    s.search(&["n"], SearchOptions::default()).unwrap();
    assert!(expiry(&conn).0.unwrap() > before, "search refreshes too");
    s.put_with(&["n"], "k", json!({}), PutOptions { ttl: Ttl::Never, ..Default::default() }).unwrap();
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

/// Decision 14: an expired item is never returned, even before the sweep;
/// the sweep deletes it and its vectors (cascade), and keeps items without
/// expiry.
#[test]
fn ref14_61_decision_14_expired_never_returned_and_swept_with_vectors() {
    let (_d, s, conn) = literal_store(&["v"]);
    s.put_with(
        &["n"],
        "old",
        json!({"v": "1 0 0"}),
        PutOptions { ttl: Ttl::Minutes(5.0), ..Default::default() },
    )
    .unwrap();
    s.put(&["n"], "keep", json!({"v": "0 1 0"})).unwrap();
    conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE key = 'old'", []).unwrap();
    assert!(s.get(&["n"], "old").unwrap().is_none());
    assert_eq!(keys(&s.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap()), vec!["keep"]);
    assert_eq!(keys(&s.search(&["n"], SearchOptions::default()).unwrap()), vec!["keep"]);
    conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE key = 'keep'", []).unwrap();
    assert!(s.list_namespaces(ListNamespacesOptions::default()).unwrap().is_empty());
    conn.execute("UPDATE store SET expires_at = NULL WHERE key = 'keep'", []).unwrap();
    assert_eq!(s.sweep_expired().unwrap(), 1);
    let vectors: i64 =
        conn.query_row("SELECT COUNT(*) FROM store_vectors WHERE key = 'old'", [], |r| r.get(0)).unwrap();
    assert_eq!(vectors, 0);
    assert!(s.get(&["n"], "keep").unwrap().is_some());
    assert_eq!(s.sweep_expired().unwrap(), 0);
}

#[test]
fn decision_14_background_sweeper_runs_and_stops_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sw.db");
    let db = Db::open(&path).unwrap();
    let ttl = TtlConfig { sweep_interval_minutes: Some(0.001), ..Default::default() }; // 60 ms
    let s = db.store(StoreConfig::default().with_ttl(ttl)).unwrap();
    s.put_with(&["n"], "k", json!({}), PutOptions { ttl: Ttl::Minutes(1.0), ..Default::default() }).unwrap();
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

/// Decision 12: exact cosine, max-pooled per item.
#[test]
fn ref14_62_decision_12_cosine_max_pooled() {
    let (_d, s, _c) = literal_store(&["a", "b"]);
    s.put(&["n"], "same", json!({"a": "1 0 0"})).unwrap();
    s.put(&["n"], "ortho", json!({"a": "0 1 0"})).unwrap();
    s.put(&["n"], "zero", json!({"a": "0 0 0"})).unwrap();
    s.put(&["n"], "two", json!({"a": "0 1 0", "b": "1 1 0"})).unwrap();
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap();
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

/// Decision 12: items with no vector follow the scored ones with score None;
/// offset counts over the whole sequence.
#[test]
fn ref14_63_decision_12_unscored_items_follow() {
    let (_d, s, _c) = literal_store(&["v"]);
    s.put(&["n"], "a", json!({"v": "1 0 0"})).unwrap();
    s.put_with(
        &["n"],
        "plain",
        json!({"v": "1 0 0"}),
        PutOptions { index: Index::Off, ..Default::default() },
    )
    .unwrap();
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap();
    assert_eq!(keys(&got), vec!["a", "plain"]);
    assert_eq!(got[1].score, None);
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0").limit(1)).unwrap();
    assert_eq!(keys(&got), vec!["a"]);
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0").offset(1)).unwrap();
    assert_eq!(keys(&got), vec!["plain"]);
}

/// Decision 11: the configured `fields` are honoured (Python's SqliteStore
/// embeds the whole document instead), and a per-put `index` overrides them.
#[test]
fn ref14_64_decision_11_fields_honoured_and_per_put_override() {
    let (_d, s, conn) = literal_store(&["text"]);
    s.put(&["n"], "k", json!({"text": "1 0 0", "other": "0 1 0"})).unwrap();
    let names = |key: &str| vector_names(&conn, key);
    assert_eq!(names("k"), vec!["text"]);
    s.put_with(
        &["n"],
        "k",
        json!({"text": "1 0 0", "other": "0 1 0"}),
        PutOptions { index: Index::Fields(vec!["other".into()]), ..Default::default() },
    )
    .unwrap();
    assert_eq!(names("k"), vec!["other"], "re-indexing replaces all old vectors");
}

/// Case 48: vector field names; per-put `["$"]` embeds nothing (LangGraph's
/// quirk, kept).
#[test]
fn ref14_48_vector_field_names() {
    let (_d, s, conn) = literal_store(&["$"]);
    let names = |key: &str| vector_names(&conn, key);
    let idx = |v: &[&str]| PutOptions {
        index: Index::Fields(v.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    };
    s.put_with(&["n"], "two", json!({"text": "abcd", "arr": ["a", "bb"]}), idx(&["text", "arr[*]"])).unwrap();
    assert_eq!(names("two"), vec!["arr[*].0", "arr[*].1", "text"]);
    s.put_with(&["n"], "one", json!({"text": "abcd", "arr": ["a"]}), idx(&["text", "arr[*]"])).unwrap();
    assert_eq!(names("one"), vec!["arr[*]", "text"]);
    s.put_with(&["n"], "dollar", json!({"text": "abcd"}), idx(&["$"])).unwrap();
    assert!(names("dollar").is_empty());
    s.put(&["n"], "whole", json!({"text": "abcd"})).unwrap();
    assert_eq!(names("whole"), vec!["$"]);
}

/// Decision 11: deleting an item removes its vectors (foreign keys on), so a
/// re-put with `index=false` is not found through stale vectors.
#[test]
fn ref14_65_decision_11_no_stale_vectors() {
    let (_d, s, conn) = literal_store(&["v"]);
    s.put(&["n"], "k", json!({"v": "1 0 0"})).unwrap();
    s.delete(&["n"], "k").unwrap();
    let n: i64 = conn.query_row("SELECT COUNT(*) FROM store_vectors", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 0);
    s.put_with(&["n"], "k", json!({"v": "1 0 0"}), PutOptions { index: Index::Off, ..Default::default() })
        .unwrap();
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].score, None, "found as an unscored item, not through a stale vector");
}

/// Decision 12: offset and limit count distinct items after pooling (Python
/// returns [] here).
#[test]
fn ref14_66_decision_12_offset_after_pooling() {
    let (_d, s, _c) = literal_store(&["a", "b"]);
    s.put(&["n"], "top", json!({"a": "1 0 0", "b": "1 0.1 0"})).unwrap();
    s.put(&["n"], "second", json!({"a": "1 1 0"})).unwrap();
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0").limit(1).offset(1)).unwrap();
    assert_eq!(keys(&got), vec!["second"]);
}

#[test]
fn ref14_67_query_without_index_is_a_plain_search() {
    let s = plain();
    s.put(&["n"], "a", json!({})).unwrap();
    s.put(&["n"], "b", json!({})).unwrap();
    let got = s.search(&["n"], SearchOptions::default().query("anything")).unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|i| i.score.is_none()));
}

#[test]
fn ref14_68_limits_and_offsets() {
    let s = plain();
    s.put(&["n"], "a", json!({})).unwrap();
    assert!(s.search(&["n"], SearchOptions::default().limit(0)).unwrap().is_empty());
    assert!(s.list_namespaces(ListNamespacesOptions { limit: 0, ..Default::default() }).unwrap().is_empty());
    assert!(s.search(&["n"], SearchOptions::default().offset(10)).unwrap().is_empty());
}

/// Decision 12: ties are broken deterministically (namespace, then key).
#[test]
fn decision_12_ties_are_deterministic() {
    let (_d, s, _c) = literal_store(&["v"]);
    for k in ["c", "a", "b"] {
        s.put(&["n"], k, json!({"v": "1 0 0"})).unwrap();
    }
    let got = s.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap();
    assert_eq!(keys(&got), vec!["a", "b", "c"]);
}

/// Decision 16: the embedder that made the vectors is recorded; another one
/// is refused until a reindex.
#[test]
fn decision_16_embedder_identity_and_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.db");
    let db = Db::open(&path).unwrap();
    let s = db.store(StoreConfig::default().with_index(IndexConfig::new(Literal(3)).fields(["v"]))).unwrap();
    s.put(&["n"], "k", json!({"v": "1 0 0", "text": "running shoes"})).unwrap();
    drop(s);
    let other = StoreConfig::default().with_index(IndexConfig::hashed(16).unwrap().fields(["text"]));
    match db.store(other.clone()) {
        Err(Error::EmbedderMismatch { stored, configured }) => {
            assert_eq!(stored, "literal/3");
            assert_eq!(configured, "agentstate-hash-v1/16");
        }
        other => panic!("{other:?}"),
    }
    let s = db.reindex_store(other.clone()).unwrap();
    let got = s.search(&[], SearchOptions::default().query("shoes for running")).unwrap();
    assert!(got[0].score.unwrap() > 0.1);
    drop(s);
    db.store(other).unwrap();
}

#[test]
fn decision_16_dimension_checks() {
    let db = Db::open_in_memory().unwrap();
    let mut cfg = IndexConfig::new(Literal(3));
    cfg.dims = 4;
    assert!(matches!(db.store(StoreConfig::default().with_index(cfg)), Err(Error::DimensionMismatch { .. })));
}

#[test]
fn values_must_be_objects_and_ttls_finite() {
    let s = plain();
    assert!(matches!(s.put(&["n"], "k", json!([1])), Err(Error::InvalidArgument(_))));
    let bad = PutOptions { ttl: Ttl::Minutes(f64::NAN), ..Default::default() };
    assert!(matches!(s.put_with(&["n"], "k", json!({}), bad), Err(Error::InvalidArgument(_))));
    let bad = PutOptions { ttl: Ttl::Minutes(-1.0), ..Default::default() };
    assert!(matches!(s.put_with(&["n"], "k", json!({}), bad), Err(Error::InvalidArgument(_))));
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
    let cfg = || StoreConfig::default().with_index(IndexConfig::new(Literal(3)).fields(["v"]));
    let a = Db::open(&path).unwrap().store(cfg()).unwrap();
    let b = Db::open(&path).unwrap().store(cfg()).unwrap();
    a.put(&["n"], "k1", json!({"v": "1 0 0"})).unwrap();
    assert_eq!(keys(&b.search(&["n"], SearchOptions::default().query("1 0 0")).unwrap()), vec!["k1"]);
    a.put(&["n"], "k2", json!({"v": "0 1 0"})).unwrap();
    a.put(&["n"], "k1", json!({"v": "0 0 1"})).unwrap();
    let got = b.search(&["n"], SearchOptions::default().query("0 1 0")).unwrap();
    assert_eq!(keys(&got), vec!["k2", "k1"]);
    assert_eq!(got[1].item.value, json!({"v": "0 0 1"}));
    let raw = Connection::open(&path).unwrap();
    raw.execute("DELETE FROM store WHERE key = 'k2'", []).unwrap();
    raw.execute("UPDATE store SET value = '{\"v\": \"0 0 1\", \"w\": 1}' WHERE key = 'k1'", []).unwrap();
    let got = b.search(&["n"], SearchOptions::default().filter(json!({"w": 1}))).unwrap();
    assert_eq!(keys(&got), vec!["k1"]);
    assert_eq!(b.search(&["n"], SearchOptions::default()).unwrap().len(), 1);
}
