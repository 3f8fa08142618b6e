//! Unit tests of namespaces: validation messages, prefix encoding, matching
//! and tuple order, checked against a model of `list_namespaces`.

use serde_json::json;

use super::*;
use crate::python::{python_str_repr, python_tuple_repr};
use std::collections::BTreeSet;

fn msg(r: Result<impl fmt::Debug>) -> String {
    match r {
        Err(Error::InvalidNamespace(m)) => m,
        other => panic!("expected InvalidNamespace, got {other:?}"),
    }
}

fn ns(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

#[test]
fn invalid_namespaces_get_langgraphs_messages() {
    assert_eq!(msg(Namespace::new(Vec::<String>::new())), "Namespace cannot be empty.");
    assert_eq!(
        msg(Namespace::new(["a.b"])),
        "Invalid namespace label 'a.b' found in ('a.b',). Namespace labels cannot contain periods ('.')."
    );
    assert_eq!(msg(Namespace::new([""])), "Namespace labels cannot be empty strings. Got  in ('',)");
    assert_eq!(
        msg(Namespace::new(["langgraph", "x"])),
        "Root label for namespace cannot be \"langgraph\". Got: ('langgraph', 'x')"
    );
    assert_eq!(
        msg(validate_json_namespace(&json!([1]))),
        "Invalid namespace label '1' found in (1,). Namespace labels must be strings, but got int."
    );
    assert_eq!(
        msg(Namespace::new(["a", "b\0c"])),
        "Invalid namespace label 'b\0c' found in ('a', 'b\\x00c'). Namespace labels cannot contain NUL bytes ('\\x00')."
    );
}

#[test]
fn checks_run_in_langgraphs_order() {
    // Labels are checked one by one: the first bad label wins, and within
    // a label the period check comes before the NUL check.
    assert!(msg(Namespace::new(["", "a.b"])).starts_with("Namespace labels cannot be empty"));
    assert!(msg(Namespace::new(["a.\0"])).ends_with("cannot contain periods ('.')."));
    // The root check comes after every label check.
    assert!(msg(Namespace::new(["langgraph", ""])).starts_with("Namespace labels cannot be empty"));
    // Label-only checks accept an empty tuple and a `langgraph` root.
    validate_labels::<&str>(&[]).unwrap();
    validate_labels(&["langgraph", "x"]).unwrap();
    assert!(validate_labels(&["a", "b.c"]).is_err());
}

#[test]
fn json_namespaces() {
    let cases = [
        (json!([1.5]), "Invalid namespace label '1.5' found in (1.5,). Namespace labels must be strings, but got float."),
        (json!(["a", true]), "Invalid namespace label 'True' found in ('a', True). Namespace labels must be strings, but got bool."),
        (json!([null]), "Invalid namespace label 'None' found in (None,). Namespace labels must be strings, but got NoneType."),
        (json!(["x", [1, "y"]]), "Invalid namespace label '[1, 'y']' found in ('x', [1, 'y']). Namespace labels must be strings, but got list."),
        (json!([{"k": 1e16}]), "Invalid namespace label '{'k': 1e+16}' found in ({'k': 1e+16},). Namespace labels must be strings, but got dict."),
        (json!(["a.b", 1]), "Invalid namespace label 'a.b' found in ('a.b', 1). Namespace labels cannot contain periods ('.')."),
        (json!([]), "Namespace cannot be empty."),
        (json!(["langgraph"]), "Root label for namespace cannot be \"langgraph\". Got: ('langgraph',)"),
    ];
    for (v, want) in cases {
        assert_eq!(msg(validate_json_namespace(&v)), want, "{v}");
    }
    assert!(msg(validate_json_namespace(&json!("a"))).contains("JSON array"));
    let ok = validate_json_namespace(&json!(["users", "alice"])).unwrap();
    assert_eq!(ok.labels(), ["users", "alice"]);
    assert_eq!(validate_json_labels(&json!([])).unwrap(), Vec::<String>::new());
    assert_eq!(Namespace::try_from(&json!(["a"])).unwrap().labels(), ["a"]);
}

#[test]
fn python_repr_of_str() {
    let cases = [
        ("a", "'a'"),
        ("it's", "\"it's\""),
        ("say \"hi\"", "'say \"hi\"'"),
        ("both ' \"", "'both \\' \"'"),
        ("back\\slash", "'back\\\\slash'"),
        ("t\tn\nr\r", "'t\\tn\\nr\\r'"),
        ("\x01\x1f\x7f", "'\\x01\\x1f\\x7f'"),
        ("\u{85}\u{a0}\u{ad}é", "'\\x85\\xa0\\xadé'"),
        ("\u{200b}\u{2028}\u{feff}", "'\\u200b\\u2028\\ufeff'"),
        ("\u{e000}\u{10ffff}", "'\\ue000\\U0010ffff'"),
        ("日本 🙂", "'日本 🙂'"),
    ];
    for (s, want) in cases {
        assert_eq!(python_str_repr(s), want, "{s:?}");
    }
    assert_eq!(python_tuple_repr::<&str>(&[]), "()");
    assert_eq!(python_tuple_repr(&["a"]), "('a',)");
    assert_eq!(python_tuple_repr(&["a", "b"]), "('a', 'b')");
}

#[test]
fn namespace_type() {
    let n = Namespace::try_from(["users", "alice"]).unwrap();
    assert_eq!(n.to_string(), "users.alice");
    assert_eq!(n.encode(), "users.alice");
    assert_eq!(n.len(), 2);
    assert!(!n.is_empty());
    assert_eq!(python_tuple_repr(n.labels()), "('users', 'alice')");
    assert_eq!(Namespace::from_prefix("users.alice").unwrap(), n);
    assert!(Namespace::from_prefix("").is_err());
    assert!(Namespace::from_prefix("a..b").is_err());
    let labels: &[&str] = &["x"];
    assert_eq!(Namespace::try_from(labels).unwrap().into_labels(), ["x"]);
    assert_eq!(Namespace::try_from(ns(&["x", "y"])).unwrap().as_ref(), ["x", "y"]);
    assert!(Namespace::try_from(ns(&["x", ""])).is_err());
    // Any other character is fine.
    Namespace::new(["star*", "q?m", "br[ack]et", "user_1", "a%b", "plus+", "new\nline", " "]).unwrap();
    // Tuple order, not text order.
    assert!(Namespace::new(["a", "b"]).unwrap() < Namespace::new(["a*"]).unwrap());
}

#[test]
fn prefix_encoding_round_trips() {
    for labels in [ns(&["a"]), ns(&["users", "alice", "memories"]), ns(&["x y", "é", "*"])] {
        assert_eq!(Namespace::from_encoded(&encode_prefix(&labels)).to_vec(), labels);
    }
    assert_eq!(encode_prefix(&["a", "b"]), "a.b");
    assert_eq!(Namespace::from_encoded("").to_vec(), [""]);
}

#[test]
fn encoded_orders_are_tuple_order() {
    let all = [
        ns(&["A"]),
        ns(&["a"]),
        ns(&["a", "b"]),
        ns(&["a", "b", "c"]),
        ns(&["a", "b*"]),
        ns(&["a", "bc"]),
        ns(&["a*"]),
        ns(&["a-c"]),
        ns(&["a_"]),
        ns(&["ab"]),
        ns(&["b"]),
        ns(&["é"]),
    ];
    for x in &all {
        for y in &all {
            let (ex, ey) = (encode_prefix(x), encode_prefix(y));
            assert_eq!(cmp_encoded(&ex, &ey), x.cmp(y), "{x:?} {y:?}");
            assert_eq!(tuple_sort_key(&ex).cmp(&tuple_sort_key(&ey)), x.cmp(y), "{x:?} {y:?}");
        }
    }
}

#[test]
fn prefix_suffix_and_max_depth_combine() {
    let all = [
        ns(&["a", "b", "c"]),
        ns(&["a", "b", "d", "e"]),
        ns(&["a", "b", "d", "i"]),
        ns(&["a", "b", "f"]),
        ns(&["a", "c", "f"]),
    ];
    let got = list_namespaces(&all, &[MatchCondition::prefix(["a", "b"])], Some(3), 100, 0);
    assert_eq!(got, [ns(&["a", "b", "c"]), ns(&["a", "b", "d"]), ns(&["a", "b", "f"])]);
    let got = list_namespaces(&all, &[MatchCondition::suffix(["f"])], None, 100, 0);
    assert_eq!(got, [ns(&["a", "b", "f"]), ns(&["a", "c", "f"])]);
    let got = list_namespaces(&all, &[MatchCondition::prefix(["a", "*"])], None, 100, 0);
    assert_eq!(got, all);
    // ANDed conditions, offset and limit after de-duplication.
    let both = [MatchCondition::prefix(["a", "b"]), MatchCondition::suffix(["*", "f"])];
    assert_eq!(list_namespaces(&all, &both, None, 100, 0), [ns(&["a", "b", "f"])]);
    assert_eq!(list_namespaces(&all, &[], Some(2), 100, 0), [ns(&["a", "b"]), ns(&["a", "c"])]);
    assert_eq!(list_namespaces(&all, &[], Some(2), 1, 1), [ns(&["a", "c"])]);
    assert_eq!(list_namespaces(&all, &[], None, 0, 0), Vec::<Vec<String>>::new());
    assert_eq!(list_namespaces(&all, &[], Some(0), 100, 0), [Vec::<String>::new()]);
    // An empty path matches everything.
    assert_eq!(list_namespaces(&all, &[MatchCondition::suffix(Vec::<String>::new())], None, 100, 0), all);
}

#[test]
fn conditions_align_on_whole_labels() {
    let all =
        [ns(&["uid", "users", "alice"]), ns(&["uid", "users", "malice"]), ns(&["uid", "a", "b", "alice"])];
    let got = list_namespaces(&all, &[MatchCondition::suffix(["alice"])], None, 100, 0);
    assert_eq!(got, [ns(&["uid", "a", "b", "alice"]), ns(&["uid", "users", "alice"])]);
    let got = list_namespaces(&all, &[MatchCondition::prefix(["uid", "*", "alice"])], None, 100, 0);
    assert_eq!(got, [ns(&["uid", "users", "alice"])]);
    assert!(!MatchCondition::suffix(["alice"]).matches(&["users", "alice\n"]));
    assert!(!MatchCondition::prefix(["a", "b"]).matches(&["a"]));
    assert!(MatchCondition::suffix(["*"]).matches_encoded("x.y"));
    assert!(!MatchCondition::suffix(["x"]).matches_encoded("x.y"));
}

const METACHAR_LABELS: [(&str, &str); 6] = [
    ("star*", "starX"),
    ("q?m", "qXm"),
    ("br[ack]et", "brXet"),
    ("user_1", "userX1"),
    ("a%b", "aXb"),
    ("plus+", "plusX"),
];

// The matching part: literal labels never act as
// patterns, in Rust and in the SQL pushdown.
#[test]
fn glob_and_like_metacharacters_in_labels_are_literal() {
    let mut all = vec![];
    for (label, decoy) in METACHAR_LABELS {
        all.extend([ns(&[label]), ns(&[label, "child"]), ns(&[decoy]), ns(&[decoy, "child"])]);
    }
    for (label, _) in METACHAR_LABELS {
        let got = list_namespaces(&all, &[MatchCondition::prefix([label])], None, 100, 0);
        assert_eq!(got, [ns(&[label]), ns(&[label, "child"])], "{label}");
        assert_eq!(sql_prefix_matches(&all, &[label]), [ns(&[label]), ns(&[label, "child"])], "{label}");
    }
    assert_eq!(
        prefix_range(&["star*", "q?m"]).unwrap(),
        PrefixRange { exact: "star*.q?m".into(), from: "star*.q?m.".into(), until: "star*.q?m/".into() }
    );
    assert_eq!(prefix_range::<&str>(&[]), None);
    assert_eq!(MatchCondition::prefix(["a", "b"]).literal_prefix(), Some(vec!["a", "b"]));
    assert_eq!(MatchCondition::prefix(["a", "*"]).literal_prefix(), None);
    assert_eq!(MatchCondition::suffix(["a"]).literal_prefix(), None);
}

/// Runs the pushed-down condition in SQLite over `all`, in tuple order.
fn sql_prefix_matches(all: &[Vec<String>], prefix: &[&str]) -> Vec<Vec<String>> {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.create_scalar_function(
        "ns_key",
        1,
        rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(tuple_sort_key(&ctx.get::<String>(0)?)),
    )
    .unwrap();
    conn.execute("CREATE TABLE t (prefix TEXT NOT NULL)", []).unwrap();
    for n in all {
        conn.execute("INSERT INTO t VALUES (?1)", [encode_prefix(n)]).unwrap();
    }
    let (sql, params) = match prefix_range(prefix) {
        Some(r) => (PrefixRange::sql("prefix"), vec![r.exact, r.from, r.until]),
        None => ("1".to_string(), vec![]),
    };
    let mut stmt =
        conn.prepare(&format!("SELECT prefix FROM t WHERE {sql} ORDER BY ns_key(prefix)")).unwrap();
    let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| r.get::<_, String>(0)).unwrap();
    rows.map(|r| Namespace::from_encoded(&r.unwrap()).to_vec()).collect()
}

