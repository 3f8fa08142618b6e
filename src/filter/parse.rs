//! Parsing: a JSON filter object to the tree of [`Node`]s, with the error
//! messages LangGraph gives for the same mistakes.

use serde_json::{Map, Value};

use super::ast::{all, any, Bound, CmpOp, Node, Num, Test};
use crate::error::{Error, Result};
use crate::json::too_deep;

/// How many levels of JSON objects and arrays a filter may nest.
pub(super) const MAX_DEPTH: usize = 32;

/// Parses a whole filter: it must be a JSON object nested at most
/// [`MAX_DEPTH`] levels.
pub(super) fn parse_filter(filter: &Value) -> Result<Node> {
    let obj = filter.as_object().ok_or_else(|| {
        Error::invalid_filter("", format!("Invalid filter: expected a JSON object, got {}", kind(filter)))
    })?;
    if too_deep(filter, MAX_DEPTH) {
        return Err(Error::invalid_filter(
            "",
            format!("Invalid filter: nested more than {MAX_DEPTH} levels of objects and arrays"),
        ));
    }
    parse_filter_object(obj, &[])
}

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

/// True for a character a filter key may hold: any Unicode letter or digit,
/// `_`, `-`, and `.` (which separates path segments). None of them needs
/// escaping in a quoted SQLite JSON path label, and keys are bound as
/// parameters anyway.
fn key_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Splits a validated key into its path segments.
fn parse_key(key: &str) -> Result<impl Iterator<Item = String> + '_> {
    let valid = !key.is_empty() && key.chars().all(key_char) && key.split('.').all(|s| !s.is_empty());
    if valid {
        Ok(key.split('.').map(str::to_owned))
    } else {
        Err(bad_key(key))
    }
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
