//! The filter language shared by Store search and checkpoint metadata
//! (DESIGN.md decisions 7-9).
//!
//! A filter is a JSON object that selects JSON documents. One parsed
//! [`Filter`] can be evaluated in Rust ([`Filter::matches`]) or compiled to an
//! SQLite expression over a column holding the document as JSON text; both
//! give the same answer on every document (this is tested differentially).
//!
//! # The language
//!
//! * **Top-level keys are ANDed.** `{}` matches every document.
//! * **A key is a path.** `"user.level"` is `doc["user"]["level"]`. Keys may
//!   contain only ASCII letters, digits, `_`, `-` and `.`, and no segment may
//!   be empty (`"a..b"`, `".a"` and `"a."` are rejected). Paths walk objects
//!   only: a segment applied to an array or a scalar finds nothing, so
//!   `"tags.0"` never indexes an array.
//! * **A scalar or an array means equality** (`$eq`): `{"source": "loop"}`,
//!   `{"tags": ["a", "b"]}`.
//! * **An object without `$` keys is a partial match**: each of its keys is a
//!   condition on the nested path, and the value there must be an object.
//!   `{"user": {"level": 2}}` is `{"user.level": 2}`; `{"user": {}}` matches
//!   when `user` is an object.
//! * **An object whose keys all start with `$` is an operator object**; its
//!   operators are ANDed: `{"step": {"$gte": 2, "$lt": 10}}`. Mixing `$` keys
//!   with plain keys is an error naming the plain key.
//!
//! | operator | operand | matches when the value at the path ... |
//! |---|---|---|
//! | `$eq` | any JSON | equals the operand; `null` matches a JSON null **or a missing key** |
//! | `$ne` | any JSON | does not equal it (exactly `NOT $eq`: a missing key matches unless the operand is `null`) |
//! | `$gt` `$gte` `$lt` `$lte` | a number or a string | is of the same kind and compares so; a missing key or any other type never matches |
//! | `$in` | an array | equals one of the elements (`null` in the list matches a missing key) |
//! | `$nin` | an array | exactly `NOT $in` |
//! | `$exists` | `true` / `false` | is present / absent (a JSON `null` is present) |
//! | `$not` | a condition | does not satisfy the condition (`{"step": {"$not": {"$gt": 5}}}`) |
//! | `$and` / `$or` | a non-empty array of conditions | satisfies all / any of them (`{"step": {"$or": [1, {"$gt": 10}]}}`) |
//!
//! Logical operators also combine whole filters wherever a filter object is
//! expected (at the top level, or inside them): `{"$and": [filter, ...]}`,
//! `{"$or": [filter, ...]}` (non-empty arrays of objects) and
//! `{"$not": filter}`, freely mixed with path keys:
//! `{"$or": [{"a": 1}, {"b": {"$gt": 2}}], "c": "x"}`. Where a filter object
//! is expected, any other key starting with `$` is an unsupported operator.
//! Operands are literals: `{"x": {"$eq": {"$gt": 1}}}` matches the object
//! `{"$gt": 1}`.
//!
//! # Comparing JSON values
//!
//! * Numbers compare as numbers (`1` equals `1.0`); strings compare as strings,
//!   byte-wise (SQLite's `BINARY` collation, Rust's `str` order); `true` equals
//!   only `true`, never `1`. Values of different types never compare: no
//!   match, and no error.
//! * Arrays and objects compare structurally with `$eq`/`$in`: same length and
//!   pairwise equal elements, or same key set with equal values (key order is
//!   irrelevant, and `1` equals `1.0` inside them too).
//! * Integers are exact within the signed 64-bit range. An integer outside it
//!   (such as `u64::MAX`) compares as the nearest `f64`, which is how SQLite
//!   reads it; integer-versus-float comparisons are otherwise exact
//!   (`9223372036854775807` is less than `9223372036854775808.0`).
//!
//!   One caveat for documents not written by serde_json: SQLite reads an
//!   integer literal with more than 19 significant digits (Python can write
//!   one) from its first 19 digits, which can round differently from Rust by
//!   one unit in the last place.
//!
//! # SQL
//!
//! The compiled expression (crate-internal) reads the document through
//! `CAST(column AS TEXT)`, so a `TEXT` column and a `BLOB` of UTF-8 JSON text
//! (as Python's SqliteStore writes) both work and SQLite parses each document
//! once per row; a `NULL` column is a document without keys. Paths and values
//! are bound parameters, never spliced into the SQL text. Types are checked
//! with `json_type`, so that `true` never equals `1` and strings never
//! compare with numbers; arrays and objects compare through the
//! `agentstate_json_eq` / `agentstate_json_in` functions that every pooled
//! connection registers. The expression is `1` for a match and `0`
//! otherwise, never `NULL`.
//!
//! # Limits
//!
//! A filter may nest at most 32 levels of objects and arrays (operands
//! included). Malformed filters give [`Error::InvalidFilter`]; parsing never
//! panics.
//!
//! # Examples
//!
//! ```
//! use agentstate::Filter;
//! use serde_json::json;
//!
//! let doc = json!({"step": 3, "source": "loop", "user": {"level": 2}, "tags": ["a", "b"]});
//!
//! let f = Filter::parse(&json!({"source": "loop", "step": {"$gte": 2, "$lt": 10}}))?;
//! assert!(f.matches(&doc));
//! assert!(Filter::parse(&json!({"user.level": 2.0}))?.matches(&doc));
//! assert!(Filter::parse(&json!({"user": {"level": 2}}))?.matches(&doc));
//! assert!(Filter::parse(&json!({"tags": ["a", "b"]}))?.matches(&doc));
//! assert!(Filter::parse(&json!({"parents": null}))?.matches(&doc)); // missing counts as null
//! assert!(Filter::parse(&json!({"$or": [{"step": {"$gt": 5}}, {"source": {"$in": ["loop", "input"]}}]}))?
//!     .matches(&doc));
//! assert!(!Filter::parse(&json!({"step": "3"}))?.matches(&doc)); // types never mix
//!
//! let err = Filter::parse(&json!({"bad key": 1})).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "Invalid filter key: 'bad key'. Filter keys must contain only alphanumeric characters, \
//!      underscores, dots, and hyphens."
//! );
//! assert_eq!(
//!     Filter::parse(&json!({"step": {"$foo": 1}})).unwrap_err().to_string(),
//!     "Unsupported operator: $foo"
//! );
//! # Ok::<(), agentstate::Error>(())
//! ```

use std::cmp::Ordering;
use std::convert::Infallible;
use std::fmt::Write as _;

use rusqlite::functions::FunctionFlags;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::Connection;
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};

/// How many levels of JSON objects and arrays a filter may nest.
const MAX_DEPTH: usize = 32;

/// A parsed filter. Build it with [`Filter::parse`]; evaluate it with
/// [`Filter::matches`]. See the [module documentation](self) for the language.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    root: Node,
}

/// The parsed form: a boolean tree over tests on paths.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// Every child matches (so an empty list matches everything).
    All(Vec<Node>),
    /// Some child matches.
    Any(Vec<Node>),
    /// The child does not match.
    Not(Box<Node>),
    /// A test on the value found at a path (never empty).
    Test(Box<[String]>, Test),
}

/// A test on the value at a path, which may be missing.
#[derive(Clone, Debug, PartialEq)]
enum Test {
    /// Structurally equal; `Null` also matches a missing value.
    Eq(Value),
    /// Present, of the operand's kind, and ordered so.
    Cmp(CmpOp, Bound),
    /// `Eq` to some element.
    In(Vec<Value>),
    /// Present (`true`) or missing (`false`).
    Exists(bool),
    /// Present and an object.
    IsObject,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

impl CmpOp {
    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Gte => o != Ordering::Less,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Lte => o != Ordering::Greater,
        }
    }

    fn sql(self) -> &'static str {
        match self {
            CmpOp::Gt => ">",
            CmpOp::Gte => ">=",
            CmpOp::Lt => "<",
            CmpOp::Lte => "<=",
        }
    }
}

/// The operand of `$gt`/`$gte`/`$lt`/`$lte`.
#[derive(Clone, Debug, PartialEq)]
enum Bound {
    Num(Num),
    Str(String),
}

/// A JSON number as SQLite holds it: an integer literal within the `i64`
/// range is an integer, everything else the nearest double.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i64),
    Real(f64),
}

impl Num {
    fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::Int(i)
        } else if let Some(u) = n.as_u64() {
            // Rounds to nearest, ties to even: what SQLite's JSON parser yields.
            Num::Real(u as f64)
        } else {
            Num::Real(n.as_f64().unwrap_or(f64::NAN))
        }
    }

    /// Exact comparison (as SQLite's `sqlite3IntFloatCompare`); `None` only for NaN.
    fn cmp(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Real(a), Num::Real(b)) => a.partial_cmp(&b),
            (Num::Int(a), Num::Real(b)) => int_real_cmp(a, b),
            (Num::Real(a), Num::Int(b)) => int_real_cmp(b, a).map(Ordering::reverse),
        }
    }

    fn to_sql(self) -> SqlValue {
        match self {
            Num::Int(i) => SqlValue::Integer(i),
            Num::Real(r) => SqlValue::Real(r),
        }
    }
}

/// Compares an integer with a double exactly.
fn int_real_cmp(i: i64, r: f64) -> Option<Ordering> {
    if r.is_nan() {
        return None;
    }
    if r < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    if r >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    let t = r.trunc();
    // |t| < 2^63, so the conversion is exact.
    match i.cmp(&(t as i64)) {
        // `i` equals `t` exactly; the fraction of `r` decides.
        Ordering::Equal => t.partial_cmp(&r),
        o => Some(o),
    }
}

/// JSON equality: numbers by value, arrays element-wise, objects by key set.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => Num::of(x).cmp(Num::of(y)) == Some(Ordering::Equal),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => false,
    }
}

/// The value at `path`, walking objects only.
fn lookup<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |cur, seg| cur.as_object()?.get(seg.as_str()))
}

