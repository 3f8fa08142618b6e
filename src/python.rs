//! Python spellings: `repr()`, `str()`, `json.dumps(sort_keys=True)` and
//! float `repr`, reproduced exactly so that LangGraph's error messages and
//! the texts it embeds come out the same from this crate.

use serde_json::{Number, Value};

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
pub(crate) fn python_str_repr(s: &str) -> String {
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
pub(crate) fn python_tuple_repr<S: AsRef<str>>(labels: &[S]) -> String {
    let items: Vec<String> = labels.iter().map(|l| python_str_repr(l.as_ref())).collect();
    tuple_of(&items)
}

pub(crate) fn python_tuple_repr_json(items: &[Value]) -> String {
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
pub(crate) fn python_repr(v: &Value) -> String {
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
pub(crate) fn python_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => python_repr(other),
    }
}

pub(crate) fn python_type_name(v: &Value) -> &'static str {
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

// ---------------------------------------------------------------------------
// Python spellings

pub(crate) fn python_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Python's `str()` of a JSON number: integers as digits, floats as
/// [`python_float_repr`].
pub(crate) fn python_number(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() => python_float_repr(f),
        _ => n.to_string(),
    }
}

/// Python's `repr()` of a float: the shortest digits that round-trip;
/// positional notation when the decimal exponent is in `-4..16`, with `.0`
/// added to integral values (`1.0`, `1000000000000000.0`, `0.0001`);
/// scientific notation otherwise, with a signed exponent of at least two
/// digits (`1e+16`, `1.5e-07`). Also `inf`, `-inf`, `nan`, `-0.0`.
pub(crate) fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sci = shortest_sci(x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let digits = match digits.trim_end_matches('0') {
        "" => "0",
        d => d,
    };
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{exp_sign}{:02}", exp.unsigned_abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
    } else {
        let (int, frac) = digits.split_at(int_len);
        format!("{sign}{int}.{frac}")
    }
}

/// The shortest round-trip digits of a positive finite `x` in Rust's `{:e}`
/// form (`1.5e-7`), tie-broken as Python (David Gay's `dtoa` mode 0) does:
/// among the shortest strings that round-trip, the one closest to `x`, and
/// on an exact tie the even last digit. Rust's `{:e}` finds the shortest
/// length but may pick the other candidate on a tie, so the correctly rounded
/// string of that length (`{:.N$e}` rounds half to even) is preferred when it
/// round-trips.
fn shortest_sci(x: f64) -> String {
    let shortest = format!("{x:e}");
    let mantissa = shortest.split_once('e').map_or(shortest.as_str(), |(m, _)| m);
    let n = mantissa.chars().filter(char::is_ascii_digit).count();
    let rounded = format!("{:.*e}", n.saturating_sub(1), x);
    if rounded != shortest && rounded.parse::<f64>() == Ok(x) {
        rounded
    } else {
        shortest
    }
}

/// Python's `json.dumps(value, sort_keys=True, ensure_ascii=False)`: keys
/// sorted by code point, `", "` and `": "` separators, Python float repr
/// inside (`1.0`, `1e+16`), non-ASCII text as is, and only `"`, `\`, and
/// control characters below U+0020 escaped (`\n`, `\u001b`, ...).
pub(crate) fn python_json_dumps_sorted(value: &Value) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

fn write_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&python_number(n)),
        Value::String(s) => write_json_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(v, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json_str(k, out);
                out.push_str(": ");
                write_json(v, out);
            }
            out.push('}');
        }
    }
}

fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}
