//! Values encoded outside this crate: [`TypedBytes`] in, the same bytes out.
//!
//! A program that serializes channel values itself (LangGraph's Python
//! serde, an encrypting serializer this crate cannot run) stores and reads
//! checkpoints through [`Checkpointer::put_encoded`],
//! [`Checkpointer::put_writes_encoded`], [`Checkpointer::get_tuple_encoded`]
//! and [`Checkpointer::list_encoded`]. The bytes are stored unchanged, in the
//! same tables as every other checkpoint, so the file stays one format:
//! values whose tag this crate knows (`msgpack`, `json`, ...) read back
//! decoded through [`Checkpointer::get_tuple`] too.
//!
//! A `msgpack` array that extends the list this process stored last for the
//! channel is stored as its new tail only, exactly as for decoded values (see
//! `docs/design.md`, "Incremental blobs"); reading reassembles the full
//! bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use rusqlite::Connection;

use super::cache::BlobKey;
use super::chain::{blob_bytes, Pieces};
use super::delta;
use super::list::ListIter;
use super::pending::{for_each_write, shared_write, Stored};
use super::read::{parse_row, row_configs, Memo, Row};
use super::types::{ChannelVersions, Checkpoint, CheckpointConfig, ListQuery, Metadata};
use super::value::ChannelValue;
use super::write::{BlobValue, PlannedBlob};
use super::Checkpointer;
use crate::error::{Error, Result};

/// A value as a serializer encoded it: its type tag (`"msgpack"`, `"json"`,
/// `"bytes"`, `"msgpack+aes"`, ...) and bytes. Stored and returned unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypedBytes {
    /// The serializer's type tag.
    pub tag: String,
    /// The encoded value.
    pub bytes: Vec<u8>,
}

impl TypedBytes {
    /// A tag and bytes.
    pub fn new(tag: impl Into<String>, bytes: impl Into<Vec<u8>>) -> TypedBytes {
        TypedBytes { tag: tag.into(), bytes: bytes.into() }
    }
}

/// A pending write with its value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedWrite {
    /// The task that produced it.
    pub task_id: String,
    /// The channel written.
    pub channel: String,
    /// The value, as its serializer encoded it.
    pub value: TypedBytes,
}

/// A checkpoint as [`Checkpointer::get_tuple_encoded`] returns it: channel
/// values stored inline (null, bool, number, string) are in
/// `checkpoint.channel_values`; every other value is in `values`, as stored.
/// A channel with a version in neither is empty.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedTuple {
    /// The canonical config of this checkpoint (thread, namespace, id).
    pub config: CheckpointConfig,
    /// The checkpoint, with its inline channel values only.
    pub checkpoint: Checkpoint,
    /// The other channel values, by channel.
    pub values: BTreeMap<String, TypedBytes>,
    /// Its metadata.
    pub metadata: Metadata,
    /// The config of the checkpoint it was created from, if any.
    pub parent_config: Option<CheckpointConfig>,
    /// The writes stored for it, ordered by (task_path, task_id, idx), LangGraph's `writes_sort_key`.
    pub pending_writes: Vec<EncodedWrite>,
    /// Only from [`Checkpointer::list_encoded_sharing`]: channels whose
    /// value is the first `n` elements of the list this listing returned for
    /// the same (thread, namespace, channel) just before (in `values` or
    /// here), by channel. They are not in `values`. Always empty elsewhere.
    pub prefixes: BTreeMap<String, usize>,
}