/// `$eq` on a possibly missing value.
fn eq_found(found: Option<&Value>, operand: &Value) -> bool {
    match operand {
        Value::Null => matches!(found, None | Some(Value::Null)),
        _ => found.is_some_and(|v| json_eq(v, operand)),
    }
}

impl Test {
    fn eval(&self, found: Option<&Value>) -> bool {
        match self {
            Test::Eq(v) => eq_found(found, v),
            Test::Cmp(op, bound) => {
                let ord = match (found, bound) {
                    (Some(Value::Number(n)), Bound::Num(b)) => Num::of(n).cmp(*b),
                    (Some(Value::String(s)), Bound::Str(b)) => Some(s.as_str().cmp(b.as_str())),
                    _ => None,
                };
                ord.is_some_and(|o| op.holds(o))
            }
            Test::In(list) => list.iter().any(|v| eq_found(found, v)),
            Test::Exists(want) => found.is_some() == *want,
            Test::IsObject => matches!(found, Some(Value::Object(_))),
        }
    }

    /// True if passing the test implies the value is present.
    fn needs_presence(&self) -> bool {
        match self {
            Test::Eq(v) => !v.is_null(),
            Test::Cmp(..) | Test::IsObject => true,
            Test::In(list) => list.iter().all(|v| !v.is_null()),
            Test::Exists(want) => *want,
        }
    }
}

impl Node {
    /// Evaluates with `look` giving the value at a path.
    fn eval<'v, L: Fn(&[String]) -> Option<&'v Value>>(&self, look: &L) -> bool {
        match self {
            Node::All(v) => v.iter().all(|n| n.eval(look)),
            Node::Any(v) => v.iter().any(|n| n.eval(look)),
            Node::Not(n) => !n.eval(look),
            Node::Test(path, t) => t.eval(look(path)),
        }
    }

    fn collect_paths<'a>(&'a self, out: &mut Vec<&'a [String]>) {
        match self {
            Node::All(v) | Node::Any(v) => v.iter().for_each(|n| n.collect_paths(out)),
            Node::Not(n) => n.collect_paths(out),
            Node::Test(path, _) => {
                if !out.contains(&&**path) {
                    out.push(path);
                }
            }
        }
    }

    /// True if matching implies that the value at `path` is an object
    /// (conservative: `false` when unsure).
    fn implies_object(&self, path: &[String]) -> bool {
        match self {
            Node::All(v) => v.iter().any(|n| n.implies_object(path)),
            Node::Any(v) => !v.is_empty() && v.iter().all(|n| n.implies_object(path)),
            Node::Not(_) => false,
            Node::Test(p, t) => {
                (p.len() > path.len() && p.starts_with(path) && t.needs_presence())
                    || (**p == *path && *t == Test::IsObject)
            }
        }
    }
}

/// ANDs `parts`, flattening nested conjunctions.
fn all(parts: Vec<Node>) -> Node {
    combine(parts, true)
}

/// ORs `parts`, flattening nested disjunctions.
fn any(parts: Vec<Node>) -> Node {
    combine(parts, false)
}

/// `All` (conjunction) or `Any` of `parts`, flattening nested nodes of the
/// same kind; a single part stands alone.
fn combine(parts: Vec<Node>, conjunction: bool) -> Node {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            Node::All(v) if conjunction => out.extend(v),
            Node::Any(v) if !conjunction => out.extend(v),
            p => out.push(p),
        }
    }
    if out.len() == 1 {
        if let Some(n) = out.pop() {
            return n;
        }
    }
    if conjunction {
        Node::All(out)
    } else {
        Node::Any(out)
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn bad_key(key: &str) -> Error {
    Error::invalid_filter(
        key,
        format!(
            "Invalid filter key: '{key}'. Filter keys must contain only alphanumeric characters, \
             underscores, dots, and hyphens."
        ),
    )
}

fn unsupported(op: &str) -> Error {
    Error::invalid_filter(op, format!("Unsupported operator: {op}"))
}

/// `"for 'a.b'"`, or nothing at the filter level.
fn at(path: &[String]) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" for '{}'", path.join("."))
    }
}

fn bad_operand(op: &str, path: &[String], expected: &str, got: &Value) -> Error {
    Error::invalid_filter(
        op,
        format!("Invalid filter{}: {op} expects {expected}, got {}", at(path), kind(got)),
    )
}

/// Splits a validated key into its path segments.
fn parse_key(key: &str) -> Result<impl Iterator<Item = String> + '_> {
    let valid = !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && key.split('.').all(|s| !s.is_empty());
    if valid {
        Ok(key.split('.').map(str::to_owned))
    } else {
        Err(bad_key(key))
    }
}

/// The most levels of arrays and objects a JSON document agentstate stores
/// (a Store value, checkpoint metadata) may nest: serde_json, like most JSON
/// readers, refuses to read deeper text, so a deeper document could be
/// written but never read back.
pub(crate) const MAX_STORED_DEPTH: usize = 127;

/// True if `v` nests more than `max` levels of arrays and objects. Iterative,
/// so arbitrarily deep input cannot overflow the stack.
pub(crate) fn too_deep(v: &Value, max: usize) -> bool {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(a) => {
                if depth > max {
                    return true;
                }
                stack.extend(a.iter().map(|c| (c, depth + 1)));
            }
            Value::Object(m) => {
                if depth > max {
                    return true;
                }
                stack.extend(m.values().map(|c| (c, depth + 1)));
            }
            _ => {}
        }
    }
    false
}

/// A filter object whose path keys are relative to `prefix`.
fn parse_filter_object(obj: &Map<String, Value>, prefix: &[String]) -> Result<Node> {
    let mut parts = Vec::with_capacity(obj.len());
    for (key, value) in obj {
        if key.starts_with('$') {
            parts.push(parse_logical(key, value, prefix)?);
        } else {
            let path: Vec<String> = prefix.iter().cloned().chain(parse_key(key)?).collect();
            parts.push(parse_condition(value, &path)?);
        }
    }
    Ok(all(parts))
}

/// `$and` / `$or` / `$not` where a filter object is expected.
fn parse_logical(op: &str, operand: &Value, prefix: &[String]) -> Result<Node> {
    match op {
        "$and" | "$or" => {
            const EXPECTED: &str = "a non-empty array of filter objects";
            let items = match operand {
                Value::Array(a) if !a.is_empty() => a,
                _ => return Err(bad_operand(op, prefix, EXPECTED, operand)),
            };
            let mut parts = Vec::with_capacity(items.len());
            for item in items {
                let obj = item.as_object().ok_or_else(|| bad_operand(op, prefix, EXPECTED, item))?;
                parts.push(parse_filter_object(obj, prefix)?);
            }
            Ok(if op == "$and" { all(parts) } else { any(parts) })
        }
        "$not" => {
            let obj =
                operand.as_object().ok_or_else(|| bad_operand(op, prefix, "a filter object", operand))?;
            Ok(Node::Not(Box::new(parse_filter_object(obj, prefix)?)))
        }
        _ => Err(unsupported(op)),
    }
}

/// A condition on the value at `path` (never empty): a literal, a partial
/// match object or an operator object.
fn parse_condition(value: &Value, path: &[String]) -> Result<Node> {
    let test = |t| Node::Test(path.into(), t);
    let obj = match value {
        Value::Object(obj) => obj,
        _ => return Ok(test(Test::Eq(value.clone()))),
    };
    if !obj.keys().any(|k| k.starts_with('$')) {
        let inner = parse_filter_object(obj, path)?;
        if inner.implies_object(path) {
            return Ok(inner);
        }
        return Ok(all(vec![test(Test::IsObject), inner]));
    }
    if let Some(plain) = obj.keys().find(|k| !k.starts_with('$')) {
        return Err(Error::invalid_filter(
            plain,
            format!(
                "Unsupported operator: {plain} (the operator object{} mixes $ operators with the plain \
                 key '{plain}'; use only $ operators, or only plain keys for a partial match)",
                at(path)
            ),
        ));
    }
    let mut parts = Vec::with_capacity(obj.len());
    for (op, operand) in obj {
        let node = match op.as_str() {
            "$eq" => test(Test::Eq(operand.clone())),
            "$ne" => Node::Not(Box::new(test(Test::Eq(operand.clone())))),
            "$gt" | "$gte" | "$lt" | "$lte" => {
                let cmp = match op.as_str() {
                    "$gt" => CmpOp::Gt,
                    "$gte" => CmpOp::Gte,
                    "$lt" => CmpOp::Lt,
                    _ => CmpOp::Lte,
                };
                let bound = match operand {
                    Value::Number(n) => Bound::Num(Num::of(n)),
                    Value::String(s) => Bound::Str(s.clone()),
                    _ => return Err(bad_operand(op, path, "a number or a string", operand)),
                };
                test(Test::Cmp(cmp, bound))
            }
            "$in" | "$nin" => {
                let list = operand.as_array().ok_or_else(|| bad_operand(op, path, "an array", operand))?;
                let node = test(Test::In(list.clone()));
                if op == "$in" {
                    node
                } else {
                    Node::Not(Box::new(node))
                }
            }
            "$exists" => match operand {
                Value::Bool(b) => test(Test::Exists(*b)),
                _ => return Err(bad_operand(op, path, "true or false", operand)),
            },
            "$not" => Node::Not(Box::new(parse_condition(operand, path)?)),
            "$and" | "$or" => {
                let items = match operand {
                    Value::Array(a) if !a.is_empty() => a,
                    _ => return Err(bad_operand(op, path, "a non-empty array of conditions", operand)),
                };
                let conds = items.iter().map(|c| parse_condition(c, path)).collect::<Result<Vec<_>>>()?;
                if op == "$and" {
                    all(conds)
                } else {
                    any(conds)
                }
            }
            _ => return Err(unsupported(op)),
        };
        parts.push(node);
    }
    Ok(all(parts))
}

