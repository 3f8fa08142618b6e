//! [`CompiledGraph::invoke`]: supersteps run and persisted exactly as
//! LangGraph persists them with `durability="sync"`: the input checkpoint,
//! each task's writes as it finishes (`put_writes`, with LangGraph's task ids
//! and paths), then a checkpoint per superstep. The writes of the task that
//! finishes last share the next checkpoint's transaction
//! ([`Step::parent_writes`](crate::checkpoint::Step::parent_writes)): the
//! same rows, one commit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::algo::{is_control, prepare_next_tasks, send_value, Channels, CpState, Task};
use super::channel::Channel;
use super::graph::Compiled;
use super::node::{Command, Goto, State};
use super::stream::StreamEvent;
use super::{Durability, ERROR, INTERRUPT, RESUME, START, TASKS};
use crate::checkpoint::{CheckpointConfig, CheckpointTuple, Checkpointer, Metadata};
use crate::db::CacheTag;
use crate::error::{Error, Result};

/// A graph ready to run, persisting to a [`Checkpointer`]. Cheap to clone.
#[derive(Clone)]
pub struct CompiledGraph {
    pub(crate) graph: Arc<Compiled>,
    pub(crate) saver: Checkpointer,
    pub(crate) durability: Durability,
    /// The channels runs ended with (see [`Live`]).
    pub(crate) live: Live,
}

/// The channels a run ended with, by (thread, namespace), with the id of the
/// checkpoint whose values they are. The next run on the thread starts from
/// them if that checkpoint is still the one it loads, instead of decoding
/// the whole state again: a run's cost does not grow with the thread's
/// history. With them, the checkpoint as the run stored it and the file's
/// generation right after: while the generation has not moved, that is the
/// thread's head and the next run does not read it back at all. Shared by
/// the clones of a graph; a run takes its entry out, so two runs never
/// share channels.
#[derive(Clone, Default)]
pub(crate) struct Live(Arc<std::sync::Mutex<LiveMap>>);

/// (thread, namespace) -> (checkpoint id, channels, the stored checkpoint
/// and the generation after it).
type LiveMap =
    std::collections::HashMap<(String, String), (String, Channels, Option<(CheckpointTuple, CacheTag)>)>;

/// Threads whose channels [`Live`] keeps at most (it forgets them all when
/// full: a cache, never a source of truth).
const LIVE_THREADS: usize = 256;

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, LiveMap> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the channels of (thread, ns) if they are checkpoint `id`'s.
    pub(crate) fn take(&self, thread: &str, ns: &str, id: &str) -> Option<Channels> {
        let mut m = self.lock();
        let (cached_id, _, _) = m.get(&(thread.to_string(), ns.to_string()))?;
        if cached_id != id {
            return None;
        }
        m.remove(&(thread.to_string(), ns.to_string())).map(|(_, c, _)| c)
    }

    /// Whether a head checkpoint of (thread, ns) is kept (see `take_head`).
    pub(crate) fn has_head(&self, thread: &str, ns: &str) -> bool {
        self.lock().get(&(thread.to_string(), ns.to_string())).is_some_and(|(_, _, head)| head.is_some())
    }

    /// Takes the head checkpoint of (thread, ns) and its channels if they
    /// were kept at `generation` (nothing in the file changed since).
    pub(crate) fn take_head(
        &self,
        thread: &str,
        ns: &str,
        generation: u64,
    ) -> Option<(CheckpointTuple, Channels)> {
        let mut m = self.lock();
        let key = (thread.to_string(), ns.to_string());
        let (_, _, Some((_, tag))) = m.get(&key)? else { return None };
        if tag.get() != Some(generation) {
            return None;
        }
        m.remove(&key).and_then(|(_, c, head)| head.map(|(t, _)| (t, c)))
    }

    /// Keeps `channels`, the values of checkpoint `id` of (thread, ns), and
    /// `head`: that checkpoint as stored, with the generation after it.
    pub(crate) fn keep(
        &self,
        thread: &str,
        ns: &str,
        id: &str,
        channels: Channels,
        head: Option<(CheckpointTuple, CacheTag)>,
    ) {
        if id.is_empty() {
            return;
        }
        let mut m = self.lock();
        if m.len() >= LIVE_THREADS {
            m.clear();
        }
        m.insert((thread.to_string(), ns.to_string()), (id.to_string(), channels, head));
    }
}

