//! One task of a superstep: its node run (a panic caught as its error),
//! its update turned into writes, its edges and routers.

use serde_json::Value;

use super::algo::{apply_writes, send_value, Channels, CpState, Task, TaskInput, TaskWrites};
use super::graph::{NodeKind, NodeSpec};
use super::node::{Goto, NodeError, NodeFn, State, Update};
use super::run::CompiledGraph;
use super::{END, NO_WRITES, START, TASKS};
use crate::error::Result;

/// LangGraph's `InvalidUpdateError`: what a node returned (or was given)
/// cannot become writes.
fn invalid_update(message: String) -> NodeError {
    NodeError::with_kind("InvalidUpdateError", message)
}

/// What a node function reads: the task's state (a task whose input is
/// not an object cannot run a node).
fn node_state(task: &Task) -> std::result::Result<&State, NodeError> {
    match &task.input {
        TaskInput::State(s) => Ok(s),
        TaskInput::Raw(other) => {
            Err(invalid_update(format!("the input of {} is not an object: {other}", task.name)))
        }
    }
}

/// Runs a node function; a panic becomes the task's error (kind `Panic`).
fn caught(
    f: impl FnOnce() -> std::result::Result<Update, NodeError>,
) -> std::result::Result<Update, NodeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "node panicked".to_string());
        Err(NodeError::with_kind("Panic", message))
    })
}

