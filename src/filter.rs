//! The filter language, one engine for Store search and checkpoint metadata
//! (DESIGN.md decisions 7-9).
//!
//! A filter is a JSON object; its top-level keys are ANDed.
//!
//! | form | matches when |
//! |---|---|
//! | `{"k": v}` (v scalar or array) | `k` equals `v` (same as `{"k": {"$eq": v}}`) |
//! | `{"a.b": v}` | the nested path `a` → `b` equals `v` |
//! | `{"d": {"y": 2}}` | `d` is an object whose `y` equals 2 (partial match) |
//! | `{"k": {"$ne": v}}` | not `$eq` (so a missing `k` matches) |
//! | `{"k": {"$gt": n}}`, `$gte`, `$lt`, `$lte` | `k` is of `n`'s kind (number or string) and compares so |
//! | `{"k": {"$in": [..]}}`, `$nin` | `k` equals one (none) of the values |
//! | `{"k": {"$exists": true}}` | `k` is present (a JSON null counts) |
//! | `{"k": {"$not": {...}}}` | the operators inside do not match |
//! | `{"$and": [f, ..]}`, `{"$or": [f, ..]}`, `{"$not": f}` | logic over whole filters |
//!
//! JSON semantics everywhere: `1 == 1.0`; `true` equals only `true`; values of
//! different kinds never compare (no match, no error); arrays and objects
//! compare structurally. `{"k": null}` matches a null **or missing** `k`.
//! Numbers beyond the 64-bit integer range compare as floats (as SQLite
//! does).
//!
//! Keys may hold letters, digits, `_`, `-` and `.` (a path separator); a bad
//! key, an unknown `$` operator, or operators mixed with plain keys is an
//! [`Error::InvalidFilter`] naming the key.
//!
//! A filter is evaluated in Rust ([`Filter::matches`]) or compiled to SQL over
//! a JSON column with bound parameters; the two agree on every input (a
//! property test checks it).
//!
//! ```
//! use agentstate::Filter;
//! use serde_json::json;
//! let f = Filter::parse(&json!({"user.level": {"$gte": 3}, "$or": [{"tag": "a"}, {"tag": {"$in": ["b", "c"]}}]}))?;
//! assert!(f.matches(&json!({"user": {"level": 3.0}, "tag": "c"})));
//! assert!(!f.matches(&json!({"user": {"level": "3"}, "tag": "c"})));
//! # Ok::<(), agentstate::Error>(())
//! ```

use std::cmp::Ordering;

use rusqlite::functions::FunctionFlags;
use rusqlite::types::Value as SqlValue;
use rusqlite::Connection;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The deepest nesting a filter may have.
pub const MAX_DEPTH: usize = 32;

/// A parsed filter. Build it with [`Filter::parse`].
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    root: Node,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    Eq(Vec<String>, Value),
    Order(Vec<String>, Cmp, Value),
    Exists(Vec<String>),
    IsObject(Vec<String>),
}

fn invalid_key(k: &str) -> Error {
    Error::invalid_filter(
        k,
        format!(
            "Invalid filter key: '{k}'. Filter keys must contain only alphanumeric characters, underscores, dots, and hyphens."
        ),
    )
}

fn unsupported(op: &str) -> Error {
    Error::invalid_filter(op, format!("Unsupported operator: {op}"))
}

fn split_key(k: &str) -> Result<Vec<String>> {
    let ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok || k.split('.').any(str::is_empty) {
        return Err(invalid_key(k));
    }
    Ok(k.split('.').map(str::to_string).collect())
}

impl Filter {
    /// Parses a JSON filter object (`{}` matches everything).
    ///
    /// # Errors
    /// [`Error::InvalidFilter`] naming the offending key or operator: a key
    /// with characters outside `[A-Za-z0-9_.-]` or an empty path segment, an
    /// unknown `$` operator, operators mixed with plain keys, an operand of
    /// the wrong kind (`$gt` needs a number or string, `$in` an array,
    /// `$exists` a bool, `$and`/`$or` a non-empty array of objects), or
    /// nesting deeper than [`MAX_DEPTH`].
    pub fn parse(filter: &Value) -> Result<Filter> {
        let obj =
            filter.as_object().ok_or_else(|| Error::invalid_filter("", "a filter must be a JSON object"))?;
        Ok(Filter { root: parse_doc(obj, &[], 0)? })
    }

