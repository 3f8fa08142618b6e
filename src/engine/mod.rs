//! A superstep graph runtime whose checkpoints are LangGraph 1.2's.
//!
//! Build a graph with [`Graph::builder`] (state keys and their
//! [channels](ChannelSpec), nodes, edges, conditional edges with [`Send`]
//! fan-out, join edges), [`compile`](GraphBuilder::compile) it onto a
//! [`Checkpointer`](crate::Checkpointer) and [`invoke`](CompiledGraph::invoke)
//! it. Every checkpoint and pending write it stores is the one LangGraph
//! would store for the same graph with `durability="sync"`: same channel
//! versions (every channel changed in a superstep gets the same next
//! version), `versions_seen`, `updated_channels`, task ids (XXH3 over the
//! checkpoint id, see [`task_id()`]) and task paths, so a LangGraph process
//! can resume a thread this crate ran, and the reverse.
//!
//! ```
//! # fn main() -> agentstate::Result<()> {
//! use agentstate::engine::{ChannelSpec, Graph, Reducer, Update, END, START};
//! use agentstate::{CheckpointConfig, Db};
//! use serde_json::json;
//!
//! let graph = Graph::builder()
//!     .state("items", ChannelSpec::reducer(Reducer::Append))
//!     .node("a", |_| Ok(Update::new().set("items", json!(["a"]))))
//!     .node("b", |_| Ok(Update::new().set("items", json!(["b"]))))
//!     .edge(START, "a")
//!     .edge("a", "b")
//!     .edge("b", END)
//!     .compile(Db::open_in_memory()?.checkpointer())?;
//! let out = graph.invoke(Some(json!({"items": ["in"]})), &CheckpointConfig::thread("t"))?;
//! assert_eq!(out["items"], json!(["in", "a", "b"]));
//! # Ok(()) }
//! ```
//!
//! Pause a run with [`interrupt()`] or breakpoints
//! ([`interrupt_before`](GraphBuilder::interrupt_before) /
//! [`interrupt_after`](GraphBuilder::interrupt_after)) and go on with
//! [`resume`](CompiledGraph::resume) or `invoke(None, ..)`.
//!
//! Read and edit a thread with [`get_state`](CompiledGraph::get_state),
//! [`get_state_history`](CompiledGraph::get_state_history) (or
//! [`state_history`](CompiledGraph::state_history): filtered, limited,
//! read a page at a time) and
//! [`update_state`](CompiledGraph::update_state) (or
//! [`update_state_inferred`](CompiledGraph::update_state_inferred), as the
//! node that ran last); replay from an old
//! checkpoint with `invoke(None, config.at(id))`. Nest graphs with
//! [`subgraph`](GraphBuilder::subgraph); read a paused subgraph's state from
//! the parent with
//! [`get_state_with_subgraphs`](CompiledGraph::get_state_with_subgraphs) and
//! edit it with `update_state` on its namespace
//! ([`PendingTask::subgraph`]). Choose when checkpoints are stored
//! with [`with_durability`](CompiledGraph::with_durability).
//!
//! Async nodes ([`async_node`](GraphBuilder::async_node)) run on tokio under
//! [`ainvoke`](CompiledGraph::ainvoke); [`stream`](CompiledGraph::stream)
//! reports each superstep's updates and state.
//!
//! [`stream_subgraphs`](CompiledGraph::stream_subgraphs) adds what runs
//! inside subgraphs, each event with its namespace.
//!
//! Retry a failing node inside its task with
//! [`retry`](GraphBuilder::retry) and a [`RetryPolicy`] (LangGraph's
//! `retry_policy`): only the last attempt's writes or error are stored.
//!
//! Go on from a thread's head with a [`Command`] (LangGraph's
//! `Command(update=.., goto=.., resume=..)` as input) and
//! [`invoke_command`](CompiledGraph::invoke_command).
//!
//! Not yet: node cache policies, deferred nodes, invoking a subgraph on its
//! own namespace.

mod algo;
mod channel;
mod graph;
mod interrupt;
mod messages;
mod node;
mod retry;
mod run;
mod state;
mod stream;
mod superstep;
mod task;
mod task_id;

