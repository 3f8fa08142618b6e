//! The proptest generators of filters and documents, shared by every
//! property test of the filter language.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{json, Map, Number, Value};

pub(super) fn num(n: impl Into<Number>) -> Value {
    Value::Number(n.into())
}

pub(super) fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Numbers where SQL and Rust could disagree: int/float twins, both ends
/// of i64 and u64, the f64 integer limit, random bits.
pub(super) fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (-3i64..=3).prop_map(num),
        2 => select(vec![0.5, 1.0, -0.0, 0.0, 1.5, 2.0, -3.0, 3.0, -1.5]).prop_map(float),
        2 => select(vec![
            i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1, 1 << 53, (1 << 53) + 1, -(1 << 53) - 1,
        ])
        .prop_map(num),
        2 => select(vec![
            u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 1, (1 << 63) + 1024, (1 << 63) + 2048,
            10_000_000_000_000_000_000,
        ])
        .prop_map(num),
        2 => select(vec![
            9_223_372_036_854_775_808.0, -9_223_372_036_854_775_808.0, 18_446_744_073_709_551_616.0,
            9_007_199_254_740_992.0, 9_007_199_254_740_994.0, 1e300, -1e-300, 9_223_372_036_854_775_807.0,
        ])
        .prop_map(float),
        1 => any::<i64>().prop_map(num),
        1 => any::<u64>().prop_map(num),
        1 => any::<f64>().prop_map(float),
        1 => (-1e6..1e6f64).prop_map(float),
    ]
    .boxed()
}

pub(super) fn string() -> BoxedStrategy<Value> {
    select(vec![
        "",
        "a",
        "b",
        "ab",
        "A",
        "B",
        "é",
        "z",
        "1",
        "true",
        "null",
        "[1]",
        "{}",
        "a\u{0}b",
        "\"",
        "\\",
        "'; DROP TABLE docs;--",
        "?",
        "😀",
    ])
    .prop_map(|s| Value::String(s.into()))
    .boxed()
}

/// Scalars from a small pool, so that operands often equal document
/// values, or from the wide strategies above.
pub(super) fn scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        6 => select(vec![
            json!(0), json!(1), json!(1.0), json!(2), json!(-1), json!(1.5), json!("a"), json!("b"), json!(""),
            json!(true), json!(false), json!(null),
        ]),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => number(),
        2 => string(),
    ]
    .boxed()
}

/// Object keys: ASCII and Cyrillic, so that non-ASCII keys go through the
/// SQL paths too.
pub(super) fn key() -> BoxedStrategy<String> {
    select(vec!["a", "b", "ключ"]).prop_map(String::from).boxed()
}

pub(super) fn object(inner: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    vec((key(), inner), 0..=max).prop_map(|kv| Value::Object(kv.into_iter().collect())).boxed()
}

/// Any JSON value over the small key alphabet (no `$` keys).
pub(super) fn value() -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(3, 24, 3, |inner| {
            prop_oneof![vec(inner.clone(), 0..3).prop_map(Value::Array), object(inner, 3)]
        })
        .boxed()
}

pub(super) fn doc() -> BoxedStrategy<Value> {
    let dense = vec((key(), value()), 1..=4).prop_map(|kv| Value::Object(kv.into_iter().collect()));
    prop_oneof![20 => dense, 1 => Just(Value::Null), 1 => value()].boxed()
}

pub(super) fn path() -> BoxedStrategy<String> {
    prop_oneof![
        3 => key(),
        2 => (key(), key()).prop_map(|(a, b)| format!("{a}.{b}")),
        1 => (key(), key(), key()).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
    ]
    .boxed()
}

pub(super) fn op(name: &str, operand: Value) -> Value {
    Value::Object(Map::from_iter([(name.to_owned(), operand)]))
}

pub(super) fn ordered() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => select(vec![json!(0), json!(1), json!(1.0), json!(1.5), json!(2), json!("a"), json!("b"), json!("")]),
        2 => number(),
        1 => string(),
    ]
    .boxed()
}

