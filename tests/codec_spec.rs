//! The serializer contract through `JsonPlusSerializer`: LangGraph's type
//! tags, the MessagePack encoding, the JSON shapes for Python types, errors,
//! the nesting limit, and a wrapping (encrypting-style) serializer.

use agentstate::{Error, JsonPlusSerializer, Result, Serializer};
use serde_json::{json, Value};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn dumps(v: &Value) -> (String, String) {
    let (tag, bytes) = JsonPlusSerializer.dumps_typed(v).unwrap();
    (tag, hex(&bytes))
}

fn loads(tag: &str, hex_bytes: &str) -> Result<Value> {
    JsonPlusSerializer.loads_typed(tag, &unhex(hex_bytes))
}

fn mp(hex_bytes: &str) -> Value {
    loads("msgpack", hex_bytes).unwrap_or_else(|e| panic!("{hex_bytes}: {e}"))
}

fn roundtrip(v: &Value) -> Value {
    let (tag, bytes) = JsonPlusSerializer.dumps_typed(v).unwrap();
    JsonPlusSerializer.loads_typed(&tag, &bytes).unwrap()
}

/// The documented nesting limit of the codec.
const MAX_DEPTH: usize = 512;

/// The MessagePack written for `v` (an array, map, or other non-null value
/// that is not the bytes shape, so the tag is `msgpack`).
fn to_msgpack(v: &Value) -> Result<Vec<u8>> {
    let (tag, bytes) = JsonPlusSerializer.dumps_typed(v)?;
    assert_eq!(tag, "msgpack", "{v}");
    Ok(bytes)
}

fn from_msgpack(bytes: &[u8]) -> Result<Value> {
    JsonPlusSerializer.loads_typed("msgpack", bytes)
}

fn is_ser_err(r: Result<Value>) -> bool {
    matches!(r, Err(Error::Serialization { .. }))
}

// --- type tags and the values LangGraph writes -------------------------------

#[test]
fn codec_null_and_bytes_have_their_own_tags() {
    assert_eq!(dumps(&Value::Null), ("null".into(), String::new()));
    assert_eq!(dumps(&json!({"__bytes__": "0001"})), ("bytes".into(), "0001".into()));
    assert_eq!(loads("null", "").unwrap(), Value::Null);
    assert_eq!(loads("bytes", "0001").unwrap(), json!({"__bytes__": "0001"}));
    assert_eq!(loads("bytearray", "6162").unwrap(), json!({"__bytes__": "6162"}));
    assert_eq!(dumps(&json!({"__bytes__": ""})), ("bytes".into(), String::new()));
}

