//! The checkpoint row as MessagePack (`type = 'msgpack'`, docs/format.md,
//! "Checkpoint rows"): what the compact JSON row holds, in about half the
//! bytes, and faster to read.
//!
//! The row is an array of 8: `[v, ts, channels, versions, values, seen,
//! updated, extra]`:
//! - `channels`: the names of `channel_versions`, in order; elsewhere in the
//!   row a channel is named by its index there (an integer), or by its name
//!   (a string) if it is not one of them;
//! - `versions`: one version per name of `channels`;
//! - `values`: a map from channel to the inline (primitive) value, or to
//!   [`EMPTY`] for a channel that has a version and no value (migration 8;
//!   before, such a channel had a blob row of type `empty`);
//! - `seen`: a map from node to a map from channel to version
//!   (`versions_seen`);
//! - `updated`: `updated_channels` (nil when absent);
//! - `extra`: the checkpoint's other keys (a map).
//!
//! A version is an integer (an integer version), a string (a string
//! version as it is), or `[counter, digits, n]` for LangGraph's
//! `"{counter:032}.{random:016}"` whose random part is `0.` and 14 to 19
//! digits (Python's `repr` of `random.random()` almost always is): the text
//! `"{counter:032}.0.{digits:0n}"`. Only a version that is exactly that text
//! is packed, so every version reads back as written.

use std::collections::BTreeMap;
use std::io::Cursor;

use rmp::decode;
use rmp::encode;
use serde_json::{Map, Number, Value};

use super::types::{ChannelVersion, ChannelVersions, Checkpoint};
use crate::json::MAX_STORED_DEPTH;

/// The `type` of a checkpoint row in this format.
pub(crate) const TYPE: &str = "msgpack";

/// The `values` entry of a channel with a version and no value: a
/// MessagePack ext of type 0 with no data (`c7 00 00`).
pub(crate) const EMPTY: [u8; 3] = [0xc7, 0x00, 0x00];

/// How a row's `checkpoint` column is stored (its `type` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowFormat {
    /// LangGraph's checkpoint JSON (`type` NULL: rows written before
    /// migration 6).
    Json,
    /// JSON with compact versions and no `id` (`'compact'`, written by
    /// migration 6's version).
    Compact,
    /// MessagePack (this module, `'msgpack'`, written since
    /// migration 7).
    Msgpack,
}

