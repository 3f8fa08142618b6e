//! Store namespaces: validation with LangGraph's messages, the `prefix` column
//! encoding, label-aligned prefix/suffix matching and tuple ordering
//! (docs/design.md, "Namespaces").
//!
//! A namespace is a non-empty tuple of string labels such as
//! `("users", "alice")`. In the file it is stored as the labels joined with
//! `.` (`"users.alice"`), which is lossless because a label can never contain
//! a `.`.
//!
//! LangGraph has two levels of checks, and so does this module:
//!
//! - [`validate_labels`]: every label is a non-empty string without `.` or
//!   NUL. LangGraph runs this on get, search, delete and list_namespaces
//!   (an empty search prefix is fine there).
//! - [`validate_namespace`]: the labels check plus "not empty" and "the root
//!   label is not `langgraph`". LangGraph runs this on put. [`Namespace::new`]
//!   applies it.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::python::{python_str, python_tuple_repr, python_tuple_repr_json, python_type_name};

/// The separator between labels in the file's `prefix` column.
pub(crate) const SEPARATOR: char = '.';

/// A namespace: a tuple of labels such as `("users", "alice")`.
///
/// [`Namespace::new`] validates as LangGraph's `put` does (non-empty, no
/// label empty or containing `.` or NUL, root label not `langgraph`).
/// Namespaces returned by the Store ([`Item::namespace`](super::Item),
/// [`Store::list_namespaces`](super::Store::list_namespaces)) are the file's
/// labels as they are, and can be passed straight back to every Store call;
/// a `list_namespaces` with `max_depth(0)` returns the empty namespace.
///
/// Cloning one is cheap: the labels are shared.
///
/// Namespaces order in **tuple order** (label by label), like Python tuples:
/// `("a", "b") < ("a*",)`. [`fmt::Display`] shows the dot-joined form used in
/// the file (`users.alice`).
///
/// ```
/// use agentstate::store::Namespace;
///
/// let ns = Namespace::new(["users", "alice"]).unwrap();
/// assert_eq!(ns.to_string(), "users.alice");
/// assert_eq!(ns.labels(), ["users", "alice"]);
/// assert!(Namespace::new(["a.b"]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(Arc<[String]>);

