//! Incremental blobs: a channel whose new value extends an already stored
//! list (the append-only message list) is stored as only its new tail, with
//! a pointer to the base version and the full blob its chain starts from
//! (the root), so each element is stored once and a whole chain is one range
//! read. Chains have no length limit; [`MAX_CHAIN`] only guards a reader
//! against a cycle in a damaged file.
//!
//! It works on encoded bytes, never on decoded values: a msgpack array is a
//! header followed by the concatenated encodings of its elements, so "the
//! stored list is a prefix of the new one" is a byte comparison, the tail is a
//! byte slice, and a chain reassembles into exactly the bytes a full blob
//! would hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// More deltas than this in one chain can only be a cycle in a damaged file.
pub const MAX_CHAIN: i64 = 1 << 24;

/// Lists whose encoding is smaller than this are stored whole: rewriting
/// them costs little and keeps their reads to one row.
pub const MIN_DELTA_BASE: usize = 8 * 1024;

/// Entries kept in a [`BaseCache`] before it is emptied.
const CACHE_ENTRIES: usize = 512;

/// The last full encoding this process stored per (thread, ns, channel):
/// the candidate base of the next version.
#[derive(Default)]
pub(crate) struct BaseCache {
    map: Mutex<HashMap<(String, String, String), Base>>,
}

#[derive(Clone)]
pub(crate) struct Base {
    pub(crate) version: String,
    pub(crate) bytes: Arc<Vec<u8>>,
}

impl BaseCache {
    pub(crate) fn get(&self, thread: &str, ns: &str, channel: &str) -> Option<Base> {
        let map = self.map.lock().ok()?;
        map.get(&(thread.to_string(), ns.to_string(), channel.to_string())).cloned()
    }

    /// Drops every entry.
    pub(crate) fn clear(&self) {
        if let Ok(mut map) = self.map.lock() {
            map.clear();
        }
    }

    /// Drops every entry of `thread` (its blobs are being deleted).
    pub(crate) fn forget_thread(&self, thread: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.retain(|k, _| k.0 != thread);
        }
    }

    /// Drops the entries whose version is one of `gone` (thread,
    /// namespace, channel, version): their rows are being deleted.
    pub(crate) fn forget(&self, gone: &[super::cache::BlobKey]) {
        if let Ok(mut map) = self.map.lock() {
            for (thread, ns, channel, version) in gone {
                let key = (thread.clone(), ns.clone(), channel.clone());
                if map.get(&key).is_some_and(|b| b.version == *version) {
                    map.remove(&key);
                }
            }
        }
    }

    /// Makes `base` the candidate base of (`thread`, `ns`, `channel`) if
    /// `admitted` (asked under the lock: see `deletions::Seen::admits`).
    pub(crate) fn set(
        &self,
        thread: &str,
        ns: &str,
        channel: &str,
        base: Base,
        admitted: impl FnOnce() -> bool,
    ) {
        if let Ok(mut map) = self.map.lock() {
            if !admitted() {
                return;
            }
            let key = (thread.to_string(), ns.to_string(), channel.to_string());
            if map.len() >= CACHE_ENTRIES && !map.contains_key(&key) {
                map.clear();
            }
            map.insert(key, base);
        }
    }
}

/// (element count, header length) of a msgpack array, or `None`.
pub(crate) fn array_header(bytes: &[u8]) -> Option<(usize, usize)> {
    match *bytes.first()? {
        b @ 0x90..=0x9f => Some(((b & 0x0f) as usize, 1)),
        0xdc => Some((u16::from_be_bytes([*bytes.get(1)?, *bytes.get(2)?]) as usize, 3)),
        0xdd => {
            let n = u32::from_be_bytes([*bytes.get(1)?, *bytes.get(2)?, *bytes.get(3)?, *bytes.get(4)?]);
            Some((n as usize, 5))
        }
        _ => None,
    }
}

/// The smallest msgpack array header for `n` elements.
pub(crate) fn write_array_header(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// If `base` (a full array encoding) is a prefix of `new` (another), the
/// delta: an array of the elements `new` adds, as bytes.
pub(crate) fn delta(base: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    let (bn, bh) = array_header(base)?;
    let (nn, nh) = array_header(new)?;
    let body = &base[bh..];
    if nn < bn || new.len() < nh + body.len() || &new[nh..nh + body.len()] != body {
        return None;
    }
    let tail = &new[nh + body.len()..];
    let mut out = Vec::with_capacity(tail.len() + 5);
    write_array_header(&mut out, nn - bn);
    out.extend_from_slice(tail);
    Some(out)
}

/// Reassembles a full array encoding from a snapshot and its deltas, oldest
/// first. `None` if a piece is not an array encoding.
pub(crate) fn assemble(pieces: &[&[u8]]) -> Option<Vec<u8>> {
    let mut total = 0usize;
    let mut bodies = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (n, h) = array_header(p)?;
        total += n;
        bodies.push(&p[h..]);
    }
    let mut out = Vec::with_capacity(bodies.iter().map(|b| b.len()).sum::<usize>() + 5);
    write_array_header(&mut out, total);
    for b in bodies {
        out.extend_from_slice(b);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{JsonPlusSerializer, Serializer};
    use serde_json::{json, Value};

    fn enc(v: &Value) -> Vec<u8> {
        JsonPlusSerializer.dumps_typed(v).unwrap().1
    }

    #[test]
    fn delta_and_assemble_give_the_full_bytes() {
        for (old, new) in [
            (json!([]), json!([1])),
            (json!([1, 2]), json!([1, 2, {"a": "b"}])),
            (json!((0..15).collect::<Vec<_>>()), json!((0..17).collect::<Vec<_>>())),
            (json!((0..70000).collect::<Vec<_>>()), json!((0..70002).collect::<Vec<_>>())),
        ] {
            let d = delta(&enc(&old), &enc(&new)).unwrap();
            assert_eq!(assemble(&[&enc(&old), &d]).unwrap(), enc(&new));
        }
        assert!(delta(&enc(&json!([1, 2])), &enc(&json!([2, 1, 3]))).is_none());
        assert!(delta(&enc(&json!([1, 2])), &enc(&json!([1]))).is_none());
        assert!(delta(&enc(&json!({"a": 1})), &enc(&json!([1]))).is_none());
        assert!(assemble(&[&enc(&json!({"a": 1}))]).is_none());
    }
}
