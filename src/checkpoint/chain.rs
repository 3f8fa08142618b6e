//! Reading `checkpoint_blobs`: a value stored whole, or as a chain of
//! deltas (each a list's appended elements) back to a value stored whole.
//! String versions sort by their counter, so a chain lies within one key
//! range and is read with one range query, newest first.

use crate::hash::FastMap;
use std::sync::Arc;

use rusqlite::{params, Connection};

use super::cache::BlobKey;
use super::compact;
use super::delta;
use crate::error::{Error, Result};

/// A `checkpoint_blobs` row as a read needs it (versions as written).
pub(super) struct BlobRow {
    tag: String,
    bytes: Vec<u8>,
    base: Option<String>,
}

impl BlobRow {
    fn of(link: &Link<'_>) -> Result<Self> {
        Ok(BlobRow {
            tag: link.tag.to_string(),
            bytes: link.bytes.to_vec(),
            base: link.base.map(|b| link.version(b)).transpose()?,
        })
    }
}

/// The row of `key`, if there is one.
fn read_one(conn: &Connection, key: &BlobKey) -> Result<Option<BlobRow>> {
    let mut row = None;
    walk_version(conn, (&key.0, &key.1, &key.2), &key.3, |link| {
        row = Some(BlobRow::of(&link)?);
        Ok(false)
    })?;
    Ok(row)
}

/// (thread, namespace, channel).
type ChannelKey = (String, String, String);

/// What one read of stored bytes keeps between blobs: the
/// `checkpoint_blobs` rows read so far, and per channel the last list it
/// handed out (a history read goes newest first, and a version stored as a
/// delta's base is a prefix of the delta's version).
#[derive(Default)]
pub(super) struct Pieces {
    rows: FastMap<BlobKey, BlobRow>,
    last: FastMap<ChannelKey, Last>,
}

/// A list as a range of a shared buffer: `count` elements whose encodings
/// are `buf[start..end]`. Older versions cut from it share the buffer.
struct Last {
    version: String,
    buf: Arc<Vec<u8>>,
    count: usize,
    start: usize,
    end: usize,
}

impl Last {
    /// The full encoding: a header, then the elements.
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.end - self.start + 5);
        delta::write_array_header(&mut out, self.count);
        out.extend_from_slice(&self.buf[self.start..self.end]);
        out
    }
}

impl Pieces {
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.last.clear();
    }

    /// The list of `key`'s version cut from the last list handed out for
    /// its channel, if that one's version is a delta whose base is `key`
    /// (its row read now if this read has not yet).
    fn parent_of_last(&mut self, conn: &Connection, key: &BlobKey) -> Result<Option<Last>> {
        let channel = (key.0.clone(), key.1.clone(), key.2.clone());
        let Some(last) = self.last.get(&channel) else { return Ok(None) };
        let child = (key.0.clone(), key.1.clone(), key.2.clone(), last.version.clone());
        if !self.rows.contains_key(&child) {
            let Some(row) = read_one(conn, &child)? else { return Ok(None) };
            self.rows.insert(child.clone(), row);
        }
        let (Some(last), Some(row)) = (self.last.get(&channel), self.rows.get(&child)) else {
            return Ok(None);
        };
        if row.base.as_deref() != Some(key.3.as_str()) {
            return Ok(None);
        }
        let tail = row.bytes.as_slice();
        let Some((tail_count, tail_header)) = delta::array_header(tail) else { return Ok(None) };
        let (Some(count), Some(end)) =
            (last.count.checked_sub(tail_count), last.end.checked_sub(tail.len() - tail_header))
        else {
            return Ok(None);
        };
        if end < last.start {
            return Ok(None);
        }
        Ok(Some(Last { version: key.3.clone(), buf: last.buf.clone(), count, start: last.start, end }))
    }

    /// The number of elements of `key`'s list if it is the start of the
    /// last list handed out for its channel (see [`Self::parent_of_last`]),
    /// which it then becomes; `None` otherwise (nothing changes).
    pub(super) fn cut_from_last(&mut self, conn: &Connection, key: &BlobKey) -> Result<Option<usize>> {
        let Some(last) = self.parent_of_last(conn, key)? else { return Ok(None) };
        let count = last.count;
        self.last.insert((key.0.clone(), key.1.clone(), key.2.clone()), last);
        Ok(Some(count))
    }

    /// Forgets the last list handed out for `key`'s channel.
    pub(super) fn forget_last(&mut self, key: &BlobKey) {
        self.last.remove(&(key.0.clone(), key.1.clone(), key.2.clone()));
    }

    /// Remembers `bytes` (a full encoding) as the last list handed out for
    /// `key`'s channel; not a list: nothing to cut from.
    pub(super) fn set_last_shared(&mut self, key: &BlobKey, buf: Arc<Vec<u8>>) {
        let channel = (key.0.clone(), key.1.clone(), key.2.clone());
        match delta::array_header(&buf) {
            Some((count, start)) => {
                let end = buf.len();
                self.last.insert(channel, Last { version: key.3.clone(), buf, count, start, end });
            }
            None => {
                self.last.remove(&channel);
            }
        }
    }
}

