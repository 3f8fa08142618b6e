//! `serde_json::Value` -> MessagePack, written directly into a byte buffer.
//!
//! The walk is iterative (an explicit stack instead of recursion), so the
//! nesting limit, not the thread's stack size, bounds what can be encoded.

use std::fmt::Display;

use serde_json::{map, Map, Value};

use super::{as_hex_str, hex_decode, too_deep, value_as_hex, BYTES_KEY, EXT_KEY, FLOAT_KEY, MAX_DEPTH};
use crate::error::{Error, Result};

fn enc_err(e: impl Display) -> Error {
    Error::ser(format!("msgpack encode: {e}"))
}

#[cold]
fn too_long(what: &str, len: usize) -> Error {
    enc_err(format!("{what} of length {len} exceeds the msgpack limit"))
}

fn len_u32(len: usize, what: &str) -> Result<u32> {
    u32::try_from(len).map_err(|_| too_long(what, len))
}

/// Writes a length header: `fix | len` when it fits under `fix_limit`, else
/// the 8 (if `m8` is not 0), 16 or 32-bit form, as the spec's smallest
/// encoding. (Hand-written rather than `rmp::encode`: this is the hot path.)
#[inline(always)]
fn write_len(
    buf: &mut Vec<u8>,
    len: usize,
    fix: u8,
    fix_limit: usize,
    m8: u8,
    m16: u8,
    what: &str,
) -> Result<()> {
    if len < fix_limit {
        buf.push(fix | len as u8);
    } else if m8 != 0 && len < 256 {
        buf.extend_from_slice(&[m8, len as u8]);
    } else if len < 65536 {
        buf.push(m16);
        buf.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        buf.push(m16 + 1);
        buf.extend_from_slice(&len_u32(len, what)?.to_be_bytes());
    }
    Ok(())
}

#[inline(always)]
fn write_str(buf: &mut Vec<u8>, s: &str) -> Result<()> {
    write_len(buf, s.len(), 0xa0, 32, 0xd9, 0xda, "string")?;
    buf.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Writes an unsigned integer in the smallest encoding.
fn write_uint(buf: &mut Vec<u8>, u: u64) {
    if u < 128 {
        buf.push(u as u8);
    } else if u < 1 << 8 {
        buf.extend_from_slice(&[0xcc, u as u8]);
    } else if u < 1 << 16 {
        buf.push(0xcd);
        buf.extend_from_slice(&(u as u16).to_be_bytes());
    } else if u < 1 << 32 {
        buf.push(0xce);
        buf.extend_from_slice(&(u as u32).to_be_bytes());
    } else {
        buf.push(0xcf);
        buf.extend_from_slice(&u.to_be_bytes());
    }
}

/// Writes a negative integer in the smallest encoding.
fn write_negative(buf: &mut Vec<u8>, i: i64) {
    if i >= -32 {
        buf.push(i as u8);
    } else if i >= i64::from(i8::MIN) {
        buf.extend_from_slice(&[0xd0, i as u8]);
    } else if i >= i64::from(i16::MIN) {
        buf.push(0xd1);
        buf.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i64::from(i32::MIN) {
        buf.push(0xd2);
        buf.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        buf.push(0xd3);
        buf.extend_from_slice(&i.to_be_bytes());
    }
}

fn write_f64(buf: &mut Vec<u8>, f: f64) {
    buf.push(0xcb);
    buf.extend_from_slice(&f.to_bits().to_be_bytes());
}

/// Writes a bin whose content is `hex` (already checked by `as_hex_str`).
fn write_bin_hex(buf: &mut Vec<u8>, hex: &str) -> Result<()> {
    write_len(buf, hex.len() / 2, 0, 0, 0xc4, 0xc5, "bytes")?;
    buf.extend(hex_decode(hex));
    Ok(())
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

/// Reads an `__ext__` body; `None` if it is not exactly one of the shapes.
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
            let seconds = ext.get("seconds")?.as_i64()?;
            (nanos < 1_000_000_000).then_some(ExtShape::Timestamp { seconds, nanos })?
        }
        _ => return None,
    };
    Some((code, shape))
}