impl Namespace {
    /// Validates `labels` as LangGraph's `put` does and wraps them.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] with LangGraph's message when the tuple is
    /// empty, a label is empty or contains `.` or a NUL byte, or the root
    /// label is `langgraph`.
    pub fn new<I, S>(labels: I) -> Result<Namespace>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let labels: Vec<String> = labels.into_iter().map(Into::into).collect();
        validate_namespace(&labels)?;
        Ok(Namespace(labels.into()))
    }

    #[cfg(test)]
    /// Decodes a `prefix` column value (`"users.alice"`) and validates it.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] if the decoded labels break the rules of
    /// [`Namespace::new`] (for example an empty prefix, or `"a..b"`).
    pub(crate) fn from_prefix(prefix: &str) -> Result<Namespace> {
        Namespace::new(Namespace::from_encoded(prefix).iter().cloned())
    }

    /// The labels, root first.
    pub fn labels(&self) -> &[String] {
        &self.0
    }

    /// The labels, root first, by value.
    pub fn into_labels(self) -> Vec<String> {
        self.0.to_vec()
    }

    /// The labels as read from the file or a query, without validation.
    pub(crate) fn from_labels(labels: Vec<String>) -> Namespace {
        Namespace(labels.into())
    }

    /// The namespace of a `prefix` column value: its labels split back
    /// (Python's `tuple(prefix.split("."))`; `""` gives `[""]`). No
    /// validation: a file may hold anything.
    pub(crate) fn from_encoded(prefix: &str) -> Namespace {
        let n = prefix.bytes().filter(|&b| b == b'.').count() + 1;
        let mut labels = prefix.split(SEPARATOR);
        // A range maps to an iterator of known length: `collect` sizes the
        // shared slice once.
        Namespace((0..n).map(|_| labels.next().unwrap_or_default().to_owned()).collect())
    }

    /// The number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True only for the empty namespace (see `max_depth(0)` of
    /// [`Store::list_namespaces`](super::Store::list_namespaces)).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the file's `prefix` column: the labels joined with `.`.
    pub(crate) fn encode(&self) -> String {
        encode_prefix(&self.0)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// A namespace is its labels: `ns[0]`, `ns.iter()`, `ns.len()`.
impl std::ops::Deref for Namespace {
    type Target = [String];
    fn deref(&self) -> &[String] {
        &self.0
    }
}

/// Equal to a list with the same labels.
impl<S: AsRef<str>> PartialEq<Vec<S>> for Namespace {
    fn eq(&self, other: &Vec<S>) -> bool {
        self.0.len() == other.len() && self.0.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

/// Equal to an array with the same labels.
impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Namespace {
    fn eq(&self, other: &[S; N]) -> bool {
        self.0.len() == N && self.0.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

/// Serialized as the JSON array of its labels.
impl serde::Serialize for Namespace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl AsRef<[String]> for Namespace {
    fn as_ref(&self) -> &[String] {
        &self.0
    }
}

impl From<Namespace> for Vec<String> {
    fn from(ns: Namespace) -> Vec<String> {
        ns.0.to_vec()
    }
}

impl TryFrom<Vec<String>> for Namespace {
    type Error = Error;
    fn try_from(labels: Vec<String>) -> Result<Namespace> {
        validate_namespace(&labels)?;
        Ok(Namespace(labels.into()))
    }
}

impl TryFrom<&[String]> for Namespace {
    type Error = Error;
    fn try_from(labels: &[String]) -> Result<Namespace> {
        Namespace::new(labels.iter().cloned())
    }
}

impl TryFrom<&[&str]> for Namespace {
    type Error = Error;
    fn try_from(labels: &[&str]) -> Result<Namespace> {
        Namespace::new(labels.iter().copied())
    }
}

impl<const N: usize> TryFrom<[&str; N]> for Namespace {
    type Error = Error;
    fn try_from(labels: [&str; N]) -> Result<Namespace> {
        Namespace::new(labels)
    }
}

impl TryFrom<&Value> for Namespace {
    type Error = Error;
    fn try_from(value: &Value) -> Result<Namespace> {
        validate_json_namespace(value)
    }
}

// ---------------------------------------------------------------------------
// Validation

/// LangGraph's label checks (`_validate_namespace_labels`), label by label:
/// a label must not contain `.` or a NUL byte and must not be empty. An empty
/// tuple passes (it is the "everything" search prefix).
///
/// # Errors
/// [`Error::InvalidNamespace`] with LangGraph's message for the first bad
/// label, e.g. ``Invalid namespace label 'a.b' found in ('a.b',). Namespace
/// labels cannot contain periods ('.').``
pub(crate) fn validate_labels<S: AsRef<str>>(labels: &[S]) -> Result<()> {
    for label in labels {
        let label = label.as_ref();
        if let Some(problem) = label_problem(label) {
            return Err(label_error(problem, label, &python_tuple_repr(labels)));
        }
    }
    Ok(())
}

/// LangGraph's full namespace check (`_validate_namespace`, run on put):
/// not empty, then [`validate_labels`], then the root label is not
/// `langgraph`.
///
/// # Errors
/// [`Error::InvalidNamespace`] with LangGraph's message: `Namespace cannot be
/// empty.`, a label message from [`validate_labels`], or `Root label for
/// namespace cannot be "langgraph". Got: ('langgraph', 'x')`.
pub(crate) fn validate_namespace<S: AsRef<str>>(labels: &[S]) -> Result<()> {
    if labels.is_empty() {
        return Err(Error::InvalidNamespace("Namespace cannot be empty.".into()));
    }
    validate_labels(labels)?;
    if labels[0].as_ref() == "langgraph" {
        return Err(Error::InvalidNamespace(format!(
            "Root label for namespace cannot be \"langgraph\". Got: {}",
            python_tuple_repr(labels)
        )));
    }
    Ok(())
}

/// Validates a namespace given as JSON (e.g. on a command line): it must be
/// an array; every element must be a string (LangGraph's "must be strings"
/// message names the Python type: `int`, `float`, `bool`, `NoneType`, `list`
/// or `dict`); then the rules of [`validate_namespace`] apply.
///
/// # Errors
/// [`Error::InvalidNamespace`] with LangGraph's message, or saying that the
/// value is not a JSON array.
pub(crate) fn validate_json_namespace(value: &Value) -> Result<Namespace> {
    Namespace::new(validate_json_labels(value)?)
}

/// Like [`validate_json_namespace`] but with only the label checks of
/// [`validate_labels`]: an empty array is accepted (an "everything" search
/// prefix) and so is a root label `langgraph`.
///
/// # Errors
/// [`Error::InvalidNamespace`] as for [`validate_json_namespace`].
pub(crate) fn validate_json_labels(value: &Value) -> Result<Vec<String>> {
    let Value::Array(items) = value else {
        return Err(Error::InvalidNamespace(format!(
            "A namespace must be a JSON array of strings, but got {}.",
            python_type_name(value)
        )));
    };
    let mut labels = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) => {
                if let Some(problem) = label_problem(s) {
                    return Err(label_error(problem, s, &python_tuple_repr_json(items)));
                }
                labels.push(s.clone());
            }
            other => {
                return Err(Error::InvalidNamespace(format!(
                    "Invalid namespace label '{}' found in {}. Namespace labels must be strings, but got {}.",
                    python_str(other),
                    python_tuple_repr_json(items),
                    python_type_name(other)
                )));
            }
        }
    }
    Ok(labels)
}

enum LabelProblem {
    Period,
    Nul,
    Empty,
}

/// LangGraph's message for a bad string label; `ns` is the tuple's repr.
fn label_error(problem: LabelProblem, label: &str, ns: &str) -> Error {
    Error::InvalidNamespace(match problem {
        LabelProblem::Empty => format!("Namespace labels cannot be empty strings. Got  in {ns}"),
        LabelProblem::Period => format!(
            "Invalid namespace label '{label}' found in {ns}. Namespace labels cannot contain periods ('.')."
        ),
        LabelProblem::Nul => format!(
            "Invalid namespace label '{label}' found in {ns}. Namespace labels cannot contain NUL bytes ('\\x00')."
        ),
    })
}

/// The checks in LangGraph's order: period, then NUL, then empty.
fn label_problem(label: &str) -> Option<LabelProblem> {
    if label.contains(SEPARATOR) {
        Some(LabelProblem::Period)
    } else if label.contains('\0') {
        Some(LabelProblem::Nul)
    } else if label.is_empty() {
        Some(LabelProblem::Empty)
    } else {
        None
    }
}

// ---------------------------------------------------------------------------
// The `prefix` column

/// Joins labels with `.` for the file's `prefix` column (`("a","b")` ->
/// `"a.b"`). Lossless for validated labels.
pub(crate) fn encode_prefix<S: AsRef<str>>(labels: &[S]) -> String {
    let mut out = String::new();
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(SEPARATOR);
        }
        out.push_str(l.as_ref());
    }
    out
}

