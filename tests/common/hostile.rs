//! Hostile-input strategies shared by `tests/reliability_input*.rs`:
//! strings that break naive code, extreme numbers, and JSON trees of any
//! depth.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunConfig, TestRunner};
use serde_json::{json, Value};

use super::harness::soak;

pub fn runner(cases: u32) -> TestRunner {
    TestRunner::new(RunConfig {
        cases: cases * soak(20) as u32,
        failure_persistence: None,
        ..RunConfig::default()
    })
}

/// The most nested levels of arrays and objects a stored JSON document may
/// have: JSON readers (serde_json's included) refuse deeper text.
pub const MAX_STORED_DEPTH: usize = 127;

// ---------------------------------------------------------------------------
// Strategies

/// Strings that break naive code: separators, NUL, quotes, SQL, LIKE/GLOB
/// metacharacters, operators, unicode (RTL override, emoji, combining),
/// very long ones, and anything at all.
pub fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", ".", "a.b", "..", "\0", "a\0b", "langgraph", "*", "?", "[", "%", "_", "'", "\"", "\\",
            "'; DROP TABLE store; --", "\") OR 1=1 --", "$eq", "$foo", "$", "__bytes__", "__float__",
            "é", "🦀", "\u{202e}rtl", "e\u{301}", "\u{feff}", "\n", "\t", " ", "NULL", "null", "0", "-1",
        ])
        .prop_map(String::from),
        2 => "[a-z]{1,8}",
        2 => "\\PC{0,16}",
        1 => any::<String>(),
        1 => (1_000usize..20_000).prop_map(|n| "y".repeat(n)),
    ]
}

pub fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        prop::sample::select(vec![
            json!(u64::MAX),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(1e308),
            json!(-1e308),
            json!(5e-324),
            json!(-0.0),
            json!(9007199254740993u64),
            json!(0),
            json!(1),
            json!(2.5),
        ]),
    ]
}

pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        hostile_string().prop_map(Value::from),
    ]
}

/// JSON trees whose object keys come from `keys`.
pub fn tree<K: Strategy<Value = String> + Clone + 'static>(
    keys: K,
    depth: u32,
) -> impl Strategy<Value = Value> {
    leaf().prop_recursive(depth, 48, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// `levels` nested arrays or objects around a leaf.
pub fn nested(levels: usize, arrays: bool, inner: Value) -> Value {
    let mut v = inner;
    for _ in 0..levels {
        v = if arrays { json!([v]) } else { json!({ "d": v }) };
    }
    v
}

/// Levels of arrays and objects in `v` (iterative).
pub fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(m) => {
                max = max.max(d + 1);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            _ => max = max.max(d),
        }
    }
    max
}

/// Object keys: mostly short and plain, sometimes hostile.
pub fn value_key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![3 => "[a-z]{1,4}", 1 => hostile_string()]
}
