//! The filter language shared by Store search and checkpoint metadata (the
//! choices behind it are in the "Filter language" section of
//! `docs/design.md`).
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
//!   contain only letters and digits (of any script: `"ключ"` is a key),
//!   `_`, `-` and `.`, and no segment may be empty (`"a..b"`, `".a"` and `"a."` are rejected). Paths walk objects
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
//! included), and compile to at most 32 000 SQL parameters (each element of
//! an `$in`/`$nin` list is one, each condition's path two or three), what
//! one SQLite statement can bind. Malformed filters give
//! [`Error::InvalidFilter`]; parsing never panics.
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

mod ast;
mod eval;
mod functions;
mod parse;
mod sql;
#[cfg(test)]
mod tests;

use rusqlite::types::Value as SqlValue;
use serde_json::Value;

use crate::error::{Error, Result};
use ast::Node;

/// The most bound parameters (paths and values) a filter compiles to.
const MAX_SQL_PARAMS: usize = 32_000;

pub(crate) use functions::register_functions;

/// A parsed filter. Build it with [`Filter::parse`]; evaluate it with
/// [`Filter::matches`]. See the [module documentation](self) for the language.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    root: Node,
}

impl Filter {
    /// Parses a JSON filter object. `{}` matches everything.
    ///
    /// # Errors
    /// [`Error::InvalidFilter`], whose message names the offending key or
    /// operator, when:
    /// * `filter` is not a JSON object;
    /// * a key has characters other than letters, digits (of any script),
    ///   `_`, `-` and `.`, or an empty segment (LangGraph's message: `Invalid filter key:
    ///   '<k>'. Filter keys must contain only alphanumeric characters,
    ///   underscores, dots, and hyphens.`);
    /// * an operator is unknown (`Unsupported operator: $op`);
    /// * an operator object also has plain keys;
    /// * an operand has the wrong shape (`$gt` with a boolean, `$in` without an
    ///   array, `$exists` without a boolean, an empty `$or`, ...);
    /// * the filter nests more than 32 levels of objects and arrays;
    /// * the filter is too large for one SQLite statement: more than 32 000
    ///   paths and values once compiled (a condition counts its path two or
    ///   three times; an `$in` or `$nin` list counts one per element up to 16
    ///   elements of a kind, and once when longer: a list of any length fits).
    pub fn parse(filter: &Value) -> Result<Filter> {
        let root = parse::parse_filter(filter)?;
        // Searches and lists run the filter in SQL (SQLite binds at most
        // 32 766 parameters in a statement, a few of them the query's own):
        // refuse here what they could not run, so that every way of
        // evaluating a filter accepts the same ones.
        let params = sql::compile(&root, "d").1.len();
        if params > MAX_SQL_PARAMS {
            return Err(Error::invalid_filter(
                "",
                format!(
                    "Invalid filter: too large ({params} paths and values once compiled to SQL, at most \
                     {MAX_SQL_PARAMS}): split it into several queries, or use shorter $in/$nin lists"
                ),
            ));
        }
        Ok(Filter { root })
    }

    /// True if the filter has no conditions (such as `{}`), so it matches
    /// every document.
    pub fn is_empty(&self) -> bool {
        matches!(&self.root, Node::All(v) if v.is_empty())
    }

    /// True if `doc` matches (the Rust evaluator). A document that is not an
    /// object has no keys: every path is missing in it.
    pub fn matches(&self, doc: &Value) -> bool {
        self.root.eval(&|path: &[String]| eval::lookup(doc, path))
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
        eval::lookup(doc, path)
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
        sql::compile(&self.root, column)
    }
}
