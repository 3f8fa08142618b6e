//! Typed values on disk: `(type tag, bytes)` <-> [`serde_json::Value`].
//!
//! [`JsonPlusSerializer`] reads and writes the same `(type tag, bytes)` pairs as
//! LangGraph's Python `JsonPlusSerializer`, so a file can be shared with Python:
//!
//! | tag | bytes | written for |
//! |---|---|---|
//! | `null` | empty | `Value::Null` at the top level |
//! | `bytes` | the raw bytes | a top-level [bytes shape](#bytes) |
//! | `msgpack` | MessagePack | everything else |
//!
//! On reading, `json` (LangGraph's legacy format, parsed as plain JSON) and
//! `bytearray` (read like `bytes`) are accepted too. Any other tag, including
//! `pickle`, is [`Error::UnknownSerialization`].
//!
//! # MessagePack encoding
//!
//! Plain values encode byte for byte as Python's `ormsgpack.packb` encodes the
//! equivalent Python value:
//!
//! - integers use the smallest standard encoding: positive fixint and
//!   `uint8`..`uint64` for non-negative values, negative fixint and
//!   `int8`..`int64` for negative ones (`128` is `cc 80`, `-33` is `d0 df`);
//! - floats are **always** `float64` (`cb`), so `1.0` stays a float;
//! - strings are fixstr / str8 / str16 / str32, arrays and maps use the
//!   smallest header, and maps keep insertion order.
//!
//! A `serde_json::Value` cannot hold integers outside `i64`/`u64`, nor NaN or
//! infinities (see the [float shape](#non-finite-floats) for those), so
//! encoding plain JSON never fails; it only fails for nesting deeper than
//! 512 levels (see [Nesting](#nesting)).
//!
//! # JSON shapes for what JSON cannot hold
//!
//! Python data may hold bytes, datetimes, UUIDs, LangChain messages, ... Those
//! are decoded to the JSON objects below (never to an error), and encoding
//! such an object writes the MessagePack it came from, so data read from
//! Python and written back stays readable by Python, byte for byte when the
//! payload is made of plain values.
//!
//! The shapes are recognised only when they match exactly (one key, and the
//! documented fields with the documented types, in any order); any other
//! object is an ordinary map. A user map that happens to match a shape exactly
//! is written as the MessagePack type it describes; reading it back gives the
//! same JSON (except a hand-made raw ext, below, whose payload has one of the
//! known forms: it reads back in that form).
//!
//! ## Bytes
//! MessagePack `bin` <-> `{"__bytes__": "<lowercase hex>"}`. At the top level
//! this shape is written with tag `bytes` and the raw bytes (as Python does for
//! a `bytes` value); tags `bytes` and `bytearray` read back to this shape.
//!
//! ## Extension types
//! LangGraph writes Python objects as MessagePack ext types whose payload is
//! itself MessagePack:
//!
//! - codes 0-5 (constructors, pydantic models, LangChain messages), payload
//!   `[module, name, args]` or `[module, name, args, method]`:
//!   `{"__ext__": {"code": n, "module": "...", "name": "...", "args": <value>}}`,
//!   plus `"method": "..."` when the payload has a fourth element (code 3,
//!   `datetime.fromisoformat`, and code 5, pydantic v2's
//!   `model_validate_json`). Example: a UUID is
//!   `{"__ext__": {"code": 0, "module": "uuid", "name": "UUID", "args": "<32 hex digits>"}}`.
//! - code 6 (numpy array), payload `[dtype, shape, order, data]`:
//!   `{"__ext__": {"code": 6, "dtype": "<f8", "shape": [2, 2], "order": "C", "data": {"__bytes__": "..."}}}`.
//! - code 7 (LangGraph's `_DeltaSnapshot`), payload is the wrapped value:
//!   `{"__ext__": {"code": 7, "value": <value>}}`.
//! - code -1 (MessagePack timestamp; Python does not write these, other
//!   MessagePack writers may):
//!   `{"__ext__": {"code": -1, "seconds": <i64>, "nanoseconds": <0..1e9>}}`;
//!   written back in the smallest timestamp format.
//! - any other ext, or a payload that does not have the form above (including
//!   a payload that is not valid MessagePack, has bytes after its value, or
//!   nests too deeply):
//!   `{"__ext__": {"code": n, "payload": {"__bytes__": "<hex of the payload>"}}}`,
//!   written back verbatim.
//!
//! Nothing is imported or constructed: unlike Python, which turns an
//! unimportable or disallowed class into `None` or its raw arguments, every
//! module and name decodes to the same shape. Re-encoding is byte-exact when
//! the payload is canonical MessagePack without non-string map keys, which is
//! what Python writes; the ext header is always the smallest (fixext 1/2/4/8/16,
//! then ext 8/16/32), as Python writes it.
//!
//! ## Non-finite floats
//! NaN and the infinities (which Python writes as `float64`) <->
//! `{"__float__": "nan" | "inf" | "-inf"}`. NaN is written back as the
//! canonical quiet NaN `cb 7ff8000000000000`, as Python writes it.
//!
//! ## Non-string map keys (lossy)
//! Python maps may have non-string keys (`{1: "x"}` is `81 01 a1 78`). JSON
//! keys are strings, so such keys are turned into strings: integers and floats
//! in decimal (`"1"`, `"1.5"`), `true`/`false`, `null`, and anything else as
//! its compact JSON text. This is **lossy**: the key is written back as a
//! string. When two keys map to the same string the later value wins.
//!
//! ## Other reading rules
//! `float32` values are widened to `float64` (and written back as `float64`);
//! integers in a non-minimal encoding read as the same number (and are
//! written back minimally). Strings that are not valid UTF-8 (Python refuses
//! them too), truncated data, the reserved marker `c1` and bytes left over
//! after the top-level value (which Python would ignore) are
//! [`Error::Serialization`], never a panic.
//!
//! ## Nesting
//! Reading and writing are iterative (no recursion, whatever the input), and
//! nesting is limited to 512 levels: each array and map is a level,
//! an ext is one more, and the array inside a code 0-6 ext payload another.
//! Deeper input is [`Error::Serialization`] (inside an ext payload it only
//! makes that ext raw). A decoded value can be up to about twice as deep in
//! JSON terms, as each ext shape is two nested objects.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

