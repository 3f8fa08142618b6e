//! The filter language through the public API: hostile and deep input is a
//! typed error, never a crash; and filters with non-ASCII keys work in a
//! Store search (evaluated in Rust) and in a checkpoint listing (compiled to
//! SQL). The property tests, which also compare the SQL compilation with the
//! evaluator, are unit tests in `src/filter/tests/`.

use agentstate::store::Search;
use agentstate::{Checkpoint, CheckpointConfig, Db, Error, Filter, ListQuery, Metadata, StoreConfig};
use serde_json::{json, Map, Value};

fn parse(v: &Value) -> Filter {
    Filter::parse(v).unwrap_or_else(|e| panic!("{v} should parse: {e}"))
}

/// Builds `depth` levels of `wrap` around `leaf` without recursion.
fn deep(depth: usize, leaf: Value, wrap: impl Fn(Value) -> Value) -> Value {
    (0..depth).fold(leaf, |v, _| wrap(v))
}

/// Drops a value iteratively (the default drop recurses).
fn drop_deep(v: Value) {
    let mut stack = vec![v];
    while let Some(mut v) = stack.pop() {
        match &mut v {
            Value::Array(a) => stack.append(a),
            Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

fn obj(k: &str, v: Value) -> Value {
    Value::Object(Map::from_iter([(k.to_owned(), v)]))
}

#[test]
fn filter_deep_nesting_is_an_error_not_a_crash() {
    let cases = [
        deep(100_000, json!(1), |v| obj("a", v)),
        deep(100_000, json!({"a": 1}), |v| obj("$not", v)),
        deep(100_000, json!({"a": 1}), |v| obj("$or", Value::Array(vec![v]))),
        obj("x", obj("$in", deep(100_000, Value::Null, |v| Value::Array(vec![v])))),
        obj("x", deep(100_000, json!(1), |v| obj("$not", v))),
    ];
    for f in cases {
        match Filter::parse(&f) {
            Err(Error::InvalidFilter { reason, .. }) => assert!(reason.contains("nested"), "{reason}"),
            other => panic!("expected a nesting error, got {other:?}"),
        }
        drop_deep(f);
    }
    // 32 levels are fine.
    let f = deep(31, json!({"a": 1}), |v| obj("$not", v));
    assert!(Filter::parse(&f).is_ok());
    let f = deep(32, json!({"a": 1}), |v| obj("$not", v));
    assert!(Filter::parse(&f).is_err());
}

#[test]
fn filter_deep_documents_are_fine() {
    let d = obj("a", deep(100_000, json!(1), |v| obj("a", v)));
    let path = vec!["a"; 1_000].join(".");
    assert!(parse(&json!({ &path: {"$exists": true} })).matches(&d));
    assert!(parse(&json!({"a": {"$ne": [1]}})).matches(&d));
    assert!(!parse(&json!({"a": {"a": {"a": 2}}})).matches(&d));
    drop_deep(d);
}

#[test]
fn filter_hostile_strings_are_values_not_syntax() {
    let evil = "'; DROP TABLE x;--";
    let d = json!({"k": evil, "q": "\") OR 1=1 --"});
    assert!(parse(&json!({"k": evil})).matches(&d));
    assert!(parse(&json!({"q": {"$in": ["\") OR 1=1 --"]}})).matches(&d));
    assert!(!parse(&json!({"k": "x"})).matches(&d));
    for k in [evil, "a\"b", "a'b", "k) OR (1=1", "k[0]"] {
        match Filter::parse(&json!({ k: 1 })) {
            Err(Error::InvalidFilter { key, reason }) => {
                assert_eq!(key, k);
                assert!(reason.starts_with(&format!("Invalid filter key: '{k}'.")), "{reason}");
            }
            other => panic!("{k}: expected InvalidFilter, got {other:?}"),
        }
    }
}

#[test]
fn filter_dollar_keys_are_operators() {
    match Filter::parse(&json!({"$.k": 1})) {
        Err(e) => assert_eq!(e.to_string(), "Unsupported operator: $.k"),
        Ok(f) => panic!("parsed {f:?}"),
    }
}

#[test]
fn filter_huge_numbers() {
    let d = json!({"u": u64::MAX, "i": i64::MIN, "f": f64::MAX, "t": 5e-324});
    assert!(parse(&json!({"u": u64::MAX})).matches(&d));
    assert!(parse(&json!({"u": {"$gt": i64::MAX}})).matches(&d));
    assert!(parse(&json!({"i": {"$lt": -9_223_372_036_854_775_807i64}})).matches(&d));
    assert!(parse(&json!({"f": {"$gt": 1e308}})).matches(&d));
    assert!(parse(&json!({"t": {"$gt": 0}})).matches(&d));
    assert!(!parse(&json!({"t": 0})).matches(&d));
}

#[test]
fn filter_non_ascii_keys_in_store_search() {
    let store = Db::open_in_memory().unwrap().store(StoreConfig::default()).unwrap();
    store.put(&["docs"], "ru", json!({"ключ": 1, "автор": {"имя": "Анна"}})).unwrap();
    store.put(&["docs"], "jp", json!({"ключ": 2, "名前": "山田"})).unwrap();
    let keys = |f: Value| -> Vec<String> {
        let mut got: Vec<String> =
            store.search(Search::new(&["docs"]).filter(f)).unwrap().into_iter().map(|i| i.item.key).collect();
        got.sort();
        got
    };
    assert_eq!(keys(json!({"ключ": 1})), ["ru"]);
    assert_eq!(keys(json!({"ключ": {"$gte": 1}})), ["jp", "ru"]);
    assert_eq!(keys(json!({"автор.имя": "Анна"})), ["ru"]);
    assert_eq!(keys(json!({"名前": {"$exists": true}})), ["jp"]);
    // Still rejected: spaces and punctuation.
    assert!(matches!(
        store.search(Search::new(&["docs"]).filter(json!({"ключ значение": 1}))),
        Err(Error::InvalidFilter { .. })
    ));
}

#[test]
fn filter_non_ascii_keys_in_checkpoint_list() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    for (id, n) in [("1ef00000-0000-6000-8000-000000000001", 1), ("1ef00000-0000-6000-8000-000000000002", 2)]
    {
        let meta = Metadata::new().with("шаг", n).with("源", json!({"名前": format!("n{n}")}));
        saver
            .put(&CheckpointConfig::thread("t"), &Checkpoint::with_id(id), &meta, &Default::default())
            .unwrap();
    }
    let count = |f: Value| saver.list(&ListQuery::thread("t").filter(f)).unwrap().len();
    assert_eq!(count(json!({"шаг": 1})), 1);
    assert_eq!(count(json!({"шаг": {"$in": [1, 2]}})), 2);
    assert_eq!(count(json!({"源.名前": "n2"})), 1);
    assert_eq!(count(json!({"源": {"名前": {"$ne": "n2"}}})), 1);
    assert_eq!(count(json!({"шаг": 3})), 0);
}