impl Filter {
    /// Parses a JSON filter object. `{}` matches everything.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`], whose message names the offending key or
    /// operator, when:
    /// * `filter` is not a JSON object;
    /// * a key has characters other than ASCII letters, digits, `_`, `-` and
    ///   `.`, or an empty segment (LangGraph's message: `Invalid filter key:
    ///   '<k>'. Filter keys must contain only alphanumeric characters,
    ///   underscores, dots, and hyphens.`);
    /// * an operator is unknown (`Unsupported operator: $op`);
    /// * an operator object also has plain keys;
    /// * an operand has the wrong shape (`$gt` with a boolean, `$in` without an
    ///   array, `$exists` without a boolean, an empty `$or`, ...);
    /// * the filter nests more than 32 levels of objects and arrays.
    pub fn parse(filter: &Value) -> Result<Filter> {
        let obj = filter.as_object().ok_or_else(|| {
            Error::invalid_filter("", format!("Invalid filter: expected a JSON object, got {}", kind(filter)))
        })?;
        if too_deep(filter, MAX_DEPTH) {
            return Err(Error::invalid_filter(
                "",
                format!("Invalid filter: nested more than {MAX_DEPTH} levels of objects and arrays"),
            ));
        }
        Ok(Filter { root: parse_filter_object(obj, &[])? })
    }

    /// True if the filter has no conditions (such as `{}`), so it matches
    /// every document.
    pub fn is_empty(&self) -> bool {
        matches!(&self.root, Node::All(v) if v.is_empty())
    }

    /// True if `doc` matches (the Rust evaluator). A document that is not an
    /// object has no keys: every path is missing in it.
    pub fn matches(&self, doc: &Value) -> bool {
        self.root.eval(&|path: &[String]| lookup(doc, path))
    }

    /// [`matches`](Self::matches), reading the value at each path through
    /// `look` instead of walking a document (the Store evaluates over
    /// columns of pre-extracted values this way).
    pub(crate) fn matches_with<'v>(&self, look: impl Fn(&[String]) -> Option<&'v Value>) -> bool {
        self.root.eval(&look)
    }

    /// The distinct paths the filter looks at.
    pub(crate) fn paths(&self) -> Vec<&[String]> {
        let mut out = vec![];
        self.root.collect_paths(&mut out);
        out
    }

    /// The value at `path` in `doc`, as the filter sees it (objects only).
    pub(crate) fn value_at<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
        lookup(doc, path)
    }

    /// Compiles to an SQL boolean expression over the JSON document in
    /// `column` (a column name or SQL expression such as `s.value`), with its
    /// bound parameters in order. Every literal (paths included) is a
    /// positional `?`, so the caller can append the parameters after its own.
    ///
    /// The column may hold JSON text as `TEXT`, or as a `BLOB` of UTF-8 JSON
    /// text (as Python's SqliteStore writes), or `NULL` (no keys). The
    /// expression reads it through `CAST(column AS TEXT)`, which lets SQLite
    /// parse each document once per row. The expression is never `NULL`: it
    /// is `1` for a match and `0` otherwise. It calls the functions that
    /// [`register_functions`] installs.
    pub(crate) fn to_sql(&self, column: &str) -> (String, Vec<SqlValue>) {
        let simple = !column.is_empty()
            && column.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'));
        let col =
            if simple { format!("CAST({column} AS TEXT)") } else { format!("CAST(({column}) AS TEXT)") };
        let mut gen = SqlGen { col, sql: String::new(), params: Vec::new() };
        gen.node(&self.root);
        (gen.sql, gen.params)
    }
}

// ---------------------------------------------------------------------------
// SQL compilation
// ---------------------------------------------------------------------------

/// SQL for "the value is a number" given `json_type` (may be NULL).
const IS_NUMBER: &str = "IN ('integer', 'real')";

/// The kind of scalars an `IN` list of [`SqlGen::in_scalars`] holds.
#[derive(Clone, Copy)]
enum ScalarKind {
    Number,
    Text,
}

struct SqlGen {
    /// The document, as text.
    col: String,
    sql: String,
    params: Vec<SqlValue>,
}

impl SqlGen {
    fn push(&mut self, s: &str) {
        self.sql.push_str(s);
    }

    fn param(&mut self, v: SqlValue) {
        self.sql.push('?');
        self.params.push(v);
    }

    /// `json_type(doc, ?)`: NULL when missing, else the JSON type name
    /// (`'true'`/`'false'` for booleans, never a number).
    fn json_type(&mut self, path: &str) {
        let _ = write!(self.sql, "json_type({}, ", self.col);
        self.param(SqlValue::Text(path.to_owned()));
        self.sql.push(')');
    }

    /// `json_extract(doc, ?)`: the SQL value (numbers as INTEGER/REAL, strings
    /// as TEXT, but also booleans as 0/1 and containers as JSON TEXT, hence
    /// the `json_type` checks next to it).
    fn json_extract(&mut self, path: &str) {
        let _ = write!(self.sql, "json_extract({}, ", self.col);
        self.param(SqlValue::Text(path.to_owned()));
        self.sql.push(')');
    }

    /// `(doc -> ?)`: the JSON text of the value.
    fn json_sub(&mut self, path: &str) {
        let _ = write!(self.sql, "({} -> ", self.col);
        self.param(SqlValue::Text(path.to_owned()));
        self.sql.push(')');
    }

    /// A balanced tree of `op`, so that long lists stay well within SQLite's
    /// expression depth limit.
    fn join(&mut self, items: &[Node], op: &str, empty: &str) {
        match items {
            [] => self.push(empty),
            [one] => self.node(one),
            _ => {
                let (l, r) = items.split_at(items.len() / 2);
                self.push("(");
                self.join(l, op, empty);
                self.push(op);
                self.join(r, op, empty);
                self.push(")");
            }
        }
    }

    fn node(&mut self, node: &Node) {
        match node {
            Node::All(v) => self.join(v, " AND ", "1"),
            Node::Any(v) => self.join(v, " OR ", "0"),
            Node::Not(n) => {
                self.push("NOT (");
                self.node(n);
                self.push(")");
            }
            Node::Test(path, test) => {
                let mut p = String::from("$");
                for seg in path.iter() {
                    // Segments are [A-Za-z0-9_-]+: quoting needs no escapes.
                    let _ = write!(p, ".\"{seg}\"");
                }
                self.test(&p, test);
            }
        }
    }

    // Every atom below evaluates to 0 or 1, never NULL, so that `NOT` is
    // exact. The pattern `X op ? AND <type check>` relies on `NULL AND 0`
    // being 0: when the value is missing or null, X is NULL and the type check
    // is 0.
    fn test(&mut self, p: &str, test: &Test) {
        match test {
            Test::Eq(v) => self.eq(p, v),
            Test::Cmp(op, bound) => {
                self.push("(");
                self.json_extract(p);
                let _ = write!(self.sql, " {} ", op.sql());
                match bound {
                    Bound::Num(n) => {
                        self.param(n.to_sql());
                        self.push(" AND coalesce(");
                        self.json_type(p);
                        let _ = write!(self.sql, ", '') {IS_NUMBER})");
                    }
                    Bound::Str(s) => {
                        self.param(SqlValue::Text(s.clone()));
                        self.push(" AND ");
                        self.json_type(p);
                        self.push(" IS 'text')");
                    }
                }
            }
            Test::In(list) => self.is_in(p, list),
            Test::Exists(want) => {
                self.json_type(p);
                self.push(if *want { " IS NOT NULL" } else { " IS NULL" });
            }
            Test::IsObject => {
                self.json_type(p);
                self.push(" IS 'object'");
            }
        }
    }

    fn eq(&mut self, p: &str, v: &Value) {
        match v {
            Value::Null => {
                self.push("coalesce(");
                self.json_type(p);
                self.push(", 'null') = 'null'");
            }
            Value::Bool(b) => {
                self.json_type(p);
                self.push(if *b { " IS 'true'" } else { " IS 'false'" });
            }
            Value::Number(n) => {
                // When X IS ? holds, X is a number or a boolean, so json_type
                // is not NULL.
                self.push("(");
                self.json_extract(p);
                self.push(" IS ");
                self.param(Num::of(n).to_sql());
                self.push(" AND ");
                self.json_type(p);
                let _ = write!(self.sql, " {IS_NUMBER})");
            }
            Value::String(s) => {
                self.push("(");
                self.json_extract(p);
                self.push(" IS ");
                self.param(SqlValue::Text(s.clone()));
                self.push(" AND ");
                self.json_type(p);
                self.push(" IS 'text')");
            }
            Value::Array(_) | Value::Object(_) => {
                self.push("(");
                self.json_type(p);
                self.push(if v.is_array() { " IS 'array'" } else { " IS 'object'" });
                self.push(" AND agentstate_json_eq(");
                self.json_sub(p);
                self.push(", ");
                self.param(SqlValue::Text(v.to_string()));
                self.push("))");
            }
        }
    }

