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
//! [`MAX_DEPTH`].
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
//! documented fields with the documented types); any other object is an
//! ordinary map. A user map that happens to match a shape exactly is written
//! as the MessagePack type it describes; reading it back gives the same JSON.
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
//! - code -1 (MessagePack timestamp):
//!   `{"__ext__": {"code": -1, "seconds": <i64>, "nanoseconds": <0..1e9>}}`;
//!   written back in the smallest timestamp format.
//! - any other ext, or a payload that does not have the form above (including
//!   a payload that is not valid MessagePack or nests too deeply):
//!   `{"__ext__": {"code": n, "payload": {"__bytes__": "<hex of the payload>"}}}`,
//!   written back verbatim.
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
//! `float32` values are widened to `float64` (and written back as `float64`).
//! Strings that are not valid UTF-8, truncated data, the reserved marker `c1`
//! and bytes left over after the top-level value are
//! [`Error::Serialization`]. Nesting is limited to [`MAX_DEPTH`] containers
//! (an ext counts as one) when reading and writing, so hostile input cannot
//! overflow the stack.

use std::fmt::Display;

use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};

/// Deepest nesting of arrays, maps and ext types that is encoded or decoded.
pub const MAX_DEPTH: usize = 512;

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
}

/// LangGraph's `JsonPlusSerializer`, byte for byte for plain values.
///
/// See the [module documentation](self) for the format and the JSON shapes
/// used for Python types.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonPlusSerializer;

impl Serializer for JsonPlusSerializer {
    fn dumps_typed(&self, value: &Value) -> Result<(String, Vec<u8>)> {
        match value {
            Value::Null => Ok(("null".into(), Vec::new())),
            Value::Object(m) if m.len() == 1 => match m.get(BYTES_KEY).and_then(as_hex_str).map(hex_decode) {
                Some(raw) => Ok(("bytes".into(), raw)),
                None => Ok(("msgpack".into(), to_msgpack(value)?)),
            },
            _ => Ok(("msgpack".into(), to_msgpack(value)?)),
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
pub fn to_msgpack(value: &Value) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(128);
    encode(&mut buf, value, 0)?;
    Ok(buf)
}

/// Decodes one MessagePack value that fills `bytes` exactly, with Python's
/// types turned into the [JSON shapes](self#json-shapes-for-what-json-cannot-hold).
///
/// # Errors
/// [`Error::Serialization`] if the bytes are not one well-formed MessagePack
/// value (truncated, trailing bytes, invalid UTF-8, marker `c1`) or nest
/// deeper than [`MAX_DEPTH`].
pub fn from_msgpack(bytes: &[u8]) -> Result<Value> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let v = r.value(0)?;
    if r.pos != bytes.len() {
        return Err(Error::ser(format!("msgpack: {} trailing byte(s) after the value", bytes.len() - r.pos)));
    }
    Ok(v)
}

/// The [bytes shape](self#bytes) of `bytes`: `{"__bytes__": "<lowercase hex>"}`.
pub fn bytes_to_value(bytes: &[u8]) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(BYTES_KEY.to_string(), Value::String(hex_encode(bytes)));
    Value::Object(m)
}

/// The bytes a [bytes shape](self#bytes) stands for, or `None` if `value` is not
/// exactly `{"__bytes__": "<lowercase hex>"}`.
pub fn value_as_bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Object(m) if m.len() == 1 => m.get(BYTES_KEY).and_then(as_hex_str).map(hex_decode),
        _ => None,
    }
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

// ---------------------------------------------------------------------------
// Encoding

fn enc_err(e: impl Display) -> Error {
    Error::ser(format!("msgpack encode: {e}"))
}

fn too_deep() -> Error {
    Error::ser(format!("msgpack: nesting deeper than {MAX_DEPTH} levels"))
}

