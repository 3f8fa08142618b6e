//! Unit tests of the filter language. Most cases run through [`check`],
//! which evaluates a filter both in Rust and as compiled SQL (over `TEXT` and
//! `BLOB` columns) and asserts that the two agree.

use rusqlite::Connection;
use serde_json::{json, Map, Value};

use super::parse::MAX_DEPTH;
use super::{register_functions, Filter, SqlValue};
use crate::error::Error;

mod matching;
mod props;
mod sql;
mod strategies;
mod syntax;

/// A connection with the functions and a one-row table `t(v TEXT, b BLOB)`.
fn conn_with(doc: &Value) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    register_functions(&conn).unwrap();
    conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB)").unwrap();
    let text = doc.to_string();
    conn.execute("INSERT INTO t(v, b) VALUES (?1, ?2)", rusqlite::params![text, text.as_bytes()]).unwrap();
    conn
}

/// Evaluates `filter` on `doc` in Rust and in SQL (TEXT and BLOB columns,
/// in WHERE and as a value), asserts they agree and returns the answer.
fn check(filter: &Value, doc: &Value) -> bool {
    let f = Filter::parse(filter).unwrap_or_else(|e| panic!("{filter} should parse: {e}"));
    let want = f.matches(doc);
    let conn = conn_with(doc);
    for col in ["v", "b", "t.b"] {
        let (sql, params) = f.to_sql(col);
        assert_eq!(sql.matches('?').count(), params.len(), "{sql}");
        let value: rusqlite::types::Value = conn
            .query_row(&format!("SELECT {sql} FROM t"), rusqlite::params_from_iter(&params), |r| r.get(0))
            .unwrap();
        assert_eq!(value, SqlValue::Integer(want.into()), "{filter} on {doc} ({col}): {sql}");
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM t WHERE {sql}"),
                rusqlite::params_from_iter(&params),
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n == 1, want, "{filter} on {doc} ({col}, WHERE): {sql}");
    }
    want
}

fn err(filter: &Value) -> (String, String) {
    match Filter::parse(filter) {
        Err(Error::InvalidFilter { key, reason }) => (key, reason),
        other => panic!("{filter}: expected InvalidFilter, got {other:?}"),
    }
}

fn doc() -> Value {
    json!({"x": 1, "s": "hi", "b": true, "l": [1, 2], "d": {"y": 2}, "n": null, "f": 1.5})
}