mod decode;
mod encode;

/// Deepest nesting of arrays, maps and ext types that is encoded or decoded.
const MAX_DEPTH: usize = 512;

/// Key of the [bytes shape](self#bytes): `{"__bytes__": "<lowercase hex>"}`.
pub const BYTES_KEY: &str = "__bytes__";

/// Key of the [ext shape](self#extension-types): `{"__ext__": {"code": n, ...}}`.
pub const EXT_KEY: &str = "__ext__";

/// Key of the [non-finite float shape](self#non-finite-floats):
/// `{"__float__": "nan" | "inf" | "-inf"}`.
pub const FLOAT_KEY: &str = "__float__";

/// Turns values into `(type tag, bytes)` pairs and back.
///
/// Implement it to store another format, or wrap another serializer (for
/// example to encrypt its bytes and mark the tag, as LangGraph's
/// `EncryptedSerializer` does with `msgpack+aes`).
pub trait Serializer: Send + Sync + 'static {
    /// Encodes `value` as a `(type tag, bytes)` pair.
    ///
    /// # Errors
    /// [`Error::Serialization`] if the value cannot be encoded.
    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)>;

    /// Decodes a `(type tag, bytes)` pair.
    ///
    /// # Errors
    /// [`Error::UnknownSerialization`] for a tag this serializer does not
    /// know; [`Error::Serialization`] for bytes that do not decode.
    fn loads_typed(&self, type_tag: &str, bytes: &[u8]) -> Result<Value>;

    /// True if this serializer writes a JSON array under the tag `msgpack` as
    /// a msgpack array header followed by the concatenated encodings of its
    /// elements, each independent of the others. The checkpointer then stores
    /// a list that grew by appending as only its new tail (incremental
    /// blobs). Default `false`: every value is stored whole.
    fn concatenates_arrays(&self) -> bool {
        false
    }

    /// Encodes a JSON array given as shared elements, exactly as
    /// [`dumps_typed`](Self::dumps_typed) encodes the array. The default
    /// builds the array (a deep copy); serializers that can encode element by
    /// element override it.
    ///
    /// # Errors
    /// As [`dumps_typed`](Self::dumps_typed).
    fn dumps_list(&self, items: &[&Value]) -> Result<(String, Vec<u8>)> {
        self.dumps_typed(&Value::Array(items.iter().map(|v| (*v).clone()).collect()))
    }
}

