//! [`interrupt()`]: a node pauses the run for a human answer, LangGraph's
//! `interrupt()`, and gets the answer when the thread is resumed with
//! [`CompiledGraph::resume`](super::CompiledGraph::resume).

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::node::NodeError;
use super::task_id::interrupt_id_after;

/// What the running task knows about its resume values.
#[derive(Debug, Default)]
pub(crate) struct Scratchpad {
    /// `ns:task_id` of the task (the interrupt id hashes it).
    pub(crate) task_ns: String,
    /// Answers the task already consumed in earlier runs, in order.
    pub(crate) resume: Vec<Value>,
    /// The answer given to this run, not yet taken by an interrupt (shared
    /// by the tasks of the superstep: the first `interrupt()` takes it).
    pub(crate) null_resume: Arc<Mutex<Option<Value>>>,
    /// How many times the node called `interrupt()` in this run.
    pub(crate) counter: usize,
    /// Whether an interrupt consumed an answer (the task then writes
    /// `__resume__` with the answers it used).
    pub(crate) used_resume: bool,
}

impl Scratchpad {
    pub(crate) fn new(
        task_ns: String,
        resume: Vec<Value>,
        null_resume: Arc<Mutex<Option<Value>>>,
    ) -> Scratchpad {
        Scratchpad { task_ns, resume, null_resume, counter: 0, used_resume: false }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Scratchpad>> = const { RefCell::new(None) };
}

/// Runs `f` with `pad` as the current task's scratchpad; returns `f`'s
/// result and the scratchpad after it.
pub(crate) fn with_scratchpad<T>(pad: Scratchpad, f: impl FnOnce() -> T) -> (T, Scratchpad) {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(pad));
    let out = f();
    let pad = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), previous)).unwrap_or_default();
    (out, pad)
}

/// An `Interrupt` as stored in an `__interrupt__` write (Python's
/// `langgraph.types.Interrupt` dataclass).
pub(crate) fn interrupt_value(value: &Value, id: &str) -> Value {
    json!({"__ext__": {"code": 2, "module": "langgraph.types", "name": "Interrupt", "args": {"value": value, "id": id}}})
}

/// A pending interrupt, read from a run's output (its `"__interrupt__"`
/// list) or a task's stored interrupts.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Interrupt {
    /// The value the node passed to [`interrupt()`].
    pub value: Value,
    /// The interrupt's id (32 hex digits, see
    /// [`interrupt_id`](super::interrupt_id)).
    pub id: String,
}

impl Interrupt {
    /// The interrupts in `output`'s `"__interrupt__"` list (none if the
    /// run was not paused by [`interrupt()`]).
    pub fn from_output(output: &Value) -> Vec<Interrupt> {
        output
            .get("__interrupt__")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |items| items.iter().filter_map(Interrupt::from_stored).collect())
    }

    /// One interrupt as stored (Python's `Interrupt`).
    pub fn from_stored(v: &Value) -> Option<Interrupt> {
        let args = v.get("__ext__")?.get("args")?;
        Some(Interrupt { value: args.get("value")?.clone(), id: args.get("id")?.as_str()?.to_string() })
    }
}

/// Pauses the run at this point of the node, LangGraph's `interrupt(value)`.
///
/// The first time, it returns an error carrying `value` (propagate it
/// with `?`): the node stops, the task stores an `__interrupt__` write and
/// [`invoke`](super::CompiledGraph::invoke) returns the state with an
/// `"__interrupt__"` list. When the thread is resumed with
/// [`resume(answer)`](super::CompiledGraph::resume), the node runs again
/// from its start and this call returns `Ok(answer)`. A node may call it
/// several times; each call gets its own answer, in order.
///
/// ```
/// # fn main() -> agentstate::Result<()> {
/// use agentstate::engine::{interrupt, Graph, ChannelSpec, Interrupt, Update, START};
/// use agentstate::{CheckpointConfig, Db};
/// use serde_json::json;
///
/// let graph = Graph::builder()
///     .state("answer", ChannelSpec::last_value())
///     .node("ask", |_| Ok(Update::new().set("answer", interrupt(json!("approve?"))?)))
///     .edge(START, "ask")
///     .compile(Db::open_in_memory()?.checkpointer())?;
/// let cfg = CheckpointConfig::thread("t");
/// let paused = graph.invoke(Some(json!({})), &cfg)?;
/// assert_eq!(Interrupt::from_output(&paused)[0].value, json!("approve?"));
/// assert_eq!(graph.resume(json!("yes"), &cfg)?["answer"], json!("yes"));
/// # Ok(()) }
/// ```
///
/// # Errors
/// The interrupt itself (a [`NodeError`] for which
/// [`is_interrupt`](NodeError::is_interrupt) is true), or, outside a
/// running node, a plain [`NodeError`].
pub fn interrupt(value: Value) -> Result<Value, NodeError> {
    CURRENT.with(|c| {
        let mut cur = c.borrow_mut();
        let Some(pad) = cur.as_mut() else {
            return Err(NodeError::new("interrupt() called outside a running node"));
        };
        let idx = pad.counter;
        pad.counter += 1;
        if let Some(v) = pad.resume.get(idx) {
            pad.used_resume = true;
            return Ok(v.clone());
        }
        let answer = pad.null_resume.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(v) = answer {
            pad.resume.push(v.clone());
            pad.used_resume = true;
            return Ok(v);
        }
        // LangGraph keys an interrupt by the answers its task already has:
        // the first by the task's namespace, the one after n answers by
        // `task_ns|n`.
        let id = interrupt_id_after(&pad.task_ns, pad.resume.len());
        Err(NodeError::interrupted(vec![interrupt_value(&value, &id)]))
    })
}
