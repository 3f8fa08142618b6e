//! The SQL functions that compiled filters call, registered on every pooled
//! connection.

use std::convert::Infallible;

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use serde_json::Value;

use super::eval::json_eq;

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