impl RowFormat {
    /// The format column `i` of `row` (a `type`) names.
    pub(crate) fn of(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<RowFormat> {
        Ok(match row.get_ref(i)?.as_str_or_null().ok().flatten() {
            Some(t) if t == TYPE => RowFormat::Msgpack,
            Some(t) if t == super::compact::TYPE => RowFormat::Compact,
            _ => RowFormat::Json,
        })
    }
}

/// A row's contents, decoded.
pub(crate) struct Decoded {
    pub(crate) v: i64,
    pub(crate) ts: String,
    pub(crate) channel_values: Map<String, Value>,
    /// Channels with a version and no value, in `channel_versions` order.
    pub(crate) empty: Vec<String>,
    pub(crate) channel_versions: ChannelVersions,
    pub(crate) versions_seen: BTreeMap<String, ChannelVersions>,
    pub(crate) updated_channels: Option<Vec<String>>,
    pub(crate) extra: Map<String, Value>,
}

/// The row of `checkpoint`, its primitive channel values inline (the others
/// are blobs) and, with `mark_empty`, every channel of `channel_versions`
/// without a value in `channel_values` as [`EMPTY`].
pub(crate) fn encode(checkpoint: &Checkpoint, mark_empty: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let names: Vec<&str> = checkpoint.channel_versions.keys().map(String::as_str).collect();
    let index: BTreeMap<&str, u32> = names.iter().enumerate().map(|(i, n)| (*n, i as u32)).collect();
    let channel = |out: &mut Vec<u8>, name: &str| match index.get(name) {
        Some(i) => {
            let _ = encode::write_uint(out, u64::from(*i));
        }
        None => {
            let _ = encode::write_str(out, name);
        }
    };
    // Writing to a Vec cannot fail.
    let _ = encode::write_array_len(&mut out, 8);
    let _ = encode::write_sint(&mut out, checkpoint.v);
    let _ = encode::write_str(&mut out, &checkpoint.ts);
    let _ = encode::write_array_len(&mut out, names.len() as u32);
    for n in &names {
        let _ = encode::write_str(&mut out, n);
    }
    let _ = encode::write_array_len(&mut out, names.len() as u32);
    for v in checkpoint.channel_versions.values() {
        write_version(&mut out, v);
    }
    let inline: Vec<(&String, Value)> = checkpoint
        .channel_values
        .iter()
        .filter(|(_, v)| v.is_primitive())
        .map(|(k, v)| (k, v.to_value()))
        .collect();
    let empty: Vec<&str> =
        names.iter().copied().filter(|n| mark_empty && !checkpoint.channel_values.contains_key(*n)).collect();
    let _ = encode::write_map_len(&mut out, (inline.len() + empty.len()) as u32);
    for (k, v) in &inline {
        channel(&mut out, k);
        write_value(&mut out, v);
    }
    for k in empty {
        channel(&mut out, k);
        out.extend_from_slice(&EMPTY);
    }
    let _ = encode::write_map_len(&mut out, checkpoint.versions_seen.len() as u32);
    for (node, seen) in &checkpoint.versions_seen {
        let _ = encode::write_str(&mut out, node);
        let _ = encode::write_map_len(&mut out, seen.len() as u32);
        for (k, v) in seen {
            channel(&mut out, k);
            write_version(&mut out, v);
        }
    }
    match &checkpoint.updated_channels {
        None => {
            let _ = encode::write_nil(&mut out);
        }
        Some(list) => {
            let _ = encode::write_array_len(&mut out, list.len() as u32);
            for k in list {
                channel(&mut out, k);
            }
        }
    }
    let _ = encode::write_map_len(&mut out, checkpoint.extra.len() as u32);
    for (k, v) in &checkpoint.extra {
        let _ = encode::write_str(&mut out, k);
        write_value(&mut out, v);
    }
    out
}

/// A row's contents; `Err` says what is wrong with a damaged row.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    decode_with(bytes, &mut VersionTexts::default())
}

/// The texts of LangGraph versions a read built, to hand out again: a
/// checkpoint's `versions_seen` repeats versions of its `channel_versions`,
/// and consecutive checkpoints of a history share most of them. A clone of
/// the text costs a fifth of building it. Direct-mapped: a slot holds the
/// last version that hashed to it. The slots are made on first use (a
/// single row's read often has no packed version at all).
#[derive(Default)]
pub(crate) struct VersionTexts {
    slots: Vec<Option<(Packed, String)>>,
}

/// A LangGraph version packed: (counter, digits, number of digits).
type Packed = (u64, u64, u8);

impl VersionTexts {
    fn text(&mut self, counter: u64, digits: u64, len: u8) -> String {
        let key = (counter, digits, len);
        // The high bits of a multiply mix every bit of both numbers.
        let at = (counter ^ digits).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58;
        if self.slots.is_empty() {
            self.slots.resize(64, None);
        }
        let slot = &mut self.slots[at as usize];
        match slot {
            Some((k, text)) if *k == key => text.clone(),
            _ => {
                let text = langgraph_text(counter, digits, len);
                *slot = Some((key, text.clone()));
                text
            }
        }
    }
}

