//! What a node reads and returns: its [`State`], its [`Update`], a
//! [`Command`] that answers an interrupt or jumps, the [`Send`]s and
//! [`Goto`]s that route, a [`NodeError`], and the function types a node or
//! router is.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::END;

/// What a node reads: the state keys that have a value, in declaration
/// order (for a node run by a [`Send`], the Send's argument object). The
/// values are shared with the run, not copied: reading a long message list
/// costs nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    values: Vec<(String, Arc<Value>)>,
}

impl State {
    pub(crate) fn from_shared(values: Vec<(String, Arc<Value>)>) -> State {
        State { values }
    }

    /// Adds (or replaces) `key`.
    pub(crate) fn push(&mut self, key: &str, value: Arc<Value>) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.values.push((key.to_string(), value)),
        }
    }

    /// The value of `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The keys and values.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.values.iter().map(|(k, v)| (k.as_str(), &**v))
    }

    /// The number of keys with a value.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True if no key has a value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The state as a JSON object (a copy).
    pub fn to_map(&self) -> Map<String, Value> {
        self.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }
}

impl From<Map<String, Value>> for State {
    fn from(m: Map<String, Value>) -> State {
        State { values: m.into_iter().map(|(k, v)| (k, Arc::new(v))).collect() }
    }
}

static NULL: Value = Value::Null;

impl std::ops::Index<&str> for State {
    type Output = Value;

    /// The value of `key`, `Value::Null` if it has none (like indexing a
    /// `serde_json::Value`).
    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or(&NULL)
    }
}

/// The error a node (or a router or reducer) returns. It is stored as the
/// task's `__error__` write and [`invoke`](super::CompiledGraph::invoke) returns it
/// as [`Error::Node`](crate::Error::Node).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeError {
    kind: String,
    message: String,
    interrupts: Vec<Value>,
    /// A pause: [`interrupt`](super::interrupt())'s (with `interrupts`), or
    /// a subgraph's stop at one of its own breakpoints (none).
    paused: bool,
    /// The writes the task made before it failed (its node ran, then a
    /// router failed): stored with the error, as LangGraph does, and taken
    /// out before the error reaches the caller.
    partial: Vec<(String, Value)>,
}

impl NodeError {
    /// An error with a message (stored as `NodeError('<message>')`).
    pub fn new(message: impl Into<String>) -> NodeError {
        NodeError::with_kind("NodeError", message)
    }

    /// The signal [`interrupt`](super::interrupt()) returns: the node is
    /// paused, not failed. A subgraph that stopped at one of its own
    /// breakpoints pauses its task with no interrupts.
    pub(crate) fn interrupted(interrupts: Vec<Value>) -> NodeError {
        NodeError { interrupts, paused: true, ..NodeError::with_kind("GraphInterrupt", "interrupted") }
    }

    /// Whether this is a pause ([`interrupt`](super::interrupt())'s, or a
    /// subgraph's breakpoint) rather than a failure.
    pub fn is_interrupt(&self) -> bool {
        self.paused
    }

    /// The stored `Interrupt`s of a pause.
    pub(crate) fn interrupts(&self) -> &[Value] {
        &self.interrupts
    }

    /// This error, after the task wrote `writes`.
    pub(crate) fn after_writes(mut self, writes: Vec<(String, Value)>) -> NodeError {
        self.partial = writes;
        self
    }