impl std::fmt::Debug for CompiledGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("nodes", &self.graph.nodes.iter().map(|n| &n.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A task the next superstep of a thread would run, with what the
/// checkpoint's pending writes say about it (LangGraph's `PregelTask`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PendingTask {
    /// Its id (LangGraph's, derived from the checkpoint id).
    pub id: String,
    /// The node.
    pub name: String,
    /// LangGraph's task path string (`~__pregel_pull, a`).
    pub path: String,
    /// Its stored error (`Kind('message')`), if it failed.
    pub error: Option<String>,
    /// The interrupts it raised.
    pub interrupts: Vec<Value>,
    /// Its state writes by key, if it finished (stored a write other than an
    /// error, interrupt or resume).
    pub result: Option<Value>,
    /// For a task that runs a [subgraph](super::GraphBuilder::subgraph) node:
    /// the config of the subgraph's checkpoints, its thread and namespace
    /// `<node>:<task id>` (after the enclosing namespace and a `|`), no
    /// checkpoint id. Pass it to [`get_state`](CompiledGraph::get_state) or
    /// [`update_state`](CompiledGraph::update_state) to read or edit the
    /// subgraph's state (LangGraph's `PregelTask.state` as `get_state` shows
    /// it by default).
    pub subgraph: Option<CheckpointConfig>,
    /// The subgraph's state, for a subgraph task of a snapshot read with
    /// [`get_state_with_subgraphs`](CompiledGraph::get_state_with_subgraphs)
    /// (LangGraph's `PregelTask.state` with `subgraphs=True`); `None`
    /// otherwise.
    pub state: Option<Box<super::StateSnapshot>>,
}

/// The answers task `id` consumed in earlier runs (its `__resume__` write).
pub(crate) fn task_resume(pending: &[(String, String, Value)], id: &str) -> Vec<Value> {
    match pending.iter().find(|(t, c, _)| t == id && c == RESUME).map(|(_, _, v)| v) {
        Some(Value::Array(items)) => items.clone(),
        Some(one) => vec![one.clone()],
        None => Vec::new(),
    }
}

/// LangGraph's breakpoint rule: some channel changed since the last
/// interrupt (`versions_seen["__interrupt__"]`) and a task runs one of
/// `nodes` (`"*"`: any).
pub(crate) fn should_interrupt(cp: &CpState, nodes: &[String], tasks: &[Task]) -> bool {
    let all = nodes.iter().any(|n| n == "*");
    // `"*"` skips __start__, which LangGraph tags hidden.
    if nodes.is_empty() || !tasks.iter().any(|t| (all && t.name != super::START) || nodes.contains(&t.name)) {
        return false;
    }
    let seen = cp.seen.get(INTERRUPT);
    cp.versions.iter().any(|(chan, v)| seen.and_then(|s| s.get(chan)) < Some(v))
}

/// How [`CompiledGraph::commit`] saves a checkpoint.
pub(crate) struct Save<'a> {
    /// An id to store it under (exit mode: the id its tasks hashed).
    pub(crate) id: Option<&'a str>,
    pub(crate) source: &'a str,
    pub(crate) step: i64,
    /// `None`: no `updated_channels` stored.
    pub(crate) updated: Option<&'a BTreeSet<String>>,
    /// The parent may be an older checkpoint than the thread's head.
    pub(crate) fork: bool,
    /// Metadata `parents`: namespace -> checkpoint id of the enclosing runs.
    pub(crate) parents: &'a Map<String, Value>,
    /// A task's writes to the parent, stored in the checkpoint's
    /// transaction (`Step::parent_writes`): task id, task path, writes.
    pub(crate) writes: Option<HeldWrites>,
}

/// Where a stream with subgraphs reports: the namespace of the run an
/// event comes from (`""`: the graph itself), the event.
pub(crate) type TaggedSink<'a> = dyn Fn(&str, StreamEvent) + Sync + 'a;