/// [`decode()`], building version texts through `texts`.
pub(crate) fn decode_with(bytes: &[u8], texts: &mut VersionTexts) -> Result<Decoded, String> {
    let mut rd = Cursor::new(bytes);
    let rd = &mut rd;
    let bad = |what: &str| format!("the msgpack checkpoint row is damaged ({what})");
    if decode::read_array_len(rd).map_err(|_| bad("header"))? != 8 {
        return Err(bad("header"));
    }
    let v: i64 = decode::read_int(rd).map_err(|_| bad("v"))?;
    let ts = read_str(rd).ok_or_else(|| bad("ts"))?;
    let n = array_len(rd).ok_or_else(|| bad("channels"))?;
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(read_str(rd).ok_or_else(|| bad("channels"))?);
    }
    if array_len(rd) != Some(names.len()) {
        return Err(bad("versions"));
    }
    let mut channel_versions = ChannelVersions::new();
    for name in &names {
        channel_versions.insert(name.clone(), read_version(rd, texts).ok_or_else(|| bad("versions"))?);
    }
    let channel = |rd: &mut Cursor<&[u8]>| -> Option<String> {
        match peek(rd)? {
            0x00..=0x7f | 0xcc..=0xcf => {
                names.get(usize::try_from(decode::read_int::<u64, _>(rd).ok()?).ok()?).cloned()
            }
            _ => read_str(rd),
        }
    };
    let n = map_len(rd).ok_or_else(|| bad("values"))?;
    let mut channel_values = Map::new();
    let mut empty = Vec::new();
    for _ in 0..n {
        let k = channel(rd).ok_or_else(|| bad("values"))?;
        let at = rd.position() as usize;
        if bytes.get(at..at + EMPTY.len()) == Some(&EMPTY[..]) {
            rd.set_position((at + EMPTY.len()) as u64);
            if !channel_versions.contains_key(&k) {
                return Err(bad("an empty channel without a version"));
            }
            empty.push(k);
            continue;
        }
        let v = read_value(rd, 0).filter(is_primitive).ok_or_else(|| bad("values"))?;
        channel_values.insert(k, v);
    }
    let n = map_len(rd).ok_or_else(|| bad("versions_seen"))?;
    let mut versions_seen = BTreeMap::new();
    for _ in 0..n {
        let node = read_str(rd).ok_or_else(|| bad("versions_seen"))?;
        let m = map_len(rd).ok_or_else(|| bad("versions_seen"))?;
        let mut seen = ChannelVersions::new();
        for _ in 0..m {
            let k = channel(rd).ok_or_else(|| bad("versions_seen"))?;
            seen.insert(k, read_version(rd, texts).ok_or_else(|| bad("versions_seen"))?);
        }
        versions_seen.insert(node, seen);
    }
    let updated_channels = if peek(rd) == Some(0xc0) {
        rd.set_position(rd.position() + 1);
        None
    } else {
        let n = array_len(rd).ok_or_else(|| bad("updated_channels"))?;
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            list.push(channel(rd).ok_or_else(|| bad("updated_channels"))?);
        }
        Some(list)
    };
    let n = map_len(rd).ok_or_else(|| bad("extra"))?;
    let mut extra = Map::new();
    for _ in 0..n {
        let k = read_str(rd).ok_or_else(|| bad("extra"))?;
        extra.insert(k, read_value(rd, 1).ok_or_else(|| bad("extra"))?);
    }
    if rd.position() as usize != bytes.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(Decoded { v, ts, channel_values, empty, channel_versions, versions_seen, updated_channels, extra })
}

/// Installs two SQL functions over a row of this format (NULL for a row
/// that does not decode): `agentstate_row_ts(checkpoint)`, its `ts`, and
/// `agentstate_row_updated(checkpoint)`, its `updated_channels` as JSON text
/// (NULL when absent), what `json_extract` gives for JSON rows.
pub(crate) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    let flags =
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    let decoded = |ctx: &rusqlite::functions::Context<'_>| -> Option<Decoded> {
        decode(ctx.get_raw(0).as_bytes_or_null().ok().flatten()?).ok()
    };
    conn.create_scalar_function("agentstate_row_ts", 1, flags, move |ctx| Ok(decoded(ctx).map(|d| d.ts)))?;
    conn.create_scalar_function("agentstate_row_updated", 1, flags, move |ctx| {
        Ok(decoded(ctx).and_then(|d| d.updated_channels).map(|u| Value::from(u).to_string()))
    })
}

