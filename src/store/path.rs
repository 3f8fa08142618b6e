//! Field paths: which texts of an item get embedded, and under which
//! `field_name` (docs/design.md, "Store search"). Everything here reproduces
//! LangGraph's Python behaviour exactly, including its spelling of values as
//! text (`str()` of Python scalars, `json.dumps(..., sort_keys=True,
//! ensure_ascii=False)` of lists and objects), so that a file written here and
//! one written by Python embed the same texts.
//!
//! Path syntax: `a.b` (nested keys), `a[0]` / `a[-1]` (list index), `a[*]`
//! (every list element), `*` (every value of an object or element of a list),
//! `a.{b,c.d}` (several fields of an object; anything after the braces is
//! ignored), and `$` (the whole document).

use serde_json::{Map, Value};

use crate::python::{python_bool, python_json_dumps_sorted, python_number};

/// Splits a path into tokens as LangGraph's `tokenize_path` does.
///
/// `.` separates tokens and empty tokens are dropped; `[` and `{` start a
/// token that runs to the matching `]` / `}` (nesting counted) and keeps its
/// brackets; an unterminated bracket takes the rest of the string:
/// `a[*].b` -> `["a", "[*]", "b"]`, `a.{b,c}` -> `["a", "{b,c}"]`.
pub(crate) fn tokenize_path(path: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' | '{' => {
                let close = if c == '[' { ']' } else { '}' };
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
                let mut token = String::from(c);
                let mut depth = 1usize;
                for d in chars.by_ref() {
                    token.push(d);
                    if d == c {
                        depth += 1;
                    } else if d == close {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                }
                tokens.push(token);
            }
            '.' => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// The texts found at `path` in `doc`, as LangGraph's `get_text_at_path`
/// returns them. `""` and `"$"` give the whole document as sorted JSON.
///
/// Leaves become text the Python way: a string is itself, an integer its
/// digits, a float Python's `repr` (`1.0`, `1e+16`), a boolean `True` /
/// `False`, a list or object [`python_json_dumps_sorted`]; `null` gives
/// nothing. A path that does not match gives an empty list.
///
/// ```
/// use agentstate::store::path::get_text_at_path;
/// use serde_json::json;
/// let doc = json!({"arr": [{"t": "one", "u": 1}, {"t": "two"}], "f": 1.0});
/// assert_eq!(get_text_at_path(&doc, "arr[*].t"), ["one", "two"]);
/// assert_eq!(get_text_at_path(&doc, "arr[0].{t,u}"), ["one", "1"]);
/// assert_eq!(get_text_at_path(&doc, "f"), ["1.0"]);
/// ```
#[cfg(test)]
pub(crate) fn get_text_at_path(doc: &Value, path: &str) -> Vec<String> {
    if path.is_empty() || path == "$" {
        return vec![python_json_dumps_sorted(doc)];
    }
    get_text_at_tokens(doc, &tokenize_path(path))
}

/// `get_text_at_path` (the tests' reference) with a pre-tokenized path. An empty token list gives
/// the whole document; a token `"$"` is an ordinary key here (LangGraph's
/// behaviour for a pre-tokenized path).
pub(crate) fn get_text_at_tokens<S: AsRef<str>>(doc: &Value, tokens: &[S]) -> Vec<String> {
    if tokens.is_empty() {
        return vec![python_json_dumps_sorted(doc)];
    }
    let mut out = Vec::new();
    extract(doc, tokens, &mut out);
    out
}

fn extract<S: AsRef<str>>(obj: &Value, tokens: &[S], out: &mut Vec<String>) {
    let Some((token, rest)) = tokens.split_first() else {
        out.extend(leaf_text(obj));
        return;
    };
    let token = token.as_ref();
    if let Some(index) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let Value::Array(items) = obj else { return };
        if index == "*" {
            for item in items {
                extract(item, rest, out);
            }
        } else if let Some(item) = python_int(index).and_then(|i| list_index(items.len(), i)) {
            extract(&items[item], rest, out);
        }
    } else if let Some(fields) = token.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        // Tokens after the braces are ignored, as in LangGraph.
        let Value::Object(map) = obj else { return };
        for field in fields.split(',') {
            let nested = tokenize_path(python_strip(field));
            if nested.is_empty() {
                continue;
            }
            if let Some(v) = follow_keys(map, &nested) {
                out.extend(leaf_text(v));
            }
        }
    } else if token == "*" {
        match obj {
            Value::Object(map) => map.values().for_each(|v| extract(v, rest, out)),
            Value::Array(items) => items.iter().for_each(|v| extract(v, rest, out)),
            _ => {}
        }
    } else if let Value::Object(map) = obj {
        if let Some(v) = map.get(token) {
            extract(v, rest, out);
        }
    }
}

