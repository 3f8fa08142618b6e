//! MessagePack -> `serde_json::Value`, read directly from the byte slice.
//!
//! The reader is iterative (an explicit stack instead of recursion), ext
//! payloads included: they are parsed in place, with the read limit narrowed
//! to the payload. So no input, however deep, can overflow the thread's stack.

use serde_json::{Map, Number, Value};

use super::{bytes_to_value, too_deep, value_as_hex, EXT_KEY, FLOAT_KEY, MAX_DEPTH};
use crate::error::{Error, Result};

fn truncated() -> Error {
    Error::ser("msgpack: unexpected end of data")
}

/// An open container on the explicit stack.
enum Frame {
    Array {
        items: Vec<Value>,
        left: usize,
    },
    Map {
        map: Map<String, Value>,
        key: Option<String>,
        left: usize,
    },
    /// An ext whose payload `start..end` is being parsed; `outer_end` is the
    /// read limit to restore when it is done.
    Ext {
        code: i8,
        start: usize,
        end: usize,
        outer_end: usize,
    },
}

/// One step of the reader.
enum Item {
    /// A complete value.
    Value(Value),
    /// A container or ext was opened (pushed on the stack).
    Opened,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Read limit: the end of the input, or of the ext payload being parsed.
    end: usize,
    stack: Vec<Frame>,
    /// Elements the containers opened so far may still reserve room for
    /// (see [`Reader::reserve`]).
    reservable: usize,
}

/// Decodes one value that fills `bytes` exactly.
pub(super) fn decode(bytes: &[u8]) -> Result<Value> {
    let mut r = Reader { buf: bytes, pos: 0, end: bytes.len(), stack: Vec::new(), reservable: bytes.len() };
    let v = r.run()?;
    if r.pos != bytes.len() {
        return Err(Error::ser(format!("msgpack: {} trailing byte(s) after the value", bytes.len() - r.pos)));
    }
    Ok(v)
}