fn is_primitive(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn write_version(out: &mut Vec<u8>, v: &ChannelVersion) {
    match v {
        ChannelVersion::Int(n) => {
            let _ = encode::write_sint(out, *n);
        }
        ChannelVersion::Str(s) => match langgraph_version(s) {
            Some((counter, digits, len)) => {
                let _ = encode::write_array_len(out, 3);
                let _ = encode::write_uint(out, counter);
                let _ = encode::write_uint(out, digits);
                let _ = encode::write_uint(out, u64::from(len));
            }
            None => {
                let _ = encode::write_str(out, s);
            }
        },
    }
}

/// Digits after `0.` a packed version may have: 14 (so that `0.` and
/// them fill LangGraph's 16 places without padding) to 19 (a `u64`).
const DIGITS: std::ops::RangeInclusive<usize> = 14..=19;

/// `"{counter:032}.0.{digits:0len$}"`: LangGraph's version text (built by
/// hand: `format!`'s padding writes one char at a time, and a history read
/// makes a dozen of these per checkpoint).
fn langgraph_text(counter: u64, digits: u64, len: u8) -> String {
    let mut out = String::with_capacity(35 + usize::from(len));
    push_padded(&mut out, counter, 32);
    out.push_str(".0.");
    push_padded(&mut out, digits, usize::from(len));
    out
}

/// `n` in decimal, left-padded with zeros to `width`.
pub(super) fn push_padded(out: &mut String, mut n: u64, width: usize) {
    // Two digits per division; the buffer starts as the padding.
    const PAIRS: &[u8; 200] =
        b"00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [b'0'; 32];
    let mut at = buf.len();
    while n >= 100 {
        let r = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[r..r + 2]);
    }
    if n >= 10 {
        let r = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[r..r + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    let start = at.min(buf.len().saturating_sub(width));
    // ASCII digits.
    out.push_str(std::str::from_utf8(&buf[start..]).unwrap_or_default());
}

/// `(counter, digits, number of digits)` if `s` is exactly
/// [`langgraph_text`] of them.
fn langgraph_version(s: &str) -> Option<(u64, u64, u8)> {
    let (counter, rest) = s.split_at_checked(32)?;
    let digits = rest.strip_prefix(".0.")?;
    if !DIGITS.contains(&digits.len()) {
        return None;
    }
    // A counter is mostly padding: skip the zeros before reading digits.
    let counter = match counter.trim_start_matches('0') {
        "" => 0,
        significant => decimal(significant)?,
    };
    Some((counter, decimal(digits)?, digits.len() as u8))
}

/// The value of a non-empty run of ASCII digits that fits a `u64` (checked
/// and read in one pass: every version of a checkpoint row goes through
/// here).
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0u64, |n, b| {
        let d = b.wrapping_sub(b'0');
        (d <= 9).then_some(())?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

fn read_version(rd: &mut Cursor<&[u8]>, texts: &mut VersionTexts) -> Option<ChannelVersion> {
    Some(match peek(rd)? {
        0x90..=0x9f | 0xdc | 0xdd => {
            if decode::read_array_len(rd).ok()? != 3 {
                return None;
            }
            let counter: u64 = decode::read_int(rd).ok()?;
            let digits: u64 = decode::read_int(rd).ok()?;
            let len: u8 = decode::read_int(rd).ok()?;
            if !DIGITS.contains(&usize::from(len))
                || digits.checked_ilog10().map_or(1, |l| l + 1) > u32::from(len)
            {
                return None;
            }
            ChannelVersion::Str(texts.text(counter, digits, len))
        }
        0xa0..=0xbf | 0xd9..=0xdb => ChannelVersion::Str(read_str(rd)?),
        _ => ChannelVersion::Int(decode::read_int(rd).ok()?),
    })
}

/// A plain JSON value as MessagePack: nil, bool, int (u64 or i64), float64,
/// str, array, map with string keys.
fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => {
            let _ = encode::write_nil(out);
        }
        Value::Bool(b) => {
            let _ = encode::write_bool(out, *b);
        }
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                let _ = encode::write_uint(out, u);
            } else if let Some(i) = n.as_i64() {
                let _ = encode::write_sint(out, i);
            } else {
                let _ = encode::write_f64(out, n.as_f64().unwrap_or_default());
            }
        }
        Value::String(s) => {
            let _ = encode::write_str(out, s);
        }
        Value::Array(a) => {
            let _ = encode::write_array_len(out, a.len() as u32);
            for x in a {
                write_value(out, x);
            }
        }
        Value::Object(m) => {
            let _ = encode::write_map_len(out, m.len() as u32);
            for (k, x) in m {
                let _ = encode::write_str(out, k);
                write_value(out, x);
            }
        }
    }
}

