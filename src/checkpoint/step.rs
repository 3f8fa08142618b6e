//! [`Step`]: the next checkpoint of a thread, built from what changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::id::{now_iso8601, uuid6_after};
use super::job::{CheckpointJob, Head, WritesJob};
use super::types::{
    ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple, Metadata,
};
use super::value::ChannelValue;
use super::write::{encode_row, sorted, writes_job, BlobValue, PlannedBlob};
use super::{next_version, require_thread, Checkpointer};
use crate::db::CacheTag;
use crate::error::Result;

/// Lists with fewer elements than this are stored whole on append: rewriting
/// them costs little and keeps their reads to one row.
const MIN_DELTA_LEN: usize = 16;

/// The next checkpoint of a thread: made by [`Checkpointer::step`] (after a
/// parent) or [`Checkpointer::start`] (a thread's first), committed by
/// [`commit`](Step::commit).
///
/// Say what changed; the crate does the rest: every channel named gets a new
/// version (LangGraph's format), `updated_channels` lists them, the new id
/// sorts after the parent's even if the clock went back, unchanged channels
/// keep their values and versions (their blobs are shared, never copied), and
/// nothing is read back after the write.
///
/// ```
/// # fn main() -> agentstate::Result<()> {
/// use agentstate::{CheckpointConfig, Db};
/// use serde_json::json;
///
/// let saver = Db::open_in_memory()?.checkpointer();
/// let first = saver.start(&CheckpointConfig::thread("t")).set("topic", json!("rust")).commit()?;
/// let second = saver.step(&first).append("messages", [json!({"role": "user", "content": "hi"})]).commit()?;
/// assert_eq!(second.checkpoint.channel_values["topic"], json!("rust"));
/// assert_eq!(second.metadata.step(), Some(0));
/// // `first` is no longer the head of the thread: continuing it again is a conflict.
/// assert!(matches!(saver.step(&first).set("topic", json!("go")).commit(), Err(agentstate::Error::Conflict(_))));
/// # Ok(()) }
/// ```
#[must_use = "a step is written only by commit()"]
pub struct Step<'a> {
    saver: &'a Checkpointer,
    thread: String,
    ns: String,
    parent: Option<Parent<'a>>,
    updates: BTreeMap<String, Update>,
    seen: BTreeMap<String, ChannelVersions>,
    metadata: Option<Metadata>,
    fork: bool,
    versions: BTreeMap<String, ChannelVersion>,
    updated: Option<Option<Vec<String>>>,
    id: Option<String>,
    parent_writes: Vec<TaskWrites>,
}

/// The checkpoint a step continues: the caller's, or handed over (the
/// engine's, which the step's result replaces: its state is moved into the
/// new checkpoint instead of copied).
enum Parent<'a> {
    Borrowed(&'a CheckpointTuple),
    Owned(Box<CheckpointTuple>),
}

impl Parent<'_> {
    fn get(&self) -> &CheckpointTuple {
        match self {
            Parent::Borrowed(p) => p,
            Parent::Owned(p) => p,
        }
    }
}

/// The parent's pending writes of one task stored with a step: (task id,
/// task path, writes).
type TaskWrites = (String, String, Vec<(String, Value)>);

enum Update {
    Set(ChannelValue),
    Append(Vec<Value>),
    Clear,
}

impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("thread", &self.thread)
            .field("ns", &self.ns)
            .field("parent", &self.parent().and_then(|p| p.config.checkpoint_id.as_deref()))
            .field("channels", &self.updates.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// The first checkpoint of `config`'s thread and namespace (its
    /// `checkpoint_id` is ignored). [`commit`](Step::commit) fails with
    /// [`Error::Conflict`](crate::Error::Conflict) if the thread already has a checkpoint there, so
    /// two processes starting one thread cannot both create a root.
    pub fn start(&self, config: &CheckpointConfig) -> Step<'_> {
        Step::new(self, &config.thread_id, &config.checkpoint_ns, None)
    }

    /// The checkpoint after `parent` (usually the tuple the last step
    /// returned, or [`get_tuple`](Self::get_tuple)'s latest).
    /// [`commit`](Step::commit) fails with [`Error::Conflict`](crate::Error::Conflict) if `parent` is
    /// no longer the newest checkpoint of its thread and namespace (another
    /// writer continued it), unless the step is a [`fork`](Step::fork).
    pub fn step<'a>(&'a self, parent: &'a CheckpointTuple) -> Step<'a> {
        Step::new(
            self,
            &parent.config.thread_id,
            &parent.config.checkpoint_ns,
            Some(Parent::Borrowed(parent)),
        )
    }

    /// [`step`](Self::step) after a parent the caller gives up (the engine's
    /// last checkpoint, which the step's result replaces).
    pub(crate) fn step_from(&self, parent: CheckpointTuple) -> Step<'_> {
        let (thread, ns) = (parent.config.thread_id.clone(), parent.config.checkpoint_ns.clone());
        Step::new(self, &thread, &ns, Some(Parent::Owned(Box::new(parent))))
    }
}

