//! Byte-for-byte compatibility with Python's `JsonPlusSerializer`, against
//! `tests/fixtures/codec/golden.json` (made by `make_golden.py`; Python is not
//! needed to run this test).

use agentstate::{JsonPlusSerializer, Serializer};
use serde_json::Value;

const GOLDEN: &str = include_str!("fixtures/codec/golden.json");

struct Case {
    name: String,
    type_tag: String,
    bytes: Vec<u8>,
    json: Value,
    plain: bool,
    reencode: bool,
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex {s}");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cases() -> Vec<Case> {
    let doc: Value = serde_json::from_str(GOLDEN).unwrap();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut bytes = unhex(c["hex"].as_str().unwrap());
            let mut json = c["json"].clone();
            if let Some(n) = c.get("repeat").and_then(Value::as_u64) {
                // Large strings are stored as header + one repeated unit.
                let s = json.as_str().unwrap().repeat(n as usize);
                bytes.extend_from_slice(s.as_bytes());
                json = Value::String(s);
            }
            Case {
                name: c["name"].as_str().unwrap().to_string(),
                type_tag: c["type_tag"].as_str().unwrap().to_string(),
                bytes,
                json,
                plain: c["plain"].as_bool().unwrap(),
                reencode: c["reencode"].as_bool().unwrap(),
            }
        })
        .collect()
}

#[test]
fn codec_golden_fixture_is_complete() {
    let cases = cases();
    assert!(cases.len() >= 90, "only {} cases", cases.len());
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    for needed in [
        "int 18446744073709551615",
        "int -9223372036854775808",
        "float 1.0",
        "str len 65536",
        "messages list",
        "None",
        "bytes top",
        "uuid",
        "set",
        "datetime utc",
        "date",
        "timedelta",
        "HumanMessage",
        "AIMessage",
        "DeltaSnapshot [1,2]",
        "dict int key",
        "numpy f8 2x2",
    ] {
        assert!(names.contains(&needed), "golden.json lacks {needed:?}");
    }
    let versions = &serde_json::from_str::<Value>(GOLDEN).unwrap()["versions"];
    assert!(versions["langgraph-checkpoint"].is_string());
}

#[test]
fn codec_golden_loads_gives_expected_json() {
    let s = JsonPlusSerializer;
    for c in cases() {
        let got = s.loads_typed(&c.type_tag, &c.bytes).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(got, c.json, "{}: decoded JSON differs", c.name);
    }
}

#[test]
fn codec_golden_plain_values_encode_like_python() {
    let s = JsonPlusSerializer;
    let mut n = 0;
    for c in cases().into_iter().filter(|c| c.plain) {
        let (tag, bytes) = s.dumps_typed(&c.json).unwrap();
        assert_eq!(tag, c.type_tag, "{}: tag", c.name);
        assert_eq!(hex(&bytes), hex(&c.bytes), "{}: bytes differ from Python's", c.name);
        n += 1;
    }
    assert!(n >= 60, "only {n} plain cases");
}

#[test]
fn codec_golden_reencode_reproduces_python_bytes() {
    let s = JsonPlusSerializer;
    let mut n = 0;
    for c in cases().into_iter().filter(|c| c.reencode) {
        let decoded = s.loads_typed(&c.type_tag, &c.bytes).unwrap();
        let (tag, bytes) = s.dumps_typed(&decoded).unwrap();
        assert_eq!(tag, c.type_tag, "{}: tag", c.name);
        assert_eq!(hex(&bytes), hex(&c.bytes), "{}: re-encoded bytes differ", c.name);
        n += 1;
    }
    assert!(n >= 85, "only {n} re-encodable cases");
}

#[test]
fn codec_golden_lossy_cases_are_the_documented_ones() {
    // Non-string keys become strings and `bytearray` comes back as `bytes`:
    // the JSON still round-trips through Rust.
    let s = JsonPlusSerializer;
    let lossy: Vec<Case> = cases().into_iter().filter(|c| !c.reencode).collect();
    let names: Vec<&str> = lossy.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["bytearray top", "dict int key", "dict mixed keys"]);
    for c in &lossy {
        let decoded = s.loads_typed(&c.type_tag, &c.bytes).unwrap();
        let (tag, bytes) = s.dumps_typed(&decoded).unwrap();
        assert_eq!(s.loads_typed(&tag, &bytes).unwrap(), decoded, "{}", c.name);
    }
}