    /// The writes the task made before it failed (see
    /// [`after_writes`](Self::after_writes)), taken out.
    pub(crate) fn take_writes(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.partial)
    }

    /// An error of a named kind, stored as `<kind>('<message>')` like a
    /// Python exception's repr (`RuntimeError('flaky failed')`).
    pub fn with_kind(kind: impl Into<String>, message: impl Into<String>) -> NodeError {
        NodeError {
            kind: kind.into(),
            message: message.into(),
            interrupts: Vec::new(),
            paused: false,
            partial: Vec::new(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind (`NodeError` unless given).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The Python-repr form stored in the `__error__` write: `Kind('message')`,
    /// the message quoted and escaped as Python's `repr()` does it.
    pub fn repr(&self) -> String {
        format!("{}({})", self.kind, crate::python::python_str_repr(&self.message))
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NodeError {}

/// The message of a caught panic's payload (`panic!`'s text if it has one).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + std::marker::Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panicked".to_string())
}

/// A message to run `node` with `arg` as its state in the next superstep
/// (LangGraph's `Send`; a PUSH task).
#[derive(Clone, Debug, PartialEq)]
pub struct Send {
    /// The node to run.
    pub node: String,
    /// Its input (an object: the node's [`State`]).
    pub arg: Value,
}

impl Send {
    /// A Send of `arg` to `node`.
    pub fn new(node: impl Into<String>, arg: Value) -> Send {
        Send { node: node.into(), arg }
    }
}

/// Where a router sends the graph next.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Goto {
    /// A node by name (or [`END`]).
    Node(String),
    /// A [`Send`] (fan-out).
    Send(Send),
}

impl Goto {
    /// Go to `node` (or [`END`]).
    pub fn node(node: impl Into<String>) -> Goto {
        Goto::Node(node.into())
    }

    /// Stop this path.
    pub fn end() -> Goto {
        Goto::Node(END.into())
    }
}

/// The input of a run that goes on from a thread's head (LangGraph's
/// `invoke(Command(update=.., goto=.., resume=..))`), for
/// [`invoke_command`](super::CompiledGraph::invoke_command).
///
/// `update` and `goto` are stored as pending writes of the null task on
/// the head (`goto` a node as its `branch:to:<node>` channel, a [`Send`]
/// in `__pregel_tasks`), applied before the next superstep: the tasks the
/// head had pending run, with the nodes and Sends of `goto`. With nothing
/// to run, no checkpoint is stored and the writes stay pending: the
/// thread's state ([`get_state`](super::CompiledGraph::get_state)) and its
/// next run apply them again. `resume` answers an
/// [`interrupt()`](super::interrupt()) as
/// [`resume`](super::CompiledGraph::resume) does.
///
/// ```
/// use agentstate::engine::{Command, Goto, Send, Update};
/// use serde_json::json;
///
/// let cmd = Command::new()
///     .update(Update::new().set("count", json!(3)))
///     .goto(Goto::node("side"))
///     .goto(Goto::Send(Send::new("worker", json!({"count": 9}))))
///     .resume(json!("yes"));
/// # let _ = cmd;
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct Command {
    pub(crate) update: Vec<(String, Value)>,
    pub(crate) goto: Vec<Goto>,
    pub(crate) resume: Option<Value>,
}

impl Command {
    /// An empty command (invoking it is [`Error::EmptyInput`](crate::Error::EmptyInput)).
    pub fn new() -> Command {
        Command::default()
    }

    /// Adds `update`'s state writes, in order (and its gotos, after those
    /// given so far).
    pub fn update(mut self, update: Update) -> Command {
        self.update.extend(update.writes);
        self.goto.extend(update.gotos);
        self
    }

    /// Adds a node to go to, or a [`Send`] (LangGraph's `goto` list, in
    /// order).
    pub fn goto(mut self, goto: Goto) -> Command {
        self.goto.push(goto);
        self
    }

    /// Answers the pending [`interrupt()`](super::interrupt()).
    pub fn resume(mut self, answer: Value) -> Command {
        self.resume = Some(answer);
        self
    }
}

/// What a node returns: state writes, in order (keys that are not state
/// keys are ignored, as in LangGraph), and optionally where to go next
/// (LangGraph's `Command(update=..., goto=...)`).
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct Update {
    pub(crate) writes: Vec<(String, Value)>,
    pub(crate) gotos: Vec<Goto>,
}

impl Update {
    /// No writes.
    pub fn new() -> Update {
        Update::default()
    }

    /// Adds a write of `value` to state key `key`.
    pub fn set(mut self, key: impl Into<String>, value: Value) -> Update {
        self.writes.push((key.into(), value));
        self
    }

    /// Also goes to `goto` after this node (a node name, [`END`] or a
    /// [`Send`]), like `Command(goto=...)`; the node's static edges still
    /// apply.
    pub fn goto(mut self, goto: Goto) -> Update {
        self.gotos.push(goto);
        self
    }

    /// The writes.
    pub fn writes(&self) -> &[(String, Value)] {
        &self.writes
    }
}

impl From<Map<String, Value>> for Update {
    fn from(m: Map<String, Value>) -> Update {
        Update { writes: m.into_iter().collect(), gotos: Vec::new() }
    }
}

/// A synchronous node function.
pub type SyncNodeFn =
    Arc<dyn Fn(&State) -> std::result::Result<Update, NodeError> + std::marker::Send + Sync>;

/// A router: reads the state after its node's writes, says where to go.
pub type RouterFn =
    Arc<dyn Fn(&State) -> std::result::Result<Vec<Goto>, NodeError> + std::marker::Send + Sync>;

/// What an async node returns.
#[cfg(feature = "tokio")]
pub type NodeFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = std::result::Result<Update, NodeError>> + std::marker::Send>,
>;

/// An async node function: it gets the state (shared, not copied) and
/// returns a future.
#[cfg(feature = "tokio")]
pub type AsyncNodeFn = Arc<dyn Fn(State) -> NodeFuture + std::marker::Send + Sync>;

/// A node's function.
#[derive(Clone)]
#[non_exhaustive]
pub enum NodeFn {
    /// Runs on the task's thread.
    Sync(SyncNodeFn),
    /// Runs on the tokio runtime the graph was invoked under (see
    /// [`CompiledGraph::ainvoke`](super::CompiledGraph::ainvoke)); the task's
    /// thread waits for it.
    #[cfg(feature = "tokio")]
    Async(AsyncNodeFn),
}

impl fmt::Debug for NodeFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFn::Sync(_) => f.write_str("NodeFn::Sync(..)"),
            #[cfg(feature = "tokio")]
            NodeFn::Async(_) => f.write_str("NodeFn::Async(..)"),
        }
    }
}
