//! Channels: how the writes of a superstep become a state key's value.
//!
//! The kinds are LangGraph's: [`LastValue`](ChannelSpec::last_value),
//! [`BinaryOperatorAggregate`](ChannelSpec::reducer) (with
//! [`Reducer::Append`], [`Reducer::Add`], [`Reducer::Messages`] or a user
//! closure), [`Topic`](ChannelSpec::topic),
//! [`EphemeralValue`](ChannelSpec::ephemeral) and `NamedBarrierValue` (made by
//! [`GraphBuilder::join`](super::GraphBuilder::join)). Each channel knows what
//! LangGraph stores for it in a checkpoint, so the values written are the
//! ones Python would read.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde_json::{json, Value};

use super::messages::{add_messages_indexed, MessageIndex};
use super::node::panic_message;
use super::NodeError;
use crate::error::{Error, Result};

/// A user reducer: `(current, update) -> new`.
pub type ReducerFn = Arc<dyn Fn(&Value, &Value) -> std::result::Result<Value, NodeError> + Send + Sync>;

/// How a [`reducer`](ChannelSpec::reducer) channel folds each write into
/// its value (LangGraph's `BinaryOperatorAggregate` operator).
#[derive(Clone)]
#[non_exhaustive]
pub enum Reducer {
    /// List concatenation (`operator.add` on lists). Starts as `[]`.
    Append,
    /// Number addition, or string / list concatenation (`operator.add`).
    /// Starts empty: the first write is taken as is.
    Add,
    /// LangGraph's `add_messages`: dicts become messages, a message with a
    /// known id replaces it in place, a [`remove_message`](super::remove_message)
    /// deletes it. Starts as `[]`.
    Messages,
    /// A user function `(current, update) -> new`; its error or panic
    /// refuses the update ([`Error::InvalidUpdate`]). Starts empty unless
    /// [`ChannelSpec::reducer_with_initial`] gave a value (LangGraph starts
    /// a channel typed `int` at `0`, `list` at `[]`, ...).
    Custom(ReducerFn),
}

impl fmt::Debug for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reducer::Append => f.write_str("Append"),
            Reducer::Add => f.write_str("Add"),
            Reducer::Messages => f.write_str("Messages"),
            Reducer::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Reducer {
    /// Folds `update` into `current` (owned: an append does not copy the
    /// list). `index` is the add_messages id index of `current`, kept up to
    /// date. Returns the new value and whether it is `current` with items
    /// appended (nothing replaced or removed).
    fn apply(
        &self,
        key: &str,
        current: Value,
        update: &Value,
        index: &mut Option<MessageIndex>,
    ) -> Result<(Value, bool)> {
        let bad = |what: &str| Error::InvalidUpdate(format!("At key '{key}': {what}"));
        match self {
            Reducer::Append => match (current, update) {
                (Value::Array(mut a), Value::Array(b)) => {
                    a.extend(b.iter().cloned());
                    Ok((Value::Array(a), true))
                }
                _ => Err(bad("append needs a list value and a list update")),
            },
            Reducer::Add => match (current, update) {
                (Value::Array(mut a), Value::Array(b)) => {
                    a.extend(b.iter().cloned());
                    Ok((Value::Array(a), true))
                }
                (a, b) => add_values(&a, b).map(|v| (v, false)).ok_or_else(|| bad("cannot add these values")),
            },
            Reducer::Messages => add_messages_indexed(current, update, index).map_err(|e| bad(&e)),
            // A panicking reducer is a refused update, not a panic through
            // the run.
            Reducer::Custom(f) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&current, update)))
                    .map_err(|panic| bad(&format!("the reducer panicked: {}", panic_message(&*panic))))?
                    .map(|v| (v, false))
                    .map_err(|e| bad(&e.to_string()))
            }
        }
    }
}

/// Python's `a + b` for JSON numbers, strings and lists. Integers add
/// exactly while the sum fits a JSON integer (`i64` or `u64`); beyond, and
/// with a float, the sum is a float (`None` if infinite).
fn add_values(a: &Value, b: &Value) -> Option<Value> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int =
                |n: &serde_json::Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
            if let (Some(x), Some(y)) = (int(x), int(y)) {
                let s = x + y;
                if let Ok(s) = i64::try_from(s) {
                    return Some(json!(s));
                }
                if let Ok(s) = u64::try_from(s) {
                    return Some(json!(s));
                }
            }
            serde_json::Number::from_f64(x.as_f64()? + y.as_f64()?).map(Value::Number)
        }
        (Value::String(x), Value::String(y)) => Some(Value::String(format!("{x}{y}"))),
        (Value::Array(x), Value::Array(y)) => Some(Value::Array(x.iter().chain(y).cloned().collect())),
        _ => None,
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    LastValue,
    Ephemeral { guard: bool },
    Topic { accumulate: bool },
    Barrier { names: BTreeSet<String> },
    Reduce { reducer: Reducer, initial: Option<Value> },
}