/// A task's writes held back: task id, task path, writes.
pub(crate) type HeldWrites = (String, String, Vec<(String, Value)>);

/// Where a run happens: its namespace, its metadata `parents`, whether
/// its parent is resuming.
pub(crate) struct Ctx<'s> {
    pub(crate) ns: String,
    pub(crate) parents: Map<String, Value>,
    pub(crate) resuming: bool,
    pub(crate) durability: Durability,
    /// Where a streaming run reports its supersteps (the top-level run,
    /// and a subgraph's run when `sub_sink` is set).
    pub(crate) sink: Option<&'s (dyn Fn(StreamEvent) + Sync)>,
    /// Where the runs of subgraphs report theirs, with their namespace
    /// ([`CompiledGraph::stream_subgraphs`]; `None`: subgraphs report
    /// nothing).
    pub(crate) sub_sink: Option<&'s TaggedSink<'s>>,
    /// Answers by interrupt id for this run (and its subgraphs): a task
    /// takes the one for the interrupt it would raise next.
    pub(crate) resume_map: Option<&'s BTreeMap<String, Value>>,
    /// The most supersteps this run may take: its graph's own limit, or a
    /// subgraph's parent's.
    pub(crate) recursion_limit: i64,
}

/// What a run ends with.
pub(crate) struct Outcome {
    /// The state keys with a value, shared with the channels kept for the
    /// thread's next run.
    pub(crate) values: State,
    pub(crate) interrupts: Vec<Value>,
    /// The run stopped before the graph's end: at a breakpoint, or paused
    /// by interrupts (its own tasks' or a subgraph's).
    pub(crate) paused: bool,
}

/// What a run starts from.
pub(crate) enum Input {
    Value(Value),
    Nothing,
    Resume(Value),
    /// Answers by interrupt id (checked against the pending ones).
    ResumeMap(BTreeMap<String, Value>),
    /// A [`Command`]'s null-task writes (`goto` then `update`), and its
    /// resume answer.
    Command(Vec<(String, Value)>, Option<Value>),
}

/// A thread's state loaded from its latest checkpoint.
pub(crate) struct Loaded {
    pub(crate) tuple: Option<CheckpointTuple>,
    pub(crate) cp: CpState,
    pub(crate) channels: Channels,
    pub(crate) step: i64,
    pub(crate) pending: Vec<(String, String, Value)>,
}

impl CompiledGraph {
    pub(crate) fn new(graph: Arc<Compiled>, saver: Checkpointer) -> CompiledGraph {
        CompiledGraph { graph, saver, durability: Durability::Sync, live: Live::default() }
    }

    /// The same graph, persisting with `durability` (default
    /// [`Durability::Sync`]).
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> CompiledGraph {
        self.durability = durability;
        self
    }

    /// The checkpointer the graph persists to.
    pub fn checkpointer(&self) -> &Checkpointer {
        &self.saver
    }

