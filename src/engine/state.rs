//! Reading and editing a thread's state from outside a run:
//! [`CompiledGraph::get_state`],
//! [`CompiledGraph::get_state_with_subgraphs`],
//! [`CompiledGraph::update_state`] and
//! [`CompiledGraph::update_state_inferred`], also in a subgraph's namespace.

use serde_json::Value;

use super::algo::{
    apply_writes, finished_writes, null_writes, prepare_next_tasks, read_state, with_writes, Task, TaskInput,
    TaskPath, TaskWrites,
};
use super::node::Update;
use super::run::{CompiledGraph, PendingTask, Save};
use super::task_id::update_task_id;
use super::{INTERRUPT, PUSH, START};
use crate::checkpoint::{ChannelVersion, ChannelVersions, CheckpointConfig, ListQuery, Metadata};
use crate::error::{Error, Result};

/// A thread's state at a checkpoint (LangGraph's `StateSnapshot`; its
/// subgraph tasks' states with
/// [`get_state_with_subgraphs`](CompiledGraph::get_state_with_subgraphs)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StateSnapshot {
    /// The state keys with a value.
    pub values: Value,
    /// The nodes the next superstep would run (at the thread's head: those
    /// that have not finished yet).
    pub next: Vec<String>,
    /// The tasks of the next superstep, with their ids, finished or not.
    pub tasks: Vec<PendingTask>,
    /// The checkpoint's config (`None` for a thread with no checkpoint).
    pub config: Option<CheckpointConfig>,
    /// Its parent's config.
    pub parent_config: Option<CheckpointConfig>,
    /// Its metadata.
    pub metadata: Option<Metadata>,
}

/// The states of a thread's checkpoints, newest first, read a page at a
/// time: made by [`CompiledGraph::state_history`].
pub struct StateHistory<'a> {
    graph: &'a CompiledGraph,
    tuples: crate::checkpoint::ListIter,
    failed: bool,
}

impl Iterator for StateHistory<'_> {
    type Item = Result<StateSnapshot>;

    fn next(&mut self) -> Option<Result<StateSnapshot>> {
        if self.failed {
            return None;
        }
        let state = self.tuples.next()?.and_then(|t| self.graph.get_state(&t.config));
        self.failed = state.is_err();
        Some(state)
    }
}

impl std::fmt::Debug for StateHistory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateHistory").finish_non_exhaustive()
    }
}

impl CompiledGraph {
    /// The state at `config`'s checkpoint (the thread's latest unless
    /// `config.checkpoint_id` is given; a subgraph's with its namespace
    /// `<node>:<task id>`).
    ///
    /// As LangGraph's `get_state`, the thread's latest checkpoint is shown
    /// as it stands: its values include the outputs of the tasks of the
    /// next superstep that already finished (a run that failed or paused
    /// stored them), `next` names only the others, and a finished task
    /// shows no interrupts. A checkpoint addressed by id is shown as stored.
    /// A thread (or namespace) with no checkpoint has an empty snapshot: no
    /// values, no tasks, no config.
    ///
    /// # Errors
    /// [`Error::NotFound`] if `config.checkpoint_id` does not exist;
    /// [`Error::InvalidArgument`] for a namespace of no subgraph; the
    /// checkpointer's errors.
    pub fn get_state(&self, config: &CheckpointConfig) -> Result<StateSnapshot> {
        let mut tasks = self.next_tasks(config)?;
        let graph = self.for_namespace(&config.checkpoint_ns)?;
        let loaded = graph.load(config)?;
        let mut channels = loaded.channels;
        // The null task's writes (a Command's update and goto) are shown
        // applied, as LangGraph does; `next` is the checkpoint's own.
        let null_writes = null_writes(&loaded.pending);
        if !null_writes.is_empty() {
            let mut tw = [TaskWrites::input(&null_writes)];
            channels = with_writes(&loaded.cp, &channels, &mut tw)?;
        }
        let mut next: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
        // The thread's head is shown live, as LangGraph does: the values
        // with the outputs of the tasks that already finished applied, only
        // the tasks still to run as `next`, only unanswered interrupts. An
        // addressed checkpoint is shown as it was stored.
        if config.checkpoint_id.is_none() {
            let done = finished_writes(&loaded.pending);
            if !done.is_empty() {
                let ns = config.checkpoint_ns.as_str();
                let mut prepared =
                    prepare_next_tasks(&graph.graph, &loaded.cp, &channels, loaded.step, ns, None)?;
                prepared.retain(|t| done.contains_key(&t.id));
                for task in &mut prepared {
                    task.writes.clone_from(&done[&task.id]);
                }
                let mut tw: Vec<TaskWrites<'_>> = prepared.iter().map(TaskWrites::from).collect();
                channels = with_writes(&loaded.cp, &channels, &mut tw)?;
            }
            for task in tasks.iter_mut().filter(|t| done.contains_key(&t.id)) {
                task.interrupts.clear();
            }
            next = tasks.iter().filter(|t| !done.contains_key(&t.id)).map(|t| t.name.clone()).collect();
        }
        let tuple = loaded.tuple;
        // No checkpoint: no values either (LangGraph's empty snapshot), not
        // the channels' initial ones (an append reducer's `[]`).
        let values = match &tuple {
            Some(_) => read_state(&channels, &graph.graph.state_keys),
            None => Value::Object(serde_json::Map::new()),
        };
        Ok(StateSnapshot {
            values,
            next,
            tasks,
            config: tuple.as_ref().map(|t| t.config.clone()),
            parent_config: tuple.as_ref().and_then(|t| t.parent_config.clone()),
            metadata: tuple.map(|t| std::sync::Arc::unwrap_or_clone(t.metadata)),
        })
    }