/// Follows `keys` through objects only (brackets are plain keys here).
fn follow_keys<'a>(map: &'a Map<String, Value>, keys: &[String]) -> Option<&'a Value> {
    let (first, rest) = keys.split_first()?;
    let mut current = map.get(first)?;
    for key in rest {
        current = current.as_object()?.get(key)?;
    }
    Some(current)
}

fn leaf_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(python_bool(*b).to_owned()),
        Value::Number(n) => Some(python_number(n)),
        Value::String(s) => Some(s.clone()),
        Value::Array(_) | Value::Object(_) => Some(python_json_dumps_sorted(v)),
    }
}

/// Resolves a Python list index (negative counts from the end).
fn list_index(len: usize, i: i128) -> Option<usize> {
    let len = i128::try_from(len).ok()?;
    let i = if i < 0 { i + len } else { i };
    if (0..len).contains(&i) {
        usize::try_from(i).ok()
    } else {
        None
    }
}

/// Python's `int(text)` for ASCII digits: surrounding whitespace, an optional
/// sign, and single `_` between digits are allowed. Values beyond `i128` are
/// clamped (they are out of range for any list anyway). Non-ASCII decimal
/// digits, which Python also accepts, are not.
fn python_int(text: &str) -> Option<i128> {
    let t = python_strip(text);
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let d = c.to_digit(10)?;
        value = value.saturating_mul(10).saturating_add(i128::from(d));
    }
    Some(if neg { -value } else { value })
}

/// Python's `str.strip()` with no argument.
fn python_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

// ---------------------------------------------------------------------------
// Vector fields

/// One entry of the effective field list of a put: the path as written
/// (which names the vectors) and how it is looked up.
///
/// The two constructors reproduce a LangGraph quirk: a *configured* field
/// `"$"` means the whole document, but a *per-put* `index=["$"]` is
/// tokenized and looks up a key literally named `$` (so it usually embeds
/// nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexField {
    path: String,
    /// `None`: the whole document.
    tokens: Option<Vec<String>>,
}

impl IndexField {
    /// A field from the store's index configuration: `"$"` is the whole
    /// document, anything else is tokenized.
    pub fn configured(path: impl Into<String>) -> IndexField {
        let path = path.into();
        let tokens = if path == "$" { None } else { Some(tokenize_path(&path)) };
        IndexField { path, tokens }
    }

    /// A field from a put's own `index` list: always tokenized, even `"$"`.
    pub fn per_put(path: impl Into<String>) -> IndexField {
        let path = path.into();
        let tokens = Some(tokenize_path(&path));
        IndexField { path, tokens }
    }

    /// The path as written; it names the vectors.
    #[cfg(test)]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// True if this field embeds the whole document.
    #[cfg(test)]
    pub fn is_whole_document(&self) -> bool {
        match &self.tokens {
            None => true,
            Some(tokens) => tokens.is_empty(),
        }
    }

    /// The texts of `doc` at this field.
    pub fn texts(&self, doc: &Value) -> Vec<String> {
        match &self.tokens {
            None => vec![python_json_dumps_sorted(doc)],
            Some(tokens) => get_text_at_tokens(doc, tokens),
        }
    }
}