/// What kind of channel a state key is. Build with the constructors below.
#[derive(Clone, Debug)]
pub struct ChannelSpec {
    pub(crate) kind: Kind,
}

impl ChannelSpec {
    /// The last value written wins; two writes in one superstep are an
    /// error (LangGraph's `LastValue`, a state key with no reducer).
    pub fn last_value() -> ChannelSpec {
        ChannelSpec { kind: Kind::LastValue }
    }

    /// A value that lives for one superstep after it is written
    /// (`EphemeralValue`); two writes in one superstep are an error.
    pub fn ephemeral() -> ChannelSpec {
        ChannelSpec { kind: Kind::Ephemeral { guard: true } }
    }

    /// A list of every value written (a list write adds its items):
    /// `Topic`. With `accumulate` false it keeps only the last superstep's
    /// writes.
    pub fn topic(accumulate: bool) -> ChannelSpec {
        ChannelSpec { kind: Kind::Topic { accumulate } }
    }

    /// Writes are folded in with `reducer` (`BinaryOperatorAggregate`).
    /// [`Reducer::Append`] and [`Reducer::Messages`] start at `[]`, the
    /// others take their first write as is.
    pub fn reducer(reducer: Reducer) -> ChannelSpec {
        let initial = match reducer {
            Reducer::Append | Reducer::Messages => Some(Value::Array(Vec::new())),
            Reducer::Add | Reducer::Custom(_) => None,
        };
        ChannelSpec { kind: Kind::Reduce { reducer, initial } }
    }

    /// Like [`reducer`](Self::reducer), starting at `initial` (readable
    /// before any write, not stored until one; LangGraph's `int` key starts
    /// at `0`).
    pub fn reducer_with_initial(reducer: Reducer, initial: Value) -> ChannelSpec {
        ChannelSpec { kind: Kind::Reduce { reducer, initial: Some(initial) } }
    }

    /// A user reducer function (see [`Reducer::Custom`]), starting at
    /// `initial` if given.
    pub fn custom<F>(f: F, initial: Option<Value>) -> ChannelSpec
    where
        F: Fn(&Value, &Value) -> std::result::Result<Value, NodeError> + Send + Sync + 'static,
    {
        ChannelSpec { kind: Kind::Reduce { reducer: Reducer::Custom(Arc::new(f)), initial } }
    }

    pub(crate) fn branch() -> ChannelSpec {
        ChannelSpec { kind: Kind::Ephemeral { guard: false } }
    }

    pub(crate) fn barrier(names: BTreeSet<String>) -> ChannelSpec {
        ChannelSpec { kind: Kind::Barrier { names } }
    }
}

/// The live state of one channel during a run.
#[derive(Clone, Debug)]
pub(crate) struct Channel {
    pub(crate) key: String,
    pub(crate) spec: Arc<ChannelSpec>,
    /// Shared with the states handed to nodes: a fold copies it only if a
    /// node still holds it.
    value: Option<Arc<Value>>,
    list: Vec<Value>,
    seen: BTreeSet<String>,
    /// `Some(n)`: the list value is the one last stored (`n` items) with
    /// items appended since, so a checkpoint stores only those. `None`:
    /// unknown (not stored yet, or replaced, reordered, cleared).
    stored_len: Option<usize>,
    /// The add_messages id index of the value (a `Messages` reducer).
    index: Option<MessageIndex>,
}

impl Channel {
    /// An empty channel (a reducer channel holds its initial value).
    pub(crate) fn new(key: &str, spec: Arc<ChannelSpec>) -> Channel {
        let value = match &spec.kind {
            Kind::Reduce { initial, .. } => initial.clone().map(Arc::new),
            _ => None,
        };
        Channel {
            key: key.to_string(),
            spec,
            value,
            list: Vec::new(),
            seen: BTreeSet::new(),
            stored_len: None,
            index: None,
        }
    }