/// Compares two encoded prefixes in **tuple order**: as if each were split on
/// `.` and the label lists compared label by label (see also
/// `tuple_sort_key` for SQL, in the tests).
///
/// It is plain byte order with `.` ranked below every other byte, which is
/// the same thing because labels cannot contain `.` (nor NUL).
pub(crate) fn cmp_encoded(a: &str, b: &str) -> Ordering {
    a.bytes().map(tuple_rank).cmp(b.bytes().map(tuple_rank))
}

/// `.` first, then every other byte in order (`0xff` never occurs in UTF-8).
fn tuple_rank(b: u8) -> u8 {
    if b == b'.' {
        0
    } else {
        b.saturating_add(1)
    }
}

#[cfg(test)]
/// A byte key whose byte order is the **tuple order** of encoded prefixes:
/// every byte of the prefix plus one, and `.` as `0x00` (UTF-8 never uses the
/// byte `0xff`, so nothing overflows). Register it as a deterministic SQL
/// function to sort in tuple order in SQL: `ORDER BY ns_key(prefix)`
/// (SQLite compares blobs with `memcmp`).
pub(crate) fn tuple_sort_key(prefix: &str) -> Vec<u8> {
    prefix.bytes().map(tuple_rank).collect()
}

#[cfg(test)]
/// The first `max_depth` labels of a namespace (all of them if it is shorter).
pub(crate) fn truncate<S: AsRef<str>>(labels: &[S], max_depth: usize) -> Vec<String> {
    labels.iter().take(max_depth).map(|l| l.as_ref().to_owned()).collect()
}

// ---------------------------------------------------------------------------
// Matching

/// One label of a [`MatchCondition`] path: a literal label, or `*`, which
/// matches exactly one label whatever it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// Matches this label exactly (case-sensitive; `*?[]%_+` are ordinary
    /// characters here).
    Literal(String),
    /// `*`: matches any one label.
    Wildcard,
}

impl Label {
    /// True if this pattern matches `label`.
    pub fn matches(&self, label: &str) -> bool {
        match self {
            Label::Literal(l) => l == label,
            Label::Wildcard => true,
        }
    }

    /// The pattern as LangGraph writes it (`"*"` for the wildcard).
    pub fn as_str(&self) -> &str {
        match self {
            Label::Literal(l) => l,
            Label::Wildcard => "*",
        }
    }
}

/// `"*"` is the wildcard (as in LangGraph); anything else is a literal.
impl From<&str> for Label {
    fn from(s: &str) -> Label {
        Label::from(s.to_owned())
    }
}

/// `"*"` is the wildcard (as in LangGraph); anything else is a literal.
impl From<String> for Label {
    fn from(s: String) -> Label {
        if s == "*" {
            Label::Wildcard
        } else {
            Label::Literal(s)
        }
    }
}

/// A `list_namespaces` condition (LangGraph's `MatchCondition`): the
/// namespace must start (`Prefix`) or end (`Suffix`) with the path, aligned on
/// whole labels. Several conditions are ANDed; an empty path matches
/// everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MatchCondition {
    /// The namespace's first labels match the path.
    Prefix(Vec<Label>),
    /// The namespace's last labels match the path.
    Suffix(Vec<Label>),
}