#[test]
fn codec_plain_values_are_msgpack_as_python_writes_them() {
    for (v, h) in [
        (json!(1), "01"),
        (json!(128), "cc80"),
        (json!(1.0), "cb3ff0000000000000"),
        (json!([1, 2]), "920102"),
        (json!({"a": 1, "b": [1, 2]}), "82a16101a162920102"),
    ] {
        assert_eq!(dumps(&v), ("msgpack".into(), h.into()), "{v}");
        assert_eq!(mp(h), v);
    }
    // A non-string key reads as a string key (lossy).
    assert_eq!(mp("8101a178"), json!({"1": "x"}));
    // rmpv, an independent decoder, reads what we write.
    let bytes = to_msgpack(&json!({"a": 1, "b": [1, 2]})).unwrap();
    let v = rmpv::decode::read_value(&mut bytes.as_slice()).unwrap();
    assert_eq!(v.to_string(), r#"{"a": 1, "b": [1, 2]}"#);
}

#[test]
fn codec_python_objects_decode_to_ext_shapes_and_back() {
    let set = mp("c7110093a86275696c74696e73a3736574920102");
    assert_eq!(set, json!({"__ext__": {"code": 0, "module": "builtins", "name": "set", "args": [1, 2]}}));
    let dt = "c73b0394a86461746574696d65a86461746574696d65b9323032342d30312d30325430333a30343a30352b30303a3030ad66726f6d69736f666f726d6174";
    assert_eq!(
        mp(dt),
        json!({"__ext__": {"code": 3, "module": "datetime", "name": "datetime",
                           "args": "2024-01-02T03:04:05+00:00", "method": "fromisoformat"}})
    );
    assert_eq!(mp("c70307920102"), json!({"__ext__": {"code": 7, "value": [1, 2]}}));
    for h in ["c7110093a86275696c74696e73a3736574920102", dt, "c70307920102"] {
        assert_eq!(dumps(&mp(h)), ("msgpack".into(), h.into()));
    }
    // Written from scratch (keys in any order) gives Python's bytes.
    let v = json!({"__ext__": {"value": [1, 2], "code": 7}});
    assert_eq!(dumps(&v).1, "c70307920102");
}

#[test]
fn codec_unknown_tags_are_a_typed_error() {
    for tag in ["weird", "pickle", "", "msgpack+aes", "MSGPACK"] {
        let err = JsonPlusSerializer.loads_typed(tag, b"").unwrap_err();
        assert!(matches!(&err, Error::UnknownSerialization(t) if t == tag), "{tag}: {err:?}");
        assert_eq!(err.to_string(), format!("Unknown serialization type: {tag}"));
    }
}

#[test]
fn codec_exception_text_is_a_plain_string() {
    assert_eq!(mp("b256616c75654572726f722827626f6f6d2729"), json!("ValueError('boom')"));
}

#[test]
fn codec_unimportable_modules_still_decode() {
    // Rust never imports anything: any module/name gives the ext shape.
    let v = json!({"__ext__": {"code": 0, "module": "no.such.module", "name": "Thing", "args": {"x": 1}}});
    let (tag, bytes) = JsonPlusSerializer.dumps_typed(&v).unwrap();
    assert_eq!(tag, "msgpack");
    assert_eq!(JsonPlusSerializer.loads_typed(&tag, &bytes).unwrap(), v);
}

// --- a wrapping serializer ------------------------------------------------------

/// Test-only "cipher": XOR with a key byte; the tag becomes `<inner>+xor`.
struct XorSerializer<S> {
    inner: S,
    key: u8,
}

impl<S: Serializer> Serializer for XorSerializer<S> {
    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)> {
        let (tag, bytes) = self.inner.dumps_typed(value)?;
        Ok((format!("{tag}+xor"), bytes.iter().map(|b| b ^ self.key).collect()))
    }

    fn loads_typed(&self, type_tag: &str, bytes: &[u8]) -> Result<Value> {
        match type_tag.split_once('+') {
            // Unencrypted data is passed to the inner serializer as is.
            None => self.inner.loads_typed(type_tag, bytes),
            Some((tag, "xor")) => {
                let clear: Vec<u8> = bytes.iter().map(|b| b ^ self.key).collect();
                self.inner.loads_typed(tag, &clear)
            }
            Some((_, cipher)) => Err(Error::serialization(format!("unsupported cipher {cipher}"))),
        }
    }
}

#[test]
fn codec_wrapping_serializer_changes_tag_and_bytes() {
    let s: Box<dyn Serializer> = Box::new(XorSerializer { inner: JsonPlusSerializer, key: 0x5a });
    let v = json!({"messages": [{"role": "user", "content": "hi"}], "n": 1.5});
    let (tag, bytes) = s.dumps_typed(&v).unwrap();
    assert_eq!(tag, "msgpack+xor");
    assert_ne!(bytes, to_msgpack(&v).unwrap());
    assert_eq!(s.loads_typed(&tag, &bytes).unwrap(), v);
    // Untagged data falls back to the inner serializer.
    assert_eq!(s.loads_typed("msgpack", b"\x01").unwrap(), json!(1));
    assert_eq!(s.loads_typed("null", b"").unwrap(), Value::Null);
    assert!(matches!(s.loads_typed("msgpack+aes", b""), Err(Error::Serialization { .. })));
    // An unknown inner tag is still reported as such.
    let err = s.loads_typed("weird+xor", b"").unwrap_err();
    assert_eq!(err.to_string(), "Unknown serialization type: weird");
}

// --- integers and floats ------------------------------------------------------