/// The type tag and full bytes of a blob, following its chain of deltas back
/// to the full blob it starts from and reassembling them. `None` if the
/// blob does not exist.
pub(super) fn load_blob_bytes(conn: &Connection, key: &BlobKey) -> Result<Option<(String, Vec<u8>)>> {
    blob_bytes(conn, key, &mut Pieces::default())
}

/// [`load_blob_bytes`], keeping the rows it reads in `pieces` (and using
/// those already there): a delta's whole chain is one range read, and the
/// versions of one list read in one history share it.
pub(super) fn blob_bytes(
    conn: &Connection,
    key: &BlobKey,
    pieces: &mut Pieces,
) -> Result<Option<(String, Vec<u8>)>> {
    if let Some(last) = pieces.parent_of_last(conn, key)? {
        let full = last.bytes();
        pieces.last.insert((key.0.clone(), key.1.clone(), key.2.clone()), last);
        return Ok(Some(("msgpack".into(), full)));
    }
    let (thread, ns, channel) = (&key.0, &key.1, &key.2);
    let key_of = |v: &str| -> BlobKey { (thread.clone(), ns.clone(), channel.clone(), v.to_string()) };
    let mut version = key.3.clone();
    // Keys from `key` back to its full blob, newest first.
    let mut path: Vec<BlobKey> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    loop {
        let k = key_of(&version);
        if !pieces.rows.contains_key(&k) {
            // The rows from here back to one already read (or to the value
            // stored whole), in one walk.
            let rows = &mut pieces.rows;
            let walked = walk_version(conn, (thread, ns, channel), &version, |link| {
                let row = BlobRow::of(&link)?;
                let known = row.base.as_deref().is_none_or(|b| rows.contains_key(&key_of(b)));
                rows.insert(key_of(&link.version(link.key)?), row);
                Ok(!known)
            })?;
            if let Walk::Missing { key: missing, newer } = walked {
                let newer = newer.map(|n| shown(&n)).or_else(|| path.last().map(|p| p.3.clone()));
                return match newer {
                    None => Ok(None),
                    Some(newer) => Err(Error::corrupt(format!(
                        "blob {channel}@{} of thread '{thread}' is missing, but version {newer} extends it",
                        shown(&missing)
                    ))),
                };
            }
            if !pieces.rows.contains_key(&k) {
                return Ok(None);
            }
        }
        let base = pieces.rows[&k].base.clone();
        path.push(k);
        match base {
            None => break,
            Some(b) => {
                if path.len() as i64 >= delta::MAX_CHAIN || !seen.insert(b.clone()) {
                    return Err(Error::corrupt(format!("blob {channel}@{}: its delta chain loops", key.3)));
                }
                version = b;
            }
        }
    }
    let tag = pieces.rows[&path[0]].tag.clone();
    let bytes_of = |k: &BlobKey| pieces.rows[k].bytes.as_slice();
    if let [only] = path.as_slice() {
        let full = bytes_of(only).to_vec();
        if tag == "msgpack" {
            pieces.set_last_shared(key, Arc::new(full.clone()));
        }
        return Ok(Some((tag, full)));
    }
    let refs: Vec<&[u8]> = path.iter().rev().map(bytes_of).collect();
    let full = delta::assemble(&refs).ok_or_else(|| {
        Error::corrupt(format!("blob {channel}@{} of thread '{thread}': a delta is not a list", key.3))
    })?;
    pieces.set_last_shared(key, Arc::new(full.clone()));
    Ok(Some((tag, full)))
}

/// One row of a chain, borrowed from the query that read it.
pub(super) struct Link<'a> {
    /// The stored version (a blob key, see [`compact::blob_key`]).
    pub(super) key: &'a str,
    pub(super) tag: &'a str,
    pub(super) bytes: &'a [u8],
    /// The stored version of the blob this one extends: `None` for a value
    /// stored whole.
    pub(super) base: Option<&'a str>,
    /// The file stores versions as they are (the layout before blob keys).
    plain: bool,
}

impl Link<'_> {
    /// The version a stored version of this walk's file stands for.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if the stored text cannot be a blob key.
    pub(super) fn version(&self, stored: &str) -> Result<String> {
        if self.plain {
            return Ok(stored.to_string());
        }
        compact::blob_version(stored)
            .map(|v| v.into_owned())
            .ok_or_else(|| Error::corrupt(format!("checkpoint_blobs holds the malformed version {stored:?}")))
    }
}