/// A condition on one path.
pub(super) fn condition() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        4 => value(),
        2 => value().prop_map(|v| op("$eq", v)),
        2 => value().prop_map(|v| op("$ne", v)),
        3 => (select(vec!["$gt", "$gte", "$lt", "$lte"]), ordered()).prop_map(|(o, v)| op(o, v)),
        1 => (ordered(), ordered()).prop_map(|(lo, hi)| json!({"$gte": lo, "$lt": hi})),
        2 => vec(value(), 0..4).prop_map(|l| op("$in", Value::Array(l))),
        1 => vec(value(), 0..4).prop_map(|l| op("$nin", Value::Array(l))),
        1 => any::<bool>().prop_map(|b| op("$exists", Value::Bool(b))),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| op("$not", c)),
            vec(inner.clone(), 1..3).prop_map(|l| op("$or", Value::Array(l))),
            vec(inner.clone(), 1..3).prop_map(|l| op("$and", Value::Array(l))),
            // A partial match: plain keys with conditions.
            vec((path(), inner), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

pub(super) fn filter() -> BoxedStrategy<Value> {
    let leaf = vec((path(), condition()), 0..3).prop_map(|kv| Value::Object(kv.into_iter().collect()));
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 1..3).prop_map(|l| op("$and", Value::Array(l))),
            vec(inner.clone(), 1..3).prop_map(|l| op("$or", Value::Array(l))),
            inner.clone().prop_map(|f| op("$not", f)),
            (vec(inner, 1..3), path(), condition()).prop_map(|(l, p, c)| {
                let mut m = Map::new();
                m.insert("$or".into(), Value::Array(l));
                m.insert(p, c);
                Value::Object(m)
            }),
        ]
    })
    .boxed()
}

/// The next float towards +inf (`up`) or -inf.
pub(super) fn next_float(f: f64, up: bool) -> f64 {
    if f == 0.0 {
        let tiny = f64::from_bits(1);
        return if up { tiny } else { -tiny };
    }
    let bits = f.to_bits();
    f64::from_bits(if (f > 0.0) == up { bits + 1 } else { bits - 1 })
}

/// A number and one of its neighbours.
pub(super) fn twins() -> BoxedStrategy<(Value, Value)> {
    number()
        .prop_flat_map(|a| {
            let n = a.as_number().cloned().unwrap_or_else(|| Number::from(0));
            let f = n.as_f64().unwrap_or(0.0);
            let mut near = vec![a.clone(), float(f), float(next_float(f, true)), float(next_float(f, false))];
            if let Some(i) = n.as_i64() {
                near.extend([num(i.saturating_add(1)), num(i.saturating_sub(1))]);
            }
            if let Some(u) = n.as_u64() {
                near.extend([num(u.saturating_add(1)), num(u.saturating_sub(1))]);
            }
            if f.fract() == 0.0 && f.abs() < 1.9e19 {
                // Saturating float-to-int casts: the integer twin of a float.
                near.extend([num(f as i64), num(f as u64)]);
            }
            (Just(a), select(near))
        })
        .boxed()
}

/// A value of another JSON type that SQL could confuse with `v`: `true`
/// and 1, 1 and "1", an array and its JSON text.
pub(super) fn cousin(v: &Value) -> Value {
    match v {
        Value::Null => json!(0),
        Value::Bool(b) => json!(i64::from(*b)),
        Value::Number(n) if n.as_f64() == Some(1.0) => json!(true),
        Value::Number(n) if n.as_f64() == Some(0.0) => json!(false),
        Value::Number(n) => Value::String(n.to_string()),
        Value::String(s) => {
            serde_json::from_str::<Value>(s).ok().filter(|p| !p.is_string()).unwrap_or_else(|| json!(s.len()))
        }
        Value::Array(_) | Value::Object(_) => Value::String(v.to_string()),
    }
}

/// Every (dotted path, value) present in `docs`, through objects only.
pub(super) fn present_values(docs: &[Value]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, &Value)> = docs.iter().map(|d| (String::new(), d)).collect();
    while let Some((prefix, v)) = stack.pop() {
        if let Value::Object(m) = v {
            for (k, c) in m {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.push((p.clone(), c.clone()));
                stack.push((p, c));
            }
        }
    }
    out
}

/// Arbitrary JSON, likely to be a malformed filter.
pub(super) fn wild() -> BoxedStrategy<Value> {
    let keys = select(vec![
        "a",
        "b.c",
        "a..b",
        "",
        " ",
        "bad key",
        "$eq",
        "$ne",
        "$gt",
        "$lt",
        "$in",
        "$nin",
        "$exists",
        "$and",
        "$or",
        "$not",
        "$foo",
        "$",
        "x.$gt",
        "'; DROP TABLE docs;--",
        "\"",
        "a\"b",
        "a'b",
        "é",
        "\u{0}",
        ".a",
        "a.",
        "$gte",
        "$lte",
        "$$",
        "\") OR 1=1 --",
        "a\\b",
        "a[0]",
        "*",
        "ключ",
        "ключ.b",
        "٣",
    ])
    .prop_map(String::from);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string(),
        Just(json!(1e308)),
        Just(json!(-1.7976931348623157e308)),
    ];
    leaf.prop_recursive(6, 48, 4, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((keys.clone(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

pub(super) fn config(cases: u32) -> ProptestConfig {
    // XorShift: ChaCha dominates the run time of unoptimized test builds.
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}
