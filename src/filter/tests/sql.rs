//! The compiled SQL: bound parameters, placement among other parameters,
//! expression depth, and the registered functions.

use super::*;

#[test]
fn keys_needing_quotes_in_json_paths() {
    let d = json!({"access-level": {"123abc": 7, "a_b": "z"}, "0": 5});
    assert!(check(&json!({"access-level.123abc": 7}), &d));
    assert!(check(&json!({"access-level": {"a_b": "z"}}), &d));
    assert!(check(&json!({"0": 5}), &d));
    let (sql, params) = Filter::parse(&json!({"access-level.123abc": 7})).unwrap().to_sql("v");
    assert!(!sql.contains("access"), "keys are bound, never spliced: {sql}");
    assert!(params.contains(&SqlValue::Text("$.\"access-level\".\"123abc\"".into())));
}

#[test]
fn operands_are_bound_not_spliced() {
    let evil = "'; DROP TABLE t;--";
    let d = json!({"x": evil});
    assert!(check(&json!({"x": evil}), &d));
    assert!(check(&json!({"x": {"$in": [evil, "\"", "?"]}}), &d));
    assert!(check(&json!({"x": {"$gte": evil}}), &d));
    let (sql, params) = Filter::parse(&json!({"x": evil, "y": ["?", {"k": evil}]})).unwrap().to_sql("v");
    assert!(!sql.contains("DROP") && !sql.contains('\''.to_string().repeat(2).as_str()), "{sql}");
    assert!(!sql.contains("$."), "{sql}");
    assert!(params.contains(&SqlValue::Text(evil.into())));
    let conn = conn_with(&d);
    let n: i64 = conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn sql_has_one_param_per_placeholder_and_works_after_other_params() {
    let f = Filter::parse(&json!({
        "a": 1, "b": {"$in": [1, 2, "x", "y", null, true, false, [1], {"o": 1}]},
        "$or": [{"c": {"$gt": 1}}, {"c": {"$lte": "z"}}], "d": {"e": [1]}, "g": {"$exists": false},
    }))
    .unwrap();
    let (sql, params) = f.to_sql("s.value");
    assert_eq!(sql.matches('?').count(), params.len());
    assert!(sql.contains("CAST((s.value) AS TEXT)") || sql.contains("CAST(s.value AS TEXT)"), "{sql}");
    let conn = Connection::open_in_memory().unwrap();
    register_functions(&conn).unwrap();
    conn.execute_batch("CREATE TABLE s(prefix TEXT, value TEXT)").unwrap();
    conn.execute(
        "INSERT INTO s VALUES ('p', ?1)",
        [json!({"a": 1, "b": {"o": 1.0}, "c": "m", "d": {"e": [1.0]}}).to_string()],
    )
    .unwrap();
    conn.execute("INSERT INTO s VALUES ('q', ?1)", [json!({"a": 1}).to_string()]).unwrap();
    let mut all: Vec<SqlValue> = vec![SqlValue::Text("p".into())];
    all.extend(params);
    let n: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM s WHERE prefix = ? AND {sql}"),
            rusqlite::params_from_iter(&all),
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    // A column expression that needs parentheses.
    let (sql, _) = f.to_sql("coalesce(a, b)");
    assert!(sql.contains("CAST((coalesce(a, b)) AS TEXT)"), "{sql}");
}

#[test]
fn many_keys_stay_within_sqlite_expression_depth() {
    let mut obj = Map::new();
    for i in 0..3000 {
        obj.insert(format!("k{i}"), json!({"$ne": i}));
    }
    let f = Value::Object(obj);
    assert!(check(&f, &json!({"k1": 2})));
    assert!(!check(&f, &json!({"k1": 1})));
    let ors: Vec<Value> = (0..3000).map(|i| json!({ "x": i })).collect();
    assert!(check(&json!({ "$or": ors }), &json!({"x": 2999})));
}

#[test]
fn registered_functions() {
    let conn = Connection::open_in_memory().unwrap();
    register_functions(&conn).unwrap();
    let q = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(q("SELECT agentstate_json_eq('{\"a\":[1,2.0],\"b\":null}', '{\"b\":null,\"a\":[1.0,2]}')"), 1);
    assert_eq!(q("SELECT agentstate_json_eq('[1]', '[true]')"), 0);
    assert_eq!(q("SELECT agentstate_json_eq(NULL, '1')"), 0);
    assert_eq!(q("SELECT agentstate_json_eq('1', NULL)"), 0);
    assert_eq!(q("SELECT agentstate_json_eq('not json', 'not json')"), 0);
    assert_eq!(q("SELECT agentstate_json_eq(CAST('[1]' AS BLOB), '[1.0]')"), 1);
    assert_eq!(q("SELECT agentstate_json_in('{\"k\":1}', '[[1], {\"k\":1.0}]')"), 1);
    assert_eq!(q("SELECT agentstate_json_in('{\"k\":1}', '{\"k\":1}')"), 0);
    assert_eq!(q("SELECT agentstate_json_in('2', '[1, 3]')"), 0);
    assert_eq!(
        q("SELECT count(*) FROM json_each('[1,2,3]') WHERE agentstate_json_eq(json_quote(value), '2.0')"),
        1
    );
}

/// Evaluates each filter in SQL on one `BLOB` row holding `text` as another
/// writer produced it (not as serde_json would), against the expected 0/1.
fn sql_on_foreign_text(text: &str, cases: &[(Value, i64)]) {
    let conn = Connection::open_in_memory().unwrap();
    register_functions(&conn).unwrap();
    conn.execute_batch("CREATE TABLE t(v BLOB)").unwrap();
    conn.execute("INSERT INTO t VALUES (?1)", [text.as_bytes()]).unwrap();
    for (f, want) in cases {
        let (sql, params) = Filter::parse(f).unwrap().to_sql("v");
        let got: i64 = conn
            .query_row(&format!("SELECT {sql} FROM t"), rusqlite::params_from_iter(&params), |r| r.get(0))
            .unwrap();
        assert_eq!(got, *want, "{f} on {text}");
    }
}

#[test]
fn python_written_documents_with_non_standard_numbers() {
    // Python's json writes NaN and Infinity; SQLite reads NaN as null.
    sql_on_foreign_text(
        r#"{"x": NaN, "y": Infinity}"#,
        &[
            (json!({"x": {"$gt": 1}}), 0),
            (json!({"x": {"$not": {"$gt": 1}}}), 1),
            (json!({"y": {"$gt": 1e308}}), 1),
            (json!({"y": {"$ne": [1]}}), 1),
        ],
    );
}

#[test]
fn non_ascii_keys_are_bound_and_match_in_sql() {
    let d = json!({"ключ": 1, "名前": {"姓": "山田"}, "é": [1, 2]});
    assert!(check(&json!({"ключ": 1}), &d));
    assert!(!check(&json!({"ключ": 2}), &d));
    assert!(check(&json!({"名前.姓": "山田"}), &d));
    assert!(check(&json!({"名前": {"姓": {"$in": ["山田", "x"]}}}), &d));
    assert!(check(&json!({"é": [1, 2], "ключ": {"$gte": 1}}), &d));
    let (sql, params) = Filter::parse(&json!({"ключ.значение": 1})).unwrap().to_sql("v");
    assert!(!sql.contains("ключ"), "keys are bound, never spliced: {sql}");
    assert!(params.contains(&SqlValue::Text("$.\"ключ\".\"значение\"".into())));
}

#[test]
fn non_ascii_keys_match_documents_with_escaped_keys() {
    // Python's json.dumps escapes non-ASCII by default.
    sql_on_foreign_text(
        r#"{"\u043a\u043b\u044e\u0447": 1, "n": {"\u00e9": "\u00e9"}}"#,
        &[
            (json!({"ключ": 1}), 1),
            (json!({"ключ": 2}), 0),
            (json!({"n.é": "é"}), 1),
            (json!({"n": {"é": {"$exists": true}}}), 1),
        ],
    );
}
