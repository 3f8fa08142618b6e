//! [`CompiledGraph::stream`] and its variants: a run reported event by
//! event, as LangGraph's `stream(..., stream_mode=["updates", "values"])`
//! yields them (the events themselves are made by the run loop,
//! `superstep.rs`, only when a sink is set).

use std::sync::Mutex;

use serde_json::{Map, Value};

use super::node::{Command, State};
use super::run::{CompiledGraph, Input};
use crate::checkpoint::CheckpointConfig;
use crate::error::Result;

/// What [`CompiledGraph::stream`] reports as a run goes (LangGraph's
/// `stream_mode="updates"` and `"values"` together): each event is one
/// `(mode, chunk)` pair LangGraph's `stream(..., stream_mode=["updates",
/// "values"])` yields, in the same order (`tests/fixtures/engine/stream_*`).
///
/// A superstep's events come once its tasks have all finished (and their
/// writes are stored), in task order; LangGraph yields each task's as it
/// finishes.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// One task's writes to state keys in a superstep, in task order
    /// (`stream_mode="updates"`: `{node: update}`). Reported for every task
    /// that finished, also in a superstep that then fails or pauses; an
    /// empty `update` (it wrote no state key) is LangGraph's `{node: None}`.
    Updates {
        /// The node that ran.
        node: String,
        /// What it wrote, by state key (before the reducers).
        update: Map<String, Value>,
    },
    /// The state (`stream_mode="values"`): at the start of a resumed run
    /// (`stream(None, ..)`, [`stream_resume`](CompiledGraph::stream_resume)),
    /// also when nothing is left to run; after each superstep that changed
    /// a state key, the first being the one that applies the input, once
    /// its checkpoint is stored; after an [`Interrupt`](Self::Interrupt)
    /// from `interrupt()`, the state before that superstep with the
    /// interrupts under `"__interrupt__"`; and last when the run pauses
    /// there, if the superstep's finished tasks changed a state key: their
    /// writes applied (not stored; the output of `invoke` shows the same).
    Values(State),
    /// A task that finished in an earlier run (stopped by an error or an
    /// interrupt) is not run again: its stored update, reported before the
    /// superstep's other tasks run (LangGraph's `updates` chunk `{node:
    /// update, "__metadata__": {"cached": True}}`).
    CachedUpdates {
        /// The node whose writes were stored.
        node: String,
        /// Its writes, by state key; empty as in [`Updates`](Self::Updates).
        update: Map<String, Value>,
    },
    /// The run pauses (LangGraph's `updates` chunk `{"__interrupt__":
    /// interrupts}`): a task called [`interrupt()`](super::interrupt()) (its
    /// interrupts, stored form, read with
    /// [`Interrupt::from_stored`](super::Interrupt::from_stored); one event
    /// per interrupted task, then a [`Values`](Self::Values)), or a
    /// breakpoint stopped it (`interrupts` empty, the last event).
    Interrupt {
        /// The task's interrupts; empty for a breakpoint.
        interrupts: Vec<Value>,
    },
}