impl CompiledGraph {
    /// Runs one task: its node (or `__start__`'s pass-through), then its
    /// edges and routers. Returns its writes, in LangGraph's order: state
    /// writes, static edges, routers' targets.
    pub(crate) fn run_task(
        &self,
        task: &Task,
        channels: &Channels,
    ) -> std::result::Result<Vec<(String, Value)>, NodeError> {
        let node = self.task_node(task)?;
        let update = match &node.func {
            None => match &task.input {
                TaskInput::Raw(Value::Object(m)) => Update::from(m.clone()),
                TaskInput::State(s) => Update::from(s.to_map()),
                TaskInput::Raw(other) => return Err(invalid_update(super::expected_dict(other))),
            },
            // A panicking node fails its task like an erroring one (LangGraph
            // catches every exception a node raises).
            Some(NodeKind::Fn(NodeFn::Sync(f))) => {
                let state = node_state(task)?;
                caught(|| f(state))?
            }
            #[cfg(feature = "tokio")]
            Some(NodeKind::Fn(NodeFn::Async(f))) => {
                let state = node_state(task)?.clone();
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return Err(NodeError::with_kind(
                        "RuntimeError",
                        format!("{} is an async node: run the graph with ainvoke / aresume", task.name),
                    ));
                };
                caught(|| runtime.block_on(f(state)))?
            }
            Some(NodeKind::Subgraph(_)) => {
                return Err(NodeError::new(format!("{} is a subgraph", task.name)))
            }
        };
        self.writes_of(node, task, update, channels)
    }

    /// The node `task` runs.
    fn task_node(&self, task: &Task) -> std::result::Result<&NodeSpec, NodeError> {
        self.graph.node(&task.name).ok_or_else(|| NodeError::new(format!("unknown node {}", task.name)))
    }

    /// The writes of `task`'s node returning `update`: its state writes
    /// (non-state keys dropped), its gotos, static edges and routers'
    /// targets, in LangGraph's order; `__no_writes__` if none.
    pub(crate) fn node_writes(
        &self,
        task: &Task,
        update: Update,
        channels: &Channels,
    ) -> std::result::Result<Vec<(String, Value)>, NodeError> {
        self.writes_of(self.task_node(task)?, task, update, channels)
    }

    /// [`node_writes`](Self::node_writes) for `task`'s `node`.
    fn writes_of(
        &self,
        node: &NodeSpec,
        task: &Task,
        update: Update,
        channels: &Channels,
    ) -> std::result::Result<Vec<(String, Value)>, NodeError> {
        let graph = &self.graph;
        let is_key = |k: &str| graph.state_keys.iter().any(|s| s == k);
        let mut writes: Vec<(String, Value)> = update.writes.into_iter().filter(|(k, _)| is_key(k)).collect();
        let gotos = update.gotos;
        let state_writes = writes.len();
        for goto in gotos {
            writes.push(self.goto_write(goto)?);
        }
        writes.extend(node.static_writes.iter().cloned());
        if !node.routers.is_empty() {
            let state = self
                .fresh_state(task, &writes[..state_writes], channels)
                .map_err(|e| invalid_update(e.to_string()))?;
            let routed: std::result::Result<(), NodeError> = node.routers.iter().try_for_each(|router| {
                for goto in router(&state)? {
                    writes.push(self.goto_write(goto)?);
                }
                Ok(())
            });
            if let Err(e) = routed {
                // As LangGraph: what the task wrote before its router
                // failed is stored with the error, so a resume takes the
                // task as done (neither the node nor the router runs again).
                writes.retain(|(c, _)| !c.is_empty());
                return Err(e.after_writes(writes));
            }
        }
        writes.retain(|(c, _)| !c.is_empty());
        if writes.is_empty() {
            writes.push((NO_WRITES.to_string(), Value::Null));
        }
        Ok(writes)
    }

    /// The write that sends the graph to `goto` (an empty
    /// channel name for [`END`], dropped by the caller). As in LangGraph, a
    /// goto or Send naming no node of the graph is written and then
    /// ignored (its `branch:to:` channel does not exist; a Send to no node
    /// makes no task); a router that goes to [`START`] fails.
    fn goto_write(&self, goto: Goto) -> std::result::Result<(String, Value), NodeError> {
        match goto {
            Goto::Node(n) if n == END => Ok((String::new(), Value::Null)),
            Goto::Node(n) if n == START => {
                Err(NodeError::with_kind("ValueError", "Branch did not return a valid destination"))
            }
            Goto::Node(n) => Ok((format!("branch:to:{n}"), Value::Null)),
            // The receiving task reads its argument as its state: refused
            // here, in the sender, rather than failing the receiver on every
            // run from the stored Send.
            Goto::Send(s) if !s.arg.is_object() => {
                Err(invalid_update(format!("Send to {:?} needs an object argument, got {}", s.node, s.arg)))
            }
            Goto::Send(s) => Ok((TASKS.to_string(), send_value(&s.node, &s.arg))),
        }
    }

    /// The state a router reads: the task's own writes applied to a copy of
    /// the state channels (LangGraph's fresh `local_read`).
    fn fresh_state(&self, task: &Task, writes: &[(String, Value)], channels: &Channels) -> Result<State> {
        let keys = &self.graph.state_keys;
        // Only the channels the task wrote are copied and updated; of the
        // others, those a superstep clears (ephemeral values, a
        // non-accumulating topic) read as empty, as LangGraph's local
        // apply_writes leaves them.
        let mut local: Channels = channels
            .iter()
            .filter(|(k, _)| keys.contains(k) && writes.iter().any(|(c, _)| c == *k))
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        let mut cp = CpState::default();
        let mut tw =
            [TaskWrites { path: task.path.as_str(), name: &task.name, triggers: &task.triggers, writes }];
        apply_writes(&mut cp, &mut local, &mut tw, false)?;
        let bump_step = !task.triggers.is_empty();
        let mut state = Vec::new();
        for k in keys {
            let value = match (local.get(k), channels.get(k)) {
                (Some(ch), _) => ch.get_shared(),
                (None, Some(ch)) if bump_step && ch.clears_each_step() => None,
                (None, Some(ch)) => ch.get_shared(),
                (None, None) => None,
            };
            if let Some(v) = value {
                state.push((k.clone(), v));
            }
        }
        Ok(State::from_shared(state))
    }
}