    /// `(json_extract(p) IN (?, ...) AND <p is of kind>)` for several numbers
    /// or several strings.
    fn in_scalars(&mut self, p: &str, many: &[&Value], kind: ScalarKind) {
        self.push("(");
        self.json_extract(p);
        self.push(" IN (");
        for (i, v) in many.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            match v {
                Value::Number(n) => self.param(Num::of(n).to_sql()),
                Value::String(s) => self.param(SqlValue::Text(s.clone())),
                _ => {}
            }
        }
        match kind {
            ScalarKind::Number => {
                self.push(") AND coalesce(");
                self.json_type(p);
                let _ = write!(self.sql, ", '') {IS_NUMBER})");
            }
            ScalarKind::Text => {
                self.push(") AND ");
                self.json_type(p);
                self.push(" IS 'text')");
            }
        }
    }

    fn is_in(&mut self, p: &str, list: &[Value]) {
        let has_null = list.iter().any(Value::is_null);
        let has_true = list.contains(&Value::Bool(true));
        let has_false = list.contains(&Value::Bool(false));
        let nums: Vec<&Value> = list.iter().filter(|v| v.is_number()).collect();
        let strs: Vec<&Value> = list.iter().filter(|v| v.is_string()).collect();
        let containers: Vec<&Value> = list.iter().filter(|v| v.is_array() || v.is_object()).collect();
        let pieces = usize::from(has_null)
            + usize::from(has_true || has_false)
            + usize::from(!nums.is_empty())
            + usize::from(!strs.is_empty())
            + usize::from(!containers.is_empty());
        if pieces == 0 {
            self.push("0");
            return;
        }
        let mut first = true;
        let mut sep = |g: &mut SqlGen| {
            if !std::mem::take(&mut first) {
                g.push(" OR ");
            }
        };
        if pieces > 1 {
            self.push("(");
        }
        if has_null {
            sep(self);
            self.eq(p, &Value::Null);
        }
        if has_true && has_false {
            sep(self);
            self.push("coalesce(");
            self.json_type(p);
            self.push(", '') IN ('true', 'false')");
        } else if has_true || has_false {
            sep(self);
            self.eq(p, &Value::Bool(has_true));
        }
        for (group, kind) in [(&nums, ScalarKind::Number), (&strs, ScalarKind::Text)] {
            match group.as_slice() {
                [] => {}
                [one] => {
                    sep(self);
                    self.eq(p, one);
                }
                many => {
                    sep(self);
                    self.in_scalars(p, many, kind);
                }
            }
        }
        match containers.as_slice() {
            [] => {}
            [one] => {
                sep(self);
                self.eq(p, one);
            }
            many => {
                sep(self);
                self.push("(coalesce(");
                self.json_type(p);
                self.push(", '') IN ('array', 'object') AND agentstate_json_in(");
                self.json_sub(p);
                self.push(", ");
                let arr = Value::Array(many.iter().map(|v| (*v).clone()).collect());
                self.param(SqlValue::Text(arr.to_string()));
                self.push("))");
            }
        }
        if pieces > 1 {
            self.push(")");
        }
    }
}

/// Parses an SQL argument holding JSON text (TEXT or BLOB).
fn json_arg(v: ValueRef<'_>) -> Option<Value> {
    match v {
        ValueRef::Text(b) | ValueRef::Blob(b) => serde_json::from_slice(b).ok(),
        _ => None,
    }
}