#[test]
fn codec_integer_boundaries() {
    let cases: &[(Value, &str)] = &[
        (json!(0), "00"),
        (json!(127), "7f"),
        (json!(128), "cc80"),
        (json!(255), "ccff"),
        (json!(256), "cd0100"),
        (json!(65535), "cdffff"),
        (json!(65536), "ce00010000"),
        (json!(4294967295u64), "ceffffffff"),
        (json!(4294967296u64), "cf0000000100000000"),
        (json!(i64::MAX), "cf7fffffffffffffff"),
        (json!(u64::MAX), "cfffffffffffffffff"),
        (json!(-1), "ff"),
        (json!(-32), "e0"),
        (json!(-33), "d0df"),
        (json!(-128), "d080"),
        (json!(-129), "d1ff7f"),
        (json!(-32768), "d18000"),
        (json!(-32769), "d2ffff7fff"),
        (json!(-2147483648i64), "d280000000"),
        (json!(-2147483649i64), "d3ffffffff7fffffff"),
        (json!(i64::MIN), "d38000000000000000"),
    ];
    for (v, h) in cases {
        assert_eq!(dumps(v).1, *h, "{v}");
        assert_eq!(&mp(h), v, "{h}");
    }
    // Non-canonical encodings from other writers read as the same number.
    assert_eq!(mp("d005"), json!(5));
    assert_eq!(mp("cf0000000000000001"), json!(1));
    assert_eq!(mp("d3ffffffffffffffff"), json!(-1));
}

#[test]
fn codec_floats_are_always_float64() {
    assert_eq!(dumps(&json!(1.0)).1, "cb3ff0000000000000");
    assert_eq!(dumps(&json!(-2.5)).1, "cbc004000000000000");
    // serde_json parses `1.0` as a float: it stays a float.
    let parsed: Value = serde_json::from_str("[1.0, 1, 0.1]").unwrap();
    assert_eq!(dumps(&parsed).1, "93cb3ff000000000000001cb3fb999999999999a");
    assert_eq!(roundtrip(&parsed), parsed);
    assert!(roundtrip(&json!(1.0)).is_f64());
    // float32 from other writers widens to f64.
    assert_eq!(mp("ca3fc00000"), json!(1.5));
}

#[test]
fn codec_non_finite_floats() {
    assert_eq!(mp("cb7ff8000000000000"), json!({"__float__": "nan"}));
    assert_eq!(mp("cb7ff0000000000000"), json!({"__float__": "inf"}));
    assert_eq!(mp("cbfff0000000000000"), json!({"__float__": "-inf"}));
    assert_eq!(mp("ca7fc00000"), json!({"__float__": "nan"}));
    assert_eq!(dumps(&json!({"__float__": "nan"})).1, "cb7ff8000000000000");
    assert_eq!(dumps(&json!({"__float__": "-inf"})).1, "cbfff0000000000000");
    // Anything else is an ordinary map.
    assert_eq!(dumps(&json!({"__float__": "NaN"})).1, "81a95f5f666c6f61745f5fa34e614e");
}

// --- strings, containers, keys ------------------------------------------------

#[test]
fn codec_string_and_container_headers() {
    for (n, head) in [(0, "a0"), (31, "bf"), (32, "d920"), (255, "d9ff"), (256, "da0100"), (65535, "daffff")]
    {
        let (_, h) = dumps(&json!("x".repeat(n)));
        assert!(h.starts_with(head) && h.len() == head.len() + 2 * n, "{n}");
    }
    let big = "x".repeat(65536);
    let (_, h) = dumps(&json!(big));
    assert!(h.starts_with("db00010000"));
    assert_eq!(roundtrip(&json!(big)), json!(big));

    let arr = Value::Array(vec![Value::Null; 65536]);
    let bytes = to_msgpack(&arr).unwrap();
    assert_eq!(hex(&bytes[..5]), "dd00010000");
    assert_eq!(from_msgpack(&bytes).unwrap(), arr);
    let map: serde_json::Map<String, Value> = (0..65536).map(|i| (format!("{i}"), json!(i))).collect();
    let map = Value::Object(map);
    let bytes = to_msgpack(&map).unwrap();
    assert_eq!(hex(&bytes[..5]), "df00010000");
    assert_eq!(from_msgpack(&bytes).unwrap(), map);

    assert_eq!(dumps(&json!([])).1, "90");
    assert_eq!(dumps(&json!({})).1, "80");
    assert!(dumps(&Value::Array(vec![json!(0); 16])).1.starts_with("dc0010"));
}