impl CompiledGraph {
    /// [`invoke_state`](Self::invoke_state), reporting each superstep to
    /// `on_event` as it completes: every task's update, then the state
    /// (LangGraph's `stream(..., stream_mode=["updates", "values"])`; see
    /// [`StreamEvent`] for what comes when). The events come on the calling
    /// thread, before the run goes on. Subgraphs report nothing here (their
    /// node's update comes when they finish); see
    /// [`stream_subgraphs`](Self::stream_subgraphs).
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke); events already reported stay reported
    /// (a failing superstep reports its finished tasks' updates first, as
    /// LangGraph does).
    pub fn stream(
        &self,
        input: Option<Value>,
        config: &CheckpointConfig,
        on_event: impl FnMut(StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        self.stream_input(input.map_or(Input::Nothing, Input::Value), config, on_event)
    }

    /// [`resume`](Self::resume), reported as [`stream`](Self::stream)
    /// reports (LangGraph's `stream(Command(resume=answer), ..)`): first the
    /// state it resumes from, then the updates of tasks that finished
    /// before the pause ([`StreamEvent::CachedUpdates`]), then the
    /// supersteps.
    ///
    /// # Errors
    /// As [`resume`](Self::resume).
    pub fn stream_resume(
        &self,
        answer: Value,
        config: &CheckpointConfig,
        on_event: impl FnMut(StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        self.stream_input(Input::Resume(answer), config, on_event)
    }

    /// [`invoke_command`](Self::invoke_command), reported as
    /// [`stream`](Self::stream) reports (LangGraph's
    /// `stream(Command(update=.., goto=..), ..)`): first the state it goes
    /// on from, `command`'s update applied, then the supersteps.
    ///
    /// # Errors
    /// As [`invoke_command`](Self::invoke_command).
    pub fn stream_command(
        &self,
        command: Command,
        config: &CheckpointConfig,
        on_event: impl FnMut(StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        let input = self.command_input(command, config)?;
        self.stream_input(input, config, on_event)
    }

    /// [`stream`](Self::stream), also reporting what runs inside
    /// [subgraphs](super::GraphBuilder::subgraph) (LangGraph's `stream(...,
    /// stream_mode=["updates", "values"], subgraphs=True)`): `on_event` gets
    /// each event with the namespace it comes from, `""` for this graph,
    /// else the subgraph run's `checkpoint_ns` (`<node>:<task id>`, nested
    /// ones joined by `|`; LangGraph's namespace tuple holds the same
    /// segments). A subgraph's run reports as a run of its own: its input
    /// state (or, when it resumes, the state it resumes from), its tasks'
    /// updates and its state after each superstep, its interrupts; its
    /// events come while its parent's task runs, before that superstep's
    /// events of the parent (`tests/fixtures/engine/stream_subgraphs.json`),
    /// on the thread that runs that task (one event at a time).
    ///
    /// # Errors
    /// As [`stream`](Self::stream).
    ///
    /// ```
    /// # fn main() -> agentstate::Result<()> {
    /// use agentstate::engine::{ChannelSpec, Graph, Reducer, StreamEvent, Update, END, START};
    /// use agentstate::{CheckpointConfig, Db};
    /// use serde_json::json;
    ///
    /// let child = Graph::builder()
    ///     .state("items", ChannelSpec::reducer(Reducer::Append))
    ///     .node("inner", |_| Ok(Update::new().set("items", json!(["inner"]))))
    ///     .edge(START, "inner")
    ///     .edge("inner", END);
    /// let graph = Graph::builder()
    ///     .state("items", ChannelSpec::reducer(Reducer::Append))
    ///     .subgraph("sub", child)
    ///     .edge(START, "sub")
    ///     .edge("sub", END)
    ///     .compile(Db::open_in_memory()?.checkpointer())?;
    /// let mut updates = Vec::new();
    /// graph.stream_subgraphs(Some(json!({"items": []})), &CheckpointConfig::thread("t"), |ns, event| {
    ///     if let StreamEvent::Updates { node, .. } = event {
    ///         updates.push((ns.split(':').next().unwrap_or_default().to_string(), node));
    ///     }
    /// })?;
    /// // The subgraph's node (in namespace "sub:<task id>"), then the subgraph node.
    /// assert_eq!(updates, [("sub".to_string(), "inner".to_string()), (String::new(), "sub".to_string())]);
    /// # Ok(()) }
    /// ```
    pub fn stream_subgraphs(
        &self,
        input: Option<Value>,
        config: &CheckpointConfig,
        on_event: impl FnMut(&str, StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        self.stream_tagged(input.map_or(Input::Nothing, Input::Value), config, on_event)
    }

    /// [`stream_resume`](Self::stream_resume), reporting what runs inside
    /// subgraphs as [`stream_subgraphs`](Self::stream_subgraphs) does
    /// (LangGraph's `stream(Command(resume=answer), .., subgraphs=True)`).
    ///
    /// # Errors
    /// As [`resume`](Self::resume).
    pub fn stream_resume_subgraphs(
        &self,
        answer: Value,
        config: &CheckpointConfig,
        on_event: impl FnMut(&str, StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        self.stream_tagged(Input::Resume(answer), config, on_event)
    }

    fn stream_input(
        &self,
        input: Input,
        config: &CheckpointConfig,
        on_event: impl FnMut(StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        let on_event = Mutex::new(on_event);
        let sink = |e: StreamEvent| (on_event.lock().unwrap_or_else(|p| p.into_inner()))(e);
        self.run_with(input, config, Some(&sink), None)
    }

    /// A stream with the subgraphs' events, each with its namespace.
    fn stream_tagged(
        &self,
        input: Input,
        config: &CheckpointConfig,
        on_event: impl FnMut(&str, StreamEvent) + std::marker::Send,
    ) -> Result<State> {
        // Subgraphs may report from their task's thread: one event at a time.
        let on_event = Mutex::new(on_event);
        let tagged = |ns: &str, e: StreamEvent| (on_event.lock().unwrap_or_else(|p| p.into_inner()))(ns, e);
        let sink = |e: StreamEvent| tagged("", e);
        self.run_with(input, config, Some(&sink), Some(&tagged))
    }
}