    /// [`get_state`](Self::get_state), with the state of every subgraph the
    /// snapshot's tasks run (LangGraph's `get_state(config,
    /// subgraphs=True)`): each such task's [`state`](PendingTask::state) is
    /// the subgraph's snapshot at the latest checkpoint of its namespace
    /// ([`PendingTask::subgraph`]), read the same way, down to nested
    /// subgraphs. A subgraph paused by [`interrupt()`](super::interrupt())
    /// shows where it stopped: its values, its next node, the interrupt.
    /// A subgraph task that has not started yet has an empty snapshot: no
    /// values, no tasks, no metadata, its config the namespace's
    /// ([`PendingTask::subgraph`]).
    ///
    /// # Errors
    /// As [`get_state`](Self::get_state), for `config` and each subgraph
    /// namespace read.
    ///
    /// ```
    /// # fn main() -> agentstate::Result<()> {
    /// use agentstate::engine::{interrupt, ChannelSpec, Graph, Update, END, START};
    /// use agentstate::{CheckpointConfig, Db};
    /// use serde_json::json;
    ///
    /// let child = Graph::builder()
    ///     .state("text", ChannelSpec::last_value())
    ///     .node("draft", |_| Ok(Update::new().set("text", json!("draft"))))
    ///     .node("ask", |s| {
    ///         let answer = interrupt(json!("ok?"))?;
    ///         let text = s.get("text").and_then(|t| t.as_str()).unwrap_or_default();
    ///         let text = format!("{text} ({})", answer.as_str().unwrap_or_default());
    ///         Ok(Update::new().set("text", json!(text)))
    ///     })
    ///     .edge(START, "draft")
    ///     .edge("draft", "ask")
    ///     .edge("ask", END);
    /// let graph = Graph::builder()
    ///     .state("text", ChannelSpec::last_value())
    ///     .subgraph("sub", child)
    ///     .edge(START, "sub")
    ///     .edge("sub", END)
    ///     .compile(Db::open_in_memory()?.checkpointer())?;
    /// let thread = CheckpointConfig::thread("t");
    /// graph.invoke(Some(json!({"text": ""})), &thread)?;
    /// // The parent waits on its sub task; the subgraph's state says why.
    /// let snapshot = graph.get_state_with_subgraphs(&thread)?;
    /// let sub = snapshot.tasks[0].state.as_deref().expect("the subgraph's state");
    /// assert_eq!(sub.values["text"], "draft");
    /// assert_eq!(sub.next, ["ask"]);
    /// // Edit the subgraph's state (as `draft`, the node that ran last), then
    /// // answer its interrupt from the parent.
    /// let sub_config = snapshot.tasks[0].subgraph.as_ref().expect("a subgraph task");
    /// graph.update_state_inferred(sub_config, json!({"text": "edited"}))?;
    /// let out = graph.resume(json!("yes"), &thread)?;
    /// assert_eq!(out["text"], "edited (yes)");
    /// # Ok(()) }
    /// ```
    pub fn get_state_with_subgraphs(&self, config: &CheckpointConfig) -> Result<StateSnapshot> {
        let mut snapshot = self.get_state(config)?;
        for task in &mut snapshot.tasks {
            if let Some(sub) = &task.subgraph {
                let mut state = self.get_state_with_subgraphs(sub)?;
                // Not started yet: LangGraph shows the namespace's config.
                state.config.get_or_insert_with(|| sub.clone());
                task.state = Some(Box::new(state));
            }
        }
        Ok(snapshot)
    }