/// The configured field list: `paths`, or `["$"]` (the whole document) when
/// it is empty, as LangGraph defaults it.
pub(crate) fn configured_fields<S: AsRef<str>>(paths: &[S]) -> Vec<IndexField> {
    if paths.is_empty() {
        return vec![IndexField::configured("$")];
    }
    paths.iter().map(|p| IndexField::configured(p.as_ref())).collect()
}

/// The field list of a put's own `index` list (each path tokenized).
pub(crate) fn per_put_fields<S: AsRef<str>>(paths: &[S]) -> Vec<IndexField> {
    paths.iter().map(|p| IndexField::per_put(p.as_ref())).collect()
}

/// The `(field_name, text)` pairs to embed for `doc` under the effective
/// field list (configured fields, a put's own `index` list, or an empty list
/// for `index=false`).
///
/// A path that yields exactly one text names its vector with the path
/// itself; one that yields several names them `path.0`, `path.1`, ...; one
/// that yields none adds nothing. If two fields produce the same name, the
/// later text wins (Python's `INSERT OR REPLACE` keeps the last row), at the
/// position of the first.
pub(crate) fn field_texts(doc: &Value, fields: &[IndexField]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for field in fields {
        let texts = field.texts(doc);
        let many = texts.len() > 1;
        for (i, text) in texts.into_iter().enumerate() {
            let name = if many { format!("{}.{i}", field.path) } else { field.path.clone() };
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = text,
                None => out.push((name, text)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::python::python_float_repr;

    fn toks(p: &str) -> Vec<String> {
        tokenize_path(p)
    }

    #[test]
    fn paths_tokenize_as_langgraph_does() {
        assert_eq!(toks("a[*].b"), ["a", "[*]", "b"]);
        assert_eq!(toks("a.{b,c}"), ["a", "{b,c}"]);
        assert_eq!(toks("a..b"), ["a", "b"]);
        assert_eq!(toks("a[[0]]"), ["a", "[[0]]"]);
        assert!(toks("").is_empty());
        assert_eq!(toks(".a."), ["a"]);
        assert_eq!(toks("a[0][1]"), ["a", "[0]", "[1]"]);
        assert_eq!(toks("a{b}c"), ["a", "{b}", "c"]);
        assert_eq!(toks("a["), ["a", "["]);
        assert_eq!(toks("a{b.c"), ["a", "{b.c"]);
        assert_eq!(toks("a b. c"), ["a b", " c"]);
        assert_eq!(toks("$"), ["$"]);
        assert_eq!(toks("{a{b}c}.d"), ["{a{b}c}", "d"]);
        assert_eq!(toks("[a.b]x"), ["[a.b]", "x"]);
        assert_eq!(toks("a[{]}"), ["a", "[{]", "}"]);
    }

    #[test]
    fn scalars_are_spelled_as_python_str() {
        let doc = json!({"b": true, "f": 1.0, "n": null});
        assert_eq!(get_text_at_path(&doc, "b"), ["True"]);
        assert_eq!(get_text_at_path(&doc, "f"), ["1.0"]);
        assert!(get_text_at_path(&doc, "n").is_empty());
        assert!(get_text_at_path(&doc, "missing").is_empty());
    }

    #[test]
    fn containers_are_spelled_as_sorted_python_json() {
        let doc = json!({"x": {"b": 2, "a": [1, "é"]}});
        assert_eq!(get_text_at_path(&doc, "x"), [r#"{"a": [1, "é"], "b": 2}"#]);
        assert_eq!(get_text_at_path(&doc, "$"), [r#"{"x": {"a": [1, "é"], "b": 2}}"#]);
        assert_eq!(get_text_at_path(&doc, ""), get_text_at_path(&doc, "$"));
        assert_eq!(get_text_at_tokens::<&str>(&doc, &[]), get_text_at_path(&doc, "$"));
    }

    #[test]
    fn list_indexes_wildcards_and_braces_select_texts() {
        let doc = json!({"arr": [{"t": "one", "u": 1}, {"t": "two"}, {"u": 2}]});
        assert_eq!(get_text_at_path(&doc, "arr[*].{t,u}"), ["one", "1", "two", "2"]);
        assert_eq!(get_text_at_path(&doc, "arr[1].t"), ["two"]);
        assert_eq!(get_text_at_path(&doc, "arr[-1].u"), ["2"]);
        assert!(get_text_at_path(&doc, "arr[9]").is_empty());
        assert_eq!(get_text_at_path(&doc, "{arr}.t"), [r#"[{"t": "one", "u": 1}, {"t": "two"}, {"u": 2}]"#]);
    }

    #[test]
    fn documented_path_examples_give_langgraphs_texts() {
        let doc = json!({
            "l": [1, "x", null, [2], {"k": "v"}],
            "arr": [{"t": "one", "u": 1}, {"t": "two"}, {"u": 2}],
        });
        assert_eq!(get_text_at_path(&doc, "l[*]"), ["1", "x", "[2]", r#"{"k": "v"}"#]);
        assert_eq!(get_text_at_path(&doc, "arr[*].t"), ["one", "two"]);
        assert_eq!(get_text_at_path(&doc, "arr[*].{t,u}"), ["one", "1", "two", "2"]);
        assert_eq!(get_text_at_path(&doc, "l[-1]"), [r#"{"k": "v"}"#]);
        assert!(get_text_at_path(&doc, "l[-6]").is_empty());
        assert_eq!(get_text_at_path(&doc, "l[-5]"), ["1"]);
        // Names on lists and scalars, brackets on objects: nothing.
        assert!(get_text_at_path(&doc, "l.0").is_empty());
        assert!(get_text_at_path(&doc, "arr[0].t.x").is_empty());
        assert!(get_text_at_path(&doc, "[0]").is_empty());
        assert!(get_text_at_path(&doc, "l[x]").is_empty());
        assert!(get_text_at_path(&doc, "l[]").is_empty());
        assert!(get_text_at_path(&doc, "{l}[0]").len() == 1);
    }

    // Outputs of LangGraph 4.3.2's get_text_at_path on the same inputs.
    #[test]
    fn more_python_outputs() {
        let doc = json!({
            "a": {"b": {"c": "deep"}, "n": 3, "$": "dollar", "[0]": "bracket-key"},
            "l": [10, 20.5, true, null],
            "m": [[1, 2], [3]],
            "e": "",
            "big": 12345678901234567890u64,
            "neg": -7,
        });
        let cases: &[(&str, &[&str])] = &[
            ("a.*", &[r#"{"c": "deep"}"#, "3", "dollar", "bracket-key"]),
            (
                "*",
                &[
                    r#"{"$": "dollar", "[0]": "bracket-key", "b": {"c": "deep"}, "n": 3}"#,
                    "[10, 20.5, true, null]",
                    "[[1, 2], [3]]",
                    "",
                    "12345678901234567890",
                    "-7",
                ],
            ),
            ("l[*]", &["10", "20.5", "True"]),
            ("l[ 1 ]", &["20.5"]),
            ("l[+1]", &["20.5"]),
            ("l[-0]", &["10"]),
            ("l[0_1]", &["20.5"]),
            ("l[1__0]", &[]),
            ("l[99999999999999999999999999999999999999999999]", &[]),
            ("m[*][0]", &["1", "3"]),
            ("m[*][*]", &["1", "2", "3"]),
            ("m[-1][-1]", &["3"]),
            ("a.{b.c, n ,missing,,$}", &["deep", "3", "dollar"]),
            ("a.{[0]}", &["bracket-key"]),
            ("a.{b}", &[r#"{"c": "deep"}"#]),
            ("a.$", &["dollar"]),
            ("e", &[""]),
            ("*.n", &["3"]),
            ("l.*", &["10", "20.5", "True"]),
            ("a[", &[]),
        ];
        for (path, want) in cases {
            assert_eq!(get_text_at_path(&doc, path), *want, "{path}");
        }
    }

    #[test]
    fn python_float_repr_matches_python() {
        // repr() of these floats in CPython 3.11.
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (2.5, "2.5"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (9999999999999998.0, "9999999999999998.0"),
            (1.5e16, "1.5e+16"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (-2.5e-10, "-2.5e-10"),
            (1e100, "1e+100"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (100.0, "100.0"),
            (-123.456, "-123.456"),
            (1.0 / 3.0, "0.3333333333333333"),
            (2.0 / 3.0, "0.6666666666666666"),
            (123456.789, "123456.789"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for (x, want) in cases {
            assert_eq!(python_float_repr(*x), *want, "{x:e}");
        }
        // Exact ties between two shortest candidates: Python keeps the even
        // last digit where Rust's `{:e}` rounds up.
        let ties: &[(u64, &str)] = &[
            (0xc306_e227_f83e_892a, "-805138848010533.2"),
            (0x42b7_fa57_c450_e950, "26363981746409.312"),
            (0x4261_2eed_2d8a_ed00, "590413917271.4062"),
            (0xc2e4_9e82_6fe1_dc84, "-181368206069476.12"),
        ];
        for (bits, want) in ties {
            assert_eq!(python_float_repr(f64::from_bits(*bits)), *want);
        }
    }

    #[test]
    fn python_json_dumps_sorted_matches_python() {
        let doc = json!({
            "z": [1, 1.0, 1e16, -0.5, true, false, null],
            "a": {"y": "q\"b\\s/", "x": "\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é\u{2028}🙂"},
            "B": {},
            "é": [],
            "": "empty key",
        });
        assert_eq!(
            python_json_dumps_sorted(&doc),
            "{\"\": \"empty key\", \"B\": {}, \"a\": {\"x\": \"\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}é\u{2028}🙂\", \
             \"y\": \"q\\\"b\\\\s/\"}, \"z\": [1, 1.0, 1e+16, -0.5, true, false, null], \"é\": []}"
        );
    }

    #[test]
    fn vector_names_follow_langgraphs_rules() {
        let doc = json!({"text": "abcd", "arr": ["a", "bb"]});
        let got = field_texts(&doc, &per_put_fields(&["text", "arr[*]"]));
        assert_eq!(
            got,
            [
                ("text".to_string(), "abcd".to_string()),
                ("arr[*].0".to_string(), "a".to_string()),
                ("arr[*].1".to_string(), "bb".to_string()),
            ]
        );
        let one = json!({"text": "abcd", "arr": ["a"]});
        let got = field_texts(&one, &per_put_fields(&["arr[*]"]));
        assert_eq!(got, [("arr[*]".to_string(), "a".to_string())]);
        // The quirk: a per-put "$" looks up a key named "$".
        assert!(field_texts(&doc, &per_put_fields(&["$"])).is_empty());
        assert_eq!(
            field_texts(&json!({"$": "x"}), &per_put_fields(&["$"])),
            [("$".to_string(), "x".to_string())]
        );
        // A configured "$" (and the default) is the whole document.
        let whole = vec![("$".to_string(), r#"{"arr": ["a", "bb"], "text": "abcd"}"#.to_string())];
        assert_eq!(field_texts(&doc, &configured_fields(&["$"])), whole);
        assert_eq!(field_texts(&doc, &configured_fields::<&str>(&[])), whole);
        assert!(IndexField::configured("$").is_whole_document());
        assert!(!IndexField::per_put("$").is_whole_document());
        // An empty path is the whole document in both cases (falsy in Python).
        assert!(IndexField::per_put("").is_whole_document());
        assert_eq!(field_texts(&doc, &per_put_fields(&[""]))[0].0, "");
        // index=false: an empty field list.
        assert!(field_texts(&doc, &[]).is_empty());
        // Missing paths add nothing; names are the paths as written.
        let got = field_texts(&doc, &configured_fields(&["missing", "arr[0]", "text"]));
        assert_eq!(got.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["arr[0]", "text"]);
        // The same name twice: the last text wins.
        let got = field_texts(&json!({"p": {"0": "a"}, "q": "b"}), &per_put_fields(&["*", "*.0"]));
        assert_eq!(got, [("*.0".to_string(), "a".to_string()), ("*.1".to_string(), "b".to_string())]);
        assert_eq!(IndexField::configured("a.b").path(), "a.b");
    }
}