/// The most elements [`read_value`] reserves room for in one array before
/// reading them (a damaged row's lengths can lie).
const PREALLOCATE: usize = 64;

/// What [`write_value`] wrote, `depth` levels down; `None` if damaged.
fn read_value(rd: &mut Cursor<&[u8]>, depth: usize) -> Option<Value> {
    if depth > MAX_STORED_DEPTH {
        return None;
    }
    Some(match peek(rd)? {
        0xc0 => {
            rd.set_position(rd.position() + 1);
            Value::Null
        }
        0xc2 | 0xc3 => Value::Bool(decode::read_bool(rd).ok()?),
        0x00..=0x7f | 0xcc..=0xcf => Value::from(decode::read_int::<u64, _>(rd).ok()?),
        0xe0..=0xff | 0xd0..=0xd3 => Value::from(decode::read_int::<i64, _>(rd).ok()?),
        0xcb => Value::Number(Number::from_f64(decode::read_f64(rd).ok()?)?),
        0xa0..=0xbf | 0xd9..=0xdb => Value::String(read_str(rd)?),
        0x90..=0x9f | 0xdc | 0xdd => {
            let n = array_len(rd)?;
            // Room for at most `PREALLOCATE` elements: nested headers can
            // each claim every byte left, and a row's arrays (only in its
            // `extra`) are short.
            let mut a = Vec::with_capacity(n.min(PREALLOCATE));
            for _ in 0..n {
                a.push(read_value(rd, depth + 1)?);
            }
            Value::Array(a)
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let n = map_len(rd)?;
            let mut m = Map::new();
            for _ in 0..n {
                let k = read_str(rd)?;
                m.insert(k, read_value(rd, depth + 1)?);
            }
            Value::Object(m)
        }
        _ => return None,
    })
}

/// The next byte, not consumed.
pub(super) fn peek(rd: &Cursor<&[u8]>) -> Option<u8> {
    rd.get_ref().get(rd.position() as usize).copied()
}

/// An array's length, if no larger than the bytes left could hold.
fn array_len(rd: &mut Cursor<&[u8]>) -> Option<usize> {
    let n = decode::read_array_len(rd).ok()? as usize;
    fits(rd, n)
}

/// A map's length, if no larger than the bytes left could hold.
fn map_len(rd: &mut Cursor<&[u8]>) -> Option<usize> {
    let n = decode::read_map_len(rd).ok()? as usize;
    fits(rd, n)
}

fn fits(rd: &Cursor<&[u8]>, n: usize) -> Option<usize> {
    (n <= rd.get_ref().len().saturating_sub(rd.position() as usize)).then_some(n)
}

