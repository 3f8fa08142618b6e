//! The checkpointer's nouns: [`CheckpointConfig`], [`Checkpoint`], [`Metadata`],
//! [`CheckpointTuple`], [`PendingWrite`] and [`ChannelVersion`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::value::ChannelValue;
use crate::error::{Error, Result};

/// Which checkpoint an operation is about: LangGraph's
/// `config["configurable"]`, typed.
///
/// `checkpoint_ns` is `""` for the root graph; subgraphs use `"node:task_id"`
/// joined with `|`. `checkpoint_id` means "this exact checkpoint" for reads,
/// "the parent" for [`put`](crate::Checkpointer::put) and "the checkpoint the
/// writes belong to" for [`put_writes`](crate::Checkpointer::put_writes).
///
/// `extra` and `metadata` only matter for `put`: their string, number and
/// bool entries are merged into the stored metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointConfig {
    /// The conversation / run thread.
    pub thread_id: String,
    /// The (sub)graph namespace; `""` is the root graph.
    pub checkpoint_ns: String,
    /// A checkpoint id (see the type docs for its meaning per method).
    pub checkpoint_id: Option<String>,
    /// Other `configurable` keys (merged into metadata on `put`).
    pub extra: Map<String, Value>,
    /// `config["metadata"]` (merged into metadata on `put`, before `extra`).
    pub metadata: Map<String, Value>,
}

impl CheckpointConfig {
    /// The latest checkpoint of `thread_id` in the root namespace.
    pub fn thread(thread_id: impl Into<String>) -> CheckpointConfig {
        CheckpointConfig { thread_id: thread_id.into(), ..CheckpointConfig::default() }
    }

    /// The same config in namespace `ns`.
    pub fn ns(mut self, ns: impl Into<String>) -> CheckpointConfig {
        self.checkpoint_ns = ns.into();
        self
    }

    /// The same config pointing at checkpoint `id`.
    pub fn at(mut self, id: impl Into<String>) -> CheckpointConfig {
        self.checkpoint_id = Some(id.into());
        self
    }

    /// Reads LangGraph's JSON shape
    /// `{"configurable": {"thread_id", "checkpoint_ns"?, "checkpoint_id"?, ...}, "metadata"?: {...}}`.
    /// A bare `configurable` object is accepted too. A missing namespace is
    /// `""`; a non-string `thread_id` is converted like Python's `str()` for
    /// numbers.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `thread_id` is missing or not a string or
    /// number, or if `checkpoint_ns` / `checkpoint_id` are not strings.
    pub fn from_json(v: &Value) -> Result<CheckpointConfig> {
        let conf = v.get("configurable").unwrap_or(v);
        let conf = conf.as_object().ok_or_else(|| Error::InvalidConfig("config must be an object".into()))?;
        let thread_id = match conf.get("thread_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err(Error::InvalidConfig("thread_id must be a string".into())),
            None => return Err(Error::InvalidConfig("configurable.thread_id is required".into())),
        };
        let opt_str = |k: &str| -> Result<Option<String>> {
            match conf.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(Error::InvalidConfig(format!("{k} must be a string"))),
            }
        };
        let checkpoint_ns = opt_str("checkpoint_ns")?.unwrap_or_default();
        let checkpoint_id = opt_str("checkpoint_id")?.filter(|s| !s.is_empty());
        let extra = conf
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "thread_id" | "checkpoint_ns" | "checkpoint_id"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let metadata = v.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
        Ok(CheckpointConfig { thread_id, checkpoint_ns, checkpoint_id, extra, metadata })
    }

    /// LangGraph's canonical shape:
    /// `{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}`
    /// (no other keys; `checkpoint_id` omitted when `None`).
    pub fn to_json(&self) -> Value {
        let mut c = Map::new();
        c.insert("thread_id".into(), Value::String(self.thread_id.clone()));
        c.insert("checkpoint_ns".into(), Value::String(self.checkpoint_ns.clone()));
        if let Some(id) = &self.checkpoint_id {
            c.insert("checkpoint_id".into(), Value::String(id.clone()));
        }
        let mut m = Map::new();
        m.insert("configurable".into(), Value::Object(c));
        Value::Object(m)
    }

    pub(crate) fn canonical(thread_id: &str, ns: &str, id: &str) -> CheckpointConfig {
        CheckpointConfig {
            thread_id: thread_id.to_string(),
            checkpoint_ns: ns.to_string(),
            checkpoint_id: Some(id.to_string()),
            ..CheckpointConfig::default()
        }
    }
}