impl Reader<'_> {
    fn run(&mut self) -> Result<Value> {
        loop {
            let mut v = match self.item() {
                Ok(Item::Value(v)) => v,
                Ok(Item::Opened) => continue,
                // Inside an ext payload an error only makes that ext raw.
                Err(e) => self.unwind().ok_or(e)?,
            };
            // Hand the value to the open containers, closing the full ones.
            loop {
                let payload = match self.stack.last_mut() {
                    None => return Ok(v),
                    Some(Frame::Array { items, left }) => {
                        items.push(v);
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        None
                    }
                    Some(Frame::Map { map, key, left }) => match key.take() {
                        None => {
                            *key = Some(key_string(v));
                            break;
                        }
                        Some(k) => {
                            map.insert(k, v);
                            *left -= 1;
                            if *left > 0 {
                                break;
                            }
                            None
                        }
                    },
                    Some(Frame::Ext { .. }) => Some(v),
                };
                v = self.close(payload);
            }
        }
    }

    /// Pops the top frame (full, or an ext with its `payload` value) and
    /// returns the value it makes.
    fn close(&mut self, payload: Option<Value>) -> Value {
        match self.stack.pop() {
            Some(Frame::Array { items, .. }) => Value::Array(items),
            Some(Frame::Map { map, .. }) => Value::Object(map),
            Some(Frame::Ext { code, start, end, outer_end }) => {
                self.end = outer_end;
                let exact = self.pos == end;
                self.pos = end;
                let body = payload.filter(|_| exact).and_then(|p| ext_body(code, p));
                ext_value(body.unwrap_or_else(|| raw_ext(code, &self.buf[start..end])))
            }
            None => Value::Null,
        }
    }

    /// After an error, drops everything opened inside the innermost ext and
    /// returns that ext as raw; `None` if the error is not inside an ext.
    fn unwind(&mut self) -> Option<Value> {
        while let Some(frame) = self.stack.pop() {
            if let Frame::Ext { code, start, end, outer_end } = frame {
                self.end = outer_end;
                self.pos = end;
                return Some(ext_value(raw_ext(code, &self.buf[start..end])));
            }
        }
        None
    }

    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// Room to reserve for a container of `n` elements. Each element takes
    /// at least a byte, but nested headers can each claim the same bytes
    /// left: all the containers of one input together reserve at most one
    /// element per input byte, so that lying headers cannot make the reader
    /// allocate more than the input's size in elements (a valid input never
    /// claims more).
    fn reserve(&mut self, n: usize) -> usize {
        let n = n.min(self.reservable);
        self.reservable -= n;
        n
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
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
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<usize> {
        Ok(usize::from(u16::from_be_bytes(self.array()?)))
    }

    fn u32(&mut self) -> Result<usize> {
        usize::try_from(u32::from_be_bytes(self.array()?)).map_err(|_| truncated())
    }

    fn str(&mut self, n: usize) -> Result<Value> {
        self.string(n).map(Value::String)
    }

    fn string(&mut self, n: usize) -> Result<String> {
        match std::str::from_utf8(self.take(n)?) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(Error::ser("msgpack: string is not valid UTF-8")),
        }
    }

    /// The next marker, not consumed.
    fn peek(&self) -> Option<u8> {
        (self.pos < self.end).then(|| self.buf[self.pos])
    }

    /// A string key, if the next value is a string (consumed then).
    fn string_key(&mut self) -> Result<Option<String>> {
        let n = match self.peek() {
            Some(m @ 0xa0..=0xbf) => {
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
            _ => return Ok(None),
        };
        self.string(n).map(Some)
    }

    fn bin(&mut self, n: usize) -> Result<Value> {
        Ok(bytes_to_value(self.take(n)?))
    }

    fn seq(&mut self, n: usize) -> Result<Item> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(too_deep());
        }
        if n == 0 {
            return Ok(Item::Value(Value::Array(Vec::new())));
        }
        // Every element takes at least one byte: refuse impossible lengths
        // before allocating for them.
        if n > self.remaining() {
            return Err(truncated());
        }
        let items = Vec::with_capacity(self.reserve(n));
        self.stack.push(Frame::Array { items, left: n });
        Ok(Item::Opened)
    }

    fn map(&mut self, n: usize) -> Result<Item> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(too_deep());
        }
        if n == 0 {
            return Ok(Item::Value(Value::Object(Map::new())));
        }
        if n > self.remaining() / 2 {
            return Err(truncated());
        }
        // Entries of a string key and a value that opens nothing (not a
        // container, not an ext) are read here, without going through the
        // stack; the first other entry hands the rest to it.
        let mut map = Map::with_capacity(self.reserve(n));
        let mut left = n;
        while left > 0 {
            let at = self.pos;
            let Some(key) = self.string_key()? else { break };
            if !self.peek().is_some_and(opens_nothing) {
                // The generic path reads this entry's value, then the rest.
                if self.peek().is_none() {
                    self.pos = at;
                    break;
                }
                self.stack.push(Frame::Map { map, key: Some(key), left });
                return Ok(Item::Opened);
            }
            match self.item()? {
                Item::Value(v) => {
                    map.insert(key, v);
                }
                Item::Opened => {
                    // Not reached (see `opens_nothing`); were it, the frame
                    // `item` opened belongs inside this map's.
                    let inner = self.stack.pop();
                    self.stack.push(Frame::Map { map, key: Some(key), left });
                    self.stack.extend(inner);
                    return Ok(Item::Opened);
                }
            }
            left -= 1;
        }
        if left == 0 {
            return Ok(Item::Value(Value::Object(map)));
        }
        self.stack.push(Frame::Map { map, key: None, left });
        Ok(Item::Opened)
    }

    /// An ext of payload length `n`; its type byte comes first.
    fn ext(&mut self, n: usize) -> Result<Item> {
        let code = self.u8()? as i8;
        if n > self.remaining() {
            return Err(truncated());
        }
        let (start, end) = (self.pos, self.pos + n);
        if (0..=7).contains(&code) && self.stack.len() < MAX_DEPTH {
            // Parse the payload in place.
            self.stack.push(Frame::Ext { code, start, end, outer_end: self.end });
            self.end = end;
            return Ok(Item::Opened);
        }
        self.pos = end;
        let payload = &self.buf[start..end];
        let body = if code == -1 { timestamp(payload) } else { None };
        Ok(Item::Value(ext_value(body.unwrap_or_else(|| raw_ext(code, payload)))))
    }

    /// Reads one marker and what follows it.
    fn item(&mut self) -> Result<Item> {
        let m = self.u8()?;
        let v = match m {
            0x00..=0x7f => Value::from(m),
            0x80..=0x8f => return self.map(usize::from(m & 0x0f)),
            0x90..=0x9f => return self.seq(usize::from(m & 0x0f)),
            0xa0..=0xbf => self.str(usize::from(m & 0x1f))?,
            0xc0 => Value::Null,
            0xc1 => return Err(Error::ser("msgpack: reserved marker 0xc1")),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 => {
                let n = usize::from(self.u8()?);
                self.bin(n)?
            }
            0xc5 => {
                let n = self.u16()?;
                self.bin(n)?
            }
            0xc6 => {
                let n = self.u32()?;
                self.bin(n)?
            }
            0xc7 => {
                let n = usize::from(self.u8()?);
                return self.ext(n);
            }
            0xc8 => {
                let n = self.u16()?;
                return self.ext(n);
            }
            0xc9 => {
                let n = self.u32()?;
                return self.ext(n);
            }
            0xca => float(f64::from(f32::from_be_bytes(self.array()?))),
            0xcb => float(f64::from_be_bytes(self.array()?)),
            0xcc => Value::from(self.u8()?),
            0xcd => Value::from(u16::from_be_bytes(self.array()?)),
            0xce => Value::from(u32::from_be_bytes(self.array()?)),
            0xcf => Value::from(u64::from_be_bytes(self.array()?)),
            0xd0 => Value::from(i8::from_be_bytes(self.array()?)),
            0xd1 => Value::from(i16::from_be_bytes(self.array()?)),
            0xd2 => Value::from(i32::from_be_bytes(self.array()?)),
            0xd3 => Value::from(i64::from_be_bytes(self.array()?)),
            0xd4..=0xd8 => return self.ext(1 << (m - 0xd4)),
            0xd9 => {
                let n = usize::from(self.u8()?);
                self.str(n)?
            }
            0xda => {
                let n = self.u16()?;
                self.str(n)?
            }
            0xdb => {
                let n = self.u32()?;
                self.str(n)?
            }
            0xdc => {
                let n = self.u16()?;
                return self.seq(n);
            }
            0xdd => {
                let n = self.u32()?;
                return self.seq(n);
            }
            0xde => {
                let n = self.u16()?;
                return self.map(n);
            }
            0xdf => {
                let n = self.u32()?;
                return self.map(n);
            }
            0xe0..=0xff => Value::from(m as i8),
        };
        Ok(Item::Value(v))
    }
}