#[test]
fn codec_map_order_is_kept() {
    let v: Value = serde_json::from_str(r#"{"z": 1, "a": 2, "m": 3}"#).unwrap();
    assert_eq!(dumps(&v).1, "83a17a01a16102a16d03");
    let back = roundtrip(&v);
    assert_eq!(back.as_object().unwrap().keys().collect::<Vec<_>>(), ["z", "a", "m"]);
}

#[test]
fn codec_non_string_keys_become_strings() {
    // {1: "a", -2: "b", None: "c", True: "d", 1.5: "e", b"k": "f", (1, 2): "g"}
    let v = mp("87 01a161 fea162 c0a163 c3a164 cb3ff8000000000000a165 c4016ba166 920102a167"
        .replace(' ', "")
        .as_str());
    assert_eq!(
        v,
        json!({"1": "a", "-2": "b", "null": "c", "true": "d", "1.5": "e",
               "{\"__bytes__\":\"6b\"}": "f", "[1,2]": "g"})
    );
    // Colliding keys: the later value wins.
    assert_eq!(mp("8201a161a131a162"), json!({"1": "b"}));
}

#[test]
fn codec_strings_must_be_utf8() {
    assert!(is_ser_err(loads("msgpack", "a2ff00")));
    assert!(is_ser_err(loads("msgpack", "81a2ff0001")));
    assert_eq!(mp("a3e282ac"), json!("€"));
}

// --- bytes and ext shapes -------------------------------------------------------

#[test]
fn codec_bytes_shape() {
    assert_eq!(mp("92c4026162c400"), json!([{"__bytes__": "6162"}, {"__bytes__": ""}]));
    assert_eq!(dumps(&json!([{"__bytes__": "6162"}])).1, "91c4026162");
    let big = vec![7u8; 70000];
    let v = json!({"__bytes__": "07".repeat(70000)});
    // At the top level, the shape is written with tag `bytes` and raw bytes.
    assert_eq!(JsonPlusSerializer.dumps_typed(&v).unwrap(), ("bytes".to_string(), big.clone()));
    assert_eq!(JsonPlusSerializer.loads_typed("bytes", &big).unwrap(), v);
    let inner = json!([v]);
    let bytes = to_msgpack(&inner).unwrap();
    assert_eq!(hex(&bytes[..6]), "91c600011170");
    assert_eq!(from_msgpack(&bytes).unwrap(), inner);
    // A top-level bin (not written by Python, but valid msgpack) reads too.
    assert_eq!(mp("c40100"), json!({"__bytes__": "00"}));
    // Not exactly the shape: an ordinary map, and it round-trips as one.
    for v in [
        json!({"__bytes__": "ABCD"}),
        json!({"__bytes__": "abc"}),
        json!({"__bytes__": "zz"}),
        json!({"__bytes__": 12}),
        json!({"__bytes__": "ab", "x": 1}),
    ] {
        let (tag, bytes) = JsonPlusSerializer.dumps_typed(&v).unwrap();
        assert_eq!(tag, "msgpack", "{v}");
        assert!(bytes[0] & 0xf0 == 0x80, "{v} written as a map");
        assert_eq!(roundtrip(&v), v);
    }
}

#[test]
fn codec_ext_fixext_and_ext_headers() {
    for (code, payload, head) in [
        (7, "01", "d407"),
        (7, "9101", "d507"),
        (7, "a3616263", "d607"),
        (7, "cb3ff0000000000000", "c70907"),
        (7, "af616161616161616161616161616161", "d807"),
        (0x42, "", "c70042"),
        (0x42, "0102030405060708", "d742"),
    ] {
        let v = mp(&format!("{head}{payload}"));
        assert_eq!(v["__ext__"]["code"], code);
        assert_eq!(dumps(&v).1, format!("{head}{payload}"), "{v}");
    }
    let payload = "c5012c".to_string() + &"78".repeat(300);
    let h = format!("c8012f07{payload}");
    let v = mp(&h);
    assert_eq!(v["__ext__"]["value"]["__bytes__"].as_str().unwrap().len(), 600);
    assert_eq!(dumps(&v).1, h);
    let raw = json!({"__ext__": {"code": 9, "payload": {"__bytes__": "00".repeat(70000)}}});
    let bytes = to_msgpack(&raw).unwrap();
    assert_eq!(hex(&bytes[..6]), "c90001117009");
    assert_eq!(from_msgpack(&bytes).unwrap(), raw);
}

#[test]
fn codec_ext_raw_fallbacks() {
    for (h, code, payload) in [
        ("d50001c1", 0, "01c1"),                   // payload is not valid msgpack
        ("d40001", 0, "01"),                       // not an array, and code 0
        ("d5059101", 5, "9101"),                   // array of the wrong length
        ("c706039301a162a163", 3, "9301a162a163"), // module not a string
        ("d5070102", 7, "0102"),                   // trailing bytes in a delta snapshot
        ("d47f00", 127, "00"),                     // unknown code
        ("d48000", -128, "00"),                    // unknown negative code
        ("d406c0", 6, "c0"),                       // numpy payload not an array
    ] {
        let v = mp(h);
        assert_eq!(v, json!({"__ext__": {"code": code, "payload": {"__bytes__": payload}}}), "{h}");
        assert_eq!(dumps(&v).1, h, "{h}");
    }
    // A 4-element constructor payload whose method is not a string.
    let v = mp("c705029401020304");
    assert_eq!(v["__ext__"]["payload"]["__bytes__"], "9401020304");
}

#[test]
fn codec_ext_numpy_shape() {
    // [dtype "<f8", shape [2], order "C", 16 bytes]
    let h = "c71c0694a33c6638920201a143c410000000000000f03f0000000000000040";
    let v = mp(h);
    assert_eq!(
        v,
        json!({"__ext__": {"code": 6, "dtype": "<f8", "shape": [2, 1], "order": "C",
                           "data": {"__bytes__": "000000000000f03f0000000000000040"}}})
    );
    assert_eq!(dumps(&v).1, h);
}

#[test]
fn codec_timestamps() {
    // 32-bit, 64-bit and 96-bit forms.
    let t32 = mp("d6ff00000001");
    assert_eq!(t32, json!({"__ext__": {"code": -1, "seconds": 1, "nanoseconds": 0}}));
    assert_eq!(dumps(&t32).1, "d6ff00000001");
    let t64 = mp("d7ff0000000400000001");
    assert_eq!(t64, json!({"__ext__": {"code": -1, "seconds": 1, "nanoseconds": 1}}));
    assert_eq!(dumps(&t64).1, "d7ff0000000400000001");
    let t96 = mp("c70cff00000005ffffffffffffffff");
    assert_eq!(t96, json!({"__ext__": {"code": -1, "seconds": -1, "nanoseconds": 5}}));
    assert_eq!(dumps(&t96).1, "c70cff00000005ffffffffffffffff");
    // A non-minimal form reads the same and is written minimally.
    let v = mp("c70cff000000000000000000000001");
    assert_eq!(v, t32);
    // Nanoseconds out of range, or a bad length: raw, never an error.
    assert_eq!(mp("c70cff3b9aca000000000000000001")["__ext__"]["code"], -1);
    assert!(mp("c70cff3b9aca000000000000000001")["__ext__"]["payload"].is_object());
    assert!(mp("d5ff0001")["__ext__"]["payload"].is_object());
    // Invalid shapes are ordinary maps.
    let bad = json!({"__ext__": {"code": -1, "seconds": 1, "nanoseconds": 1_000_000_000}});
    assert_eq!(roundtrip(&bad), bad);
}

#[test]
fn codec_ext_shape_validation() {
    // Each of these is not exactly an ext shape: written as a plain map,
    // and it reads back unchanged.
    for v in [
        json!({"__ext__": {"code": 0, "module": "m", "name": "n"}}),
        json!({"__ext__": {"code": 0, "module": 1, "name": "n", "args": 1}}),
        json!({"__ext__": {"code": 8, "module": "m", "name": "n", "args": 1}}),
        json!({"__ext__": {"code": 300, "payload": {"__bytes__": ""}}}),
        json!({"__ext__": {"code": 1.0, "value": 1}}),
        json!({"__ext__": {"code": 7, "value": 1, "extra": 2}}),
        json!({"__ext__": {"code": 3, "module": "m", "name": "n", "args": 1, "method": 5}}),
        json!({"__ext__": {"code": 6, "dtype": "<f8", "shape": [1], "order": "C", "data": "00"}}),
        json!({"__ext__": {"code": 7, "payload": "00"}}),
        json!({"__ext__": [7, 1]}),
        json!({"__ext__": {"code": 7, "value": 1}, "other": 1}),
    ] {
        let bytes = to_msgpack(&v).unwrap();
        assert_eq!(bytes[0], 0x81 + u8::from(v.as_object().unwrap().len() == 2), "{v}");
        assert_eq!(from_msgpack(&bytes).unwrap(), v, "{v}");
    }
    // A valid shape built by hand, with a nested ext in its args.
    let v = json!({"__ext__": {"code": 1, "module": "datetime", "name": "timezone", "args": [
        {"__ext__": {"code": 1, "module": "datetime", "name": "timedelta", "args": [0, 7200, 0]}}]}});
    assert_eq!(
        dumps(&v).1,
        "c7310193a86461746574696d65a874696d657a6f6e6591c71a0193a86461746574696d65a974696d6564656c74619300cd1c2000"
    );
}

// --- errors and limits --------------------------------------------------------

#[test]
fn codec_malformed_msgpack_is_an_error() {
    for h in [
        "", "c1", "92", "9201", "a5616263", "cd01", "cf00", "c4", "c405", "dc0002", "81a161", "d4", "c70507",
        "0101", "c0c0",
    ] {
        assert!(is_ser_err(loads("msgpack", h)), "{h:?} should fail");
    }
    // Lengths far beyond the data fail without a huge allocation.
    for h in ["ddffffffff", "dfffffffff", "dbffffffff", "c6ffffffff", "c9ffffffff07"] {
        assert!(is_ser_err(loads("msgpack", h)), "{h}");
    }
    assert!(is_ser_err(loads("json", "7b")));
    assert_eq!(loads("json", "7b2261223a317d").unwrap(), json!({"a": 1}));
}

fn nested_arrays(depth: usize) -> Vec<u8> {
    let mut b = vec![0x91; depth];
    b.push(0x01);
    b
}

fn nested_json(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

#[test]
fn codec_depth_limit() {
    let ok = from_msgpack(&nested_arrays(MAX_DEPTH)).unwrap();
    assert_eq!(to_msgpack(&ok).unwrap(), nested_arrays(MAX_DEPTH));
    assert!(is_ser_err(from_msgpack(&nested_arrays(MAX_DEPTH + 1))));
    assert!(to_msgpack(&nested_json(MAX_DEPTH)).is_ok());
    assert!(matches!(to_msgpack(&nested_json(MAX_DEPTH + 1)), Err(Error::Serialization { .. })));
    // Hostile depth: no stack overflow.
    assert!(is_ser_err(from_msgpack(&nested_arrays(1_000_000))));
    let mut maps = [0x81, 0xa0].repeat(100_000);
    maps.push(0xc0);
    assert!(is_ser_err(from_msgpack(&maps)));
    // Nested keys count as nesting too.
    let mut keys = [0x81].repeat(100_000);
    keys.push(0xc0);
    assert!(is_ser_err(from_msgpack(&keys)));
}

#[test]
fn codec_depth_limit_through_ext() {
    // Delta snapshots nested 10 000 deep: each is one level, and past the
    // limit the payload is kept raw instead of recursing further.
    let mut b = vec![0x01];
    for _ in 0..10_000 {
        let mut outer = vec![0xc9];
        outer.extend_from_slice(&(b.len() as u32).to_be_bytes());
        outer.push(7);
        outer.extend_from_slice(&b);
        b = outer;
    }
    let v = from_msgpack(&b).unwrap();
    let mut cur = &v;
    let mut levels = 0;
    while let Some(inner) = cur["__ext__"].get("value") {
        cur = inner;
        levels += 1;
    }
    assert!(levels <= MAX_DEPTH && levels > MAX_DEPTH - 2, "{levels}");
    assert!(cur["__ext__"]["payload"].is_object());
    // Shapes re-encode to the same bytes, raw part included (modulo the
    // minimal ext header chosen on writing).
    let again = to_msgpack(&v).unwrap();
    assert_eq!(from_msgpack(&again).unwrap(), v);
}