/// A channel version: LangGraph's string format
/// `"{counter:032}.{random:016}"`, or an integer (the
/// conformance suite and older graphs use integers). All versions of one
/// thread should be of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum ChannelVersion {
    /// An integer version.
    Int(i64),
    /// A string version, ordered by its zero-padded counter.
    Str(String),
}

/// An integer or a string, read directly: an untagged derive would try the
/// integer first and build (and format) an error for every string version,
/// which showed up as a tenth of a history read.
impl<'de> Deserialize<'de> for ChannelVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ChannelVersion;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a channel version (an integer or a string)")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ChannelVersion, E> {
                Ok(ChannelVersion::Int(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ChannelVersion, E> {
                i64::try_from(n)
                    .map(ChannelVersion::Int)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(n), &self))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ChannelVersion, E> {
                Ok(ChannelVersion::Str(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<ChannelVersion, E> {
                Ok(ChannelVersion::Str(s))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl ChannelVersion {
    /// The counter: the integer, or the part of a string version before the
    /// first `.` (0 if it does not parse).
    pub fn counter(&self) -> i64 {
        match self {
            ChannelVersion::Int(n) => *n,
            ChannelVersion::Str(s) => s.split('.').next().and_then(|c| c.parse().ok()).unwrap_or(0),
        }
    }
}

impl fmt::Display for ChannelVersion {
    /// The text stored in `checkpoint_blobs.version` (`5` for `Int(5)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl ChannelVersion {
    /// Its [`Display`](fmt::Display) text, borrowed when it is a string.
    pub(crate) fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ChannelVersion::Int(n) => std::borrow::Cow::Owned(n.to_string()),
            ChannelVersion::Str(s) => std::borrow::Cow::Borrowed(s),
        }
    }
}

impl From<i64> for ChannelVersion {
    fn from(n: i64) -> Self {
        ChannelVersion::Int(n)
    }
}

impl From<&str> for ChannelVersion {
    fn from(s: &str) -> Self {
        ChannelVersion::Str(s.to_string())
    }
}

impl From<String> for ChannelVersion {
    fn from(s: String) -> Self {
        ChannelVersion::Str(s)
    }
}

/// Channel name -> version.
pub type ChannelVersions = BTreeMap<String, ChannelVersion>;

/// One snapshot of a graph's state.
///
/// Keys this struct does not name (such as the legacy `pending_sends`) are
/// kept in `extra` and round-trip unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version (LangGraph writes 4).
    pub v: i64,
    /// The checkpoint id: a UUIDv6 string, so string order is creation order.
    pub id: String,
    /// ISO-8601 creation time (opaque to the saver).
    pub ts: String,
    /// The channels' values, shared and immutable (see [`ChannelValue`]).
    /// A channel with a version and no value here is empty.
    #[serde(default)]
    pub channel_values: BTreeMap<String, ChannelValue>,
    /// The current version of each channel.
    #[serde(default)]
    pub channel_versions: ChannelVersions,
    /// Per node, the channel versions it has consumed.
    #[serde(default)]
    pub versions_seen: BTreeMap<String, ChannelVersions>,
    /// Sorted names of the channels updated in this step, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_channels: Option<Vec<String>>,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Checkpoint {
    /// An empty checkpoint (`v = 4`) with a fresh id and timestamp.
    pub fn new() -> Checkpoint {
        Checkpoint::with_id(super::id::uuid6(None).to_string())
    }

    /// An empty checkpoint (`v = 4`) with the given id and a fresh timestamp.
    pub fn with_id(id: impl Into<String>) -> Checkpoint {
        Checkpoint {
            v: 4,
            id: id.into(),
            ts: super::id::now_iso8601(),
            channel_values: BTreeMap::new(),
            channel_versions: ChannelVersions::new(),
            versions_seen: BTreeMap::new(),
            updated_channels: None,
            extra: Map::new(),
        }
    }
}

impl Checkpoint {
    /// The channel values as one JSON object (a deep copy).
    pub fn values_json(&self) -> Map<String, Value> {
        self.channel_values.iter().map(|(k, v)| (k.clone(), v.to_value())).collect()
    }

    /// Replaces the channel values with the entries of a JSON object.
    pub fn set_values(&mut self, values: Map<String, Value>) {
        self.channel_values = values.into_iter().map(|(k, v)| (k, ChannelValue::from(v))).collect();
    }
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint::new()
    }
}

/// Checkpoint metadata: a JSON object with the well-known
/// keys `source`, `step`, `parents`, `run_id`, and any others you add. Every
/// key is kept and filterable with the [filter language](crate::filter).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Metadata(pub Map<String, Value>);

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Metadata {
        Metadata(Map::new())
    }

    /// Sets `key` to `value` (builder style).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Metadata {
        self.0.insert(key.into(), value.into());
        self
    }

    /// `source`: `"input"`, `"loop"`, `"update"` or `"fork"`.
    pub fn source(&self) -> Option<&str> {
        self.0.get("source").and_then(Value::as_str)
    }

    /// `step`: -1 for the input checkpoint, then 0, 1, ...
    pub fn step(&self) -> Option<i64> {
        self.0.get("step").and_then(Value::as_i64)
    }

    /// `run_id`, used by [`delete_for_runs`](crate::Checkpointer::delete_for_runs).
    pub fn run_id(&self) -> Option<&str> {
        self.0.get("run_id").and_then(Value::as_str)
    }

    /// `parents`: namespace -> checkpoint id.
    pub fn parents(&self) -> Option<&Map<String, Value>> {
        self.0.get("parents").and_then(Value::as_object)
    }

    /// Any key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// The underlying JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }
}

