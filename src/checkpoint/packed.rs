//! A task's pending writes to one checkpoint, stored as one row.
//!
//! LangGraph stores one row per write, each repeating the thread, the
//! namespace, the checkpoint id, the task id and the task path: ~100 bytes of
//! key for a write that is often a few bytes (a counter, a routing channel's
//! `null`). `checkpoint_writes` keeps one row per (checkpoint, task) whose
//! `writes` column packs the task's writes as a msgpack array of
//! `[idx, channel, type tag or nil, bytes]` arrays, sorted by `idx` (the
//! bytes may instead be a string: the version key of the `checkpoint_blobs`
//! row whose bytes they are, see [`Entry::blob`])
//! (docs/format.md, `checkpoint_writes`). LangGraph's rules still hold per
//! write: a call whose writes all go to special channels replaces the
//! entries of the same `idx`, any other call keeps them (first writer wins).

use std::io::Cursor;

use rmp::decode;

use super::row::{peek, read_str};

/// One pending write as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its position in the `put_writes` call, or the special channel's
    /// fixed negative index.
    pub(crate) idx: i64,
    pub(crate) channel: String,
    /// The serializer's type tag (`None`: a NULL an imported file stored).
    pub(crate) tag: Option<String>,
    /// The encoded value (empty when `blob` holds it).
    pub(crate) bytes: Vec<u8>,
    /// The value is the `blob` column of this `checkpoint_blobs` row (its
    /// version key, in the write's thread, namespace and channel): a write
    /// whose bytes a step also stored as a list's appended elements.
    pub(crate) blob: Option<String>,
}

/// The `writes` column of `entries` (sorted by `idx`, one per `idx`).
pub(crate) fn pack(entries: &[Entry]) -> Vec<u8> {
    let size: usize = entries.iter().map(|e| 24 + e.channel.len() + e.bytes.len()).sum();
    let mut out = Vec::with_capacity(size + 5);
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_array_len(&mut out, entries.len() as u32);
    for e in entries {
        let _ = rmp::encode::write_array_len(&mut out, 4);
        let _ = rmp::encode::write_sint(&mut out, e.idx);
        let _ = rmp::encode::write_str(&mut out, &e.channel);
        match &e.tag {
            Some(t) => {
                let _ = rmp::encode::write_str(&mut out, t);
            }
            None => {
                let _ = rmp::encode::write_nil(&mut out);
            }
        }
        match &e.blob {
            Some(key) => {
                let _ = rmp::encode::write_str(&mut out, key);
            }
            None => {
                let _ = rmp::encode::write_bin(&mut out, &e.bytes);
            }
        }
    }
    out
}

/// The entries of a `writes` column; `None` if it is not what [`pack`]
/// writes (a damaged row).
pub(crate) fn unpack(bytes: &[u8]) -> Option<Vec<Entry>> {
    let mut rd = Cursor::new(bytes);
    let n = decode::read_array_len(&mut rd).ok()?;
    // Each entry takes at least 5 bytes: never trust a count beyond that.
    let mut out = Vec::with_capacity((n as usize).min(bytes.len() / 5));
    for _ in 0..n {
        if decode::read_array_len(&mut rd).ok()? != 4 {
            return None;
        }
        let idx: i64 = decode::read_int(&mut rd).ok()?;
        let channel = read_str(&mut rd)?;
        let tag = if peek(&rd) == Some(0xc0) {
            rd.set_position(rd.position() + 1);
            None
        } else {
            Some(read_str(&mut rd)?)
        };
        if matches!(peek(&rd), Some(0xa0..=0xbf | 0xd9..=0xdb)) {
            let key = read_str(&mut rd)?;
            out.push(Entry { idx, channel, tag, bytes: Vec::new(), blob: Some(key) });
            continue;
        }
        let len = decode::read_bin_len(&mut rd).ok()? as usize;
        let at = rd.position() as usize;
        let value = bytes.get(at..at.checked_add(len)?)?.to_vec();
        rd.set_position((at + len) as u64);
        out.push(Entry { idx, channel, tag, bytes: value, blob: None });
    }
    (rd.position() as usize == bytes.len()).then_some(out)
}

/// [`unpack`] of the row of `task` on checkpoint `checkpoint` of `thread`, or
/// [`Error::Corrupt`](crate::Error::Corrupt) naming it.
pub(crate) fn unpack_row(
    bytes: &[u8],
    thread: &str,
    checkpoint: &str,
    task: &str,
) -> crate::Result<Vec<Entry>> {
    unpack(bytes).ok_or_else(|| {
        crate::Error::corrupt(format!(
            "the pending writes of task {task} on checkpoint {checkpoint} of thread '{thread}' do not parse"
        ))
    })
}