#[test]
fn search_prefix_stops_at_label_boundaries() {
    let all = [ns(&["foo"]), ns(&["foo", "child"]), ns(&["foobar"]), ns(&["foo2"])];
    let under = |p: &[&str]| -> Vec<Vec<String>> {
        let rust = list_namespaces(&all, &[MatchCondition::prefix(p.iter().copied())], None, 100, 0);
        assert_eq!(sql_prefix_matches(&all, p), rust, "{p:?}");
        rust
    };
    assert_eq!(under(&["foo"]), [ns(&["foo"]), ns(&["foo", "child"])]);
    assert_eq!(under(&["fo"]), Vec::<Vec<String>>::new());
    assert_eq!(under(&[]).len(), 4);
    assert_eq!(under(&["Foo"]), Vec::<Vec<String>>::new());
}

// In TUPLE order. Python's SqliteStore returns
// [("A",),("a*",),("a-c",),("a","b"),("a_",),("b",)] (text order of the
// dot-joined prefix); agentstate deliberately sorts label by label like
// InMemoryStore (docs/design.md, "Namespaces"), so ("a","b") comes right after
// ("A",).
#[test]
fn namespaces_sort_in_tuple_order_not_text_order() {
    let all = [ns(&["A"]), ns(&["a*"]), ns(&["a-c"]), ns(&["a", "b"]), ns(&["a_"]), ns(&["b"])];
    let want = [ns(&["A"]), ns(&["a", "b"]), ns(&["a*"]), ns(&["a-c"]), ns(&["a_"]), ns(&["b"])];
    assert_eq!(list_namespaces(&all, &[], None, 100, 0), want);
    assert_eq!(sql_prefix_matches(&all, &[]), want);
}