impl<'a> Step<'a> {
    /// An empty step of (`thread`, `ns`) after `parent` (none: a root).
    fn new(saver: &'a Checkpointer, thread: &str, ns: &str, parent: Option<Parent<'a>>) -> Step<'a> {
        Step {
            saver,
            thread: thread.to_string(),
            ns: ns.to_string(),
            parent,
            updates: BTreeMap::new(),
            seen: BTreeMap::new(),
            metadata: None,
            fork: false,
            versions: BTreeMap::new(),
            updated: None,
            id: None,
            parent_writes: Vec::new(),
        }
    }

    /// The checkpoint this step continues.
    pub(crate) fn parent(&self) -> Option<&CheckpointTuple> {
        self.parent.as_ref().map(Parent::get)
    }

    /// Sets `channel` to `value` (a new version even if the value is equal:
    /// an update is an update, as in LangGraph).
    pub fn set(mut self, channel: impl Into<String>, value: impl Into<ChannelValue>) -> Self {
        self.updates.insert(channel.into(), Update::Set(value.into()));
        self
    }

    /// Appends `items` to the list in `channel` as this step leaves it so
    /// far: the parent's list, or what an earlier [`set`](Self::set) or
    /// [`clear`](Self::clear) of this step made it (a new list if the channel
    /// has no list then). Only the new items of a list continued from the
    /// parent are encoded and stored; its other elements are shared with the
    /// parent, on disk and in memory.
    pub fn append(mut self, channel: impl Into<String>, items: impl IntoIterator<Item = Value>) -> Self {
        let channel = channel.into();
        match self.updates.get_mut(&channel) {
            Some(Update::Append(list)) => list.extend(items),
            Some(Update::Set(value)) => {
                let items: Vec<Arc<Value>> = items.into_iter().map(Arc::new).collect();
                *value = match value.appended(items.iter().cloned()) {
                    Some(list) => list,
                    None => ChannelValue::from_list(items),
                };
            }
            Some(Update::Clear) => {
                let list = ChannelValue::from_list(items.into_iter().map(Arc::new));
                self.updates.insert(channel, Update::Set(list));
            }
            None => {
                self.updates.insert(channel, Update::Append(items.into_iter().collect()));
            }
        }
        self
    }

    /// Empties `channel`: it keeps a (new) version and has no value.
    pub fn clear(mut self, channel: impl Into<String>) -> Self {
        self.updates.insert(channel.into(), Update::Clear);
        self
    }

    /// Records that `node` has seen `versions` (LangGraph's `versions_seen`,
    /// replacing what the parent recorded for it).
    pub fn seen(mut self, node: impl Into<String>, versions: ChannelVersions) -> Self {
        self.seen.insert(node.into(), versions);
        self
    }

    /// The metadata to store. Default: `{"source": "input", "step": -1}` for
    /// a first checkpoint, `{"source": "loop", "step": <parent's + 1>}`
    /// after a parent, with `"parents": {}`.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Allows a parent that is not the newest checkpoint of its thread: a
    /// new branch of the history (time travel). The old branch stays.
    pub fn fork(mut self) -> Self {
        self.fork = true;
        self
    }

    /// Gives `channel` exactly `version` instead of the next version after
    /// its own (for a runtime that versions as LangGraph's loop does: every
    /// channel changed in a superstep gets the successor of the highest
    /// version of the checkpoint). `channel` must also be
    /// [`set`](Self::set), [`append`](Self::append)ed or
    /// [`clear`](Self::clear)ed in this step: a version names the value
    /// stored with it.
    ///
    /// # Errors
    /// [`commit`](Self::commit) fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `channel`
    /// has no update in this step.
    pub fn version(mut self, channel: impl Into<String>, version: ChannelVersion) -> Self {
        self.versions.insert(channel.into(), version);
        self
    }

    /// Stores `channels` (sorted, deduplicated) as the checkpoint's
    /// `updated_channels` instead of the channels this step updates.
    /// LangGraph lists only the updated channels that can trigger a node
    /// (a cleared ephemeral channel gets a new version but is not listed).
    ///
    /// # Errors
    /// None at this call; [`commit`](Self::commit) stores the list as given.
    pub fn updated_channels(mut self, channels: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = channels.into_iter().collect();
        list.sort();
        list.dedup();
        self.updated = Some(Some(list));
        self
    }

    /// Stores the checkpoint under `id` instead of a fresh UUIDv6 (a
    /// runtime that derived task ids from an id before storing it, as
    /// LangGraph's `durability="exit"` does).
    ///
    /// # Errors
    /// [`commit`](Self::commit) fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `id` is
    /// not a UUID in its lowercase hyphenated form or does not sort after
    /// the parent's id, and with [`Error::Conflict`](crate::Error::Conflict)
    /// if a checkpoint of the thread and namespace already has it (a fork's
    /// id can name an existing checkpoint; a step never replaces one).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Stores `writes` of the parent's task `task_id` (at `task_path`) in
    /// the same transaction as this checkpoint, exactly as
    /// [`put_writes`](Checkpointer::put_writes) on the parent would store
    /// them (same idx rules), so that a step and the writes that led to it
    /// cost one commit (one fsync at [`Durability::Full`](crate::Durability::Full)).
    /// A runtime passes here the writes of the superstep's last task instead
    /// of calling `put_writes` just before the step: a crash then loses
    /// both or neither, as if it had come just before that `put_writes`.
    /// Call it once per task.
    ///
    /// # Errors
    /// [`commit`](Self::commit) fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) on a
    /// thread's first step (there is no parent), and with
    /// [`Error::Serialization`](crate::Error::Serialization) if a value cannot
    /// be encoded; nothing is written then.
    pub fn parent_writes<C: AsRef<str>>(
        mut self,
        task_id: impl Into<String>,
        task_path: impl Into<String>,
        writes: &[(C, Value)],
    ) -> Self {
        let writes = writes.iter().map(|(c, v)| (c.as_ref().to_string(), v.clone())).collect();
        self.parent_writes.push((task_id.into(), task_path.into(), writes));
        self
    }

    /// Stores no `updated_channels` at all (LangGraph's checkpoints from
    /// `update_state` and time-travel forks have none).
    pub fn without_updated_channels(mut self) -> Self {
        self.updated = Some(None);
        self
    }

    /// Writes the checkpoint, in one transaction, and returns it as
    /// [`get_tuple`](Checkpointer::get_tuple) would read it (with no pending
    /// writes yet). With [`write_behind`](crate::DbBuilder::write_behind),
    /// it returns once the write is queued, and the errors below that only
    /// the write can find (a conflict, a missing parent, the database's)
    /// come from a later write or from [`Db::flush`](crate::Db::flush). A
    /// call that returns such an earlier write's error queued nothing. A
    /// conflict with a step this `Db` queued (two writers of one thread
    /// through one `Db`) is found here, at once: the parent is not the
    /// checkpoint the thread's last queued step made (nor, once that step
    /// ran, the head the file holds).
    ///
    /// # Errors
    /// - [`Error::Conflict`](crate::Error::Conflict) if the parent is no longer the newest checkpoint
    ///   of its thread and namespace (and this is not a fork), if
    ///   [`start`](Checkpointer::start)'s thread already has one, or if a
    ///   fork's [`id`](Self::id) is that of an existing checkpoint.
    /// - [`Error::NotFound`](crate::Error::NotFound) if a fork's parent does not exist (any more).
    /// - [`Error::InvalidConfig`](crate::Error::InvalidConfig) if the thread id is empty.
    /// - [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the metadata nests too deeply to be
    ///   read back, a [`version`](Self::version) names a channel this
    ///   step does not update, an [`id`](Self::id) is not a UUID sorting
    ///   after the parent's, or no new UUIDv6 sorts after the parent's id
    ///   (its timestamp is the last one, or `put` stored a text that is
    ///   not a UUID and sorts after the id this process's clock gives).
    /// - [`Error::Serialization`](crate::Error::Serialization) if a value cannot be encoded.
    /// - [`Error::Corrupt`](crate::Error::Corrupt) if the parent's stored list is missing.
    /// - database errors; nothing is written then.
    pub fn commit(self) -> Result<CheckpointTuple> {
        Ok(self.commit_tagged()?.0)
    }

    /// [`commit`](Self::commit), and the file's generation right after it
    /// if it committed in the caller and nothing else changed meanwhile: as
    /// long as [`Checkpointer::generation`] still says so, the tuple is what
    /// the file holds for the thread's head. `None` for a fork of an older
    /// checkpoint (it need not be the newest).
    pub(crate) fn commit_tagged(self) -> Result<(CheckpointTuple, CacheTag)> {
        let saver = self.saver;
        let planned_at = saver.seen.current();
        require_thread(&CheckpointConfig::thread(&self.thread))?;
        if let Some(ch) = self.versions.keys().find(|ch| !self.updates.contains_key(*ch)) {
            return Err(crate::Error::InvalidArgument(format!(
                "Step::version for channel {ch:?}, which this step does not update"
            )));
        }
        let mut versions = self.versions;
        let parent = self.parent.as_ref().map(Parent::get);
        let parent_writes = match parent {
            Some(p) => {
                let mut jobs = Vec::with_capacity(self.parent_writes.len());
                for (task, path, writes) in &self.parent_writes {
                    let rows = saver.encode_writes(writes)?;
                    let job = writes_job(&p.config, rows, task, path)?;
                    jobs.extend(
                        job.map(|j| WritesJob { target: Some(p.checkpoint.channel_versions.clone()), ..j }),
                    );
                }
                jobs
            }
            None if self.parent_writes.is_empty() => Vec::new(),
            None => {
                return Err(crate::Error::InvalidArgument(
                    "Step::parent_writes on a thread's first step: there is no parent to write to".into(),
                ))
            }
        };
        let parent_id = parent.and_then(|p| p.config.checkpoint_id.clone());
        let step = match (&self.metadata, parent) {
            (Some(m), _) => m.step().unwrap_or(-1),
            (None, Some(p)) => p.metadata.step().map_or(0, |s| s.saturating_add(1)),
            (None, None) => -1,
        };
        let metadata = self.metadata.unwrap_or_else(|| {
            Metadata::new()
                .with("source", if parent.is_some() { "loop" } else { "input" })
                .with("step", step)
                .with("parents", Value::Object(Map::new()))
        });
        let mut cp = match self.parent {
            Some(Parent::Borrowed(p)) => Checkpoint::clone(&p.checkpoint),
            Some(Parent::Owned(p)) => Arc::unwrap_or_clone(p.checkpoint),
            None => Checkpoint::with_id(String::new()),
        };
        cp.id = match self.id {
            Some(id) => {
                // The canonical text only: ids compare as text, and `{...}`
                // or `urn:uuid:...` spellings sort apart from their time.
                let valid = uuid::Uuid::parse_str(&id).is_ok_and(|u| u.hyphenated().to_string() == id)
                    && parent_id.as_deref().is_none_or(|p| id.as_str() > p);
                if !valid {
                    return Err(crate::Error::InvalidArgument(format!(
                        "Step::id {id:?} is not a lowercase hyphenated uuid sorting after the parent's id"
                    )));
                }
                id
            }
            None => uuid6_after(Some(step), parent_id.as_deref())?,
        };
        cp.ts = now_iso8601();
        let mut blobs = Vec::with_capacity(self.updates.len());
        let mut changed = Vec::with_capacity(self.updates.len());
        for (ch, update) in self.updates {
            let version = versions.remove(&ch).unwrap_or_else(|| next_version(cp.channel_versions.get(&ch)));
            let old = cp.channel_versions.insert(ch.clone(), version.clone());
            let version = version.to_string();
            match update {
                // The row marks it empty (see `encode_row`): no blob.
                Update::Clear => {
                    cp.channel_values.remove(&ch);
                }
                Update::Set(value) => {
                    if !value.is_primitive() {
                        blobs.push(saver.plan_whole(&ch, version, &value)?);
                    }
                    cp.channel_values.insert(ch.clone(), value);
                }
                Update::Append(items) => {
                    let base = cp.channel_values.get(&ch).filter(|v| v.as_list().is_some());
                    let (value, blob) = match (base, old) {
                        (Some(base), Some(base_version)) => {
                            saver.plan_append(&ch, version, base, base_version.to_string(), items)?
                        }
                        _ => {
                            let value = ChannelValue::from(Value::Array(items));
                            let blob = saver.plan_whole(&ch, version, &value)?;
                            (value, blob)
                        }
                    };
                    blobs.push(blob);
                    cp.channel_values.insert(ch.clone(), value);
                }
            }
            changed.push(ch);
        }
        cp.versions_seen.extend(self.seen);
        cp.updated_channels = match self.updated {
            Some(given) => given,
            None => Some(sorted(changed)),
        };
        let (checkpoint_row, metadata_json) = encode_row(&cp, &metadata.0, true)?;
        let (thread, ns) = (&self.thread, &self.ns);
        let head = match (&parent_id, self.fork) {
            (Some(p), true) => Head::Exists(p.clone()),
            (p, _) => Head::Is(p.clone()),
        };
        let job = CheckpointJob {
            thread: thread.clone(),
            ns: ns.clone(),
            id: cp.id.clone(),
            parent: parent_id.clone(),
            metadata_json,
            checkpoint_row,
            blobs,
            fill: Vec::new(),
            relied: Vec::new(),
            head,
            retention: saver.retention.clone(),
            serde: saver.serde.clone(),
            caches: saver.caches(),
            planned_at,
            applied_at: super::deletions::UNKNOWN.into(),
        };
        // A fork need not be the newest checkpoint: no tag (see above).
        let forked = matches!(job.head, Head::Exists(_));
        let tag = saver.submit_checkpoint(job, parent_writes)?;
        let tag = if forked { CacheTag::default() } else { tag };
        let tuple = CheckpointTuple {
            config: CheckpointConfig::canonical(thread, ns, &cp.id),
            parent_config: parent_id.as_deref().map(|p| CheckpointConfig::canonical(thread, ns, p)),
            checkpoint: Arc::new(cp),
            metadata: Arc::new(metadata),
            pending_writes: super::pending::no_writes(),
        };
        Ok((tuple, tag))
    }
}