impl Checkpointer {
    /// [`put`](Self::put) for values encoded by the caller: `checkpoint`
    /// carries only inline values (null, bool, number, string) in its
    /// `channel_values`; `values` holds the encoded value of every other
    /// channel in `new_versions` (a channel there with neither is stored as
    /// empty).
    ///
    /// A channel left out of `new_versions` keeps the value an earlier put
    /// stored for its version. If no put did, its entry in `values` is
    /// stored now (so a caller that lists only what changed, like LangGraph,
    /// and one that lists nothing, like a hand-written put, both lose
    /// nothing); without an entry the put is refused.
    ///
    /// # Errors
    /// As [`put`](Self::put) (without the `Conflict` for a reused version
    /// after [`with_unstable_encoding`](Self::with_unstable_encoding)), and
    /// [`Error::InvalidArgument`] if
    /// `checkpoint.channel_values` holds a value that is not inline (a list
    /// or an object: encode it into `values`) or `values` names a channel
    /// without a version.
    pub fn put_encoded(
        &self,
        config: &CheckpointConfig,
        checkpoint: &Checkpoint,
        values: &BTreeMap<String, TypedBytes>,
        metadata: &Metadata,
        new_versions: &ChannelVersions,
    ) -> Result<CheckpointConfig> {
        if let Some((ch, _)) = checkpoint.channel_values.iter().find(|(_, v)| !v.is_primitive()) {
            return Err(Error::InvalidArgument(format!(
                "channel '{ch}': put_encoded takes only null, bool, number and string values inline; \
                 pass the encoded value in `values`"
            )));
        }
        if let Some(ch) = values.keys().find(|c| !checkpoint.channel_versions.contains_key(*c)) {
            return Err(Error::InvalidArgument(format!(
                "channel '{ch}' has a value but no version in channel_versions: it would not be read back"
            )));
        }
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        let plan = |ch: &str, version: String, tb: &TypedBytes| {
            let appendable = tb.tag == "msgpack" && delta::array_header(&tb.bytes).is_some();
            let bytes = tb.bytes.clone();
            self.plan_bytes(thread, ns, ch, version, BlobValue::Encoded, tb.tag.clone(), bytes, appendable)
        };
        self.put_planned(
            config,
            checkpoint,
            metadata,
            new_versions,
            !self.unstable_encoding,
            |ch, version, _| {
                Ok(match values.get(ch) {
                    Some(tb) => plan(ch, version, tb),
                    None => PlannedBlob::empty(ch, version),
                })
            },
            |ch, version| Ok(values.get(ch).map(|tb| plan(ch, version, tb))),
        )
    }

    /// [`put_writes`](Self::put_writes) for values encoded by the caller:
    /// the same indexes, the same upsert and first-writer-wins rules.
    ///
    /// # Errors
    /// As [`put_writes`](Self::put_writes) (there is no encoding to fail).
    pub fn put_writes_encoded<C: AsRef<str>>(
        &self,
        config: &CheckpointConfig,
        writes: &[(C, TypedBytes)],
        task_id: &str,
        task_path: &str,
    ) -> Result<()> {
        let rows =
            writes.iter().map(|(c, tb)| (c.as_ref().to_string(), tb.tag.clone(), tb.bytes.clone())).collect();
        self.submit_writes(config, rows, task_id, task_path)
    }

