//! The SQL compiler: a parsed filter to an SQLite boolean expression over a
//! column holding the document as JSON text.
//!
//! Every literal, paths included, is a bound parameter. Types are checked
//! with `json_type`, so that `true` never equals `1` and strings never
//! compare with numbers; arrays and objects compare through the functions of
//! [`super::functions`]. Every atom evaluates to 0 or 1, never NULL, so that
//! `NOT` is exact.

use std::fmt::Write as _;

use rusqlite::types::Value as SqlValue;
use serde_json::Value;

use super::ast::{Bound, CmpOp, Node, Num, Test};

impl CmpOp {
    fn sql(self) -> &'static str {
        match self {
            CmpOp::Gt => ">",
            CmpOp::Gte => ">=",
            CmpOp::Lt => "<",
            CmpOp::Lte => "<=",
        }
    }
}

impl Num {
    fn to_sql(self) -> SqlValue {
        match self {
            Num::Int(i) => SqlValue::Integer(i),
            Num::Real(r) => SqlValue::Real(r),
        }
    }
}

/// Compiles `root` to an SQL boolean expression over the JSON document in
/// `column`, with its bound parameters in order (see [`super::Filter::to_sql`]).
pub(super) fn compile(root: &Node, column: &str) -> (String, Vec<SqlValue>) {
    let simple =
        !column.is_empty() && column.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'));
    let col = if simple { format!("CAST({column} AS TEXT)") } else { format!("CAST(({column}) AS TEXT)") };
    let mut gen = SqlGen { col, sql: String::new(), params: Vec::new() };
    gen.node(root);
    (gen.sql, gen.params)
}

/// SQL for "the value is a number" given `json_type` (may be NULL).
const IS_NUMBER: &str = "IN ('integer', 'real')";

/// An `$in` / `$nin` list of numbers or strings longer than this is bound
/// as one JSON array rather than one parameter per element.
const LONG_LIST: usize = 16;

/// The kind of values a list of [`SqlGen::in_many`] holds.
#[derive(Clone, Copy)]
enum Kind {
    Number,
    Text,
    /// Arrays and objects.
    Container,
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
                    // Segments hold only letters, digits, `_` and `-` (never
                    // a quote or a backslash): quoting needs no escapes.
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
    /// or several strings; for several arrays and objects, one call of
    /// `agentstate_json_in` with the list as a JSON array.
    fn in_many(&mut self, p: &str, many: &[&Value], kind: Kind) {
        if let Kind::Container = kind {
            self.push("(coalesce(");
            self.json_type(p);
            self.push(", '') IN ('array', 'object') AND agentstate_json_in(");
            self.json_sub(p);
            self.push(", ");
            let arr = Value::Array(many.iter().map(|v| (*v).clone()).collect());
            self.param(SqlValue::Text(arr.to_string()));
            self.push("))");
            return;
        }
        self.push("(");
        self.json_extract(p);
        if many.len() > LONG_LIST {
            // One parameter, the list as JSON, instead of one per element:
            // SQLite binds at most 32 766 in a statement. Its elements are
            // read by SQLite's JSON parser, as the document's are.
            self.push(" IN (SELECT value FROM json_each(");
            let arr = Value::Array(many.iter().map(|v| (*v).clone()).collect());
            self.param(SqlValue::Text(arr.to_string()));
            self.push(")");
        } else {
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
        }
        match kind {
            Kind::Number => {
                self.push(") AND coalesce(");
                self.json_type(p);
                let _ = write!(self.sql, ", '') {IS_NUMBER})");
            }
            Kind::Text | Kind::Container => {
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
        let groups = [(&nums, Kind::Number), (&strs, Kind::Text), (&containers, Kind::Container)];
        for (group, kind) in groups {
            match group.as_slice() {
                [] => {}
                [one] => {
                    sep(self);
                    self.eq(p, one);
                }
                many => {
                    sep(self);
                    self.in_many(p, many, kind);
                }
            }
        }
        if pieces > 1 {
            self.push(")");
        }
    }
}