    /// True if the filter has no condition (matches everything).
    pub fn is_empty(&self) -> bool {
        matches!(&self.root, Node::And(v) if v.is_empty())
    }

    /// True if `doc` matches (the Rust evaluator).
    pub fn matches(&self, doc: &Value) -> bool {
        eval(&self.root, doc)
    }

    /// Compiles to an SQL boolean expression over the JSON text in `column`
    /// (a column name or SQL expression), with its positional parameters.
    pub(crate) fn to_sql(&self, column: &str) -> (String, Vec<SqlValue>) {
        let mut params = vec![];
        let sql = compile(&self.root, column, &mut params);
        (sql, params)
    }

    #[doc(hidden)]
    pub fn __to_sql_for_tests(&self, column: &str) -> (String, Vec<SqlValue>) {
        self.to_sql(column)
    }
}

fn parse_doc(obj: &Map<String, Value>, base: &[String], depth: usize) -> Result<Node> {
    if depth > MAX_DEPTH {
        return Err(Error::invalid_filter(
            "",
            format!("the filter is nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut all = vec![];
    for (k, v) in obj {
        if let Some(op) = k.strip_prefix('$') {
            let _ = op;
            all.push(parse_logic(k, v, base, depth)?);
            continue;
        }
        let mut path = base.to_vec();
        path.extend(split_key(k)?);
        all.push(parse_field(k, &path, v, depth + 1)?);
    }
    Ok(if all.len() == 1 { all.pop().unwrap_or(Node::And(vec![])) } else { Node::And(all) })
}

fn parse_logic(op: &str, v: &Value, base: &[String], depth: usize) -> Result<Node> {
    let list = |v: &Value| -> Result<Vec<Node>> {
        let items = v.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
            Error::invalid_filter(op, format!("{op} needs a non-empty array of filter objects"))
        })?;
        items
            .iter()
            .map(|f| {
                let o = f.as_object().ok_or_else(|| {
                    Error::invalid_filter(op, format!("{op} needs a non-empty array of filter objects"))
                })?;
                parse_doc(o, base, depth + 1)
            })
            .collect()
    };
    match op {
        "$and" => Ok(Node::And(list(v)?)),
        "$or" => Ok(Node::Or(list(v)?)),
        "$not" => {
            let o = v.as_object().ok_or_else(|| Error::invalid_filter(op, "$not needs a filter object"))?;
            Ok(Node::Not(Box::new(parse_doc(o, base, depth + 1)?)))
        }
        other => Err(unsupported(other)),
    }
}

fn parse_field(key: &str, path: &[String], v: &Value, depth: usize) -> Result<Node> {
    if depth > MAX_DEPTH {
        return Err(Error::invalid_filter(
            key,
            format!("the filter is nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let Value::Object(o) = v else { return Ok(Node::Eq(path.to_vec(), v.clone())) };
    let has_ops = o.keys().any(|k| k.starts_with('$'));
    if !has_ops {
        // Partial match: the value is an object whose keys match.
        let mut parts = vec![Node::IsObject(path.to_vec())];
        for (k, sub) in o {
            let mut p = path.to_vec();
            p.extend(split_key(k)?);
            parts.push(parse_field(k, &p, sub, depth + 1)?);
        }
        return Ok(Node::And(parts));
    }
    let mut parts = vec![];
    for (op, arg) in o {
        let node = match op.as_str() {
            "$eq" => Node::Eq(path.to_vec(), arg.clone()),
            "$ne" => Node::Not(Box::new(Node::Eq(path.to_vec(), arg.clone()))),
            "$gt" | "$gte" | "$lt" | "$lte" => {
                if !(arg.is_number() || arg.is_string()) {
                    return Err(Error::invalid_filter(
                        op,
                        format!("{op} on '{key}' needs a number or a string"),
                    ));
                }
                let c = match op.as_str() {
                    "$gt" => Cmp::Gt,
                    "$gte" => Cmp::Gte,
                    "$lt" => Cmp::Lt,
                    _ => Cmp::Lte,
                };
                Node::Order(path.to_vec(), c, arg.clone())
            }
            "$in" | "$nin" => {
                let items = arg
                    .as_array()
                    .ok_or_else(|| Error::invalid_filter(op, format!("{op} on '{key}' needs an array")))?;
                let any = Node::Or(items.iter().map(|x| Node::Eq(path.to_vec(), x.clone())).collect());
                if op == "$in" {
                    any
                } else {
                    Node::Not(Box::new(any))
                }
            }
            "$exists" => {
                let b = arg.as_bool().ok_or_else(|| {
                    Error::invalid_filter(op, format!("$exists on '{key}' needs true or false"))
                })?;
                let e = Node::Exists(path.to_vec());
                if b {
                    e
                } else {
                    Node::Not(Box::new(e))
                }
            }
            "$not" => {
                let inner = arg
                    .as_object()
                    .filter(|m| !m.is_empty() && m.keys().all(|k| k.starts_with('$')))
                    .ok_or_else(|| {
                        Error::invalid_filter(op, format!("$not on '{key}' needs an object of operators"))
                    })?;
                Node::Not(Box::new(parse_field(key, path, &Value::Object(inner.clone()), depth + 1)?))
            }
            other if other.starts_with('$') => return Err(unsupported(other)),
            other => return Err(unsupported(other)),
        };
        parts.push(node);
    }
    Ok(if parts.len() == 1 { parts.pop().unwrap_or(Node::And(vec![])) } else { Node::And(parts) })
}

// ---------------------------------------------------------------- evaluation

fn lookup<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for seg in path {
        cur = cur.as_object()?.get(seg)?;
    }
    Some(cur)
}

/// A JSON number as SQLite sees it: an i64 if it fits, else a float.
#[derive(Clone, Copy, Debug)]
enum Num {
    I(i64),
    F(f64),
}

fn num(v: &serde_json::Number) -> Num {
    match v.as_i64() {
        Some(i) => Num::I(i),
        None => Num::F(v.as_f64().unwrap_or(f64::NAN)),
    }
}

fn cmp_num(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::I(x), Num::I(y)) => Some(x.cmp(&y)),
        (Num::F(x), Num::F(y)) => x.partial_cmp(&y),
        (Num::I(x), Num::F(y)) => cmp_int_float(x, y),
        (Num::F(x), Num::I(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

/// Exact comparison of an integer with a float.
fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    let t = f.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => {
            if f > t {
                Some(Ordering::Less)
            } else if f < t {
                Some(Ordering::Greater)
            } else {
                Some(Ordering::Equal)
            }
        }
        o => Some(o),
    }
}

/// Structural JSON equality with numeric `1 == 1.0`.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => cmp_num(num(x), num(y)) == Some(Ordering::Equal),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => false,
    }
}

fn eval(node: &Node, doc: &Value) -> bool {
    match node {
        Node::And(v) => v.iter().all(|n| eval(n, doc)),
        Node::Or(v) => v.iter().any(|n| eval(n, doc)),
        Node::Not(n) => !eval(n, doc),
        Node::Eq(path, want) => match (lookup(doc, path), want) {
            (None, Value::Null) => true,
            (None, _) => false,
            (Some(have), want) => json_eq(have, want),
        },
        Node::Order(path, c, want) => {
            let ord = match (lookup(doc, path), want) {
                (Some(Value::Number(x)), Value::Number(y)) => cmp_num(num(x), num(y)),
                (Some(Value::String(x)), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
                _ => None,
            };
            match ord {
                None => false,
                Some(o) => match c {
                    Cmp::Gt => o == Ordering::Greater,
                    Cmp::Gte => o != Ordering::Less,
                    Cmp::Lt => o == Ordering::Less,
                    Cmp::Lte => o != Ordering::Greater,
                },
            }
        }
        Node::Exists(path) => lookup(doc, path).is_some(),
        Node::IsObject(path) => matches!(lookup(doc, path), Some(Value::Object(_))),
    }
}

// ---------------------------------------------------------------- SQL

/// A JSON path for SQLite with every segment quoted (`$."a"."b-c"`). Keys
/// are validated, so they hold no quote.
fn sql_path(path: &[String]) -> String {
    let mut s = String::from("$");
    for p in path {
        s.push_str(".\"");
        s.push_str(p);
        s.push('"');
    }
    s
}

fn num_param(n: &serde_json::Number) -> SqlValue {
    match num(n) {
        Num::I(i) => SqlValue::Integer(i),
        Num::F(f) => SqlValue::Real(f),
    }
}

fn compile(node: &Node, col: &str, params: &mut Vec<SqlValue>) -> String {
    match node {
        Node::And(v) if v.is_empty() => "1".into(),
        Node::Or(v) if v.is_empty() => "0".into(),
        Node::And(v) => {
            format!("({})", v.iter().map(|n| compile(n, col, params)).collect::<Vec<_>>().join(" AND "))
        }
        Node::Or(v) => {
            format!("({})", v.iter().map(|n| compile(n, col, params)).collect::<Vec<_>>().join(" OR "))
        }
        Node::Not(n) => format!("(NOT {})", compile(n, col, params)),
        Node::Exists(path) => {
            params.push(SqlValue::Text(sql_path(path)));
            format!("(json_type({col}, ?) IS NOT NULL)")
        }
        Node::IsObject(path) => {
            params.push(SqlValue::Text(sql_path(path)));
            format!("COALESCE(json_type({col}, ?) = 'object', 0)")
        }
        Node::Eq(path, want) => {
            let p = SqlValue::Text(sql_path(path));
            match want {
                Value::Null => {
                    params.push(p);
                    format!("(COALESCE(json_type({col}, ?), 'null') = 'null')")
                }
                Value::Bool(b) => {
                    params.push(p);
                    format!("COALESCE(json_type({col}, ?) = '{}', 0)", if *b { "true" } else { "false" })
                }
                Value::Number(n) => {
                    params.push(p.clone());
                    params.push(p);
                    params.push(num_param(n));
                    format!(
                        "COALESCE(json_type({col}, ?) IN ('integer', 'real') AND json_extract({col}, ?) = ?, 0)"
                    )
                }
                Value::String(s) => {
                    params.push(p.clone());
                    params.push(p);
                    params.push(SqlValue::Text(s.clone()));
                    format!("COALESCE(json_type({col}, ?) = 'text' AND json_extract({col}, ?) = ?, 0)")
                }
                Value::Array(_) | Value::Object(_) => {
                    params.push(p);
                    params.push(SqlValue::Text(want.to_string()));
                    format!("COALESCE(agentstate_json_eq({col} -> ?, ?), 0)")
                }
            }
        }
        Node::Order(path, c, want) => {
            let op = match c {
                Cmp::Gt => ">",
                Cmp::Gte => ">=",
                Cmp::Lt => "<",
                Cmp::Lte => "<=",
            };
            let p = SqlValue::Text(sql_path(path));
            let (types, v) = match want {
                Value::Number(n) => ("IN ('integer', 'real')", num_param(n)),
                Value::String(s) => ("= 'text'", SqlValue::Text(s.clone())),
                _ => return "0".into(),
            };
            params.push(p.clone());
            params.push(p);
            params.push(v);
            format!("COALESCE(json_type({col}, ?) {types} AND json_extract({col}, ?) {op} ?, 0)")
        }
    }
}

/// Registers `agentstate_json_eq(a, b)`: 1 if the JSON texts `a` and `b` are
/// structurally equal (numbers by value), 0 otherwise or if either is NULL
/// or not JSON.
pub(crate) fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "agentstate_json_eq",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let a: Option<String> = ctx.get(0)?;
            let b: Option<String> = ctx.get(1)?;
            let (Some(a), Some(b)) = (a, b) else { return Ok(0i64) };
            let (Ok(a), Ok(b)) = (serde_json::from_str::<Value>(&a), serde_json::from_str::<Value>(&b))
            else {
                return Ok(0i64);
            };
            Ok(i64::from(json_eq(&a, &b)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        register_functions(&c).unwrap();
        c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, doc TEXT, bdoc BLOB)").unwrap();
        c
    }

    fn sql_ids(c: &Connection, f: &Filter, col: &str) -> Vec<i64> {
        let (sql, params) = f.to_sql(col);
        let q = format!("SELECT id FROM t WHERE {sql} ORDER BY id");
        let mut stmt = c.prepare(&q).unwrap();
        stmt.query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<Vec<i64>>>()
            .unwrap()
    }

    fn both(doc: &Value, f: &Value) -> bool {
        let c = conn();
        c.execute(
            "INSERT INTO t (id, doc, bdoc) VALUES (1, ?1, ?2)",
            rusqlite::params![doc.to_string(), doc.to_string().into_bytes()],
        )
        .unwrap();
        let parsed = Filter::parse(f).unwrap();
        let rust = parsed.matches(doc);
        let sql = !sql_ids(&c, &parsed, "doc").is_empty();
        let sql_blob = !sql_ids(&c, &parsed, "bdoc").is_empty();
        assert_eq!(rust, sql, "evaluator and SQL disagree on {f} over {doc}");
        assert_eq!(rust, sql_blob, "evaluator and SQL (BLOB column) disagree on {f} over {doc}");
        rust
    }

    #[test]
    fn python_cases_rust_and_sql() {
        let doc = json!({"x": 1, "s": "hi", "b": true, "l": [1, 2], "d": {"y": 2}, "n": null, "f": 1.5});
        for f in [
            json!({"x": 1.0}),
            json!({"l": [1, 2]}),
            json!({"missing": null}),
            json!({"n": null}),
            json!({"x": {"$gt": 0}}),
            json!({"f": {"$lt": 2}}),
            json!({"d.y": 2}),
            json!({"s": {"$gte": "ha"}}),
            json!({"d": {"y": 2}}),
            json!({"l": {"$eq": [1, 2]}}),
            json!({"missing": {"$ne": "q"}}),
            json!({"b": true}),
            json!({"d": {"y": {"$in": [2, 3]}}}),
            json!({}),
        ] {
            assert!(both(&doc, &f), "{f} should match");
        }
        for f in [
            json!({"x": true}),
            json!({"b": 1}),
            json!({"x": {"$gt": "0"}}),
            json!({"missing": {"$gt": 1}}),
            json!({"x": "1"}),
            json!({"l": [2, 1]}),
            json!({"n": {"$ne": null}}),
            json!({"missing": {"$exists": true}}),
            json!({"s": {"$not": {"$eq": "hi"}}}),
        ] {
            assert!(!both(&doc, &f), "{f} should not match");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = Filter::parse(&json!({"bad key": 1})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Invalid filter key: 'bad key'. Filter keys must contain only alphanumeric characters, underscores, dots, and hyphens."
        );
        assert_eq!(
            Filter::parse(&json!({"x": {"$foo": 1}})).unwrap_err().to_string(),
            "Unsupported operator: $foo"
        );
        assert_eq!(
            Filter::parse(&json!({"x": {"$gt": 1, "y": 2}})).unwrap_err().to_string(),
            "Unsupported operator: y"
        );
        for bad in [
            json!({"a..b": 1}),
            json!({".a": 1}),
            json!({"x": {"$gt": true}}),
            json!({"x": {"$in": 1}}),
            json!({"x": {"$exists": 1}}),
            json!({"$or": []}),
            json!({"$and": [1]}),
            json!({"$nope": {}}),
            json!([1]),
            json!({"k'; DROP TABLE t;--": 1}),
        ] {
            assert!(matches!(Filter::parse(&bad), Err(Error::InvalidFilter { .. })), "{bad}");
        }
        let mut deep = json!({"x": 1});
        for _ in 0..100 {
            deep = json!({ "$not": deep });
        }
        assert!(Filter::parse(&deep).is_err());
    }

    #[test]
    fn numbers_compare_exactly_like_sqlite() {
        let doc = json!({"a": 9007199254740993i64, "b": 18446744073709551615u64, "c": -0.0});
        assert!(both(&doc, &json!({"a": 9007199254740993i64})));
        assert!(!both(&doc, &json!({"a": 9007199254740992.0})));
        assert!(both(&doc, &json!({"a": {"$gt": 9007199254740992.0}})));
        assert!(both(&doc, &json!({"b": 18446744073709551615u64})));
        assert!(both(&doc, &json!({"c": 0})));
    }

    fn arb_scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..4).prop_map(|i| json!(i)),
            (-3i64..4).prop_map(|i| json!(i as f64)),
            prop_oneof![
                Just(json!(0.5)),
                Just(json!(-2.5)),
                Just(json!(i64::MAX)),
                Just(json!(i64::MIN)),
                Just(json!(u64::MAX)),
                Just(json!(9.3e18))
            ],
            prop_oneof![Just("a"), Just("b"), Just("ab"), Just(""), Just("1"), Just("é")]
                .prop_map(|s| json!(s)),
        ]
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        arb_scalar().prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![Just("a".to_string()), Just("b".to_string()), Just("c".to_string())],
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_doc() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(
            prop_oneof![Just("a"), Just("b"), Just("c")].prop_map(str::to_string),
            arb_value(),
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("c"), Just("a.b"), Just("b.c"), Just("a.a")]
            .prop_map(str::to_string)
    }

    fn arb_leaf() -> impl Strategy<Value = Value> {
        let op = prop_oneof![
            arb_value().prop_map(|v| json!({"$eq": v})),
            arb_value().prop_map(|v| json!({"$ne": v})),
            arb_value(),
            (
                prop_oneof![Just("$gt"), Just("$gte"), Just("$lt"), Just("$lte")],
                prop_oneof![
                    (-3i64..4).prop_map(|i| json!(i)),
                    Just(json!(0.5)),
                    Just(json!("a")),
                    Just(json!("ab")),
                    Just(json!(u64::MAX))
                ]
            )
                .prop_map(|(o, v)| json!({ o: v })),
            prop::collection::vec(arb_scalar(), 0..3).prop_map(|v| json!({"$in": v})),
            prop::collection::vec(arb_scalar(), 0..3).prop_map(|v| json!({"$nin": v})),
            any::<bool>().prop_map(|b| json!({"$exists": b})),
        ];
        (arb_key(), op).prop_map(|(k, v)| json!({ k: v }))
    }

    fn arb_filter() -> impl Strategy<Value = Value> {
        arb_leaf().prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$and": v})),
                prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$or": v})),
                inner.clone().prop_map(|f| json!({"$not": f})),
                (inner.clone(), inner).prop_map(|(a, b)| {
                    let mut m = a.as_object().cloned().unwrap_or_default();
                    for (k, v) in b.as_object().cloned().unwrap_or_default() {
                        m.entry(k).or_insert(v);
                    }
                    Value::Object(m)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// The SQL compilation and the Rust evaluator agree (decision 9):
        /// 400 filters x 12 documents per run.
        #[test]
        fn sql_and_evaluator_agree(docs in prop::collection::vec(arb_doc(), 12), f in arb_filter()) {
            let c = conn();
            for (i, d) in docs.iter().enumerate() {
                c.execute("INSERT INTO t (id, doc, bdoc) VALUES (?1, ?2, ?3)", rusqlite::params![i as i64, d.to_string(), d.to_string().into_bytes()]).unwrap();
            }
            let parsed = Filter::parse(&f).unwrap();
            let want: Vec<i64> = docs.iter().enumerate().filter(|(_, d)| parsed.matches(d)).map(|(i, _)| i as i64).collect();
            prop_assert_eq!(&sql_ids(&c, &parsed, "doc"), &want, "filter {}", f);
            prop_assert_eq!(&sql_ids(&c, &parsed, "bdoc"), &want, "filter {} (blob)", f);
        }

        /// The parser never panics.
        #[test]
        fn parse_never_panics(v in arb_value(), k in "[ -~]{0,12}", deep in 0usize..80) {
            let _ = Filter::parse(&v);
            let _ = Filter::parse(&json!({ k.clone(): v.clone() }));
            let _ = Filter::parse(&json!({ "x": { k: v } }));
            let mut d = json!({"x": 1});
            for _ in 0..deep { d = json!({"$or": [d]}); }
            let _ = Filter::parse(&d);
        }
    }
}