    /// Runs the graph on `config`'s thread until no node is triggered (or a
    /// breakpoint or [`interrupt()`](super::interrupt()) pauses it), and
    /// returns the state (every state key with a value; a pause by
    /// `interrupt()` adds an `"__interrupt__"` list, read it with
    /// [`Interrupt::from_output`](super::Interrupt::from_output)).
    ///
    /// The tasks of a superstep run concurrently, one thread each when
    /// there are several; their writes are applied in LangGraph's task
    /// order, so the checkpoints do not depend on which finished first.
    ///
    /// `Some(input)` (an object of state keys) starts a new run after the
    /// thread's latest checkpoint; `None` resumes the thread: tasks whose
    /// writes the latest checkpoint already holds are not run again. With
    /// `config.checkpoint_id` (and `None`), the run replays from that
    /// checkpoint as LangGraph time-travels: its tasks run again, after a
    /// `"fork"` copy of it unless it is the head made by
    /// [`update_state`](Self::update_state). With `config.checkpoint_id` and
    /// `Some(input)`, the input is applied at that checkpoint, as LangGraph
    /// does: the tasks it had next are dropped, and the input checkpoint's
    /// parent is that checkpoint (a fork, history kept, unless it is the
    /// head).
    ///
    /// # Errors
    /// - [`Error::Node`] if a node (or its router) fails; its `__error__`
    ///   write and its siblings' writes are stored, so `invoke(None, ..)`
    ///   resumes.
    /// - [`Error::EmptyInput`] for `None` on a thread with no checkpoint.
    /// - [`Error::InvalidUpdate`] if the input is not an object or a channel
    ///   rejects a superstep's writes (two writes to a last-value key).
    /// - [`Error::Recursion`] after the graph's recursion limit of supersteps.
    /// - [`Error::InvalidArgument`] if `config` names a namespace (a
    ///   subgraph runs only inside its parent's run), or the thread's
    ///   checkpoint is at a step too close to `i64::MAX` for the recursion
    ///   limit, or has an id no new UUIDv6 sorts after.
    /// - [`Error::NotFound`] if `config.checkpoint_id` does not exist.
    /// - the checkpointer's errors ([`Error::Conflict`] if another writer
    ///   continued the thread meanwhile).
    pub fn invoke(&self, input: Option<Value>, config: &CheckpointConfig) -> Result<Value> {
        self.run(input.map_or(Input::Nothing, Input::Value), config)
    }