    /// [`get_tuple`](Self::get_tuple) with values as stored: nothing is
    /// decoded but the checkpoint row and metadata.
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] if `thread_id` is empty.
    /// - [`Error::Corrupt`] if a stored row does not parse, or a channel's
    ///   value is missing from the file.
    /// - database errors.
    pub fn get_tuple_encoded(&self, config: &CheckpointConfig) -> Result<Option<EncodedTuple>> {
        self.cached_tuple(&self.encoded_tuples, config, |tx, row, snapshot| {
            Ok(self
                .assemble_encoded(tx, vec![row], &mut Pieces::default(), &Memo::at(snapshot), true, false)?
                .pop())
        })
    }

    /// [`list_iter`](Self::list_iter) with values as stored: newest first,
    /// a page at a time, memory constant in the history's length (beside
    /// the values themselves).
    ///
    /// # Errors
    /// As [`list_iter`](Self::list_iter), without decoding errors.
    pub fn list_encoded(&self, query: &ListQuery) -> Result<ListIter<EncodedTuple>> {
        self.list_with(
            query,
            |saver, tx, rows, memo: &mut Memo, pieces| {
                saver.assemble_encoded(tx, rows, pieces, memo, false, false)
            },
            |t| &t.config,
        )
    }

    /// [`list_encoded`](Self::list_encoded) for a reader that decodes each
    /// list element once: a `msgpack` list whose version is, element for
    /// element, the start of the list this listing returned for its channel
    /// just before (a thread's history read newest first: each older version
    /// of an appended message list) comes as its length in
    /// [`EncodedTuple::prefixes`] instead of its bytes. The reader keeps the
    /// last list it decoded per (thread, namespace, channel) and cuts the
    /// older one from it. This holds for a serializer whose `msgpack` arrays
    /// decode element by element (LangGraph's `JsonPlusSerializer`).
    ///
    /// # Errors
    /// As [`list_encoded`](Self::list_encoded).
    pub fn list_encoded_sharing(&self, query: &ListQuery) -> Result<ListIter<EncodedTuple>> {
        self.list_with(
            query,
            |saver, tx, rows, memo: &mut Memo, pieces| {
                saver.assemble_encoded(tx, rows, pieces, memo, false, true)
            },
            |t| &t.config,
        )
    }

    /// Attaches stored values and pending writes to raw rows, read as `memo`
    /// says (`cache`: keep the values read from the file in the bytes cache;
    /// `share`: a list cut from the one returned before it comes as its
    /// length, see [`list_encoded_sharing`](Self::list_encoded_sharing)).
    fn assemble_encoded(
        &self,
        conn: &Connection,
        rows: Vec<Arc<Row>>,
        pieces: &mut Pieces,
        memo: &Memo,
        cache: bool,
        share: bool,
    ) -> Result<Vec<EncodedTuple>> {
        let mut writes: Vec<Vec<EncodedWrite>> = rows.iter().map(|_| Vec::new()).collect();
        for_each_write(conn, &rows, memo.contiguous(), |i, task_id, channel, tag, stored| {
            let value = match stored {
                Stored::Bytes(bytes) => TypedBytes::new(tag, bytes),
                Stored::Blob(at) => TypedBytes::new(tag, shared_write(conn, &rows[i], &channel, at)?),
            };
            writes[i].push(EncodedWrite { task_id, channel, value });
            Ok(())
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (row, pending_writes) in rows.into_iter().zip(writes) {
            let (mut stored, metadata) = parse_row(&row)?;
            let mut inline = std::mem::take(&mut stored.channel_values);
            let mut channel_values = BTreeMap::new();
            let mut values = BTreeMap::new();
            let mut prefixes = BTreeMap::new();
            for (ch, version) in &stored.channel_versions {
                if let Some(v) = inline.remove(ch) {
                    channel_values.insert(ch.clone(), ChannelValue::from(v));
                    continue;
                }
                if stored.empty.contains(ch) {
                    continue;
                }
                let key: BlobKey = (row.thread_id.clone(), row.ns.clone(), ch.clone(), version.to_string());
                if share {
                    if let Some(n) = pieces.cut_from_last(conn, &key)? {
                        prefixes.insert(ch.clone(), n);
                        continue;
                    }
                }
                match self.stored_bytes(conn, &key, pieces, cache.then_some(memo))? {
                    Some((tag, _)) if tag == "empty" => {}
                    Some((tag, bytes)) => {
                        // The list a later version may be cut from is the
                        // last one returned: a value of another kind ends it
                        // (a reader of a sharing listing forgets it too).
                        if tag != "msgpack" {
                            pieces.forget_last(&key);
                        }
                        values.insert(ch.clone(), TypedBytes { tag, bytes });
                    }
                    None => {
                        return Err(Error::corrupt(format!(
                            "channel '{ch}' version {version} of thread '{}' (namespace '{}') has no stored value",
                            row.thread_id, row.ns
                        )))
                    }
                }
            }
            let checkpoint = stored.into_checkpoint(channel_values);
            let (config, parent_config) = row_configs(&row);
            out.push(EncodedTuple {
                config,
                checkpoint,
                values,
                metadata,
                parent_config,
                pending_writes,
                prefixes,
            });
        }
        Ok(out)
    }

    /// A blob's tag and full bytes: the list this process stored last for
    /// the channel if it is that version, else from the bytes cache, else
    /// from the file (then kept in the cache if `cache` is the read's
    /// memo, as its snapshot admits: see `deletions::Seen::admits`).
    fn stored_bytes(
        &self,
        conn: &Connection,
        key: &BlobKey,
        pieces: &mut Pieces,
        cache: Option<&Memo>,
    ) -> Result<Option<(String, Vec<u8>)>> {
        // Either way, remembered as the list the next (older) version of a
        // history read is cut from.
        if let Some(base) = self.bases.get(&key.0, &key.1, &key.2).filter(|b| b.version == key.3) {
            pieces.set_last_shared(key, base.bytes.clone());
            return Ok(Some(("msgpack".into(), base.bytes.to_vec())));
        }
        if let Some((tag, bytes)) = self.encoded.get(key) {
            if tag == "msgpack" {
                pieces.set_last_shared(key, bytes.clone());
            }
            return Ok(Some((tag, bytes.to_vec())));
        }
        let found = blob_bytes(conn, key, pieces)?;
        if let (Some(memo), Some((tag, bytes))) = (cache, &found) {
            let admitted = || self.seen.admits(memo.snapshot());
            self.encoded.insert(key.clone(), (tag.clone(), Arc::new(bytes.clone())), bytes.len(), admitted);
        }
        Ok(found)
    }
}