impl MatchCondition {
    /// A prefix condition; `"*"` labels become [`Label::Wildcard`].
    pub fn prefix<I, S>(labels: I) -> MatchCondition
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MatchCondition::Prefix(labels.into_iter().map(|s| Label::from(s.into())).collect())
    }

    /// A suffix condition; `"*"` labels become [`Label::Wildcard`].
    pub fn suffix<I, S>(labels: I) -> MatchCondition
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MatchCondition::Suffix(labels.into_iter().map(|s| Label::from(s.into())).collect())
    }

    /// The path of the condition.
    pub fn path(&self) -> &[Label] {
        match self {
            MatchCondition::Prefix(p) | MatchCondition::Suffix(p) => p,
        }
    }

    /// True if the namespace matches: it has at least as many labels as the
    /// path, and each path label matches the label at the same position
    /// counted from the start (prefix) or from the end (suffix).
    pub fn matches<S: AsRef<str>>(&self, ns: &[S]) -> bool {
        let path = self.path();
        if ns.len() < path.len() {
            return false;
        }
        let start = match self {
            MatchCondition::Prefix(_) => 0,
            MatchCondition::Suffix(_) => ns.len() - path.len(),
        };
        path.iter().zip(&ns[start..]).all(|(p, l)| p.matches(l.as_ref()))
    }

    /// [`MatchCondition::matches`] on an encoded `prefix` column value.
    pub(crate) fn matches_encoded(&self, prefix: &str) -> bool {
        // Label by label from the aligned end, without collecting them.
        fn aligned<'a>(path: &[Label], mut labels: impl Iterator<Item = &'a str>) -> bool {
            path.iter().all(|p| labels.next().is_some_and(|l| p.matches(l)))
        }
        match self {
            MatchCondition::Prefix(p) => aligned(p, prefix.split(SEPARATOR)),
            MatchCondition::Suffix(p) => {
                let n = prefix.split(SEPARATOR).count();
                n >= p.len() && aligned(p, prefix.split(SEPARATOR).skip(n - p.len()))
            }
        }
    }

    /// LangGraph's label checks on the path (its `validate_op_namespace`):
    /// literal labels must be non-empty and free of `.` and NUL.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] as from [`validate_labels`].
    pub(crate) fn validate(&self) -> Result<()> {
        let labels: Vec<&str> = self.path().iter().map(Label::as_str).collect();
        validate_labels(&labels)
    }

    /// For a prefix condition without wildcards, the literal labels (which an
    /// SQL store can push down as a key range); `None` otherwise.
    pub(crate) fn literal_prefix(&self) -> Option<Vec<&str>> {
        match self {
            MatchCondition::Prefix(p) => p
                .iter()
                .map(|l| match l {
                    Label::Literal(s) => Some(s.as_str()),
                    Label::Wildcard => None,
                })
                .collect(),
            MatchCondition::Suffix(_) => None,
        }
    }
}

/// The parameters of the index-friendly SQL condition for "the namespace is
/// `prefix` or lies under it": `(prefix = ? OR (prefix >= ? AND prefix <
/// ?))` bound to [`PrefixRange::exact`], [`PrefixRange::from`] and
/// [`PrefixRange::until`]. A range, not a `GLOB` pattern: SQLite plans with a
/// bound pattern's value, so it would compile the statement again each time
/// one is bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PrefixRange {
    /// The encoded prefix itself (`"a.b"`).
    pub(crate) exact: String,
    /// The prefix and the separator (`"a.b."`): every namespace strictly
    /// below it starts with this...
    pub(crate) from: String,
    /// ...and sorts before this (`"a.b/"`, the separator's successor), in
    /// SQLite's byte order.
    pub(crate) until: String,
}

impl PrefixRange {
    /// `({column} = ? OR ({column} >= ? AND {column} < ?))`, with three
    /// positional parameters to bind in the order `exact`, `from`, `until`.
    pub(crate) fn sql(column: &str) -> String {
        format!("({column} = ? OR ({column} >= ? AND {column} < ?))")
    }
}

/// The [`PrefixRange`] parameters for a literal prefix; `None` for an empty
/// prefix, which matches everything (use `TRUE`).
pub(crate) fn prefix_range<S: AsRef<str>>(prefix: &[S]) -> Option<PrefixRange> {
    if prefix.is_empty() {
        return None;
    }
    let exact = encode_prefix(prefix);
    // '.' + 1: the separator is ASCII.
    let next = char::from(SEPARATOR as u8 + 1);
    Some(PrefixRange { from: format!("{exact}{SEPARATOR}"), until: format!("{exact}{next}"), exact })
}

#[cfg(test)]
#[path = "namespace_tests.rs"]
mod tests;