#[test]
fn condition_validation() {
    MatchCondition::prefix(["a", "*"]).validate().unwrap();
    assert!(msg(MatchCondition::suffix(["a.b"]).validate()).contains("cannot contain periods"));
    assert_eq!(MatchCondition::prefix(["*", "x"]).path(), [Label::Wildcard, Label::Literal("x".into())]);
    assert_eq!(Label::Wildcard.as_str(), "*");
}

/// The whole of `list_namespaces` after the rows are fetched: keep the
/// namespaces matching every condition, truncate them to `max_depth` labels,
/// de-duplicate, sort in tuple order, then apply `offset` and `limit`.
///
/// Tuple order deliberately differs from Python SqliteStore's text order
/// (docs/design.md, "Namespaces"). `max_depth = Some(0)` gives one empty namespace,
/// as LangGraph's InMemoryStore does.
fn list_namespaces<I, S>(
    namespaces: I,
    conditions: &[MatchCondition],
    max_depth: Option<usize>,
    limit: usize,
    offset: usize,
) -> Vec<Vec<String>>
where
    I: IntoIterator<Item = S>,
    S: AsRef<[String]>,
{
    let mut set = BTreeSet::new();
    for ns in namespaces {
        let ns = ns.as_ref();
        if conditions.iter().all(|c| c.matches(ns)) {
            let depth = max_depth.unwrap_or(ns.len());
            set.insert(truncate(ns, depth));
        }
    }
    set.into_iter().skip(offset).take(limit).collect()
}

/// The prefix condition is compiled once per statement: SQLite compiles a
/// statement again each time a `GLOB` pattern it planned with is bound, not
/// a range's bounds.
#[test]
fn the_prefix_condition_is_not_compiled_again_per_binding() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE t (prefix TEXT PRIMARY KEY); INSERT INTO t VALUES ('a'), ('a.b'), ('b')",
    )
    .unwrap();
    let mut stmt =
        conn.prepare(&format!("SELECT count(*) FROM t WHERE {}", PrefixRange::sql("prefix"))).unwrap();
    for (p, n) in [("a", 2), ("b", 1), ("c", 0)] {
        let r = prefix_range(&[p]).unwrap();
        let got: i64 = stmt.query_row([r.exact, r.from, r.until], |row| row.get(0)).unwrap();
        assert_eq!(got, n, "{p}");
    }
    assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
}