impl Checkpointer {
    /// A value stored whole.
    fn plan_whole(&self, ch: &str, version: String, value: &ChannelValue) -> Result<PlannedBlob> {
        let (tag, bytes) = self.encode_value(value)?;
        Ok(PlannedBlob {
            channel: ch.to_string(),
            version,
            value: BlobValue::Decoded(value.clone()),
            tag,
            full: Arc::new(bytes),
            appendable: false,
            delta: None,
        })
    }

    /// `base` (the parent's list, stored at `base_version`) plus `items`:
    /// stored as a delta holding only `items` (the next link of the base's
    /// chain), unless the list is short or the serializer cannot concatenate
    /// lists. Nothing is read here: with write-behind the parent may still be
    /// queued; the write checks the base and stores the whole list if it
    /// cannot be extended.
    fn plan_append(
        &self,
        ch: &str,
        version: String,
        base: &ChannelValue,
        base_version: String,
        items: Vec<Value>,
    ) -> Result<(ChannelValue, PlannedBlob)> {
        let base_len = base.as_list().map_or(0, |l| l.len());
        if base_len < MIN_DELTA_LEN || !self.serde.concatenates_arrays() {
            let value = base.appended(items.into_iter().map(Arc::new)).unwrap_or_else(|| base.clone());
            let blob = self.plan_whole(ch, version, &value)?;
            return Ok((value, blob));
        }
        let tail = Value::Array(items);
        let (tag, bytes) = self.serde.dumps_typed(&tail)?;
        let Value::Array(items) = tail else { unreachable!("built as an array above") };
        let value = base.appended(items.into_iter().map(Arc::new)).unwrap_or_else(|| base.clone());
        if tag != "msgpack" {
            let blob = self.plan_whole(ch, version, &value)?;
            return Ok((value, blob));
        }
        Ok((
            value.clone(),
            PlannedBlob {
                channel: ch.to_string(),
                version,
                value: BlobValue::Decoded(value),
                tag,
                full: Arc::default(),
                appendable: false,
                delta: Some((base_version, bytes)),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::{CheckpointConfig, Db};
    use serde_json::json;

    /// A step that continued the head is tagged with the generation after
    /// it; a fork is not (it need not be the newest checkpoint).
    #[test]
    fn only_a_step_that_continued_the_head_is_tagged() {
        let dir = tempfile::tempdir().unwrap();
        let saver = Db::open(dir.path().join("t.db")).unwrap().checkpointer();
        let (root, tag) =
            saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit_tagged().unwrap();
        assert_eq!(tag.get(), Some(saver.generation().unwrap()));
        let (_, tag) = saver.step(&root).set("n", json!(1)).commit_tagged().unwrap();
        assert_eq!(tag.get(), Some(saver.generation().unwrap()));
        let (_, tag) = saver.step(&root).fork().set("n", json!(2)).commit_tagged().unwrap();
        assert_eq!(tag.get(), None);
    }

    /// With write-behind, a step's tag is known once it is committed, and
    /// only for the last job of its transaction: a job committed after it in
    /// the same transaction may have changed what it wrote.
    #[test]
    fn a_queued_step_is_tagged_when_committed_last_in_its_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::builder().write_behind(true).open(dir.path().join("t.db")).unwrap();
        let saver = db.checkpointer();
        let (root, root_tag) =
            saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit_tagged().unwrap();
        let (_, last_tag) = saver.step(&root).set("n", json!(1)).commit_tagged().unwrap();
        db.flush().unwrap();
        let generation = saver.generation().unwrap();
        // (`root` shared its transaction with the step, or committed alone
        // before it: either way its tag is not today's generation.)
        assert_ne!(root_tag.get(), Some(generation));
        assert_eq!(last_tag.get(), Some(generation));
        // A write after it moves the generation: the tag no longer matches.
        saver.start(&CheckpointConfig::thread("u")).set("n", json!(0)).commit().unwrap();
        assert_ne!(saver.generation().unwrap(), generation);
    }
}
