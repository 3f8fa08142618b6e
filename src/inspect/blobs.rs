//! Which blobs the checkpoints need: shared by the integrity check, the
//! statistics and the checkpoint garbage collector, so that the three agree.
//!
//! A checkpoint references the blob of every channel version it names (a
//! channel whose value is inline, a primitive, has none). An incremental blob
//! stores only the tail of a list and names its base version; the base is
//! needed as long as a needed blob extends it, back to the full snapshot.

use std::collections::{HashMap, HashSet};

use rusqlite::Connection;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::checkpoint::row::{self, RowFormat};
use crate::checkpoint::{compact, packed, ChannelVersion};
use crate::error::Result;

/// `(checkpoint_ns, channel, version)` of a blob within one thread.
pub(crate) type BlobKey = (String, String, String);

/// A channel version a checkpoint names whose value is not inline and that
/// has no blob.
pub(crate) struct MissingBlob {
    pub(crate) thread_id: String,
    pub(crate) checkpoint_ns: String,
    pub(crate) checkpoint_id: String,
    pub(crate) channel: String,
    pub(crate) version: String,
}

/// A checkpoint whose stored JSON does not parse.
pub(crate) struct Unparsable {
    pub(crate) thread_id: String,
    pub(crate) checkpoint_ns: String,
    pub(crate) checkpoint_id: String,
    pub(crate) reason: String,
}

#[derive(Default)]
struct BlobInfo {
    /// How many checkpoints name this blob.
    uses: u32,
    /// How many pending writes refer to this blob for their value.
    writes: u32,
    /// The version this (incremental) blob extends.
    base: Option<String>,
}

/// Every blob of one thread (or of the file) against the checkpoints that
/// name them.
#[derive(Default)]
pub(crate) struct BlobScan {
    /// Checkpoints read.
    pub(crate) checkpoints: u64,
    /// Channel values read from a blob, over all checkpoints.
    pub(crate) references: u64,
    pub(crate) missing: Vec<MissingBlob>,
    pub(crate) unparsable: Vec<Unparsable>,
    /// Channels kept inline whose value is not a primitive:
    /// `(thread, ns, checkpoint, channel)`.
    pub(crate) non_primitive: Vec<(String, String, String, String)>,
    blobs: HashMap<String, HashMap<BlobKey, BlobInfo>>,
}

#[derive(Deserialize)]
struct VersionsOnly {
    #[serde(default)]
    channel_versions: Map<String, Value>,
    #[serde(default)]
    channel_values: Map<String, Value>,
    /// Channels the row marks empty (no blob).
    #[serde(skip)]
    empty: Vec<String>,
}

/// Reads a TEXT column that may have been written as a BLOB of UTF-8.
fn text(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Null => String::new(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(f) => f.to_string(),
    })
}