    /// [`invoke`](Self::invoke), returning the state shared instead of
    /// copied: its values are the run's own, so this costs the same however
    /// long the thread's history (`invoke` copies every value into the JSON
    /// it returns). Drop the state before the thread's next run: a value
    /// still held then is copied once when that run changes it.
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke).
    pub fn invoke_state(&self, input: Option<Value>, config: &CheckpointConfig) -> Result<State> {
        self.run_shared(input.map_or(Input::Nothing, Input::Value), config)
    }

    /// Resumes a thread paused by [`interrupt()`](super::interrupt()) with
    /// `answer` (LangGraph's `invoke(Command(resume=answer))`): the
    /// interrupted node runs again and its `interrupt()` call returns
    /// `answer`.
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke); [`Error::EmptyInput`] if the thread has
    /// no checkpoint; [`Error::InvalidArgument`] if `config` names a
    /// checkpoint id (resume the thread's head).
    pub fn resume(&self, answer: Value, config: &CheckpointConfig) -> Result<Value> {
        self.run(Input::Resume(answer), config)
    }

    /// Resumes a thread paused by several interrupts, answering each by its
    /// id (LangGraph's `invoke(Command(resume={id: answer, ..}))`): the
    /// tasks whose interrupt got an answer run again and their
    /// `interrupt()` call returns it; the others stop at their interrupt
    /// again. The ids are [`Interrupt::id`](super::Interrupt) of the
    /// interrupts the paused run returned (or `get_state` shows). Answers
    /// are not stored: what a task consumed is, with its writes.
    ///
    /// # Errors
    /// As [`resume`](Self::resume); [`Error::InvalidArgument`] if `answers`
    /// is empty or names an interrupt that is not pending on the thread's
    /// head (LangGraph ignores such ids unless its strict resume is on).
    pub fn resume_by_id<K: Into<String>>(
        &self,
        answers: impl IntoIterator<Item = (K, Value)>,
        config: &CheckpointConfig,
    ) -> Result<Value> {
        let answers = answers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        self.run(Input::ResumeMap(answers), config)
    }

    /// Goes on from the head of `config`'s thread with `command`'s
    /// `update`, `goto` and `resume` (LangGraph's
    /// `invoke(Command(update=.., goto=.., resume=..))`): they are stored
    /// as pending writes of the null task on the head and applied before
    /// the next superstep, which runs the head's pending tasks and the
    /// nodes and Sends of `goto`. See [`Command`].
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke); [`Error::EmptyInput`] if `command` is
    /// empty or the thread has no checkpoint (LangGraph takes the Command
    /// as the graph input then);
    /// [`Error::InvalidArgument`] if `config` names a checkpoint id, if a
    /// `goto` names no node of the graph (or [`END`](super::END)) or a
    /// Send's argument is not an object.
    pub fn invoke_command(&self, command: Command, config: &CheckpointConfig) -> Result<Value> {
        let input = self.command_input(command, config)?;
        self.run(input, config)
    }

    /// The null-task writes of `command`, in LangGraph's order: the gotos,
    /// then the update.
    pub(crate) fn command_input(&self, command: Command, config: &CheckpointConfig) -> Result<Input> {
        if config.checkpoint_id.is_some() {
            return Err(Error::InvalidArgument(
                "a Command at a checkpoint id is not supported yet: send it to the thread's head".into(),
            ));
        }
        if command.update.is_empty() && command.goto.is_empty() && command.resume.is_none() {
            return Err(Error::EmptyInput);
        }
        let runnable = |n: &str| self.graph.node(n).is_some_and(|n| n.func.is_some());
        let mut writes = Vec::with_capacity(command.goto.len() + command.update.len());
        for goto in command.goto {
            writes.push(match goto {
                Goto::Node(n) if runnable(&n) => (format!("branch:to:{n}"), Value::String(START.into())),
                Goto::Node(n) => return Err(Error::InvalidArgument(format!("goto an unknown node {n:?}"))),
                Goto::Send(s) if !s.arg.is_object() => {
                    return Err(Error::InvalidArgument(format!(
                        "Send to {:?} needs an object argument, got {}",
                        s.node, s.arg
                    )))
                }
                Goto::Send(s) if runnable(&s.node) => (TASKS.to_string(), send_value(&s.node, &s.arg)),
                Goto::Send(s) => {
                    return Err(Error::InvalidArgument(format!("Send to unknown node {:?}", s.node)))
                }
            });
        }
        writes.extend(command.update);
        Ok(Input::Command(writes, command.resume))
    }

    /// Fails unless every id of `answers` is an interrupt pending on the
    /// head of `config`'s thread (and there is at least one).
    fn check_pending(&self, answers: &BTreeMap<String, Value>, config: &CheckpointConfig) -> Result<()> {
        let head = CheckpointConfig::thread(&config.thread_id);
        let pending: BTreeSet<String> = self
            .get_state(&head)?
            .tasks
            .iter()
            .flat_map(|t| &t.interrupts)
            .filter_map(super::Interrupt::from_stored)
            .map(|i| i.id)
            .collect();
        let listed = || pending.iter().cloned().collect::<Vec<_>>().join(", ");
        if answers.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "resume_by_id needs at least one answer (pending interrupts: [{}])",
                listed()
            )));
        }
        match answers.keys().find(|id| !pending.contains(*id)) {
            Some(id) => Err(Error::InvalidArgument(format!(
                "interrupt {id:?} is not pending on thread {:?} (pending: [{}])",
                config.thread_id,
                listed()
            ))),
            None => Ok(()),
        }
    }

    fn run(&self, input: Input, config: &CheckpointConfig) -> Result<Value> {
        self.run_shared(input, config).map(|s| Value::Object(s.to_map()))
    }

    /// [`invoke_state`](Self::invoke_state) from async code: the run goes on
    /// tokio's blocking pool (SQLite and sync nodes never block a runtime
    /// worker) and [async nodes](super::GraphBuilder::async_node) run on the
    /// runtime.
    ///
    /// # Errors
    /// As [`invoke`](Self::invoke).
    #[cfg(feature = "tokio")]
    pub async fn ainvoke(&self, input: Option<Value>, config: CheckpointConfig) -> Result<State> {
        let graph = self.clone();
        crate::nonblocking::off_thread(move || graph.invoke_state(input, &config)).await
    }

    /// [`resume`](Self::resume) from async code, as
    /// [`ainvoke`](Self::ainvoke) runs.
    ///
    /// # Errors
    /// As [`resume`](Self::resume).
    #[cfg(feature = "tokio")]
    pub async fn aresume(&self, answer: Value, config: CheckpointConfig) -> Result<State> {
        let graph = self.clone();
        crate::nonblocking::off_thread(move || graph.run_shared(Input::Resume(answer), &config)).await
    }

    /// [`resume_by_id`](Self::resume_by_id) from async code, as
    /// [`ainvoke`](Self::ainvoke) runs.
    ///
    /// # Errors
    /// As [`resume_by_id`](Self::resume_by_id).
    #[cfg(feature = "tokio")]
    pub async fn aresume_by_id<K: Into<String>>(
        &self,
        answers: impl IntoIterator<Item = (K, Value)>,
        config: CheckpointConfig,
    ) -> Result<State> {
        let graph = self.clone();
        let answers = answers.into_iter().map(|(k, v)| (k.into(), v)).collect();
        crate::nonblocking::off_thread(move || graph.run_shared(Input::ResumeMap(answers), &config)).await
    }

    fn run_shared(&self, input: Input, config: &CheckpointConfig) -> Result<State> {
        self.run_with(input, config, None, None)
    }

    pub(crate) fn run_with(
        &self,
        input: Input,
        config: &CheckpointConfig,
        sink: Option<&(dyn Fn(StreamEvent) + Sync)>,
        sub_sink: Option<&TaggedSink<'_>>,
    ) -> Result<State> {
        if !config.checkpoint_ns.is_empty() {
            return Err(Error::InvalidArgument(
                "invoke in a namespace (a subgraph's) is not supported yet".into(),
            ));
        }
        if config.checkpoint_id.is_some()
            && matches!(input, Input::Resume(_) | Input::ResumeMap(_) | Input::Command(..))
        {
            return Err(Error::InvalidArgument(
                "resume at a checkpoint id is not supported yet: resume the thread's head".into(),
            ));
        }
        // Answers by id are not stored (as in LangGraph): the run continues
        // from the head and each interrupted task takes its own.
        let (input, resume_map) = match input {
            Input::ResumeMap(answers) => {
                self.check_pending(&answers, config)?;
                (Input::Nothing, Some(answers))
            }
            other => (other, None),
        };
        let ctx = Ctx {
            ns: String::new(),
            parents: Map::new(),
            resuming: false,
            durability: self.durability,
            sink,
            sub_sink,
            resume_map: resume_map.as_ref(),
            recursion_limit: self.graph.recursion_limit,
        };
        let out = self.run_in(input, config, &ctx, &mut None);
        // Async durability: the run queued its writes behind it (on a
        // write-behind Db); like LangGraph, invoke returns once they are
        // committed, whether the run succeeded or not.
        if self.durability == Durability::Async {
            let flushed = self.saver.db().flush_thread(&config.thread_id);
            if out.is_ok() {
                flushed?;
            }
        }
        let out = out?;
        let mut values = out.values;
        if !out.interrupts.is_empty() {
            values.push(INTERRUPT, Arc::new(Value::Array(out.interrupts)));
        }
        Ok(values)
    }

    /// The tasks the next superstep of `config`'s thread would run (from its
    /// latest checkpoint, or from `config.checkpoint_id`), with their ids.
    ///
    /// # Errors
    /// [`Error::NotFound`] if `config.checkpoint_id` does not exist; the
    /// checkpointer's errors.
    pub fn next_tasks(&self, config: &CheckpointConfig) -> Result<Vec<PendingTask>> {
        let graph = self.for_namespace(&config.checkpoint_ns)?;
        let loaded = graph.load(config)?;
        if config.checkpoint_id.is_some() && loaded.tuple.is_none() {
            return Err(Error::NotFound(format!("checkpoint {:?}", config.checkpoint_id)));
        }
        let ns = config.checkpoint_ns.as_str();
        let tasks = prepare_next_tasks(&graph.graph, &loaded.cp, &loaded.channels, loaded.step, ns, None)?;
        let keys = &graph.graph.state_keys;
        Ok(tasks
            .into_iter()
            .map(|t| {
                // A subgraph task's checkpoints live in namespace
                // `[<ns>|]<node>:<task id>`.
                let subgraph = graph.graph.node(&t.name).and_then(|n| n.subgraph()).map(|_| {
                    let own = format!("{}:{}", t.name, t.id);
                    let sub_ns = if ns.is_empty() { own } else { format!("{ns}|{own}") };
                    CheckpointConfig::thread(&config.thread_id).ns(sub_ns)
                });
                let mut task = PendingTask {
                    subgraph,
                    state: None,
                    path: t.path.as_str(),
                    id: t.id,
                    name: t.name,
                    error: None,
                    interrupts: Vec::new(),
                    result: None,
                };
                let mut result = Map::new();
                // LangGraph's rule: a task finished iff it stored an output
                // (a write other than a control write); only then has it a
                // result.
                let mut finished = false;
                for (_, chan, value) in loaded.pending.iter().filter(|(id, _, _)| *id == task.id) {
                    finished |= !is_control(chan);
                    match (chan.as_str(), value) {
                        (ERROR, Value::String(e)) => task.error = Some(e.clone()),
                        (ERROR, other) => task.error = Some(other.to_string()),
                        (INTERRUPT, Value::Array(items)) => task.interrupts.extend(items.iter().cloned()),
                        (INTERRUPT, other) => task.interrupts.push(other.clone()),
                        (chan, value) if keys.iter().any(|k| k == chan) => {
                            fold_write(&mut result, chan, value)
                        }
                        _ => {}
                    }
                }
                task.result = finished.then_some(Value::Object(result));
                task
            })
            .collect())
    }

    /// The (sub)graph that runs in namespace `ns` (`""`: this one;
    /// `sub:<task id>|inner:<task id>`: nested subgraphs by node name; a
    /// numeric segment, `sub:<task id>|1`, is a subgraph's further call in
    /// its task, a retry's).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if a segment names no subgraph node.
    pub(crate) fn for_namespace(&self, ns: &str) -> Result<CompiledGraph> {
        let mut graph = self.graph.clone();
        if !ns.is_empty() {
            for segment in ns.split('|').filter(|s| s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit())) {
                let name = segment.split(':').next().unwrap_or_default();
                let child = graph.node(name).and_then(|n| n.subgraph()).cloned();
                graph = child.ok_or_else(|| {
                    Error::InvalidArgument(format!("namespace {ns:?}: {name:?} is not a subgraph node"))
                })?;
            }
        }
        Ok(CompiledGraph {
            graph,
            saver: self.saver.clone(),
            durability: self.durability,
            live: Live::default(),
        })
    }

    /// The thread's checkpoint (latest, or `config.checkpoint_id`), its
    /// channels restored.
    pub(crate) fn load(&self, config: &CheckpointConfig) -> Result<Loaded> {
        self.load_from(config, false)
    }

    /// [`load`](Self::load), starting from the channels a run on the thread
    /// ended with if `reuse` and they are the loaded checkpoint's.
    pub(crate) fn load_from(&self, config: &CheckpointConfig, reuse: bool) -> Result<Loaded> {
        // The head the last run stored, if the file has not changed since.
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        let head = match reuse && config.checkpoint_id.is_none() && self.live.has_head(thread, ns) {
            true => self.live.take_head(thread, ns, self.saver.generation()?),
            false => None,
        };
        let (tuple, cached) = match head {
            Some((t, channels)) => (Some(t), Some(channels)),
            None => {
                let tuple = self.saver.get_tuple(config)?;
                let cached = match &tuple {
                    Some(t) if reuse => {
                        self.live.take(&config.thread_id, &config.checkpoint_ns, &t.checkpoint.id)
                    }
                    _ => None,
                };
                (tuple, cached)
            }
        };
        let mut cp = CpState::default();
        let channels = match cached {
            Some(c)
                if c.len() == self.graph.channels.len()
                    && self.graph.channels.iter().all(|(k, _)| c.contains_key(k)) =>
            {
                c
            }
            _ => {
                let mut channels = Channels::new();
                let stored = tuple.as_ref().map(|t| &t.checkpoint.channel_values);
                for (name, spec) in &self.graph.channels {
                    let value = stored.and_then(|s| s.get(name)).map(|v| v.to_value());
                    channels
                        .insert(name.clone(), Channel::from_checkpoint(name, spec.clone(), value.as_ref())?);
                }
                channels
            }
        };
        let mut step = -1;
        let mut pending = Vec::new();
        if let Some(t) = &tuple {
            cp.id.clone_from(&t.checkpoint.id);
            cp.versions.clone_from(&t.checkpoint.channel_versions);
            cp.seen.clone_from(&t.checkpoint.versions_seen);
            step = t.metadata.step().map_or(-1, |s| s.saturating_add(1));
            pending = t
                .pending_writes
                .iter()
                .map(|w| (w.task_id.clone(), w.channel.clone(), w.value.clone()))
                .collect();
        }
        Ok(Loaded { tuple, cp, channels, step, pending })
    }

    /// Persists `cp` after `parent` through the step API: every channel
    /// whose version moved since `parent` (the state as last stored) gets
    /// its new value (or is cleared) at exactly that version; changed `versions_seen` entries,
    /// LangGraph's `updated_channels` and metadata are given explicitly.
    pub(crate) fn commit(
        &self,
        parent: Option<CheckpointTuple>,
        thread: &CheckpointConfig,
        cp: &CpState,
        channels: &Channels,
        save: &Save<'_>,
    ) -> Result<(CheckpointTuple, CacheTag)> {
        // The step takes the parent over: its state moves into the new
        // checkpoint (which replaces it in the run) instead of being copied.
        let mut s = match parent {
            Some(p) if save.fork => self.saver.step_from(p).fork(),
            Some(p) => self.saver.step_from(p),
            None => self.saver.start(thread),
        };
        if let Some((task, path, writes)) = &save.writes {
            s = s.parent_writes(task.as_str(), path.as_str(), writes);
        }
        for (chan, version) in &cp.versions {
            let stored = s.parent().map(|p| &p.checkpoint);
            if stored.and_then(|c| c.channel_versions.get(chan)) == Some(version) {
                continue;
            }
            let old_len =
                stored.and_then(|c| c.channel_values.get(chan)).and_then(|o| o.as_list()).map(|l| l.len());
            let Some(channel) = channels.get(chan) else {
                s = s.clear(chan.clone());
                s = s.version(chan.clone(), version.clone());
                continue;
            };
            // A list that extends the stored one (an append reducer,
            // add_messages appending, an accumulating topic) stores only its
            // new items: the channel knows how many of its items the parent
            // holds, nothing is compared.
            let tail = match (channel.list_ref(), channel.stored_len(), old_len) {
                (Some(new), Some(n), Some(old)) if n > 0 && old == n && n <= new.len() => Some(&new[n..]),
                _ => None,
            };
            s = match tail {
                Some(tail) => s.append(chan.clone(), tail.iter().cloned()),
                None => match channel.checkpoint() {
                    Some(v) => s.set(chan.clone(), v),
                    None => s.clear(chan.clone()),
                },
            };
            s = s.version(chan.clone(), version.clone());
        }
        if let Some(id) = save.id {
            s = s.id(id);
        }
        for (node, seen) in &cp.seen {
            if s.parent().and_then(|p| p.checkpoint.versions_seen.get(node)) != Some(seen) {
                s = s.seen(node.clone(), seen.clone());
            }
        }
        s = match save.updated {
            Some(updated) => s.updated_channels(updated.iter().cloned()),
            None => s.without_updated_channels(),
        };
        s.metadata(
            Metadata::new()
                .with("source", save.source)
                .with("step", save.step)
                .with("parents", Value::Object(save.parents.clone())),
        )
        .commit_tagged()
    }
}

/// Adds a task's write to `channel` to its result as LangGraph's
/// `map_task_result_writes` does: a second write to one channel turns its
/// entry into `{"$writes": [first, second, ...]}` (a null first write is
/// replaced, as Python's `None` is).
fn fold_write(result: &mut Map<String, Value>, channel: &str, value: &Value) {
    let Some(existing) = result.get_mut(channel).filter(|v| !v.is_null()) else {
        result.insert(channel.to_string(), value.clone());
        return;
    };
    if let Some(Value::Array(writes)) = existing.as_object_mut().and_then(|o| o.get_mut("$writes")) {
        writes.push(value.clone());
        return;
    }
    let first = std::mem::take(existing);
    *existing = json!({"$writes": [first, value.clone()]});
}