    /// The channel restored from what a checkpoint stored for it.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if a barrier's stored value is not a set.
    pub(crate) fn from_checkpoint(
        key: &str,
        spec: Arc<ChannelSpec>,
        stored: Option<&Value>,
    ) -> Result<Channel> {
        let mut ch = Channel::new(key, spec);
        let Some(stored) = stored else { return Ok(ch) };
        match &ch.spec.kind {
            Kind::Topic { .. } => {
                ch.list = match stored {
                    Value::Array(items) => items.clone(),
                    other => vec![other.clone()],
                }
            }
            Kind::Barrier { .. } => {
                ch.seen = set_items(stored)
                    .ok_or_else(|| Error::corrupt(format!("channel {key}: stored barrier is not a set")))?
                    .into_iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect();
            }
            _ => ch.value = Some(Arc::new(stored.clone())),
        }
        ch.mark_stored();
        Ok(ch)
    }

    /// Applies one superstep's writes; true if the channel changed (it gets
    /// a new version).
    ///
    /// # Errors
    /// [`Error::InvalidUpdate`] for two writes to a `LastValue` or guarded
    /// ephemeral channel, a barrier write naming no waited-for node, or a
    /// reducer failure (a user reducer's error or panic).
    pub(crate) fn update(&mut self, values: &[Value]) -> Result<bool> {
        let key = &self.key;
        match &self.spec.kind {
            Kind::LastValue => match values {
                [] => Ok(false),
                [v] => {
                    self.value = Some(Arc::new(v.clone()));
                    self.stored_len = None;
                    Ok(true)
                }
                _ => Err(Error::InvalidUpdate(super::troubleshooting(
                    &format!(
                        "At key '{key}': Can receive only one value per step. Use an Annotated key to handle multiple \
                         values."
                    ),
                    "INVALID_CONCURRENT_GRAPH_UPDATE",
                ))),
            },
            Kind::Ephemeral { guard } => match values {
                [] => {
                    self.stored_len = None;
                    Ok(self.value.take().is_some())
                }
                [.., last] if values.len() == 1 || !guard => {
                    self.stored_len = None;
                    self.value = Some(Arc::new(last.clone()));
                    Ok(true)
                }
                _ => Err(Error::InvalidUpdate(format!(
                    "At key '{key}': EphemeralValue(guard=True) can receive only one value per step. Use guard=False if you want to store any one of multiple values."
                ))),
            },
            Kind::Topic { accumulate } => {
                let mut updated = false;
                if !accumulate {
                    updated = !self.list.is_empty();
                    self.list.clear();
                    self.stored_len = None;
                }
                for v in values {
                    match v {
                        Value::Array(items) => self.list.extend(items.iter().cloned()),
                        other => self.list.push(other.clone()),
                    }
                    updated = true;
                }
                Ok(updated)
            }
            Kind::Barrier { names } => {
                let mut updated = false;
                for v in values {
                    match v.as_str().filter(|n| names.contains(*n)) {
                        Some(n) => updated |= self.seen.insert(n.to_string()),
                        None => {
                            return Err(Error::InvalidUpdate(format!("At key '{key}': Value {v} not in {names:?}")));
                        }
                    }
                }
                Ok(updated)
            }
            Kind::Reduce { reducer, .. } => {
                if values.is_empty() {
                    return Ok(false);
                }
                let reducer = reducer.clone();
                for v in values {
                    let next = match self.value.take() {
                        None => {
                            self.stored_len = None;
                            self.index = None;
                            v.clone()
                        }
                        Some(cur) => {
                            let (next, appended) =
                                reducer.apply(key, Arc::unwrap_or_clone(cur), v, &mut self.index)?;
                            if !appended {
                                self.stored_len = None;
                            }
                            next
                        }
                    };
                    self.value = Some(Arc::new(next));
                }
                Ok(true)
            }
        }
    }

    /// Records that the channel's value is now the stored one (after a
    /// checkpoint stored it, or when it was loaded from one).
    pub(crate) fn mark_stored(&mut self) {
        self.stored_len = match &self.spec.kind {
            Kind::Topic { .. } => Some(self.list.len()),
            Kind::Barrier { .. } => None,
            _ => match self.value.as_deref() {
                Some(Value::Array(items)) => Some(items.len()),
                _ => None,
            },
        };
    }

    /// The number of leading items of the list value that the last stored
    /// checkpoint holds, if the value is that list with items appended.
    pub(crate) fn stored_len(&self) -> Option<usize> {
        self.stored_len
    }

    /// The list a checkpoint stores for a list channel (a topic's items or
    /// a list value), borrowed.
    pub(crate) fn list_ref(&self) -> Option<&[Value]> {
        match &self.spec.kind {
            Kind::Topic { .. } => Some(&self.list),
            Kind::Barrier { .. } => None,
            _ => match self.value.as_deref() {
                Some(Value::Array(items)) => Some(items),
                _ => None,
            },
        }
    }