/// A msgpack str; `None` if it is not one, is cut short, or is not UTF-8.
pub(super) fn read_str(rd: &mut Cursor<&[u8]>) -> Option<String> {
    let len = decode::read_str_len(rd).ok()? as usize;
    let at = rd.position() as usize;
    let s = std::str::from_utf8(rd.get_ref().get(at..at.checked_add(len)?)?).ok()?.to_string();
    rd.set_position((at + len) as u64);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn langgraph_versions_are_packed_only_when_they_read_back_exactly() {
        for s in [
            format!("{:032}.0.6719961538567775", 1000),
            format!("{:032}.0.07116412210280665", 1),
            format!("{:032}.0.00000000000000", u64::MAX),
            format!("{:032}.0.9999999999999999999", 0),
        ] {
            let (c, d, n) = langgraph_version(&s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(langgraph_text(c, d, n), s);
        }
        for s in [
            format!("{:032}.0.5", 1),
            format!("{:032}.{:0>16}", 1, "0.5"),
            format!("{:032}.1.5555555555555555", 1),
            format!("{:032}.0.99999999999999999999", 1),
            format!("{}.0.5555555555555555", "9".repeat(32)),
            "1.0.5555555555555555".to_string(),
            format!("{:032}.0.555555555555555x", 1),
            format!("{:032}.0.00003e-05000000", 7),
        ] {
            assert_eq!(langgraph_version(&s), None, "{s}");
        }
    }

    #[test]
    fn padded_numbers_are_formats_padding() {
        for n in [0, 7, 10, 99, 100, 1000, 6719961538567775, 9_999_999_999_999_999_999, u64::MAX] {
            for width in [1, 2, 14, 16, 19, 32] {
                let mut out = String::from("x");
                push_padded(&mut out, n, width);
                assert_eq!(out, format!("x{n:0width$}"));
            }
        }
    }

    #[test]
    fn a_checkpoint_comes_back_as_written() {
        let mut cp = Checkpoint::with_id("x");
        cp.ts = "2026-11-24T20:17:46.174488+00:00".into();
        for (i, v) in [
            ChannelVersion::Str(format!("{:032}.0.6719961538567775", 1000)),
            ChannelVersion::Str(format!("{:032}.0.5", 2)),
            ChannelVersion::Str(format!("{:032}.0.07116412210280665", 3)),
            ChannelVersion::Str("~x".into()),
            ChannelVersion::Int(i64::MIN),
            ChannelVersion::Int(7),
        ]
        .into_iter()
        .enumerate()
        {
            cp.channel_versions.insert(format!("c{i}"), v.clone());
            cp.versions_seen.entry("node".into()).or_default().insert(format!("c{i}"), v);
        }
        cp.versions_seen.entry("other".into()).or_default().insert("gone".into(), ChannelVersion::Int(1));
        for (k, v) in [
            ("c0", json!(null)),
            ("c1", json!(u64::MAX)),
            ("c2", json!(-1)),
            ("c3", json!(1e308)),
            ("c4", json!("s")),
            ("nov", json!(true)),
        ] {
            cp.channel_values.insert(k.into(), v.into());
        }
        cp.channel_values.insert("list".into(), json!([1]).into());
        cp.updated_channels = Some(vec!["c1".into(), "elsewhere".into()]);
        cp.extra.insert("deep".into(), json!({"a": [1, 2.5, {"b": null}], "z": -3}));
        let d = decode(&encode(&cp, true)).unwrap();
        assert_eq!(d.v, cp.v);
        assert_eq!(d.ts, cp.ts);
        assert_eq!(d.channel_versions, cp.channel_versions);
        assert_eq!(d.versions_seen, cp.versions_seen);
        assert_eq!(d.updated_channels, cp.updated_channels);
        assert_eq!(Value::Object(d.extra), Value::Object(cp.extra.clone()));
        let inline: Map<String, Value> = cp
            .channel_values
            .iter()
            .filter(|(_, v)| v.is_primitive())
            .map(|(k, v)| (k.clone(), v.to_value()))
            .collect();
        assert_eq!(d.channel_values, inline);
        // c5 has a version and no value: empty, in the row itself.
        assert_eq!(d.empty, ["c5"]);
        let d = decode(&encode(&cp, false)).unwrap();
        assert!(d.empty.is_empty(), "not marked: its blob holds what it is");
    }

    #[test]
    fn damaged_rows_are_errors() {
        let mut cp = Checkpoint::with_id("x");
        cp.channel_versions.insert("a".into(), ChannelVersion::Str(format!("{:032}.0.2500000000000001", 3)));
        cp.channel_values.insert("a".into(), json!(1).into());
        cp.channel_versions.insert("b".into(), ChannelVersion::Int(1));
        let good = encode(&cp, true);
        assert_eq!(decode(&good).map(|d| d.empty), Ok(vec!["b".to_string()]));
        assert!(decode(&good).is_ok());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0xc0);
        assert!(decode(&longer).is_err());
        // Four billion channels announced in a few bytes.
        assert!(decode(&[0x98, 0x04, 0xa0, 0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