/// Registers the SQL functions the compiled filters call, on one connection:
///
/// * `agentstate_json_eq(a, b)`: 1 if the JSON texts `a` and `b` are equal
///   under the filter's JSON semantics (numbers by value, object key order
///   irrelevant), else 0 (also for NULL or malformed arguments);
/// * `agentstate_json_in(a, list)`: 1 if `a` equals, so, some element of the
///   JSON array `list`, else 0.
///
/// Both are deterministic and cache their (usually constant) second argument.
pub(crate) fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    let flags =
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    conn.create_scalar_function("agentstate_json_eq", 2, flags, |ctx| {
        let rhs = ctx.get_or_create_aux(1, |v| Ok::<_, Infallible>(json_arg(v)))?;
        Ok(match (json_arg(ctx.get_raw(0)), rhs.as_ref()) {
            (Some(a), Some(b)) => json_eq(&a, b),
            _ => false,
        })
    })?;
    conn.create_scalar_function("agentstate_json_in", 2, flags, |ctx| {
        let list = ctx.get_or_create_aux(1, |v| Ok::<_, Infallible>(json_arg(v)))?;
        Ok(match (json_arg(ctx.get_raw(0)), list.as_ref()) {
            (Some(a), Some(Value::Array(list))) => list.iter().any(|b| json_eq(&a, b)),
            _ => false,
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A connection with the functions and a one-row table `t(v TEXT, b BLOB)`.
    fn conn_with(doc: &Value) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB)").unwrap();
        let text = doc.to_string();
        conn.execute("INSERT INTO t(v, b) VALUES (?1, ?2)", rusqlite::params![text, text.as_bytes()])
            .unwrap();
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

    #[test]
    fn pythons_matching_cases() {
        for f in [
            json!({"x": 1.0}),
            json!({"l": [1, 2]}),
            json!({"missing": null}),
            json!({"x": {"$gt": 0}}),
            json!({"f": {"$lt": 2}}),
            json!({"d.y": 2}),
            json!({"s": {"$gte": "ha"}}),
            json!({"d": {"y": 2}}),
            json!({"l": {"$eq": [1, 2]}}),
            json!({"missing": {"$ne": "q"}}),
        ] {
            assert!(check(&f, &doc()), "{f} should match");
        }
    }

    #[test]
    fn pythons_non_matching_cases() {
        for f in
            [json!({"x": true}), json!({"b": 1}), json!({"x": {"$gt": "0"}}), json!({"missing": {"$gt": 1}})]
        {
            assert!(!check(&f, &doc()), "{f} should not match");
        }
    }

    #[test]
    fn pythons_error_cases() {
        let (key, reason) = err(&json!({"bad key": 1}));
        assert_eq!(key, "bad key");
        assert_eq!(
            reason,
            "Invalid filter key: 'bad key'. Filter keys must contain only alphanumeric characters, \
             underscores, dots, and hyphens."
        );
        assert_eq!(err(&json!({"x": {"$foo": 1}})), ("$foo".into(), "Unsupported operator: $foo".into()));
        let (key, reason) = err(&json!({"x": {"$gt": 1, "y": 2}}));
        assert_eq!(key, "y");
        assert!(reason.starts_with("Unsupported operator: y "), "{reason}");
        assert!(reason.contains("'x'"), "{reason}");
        // Display is the reason alone.
        let e = Filter::parse(&json!({"x": {"$foo": 1}})).unwrap_err();
        assert_eq!(e.to_string(), "Unsupported operator: $foo");
    }

    #[test]
    fn empty_filter_matches_everything() {
        let f = Filter::parse(&json!({})).unwrap();
        assert!(f.is_empty());
        assert_eq!(f.to_sql("v"), ("1".to_string(), vec![]));
        for d in [doc(), json!({}), json!(null), json!([1]), json!("s"), json!(3)] {
            assert!(check(&json!({}), &d));
        }
        assert!(!Filter::parse(&json!({"x": 1})).unwrap().is_empty());
    }

    #[test]
    fn filter_must_be_an_object() {
        for f in [json!(null), json!(1), json!("x"), json!([{"x": 1}]), json!(true)] {
            let (key, reason) = err(&f);
            assert_eq!(key, "");
            assert!(reason.starts_with("Invalid filter: expected a JSON object, got "), "{reason}");
        }
    }

    #[test]
    fn key_validation() {
        for k in ["a", "A_b-9", "1abc", "access-level", "a.b.c", "_", "-", "123"] {
            Filter::parse(&json!({ k: 1 })).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
        for k in [
            "",
            "bad key",
            "a..b",
            ".a",
            "a.",
            ".",
            "a$",
            "é",
            "a'b",
            "a\"b",
            "a[0]",
            "a\nb",
            "'; DROP TABLE t;--",
        ] {
            let (key, reason) = err(&json!({ k: 1 }));
            assert_eq!(key, k);
            assert_eq!(
                reason,
                format!(
                    "Invalid filter key: '{k}'. Filter keys must contain only alphanumeric characters, \
                     underscores, dots, and hyphens."
                )
            );
            // Also inside partial matches and logical operators.
            assert_eq!(err(&json!({"d": { k: 1 }})).0, k);
            assert_eq!(err(&json!({"$or": [{ k: 1 }]})).0, k);
        }
    }

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
    fn dotted_keys_are_nested_paths_over_objects_only() {
        let d = json!({"user": {"level": 3, "tags": ["a"]}, "l": [10, {"a": 1}], "s": "x", "a.b": 1});
        assert!(check(&json!({"user.level": 3}), &d));
        assert!(!check(&json!({"user.level": 4}), &d));
        // Arrays are not indexed by path segments: the value is missing.
        assert!(!check(&json!({"l.0": 10}), &d));
        assert!(check(&json!({"l.0": null}), &d));
        assert!(!check(&json!({"l.1.a": 1}), &d));
        assert!(!check(&json!({"user.tags.0": "a"}), &d));
        assert!(!check(&json!({"s.x": {"$exists": true}}), &d));
        // A literal dotted key in the document is not reachable: "a.b" is a path.
        assert!(!check(&json!({"a.b": 1}), &d));
        assert!(check(&json!({"user.level.deeper": null}), &d));
    }

    #[test]
    fn scalar_equality_follows_json_types() {
        let d = json!({"i": 1, "f": 1.0, "t": true, "z": false, "zero": 0, "s": "1", "e": "", "n": null});
        assert!(check(&json!({"i": 1}), &d));
        assert!(check(&json!({"i": 1.0}), &d));
        assert!(check(&json!({"f": 1}), &d));
        assert!(!check(&json!({"i": "1"}), &d));
        assert!(!check(&json!({"s": 1}), &d));
        assert!(check(&json!({"s": "1"}), &d));
        assert!(!check(&json!({"i": true}), &d));
        assert!(!check(&json!({"t": 1}), &d));
        assert!(check(&json!({"t": true}), &d));
        assert!(!check(&json!({"t": false}), &d));
        assert!(check(&json!({"z": false}), &d));
        assert!(!check(&json!({"zero": false}), &d));
        assert!(!check(&json!({"z": 0}), &d));
        assert!(check(&json!({"e": ""}), &d));
        assert!(!check(&json!({"n": ""}), &d));
        assert!(!check(&json!({"n": 0}), &d));
        assert!(!check(&json!({"n": false}), &d));
        assert!(!check(&json!({"i": [1]}), &d));
        assert!(!check(&json!({"s": ["1"]}), &d));
    }

    #[test]
    fn strings_never_equal_the_json_text_of_containers() {
        let d = json!({"l": [1, 2], "o": {"a": 1}});
        assert!(!check(&json!({"l": "[1,2]"}), &d));
        assert!(!check(&json!({"o": "{\"a\":1}"}), &d));
        assert!(!check(&json!({"l": {"$in": ["[1,2]", "x"]}}), &d));
        assert!(!check(&json!({"l": {"$gte": "["}}), &d));
    }

    #[test]
    fn null_matches_null_or_missing() {
        let d = json!({"n": null, "x": 0, "s": "", "d": {}});
        assert!(check(&json!({"n": null}), &d));
        assert!(check(&json!({"missing": null}), &d));
        assert!(check(&json!({"n": {"$eq": null}}), &d));
        assert!(check(&json!({"missing": {"$eq": null}}), &d));
        assert!(!check(&json!({"x": null}), &d));
        assert!(!check(&json!({"s": null}), &d));
        assert!(!check(&json!({"d": null}), &d));
        assert!(check(&json!({"d.x": null}), &d));
        // NULL column / non-object documents: every key is missing.
        assert!(check(&json!({"k": null}), &json!(null)));
        assert!(!check(&json!({"k": 1}), &json!(null)));
        assert!(check(&json!({"k": null}), &json!([1, 2])));
    }

    #[test]
    fn ne_is_exactly_not_eq() {
        let d = json!({"x": 1, "n": null, "s": "a", "l": [1]});
        assert!(check(&json!({"missing": {"$ne": "q"}}), &d));
        assert!(check(&json!({"missing": {"$ne": 1}}), &d));
        assert!(!check(&json!({"x": {"$ne": 1}}), &d));
        assert!(!check(&json!({"x": {"$ne": 1.0}}), &d));
        assert!(check(&json!({"x": {"$ne": 2}}), &d));
        assert!(check(&json!({"x": {"$ne": "1"}}), &d));
        assert!(check(&json!({"x": {"$ne": true}}), &d));
        assert!(check(&json!({"n": {"$ne": 1}}), &d));
        // Operand null: needs a present non-null value.
        assert!(!check(&json!({"missing": {"$ne": null}}), &d));
        assert!(!check(&json!({"n": {"$ne": null}}), &d));
        assert!(check(&json!({"x": {"$ne": null}}), &d));
        assert!(!check(&json!({"l": {"$ne": [1.0]}}), &d));
        assert!(check(&json!({"l": {"$ne": [1, 1]}}), &d));
    }

    #[test]
    fn arrays_and_objects_compare_structurally() {
        let d = json!({"l": [1, 2.5, "a", null, true, [1], {"k": 1}], "o": {"a": 1, "b": [1, 2], "c": {"d": null}}});
        assert!(check(&json!({"l": [1.0, 2.5, "a", null, true, [1.0], {"k": 1.0}]}), &d));
        assert!(!check(&json!({"l": [1, 2.5, "a", null, true, [1]]}), &d));
        assert!(!check(&json!({"l": [1, 2.5, "a", null, 1, [1], {"k": 1}]}), &d));
        assert!(!check(&json!({"l": [2.5, 1, "a", null, true, [1], {"k": 1}]}), &d));
        assert!(check(&json!({"o": {"$eq": {"c": {"d": null}, "b": [1.0, 2], "a": 1}}}), &d));
        assert!(!check(&json!({"o": {"$eq": {"c": {"d": null}, "b": [1, 2]}}}), &d));
        assert!(!check(&json!({"o": {"$eq": {"a": 1, "b": [1, 2], "c": {}}}}), &d));
        assert!(!check(&json!({"o": {"$eq": {"a": 1, "b": [1, 2], "c": {"d": null}, "e": null}}}), &d));
        assert!(check(&json!({"l.x": {"$ne": []}}), &d));
        assert!(check(&json!({"e": {"$ne": []}}), &json!({"e": {}})));
        assert!(check(&json!({"e": []}), &json!({"e": []})));
        assert!(!check(&json!({"e": []}), &json!({"e": {}})));
        assert!(check(&json!({"e": {"$eq": {}}}), &json!({"e": {}})));
        assert!(!check(&json!({"e": {"$eq": {}}}), &json!({"e": []})));
        assert!(!check(&json!({"e": {"$eq": {}}}), &json!({"e": {"a": 1}})));
    }

    #[test]
    fn partial_object_match() {
        let d = json!({"d": {"y": 2, "z": {"w": "v"}, "n": null}, "s": "x", "l": [{"y": 2}]});
        assert!(check(&json!({"d": {"y": 2}}), &d));
        assert!(check(&json!({"d": {"y": 2.0, "z": {"w": "v"}}}), &d));
        assert!(check(&json!({"d": {"z.w": "v"}}), &d));
        assert!(check(&json!({"d": {}}), &d));
        assert!(check(&json!({"d": {"z": {}}}), &d));
        assert!(!check(&json!({"s": {}}), &d));
        assert!(!check(&json!({"l": {}}), &d));
        assert!(!check(&json!({"missing": {}}), &d));
        assert!(!check(&json!({"d": {"y": 3}}), &d));
        // The nested value must be an object even when the sub-filter alone
        // would accept a missing key.
        assert!(check(&json!({"d": {"q": null}}), &d));
        assert!(!check(&json!({"s": {"q": null}}), &d));
        assert!(!check(&json!({"missing": {"q": null}}), &d));
        assert!(check(&json!({"d": {"q": {"$ne": 1}}}), &d));
        assert!(!check(&json!({"s": {"q": {"$ne": 1}}}), &d));
        assert!(check(&json!({"d": {"n": null, "y": {"$gte": 2}}}), &d));
        assert!(!check(&json!({"l": {"y": 2}}), &d));
        // Same as the dotted form.
        assert_eq!(
            Filter::parse(&json!({"d": {"y": 2}})).unwrap(),
            Filter::parse(&json!({"d.y": 2})).unwrap(),
            "the implied object check is dropped when the sub-filter needs a present value"
        );
    }

    #[test]
    fn comparisons() {
        let d = json!({"i": 5, "f": 2.5, "s": "m", "t": true, "n": null, "l": [1], "o": {}});
        for (f, want) in [
            (json!({"i": {"$gt": 4}}), true),
            (json!({"i": {"$gt": 5}}), false),
            (json!({"i": {"$gte": 5}}), true),
            (json!({"i": {"$gte": 5.0}}), true),
            (json!({"i": {"$lt": 5.5}}), true),
            (json!({"i": {"$lte": 4.999}}), false),
            (json!({"f": {"$gt": 2}}), true),
            (json!({"f": {"$lt": 3}}), true),
            (json!({"f": {"$lte": 2.5}}), true),
            (json!({"s": {"$gt": "l"}}), true),
            (json!({"s": {"$gt": "m"}}), false),
            (json!({"s": {"$gte": "m"}}), true),
            (json!({"s": {"$lt": "ma"}}), true),
            (json!({"s": {"$lt": "M"}}), false),
            (json!({"s": {"$gt": 1}}), false),
            (json!({"s": {"$lt": 1}}), false),
            (json!({"i": {"$lt": "a"}}), false),
            (json!({"i": {"$gt": "a"}}), false),
            (json!({"t": {"$gte": 1}}), false),
            (json!({"t": {"$lte": 1}}), false),
            (json!({"n": {"$lt": 1}}), false),
            (json!({"n": {"$gt": ""}}), false),
            (json!({"l": {"$gte": 1}}), false),
            (json!({"l": {"$gte": ""}}), false),
            (json!({"o": {"$gt": ""}}), false),
            (json!({"missing": {"$lt": 1}}), false),
            (json!({"missing": {"$gt": ""}}), false),
            (json!({"i": {"$gt": 1, "$lt": 10}}), true),
            (json!({"i": {"$gt": 1, "$lt": 5}}), false),
        ] {
            assert_eq!(check(&f, &d), want, "{f}");
        }
    }

    #[test]
    fn strings_compare_bytewise() {
        let d = json!({"a": "B", "b": "a", "c": "é", "e": "", "z": "a\u{0}b"});
        assert!(check(&json!({"a": {"$lt": "a"}}), &d));
        assert!(check(&json!({"c": {"$gt": "z"}}), &d));
        assert!(check(&json!({"e": {"$lt": "a"}}), &d));
        assert!(check(&json!({"e": {"$gte": ""}}), &d));
        assert!(check(&json!({"z": {"$gt": "a"}}), &d));
        assert!(check(&json!({"z": {"$lt": "a\u{1}"}}), &d));
        assert!(check(&json!({"z": "a\u{0}b"}), &d));
        assert!(!check(&json!({"z": "a"}), &d));
    }

    #[test]
    fn comparison_operands_must_be_numbers_or_strings() {
        for bad in [json!(true), json!(null), json!([1]), json!({"a": 1})] {
            for op in ["$gt", "$gte", "$lt", "$lte"] {
                let (key, reason) = err(&json!({"x": { op: bad.clone() }}));
                assert_eq!(key, op);
                assert!(reason.contains(op) && reason.contains("'x'"), "{reason}");
                assert!(reason.contains("expects a number or a string"), "{reason}");
            }
        }
    }

    #[test]
    fn in_and_nin() {
        let d = json!({"x": 1, "s": "a", "t": true, "n": null, "l": [1, 2], "o": {"k": 1}});
        for (f, want) in [
            (json!({"x": {"$in": [3, 1.0]}}), true),
            (json!({"x": {"$in": [3]}}), false),
            (json!({"x": {"$in": ["1", true, [1]]}}), false),
            (json!({"x": {"$in": []}}), false),
            (json!({"x": {"$nin": []}}), true),
            (json!({"s": {"$in": ["b", "a"]}}), true),
            (json!({"s": {"$in": ["b", 1, null]}}), false),
            (json!({"t": {"$in": [1, false]}}), false),
            (json!({"t": {"$in": [false, true]}}), true),
            (json!({"t": {"$in": [true]}}), true),
            (json!({"n": {"$in": [null]}}), true),
            (json!({"missing": {"$in": [null, 1]}}), true),
            (json!({"missing": {"$in": [1, 2]}}), false),
            (json!({"missing": {"$nin": [1, 2]}}), true),
            (json!({"missing": {"$nin": [1, null]}}), false),
            (json!({"x": {"$nin": [1]}}), false),
            (json!({"x": {"$nin": [2, "1"]}}), true),
            (json!({"l": {"$in": [[1, 2.0], 5]}}), true),
            (json!({"l": {"$in": [[2, 1], {"k": 1}]}}), false),
            (json!({"o": {"$in": [[2, 1], {"k": 1.0}]}}), true),
            (json!({"o": {"$in": [{"k": 1.0}]}}), true),
            (json!({"o": {"$nin": [{"k": 2}, [1], null, "x", 3, true]}}), true),
            (json!({"x": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), true),
            (json!({"s": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), true),
            (json!({"l": {"$in": [null, true, 1, "a", [1], {"a": 1}]}}), false),
        ] {
            assert_eq!(check(&f, &d), want, "{f}");
        }
        for op in ["$in", "$nin"] {
            for bad in [json!(1), json!("a"), json!(null), json!({"a": 1})] {
                let (key, reason) = err(&json!({"x": { op: bad }}));
                assert_eq!(key, op);
                assert!(reason.contains("expects an array"), "{reason}");
            }
        }
    }

    #[test]
    fn exists() {
        let d = json!({"x": 1, "n": null, "d": {"y": null}});
        assert!(check(&json!({"x": {"$exists": true}}), &d));
        assert!(check(&json!({"n": {"$exists": true}}), &d));
        assert!(check(&json!({"d.y": {"$exists": true}}), &d));
        assert!(!check(&json!({"missing": {"$exists": true}}), &d));
        assert!(check(&json!({"missing": {"$exists": false}}), &d));
        assert!(!check(&json!({"n": {"$exists": false}}), &d));
        assert!(check(&json!({"d.z": {"$exists": false}}), &d));
        for bad in [json!(1), json!("true"), json!(null), json!([true])] {
            let (key, reason) = err(&json!({"x": {"$exists": bad}}));
            assert_eq!(key, "$exists");
            assert!(reason.contains("expects true or false"), "{reason}");
        }
    }

    #[test]
    fn logical_operators_on_filters() {
        let d = json!({"a": 1, "b": 3, "c": "x"});
        for (f, want) in [
            (json!({"$or": [{"a": 1}, {"b": {"$gt": 2}}], "c": "x"}), true),
            (json!({"$or": [{"a": 2}, {"b": {"$gt": 3}}], "c": "x"}), false),
            (json!({"$or": [{"a": 2}, {"b": {"$gt": 2}}], "c": "y"}), false),
            (json!({"$and": [{"a": 1}, {"b": 3}]}), true),
            (json!({"$and": [{"a": 1}, {"b": 4}]}), false),
            (json!({"$and": [{}]}), true),
            (json!({"$or": [{}]}), true),
            (json!({"$not": {"a": 1}}), false),
            (json!({"$not": {"a": 2}}), true),
            (json!({"$not": {}}), false),
            (json!({"$not": {"$not": {"a": 1}}}), true),
            (
                json!({"$or": [{"$and": [{"a": 1}, {"$not": {"b": 3}}]}, {"$not": {"c": {"$in": ["x"]}}}]}),
                false,
            ),
            (json!({"d": {"$not": {}}}), true),
            (json!({"$or": [{"missing": 1}, {"missing": {"$exists": true}}]}), false),
            (json!({"$not": {"$or": [{"missing": 1}, {"missing": {"$exists": true}}]}}), true),
        ] {
            assert_eq!(check(&f, &d), want, "{f}");
        }
        for f in [
            json!({"$and": []}),
            json!({"$or": []}),
            json!({"$or": {"a": 1}}),
            json!({"$or": [1]}),
            json!({"$and": [{"a": 1}, "b"]}),
            json!({"$not": [{"a": 1}]}),
            json!({"$not": 1}),
        ] {
            let (key, reason) = err(&f);
            assert!(key.starts_with('$'), "{f}: {key}");
            assert!(reason.starts_with(&format!("Invalid filter: {key} expects ")), "{f}: {reason}");
        }
        assert_eq!(err(&json!({"$nor": [{"a": 1}]})), ("$nor".into(), "Unsupported operator: $nor".into()));
        assert_eq!(err(&json!({"$eq": 1})), ("$eq".into(), "Unsupported operator: $eq".into()));
    }

    #[test]
    fn logical_operators_on_conditions() {
        let d = json!({"x": 7, "o": {"a": 1, "b": 2}});
        for (f, want) in [
            (json!({"x": {"$not": {"$gt": 5}}}), false),
            (json!({"x": {"$not": 8}}), true),
            (json!({"x": {"$not": 7.0}}), false),
            (json!({"missing": {"$not": {"$gt": 5}}}), true),
            (json!({"x": {"$or": [1, {"$gt": 6}]}}), true),
            (json!({"x": {"$or": [1, {"$gt": 7}]}}), false),
            (json!({"x": {"$and": [{"$gt": 1}, {"$lt": 8}, {"$ne": 3}]}}), true),
            (json!({"x": {"$and": [{"$gt": 1}, {"$lt": 7}]}}), false),
            (json!({"o": {"$or": [{"a": 2}, {"b": 2}]}}), true),
            (json!({"o": {"$not": {"a": 1}}}), false),
            (json!({"x": {"$not": {"a": 1}}}), true),
            (json!({"x": {"$or": [{"$in": [1, 2]}, {"$exists": false}]}}), false),
        ] {
            assert_eq!(check(&f, &d), want, "{f}");
        }
        let (key, reason) = err(&json!({"x": {"$or": []}}));
        assert_eq!(key, "$or");
        assert_eq!(
            reason,
            "Invalid filter for 'x': $or expects a non-empty array of conditions, got an array"
        );
        assert_eq!(err(&json!({"x": {"$and": 1}})).0, "$and");
        assert_eq!(err(&json!({"x": {"$not": {"$bad": 1}}})).0, "$bad");
    }

    #[test]
    fn unknown_operators_and_mixed_keys() {
        assert_eq!(
            err(&json!({"x": {"$regex": "a"}})),
            ("$regex".into(), "Unsupported operator: $regex".into())
        );
        assert_eq!(err(&json!({"x": {"$": 1}})).1, "Unsupported operator: $");
        assert_eq!(err(&json!({"d": {"y": {"$size": 1}}})).1, "Unsupported operator: $size");
        let (key, reason) = err(&json!({"x": {"y": 2, "$gt": 1}}));
        assert_eq!(key, "y");
        assert_eq!(
            reason,
            "Unsupported operator: y (the operator object for 'x' mixes $ operators with the plain key \
             'y'; use only $ operators, or only plain keys for a partial match)"
        );
        let (key, reason) = err(&json!({"d": {"e": {"$eq": 1, "bad key": 2}}}));
        assert_eq!(key, "bad key");
        assert!(reason.contains("'d.e'"), "{reason}");
        // A `$eq` operand is a literal, `$` keys and all.
        assert!(check(&json!({"x": {"$eq": {"$gt": 1}}}), &json!({"x": {"$gt": 1.0}})));
    }

    #[test]
    fn nesting_limit() {
        fn nested(depth: usize) -> Value {
            // `depth` levels of objects in total, the filter object included.
            let mut v = json!(1);
            for _ in 1..depth {
                v = json!({ "a": v });
            }
            json!({ "a": v })
        }
        let f = nested(MAX_DEPTH);
        let mut d = json!(1);
        for _ in 0..MAX_DEPTH {
            d = json!({ "a": d });
        }
        assert!(check(&f, &d));
        let (key, reason) = err(&nested(MAX_DEPTH + 1));
        assert_eq!(key, "");
        assert_eq!(reason, "Invalid filter: nested more than 32 levels of objects and arrays");
        // Operands count as well.
        let mut op = json!([]);
        for _ in 0..MAX_DEPTH {
            op = json!([op]);
        }
        assert!(err(&json!({"x": {"$eq": op}})).1.contains("nested more than 32"));
        // Logical operators count too.
        let mut f = json!({"a": 1});
        for _ in 0..40 {
            f = json!({ "$not": f });
        }
        assert!(err(&f).1.contains("nested more than 32"));
    }

    #[test]
    fn very_deep_input_does_not_overflow_the_stack() {
        let mut v = Value::Null;
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        // Built by hand: `json!` would serialize `v` recursively.
        let wrap = |k: &str, v: Value| Value::Object(Map::from_iter([(k.to_owned(), v)]));
        let f = wrap("$or", Value::Array(vec![wrap("x", wrap("$in", Value::Array(vec![v])))]));
        assert!(err(&f).1.contains("nested more than 32"));
        // Take it apart iteratively: dropping it recursively could overflow.
        let mut stack = vec![f];
        while let Some(mut v) = stack.pop() {
            match &mut v {
                Value::Array(a) => stack.append(a),
                Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
    }

    #[test]
    fn large_numbers() {
        let big = json!({
            "imax": i64::MAX, "imin": i64::MIN, "umax": u64::MAX, "two63": 1u64 << 63,
            "p53": 9_007_199_254_740_993i64, "f63": 9_223_372_036_854_775_808.0f64,
        });
        for (f, want) in [
            (json!({"imax": i64::MAX}), true),
            (json!({"imax": i64::MAX - 1}), false),
            // Exact integer/float comparisons: i64::MAX < 2^63 as a float.
            (json!({"imax": 9_223_372_036_854_775_808.0f64}), false),
            (json!({"imax": {"$lt": 9_223_372_036_854_775_808.0f64}}), true),
            (json!({"imax": {"$lt": 1u64 << 63}}), true),
            (json!({"imin": -9_223_372_036_854_775_808.0f64}), true),
            (json!({"imin": {"$gte": i64::MIN}}), true),
            (json!({"imin": {"$lt": -9_223_372_036_854_775_807.0f64}}), false),
            (json!({"p53": 9_007_199_254_740_992.0f64}), false),
            (json!({"p53": {"$gt": 9_007_199_254_740_992.0f64}}), true),
            (json!({"p53": 9_007_199_254_740_993i64}), true),
            // Beyond i64 an integer is its nearest f64, as SQLite reads it.
            (json!({"umax": u64::MAX}), true),
            (json!({"umax": 18_446_744_073_709_551_616.0f64}), true),
            (json!({"umax": u64::MAX - 1}), true),
            (json!({"umax": {"$gt": i64::MAX}}), true),
            (json!({"two63": 9_223_372_036_854_775_808.0f64}), true),
            (json!({"two63": {"$gt": i64::MAX}}), true),
            (json!({"f63": 1u64 << 63}), true),
            (json!({"f63": i64::MAX}), false),
            (json!({"umax": {"$in": [1, u64::MAX]}}), true),
            (json!({"imax": {"$in": [1, 9_223_372_036_854_775_808.0f64]}}), false),
            (json!({"l": [u64::MAX]}), false),
        ] {
            assert_eq!(check(&f, &big), want, "{f}");
        }
        let d = json!({"l": [u64::MAX, i64::MIN, 1e300]});
        assert!(check(
            &json!({"l": [18_446_744_073_709_551_616.0f64, -9_223_372_036_854_775_808.0f64, 1e300]}),
            &d
        ));
        assert!(!check(&json!({"l": [u64::MAX, i64::MIN + 1, 1e300]}), &d));
    }

    #[test]
    fn negative_zero_and_fractions() {
        let d = json!({"z": -0.0, "f": 0.1, "i": 0});
        assert!(check(&json!({"z": 0}), &d));
        assert!(check(&json!({"i": -0.0}), &d));
        assert!(check(&json!({"z": {"$gte": 0}}), &d));
        assert!(check(&json!({"f": 0.1}), &d));
        assert!(!check(&json!({"f": 0.30000000000000004 - 0.2}), &d));
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
        assert_eq!(
            q("SELECT agentstate_json_eq('{\"a\":[1,2.0],\"b\":null}', '{\"b\":null,\"a\":[1.0,2]}')"),
            1
        );
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

    #[test]
    fn python_written_documents_with_non_standard_numbers() {
        // Python's json writes NaN and Infinity; SQLite reads NaN as null.
        let conn = Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        conn.execute_batch(
            "CREATE TABLE t(v BLOB); INSERT INTO t VALUES (CAST('{\"x\": NaN, \"y\": Infinity}' AS BLOB));",
        )
        .unwrap();
        for (f, want) in [
            (json!({"x": {"$gt": 1}}), 0),
            (json!({"x": {"$not": {"$gt": 1}}}), 1),
            (json!({"y": {"$gt": 1e308}}), 1),
            (json!({"y": {"$ne": [1]}}), 1),
        ] {
            let (sql, params) = Filter::parse(&f).unwrap().to_sql("v");
            let got: i64 = conn
                .query_row(&format!("SELECT {sql} FROM t"), rusqlite::params_from_iter(&params), |r| r.get(0))
                .unwrap();
            assert_eq!(got, want, "{f}");
        }
    }

    #[test]
    fn filters_are_comparable_and_cloneable() {
        let a = Filter::parse(&json!({"a": {"$in": [1, 2]}, "b": {"c": null}})).unwrap();
        assert_eq!(a.clone(), a);
        assert_ne!(a, Filter::parse(&json!({"a": {"$in": [1, 3]}, "b": {"c": null}})).unwrap());
        assert!(format!("{a:?}").contains("Filter"));
    }
}

/// Differential tests: the SQL compilation and the Rust evaluator agree.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::any;
    use proptest::prelude::*;
    use proptest::sample::{select, Selector};
    use serde_json::json;

    fn num(n: impl Into<Number>) -> Value {
        Value::Number(n.into())
    }

    fn float(f: f64) -> Value {
        Number::from_f64(f).map_or(Value::Null, Value::Number)
    }

    /// Numbers where SQL and Rust could disagree: int/float twins, both ends
    /// of i64 and u64, the f64 integer limit, random bits.
    fn number() -> BoxedStrategy<Value> {
        prop_oneof![
            3 => (-3i64..=3).prop_map(num),
            2 => select(vec![0.5, 1.0, -0.0, 0.0, 1.5, 2.0, -3.0, 3.0, -1.5]).prop_map(float),
            2 => select(vec![
                i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1, 1 << 53, (1 << 53) + 1, -(1 << 53) - 1,
            ])
            .prop_map(num),
            2 => select(vec![
                u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 1, (1 << 63) + 1024, (1 << 63) + 2048,
                10_000_000_000_000_000_000,
            ])
            .prop_map(num),
            2 => select(vec![
                9_223_372_036_854_775_808.0, -9_223_372_036_854_775_808.0, 18_446_744_073_709_551_616.0,
                9_007_199_254_740_992.0, 9_007_199_254_740_994.0, 1e300, -1e-300, 9_223_372_036_854_775_807.0,
            ])
            .prop_map(float),
            1 => any::<i64>().prop_map(num),
            1 => any::<u64>().prop_map(num),
            1 => any::<f64>().prop_map(float),
            1 => (-1e6..1e6f64).prop_map(float),
        ]
        .boxed()
    }

    fn string() -> BoxedStrategy<Value> {
        select(vec![
            "",
            "a",
            "b",
            "ab",
            "A",
            "B",
            "é",
            "z",
            "1",
            "true",
            "null",
            "[1]",
            "{}",
            "a\u{0}b",
            "\"",
            "\\",
            "'; DROP TABLE docs;--",
            "?",
            "😀",
        ])
        .prop_map(|s| Value::String(s.into()))
        .boxed()
    }

    /// Scalars from a small pool, so that operands often equal document
    /// values, or from the wide strategies above.
    fn scalar() -> BoxedStrategy<Value> {
        prop_oneof![
            6 => select(vec![
                json!(0), json!(1), json!(1.0), json!(2), json!(-1), json!(1.5), json!("a"), json!("b"), json!(""),
                json!(true), json!(false), json!(null),
            ]),
            1 => any::<bool>().prop_map(Value::Bool),
            3 => number(),
            2 => string(),
        ]
        .boxed()
    }

    fn key() -> BoxedStrategy<String> {
        select(vec!["a", "b", "c"]).prop_map(String::from).boxed()
    }

    fn object(inner: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
        vec((key(), inner), 0..=max).prop_map(|kv| Value::Object(kv.into_iter().collect())).boxed()
    }

    /// Any JSON value over the small key alphabet (no `$` keys).
    fn value() -> BoxedStrategy<Value> {
        scalar()
            .prop_recursive(3, 24, 3, |inner| {
                prop_oneof![vec(inner.clone(), 0..3).prop_map(Value::Array), object(inner, 3)]
            })
            .boxed()
    }

    fn doc() -> BoxedStrategy<Value> {
        let dense = vec((key(), value()), 1..=4).prop_map(|kv| Value::Object(kv.into_iter().collect()));
        prop_oneof![20 => dense, 1 => Just(Value::Null), 1 => value()].boxed()
    }

    fn path() -> BoxedStrategy<String> {
        prop_oneof![
            3 => key(),
            2 => (key(), key()).prop_map(|(a, b)| format!("{a}.{b}")),
            1 => (key(), key(), key()).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
        ]
        .boxed()
    }

    fn op(name: &str, operand: Value) -> Value {
        Value::Object(Map::from_iter([(name.to_owned(), operand)]))
    }

    fn ordered() -> BoxedStrategy<Value> {
        prop_oneof![
            3 => select(vec![json!(0), json!(1), json!(1.0), json!(1.5), json!(2), json!("a"), json!("b"), json!("")]),
            2 => number(),
            1 => string(),
        ]
        .boxed()
    }

    /// A condition on one path.
    fn condition() -> BoxedStrategy<Value> {
        let leaf = prop_oneof![
            4 => value(),
            2 => value().prop_map(|v| op("$eq", v)),
            2 => value().prop_map(|v| op("$ne", v)),
            3 => (select(vec!["$gt", "$gte", "$lt", "$lte"]), ordered()).prop_map(|(o, v)| op(o, v)),
            1 => (ordered(), ordered()).prop_map(|(lo, hi)| json!({"$gte": lo, "$lt": hi})),
            2 => vec(value(), 0..4).prop_map(|l| op("$in", Value::Array(l))),
            1 => vec(value(), 0..4).prop_map(|l| op("$nin", Value::Array(l))),
            1 => any::<bool>().prop_map(|b| op("$exists", Value::Bool(b))),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|c| op("$not", c)),
                vec(inner.clone(), 1..3).prop_map(|l| op("$or", Value::Array(l))),
                vec(inner.clone(), 1..3).prop_map(|l| op("$and", Value::Array(l))),
                // A partial match: plain keys with conditions.
                vec((path(), inner), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
    }

    fn filter() -> BoxedStrategy<Value> {
        let leaf = vec((path(), condition()), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect()));
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                vec(inner.clone(), 1..3).prop_map(|l| op("$and", Value::Array(l))),
                vec(inner.clone(), 1..3).prop_map(|l| op("$or", Value::Array(l))),
                inner.clone().prop_map(|f| op("$not", f)),
                (vec(inner, 1..3), path(), condition()).prop_map(|(l, p, c)| {
                    let mut m = Map::new();
                    m.insert("$or".into(), Value::Array(l));
                    m.insert(p, c);
                    Value::Object(m)
                }),
            ]
        })
        .boxed()
    }

    /// The next float towards +inf (`up`) or -inf.
    fn next_float(f: f64, up: bool) -> f64 {
        if f == 0.0 {
            let tiny = f64::from_bits(1);
            return if up { tiny } else { -tiny };
        }
        let bits = f.to_bits();
        f64::from_bits(if (f > 0.0) == up { bits + 1 } else { bits - 1 })
    }

    /// A number and one of its neighbours.
    fn twins() -> BoxedStrategy<(Value, Value)> {
        number()
            .prop_flat_map(|a| {
                let n = a.as_number().cloned().unwrap_or_else(|| Number::from(0));
                let f = n.as_f64().unwrap_or(0.0);
                let mut near =
                    vec![a.clone(), float(f), float(next_float(f, true)), float(next_float(f, false))];
                if let Some(i) = n.as_i64() {
                    near.extend([num(i.saturating_add(1)), num(i.saturating_sub(1))]);
                }
                if let Some(u) = n.as_u64() {
                    near.extend([num(u.saturating_add(1)), num(u.saturating_sub(1))]);
                }
                if f.fract() == 0.0 && f.abs() < 1.9e19 {
                    // Saturating float-to-int casts: the integer twin of a float.
                    near.extend([num(f as i64), num(f as u64)]);
                }
                (Just(a), select(near))
            })
            .boxed()
    }

    /// A value of another JSON type that SQL could confuse with `v`: `true`
    /// and 1, 1 and "1", an array and its JSON text.
    fn cousin(v: &Value) -> Value {
        match v {
            Value::Null => json!(0),
            Value::Bool(b) => json!(i64::from(*b)),
            Value::Number(n) if n.as_f64() == Some(1.0) => json!(true),
            Value::Number(n) if n.as_f64() == Some(0.0) => json!(false),
            Value::Number(n) => Value::String(n.to_string()),
            Value::String(s) => serde_json::from_str::<Value>(s)
                .ok()
                .filter(|p| !p.is_string())
                .unwrap_or_else(|| json!(s.len())),
            Value::Array(_) | Value::Object(_) => Value::String(v.to_string()),
        }
    }

    /// Every (dotted path, value) present in `docs`, through objects only.
    fn present_values(docs: &[Value]) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let mut stack: Vec<(String, &Value)> = docs.iter().map(|d| (String::new(), d)).collect();
        while let Some((prefix, v)) = stack.pop() {
            if let Value::Object(m) = v {
                for (k, c) in m {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    out.push((p.clone(), c.clone()));
                    stack.push((p, c));
                }
            }
        }
        out
    }

    /// Documents stored both as TEXT and as a BLOB of JSON text.
    fn table(docs: &[Value]) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register_functions(&conn).unwrap();
        conn.execute_batch("CREATE TABLE docs(id INTEGER PRIMARY KEY, t TEXT, b BLOB)").unwrap();
        for (i, d) in docs.iter().enumerate() {
            // A NULL document stands for a NULL column.
            let text = (!d.is_null()).then(|| d.to_string());
            let blob = text.as_ref().map(|t| t.as_bytes().to_vec());
            conn.execute("INSERT INTO docs VALUES (?1, ?2, ?3)", rusqlite::params![i as i64, text, blob])
                .unwrap();
        }
        conn
    }

    /// Asserts that SQL selects exactly the documents the evaluator matches,
    /// through both columns, in WHERE and as a 0/1 value.
    fn agree(
        conn: &Connection,
        docs: &[Value],
        f: &Filter,
        src: &Value,
    ) -> std::result::Result<(), TestCaseError> {
        let want: Vec<i64> = (0..docs.len() as i64).filter(|&i| f.matches(&docs[i as usize])).collect();
        for col in ["t", "b"] {
            let (sql, params) = f.to_sql(col);
            prop_assert_eq!(sql.matches('?').count(), params.len());
            let mut st = conn.prepare(&format!("SELECT id FROM docs WHERE {sql} ORDER BY id")).unwrap();
            let got: Vec<i64> = st
                .query_map(rusqlite::params_from_iter(&params), |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            prop_assert_eq!(&got, &want, "filter {} ({}): {}\ndocs {:?}", src, col, sql, docs);
        }
        let (sql, params) = f.to_sql("t");
        let mut st = conn.prepare(&format!("SELECT {sql} FROM docs ORDER BY id")).unwrap();
        let values: Vec<SqlValue> = st
            .query_map(rusqlite::params_from_iter(&params), |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        for (i, v) in values.iter().enumerate() {
            let expected = SqlValue::Integer(want.contains(&(i as i64)).into());
            prop_assert_eq!(v, &expected, "value of {} on {}", src, &docs[i]);
        }
        Ok(())
    }

    fn config(cases: u32) -> ProptestConfig {
        // XorShift: ChaCha dominates the run time of unoptimized test builds.
        ProptestConfig {
            cases,
            failure_persistence: None,
            rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config(1500))]

        /// 1500 cases x up to 8 documents x up to 4 filters.
        #[test]
        fn filter_sql_agrees_with_evaluator(docs in vec(doc(), 4..=8), filters in vec(filter(), 1..=4)) {
            let conn = table(&docs);
            for src in &filters {
                let f = Filter::parse(src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
                agree(&conn, &docs, &f, src)?;
            }
        }

        /// Every single-path condition, each against many documents.
        #[test]
        fn filter_condition_sql_agrees_with_evaluator(
            docs in vec(doc(), 8..=16), conds in vec((path(), condition()), 1..=4),
        ) {
            let conn = table(&docs);
            for (p, c) in conds {
                let src = Value::Object(Map::from_iter([(p, c)]));
                let f = Filter::parse(&src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
                agree(&conn, &docs, &f, &src)?;
            }
        }

        /// Conditions built from values the documents really hold, so that
        /// most filters select some documents and not others.
        #[test]
        fn filter_anchored_conditions_agree(
            docs in vec(doc(), 4..=8),
            picks in vec((any::<Selector>(), 0..15usize, any::<Selector>()), 2..=6),
        ) {
            let present = present_values(&docs);
            prop_assume!(!present.is_empty());
            let mut filters = Vec::new();
            for (sel, op, sel2) in &picks {
                let (p, v) = sel.select(&present).clone();
                let (_, w) = sel2.select(&present).clone();
                let ordered = |o: &str, v: &Value| {
                    if v.is_number() || v.is_string() { json!({ o: v }) } else { json!({ "$eq": v }) }
                };
                let cond = match op {
                    0 => v.clone(),
                    1 => json!({"$ne": v}),
                    2 => ordered("$gt", &v),
                    3 => ordered("$gte", &v),
                    4 => ordered("$lt", &v),
                    5 => ordered("$lte", &v),
                    6 => json!({"$in": [v, w]}),
                    7 => json!({"$nin": [v, w]}),
                    8 => json!({"$not": {"$eq": w}}),
                    9 => json!({"$or": [v, w]}),
                    10 => json!({"$exists": true}),
                    // The same content as another JSON type: never equal.
                    11 => cousin(&v),
                    12 => json!({"$in": [cousin(&v), "zz"]}),
                    13 => ordered("$gte", &cousin(&v)),
                    _ => json!({"$in": [w, null]}),
                };
                filters.push(Value::Object(Map::from_iter([(p, cond)])));
            }
            let n = filters.len();
            for i in 0..n - 1 {
                filters.push(json!({"$or": [filters[i], filters[i + 1]]}));
                filters.push(json!({"$and": [filters[i], {"$not": filters[i + 1]}]}));
            }
            let conn = table(&docs);
            for src in &filters {
                let f = Filter::parse(src).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
                agree(&conn, &docs, &f, src)?;
            }
        }

        /// A container's JSON text (as SQLite's json_extract returns it) never
        /// equals or compares with a string.
        #[test]
        fn filter_container_text_is_not_a_string(v in value()) {
            let text = Value::String(v.to_string());
            let docs = vec![json!({"a": v.clone()}), json!({"a": text.clone()})];
            let conn = table(&docs);
            for src in [
                json!({"a": text.clone()}),
                json!({"a": {"$in": [text.clone(), "x"]}}),
                json!({"a": {"$nin": [text.clone(), "x"]}}),
                json!({"a": {"$gte": text.clone()}}),
                json!({"a": {"$lte": text.clone()}}),
                json!({"a": {"$in": [v.clone(), 1]}}),
            ] {
                let f = Filter::parse(&src).unwrap();
                agree(&conn, &docs, &f, &src)?;
            }
        }

        /// Numbers next to each other (int/float twins, +-1, the next float)
        /// under every comparison, alone and inside arrays.
        #[test]
        fn filter_numeric_twins_agree((a, b) in twins()) {
            let docs = vec![json!({"a": a.clone()}), json!({"a": b.clone()}), json!({"a": [a.clone()]})];
            let conn = table(&docs);
            let mut srcs = vec![
                json!({"a": a.clone()}),
                json!({"a": b.clone()}),
                json!({"a": [b.clone()]}),
                json!({"a": {"$ne": b.clone()}}),
                json!({"a": {"$in": [b.clone(), "x"]}}),
                json!({"a": {"$in": [[b.clone()], {"k": 1}]}}),
            ];
            for o in ["$gt", "$gte", "$lt", "$lte"] {
                srcs.push(json!({"a": { o: a.clone() }}));
                srcs.push(json!({"a": { o: b.clone() }}));
            }
            for src in srcs {
                let f = Filter::parse(&src).unwrap();
                agree(&conn, &docs, &f, &src)?;
            }
        }
    }

    /// Arbitrary JSON, likely to be a malformed filter.
    fn wild() -> BoxedStrategy<Value> {
        let keys = select(vec![
            "a",
            "b.c",
            "a..b",
            "",
            " ",
            "bad key",
            "$eq",
            "$ne",
            "$gt",
            "$lt",
            "$in",
            "$nin",
            "$exists",
            "$and",
            "$or",
            "$not",
            "$foo",
            "$",
            "x.$gt",
            "'; DROP TABLE docs;--",
            "\"",
            "a\"b",
            "a'b",
            "é",
            "\u{0}",
        ])
        .prop_map(String::from);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number(),
            string(),
            Just(json!(1e308)),
            Just(json!(-1.7976931348623157e308)),
        ];
        leaf.prop_recursive(6, 48, 4, move |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::Array),
                vec((keys.clone(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Parsing never panics; whatever parses compiles to SQL that runs
        /// and agrees with the evaluator.
        #[test]
        fn filter_parse_of_wild_json_never_panics(src in wild(), docs in vec(doc(), 1..=4)) {
            match Filter::parse(&src) {
                Ok(f) => {
                    let conn = table(&docs);
                    agree(&conn, &docs, &f, &src)?;
                }
                Err(Error::InvalidFilter { reason, .. }) => prop_assert!(!reason.is_empty()),
                Err(e) => prop_assert!(false, "unexpected error {e:?}"),
            }
        }
    }
}