impl From<Map<String, Value>> for Metadata {
    fn from(m: Map<String, Value>) -> Self {
        Metadata(m)
    }
}

/// A write a task produced for a checkpoint's next step: `(task_id, channel,
/// value)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// The task that produced it.
    pub task_id: String,
    /// The channel written (special channels: `__error__`, `__scheduled__`,
    /// `__interrupt__`, `__resume__`).
    pub channel: String,
    /// The value written.
    pub value: Value,
}

/// A checkpoint with everything needed to resume from it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointTuple {
    /// The canonical config of this checkpoint (thread, namespace, id).
    pub config: CheckpointConfig,
    /// The checkpoint itself, channel values loaded. Shared: reads of the
    /// same stored checkpoint hand out the same one (see
    /// [`Checkpointer::with_value_cache`](crate::Checkpointer::with_value_cache));
    /// [`Arc::make_mut`](std::sync::Arc::make_mut) gives a copy to change.
    pub checkpoint: Arc<Checkpoint>,
    /// Its metadata, shared as `checkpoint` is.
    pub metadata: Arc<Metadata>,
    /// The config of the checkpoint it was created from, if any.
    pub parent_config: Option<CheckpointConfig>,
    /// The writes stored for it, ordered by (task_path, task_id, idx), LangGraph's `writes_sort_key`.
    /// Shared as `checkpoint` is: a checkpoint read again whose writes are
    /// stored as before hands out the same list.
    pub pending_writes: Arc<[PendingWrite]>,
}

/// What to list: LangGraph's `list(config, filter=, before=, limit=)`.
///
/// ```
/// # use agentstate::checkpoint::ListQuery;
/// # use serde_json::json;
/// let q = ListQuery::thread("t").namespace("").filter(json!({"step": {"$gte": 5}})).limit(10);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListQuery {
    /// Only this thread (all threads if `None`).
    pub thread_id: Option<String>,
    /// Only this namespace (all namespaces if `None`).
    pub checkpoint_ns: Option<String>,
    /// Only this checkpoint id.
    pub checkpoint_id: Option<String>,
    /// A metadata filter in the [filter language](crate::filter).
    pub filter: Option<Value>,
    /// Only checkpoints whose id sorts below this one (older).
    pub before: Option<String>,
    /// At most this many (newest first).
    pub limit: Option<usize>,
}

impl ListQuery {
    /// Every checkpoint of every thread.
    pub fn all() -> ListQuery {
        ListQuery::default()
    }

    /// Every checkpoint of `thread_id`, in every namespace.
    pub fn thread(thread_id: impl Into<String>) -> ListQuery {
        ListQuery { thread_id: Some(thread_id.into()), ..ListQuery::default() }
    }