/// Markers whose value [`Reader::item`] reads whole, without opening a
/// container or an ext.
fn opens_nothing(m: u8) -> bool {
    !matches!(m, 0x80..=0x9f | 0xc7..=0xc9 | 0xd4..=0xd8 | 0xdc..=0xdf)
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

/// A map key as a string: non-string keys are turned into strings (lossy).
fn key_string(key: Value) -> String {
    match key {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

fn ext_value(body: Map<String, Value>) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(EXT_KEY.to_string(), Value::Object(body));
    Value::Object(m)
}

fn raw_ext(code: i8, payload: &[u8]) -> Map<String, Value> {
    let mut m = Map::with_capacity(2);
    m.insert("code".to_string(), Value::from(code));
    m.insert("payload".to_string(), bytes_to_value(payload));
    m
}

/// The body of a code 0-7 ext from its decoded payload, or `None` to keep the
/// payload raw.
fn ext_body(code: i8, payload: Value) -> Option<Map<String, Value>> {
    let mut m = Map::with_capacity(5);
    m.insert("code".to_string(), Value::from(code));
    match code {
        0..=5 => {
            let Value::Array(mut a) = payload else { return None };
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
            let Value::Array(a) = payload else { return None };
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
            m.insert("value".to_string(), payload);
        }
        _ => return None,
    }
    Some(m)
}

/// The body of a MessagePack timestamp (ext -1), or `None` if malformed.
fn timestamp(payload: &[u8]) -> Option<Map<String, Value>> {
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
    let mut m = Map::with_capacity(3);
    m.insert("code".to_string(), Value::from(-1));
    m.insert("seconds".to_string(), Value::from(seconds));
    m.insert("nanoseconds".to_string(), Value::from(nanos));
    Some(m)
}
