//! Property tests: malformed input never panics, decoded values always
//! re-encode to the same bytes, and the codec agrees with `rmpv`, an
//! independent MessagePack implementation.

use agentstate::{Error, JsonPlusSerializer, Serializer};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// The documented nesting limit of the codec.
const MAX_DEPTH: usize = 512;

/// The MessagePack encoding of `v`, through the public serializer. At the top
/// level, null and the bytes shape get their own tags, so they are encoded as
/// the element of a one-element array (header `91`, stripped).
fn to_msgpack(v: &Value) -> agentstate::Result<Vec<u8>> {
    match JsonPlusSerializer.dumps_typed(v)? {
        (tag, bytes) if tag == "msgpack" => Ok(bytes),
        _ => Ok(JsonPlusSerializer.dumps_typed(&Value::Array(vec![v.clone()]))?.1.split_off(1)),
    }
}

fn from_msgpack(bytes: &[u8]) -> agentstate::Result<Value> {
    JsonPlusSerializer.loads_typed("msgpack", bytes)
}

/// Bytes biased towards MessagePack markers, so containers and ext types
/// (codes -1 and 0-7 included) show up often.
fn msgpack_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>(),
        2 => 0x90u8..=0x93,
        2 => 0x80u8..=0x82,
        1 => Just(0xc7u8),
        1 => 0xd4u8..=0xd8,
        2 => 0u8..=7,
        1 => Just(0xffu8),
        1 => 0xa0u8..=0xa3,
        1 => 0xc4u8..=0xc6,
        1 => 0xdcu8..=0xdf,
    ];
    prop::collection::vec(byte, 0..64)
}

fn check_decoded(bytes: &[u8]) -> Result<(), TestCaseError> {
    match JsonPlusSerializer.loads_typed("msgpack", bytes) {
        Ok(v) => {
            // Whatever decodes re-encodes, and decodes to the same JSON again.
            let again = to_msgpack(&v).map_err(|e| TestCaseError::fail(format!("{v}: {e}")))?;
            prop_assert_eq!(from_msgpack(&again).unwrap(), v);
        }
        Err(Error::Serialization { .. }) => {}
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e:?}"))),
    }
    Ok(())
}

/// Arbitrary JSON, with keys that often spell the reserved shapes (but never
/// `payload`, whose raw ext may legitimately read back in another shape).
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("__bytes__".to_string()),
        Just("__ext__".to_string()),
        Just("__float__".to_string()),
        Just("code".to_string()),
        Just("module".to_string()),
        Just("name".to_string()),
        Just("args".to_string()),
        Just("method".to_string()),
        Just("value".to_string()),
        Just("seconds".to_string()),
        Just("nanoseconds".to_string()),
        "[a-z]{0,3}",
        ".{0,40}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-10i64..300).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        Just(Value::String("nan".into())),
        "[0-9a-f]{0,8}".prop_map(Value::String),
        ".{0,40}".prop_map(Value::String),
        "x{0,300}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Arbitrary plain MessagePack (string keys, no ext), as rmpv builds it.
fn rmpv_value() -> impl Strategy<Value = rmpv::Value> {
    use rmpv::Value as R;
    let leaf = prop_oneof![
        Just(R::Nil),
        any::<bool>().prop_map(R::Boolean),
        any::<u64>().prop_map(R::from),
        any::<i64>().prop_map(R::from),
        (-40i64..70000).prop_map(R::from),
        any::<f64>().prop_map(R::F64),
        ".{0,40}".prop_map(R::from),
        "y{0,70}".prop_map(R::from),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(R::Binary),
    ];
    leaf.prop_recursive(5, 64, 20, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..20).prop_map(R::Array),
            prop::collection::vec(("[a-z]{0,4}", inner), 0..20)
                .prop_map(|kv| R::Map(kv.into_iter().map(|(k, v)| (R::from(k), v)).collect())),
        ]
    })
}

/// What the codec should decode an rmpv value to (written independently of it).
fn expected_json(v: &rmpv::Value) -> Value {
    use rmpv::Value as R;
    match v {
        R::Nil => Value::Null,
        R::Boolean(b) => Value::Bool(*b),
        R::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => Value::from(u),
            (None, Some(i)) => Value::from(i),
            _ => unreachable!(),
        },
        R::F64(f) => match Number::from_f64(*f) {
            Some(n) => Value::Number(n),
            None if f.is_nan() => serde_json::json!({"__float__": "nan"}),
            None if *f > 0.0 => serde_json::json!({"__float__": "inf"}),
            None => serde_json::json!({"__float__": "-inf"}),
        },
        R::String(s) => Value::String(s.as_str().unwrap().to_string()),
        R::Binary(b) => {
            serde_json::json!({"__bytes__": b.iter().map(|x| format!("{x:02x}")).collect::<String>()})
        }
        R::Array(a) => Value::Array(a.iter().map(expected_json).collect()),
        R::Map(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                out.insert(k.as_str().unwrap().to_string(), expected_json(x));
            }
            Value::Object(out)
        }
        _ => unreachable!(),
    }
}