fn write_timestamp(buf: &mut Vec<u8>, seconds: i64, nanos: u32) {
    // The smallest of the three timestamp formats that holds the value.
    if nanos == 0 && (0..=i64::from(u32::MAX)).contains(&seconds) {
        buf.extend_from_slice(&(seconds as u32).to_be_bytes());
    } else if (0..1i64 << 34).contains(&seconds) {
        buf.extend_from_slice(&((u64::from(nanos) << 34) | seconds as u64).to_be_bytes());
    } else {
        buf.extend_from_slice(&nanos.to_be_bytes());
        buf.extend_from_slice(&seconds.to_be_bytes());
    }
}

/// What an ext writes after its inner value.
enum Trailer<'a> {
    None,
    Method(&'a str),
    Numpy { order: &'a str, data: &'a str },
}

/// What `write_shape` did with a one-key object.
enum Shape<'a> {
    /// Not a shape: an ordinary map, nothing written.
    No,
    /// Written completely.
    Written,
    /// An ext was opened; its inner value is to be written next.
    Opened(&'a Value),
}

/// An open container on the explicit stack.
enum Frame<'a> {
    Array(std::slice::Iter<'a, Value>),
    Map(map::Iter<'a>),
    /// An ext whose payload starts at `start`; its header is inserted there
    /// once the payload is complete. `levels` is how much nesting it adds (1,
    /// or 2 when the payload is an array around the inner value).
    Ext {
        code: i8,
        start: usize,
        levels: usize,
        trailer: Trailer<'a>,
    },
}

struct Encoder<'a, 'b> {
    buf: &'b mut Vec<u8>,
    stack: Vec<Frame<'a>>,
    depth: usize,
}

/// Encodes `value` at the end of `buf`.
pub(super) fn encode(buf: &mut Vec<u8>, value: &Value) -> Result<()> {
    encode_at(buf, value, 0)
}

/// Encodes `value` at the end of `buf` as if nested `depth` levels deep.
pub(super) fn encode_at(buf: &mut Vec<u8>, value: &Value, depth: usize) -> Result<()> {
    let mut enc = Encoder { buf, stack: Vec::new(), depth };
    let mut next = Some(value);
    loop {
        while let Some(v) = next {
            next = enc.write(v)?;
        }
        // Find the next value to write, closing finished containers.
        loop {
            match enc.stack.last_mut() {
                None => return Ok(()),
                Some(Frame::Array(it)) => {
                    if let Some(x) = it.next() {
                        next = Some(x);
                        break;
                    }
                }
                Some(Frame::Map(it)) => {
                    if let Some((k, x)) = it.next() {
                        write_str(enc.buf, k)?;
                        next = Some(x);
                        break;
                    }
                }
                Some(Frame::Ext { .. }) => {}
            }
            enc.close()?;
        }
    }
}

impl<'a> Encoder<'a, '_> {
    fn push(&mut self, frame: Frame<'a>, levels: usize) -> Result<()> {
        if self.depth + levels > MAX_DEPTH {
            return Err(too_deep());
        }
        self.depth += levels;
        self.stack.push(frame);
        Ok(())
    }

    /// Pops the top frame, finishing an ext.
    fn close(&mut self) -> Result<()> {
        match self.stack.pop() {
            Some(Frame::Ext { code, start, levels, trailer }) => {
                self.depth -= levels;
                match trailer {
                    Trailer::None => {}
                    Trailer::Method(m) => write_str(self.buf, m)?,
                    Trailer::Numpy { order, data } => {
                        write_str(self.buf, order)?;
                        write_bin_hex(self.buf, data)?;
                    }
                }
                self.ext_header(code, start)
            }
            Some(_) => {
                self.depth -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Inserts the header of an ext whose payload runs from `start` to the end.
    fn ext_header(&mut self, code: i8, start: usize) -> Result<()> {
        let len = len_u32(self.buf.len() - start, "ext payload")?;
        let mut header = [0u8; 6];
        let used = {
            let mut w: &mut [u8] = &mut header;
            rmp::encode::write_ext_meta(&mut w, len, code).map_err(enc_err)?;
            6 - w.len()
        };
        self.buf.splice(start..start, header[..used].iter().copied());
        Ok(())
    }

    /// Writes `v`, or opens it; returns a value to write next (the inner value
    /// of an ext).
    fn write(&mut self, v: &'a Value) -> Result<Option<&'a Value>> {
        match v {
            Value::Null => self.buf.push(0xc0),
            Value::Bool(b) => self.buf.push(if *b { 0xc3 } else { 0xc2 }),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    write_uint(self.buf, u);
                } else if let Some(i) = n.as_i64() {
                    write_negative(self.buf, i);
                } else {
                    // Without serde_json's arbitrary_precision every other
                    // number is a finite f64.
                    write_f64(self.buf, n.as_f64().unwrap_or(f64::NAN));
                }
            }
            Value::String(s) => write_str(self.buf, s)?,
            Value::Array(a) => {
                self.push(Frame::Array(a.iter()), 1)?;
                write_len(self.buf, a.len(), 0x90, 16, 0, 0xdc, "array")?;
            }
            Value::Object(m) => {
                if m.len() == 1 {
                    match self.write_shape(m)? {
                        Shape::No => {}
                        Shape::Written => return Ok(None),
                        Shape::Opened(inner) => return Ok(Some(inner)),
                    }
                }
                self.push(Frame::Map(m.iter()), 1)?;
                write_len(self.buf, m.len(), 0x80, 16, 0, 0xde, "map")?;
            }
        }
        Ok(None)
    }

    /// Writes a one-key object if it is one of the JSON shapes.
    fn write_shape(&mut self, m: &'a Map<String, Value>) -> Result<Shape<'a>> {
        let Some((key, val)) = m.iter().next() else { return Ok(Shape::No) };
        match key.as_str() {
            BYTES_KEY => {
                let Some(hex) = as_hex_str(val) else { return Ok(Shape::No) };
                write_bin_hex(self.buf, hex)?;
                Ok(Shape::Written)
            }
            FLOAT_KEY => {
                let f = match val.as_str() {
                    Some("nan") => f64::NAN,
                    Some("inf") => f64::INFINITY,
                    Some("-inf") => f64::NEG_INFINITY,
                    _ => return Ok(Shape::No),
                };
                write_f64(self.buf, f);
                Ok(Shape::Written)
            }
            EXT_KEY => {
                let Value::Object(ext) = val else { return Ok(Shape::No) };
                let Some((code, shape)) = ext_shape(ext) else { return Ok(Shape::No) };
                self.write_ext(code, shape)
            }
            _ => Ok(Shape::No),
        }
    }

    fn write_ext(&mut self, code: i8, shape: ExtShape<'a>) -> Result<Shape<'a>> {
        // The payload is written in place; the header goes in front of it at
        // the end (see `close`).
        let start = self.buf.len();
        match shape {
            ExtShape::Raw(hex) => {
                self.buf.extend(hex_decode(hex));
                self.ext_header(code, start)?;
                Ok(Shape::Written)
            }
            ExtShape::Timestamp { seconds, nanos } => {
                write_timestamp(self.buf, seconds, nanos);
                self.ext_header(code, start)?;
                Ok(Shape::Written)
            }
            ExtShape::Delta(value) => {
                self.push(Frame::Ext { code, start, levels: 1, trailer: Trailer::None }, 1)?;
                Ok(Shape::Opened(value))
            }
            ExtShape::Constructor { module, name, args, method } => {
                let trailer = method.map_or(Trailer::None, Trailer::Method);
                self.push(Frame::Ext { code, start, levels: 2, trailer }, 2)?;
                self.buf.push(if method.is_some() { 0x94 } else { 0x93 });
                write_str(self.buf, module)?;
                write_str(self.buf, name)?;
                Ok(Shape::Opened(args))
            }
            ExtShape::Numpy { dtype, shape, order, data } => {
                self.push(Frame::Ext { code, start, levels: 2, trailer: Trailer::Numpy { order, data } }, 2)?;
                self.buf.push(0x94);
                write_str(self.buf, dtype)?;
                Ok(Shape::Opened(shape))
            }
        }
    }
}