pub use channel::{ChannelSpec, Reducer, ReducerFn};
pub use graph::{Graph, GraphBuilder};
pub use interrupt::{interrupt, Interrupt};
pub use messages::remove_message;
#[cfg(feature = "tokio")]
pub use node::{AsyncNodeFn, NodeFuture};
pub use node::{Command, Goto, NodeError, NodeFn, RouterFn, Send, State, SyncNodeFn, Update};
pub use retry::{default_retry_on, RetryOnFn, RetryPolicy};
pub use run::{CompiledGraph, PendingTask};
pub use state::{StateHistory, StateSnapshot};
pub use stream::StreamEvent;
pub use task_id::{checkpoint_id_bytes, interrupt_id, task_id};

/// When a run stores its checkpoints and writes (LangGraph's `durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Each checkpoint and task write is stored before the run goes on.
    #[default]
    Sync,
    /// The same checkpoints and writes as [`Sync`](Durability::Sync),
    /// stored in the background while the run goes on; `invoke` returns
    /// once they are all committed (LangGraph waits for its pending
    /// writes at the end of `invoke` too).
    ///
    /// The background is the [`Db`](crate::Db)'s write-behind queue
    /// ([`DbBuilder::write_behind`](crate::DbBuilder::write_behind)): each
    /// write is queued and the run goes on, a committer thread commits them
    /// in order (a superstep's checkpoint at once, while the next superstep
    /// runs; whatever else is queued by then in the same transaction), and
    /// the end of `invoke` (or
    /// `resume`) waits for them ([`Db::flush`](crate::Db::flush)). A crash
    /// during a run loses a suffix of that run's writes (whole writes, in
    /// order: never a task's writes without the checkpoint they belong to),
    /// so resuming reruns at most the tasks whose writes were lost; nothing
    /// is lost once `invoke` has returned. On a Db without write-behind
    /// (or in memory) every write is committed in the caller, as with
    /// `Sync`.
    Async,
    /// Only the last checkpoint (and the writes of an unfinished superstep)
    /// is stored, when the run ends: a crash mid-run loses the run.
    Exit,
}

/// `message` with the troubleshooting line LangGraph appends to some of its
/// errors (`create_error_message` in `langgraph/errors.py`), so that an
/// error's text is LangGraph's.
pub(crate) fn troubleshooting(message: &str, code: &str) -> String {
    format!("{message}\nFor troubleshooting, visit: https://docs.langchain.com/oss/python/langgraph/errors/{code}")
}

/// LangGraph's `InvalidUpdateError` text for graph input or a node result
/// that is not an object.
pub(crate) fn expected_dict(got: &serde_json::Value) -> String {
    troubleshooting(&format!("Expected dict, got {got}"), "INVALID_GRAPH_NODE_RETURN_VALUE")
}

/// LangGraph's `GraphRecursionError` text for a run that reached `limit`.
pub(crate) fn recursion_message(limit: i64) -> String {
    troubleshooting(
        &format!(
            "Recursion limit of {limit} reached without hitting a stop condition. You can increase the limit by \
             setting the `recursion_limit` config key."
        ),
        "GRAPH_RECURSION_LIMIT",
    )
}

/// The virtual node that receives the graph input.
pub const START: &str = "__start__";
/// The virtual node that ends a path.
pub const END: &str = "__end__";
/// The topic channel holding the Sends of a superstep.
pub const TASKS: &str = "__pregel_tasks";
/// The name of the input pseudo-task in `versions_seen`.
pub const INPUT: &str = "__input__";
/// The interrupt channel / `versions_seen` entry of a resumed run.
pub const INTERRUPT: &str = "__interrupt__";
/// The channel of a failed task's error write (write idx -1).
pub const ERROR: &str = "__error__";
/// The channel of a resume value (write idx -4).
pub const RESUME: &str = "__resume__";
/// The task id of writes that belong to no task (a resume value).
pub const NULL_TASK_ID: &str = "00000000-0000-0000-0000-000000000000";
/// The write a task that wrote nothing stores.
pub const NO_WRITES: &str = "__no_writes__";
/// The task kind of a node triggered by its channels.
pub const PULL: &str = "__pregel_pull";
/// The task kind of a Send.
pub const PUSH: &str = "__pregel_push";