fn has_duplicate_keys(v: &rmpv::Value) -> bool {
    match v {
        rmpv::Value::Array(a) => a.iter().any(has_duplicate_keys),
        rmpv::Value::Map(m) => {
            let mut keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str().unwrap()).collect();
            keys.sort_unstable();
            keys.windows(2).any(|w| w[0] == w[1]) || m.iter().any(|(_, x)| has_duplicate_keys(x))
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn codec_fuzz_random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        check_decoded(&bytes)?;
        for tag in ["json", "bytes", "bytearray", "null"] {
            let _ = JsonPlusSerializer.loads_typed(tag, &bytes);
        }
    }

    #[test]
    fn codec_fuzz_msgpack_like_bytes_never_panic(bytes in msgpack_like_bytes()) {
        check_decoded(&bytes)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn codec_fuzz_json_roundtrips(v in json_value()) {
        let (tag, bytes) = JsonPlusSerializer.dumps_typed(&v).unwrap();
        let back = JsonPlusSerializer.loads_typed(&tag, &bytes).unwrap();
        prop_assert_eq!(&back, &v);
        // And the bytes are stable.
        prop_assert_eq!(JsonPlusSerializer.dumps_typed(&back).unwrap(), (tag, bytes));
    }

    #[test]
    fn codec_fuzz_agrees_with_rmpv(v in rmpv_value()) {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &v).unwrap();
        let expected = expected_json(&v);
        let got = from_msgpack(&bytes).unwrap();
        if !has_duplicate_keys(&v) {
            prop_assert_eq!(&got, &expected);
            // rmpv writes the smallest headers too: our encoder matches it
            // (NaN payloads aside, which we write canonically).
            if !bytes.windows(3).any(|w| w[0] == 0xcb && w[1] & 0x7f == 0x7f && w[2] & 0xf0 == 0xf0) {
                prop_assert_eq!(to_msgpack(&expected).unwrap(), bytes.clone());
            }
        }
        // rmpv reads what we write.
        let ours = to_msgpack(&got).unwrap();
        let reread = rmpv::decode::read_value(&mut ours.as_slice()).unwrap();
        prop_assert_eq!(expected_json(&reread), got);
    }
}

/// Every truncation and many one-byte mutations of Python's real bytes.
#[test]
fn codec_fuzz_mutated_python_bytes() {
    let doc: Value = serde_json::from_str(include_str!("fixtures/codec/golden.json")).unwrap();
    let mut runs = 0;
    for case in doc["cases"].as_array().unwrap() {
        if case["type_tag"] != "msgpack" || case.get("repeat").is_some() {
            continue;
        }
        let hex = case["hex"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        for cut in 0..bytes.len() {
            check_decoded(&bytes[..cut]).unwrap();
            runs += 1;
        }
        for pos in 0..bytes.len() {
            for m in [0x00, 0xff, 0xc1, 0x7f, 0x90, bytes[pos] ^ 0x01, bytes[pos].wrapping_add(1)] {
                let mut b = bytes.clone();
                b[pos] = m;
                check_decoded(&b).unwrap();
                runs += 1;
            }
        }
    }
    assert!(runs > 10_000, "{runs}");
}

/// Neither direction recurses: the deepest accepted input works on a small stack.
#[test]
fn codec_fuzz_small_stack_is_enough() {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let mut deep = vec![0x91u8; MAX_DEPTH];
            deep.push(0x01);
            let v = from_msgpack(&deep).unwrap();
            assert_eq!(to_msgpack(&v).unwrap(), deep);
            // serde_json drops nested values recursively: keep that out of
            // the measurement.
            std::mem::forget(v);
            let mut exts = vec![0x01u8];
            for _ in 0..5000 {
                let mut outer = vec![0xc9];
                outer.extend_from_slice(&(exts.len() as u32).to_be_bytes());
                outer.push(7);
                outer.extend_from_slice(&exts);
                exts = outer;
            }
            let v = from_msgpack(&exts).unwrap();
            assert!(to_msgpack(&v).is_ok());
            std::mem::forget(v);
        })
        .unwrap()
        .join()
        .unwrap();
}