    /// Marks the channel read by the tasks it triggered; true if that
    /// changed it (a full barrier resets).
    pub(crate) fn consume(&mut self) -> bool {
        match &self.spec.kind {
            Kind::Barrier { names } if &self.seen == names => {
                self.seen.clear();
                true
            }
            _ => false,
        }
    }

    /// Whether the channel has a value to read (and so can trigger a node).
    pub(crate) fn is_available(&self) -> bool {
        match &self.spec.kind {
            Kind::Topic { .. } => !self.list.is_empty(),
            Kind::Barrier { names } => &self.seen == names,
            _ => self.value.is_some(),
        }
    }

    /// The value a node reads, if any (a copy).
    pub(crate) fn get(&self) -> Option<Value> {
        self.get_shared().map(Arc::unwrap_or_clone)
    }

    /// The value a node reads, if any, shared (not copied) for a
    /// single-value channel.
    pub(crate) fn get_shared(&self) -> Option<Arc<Value>> {
        match &self.spec.kind {
            Kind::Topic { .. } => (!self.list.is_empty()).then(|| Arc::new(Value::Array(self.list.clone()))),
            Kind::Barrier { .. } => self.is_available().then(|| Arc::new(Value::Null)),
            _ => self.value.clone(),
        }
    }

    /// The Sends of a topic (for `__pregel_tasks`).
    pub(crate) fn items(&self) -> &[Value] {
        &self.list
    }

    /// Whether a superstep that does not write the channel empties it (an
    /// ephemeral value, a topic that does not accumulate).
    pub(crate) fn clears_each_step(&self) -> bool {
        matches!(self.spec.kind, Kind::Ephemeral { .. } | Kind::Topic { accumulate: false })
    }

    /// What a checkpoint stores for the channel (`None`: nothing, LangGraph's
    /// `MISSING`). A topic stores its list and a barrier its set even when
    /// empty.
    pub(crate) fn checkpoint(&self) -> Option<Value> {
        match &self.spec.kind {
            Kind::Topic { .. } => Some(Value::Array(self.list.clone())),
            Kind::Barrier { .. } => {
                Some(set_value(self.seen.iter().map(|s| Value::String(s.clone())).collect()))
            }
            _ => self.value.as_deref().cloned(),
        }
    }
}

/// A Python `set` as the codec's ext shape (written as LangGraph writes a set).
pub(crate) fn set_value(items: Vec<Value>) -> Value {
    json!({"__ext__": {"code": 0, "module": "builtins", "name": "set", "args": items}})
}