/// LangGraph's `JsonPlusSerializer`, byte for byte for plain values.
///
/// See the [module documentation](self) for the format and the JSON shapes
/// used for Python types.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonPlusSerializer;

impl Serializer for JsonPlusSerializer {
    fn concatenates_arrays(&self) -> bool {
        true
    }

    fn dumps_list(&self, items: &[&Value]) -> Result<(String, Vec<u8>)> {
        // An array is its header and its elements' encodings, one after the
        // other; an array never takes the `bytes` shape.
        if MAX_DEPTH == 0 {
            return Err(too_deep());
        }
        let len = u32::try_from(items.len()).map_err(|_| Error::ser("msgpack: a list longer than 2^32-1"))?;
        let mut out = Vec::with_capacity(items.len() * 64 + 5);
        rmp::encode::write_array_len(&mut out, len)
            .map_err(|e| Error::ser(format!("msgpack encode: {e}")))?;
        for item in items {
            encode::encode_at(&mut out, item, 1)?;
        }
        Ok(("msgpack".into(), out))
    }

    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)> {
        match value {
            Value::Null => Ok(("null".into(), Vec::new())),
            _ => match value_as_bytes(value) {
                Some(raw) => Ok(("bytes".into(), raw)),
                None => Ok(("msgpack".into(), to_msgpack(value)?)),
            },
        }
    }

    fn loads_typed(&self, type_tag: &str, bytes: &[u8]) -> Result<Value> {
        match type_tag {
            "null" => Ok(Value::Null),
            "msgpack" => from_msgpack(bytes),
            "json" => Ok(serde_json::from_slice(bytes)?),
            "bytes" | "bytearray" => Ok(bytes_to_value(bytes)),
            other => Err(Error::UnknownSerialization(other.to_string())),
        }
    }
}

/// Encodes `value` as MessagePack, as Python's `ormsgpack.packb` would, with
/// the [JSON shapes](self#json-shapes-for-what-json-cannot-hold) written as
/// the MessagePack types they stand for.
///
/// # Errors
/// [`Error::Serialization`] if the value nests deeper than [`MAX_DEPTH`].
fn to_msgpack(value: &Value) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(128);
    encode::encode(&mut buf, value)?;
    Ok(buf)
}

/// Decodes one MessagePack value that fills `bytes` exactly, with Python's
/// types turned into the [JSON shapes](self#json-shapes-for-what-json-cannot-hold).
///
/// # Errors
/// [`Error::Serialization`] if the bytes are not one well-formed MessagePack
/// value (truncated, trailing bytes, invalid UTF-8, marker `c1`) or nest
/// deeper than [`MAX_DEPTH`].
fn from_msgpack(bytes: &[u8]) -> Result<Value> {
    decode::decode(bytes)
}

/// The [bytes shape](self#bytes) of `bytes`: `{"__bytes__": "<lowercase hex>"}`.
fn bytes_to_value(bytes: &[u8]) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(BYTES_KEY.to_string(), Value::String(hex_encode(bytes)));
    Value::Object(m)
}

/// The bytes a [bytes shape](self#bytes) stands for, or `None` if `value` is not
/// exactly `{"__bytes__": "<lowercase hex>"}`.
fn value_as_bytes(value: &Value) -> Option<Vec<u8>> {
    value_as_hex(value).map(hex_decode)
}

// ---------------------------------------------------------------------------
// Hex

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_encode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0x0f)]);
    }
    // Only ASCII hex digits were pushed.
    String::from_utf8(out).unwrap_or_default()
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// `value` if it is a string of lowercase hex digits of even length.
fn as_hex_str(value: &Value) -> Option<&str> {
    let s = value.as_str()?;
    (s.len() % 2 == 0 && s.bytes().all(|c| hex_digit(c).is_some())).then_some(s)
}

/// Decodes a string already checked by [`as_hex_str`].
fn hex_decode(s: &str) -> Vec<u8> {
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| (hex_digit(p[0]).unwrap_or(0) << 4) | hex_digit(p[1]).unwrap_or(0))
        .collect()
}

/// The hex string of a bytes shape.
fn value_as_hex(value: &Value) -> Option<&str> {
    match value {
        Value::Object(m) if m.len() == 1 => m.get(BYTES_KEY).and_then(as_hex_str),
        _ => None,
    }
}

fn too_deep() -> Error {
    Error::ser(format!("msgpack: nesting deeper than {MAX_DEPTH} levels"))
}