    /// A config's thread, its namespace, and its checkpoint id if set: the
    /// query LangGraph's `list(config)` makes of a config that names its
    /// namespace (as `get_state_history` does). A [`CheckpointConfig`]
    /// always has one (`""` by default); for a LangGraph config that may
    /// leave it out (then every namespace is listed), use
    /// [`from_json`](Self::from_json).
    pub fn from_config(config: &CheckpointConfig) -> ListQuery {
        ListQuery {
            thread_id: Some(config.thread_id.clone()),
            checkpoint_ns: Some(config.checkpoint_ns.clone()),
            checkpoint_id: config.checkpoint_id.clone(),
            ..ListQuery::default()
        }
    }

    /// The query LangGraph's `list(config)` makes of a JSON config
    /// (`{"configurable": {...}}`, or the `configurable` object itself):
    /// its `thread_id`; its `checkpoint_ns` if present and not null, else
    /// every namespace; its `checkpoint_id` if present and not empty.
    ///
    /// ```
    /// # use agentstate::checkpoint::ListQuery;
    /// # use serde_json::json;
    /// let q = ListQuery::from_json(&json!({"configurable": {"thread_id": "t"}}))?;
    /// assert_eq!(q, ListQuery::thread("t"));
    /// # Ok::<(), agentstate::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`CheckpointConfig::from_json`]: [`Error::InvalidConfig`]
    /// if the config is not an object, has no `thread_id`, or a key of the
    /// three is of the wrong type.
    pub fn from_json(config: &Value) -> Result<ListQuery> {
        let parsed = CheckpointConfig::from_json(config)?;
        let conf = config.get("configurable").unwrap_or(config);
        let named = conf.get("checkpoint_ns").is_some_and(|ns| !ns.is_null());
        let mut q = ListQuery::from_config(&parsed);
        if !named {
            q.checkpoint_ns = None;
        }
        Ok(q)
    }

    /// Only namespace `ns`.
    pub fn namespace(mut self, ns: impl Into<String>) -> ListQuery {
        self.checkpoint_ns = Some(ns.into());
        self
    }

    /// Only checkpoints whose metadata matches `filter`.
    pub fn filter(mut self, filter: Value) -> ListQuery {
        self.filter = Some(filter);
        self
    }

    /// Only checkpoints older than `checkpoint_id`.
    pub fn before(mut self, checkpoint_id: impl Into<String>) -> ListQuery {
        self.before = Some(checkpoint_id.into());
        self
    }

    /// At most `n` checkpoints.
    pub fn limit(mut self, n: usize) -> ListQuery {
        self.limit = Some(n);
        self
    }
}

/// What [`prune`](crate::Checkpointer::prune) keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PruneStrategy {
    /// Keep the newest checkpoint of each (thread, namespace) and its writes.
    KeepLatest,
    /// Remove everything of the threads.
    Delete,
}

impl std::str::FromStr for PruneStrategy {
    type Err = Error;

    /// `"keep_latest"` or `"delete"`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "keep_latest" => Ok(PruneStrategy::KeepLatest),
            "delete" => Ok(PruneStrategy::Delete),
            other => Err(Error::InvalidArgument(format!(
                "unknown prune strategy '{other}': use \"keep_latest\" or \"delete\""
            ))),
        }
    }
}

#[cfg(test)]
mod version_tests {
    use super::ChannelVersion;

    #[test]
    fn versions_read_as_integers_or_strings_and_nothing_else() {
        let read = |s: &str| serde_json::from_str::<ChannelVersion>(s);
        assert_eq!(read("7").unwrap(), ChannelVersion::Int(7));
        assert_eq!(read("-3").unwrap(), ChannelVersion::Int(-3));
        assert_eq!(read("\"00000000000000000000000000000002.0.5\"").unwrap().counter(), 2);
        assert!(read("18446744073709551615").is_err(), "u64::MAX is no i64");
        assert!(read("1.5").is_err());
        assert!(read("null").is_err());
        assert!(read("[1]").is_err());
        for v in [ChannelVersion::Int(i64::MIN), ChannelVersion::Str("x.y".into())] {
            assert_eq!(read(&serde_json::to_string(&v).unwrap()).unwrap(), v);
        }
    }
}
