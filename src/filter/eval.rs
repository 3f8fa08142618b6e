//! The Rust evaluator: a parsed filter against a [`serde_json::Value`], with
//! the comparison rules SQLite applies, so that it agrees with the compiled
//! SQL on every document.

use std::cmp::Ordering;

use serde_json::Value;

use super::ast::{Bound, CmpOp, Node, Num, Test};

impl CmpOp {
    fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Gte => o != Ordering::Less,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Lte => o != Ordering::Greater,
        }
    }
}

impl Num {
    /// Exact comparison (as SQLite's `sqlite3IntFloatCompare`); `None` only for NaN.
    fn cmp(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Real(a), Num::Real(b)) => a.partial_cmp(&b),
            (Num::Int(a), Num::Real(b)) => int_real_cmp(a, b),
            (Num::Real(a), Num::Int(b)) => int_real_cmp(b, a).map(Ordering::reverse),
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
pub(super) fn json_eq(a: &Value, b: &Value) -> bool {
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
pub(super) fn lookup<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
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
}

impl Node {
    /// Evaluates with `look` giving the value at a path.
    pub(super) fn eval<'v, L: Fn(&[String]) -> Option<&'v Value>>(&self, look: &L) -> bool {
        match self {
            Node::All(v) => v.iter().all(|n| n.eval(look)),
            Node::Any(v) => v.iter().any(|n| n.eval(look)),
            Node::Not(n) => !n.eval(look),
            Node::Test(path, t) => t.eval(look(path)),
        }
    }
}
