//! Splitting a `SqliteSaver` checkpoint (one msgpack map of the whole
//! state) into its channel values' bytes and the rest, decoded.

use serde_json::{Map, Value};

use crate::codec::{JsonPlusSerializer, Serializer};
use crate::error::{Error, Result};

/// A cursor over msgpack bytes that only finds where values end.
pub(super) struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

pub(super) fn malformed(what: &str) -> Error {
    Error::ser(format!("msgpack: {what}"))
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end =
            self.pos.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| malformed("truncated"))?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn uint(&mut self, n: usize) -> Result<usize> {
        let bytes = self.take(n)?;
        Ok(bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)))
    }

    /// The entry count of a map header.
    fn map_len(&mut self) -> Result<usize> {
        match self.take(1)?[0] {
            m @ 0x80..=0x8f => Ok(usize::from(m & 0x0f)),
            0xde => self.uint(2),
            0xdf => self.uint(4),
            _ => Err(malformed("expected a map")),
        }
    }

    /// A string.
    fn str(&mut self) -> Result<String> {
        let n = match self.take(1)?[0] {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.uint(1)?,
            0xda => self.uint(2)?,
            0xdb => self.uint(4)?,
            _ => return Err(malformed("expected a string key")),
        };
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| malformed("a key is not valid UTF-8"))
    }

    /// The bytes of the next value (ext payloads are not looked into).
    fn value(&mut self) -> Result<&'a [u8]> {
        let start = self.pos;
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let m = self.take(1)?[0];
            let (skip, items) = match m {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
                0x80..=0x8f => (0, 2 * usize::from(m & 0x0f)),
                0x90..=0x9f => (0, usize::from(m & 0x0f)),
                0xa0..=0xbf => (usize::from(m & 0x1f), 0),
                0xc4 | 0xd9 => (self.uint(1)?, 0),
                0xc5 | 0xda => (self.uint(2)?, 0),
                0xc6 | 0xdb => (self.uint(4)?, 0),
                0xc7 => (self.uint(1)? + 1, 0),
                0xc8 => (self.uint(2)? + 1, 0),
                0xc9 => (self.uint(4)?.saturating_add(1), 0),
                0xca | 0xce | 0xd2 => (4, 0),
                0xcb | 0xcf | 0xd3 => (8, 0),
                0xcc | 0xd0 => (1, 0),
                0xcd | 0xd1 => (2, 0),
                0xd4 => (2, 0),
                0xd5 => (3, 0),
                0xd6 => (5, 0),
                0xd7 => (9, 0),
                0xd8 => (17, 0),
                0xdc => (0, self.uint(2)?),
                0xdd => (0, self.uint(4)?),
                0xde => (0, 2 * self.uint(2)?),
                0xdf => (0, self.uint(4)?.saturating_mul(2)),
                _ => return Err(malformed("reserved marker 0xc1")),
            };
            self.take(skip)?;
            pending = pending.saturating_add(items);
            // Every value takes at least a byte: more pending values than
            // bytes left can only be truncated data.
            if pending > self.b.len() - self.pos {
                return Err(malformed("truncated"));
            }
        }
        Ok(&self.b[start..self.pos])
    }
}

/// A checkpoint cut out of its msgpack: the keys other than
/// `channel_values`, decoded, and each channel value's bytes.
pub(super) struct Split<'a> {
    pub(super) rest: Map<String, Value>,
    pub(super) values: Vec<(String, &'a [u8])>,
}

pub(super) fn split_checkpoint(bytes: &[u8]) -> Result<Split<'_>> {
    let mut c = Cursor { b: bytes, pos: 0 };
    let n = c.map_len()?;
    let mut rest = Map::new();
    let mut values = Vec::new();
    for _ in 0..n {
        let key = c.str()?;
        let raw = c.value()?;
        if key == "channel_values" {
            if raw == [0xc0] {
                continue;
            }
            let mut v = Cursor { b: raw, pos: 0 };
            let m = v.map_len()?;
            values.reserve(m.min(raw.len()));
            for _ in 0..m {
                let ch = v.str()?;
                values.push((ch, v.value()?));
            }
        } else {
            rest.insert(key, JsonPlusSerializer.loads_typed("msgpack", raw)?);
        }
    }
    if c.pos != bytes.len() {
        return Err(malformed("bytes after the checkpoint"));
    }
    Ok(Split { rest, values })
}

/// The value to store inline if `raw` is null, a bool, a 64-bit integer, a
/// finite float or a string (as `AgentStateSaver` stores them).
pub(super) fn inline_value(raw: &[u8]) -> Option<Value> {
    let first = *raw.first()?;
    let scalar = matches!(
        first,
        0x00..=0x7f | 0xe0..=0xff | 0xa0..=0xbf | 0xc0 | 0xc2 | 0xc3 | 0xcb..=0xd3 | 0xd9..=0xdb
    );
    if !scalar {
        return None;
    }
    match JsonPlusSerializer.loads_typed("msgpack", raw).ok()? {
        v @ (Value::Null | Value::Bool(_) | Value::String(_)) => Some(v),
        Value::Number(n) if n.is_i64() || n.is_f64() => Some(Value::Number(n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Vec<u8> {
        let cp = json!({
            "v": 4, "id": "1", "ts": "t",
            "channel_values": {"messages": [{"__bytes__": "00ff"}, "hi", 1.5, [1, {"a": null}]], "n": 7},
            "channel_versions": {"messages": "1", "n": "1"},
            "versions_seen": {}, "updated_channels": null
        });
        JsonPlusSerializer.dumps_typed(&cp).unwrap().1
    }

    #[test]
    fn a_checkpoint_splits_into_its_values_bytes() {
        let bytes = sample();
        let split = split_checkpoint(&bytes).unwrap();
        let names: Vec<&str> = split.values.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["messages", "n"]);
        let messages = JsonPlusSerializer.loads_typed("msgpack", split.values[0].1).unwrap();
        assert_eq!(messages, json!([{"__bytes__": "00ff"}, "hi", 1.5, [1, {"a": null}]]));
        assert_eq!(inline_value(split.values[1].1), Some(json!(7)));
        assert_eq!(inline_value(split.values[0].1), None);
        assert_eq!(split.rest["channel_versions"], json!({"messages": "1", "n": "1"}));
        assert!(!split.rest.contains_key("channel_values"));
    }

    #[test]
    fn damaged_msgpack_is_an_error_never_a_panic() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(split_checkpoint(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        for at in 0..bytes.len() {
            for b in [0x00, 0xc1, 0xdd, 0xdf, 0xc9, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = b;
                let _ = split_checkpoint(&damaged);
            }
        }
        // Huge counts in a few bytes are refused without allocating them.
        assert!(split_checkpoint(&[0x81, 0xa1, b'x', 0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(split_checkpoint(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