fn len_u32(len: usize, what: &str) -> Result<u32> {
    u32::try_from(len).map_err(|_| enc_err(format!("{what} of length {len} exceeds the msgpack limit")))
}

fn write_str(buf: &mut Vec<u8>, s: &str) -> Result<()> {
    rmp::encode::write_str_len(buf, len_u32(s.len(), "string")?).map_err(enc_err)?;
    buf.extend_from_slice(s.as_bytes());
    Ok(())
}

fn write_f64(buf: &mut Vec<u8>, f: f64) {
    buf.push(0xcb);
    buf.extend_from_slice(&f.to_bits().to_be_bytes());
}

/// Encodes `v`, a value at nesting `depth` (the top level is 0).
fn encode(buf: &mut Vec<u8>, v: &Value, depth: usize) -> Result<()> {
    match v {
        Value::Null => buf.push(0xc0),
        Value::Bool(b) => buf.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                rmp::encode::write_uint(buf, u).map_err(enc_err)?;
            } else if let Some(i) = n.as_i64() {
                rmp::encode::write_sint(buf, i).map_err(enc_err)?;
            } else {
                // Without serde_json's arbitrary_precision every other number is an f64.
                write_f64(buf, n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => write_str(buf, s)?,
        Value::Array(a) => {
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            rmp::encode::write_array_len(buf, len_u32(a.len(), "array")?).map_err(enc_err)?;
            for x in a {
                encode(buf, x, depth + 1)?;
            }
        }
        Value::Object(m) => {
            // The shapes stand for scalars (or ext types, which check their own payload).
            if m.len() == 1 && encode_shape(buf, m, depth)? {
                return Ok(());
            }
            if depth >= MAX_DEPTH {
                return Err(too_deep());
            }
            rmp::encode::write_map_len(buf, len_u32(m.len(), "map")?).map_err(enc_err)?;
            for (k, x) in m {
                write_str(buf, k)?;
                encode(buf, x, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// Writes a one-key object that is one of the JSON shapes; `false` (nothing
/// written) if it is an ordinary map.
fn encode_shape(buf: &mut Vec<u8>, m: &Map<String, Value>, depth: usize) -> Result<bool> {
    let Some((key, val)) = m.iter().next() else { return Ok(false) };
    match key.as_str() {
        BYTES_KEY => {
            let Some(hex) = as_hex_str(val) else { return Ok(false) };
            rmp::encode::write_bin_len(buf, len_u32(hex.len() / 2, "bytes")?).map_err(enc_err)?;
            buf.extend(hex_decode(hex));
            Ok(true)
        }
        FLOAT_KEY => {
            let f = match val.as_str() {
                Some("nan") => f64::NAN,
                Some("inf") => f64::INFINITY,
                Some("-inf") => f64::NEG_INFINITY,
                _ => return Ok(false),
            };
            write_f64(buf, f);
            Ok(true)
        }
        EXT_KEY => match val {
            Value::Object(ext) => encode_ext(buf, ext, depth),
            _ => Ok(false),
        },
        _ => Ok(false),
    }
}

/// The payload layout an `__ext__` object describes, checked before anything
/// is written.
enum ExtShape<'a> {
    Raw(&'a str),
    Constructor { module: &'a str, name: &'a str, args: &'a Value, method: Option<&'a str> },
    Numpy { dtype: &'a str, shape: &'a Value, order: &'a str, data: &'a str },
    Delta(&'a Value),
    Timestamp { seconds: i64, nanos: u32 },
}

fn ext_shape(ext: &Map<String, Value>) -> Option<(i8, ExtShape<'_>)> {
    let code = i8::try_from(ext.get("code")?.as_i64()?).ok()?;
    let s = |k: &str| ext.get(k).and_then(Value::as_str);
    let shape = match (code, ext.len()) {
        (_, 2) if ext.contains_key("payload") => ExtShape::Raw(value_as_hex(ext.get("payload")?)?),
        (0..=5, 4 | 5) => ExtShape::Constructor {
            module: s("module")?,
            name: s("name")?,
            args: ext.get("args")?,
            method: if ext.len() == 5 { Some(s("method")?) } else { None },
        },
        (6, 5) => ExtShape::Numpy {
            dtype: s("dtype")?,
            shape: ext.get("shape")?,
            order: s("order")?,
            data: value_as_hex(ext.get("data")?)?,
        },
        (7, 2) => ExtShape::Delta(ext.get("value")?),
        (-1, 3) => {
            let nanos = u32::try_from(ext.get("nanoseconds")?.as_u64()?).ok()?;
            (nanos < 1_000_000_000)
                .then_some(ExtShape::Timestamp { seconds: ext.get("seconds")?.as_i64()?, nanos })?
        }
        _ => return None,
    };
    Some((code, shape))
}

/// The hex string of a bytes shape.
fn value_as_hex(value: &Value) -> Option<&str> {
    match value {
        Value::Object(m) if m.len() == 1 => m.get(BYTES_KEY).and_then(as_hex_str),
        _ => None,
    }
}

fn encode_ext(buf: &mut Vec<u8>, ext: &Map<String, Value>, depth: usize) -> Result<bool> {
    let Some((code, shape)) = ext_shape(ext) else { return Ok(false) };
    // The payload is written in place and its header inserted before it.
    let start = buf.len();
    match shape {
        ExtShape::Raw(hex) => buf.extend(hex_decode(hex)),
        ExtShape::Constructor { module, name, args, method } => {
            if depth + 1 >= MAX_DEPTH {
                return Err(too_deep());
            }
            buf.push(if method.is_some() { 0x94 } else { 0x93 });
            write_str(buf, module)?;
            write_str(buf, name)?;
            encode(buf, args, depth + 2)?;
            if let Some(method) = method {
                write_str(buf, method)?;
            }
        }
        ExtShape::Numpy { dtype, shape, order, data } => {
            if depth + 1 >= MAX_DEPTH {
                return Err(too_deep());
            }
            buf.push(0x94);
            write_str(buf, dtype)?;
            encode(buf, shape, depth + 2)?;
            write_str(buf, order)?;
            rmp::encode::write_bin_len(buf, len_u32(data.len() / 2, "bytes")?).map_err(enc_err)?;
            buf.extend(hex_decode(data));
        }
        ExtShape::Delta(value) => encode(buf, value, depth + 1)?,
        ExtShape::Timestamp { seconds, nanos } => {
            if nanos == 0 && u32::try_from(seconds).is_ok() {
                buf.extend_from_slice(&(seconds as u32).to_be_bytes());
            } else if (0..1 << 34).contains(&seconds) {
                buf.extend_from_slice(&((u64::from(nanos) << 34) | seconds as u64).to_be_bytes());
            } else {
                buf.extend_from_slice(&nanos.to_be_bytes());
                buf.extend_from_slice(&seconds.to_be_bytes());
            }
        }
    }
    let len = len_u32(buf.len() - start, "ext payload")?;
    let mut header = [0u8; 6];
    let mut w: &mut [u8] = &mut header;
    rmp::encode::write_ext_meta(&mut w, len, code).map_err(enc_err)?;
    let used = 6 - w.len();
    buf.splice(start..start, header[..used].iter().copied());
    Ok(true)
}

// ---------------------------------------------------------------------------
// Decoding

fn truncated() -> Error {
    Error::ser("msgpack: unexpected end of data")
}

/// A MessagePack reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(truncated());
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8> {
        let b = *self.buf.get(self.pos).ok_or_else(truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<usize> {
        Ok(usize::from(u16::from_be_bytes(self.array()?)))
    }

    fn u32(&mut self) -> Result<usize> {
        usize::try_from(u32::from_be_bytes(self.array()?)).map_err(|_| truncated())
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Reads one value at nesting `depth` (the top level is 0).
    fn value(&mut self, depth: usize) -> Result<Value> {
        let m = self.u8()?;
        Ok(match m {
            0x00..=0x7f => Value::from(m),
            0x80..=0x8f => return self.map(usize::from(m & 0x0f), depth),
            0x90..=0x9f => return self.seq(usize::from(m & 0x0f), depth),
            0xa0..=0xbf => Value::String(self.str(usize::from(m & 0x1f))?),
            0xc0 => Value::Null,
            0xc1 => return Err(Error::ser("msgpack: reserved marker 0xc1")),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 => {
                let n = usize::from(self.u8()?);
                bytes_to_value(self.take(n)?)
            }
            0xc5 => {
                let n = self.u16()?;
                bytes_to_value(self.take(n)?)
            }
            0xc6 => {
                let n = self.u32()?;
                bytes_to_value(self.take(n)?)
            }
            0xc7 => {
                let n = usize::from(self.u8()?);
                self.ext(n, depth)?
            }
            0xc8 => {
                let n = self.u16()?;
                self.ext(n, depth)?
            }
            0xc9 => {
                let n = self.u32()?;
                self.ext(n, depth)?
            }
            0xca => float(f64::from(f32::from_be_bytes(self.array()?))),
            0xcb => float(f64::from_be_bytes(self.array()?)),
            0xcc => Value::from(self.u8()?),
            0xcd => Value::from(u16::from_be_bytes(self.array()?)),
            0xce => Value::from(u32::from_be_bytes(self.array()?)),
            0xcf => Value::from(self.u64()?),
            0xd0 => Value::from(i8::from_be_bytes(self.array()?)),
            0xd1 => Value::from(i16::from_be_bytes(self.array()?)),
            0xd2 => Value::from(i32::from_be_bytes(self.array()?)),
            0xd3 => Value::from(i64::from_be_bytes(self.array()?)),
            0xd4..=0xd8 => self.ext(1 << (m - 0xd4), depth)?,
            0xd9 => {
                let n = usize::from(self.u8()?);
                Value::String(self.str(n)?)
            }
            0xda => {
                let n = self.u16()?;
                Value::String(self.str(n)?)
            }
            0xdb => {
                let n = self.u32()?;
                Value::String(self.str(n)?)
            }
            0xdc => {
                let n = self.u16()?;
                return self.seq(n, depth);
            }
            0xdd => {
                let n = self.u32()?;
                return self.seq(n, depth);
            }
            0xde => {
                let n = self.u16()?;
                return self.map(n, depth);
            }
            0xdf => {
                let n = self.u32()?;
                return self.map(n, depth);
            }
            0xe0..=0xff => Value::from(m as i8),
        })
    }

    fn str(&mut self, n: usize) -> Result<String> {
        let raw = self.take(n)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(Error::ser("msgpack: string is not valid UTF-8")),
        }
    }

    fn seq(&mut self, n: usize, depth: usize) -> Result<Value> {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        // Every element takes at least one byte: refuse impossible lengths
        // before allocating for them.
        if n > self.remaining() {
            return Err(truncated());
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(out))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value> {
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        if n > self.remaining() / 2 {
            return Err(truncated());
        }
        let mut out = Map::with_capacity(n);
        for _ in 0..n {
            let key = self.key(depth + 1)?;
            let val = self.value(depth + 1)?;
            out.insert(key, val);
        }
        Ok(Value::Object(out))
    }

    /// Reads a map key; a key that is not a string is turned into one (lossy).
    fn key(&mut self, depth: usize) -> Result<String> {
        let n = match self.buf.get(self.pos) {
            Some(&m @ 0xa0..=0xbf) => {
                self.pos += 1;
                usize::from(m & 0x1f)
            }
            Some(0xd9) => {
                self.pos += 1;
                usize::from(self.u8()?)
            }
            Some(0xda) => {
                self.pos += 1;
                self.u16()?
            }
            Some(0xdb) => {
                self.pos += 1;
                self.u32()?
            }
            _ => return Ok(key_string(self.value(depth)?)),
        };
        self.str(n)
    }

    /// Reads an ext of payload length `n` (the type byte comes first).
    fn ext(&mut self, n: usize, depth: usize) -> Result<Value> {
        let code = self.u8()? as i8;
        let payload = self.take(n)?;
        let body = decode_ext(code, payload, depth).unwrap_or_else(|| raw_ext(code, payload));
        let mut m = Map::with_capacity(1);
        m.insert(EXT_KEY.to_string(), Value::Object(body));
        Ok(Value::Object(m))
    }
}

fn float(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None => {
            let name = if f.is_nan() {
                "nan"
            } else if f > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            let mut m = Map::with_capacity(1);
            m.insert(FLOAT_KEY.to_string(), Value::String(name.to_string()));
            Value::Object(m)
        }
    }
}

fn key_string(key: Value) -> String {
    match key {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

fn raw_ext(code: i8, payload: &[u8]) -> Map<String, Value> {
    let mut m = Map::with_capacity(2);
    m.insert("code".to_string(), Value::from(code));
    m.insert("payload".to_string(), bytes_to_value(payload));
    m
}

/// Decodes a payload one exactly fills, at nesting `depth`.
fn payload_value(payload: &[u8], depth: usize) -> Option<Value> {
    let mut r = Reader { buf: payload, pos: 0 };
    let v = r.value(depth).ok()?;
    (r.pos == payload.len()).then_some(v)
}

/// The ext shape of a known ext, or `None` to keep the payload raw.
fn decode_ext(code: i8, payload: &[u8], depth: usize) -> Option<Map<String, Value>> {
    let mut m = Map::with_capacity(5);
    m.insert("code".to_string(), Value::from(code));
    match code {
        0..=5 => {
            let Value::Array(mut a) = payload_value(payload, depth + 1)? else { return None };
            if !(a.len() == 3 || a.len() == 4) || !a[0].is_string() || !a[1].is_string() {
                return None;
            }
            let method = if a.len() == 4 { Some(a.pop().filter(Value::is_string)?) } else { None };
            let mut it = a.into_iter();
            m.insert("module".to_string(), it.next()?);
            m.insert("name".to_string(), it.next()?);
            m.insert("args".to_string(), it.next()?);
            if let Some(method) = method {
                m.insert("method".to_string(), method);
            }
        }
        6 => {
            let Value::Array(a) = payload_value(payload, depth + 1)? else { return None };
            let [dtype, shape, order, data]: [Value; 4] = a.try_into().ok()?;
            if !dtype.is_string() || !order.is_string() || value_as_hex(&data).is_none() {
                return None;
            }
            m.insert("dtype".to_string(), dtype);
            m.insert("shape".to_string(), shape);
            m.insert("order".to_string(), order);
            m.insert("data".to_string(), data);
        }
        7 => {
            m.insert("value".to_string(), payload_value(payload, depth + 1)?);
        }
        -1 => {
            let (seconds, nanos) = match payload.len() {
                4 => (i64::from(u32::from_be_bytes(payload.try_into().ok()?)), 0),
                8 => {
                    let v = u64::from_be_bytes(payload.try_into().ok()?);
                    ((v & ((1 << 34) - 1)) as i64, (v >> 34) as u32)
                }
                12 => (
                    i64::from_be_bytes(payload[4..].try_into().ok()?),
                    u32::from_be_bytes(payload[..4].try_into().ok()?),
                ),
                _ => return None,
            };
            if nanos >= 1_000_000_000 {
                return None;
            }
            m.insert("seconds".to_string(), Value::from(seconds));
            m.insert("nanoseconds".to_string(), Value::from(nanos));
        }
        _ => return None,
    }
    Some(m)
}