/// `stored` with the entries of one new `put_writes` call: with `upsert`
/// (every write to a special channel) a new entry replaces the stored one
/// of its `idx`; otherwise a stored entry stays and the new one is dropped.
/// Sorted by `idx`.
pub(crate) fn merge(mut stored: Vec<Entry>, new: Vec<Entry>, upsert: bool) -> Vec<Entry> {
    for e in new {
        match stored.iter_mut().find(|s| s.idx == e.idx) {
            Some(s) if upsert => *s = e,
            Some(_) => {}
            None => stored.push(e),
        }
    }
    stored.sort_by_key(|e| e.idx);
    stored
}

/// SQL's `agentstate_pack_writes(idx, channel, type, blob)`: the aggregate
/// the migration to packed rows groups the old per-write rows with.
struct PackWrites;

impl rusqlite::functions::Aggregate<Vec<Entry>, Vec<u8>> for PackWrites {
    fn init(&self, _: &mut rusqlite::functions::Context<'_>) -> rusqlite::Result<Vec<Entry>> {
        Ok(Vec::new())
    }

    fn step(&self, ctx: &mut rusqlite::functions::Context<'_>, acc: &mut Vec<Entry>) -> rusqlite::Result<()> {
        let bytes = match ctx.get_raw(3) {
            rusqlite::types::ValueRef::Blob(b) | rusqlite::types::ValueRef::Text(b) => b.to_vec(),
            _ => Vec::new(),
        };
        // Text columns as text even if a damaged or foreign row holds a BLOB
        // or invalid UTF-8 there: the migration must not fail on one row.
        let text = |v: rusqlite::types::ValueRef<'_>| match v {
            rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                Some(String::from_utf8_lossy(t).into_owned())
            }
            rusqlite::types::ValueRef::Integer(n) => Some(n.to_string()),
            rusqlite::types::ValueRef::Real(f) => Some(f.to_string()),
            rusqlite::types::ValueRef::Null => None,
        };
        let idx = match ctx.get_raw(0) {
            rusqlite::types::ValueRef::Integer(n) => n,
            _ => 0,
        };
        let channel = text(ctx.get_raw(1)).unwrap_or_default();
        let entry = Entry { idx, channel, tag: text(ctx.get_raw(2)), bytes, blob: None };
        // Rows of one (checkpoint, task) have distinct idx (the old key).
        acc.push(entry);
        Ok(())
    }

    fn finalize(
        &self,
        _: &mut rusqlite::functions::Context<'_>,
        acc: Option<Vec<Entry>>,
    ) -> rusqlite::Result<Vec<u8>> {
        let mut entries = acc.unwrap_or_default();
        entries.sort_by_key(|e| e.idx);
        Ok(pack(&entries))
    }
}

/// Installs `agentstate_pack_writes`.
pub(crate) fn register(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_aggregate_function(
        "agentstate_pack_writes",
        4,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        PackWrites,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(idx: i64, channel: &str, tag: Option<&str>, bytes: &[u8]) -> Entry {
        Entry { idx, channel: channel.into(), tag: tag.map(Into::into), bytes: bytes.to_vec(), blob: None }
    }

    #[test]
    fn entries_come_back_as_packed() {
        let entries = vec![
            e(-3, "__interrupt__", Some("msgpack"), b"\x91\x01"),
            e(0, "messages", Some("msgpack"), &[7; 300]),
            e(1, "branch:to:tools", None, b""),
            e(i64::MAX, "", Some(""), &[0; 70_000]),
            Entry { blob: Some("~D1000.0.25".into()), ..e(7, "messages", Some("msgpack"), b"") },
        ];
        assert_eq!(unpack(&pack(&entries)), Some(entries));
        assert_eq!(unpack(&pack(&[])), Some(vec![]));
    }

    #[test]
    fn damaged_columns_are_refused() {
        let good = pack(&[e(0, "a", Some("json"), b"1")]);
        for cut in 0..good.len() {
            assert_eq!(unpack(&good[..cut]), None, "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(unpack(&longer), None);
        // A count of 4 billion entries in five bytes.
        assert_eq!(unpack(&[0xdd, 0xff, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn merge_keeps_first_writes_and_replaces_special_ones() {
        let stored = vec![e(-1, "__error__", Some("json"), b"1"), e(0, "a", Some("json"), b"1")];
        let kept = merge(stored.clone(), vec![e(0, "a", Some("json"), b"2"), e(1, "b", None, b"")], false);
        assert_eq!(kept, vec![stored[0].clone(), stored[1].clone(), e(1, "b", None, b"")]);
        let replaced = merge(stored.clone(), vec![e(-1, "__error__", Some("json"), b"2")], true);
        assert_eq!(replaced, vec![e(-1, "__error__", Some("json"), b"2"), stored[1].clone()]);
    }
}