    /// Every checkpoint of `config`'s thread (in its namespace), newest
    /// first, as [`get_state`](Self::get_state) reads each (LangGraph's
    /// `get_state_history`). A config that names a checkpoint lists that
    /// one alone, as LangGraph's savers list such a config. This collects
    /// [`state_history`](Self::state_history), which also takes LangGraph's
    /// `filter`, `before` and `limit` and reads one page at a time.
    ///
    /// # Errors
    /// As [`get_state`](Self::get_state).
    pub fn get_state_history(&self, config: &CheckpointConfig) -> Result<Vec<StateSnapshot>> {
        self.state_history(&ListQuery::from_config(config))?.collect()
    }

    /// The states of the checkpoints `query` lists, newest first, one at a
    /// time (LangGraph's `get_state_history(config, filter=, before=,
    /// limit=)`): the checkpoints are read a page at a time, so memory stays
    /// constant however long the thread. The query's thread is required; a
    /// query with no namespace reads the root graph's (`""`), as LangGraph
    /// fills in the config's namespace; `filter` is the checkpoint metadata
    /// [filter language](crate::filter), `before` a checkpoint id.
    ///
    /// ```
    /// # fn main() -> agentstate::Result<()> {
    /// use agentstate::engine::{ChannelSpec, Graph, Reducer, Update, END, START};
    /// use agentstate::{CheckpointConfig, Db, ListQuery};
    /// use serde_json::json;
    ///
    /// let graph = Graph::builder()
    ///     .state("n", ChannelSpec::reducer(Reducer::Add))
    ///     .node("inc", |_| Ok(Update::new().set("n", json!(1))))
    ///     .edge(START, "inc")
    ///     .edge("inc", END)
    ///     .compile(Db::open_in_memory()?.checkpointer())?;
    /// let thread = CheckpointConfig::thread("t");
    /// for _ in 0..3 {
    ///     graph.invoke(Some(json!({"n": 1})), &thread)?;
    /// }
    /// // The two newest checkpoints the runs' loop made (not their input).
    /// let query = ListQuery::thread("t").filter(json!({"source": "loop"})).limit(2);
    /// let states: Vec<_> = graph.state_history(&query)?.collect::<agentstate::Result<_>>()?;
    /// let n: Vec<_> = states.iter().map(|s| s.values["n"].clone()).collect();
    /// assert_eq!(n, [json!(6), json!(5)]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `query` names no thread;
    /// [`Error::InvalidFilter`] if the filter does not parse; then each item
    /// may be an error as for [`get_state`](Self::get_state), after which
    /// the iterator ends.
    pub fn state_history(&self, query: &ListQuery) -> Result<StateHistory<'_>> {
        if query.thread_id.is_none() {
            return Err(Error::InvalidConfig("a state history needs a thread_id".into()));
        }
        let mut query = query.clone();
        query.checkpoint_ns.get_or_insert_with(String::new);
        let tuples = self.saver.list_iter(&query)?;
        Ok(StateHistory { graph: self, tuples, failed: false })
    }

    /// Writes `values` to the state as if node `as_node` had returned them
    /// (its edges and routers apply), in a new checkpoint after `config`'s
    /// (source `"update"`; an older checkpoint is forked). Returns the new
    /// checkpoint's config: `invoke(None, ..)` on it goes on from there.
    ///
    /// On a thread with no checkpoint yet, the update makes its first one
    /// (step 0, no parent), as LangGraph does. `as_node` may be
    /// [`START`]: the values then act as the graph input would (START's
    /// edges apply), but the checkpoint's source stays `"update"`.
    ///
    /// With a subgraph's namespace (`config.checkpoint_ns`, e.g. a task's
    /// [`PendingTask::subgraph`]), the update is the subgraph's: `as_node`
    /// is one of its nodes, and the new checkpoint goes in that namespace
    /// after its latest (or `config.checkpoint_id`), with the same metadata
    /// `parents`. The parent's checkpoints do not change: when the parent
    /// resumes (a subgraph paused by [`interrupt()`](super::interrupt())),
    /// the subgraph goes on from the update, as in LangGraph.
    ///
    /// # Errors
    /// - [`Error::NotFound`] if `config.checkpoint_id` does not exist.
    /// - [`Error::InvalidUpdate`] if `as_node` is not a node (LangGraph's
    ///   special `as_node` values `__end__`, `__input__` and `__copy__` are
    ///   not supported yet), `values` is neither an object nor null (null:
    ///   the node wrote nothing, as LangGraph's `values=None`), or the writes
    ///   do not fit their channels.
    /// - [`Error::InvalidArgument`] for a namespace that names no subgraph.
    /// - the checkpointer's errors.
    pub fn update_state(
        &self,
        config: &CheckpointConfig,
        values: Value,
        as_node: &str,
    ) -> Result<CheckpointConfig> {
        self.update(config, values, Some(as_node))
    }

    /// [`update_state`](Self::update_state) as the node that updated the
    /// state last (LangGraph's `update_state(config, values)` without
    /// `as_node`): the node whose `versions_seen` holds the newest version
    /// at `config`'s checkpoint, i.e. the last node that finished a
    /// superstep (an interrupted or failed node did not; an earlier
    /// `update_state` does not count either). On a thread where no node ran
    /// yet (a new thread included), it is [`START`]: the values act as the
    /// graph input would.
    ///
    /// # Errors
    /// - [`Error::InvalidUpdate`] `"Ambiguous update, specify as_node"` if
    ///   several nodes finished in that last superstep (a fan-out); call
    ///   [`update_state`](Self::update_state) with the node then.
    /// - otherwise as [`update_state`](Self::update_state).
    ///
    /// ```
    /// # fn main() -> agentstate::Result<()> {
    /// use agentstate::engine::{ChannelSpec, Graph, Reducer, Update, END, START};
    /// use agentstate::{CheckpointConfig, Db, Error};
    /// use serde_json::json;
    ///
    /// let graph = Graph::builder()
    ///     .state("items", ChannelSpec::reducer(Reducer::Append))
    ///     .node("a", |_| Ok(Update::new().set("items", json!(["a"]))))
    ///     .node("b", |_| Ok(Update::new().set("items", json!(["b"]))))
    ///     .edge(START, "a")
    ///     .edge(START, "b")
    ///     .edge("a", END)
    ///     .edge("b", END)
    ///     .compile(Db::open_in_memory()?.checkpointer())?;
    /// let thread = CheckpointConfig::thread("t");
    /// // Nothing ran yet: the update acts as the input, a and b run next.
    /// graph.update_state_inferred(&thread, json!({"items": ["note"]}))?;
    /// let out = graph.invoke(None, &thread)?;
    /// assert_eq!(out["items"], json!(["note", "a", "b"]));
    /// // a and b finished in the same superstep: say which one updates.
    /// let err = graph.update_state_inferred(&thread, json!({"items": ["late"]}));
    /// assert!(matches!(err, Err(Error::InvalidUpdate(m)) if m.contains("specify as_node")));
    /// graph.update_state(&thread, json!({"items": ["late"]}), "b")?;
    /// # Ok(()) }
    /// ```
    pub fn update_state_inferred(
        &self,
        config: &CheckpointConfig,
        values: Value,
    ) -> Result<CheckpointConfig> {
        self.update(config, values, None)
    }

    /// The node an update without `as_node` is applied as (LangGraph's
    /// `_infer_as_node`), from a checkpoint's `versions_seen`: the node of
    /// the newest version seen, unless another node saw that version too
    /// (`None`: ambiguous). Entries that are not nodes (`__input__`,
    /// `__interrupt__`) do not count; when nothing was seen yet, [`START`]
    /// (the graph's input node).
    fn inferred_node(&self, seen: &std::collections::BTreeMap<String, ChannelVersions>) -> Option<&str> {
        if let [only] = self.graph.nodes.as_slice() {
            return Some(&only.name);
        }
        // Python truthiness: a zero or empty version reads as unseen.
        let set = |v: &ChannelVersion| match v {
            ChannelVersion::Int(n) => *n != 0,
            ChannelVersion::Str(s) => !s.is_empty(),
        };
        if !seen.values().flat_map(|s| s.values()).any(set) {
            return Some(START);
        }
        let mut last: Vec<(&ChannelVersion, &str)> = seen
            .iter()
            .filter_map(|(name, versions)| self.graph.node(name).map(|n| (n.name.as_str(), versions)))
            .flat_map(|(name, versions)| versions.values().map(move |v| (v, name)))
            .collect();
        last.sort_unstable();
        match last.as_slice() {
            [.., (before, _), (newest, _)] if before == newest => None,
            [.., (_, node)] => Some(node),
            [] => None,
        }
    }

    /// [`update_state`](Self::update_state), `as_node` inferred when `None`.
    fn update(
        &self,
        config: &CheckpointConfig,
        values: Value,
        as_node: Option<&str>,
    ) -> Result<CheckpointConfig> {
        // A subgraph's namespace: the subgraph's nodes and channels apply.
        if !config.checkpoint_ns.is_empty() {
            return self.for_namespace(&config.checkpoint_ns)?.update_here(config, values, as_node);
        }
        self.update_here(config, values, as_node)
    }

    /// [`update`](Self::update) on this graph's nodes and channels (the
    /// subgraph's for a namespace), in `config.checkpoint_ns`.
    fn update_here(
        &self,
        config: &CheckpointConfig,
        values: Value,
        as_node: Option<&str>,
    ) -> Result<CheckpointConfig> {
        // The namespace's own history: its head, where a first checkpoint
        // starts.
        let thread = CheckpointConfig::thread(&config.thread_id).ns(&config.checkpoint_ns);
        let mut loaded = self.load(config)?;
        // No checkpoint: a new thread, whose first checkpoint the update
        // makes. (LangGraph would also start one for a checkpoint id that
        // does not exist, with that id as its parent; we refuse it.)
        let saved = loaded.tuple.take();
        if saved.is_none() {
            if let Some(id) = &config.checkpoint_id {
                return Err(Error::NotFound(format!("checkpoint {id:?} of thread {:?}", config.thread_id)));
            }
        }
        let as_node = match as_node {
            Some(node) => node,
            None => self
                .inferred_node(&loaded.cp.seen)
                .ok_or_else(|| Error::InvalidUpdate("Ambiguous update, specify as_node".into()))?,
        };
        if self.graph.node(as_node).is_none() {
            return Err(Error::InvalidUpdate(format!("Node {as_node} does not exist")));
        }
        // No values (LangGraph's `values=None`): the node finished without
        // writing a state key; its edges and routers still apply.
        let values = if values.is_null() { Value::Object(serde_json::Map::new()) } else { values };
        let Value::Object(values) = values else {
            return Err(Error::InvalidUpdate(format!("update_state needs an object, got {values}")));
        };
        // On the thread's head (not on a checkpoint the thread has moved
        // past), LangGraph also stores the update's writes as pending writes
        // of the checkpoint updated, under the id of the next superstep's
        // task for `as_node` if there is one (that task then counts as
        // finished), else under `uuid5(checkpoint id, "__interrupt__")`.
        // A new thread has no checkpoint to store them on.
        let head = match (&saved, &config.checkpoint_id) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(_), Some(id)) => {
                self.saver.get_tuple(&thread)?.is_some_and(|latest| latest.checkpoint.id == *id)
            }
        };
        let task_id = match &saved {
            Some(saved) if head => {
                let next = prepare_next_tasks(
                    &self.graph,
                    &loaded.cp,
                    &loaded.channels,
                    loaded.step,
                    &config.checkpoint_ns,
                    None,
                )?;
                match next.into_iter().find(|t| t.name == as_node) {
                    Some(t) => t.id,
                    None => update_task_id(&saved.checkpoint.id)?,
                }
            }
            _ => String::new(),
        };
        let task = Task {
            id: task_id,
            name: as_node.to_string(),
            path: TaskPath::Update(0),
            triggers: vec![INTERRUPT.to_string()],
            input: TaskInput::Raw(Value::Null),
            writes: Vec::new(),
        };
        let writes = self
            .node_writes(&task, Update::from(values), &loaded.channels)
            .map_err(|e| Error::InvalidUpdate(e.message().to_string()))?;
        let mut tw = [TaskWrites {
            path: task.path.as_str(),
            name: &task.name,
            triggers: &task.triggers,
            writes: &writes,
        }];
        // Applied first: writes a reducer refuses leave nothing stored.
        apply_writes(&mut loaded.cp, &mut loaded.channels, &mut tw, true)?;
        if let Some(saved) = saved.as_ref().filter(|_| head) {
            let stored: Vec<(&str, Value)> =
                writes.iter().filter(|(c, _)| c != PUSH).map(|(c, v)| (c.as_str(), v.clone())).collect();
            if !stored.is_empty() {
                self.saver.put_writes(&saved.config, &stored, &task.id, &task.path.as_str())?;
            }
        }
        // A subgraph's checkpoints keep their parents (namespace -> the
        // enclosing runs' checkpoint ids), as LangGraph's update does.
        let parents = saved
            .as_ref()
            .and_then(|t| t.metadata.0.get("parents"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        // The step after the checkpoint's (0 on a new thread).
        let step = saved.as_ref().and_then(|t| t.metadata.step()).unwrap_or(-1).saturating_add(1);
        let save = Save {
            source: "update",
            step,
            updated: None,
            fork: true,
            parents: &parents,
            id: None,
            writes: None,
        };
        let (tuple, _) = self.commit(saved, &thread, &loaded.cp, &loaded.channels, &save)?;
        Ok(tuple.config)
    }
}
