//! The parsed form of a filter: a boolean tree over tests on paths, with the
//! rewrites the parser relies on (flattening, implied object checks).

use serde_json::{Number, Value};

/// The parsed form: a boolean tree over tests on paths.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
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
pub(super) enum Test {
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

/// `$gt`, `$gte`, `$lt` or `$lte`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// The operand of `$gt`/`$gte`/`$lt`/`$lte`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Bound {
    Num(Num),
    Str(String),
}

/// A JSON number as SQLite holds it: an integer literal within the `i64`
/// range is an integer, everything else the nearest double.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Num {
    Int(i64),
    Real(f64),
}

impl Num {
    pub(super) fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::Int(i)
        } else if let Some(u) = n.as_u64() {
            // Rounds to nearest, ties to even: what SQLite's JSON parser yields.
            Num::Real(u as f64)
        } else {
            Num::Real(n.as_f64().unwrap_or(f64::NAN))
        }
    }
}

impl Test {
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
    pub(super) fn collect_paths<'a>(&'a self, out: &mut Vec<&'a [String]>) {
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
    pub(super) fn implies_object(&self, path: &[String]) -> bool {
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
pub(super) fn all(parts: Vec<Node>) -> Node {
    combine(parts, true)
}

/// ORs `parts`, flattening nested disjunctions.
pub(super) fn any(parts: Vec<Node>) -> Node {
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