/// A stored version as a message shows it.
fn shown(stored: &str) -> String {
    compact::blob_version(stored).map_or_else(|| stored.to_string(), |v| v.into_owned())
}

/// [`walk`] from `version` (a version as written, not a stored key). A file
/// opened read only in a format before blob keys (migration 7) holds
/// versions as they are; in the current one the plain text may be another
/// version's key (`~A1.x` keys `{1:032}.x`), so a missing row is only looked
/// up again as it is in the older layout.
///
/// # Errors
/// As [`walk`].
pub(super) fn walk_version(
    conn: &Connection,
    at: (&str, &str, &str),
    version: &str,
    mut visit: impl FnMut(Link<'_>) -> Result<bool>,
) -> Result<Walk> {
    let stored = compact::blob_key(version);
    let walked = walk_stored(conn, at, &stored, false, &mut visit)?;
    if matches!(&walked, Walk::Missing { newer: None, .. })
        && stored != version
        && crate::inspect::has_column(conn, "checkpoint_blobs", "created_at")?
    {
        return walk_stored(conn, at, version, true, &mut visit);
    }
    Ok(walked)
}

/// How [`walk`] ended.
pub(super) enum Walk {
    /// At a value stored whole, or where the visitor said stop.
    Done,
    /// The row of this stored version is missing; `newer` is the stored
    /// version of the row that extends it (`None`: the first one).
    Missing { key: String, newer: Option<String> },
}

/// Visits the blob rows of `channel` from the stored version `key` back
/// along their bases, newest first, until a row stored whole or until
/// `visit` returns `false`. Rows are read by one range query in descending
/// key order (a chain of counter-ordered versions is a run of that range,
/// other branches' rows in between are stepped over); a link the range does
/// not hold next is looked up by a new query at its key, so versions in any
/// order are followed.
///
/// # Errors
/// [`Error::Corrupt`] if a chain loops; what `visit` returns; database
/// errors.
pub(super) fn walk(
    conn: &Connection,
    at: (&str, &str, &str),
    key: &str,
    mut visit: impl FnMut(Link<'_>) -> Result<bool>,
) -> Result<Walk> {
    walk_stored(conn, at, key, false, &mut visit)
}

/// [`walk`], in a file whose keys are versions as they are if `plain`.
fn walk_stored(
    conn: &Connection,
    (thread, ns, channel): (&str, &str, &str),
    key: &str,
    plain: bool,
    visit: &mut impl FnMut(Link<'_>) -> Result<bool>,
) -> Result<Walk> {
    let mut stmt = conn.prepare_cached(
        "SELECT version, type, blob, base_version FROM checkpoint_blobs \
         WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version <= ?4 ORDER BY version DESC",
    )?;
    let mut expected = key.to_string();
    // The key of the row that extends `expected` (kept in a buffer reused
    // from link to link; `linked`: there is one).
    let mut newer = String::new();
    let mut linked = false;
    // Keys a new query started at: one seen twice is a loop.
    let mut restarts = std::collections::HashSet::new();
    loop {
        if !restarts.insert(expected.clone()) {
            return Err(Error::corrupt(format!(
                "blob {channel}@{key} of thread '{thread}': its delta chain loops"
            )));
        }
        let mut rows = stmt.query(params![thread, ns, channel, expected])?;
        let mut found = false;
        while let Some(r) = rows.next()? {
            let k = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            match k.cmp(expected.as_str()) {
                // Another branch's row (a fork's versions interleave with
                // these by counter): step over it.
                std::cmp::Ordering::Greater => continue,
                // Past where `expected` would be: not in this range.
                std::cmp::Ordering::Less => break,
                std::cmp::Ordering::Equal => {}
            }
            found = true;
            let link = Link {
                key: k,
                tag: r.get_ref(1)?.as_str_or_null().map_err(rusqlite::Error::from)?.unwrap_or("null"),
                bytes: r.get_ref(2)?.as_bytes_or_null().map_err(rusqlite::Error::from)?.unwrap_or_default(),
                base: r.get_ref(3)?.as_str_or_null().map_err(rusqlite::Error::from)?,
                plain,
            };
            let base = link.base;
            if !visit(link)? {
                return Ok(Walk::Done);
            }
            let Some(base) = base else { return Ok(Walk::Done) };
            std::mem::swap(&mut newer, &mut expected);
            expected.clear();
            expected.push_str(base);
            linked = true;
            // A base that does not sort below its delta is not next in
            // this range: a new query finds it.
            if expected.as_str() >= k {
                break;
            }
        }
        if !found {
            return Ok(Walk::Missing { key: expected, newer: linked.then_some(newer) });
        }
    }
}