/// The items of a set written by [`set_value`] (or by Python).
pub(crate) fn set_items(v: &Value) -> Option<Vec<Value>> {
    let ext = v.get("__ext__")?;
    if ext.get("name")?.as_str()? != "set" && ext.get("name")?.as_str()? != "frozenset" {
        return None;
    }
    ext.get("args")?.as_array().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(spec: ChannelSpec) -> Channel {
        Channel::new("k", Arc::new(spec))
    }

    #[test]
    fn last_value_takes_one_write() {
        let mut c = ch(ChannelSpec::last_value());
        assert!(!c.is_available());
        assert!(c.update(&[json!(1)]).unwrap());
        assert_eq!(c.get(), Some(json!(1)));
        assert!(!c.update(&[]).unwrap());
        // LangGraph's text, troubleshooting line included (channels/last_value.py).
        let Err(Error::InvalidUpdate(m)) = c.update(&[json!(1), json!(2)]) else { panic!("two writes") };
        assert_eq!(
            m,
            format!(
                "At key '{}': Can receive only one value per step. Use an Annotated key to handle multiple values.\n\
                 For troubleshooting, visit: https://docs.langchain.com/oss/python/langgraph/errors/\
                 INVALID_CONCURRENT_GRAPH_UPDATE",
                c.key
            )
        );
    }

    #[test]
    fn ephemeral_clears_on_an_empty_step() {
        let mut c = ch(ChannelSpec::ephemeral());
        assert!(c.update(&[json!("x")]).unwrap());
        assert!(c.update(&[]).unwrap());
        assert!(!c.is_available());
        assert!(!c.update(&[]).unwrap());
        assert!(c.update(&[json!(1), json!(2)]).is_err());
        let mut b = ch(ChannelSpec::branch());
        assert!(b.update(&[Value::Null, Value::Null]).unwrap());
        assert_eq!(b.checkpoint(), Some(Value::Null));
    }

    #[test]
    fn topic_flattens_and_accumulates() {
        let mut c = ch(ChannelSpec::topic(true));
        assert!(c.update(&[json!("a"), json!(["b", "c"])]).unwrap());
        assert!(!c.update(&[]).unwrap());
        assert_eq!(c.get(), Some(json!(["a", "b", "c"])));
        let mut t = ch(ChannelSpec::topic(false));
        assert_eq!(t.checkpoint(), Some(json!([])));
        t.update(&[json!(1)]).unwrap();
        assert!(t.update(&[]).unwrap());
        assert!(!t.is_available());
    }

    #[test]
    fn barrier_waits_for_every_name() {
        let names: BTreeSet<String> = ["x".to_string(), "y".to_string()].into();
        let mut c = ch(ChannelSpec::barrier(names));
        assert!(c.update(&[json!("x")]).unwrap());
        assert!(!c.update(&[json!("x")]).unwrap());
        assert!(!c.is_available());
        c.update(&[json!("y")]).unwrap();
        assert!(c.is_available());
        assert!(c.consume());
        assert!(!c.consume());
        assert!(c.update(&[json!("z")]).is_err());
        let stored = c.checkpoint().unwrap();
        assert_eq!(set_items(&stored), Some(vec![]));
        let back = Channel::from_checkpoint("k", c.spec.clone(), Some(&set_value(vec![json!("x")]))).unwrap();
        assert_eq!(back.seen.len(), 1);
    }

    #[test]
    fn reducers_fold_writes() {
        let mut c = ch(ChannelSpec::reducer(Reducer::Append));
        assert_eq!(c.get(), Some(json!([])));
        c.update(&[json!(["a"]), json!(["b"])]).unwrap();
        assert_eq!(c.get(), Some(json!(["a", "b"])));
        assert!(c.update(&[json!("not a list")]).is_err());
        let mut add = ch(ChannelSpec::custom(
            |a, b| Ok(json!(a.as_i64().unwrap_or(0) + b.as_i64().unwrap_or(0))),
            Some(json!(0)),
        ));
        add.update(&[json!(5), json!(7)]).unwrap();
        assert_eq!(add.get(), Some(json!(12)));
        let mut s = ch(ChannelSpec::reducer(Reducer::Add));
        s.update(&[json!("a"), json!("b")]).unwrap();
        assert_eq!(s.get(), Some(json!("ab")));
        let mut f = ch(ChannelSpec::custom(|_, _| Err(NodeError::new("boom")), None));
        f.update(&[json!(1)]).unwrap();
        assert!(matches!(f.update(&[json!(2)]), Err(Error::InvalidUpdate(m)) if m.contains("boom")));
    }

    #[test]
    fn a_channel_knows_what_was_appended_since_it_was_stored() {
        let mut m = ch(ChannelSpec::reducer(Reducer::Messages));
        m.update(&[json!([{"role": "user", "content": "a", "id": "1"}])]).unwrap();
        m.mark_stored();
        assert_eq!(m.stored_len(), Some(1));
        m.update(&[json!({"role": "assistant", "content": "b", "id": "2"})]).unwrap();
        m.update(&[json!({"role": "assistant", "content": "c", "id": "3"})]).unwrap();
        assert_eq!(m.stored_len(), Some(1));
        assert_eq!(m.list_ref().map(<[Value]>::len), Some(3));
        // Replacing a message in place is not an append.
        m.update(&[json!({"role": "assistant", "content": "B", "id": "2"})]).unwrap();
        assert_eq!(m.stored_len(), None);
        assert_eq!(m.list_ref().map(<[Value]>::len), Some(3));
        m.mark_stored();
        m.update(&[super::super::remove_message("1")]).unwrap();
        assert_eq!(m.stored_len(), None);
        assert_eq!(m.list_ref().map(<[Value]>::len), Some(2));
        // The kept index follows the removal.
        m.update(&[json!({"role": "assistant", "content": "C", "id": "3"})]).unwrap();
        let ids: Vec<_> =
            m.list_ref().unwrap().iter().map(|v| v["__ext__"]["args"]["content"].clone()).collect();
        assert_eq!(ids, [json!("B"), json!("C")]);
        let mut a = ch(ChannelSpec::reducer(Reducer::Append));
        a.mark_stored();
        a.update(&[json!(["x"])]).unwrap();
        assert_eq!(a.stored_len(), Some(0));
        let mut l = ch(ChannelSpec::last_value());
        l.update(&[json!([1])]).unwrap();
        l.mark_stored();
        l.update(&[json!([1, 2])]).unwrap();
        assert_eq!(l.stored_len(), None);
    }
}
