//! Store namespaces: validation with LangGraph's messages, the `prefix` column
//! encoding, label-aligned prefix/suffix matching and tuple ordering
//! (DESIGN.md decision 13; reference sections 7.3, 7.4, 9.2 and 9.6).
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
use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use super::path::python_number;
use crate::error::{Error, Result};

/// The separator between labels in the file's `prefix` column.
pub const SEPARATOR: char = '.';

/// A validated namespace: a non-empty tuple of labels, none empty, none
/// containing `.` or NUL, and a root label other than `langgraph`.
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
pub struct Namespace(Vec<String>);

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
        Ok(Namespace(labels))
    }

    /// Decodes a `prefix` column value (`"users.alice"`) and validates it.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] if the decoded labels break the rules of
    /// [`Namespace::new`] (for example an empty prefix, or `"a..b"`).
    pub fn from_prefix(prefix: &str) -> Result<Namespace> {
        Namespace::new(decode_prefix(prefix))
    }

    /// The labels, root first.
    pub fn labels(&self) -> &[String] {
        &self.0
    }

    /// The labels, root first, by value.
    pub fn into_labels(self) -> Vec<String> {
        self.0
    }

    /// The number of labels (at least 1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a namespace has at least one label. Present for API
    /// symmetry with [`Namespace::len`].
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of the file's `prefix` column: the labels joined with `.`.
    pub fn encode(&self) -> String {
        encode_prefix(&self.0)
    }

    /// Python's `repr` of the tuple, as LangGraph's messages show it:
    /// `('users', 'alice')`.
    pub fn python_repr(&self) -> String {
        python_tuple_repr(&self.0)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

impl AsRef<[String]> for Namespace {
    fn as_ref(&self) -> &[String] {
        &self.0
    }
}

impl From<Namespace> for Vec<String> {
    fn from(ns: Namespace) -> Vec<String> {
        ns.0
    }
}

impl TryFrom<Vec<String>> for Namespace {
    type Error = Error;
    fn try_from(labels: Vec<String>) -> Result<Namespace> {
        validate_namespace(&labels)?;
        Ok(Namespace(labels))
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
pub fn validate_labels<S: AsRef<str>>(labels: &[S]) -> Result<()> {
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
pub fn validate_namespace<S: AsRef<str>>(labels: &[S]) -> Result<()> {
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
pub fn validate_json_namespace(value: &Value) -> Result<Namespace> {
    Namespace::new(validate_json_labels(value)?)
}

/// Like [`validate_json_namespace`] but with only the label checks of
/// [`validate_labels`]: an empty array is accepted (an "everything" search
/// prefix) and so is a root label `langgraph`.
///
/// # Errors
/// [`Error::InvalidNamespace`] as for [`validate_json_namespace`].
pub fn validate_json_labels(value: &Value) -> Result<Vec<String>> {
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
pub fn encode_prefix<S: AsRef<str>>(labels: &[S]) -> String {
    let mut out = String::new();
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            out.push(SEPARATOR);
        }
        out.push_str(l.as_ref());
    }
    out
}

/// Splits a `prefix` column value back into labels (Python's
/// `tuple(prefix.split("."))`; `""` gives `[""]`). No validation: a file may
/// hold anything.
pub fn decode_prefix(prefix: &str) -> Vec<String> {
    prefix.split(SEPARATOR).map(str::to_owned).collect()
}

/// Compares two encoded prefixes in **tuple order**: as if each were split on
/// `.` and the label lists compared label by label (see also
/// [`tuple_sort_key`] for SQL).
///
/// It is plain byte order with `.` ranked below every other byte, which is
/// the same thing because labels cannot contain `.` (nor NUL).
pub fn cmp_encoded(a: &str, b: &str) -> Ordering {
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

/// A byte key whose byte order is the **tuple order** of encoded prefixes:
/// every byte of the prefix plus one, and `.` as `0x00` (UTF-8 never uses the
/// byte `0xff`, so nothing overflows). Register it as a deterministic SQL
/// function to sort in tuple order in SQL: `ORDER BY ns_key(prefix)`
/// (SQLite compares blobs with `memcmp`).
pub fn tuple_sort_key(prefix: &str) -> Vec<u8> {
    prefix.bytes().map(tuple_rank).collect()
}

/// The first `max_depth` labels of a namespace (all of them if it is shorter).
pub fn truncate<S: AsRef<str>>(labels: &[S], max_depth: usize) -> Vec<String> {
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
    pub fn matches_encoded(&self, prefix: &str) -> bool {
        let labels: Vec<&str> = prefix.split(SEPARATOR).collect();
        self.matches(&labels)
    }

    /// LangGraph's label checks on the path (its `validate_op_namespace`):
    /// literal labels must be non-empty and free of `.` and NUL.
    ///
    /// # Errors
    /// [`Error::InvalidNamespace`] as from [`validate_labels`].
    pub fn validate(&self) -> Result<()> {
        let labels: Vec<&str> = self.path().iter().map(Label::as_str).collect();
        validate_labels(&labels)
    }

    /// For a prefix condition without wildcards, the literal labels (which an
    /// SQL store can push down with [`prefix_glob`]); `None` otherwise.
    pub fn literal_prefix(&self) -> Option<Vec<&str>> {
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
/// `prefix` or lies under it" (reference 9.5): `(prefix = ? OR prefix GLOB
/// ?)` bound to [`PrefixGlob::exact`] and [`PrefixGlob::glob`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixGlob {
    /// The encoded prefix itself (`"a.b"`).
    pub exact: String,
    /// The escaped prefix followed by `.*` (`"a.b.*"`), matching every
    /// namespace strictly below it.
    pub glob: String,
}

impl PrefixGlob {
    /// `({column} = ? OR {column} GLOB ?)`, with two positional parameters
    /// to bind in the order `exact`, `glob`.
    pub fn sql(column: &str) -> String {
        format!("({column} = ? OR {column} GLOB ?)")
    }
}

/// The [`PrefixGlob`] parameters for a literal prefix; `None` for an empty
/// prefix, which matches everything (use `TRUE`).
pub fn prefix_glob<S: AsRef<str>>(prefix: &[S]) -> Option<PrefixGlob> {
    if prefix.is_empty() {
        return None;
    }
    let exact = encode_prefix(prefix);
    let glob = format!("{}{SEPARATOR}*", escape_glob(&exact));
    Some(PrefixGlob { exact, glob })
}

/// Escapes SQLite GLOB metacharacters so that they match literally:
/// `[` -> `[[]`, `*` -> `[*]`, `?` -> `[?]`. (`]` alone is literal in GLOB,
/// and `%`, `_`, `+` are not GLOB metacharacters.)
pub fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '[' => out.push_str("[[]"),
            '*' => out.push_str("[*]"),
            '?' => out.push_str("[?]"),
            c => out.push(c),
        }
    }
    out
}

/// The whole of `list_namespaces` after the rows are fetched: keep the
/// namespaces matching every condition, truncate them to `max_depth` labels,
/// de-duplicate, sort in tuple order, then apply `offset` and `limit`.
///
/// Tuple order deliberately differs from Python SqliteStore's text order
/// (DESIGN.md decision 13). `max_depth = Some(0)` gives one empty namespace,
/// as LangGraph's InMemoryStore does.
pub fn list_namespaces<I, S>(
    namespaces: I,
    conditions: &[MatchCondition],
    max_depth: Option<usize>,
    limit: usize,
    offset: usize,
) -> Vec<Vec<String>>
where
    I: IntoIterator<Item = S>,
    S: AsRef<[String]>,
{
    let mut set = BTreeSet::new();
    for ns in namespaces {
        let ns = ns.as_ref();
        if conditions.iter().all(|c| c.matches(ns)) {
            let depth = max_depth.unwrap_or(ns.len());
            set.insert(truncate(ns, depth));
        }
    }
    set.into_iter().skip(offset).take(limit).collect()
}

// ---------------------------------------------------------------------------
// Python repr, for LangGraph's messages

/// Python's `repr()` of a str: single quotes unless the text has a `'` and no
/// `"`; backslash escapes for `\\`, the quote, `\t`, `\n`, `\r`; other
/// non-printable characters as `\xNN`, `\uNNNN` or `\UNNNNNNNN`.
///
/// "Non-printable" follows Python's `str.isprintable` for control, format,
/// separator, private-use, surrogate and non-character code points; code
/// points that are merely unassigned in Python's Unicode database are shown
/// as they are.
pub fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_python_printable(c) => {
                let cp = u32::from(c);
                if cp < 0x100 {
                    out.push_str(&format!("\\x{cp:02x}"));
                } else if cp < 0x10000 {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` of a tuple of str: `()`, `('a',)`, `('a', 'b')`.
pub fn python_tuple_repr<S: AsRef<str>>(labels: &[S]) -> String {
    let items: Vec<String> = labels.iter().map(|l| python_str_repr(l.as_ref())).collect();
    tuple_of(&items)
}

fn python_tuple_repr_json(items: &[Value]) -> String {
    let items: Vec<String> = items.iter().map(python_repr).collect();
    tuple_of(&items)
}

fn tuple_of(items: &[String]) -> String {
    match items {
        [one] => format!("({one},)"),
        _ => format!("({})", items.join(", ")),
    }
}

/// Python's `repr()` of the value `json.loads` would give.
fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => python_number(n),
        Value::String(s) => python_str_repr(s),
        Value::Array(a) => {
            format!("[{}]", a.iter().map(python_repr).collect::<Vec<_>>().join(", "))
        }
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", python_str_repr(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Python's `str()`: the text itself for a str, `repr()` otherwise.
fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => python_repr(other),
    }
}

fn python_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// An approximation of Python's `str.isprintable()` for one character: false
/// for categories Cc, Cf, Cs, Co, Zl, Zp, Zs (except the space), and the
/// non-characters.
fn is_python_printable(c: char) -> bool {
    let cp = u32::from(c);
    if cp < 0x7f {
        return cp >= 0x20;
    }
    if cp <= 0xa0 || cp == 0xad {
        return false;
    }
    // Non-characters (category Cn in every Unicode version).
    if (0xfdd0..=0xfdef).contains(&cp) || (cp & 0xfffe) == 0xfffe {
        return false;
    }
    const NON_PRINTABLE: &[(u32, u32)] = &[
        (0x0600, 0x0605),    // Arabic number signs (Cf)
        (0x061c, 0x061c),    // Arabic letter mark (Cf)
        (0x06dd, 0x06dd),    // Cf
        (0x070f, 0x070f),    // Cf
        (0x0890, 0x0891),    // Cf
        (0x08e2, 0x08e2),    // Cf
        (0x1680, 0x1680),    // Ogham space mark (Zs)
        (0x180e, 0x180e),    // Mongolian vowel separator (Cf)
        (0x2000, 0x200f),    // spaces (Zs), zero-width and direction marks (Cf)
        (0x2028, 0x202f),    // line/paragraph separators, embeddings, narrow nbsp
        (0x205f, 0x2064),    // medium math space (Zs), invisible operators (Cf)
        (0x2066, 0x206f),    // isolates and deprecated format characters (Cf)
        (0x3000, 0x3000),    // ideographic space (Zs)
        (0xd800, 0xdfff),    // surrogates (Cs; cannot occur in a Rust str)
        (0xe000, 0xf8ff),    // private use (Co)
        (0xfeff, 0xfeff),    // byte order mark (Cf)
        (0xfff9, 0xfffb),    // interlinear annotation (Cf)
        (0x110bd, 0x110bd),  // Cf
        (0x110cd, 0x110cd),  // Cf
        (0x13430, 0x1343f),  // Egyptian hieroglyph format controls (Cf)
        (0x1bca0, 0x1bca3),  // shorthand format controls (Cf)
        (0x1d173, 0x1d17a),  // musical symbol format controls (Cf)
        (0xe0001, 0xe0001),  // language tag (Cf)
        (0xe0020, 0xe007f),  // tag characters (Cf)
        (0xf0000, 0x10ffff), // supplementary private use (Co)
    ];
    !NON_PRINTABLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn msg(r: Result<impl fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidNamespace(m)) => m,
            other => panic!("expected InvalidNamespace, got {other:?}"),
        }
    }

    fn ns(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|s| s.to_string()).collect()
    }

    // Reference case 42.
    #[test]
    fn case_42_messages() {
        assert_eq!(msg(Namespace::new(Vec::<String>::new())), "Namespace cannot be empty.");
        assert_eq!(
            msg(Namespace::new(["a.b"])),
            "Invalid namespace label 'a.b' found in ('a.b',). Namespace labels cannot contain periods ('.')."
        );
        assert_eq!(msg(Namespace::new([""])), "Namespace labels cannot be empty strings. Got  in ('',)");
        assert_eq!(
            msg(Namespace::new(["langgraph", "x"])),
            "Root label for namespace cannot be \"langgraph\". Got: ('langgraph', 'x')"
        );
        assert_eq!(
            msg(validate_json_namespace(&json!([1]))),
            "Invalid namespace label '1' found in (1,). Namespace labels must be strings, but got int."
        );
        assert_eq!(
            msg(Namespace::new(["a", "b\0c"])),
            "Invalid namespace label 'b\0c' found in ('a', 'b\\x00c'). Namespace labels cannot contain NUL bytes ('\\x00')."
        );
    }

    #[test]
    fn checks_run_in_langgraphs_order() {
        // Labels are checked one by one: the first bad label wins, and within
        // a label the period check comes before the NUL check.
        assert!(msg(Namespace::new(["", "a.b"])).starts_with("Namespace labels cannot be empty"));
        assert!(msg(Namespace::new(["a.\0"])).ends_with("cannot contain periods ('.')."));
        // The root check comes after every label check.
        assert!(msg(Namespace::new(["langgraph", ""])).starts_with("Namespace labels cannot be empty"));
        // Label-only checks accept an empty tuple and a `langgraph` root.
        validate_labels::<&str>(&[]).unwrap();
        validate_labels(&["langgraph", "x"]).unwrap();
        assert!(validate_labels(&["a", "b.c"]).is_err());
    }

    #[test]
    fn json_namespaces() {
        let cases = [
            (json!([1.5]), "Invalid namespace label '1.5' found in (1.5,). Namespace labels must be strings, but got float."),
            (json!(["a", true]), "Invalid namespace label 'True' found in ('a', True). Namespace labels must be strings, but got bool."),
            (json!([null]), "Invalid namespace label 'None' found in (None,). Namespace labels must be strings, but got NoneType."),
            (json!(["x", [1, "y"]]), "Invalid namespace label '[1, 'y']' found in ('x', [1, 'y']). Namespace labels must be strings, but got list."),
            (json!([{"k": 1e16}]), "Invalid namespace label '{'k': 1e+16}' found in ({'k': 1e+16},). Namespace labels must be strings, but got dict."),
            (json!(["a.b", 1]), "Invalid namespace label 'a.b' found in ('a.b', 1). Namespace labels cannot contain periods ('.')."),
            (json!([]), "Namespace cannot be empty."),
            (json!(["langgraph"]), "Root label for namespace cannot be \"langgraph\". Got: ('langgraph',)"),
        ];
        for (v, want) in cases {
            assert_eq!(msg(validate_json_namespace(&v)), want, "{v}");
        }
        assert!(msg(validate_json_namespace(&json!("a"))).contains("JSON array"));
        let ok = validate_json_namespace(&json!(["users", "alice"])).unwrap();
        assert_eq!(ok.labels(), ["users", "alice"]);
        assert_eq!(validate_json_labels(&json!([])).unwrap(), Vec::<String>::new());
        assert_eq!(Namespace::try_from(&json!(["a"])).unwrap().labels(), ["a"]);
    }

    #[test]
    fn python_repr_of_str() {
        let cases = [
            ("a", "'a'"),
            ("it's", "\"it's\""),
            ("say \"hi\"", "'say \"hi\"'"),
            ("both ' \"", "'both \\' \"'"),
            ("back\\slash", "'back\\\\slash'"),
            ("t\tn\nr\r", "'t\\tn\\nr\\r'"),
            ("\x01\x1f\x7f", "'\\x01\\x1f\\x7f'"),
            ("\u{85}\u{a0}\u{ad}é", "'\\x85\\xa0\\xadé'"),
            ("\u{200b}\u{2028}\u{feff}", "'\\u200b\\u2028\\ufeff'"),
            ("\u{e000}\u{10ffff}", "'\\ue000\\U0010ffff'"),
            ("日本 🙂", "'日本 🙂'"),
        ];
        for (s, want) in cases {
            assert_eq!(python_str_repr(s), want, "{s:?}");
        }
        assert_eq!(python_tuple_repr::<&str>(&[]), "()");
        assert_eq!(python_tuple_repr(&["a"]), "('a',)");
        assert_eq!(python_tuple_repr(&["a", "b"]), "('a', 'b')");
    }

    #[test]
    fn namespace_type() {
        let n = Namespace::try_from(["users", "alice"]).unwrap();
        assert_eq!(n.to_string(), "users.alice");
        assert_eq!(n.encode(), "users.alice");
        assert_eq!(n.len(), 2);
        assert!(!n.is_empty());
        assert_eq!(n.python_repr(), "('users', 'alice')");
        assert_eq!(Namespace::from_prefix("users.alice").unwrap(), n);
        assert!(Namespace::from_prefix("").is_err());
        assert!(Namespace::from_prefix("a..b").is_err());
        let labels: &[&str] = &["x"];
        assert_eq!(Namespace::try_from(labels).unwrap().into_labels(), ["x"]);
        assert_eq!(Namespace::try_from(ns(&["x", "y"])).unwrap().as_ref(), ["x", "y"]);
        assert!(Namespace::try_from(ns(&["x", ""])).is_err());
        // Any other character is fine.
        Namespace::new(["star*", "q?m", "br[ack]et", "user_1", "a%b", "plus+", "new\nline", " "]).unwrap();
        // Tuple order, not text order.
        assert!(Namespace::new(["a", "b"]).unwrap() < Namespace::new(["a*"]).unwrap());
    }

    #[test]
    fn prefix_encoding_round_trips() {
        for labels in [ns(&["a"]), ns(&["users", "alice", "memories"]), ns(&["x y", "é", "*"])] {
            assert_eq!(decode_prefix(&encode_prefix(&labels)), labels);
        }
        assert_eq!(encode_prefix(&["a", "b"]), "a.b");
        assert_eq!(decode_prefix(""), [""]);
    }

    #[test]
    fn encoded_orders_are_tuple_order() {
        let all = [
            ns(&["A"]),
            ns(&["a"]),
            ns(&["a", "b"]),
            ns(&["a", "b", "c"]),
            ns(&["a", "b*"]),
            ns(&["a", "bc"]),
            ns(&["a*"]),
            ns(&["a-c"]),
            ns(&["a_"]),
            ns(&["ab"]),
            ns(&["b"]),
            ns(&["é"]),
        ];
        for x in &all {
            for y in &all {
                let (ex, ey) = (encode_prefix(x), encode_prefix(y));
                assert_eq!(cmp_encoded(&ex, &ey), x.cmp(y), "{x:?} {y:?}");
                assert_eq!(tuple_sort_key(&ex).cmp(&tuple_sort_key(&ey)), x.cmp(y), "{x:?} {y:?}");
            }
        }
    }

    // Reference case 49.
    #[test]
    fn case_49_prefix_suffix_depth() {
        let all = [
            ns(&["a", "b", "c"]),
            ns(&["a", "b", "d", "e"]),
            ns(&["a", "b", "d", "i"]),
            ns(&["a", "b", "f"]),
            ns(&["a", "c", "f"]),
        ];
        let got = list_namespaces(&all, &[MatchCondition::prefix(["a", "b"])], Some(3), 100, 0);
        assert_eq!(got, [ns(&["a", "b", "c"]), ns(&["a", "b", "d"]), ns(&["a", "b", "f"])]);
        let got = list_namespaces(&all, &[MatchCondition::suffix(["f"])], None, 100, 0);
        assert_eq!(got, [ns(&["a", "b", "f"]), ns(&["a", "c", "f"])]);
        let got = list_namespaces(&all, &[MatchCondition::prefix(["a", "*"])], None, 100, 0);
        assert_eq!(got, all);
        // ANDed conditions, offset and limit after de-duplication.
        let both = [MatchCondition::prefix(["a", "b"]), MatchCondition::suffix(["*", "f"])];
        assert_eq!(list_namespaces(&all, &both, None, 100, 0), [ns(&["a", "b", "f"])]);
        assert_eq!(list_namespaces(&all, &[], Some(2), 100, 0), [ns(&["a", "b"]), ns(&["a", "c"])]);
        assert_eq!(list_namespaces(&all, &[], Some(2), 1, 1), [ns(&["a", "c"])]);
        assert_eq!(list_namespaces(&all, &[], None, 0, 0), Vec::<Vec<String>>::new());
        assert_eq!(list_namespaces(&all, &[], Some(0), 100, 0), [Vec::<String>::new()]);
        // An empty path matches everything.
        assert_eq!(list_namespaces(&all, &[MatchCondition::suffix(Vec::<String>::new())], None, 100, 0), all);
    }

    // Reference case 50.
    #[test]
    fn case_50_label_alignment() {
        let all = [
            ns(&["uid", "users", "alice"]),
            ns(&["uid", "users", "malice"]),
            ns(&["uid", "a", "b", "alice"]),
        ];
        let got = list_namespaces(&all, &[MatchCondition::suffix(["alice"])], None, 100, 0);
        assert_eq!(got, [ns(&["uid", "a", "b", "alice"]), ns(&["uid", "users", "alice"])]);
        let got = list_namespaces(&all, &[MatchCondition::prefix(["uid", "*", "alice"])], None, 100, 0);
        assert_eq!(got, [ns(&["uid", "users", "alice"])]);
        assert!(!MatchCondition::suffix(["alice"]).matches(&["users", "alice\n"]));
        assert!(!MatchCondition::prefix(["a", "b"]).matches(&["a"]));
        assert!(MatchCondition::suffix(["*"]).matches_encoded("x.y"));
        assert!(!MatchCondition::suffix(["x"]).matches_encoded("x.y"));
    }

    const METACHAR_LABELS: [(&str, &str); 6] = [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXet"),
        ("user_1", "userX1"),
        ("a%b", "aXb"),
        ("plus+", "plusX"),
    ];

    // Reference case 51, the matching part: literal labels never act as
    // patterns, in Rust and in the SQL pushdown.
    #[test]
    fn case_51_metacharacters_are_literal() {
        let mut all = vec![];
        for (label, decoy) in METACHAR_LABELS {
            all.extend([ns(&[label]), ns(&[label, "child"]), ns(&[decoy]), ns(&[decoy, "child"])]);
        }
        for (label, _) in METACHAR_LABELS {
            let got = list_namespaces(&all, &[MatchCondition::prefix([label])], None, 100, 0);
            assert_eq!(got, [ns(&[label]), ns(&[label, "child"])], "{label}");
            assert_eq!(sql_prefix_matches(&all, &[label]), [ns(&[label]), ns(&[label, "child"])], "{label}");
        }
        assert_eq!(escape_glob("a[b]*c?"), "a[[]b][*]c[?]");
        assert_eq!(
            prefix_glob(&["star*", "q?m"]).unwrap(),
            PrefixGlob { exact: "star*.q?m".into(), glob: "star[*].q[?]m.*".into() }
        );
        assert_eq!(prefix_glob::<&str>(&[]), None);
        assert_eq!(MatchCondition::prefix(["a", "b"]).literal_prefix(), Some(vec!["a", "b"]));
        assert_eq!(MatchCondition::prefix(["a", "*"]).literal_prefix(), None);
        assert_eq!(MatchCondition::suffix(["a"]).literal_prefix(), None);
    }

    /// Runs the pushed-down condition in SQLite over `all`, in tuple order.
    fn sql_prefix_matches(all: &[Vec<String>], prefix: &[&str]) -> Vec<Vec<String>> {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.create_scalar_function(
            "ns_key",
            1,
            rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
            |ctx| Ok(tuple_sort_key(&ctx.get::<String>(0)?)),
        )
        .unwrap();
        conn.execute("CREATE TABLE t (prefix TEXT NOT NULL)", []).unwrap();
        for n in all {
            conn.execute("INSERT INTO t VALUES (?1)", [encode_prefix(n)]).unwrap();
        }
        let (sql, params) = match prefix_glob(prefix) {
            Some(g) => (PrefixGlob::sql("prefix"), vec![g.exact, g.glob]),
            None => ("1".to_string(), vec![]),
        };
        let mut stmt =
            conn.prepare(&format!("SELECT prefix FROM t WHERE {sql} ORDER BY ns_key(prefix)")).unwrap();
        let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| r.get::<_, String>(0)).unwrap();
        rows.map(|r| decode_prefix(&r.unwrap())).collect()
    }

    // Reference case 52.
    #[test]
    fn case_52_search_prefix_boundaries() {
        let all = [ns(&["foo"]), ns(&["foo", "child"]), ns(&["foobar"]), ns(&["foo2"])];
        let under = |p: &[&str]| -> Vec<Vec<String>> {
            let rust = list_namespaces(&all, &[MatchCondition::prefix(p.iter().copied())], None, 100, 0);
            assert_eq!(sql_prefix_matches(&all, p), rust, "{p:?}");
            rust
        };
        assert_eq!(under(&["foo"]), [ns(&["foo"]), ns(&["foo", "child"])]);
        assert_eq!(under(&["fo"]), Vec::<Vec<String>>::new());
        assert_eq!(under(&[]).len(), 4);
        assert_eq!(under(&["Foo"]), Vec::<Vec<String>>::new());
    }

    // Reference case 53, in TUPLE order. Python's SqliteStore returns
    // [("A",),("a*",),("a-c",),("a","b"),("a_",),("b",)] (text order of the
    // dot-joined prefix); agentstate deliberately sorts label by label like
    // InMemoryStore (DESIGN.md decision 13), so ("a","b") comes right after
    // ("A",).
    #[test]
    fn case_53_tuple_order_not_text_order() {
        let all = [ns(&["A"]), ns(&["a*"]), ns(&["a-c"]), ns(&["a", "b"]), ns(&["a_"]), ns(&["b"])];
        let want = [ns(&["A"]), ns(&["a", "b"]), ns(&["a*"]), ns(&["a-c"]), ns(&["a_"]), ns(&["b"])];
        assert_eq!(list_namespaces(&all, &[], None, 100, 0), want);
        assert_eq!(sql_prefix_matches(&all, &[]), want);
    }

    #[test]
    fn condition_validation() {
        MatchCondition::prefix(["a", "*"]).validate().unwrap();
        assert!(msg(MatchCondition::suffix(["a.b"]).validate()).contains("cannot contain periods"));
        assert_eq!(MatchCondition::prefix(["*", "x"]).path(), [Label::Wildcard, Label::Literal("x".into())]);
        assert_eq!(Label::Wildcard.as_str(), "*");
    }
}