impl BlobScan {
    /// Scans the blobs and checkpoints of `thread` (every thread if `None`);
    /// calls `tick` once per checkpoint read.
    pub(crate) fn run(conn: &Connection, thread: Option<&str>, mut tick: impl FnMut()) -> Result<BlobScan> {
        let mut scan = BlobScan::default();
        let filter = if thread.is_some() { " WHERE thread_id = ?1" } else { "" };
        let params: Vec<&str> = thread.into_iter().collect();
        // Files older than incremental blobs have no `base_version`.
        let base = if super::has_column(conn, "checkpoint_blobs", "base_version")? {
            "base_version"
        } else {
            "NULL"
        };
        // Files before blob keys (migration 7, which dropped `created_at`;
        // opened read only) hold versions as written.
        let keyed = !super::has_column(conn, "checkpoint_blobs", "created_at")?;
        {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT thread_id, checkpoint_ns, channel, version, {base} FROM checkpoint_blobs{filter}"
            ))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(&params))?;
            while let Some(r) = rows.next()? {
                let t: String = r.get(0)?;
                // Versions as written (a malformed key stays as it is: no
                // checkpoint names it).
                let as_written = |v: String| match keyed {
                    true => compact::blob_version(&v).map_or(v.clone(), |w| w.into_owned()),
                    false => v,
                };
                let key: BlobKey = (r.get(1)?, r.get(2)?, as_written(r.get(3)?));
                let base: Option<String> = r.get::<_, Option<String>>(4)?.map(as_written);
                scan.blobs.entry(t).or_default().insert(key, BlobInfo { uses: 0, writes: 0, base });
            }
        }
        // Pending writes stored as a reference to a delta row need it too.
        if super::has_column(conn, "checkpoint_writes", "writes")? {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, writes FROM checkpoint_writes{filter}"
            ))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(&params))?;
            while let Some(r) = rows.next()? {
                let (thread_id, ns, id): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
                let column = r.get_ref(3)?.as_bytes_or_null().ok().flatten().unwrap_or_default();
                let Some(entries) = packed::unpack(column) else {
                    scan.unparsable.push(Unparsable {
                        thread_id,
                        checkpoint_ns: ns,
                        checkpoint_id: id,
                        reason: "its pending writes do not parse".into(),
                    });
                    continue;
                };
                for e in entries {
                    let Some(stored) = e.blob else { continue };
                    let version = compact::blob_version(&stored).map_or(stored.clone(), |v| v.into_owned());
                    scan.refer_as(&thread_id, &id, (ns.clone(), e.channel, version), false, true);
                }
            }
        }
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, type FROM checkpoints{filter}"
        ))?;
        let mut rows = stmt.query(rusqlite::params_from_iter(&params))?;
        while let Some(r) = rows.next()? {
            scan.checkpoints += 1;
            tick();
            let (thread_id, ns, id): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let format = RowFormat::of(r, 4)?;
            let compact = format == RowFormat::Compact;
            let parsed = match format {
                RowFormat::Msgpack => {
                    let bytes = r.get_ref(3)?.as_bytes_or_null().ok().flatten().unwrap_or_default();
                    row::decode(bytes).map(|d| VersionsOnly {
                        channel_versions: d
                            .channel_versions
                            .into_iter()
                            .map(|(k, v)| {
                                let v = match v {
                                    ChannelVersion::Int(n) => Value::from(n),
                                    ChannelVersion::Str(s) => Value::String(s),
                                };
                                (k, v)
                            })
                            .collect(),
                        channel_values: d.channel_values,
                        empty: d.empty,
                    })
                }
                _ => serde_json::from_str::<VersionsOnly>(&text(r, 3)?).map_err(|e| e.to_string()),
            };
            let parsed = match parsed {
                Ok(p) => p,
                Err(reason) => {
                    scan.unparsable.push(Unparsable {
                        thread_id,
                        checkpoint_ns: ns,
                        checkpoint_id: id,
                        reason,
                    });
                    continue;
                }
            };
            for (channel, value) in &parsed.channel_values {
                if value.is_array() || value.is_object() {
                    scan.non_primitive.push((thread_id.clone(), ns.clone(), id.clone(), channel.clone()));
                }
            }
            for (channel, version) in &parsed.channel_versions {
                if parsed.empty.contains(channel) {
                    continue;
                }
                let version = match version {
                    Value::String(s) if compact => compact::expand(s)
                        .map(|v| v.into_owned())
                        .ok_or_else(|| format!("channel_versions[{channel}] is {s:?}, not a stored version")),
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => {
                        Err(format!("channel_versions[{channel}] is {other}, neither a string nor a number"))
                    }
                };
                let version = match version {
                    Ok(v) => v,
                    Err(reason) => {
                        scan.unparsable.push(Unparsable {
                            thread_id: thread_id.clone(),
                            checkpoint_ns: ns.clone(),
                            checkpoint_id: id.clone(),
                            reason,
                        });
                        continue;
                    }
                };
                // A primitive value is inline and has no blob.
                let inline = parsed.channel_values.contains_key(channel);
                scan.refer(&thread_id, &id, (ns.clone(), channel.clone(), version), inline);
            }
        }
        Ok(scan)
    }

    /// Counts a use of blob `key` of `thread` by checkpoint `id` (a channel
    /// value, or a pending write stored as a reference); a blob that is not
    /// there is missing, unless the value is `inline`.
    fn refer(&mut self, thread: &str, id: &str, key: BlobKey, inline: bool) {
        self.refer_as(thread, id, key, inline, false);
    }

    /// [`refer`](Self::refer) for a checkpoint's value or (`write`) a
    /// pending write's; only the first count as references and sharing.
    fn refer_as(&mut self, thread: &str, id: &str, key: BlobKey, inline: bool, write: bool) {
        match self.blobs.entry(thread.to_string()).or_default().get_mut(&key) {
            Some(info) if write => info.writes += 1,
            Some(info) => {
                info.uses += 1;
                self.references += 1;
            }
            None if inline => {}
            None => self.missing.push(MissingBlob {
                thread_id: thread.to_string(),
                checkpoint_ns: key.0,
                checkpoint_id: id.to_string(),
                channel: key.1,
                version: key.2,
            }),
        }
    }

    /// How many blobs there are.
    pub(crate) fn blobs(&self) -> u64 {
        self.blobs.values().map(|m| m.len() as u64).sum()
    }

    /// Blobs named by two checkpoints or more.
    pub(crate) fn shared(&self) -> u64 {
        self.blobs.values().flat_map(|m| m.values()).filter(|i| i.uses > 1).count() as u64
    }

    /// The blobs of `thread` that are needed: named by a checkpoint or by a
    /// pending write (a write stored as a reference), or the base
    /// (transitively) of a needed incremental blob.
    fn needed(blobs: &HashMap<BlobKey, BlobInfo>) -> HashSet<&BlobKey> {
        let mut needed: HashSet<&BlobKey> = HashSet::new();
        let mut pending: Vec<&BlobKey> =
            blobs.iter().filter(|(_, i)| i.uses > 0 || i.writes > 0).map(|(k, _)| k).collect();
        while let Some(key) = pending.pop() {
            if !needed.insert(key) {
                continue;
            }
            if let Some(base) = &blobs[key].base {
                let b = (key.0.clone(), key.1.clone(), base.clone());
                if let Some((k, _)) = blobs.get_key_value(&b) {
                    pending.push(k);
                }
            }
        }
        needed
    }

    /// Blobs that neither a checkpoint nor a write names but that a needed
    /// incremental blob extends (directly or through other bases): needed,
    /// kept by every cleanup.
    pub(crate) fn delta_bases(&self) -> u64 {
        self.blobs
            .values()
            .map(|m| Self::needed(m).iter().filter(|k| m[**k].uses == 0 && m[**k].writes == 0).count() as u64)
            .sum()
    }

    /// Per thread, the blobs nothing needs (sorted by thread).
    pub(crate) fn unneeded(&self) -> Vec<(String, Vec<BlobKey>)> {
        let mut out: Vec<(String, Vec<BlobKey>)> = self
            .blobs
            .iter()
            .filter_map(|(t, m)| {
                let needed = Self::needed(m);
                let mut gone: Vec<BlobKey> = m.keys().filter(|k| !needed.contains(k)).cloned().collect();
                gone.sort();
                (!gone.is_empty()).then(|| (t.clone(), gone))
            })
            .collect();
        out.sort();
        out
    }
}
