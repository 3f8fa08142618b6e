//! The superstep loop of [`CompiledGraph::invoke`]: load, apply the input
//! (or resume), then prepare, run and persist supersteps until no task is
//! left, as LangGraph's `SyncPregelLoop` does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{mpsc, Arc, Mutex};

use serde_json::{Map, Value};

use super::algo::{
    apply_writes, finished_writes, null_writes, prepare_next_tasks, read_shared, Channels, CpState, Task,
    TaskInput, TaskWrites,
};
use super::graph::Compiled;
use super::interrupt::{with_scratchpad, Scratchpad};
use super::node::{NodeError, Update};
use super::run::{
    should_interrupt, task_resume, CompiledGraph, Ctx, HeldWrites, Input, Loaded, Outcome, Save,
};
use super::stream::StreamEvent;
use super::task_id::interrupt_id_after;
use super::{Durability, ERROR, INTERRUPT, NULL_TASK_ID, RESUME, START};
use crate::checkpoint::{uuid6_after, CheckpointConfig, CheckpointTuple};
use crate::db::CacheTag;
use crate::error::{Error, Result};

/// What running a task gives: its writes or its failure / pause, and its
/// scratchpad after the run.
type TaskResult = (std::result::Result<Vec<(String, Value)>, NodeError>, Scratchpad);

/// The `__resume__` write of a task that interrupted or failed: the answers
/// its `interrupt()` calls took (LangGraph keeps them with the interrupt or
/// the error, so a later run replays them); `None` if it took none.
fn answers(pad: &Scratchpad) -> Option<(String, Value)> {
    pad.used_resume.then(|| (RESUME.to_string(), Value::Array(pad.resume.clone())))
}

/// What every task of a superstep shares.
struct RunOne<'a> {
    ctx: &'a Ctx<'a>,
    cp_id: &'a str,
    thread_id: &'a str,
    resuming: bool,
    loaded: &'a [(String, String, Value)],
}

/// Where a run persists: the thread and namespace, the last checkpoint
/// stored, and with [`Durability::Exit`] what is held back until the run
/// ends.
struct Cursor<'a> {
    thread: CheckpointConfig,
    /// The last checkpoint stored: what the next one is diffed against.
    parent: Option<CheckpointTuple>,
    /// The file's generation right after `parent` was stored by this run,
    /// if known (see `Step::commit_tagged`).
    tag: CacheTag,
    exit: bool,
    /// Sync mode: each write is durable before the run goes on, also on a
    /// `Db` whose checkpoint writes are queued (write-behind).
    sync: bool,
    /// Exit mode: source, step and updated channels of the newest
    /// checkpoint, kept in memory only, and whether a fork came first.
    unsaved: Option<(String, i64, Option<BTreeSet<String>>, bool)>,
    /// Exit mode: the current superstep's task writes.
    held: Vec<HeldWrites>,
    /// Sync and async modes: the writes of the task that finished last,
    /// for `parent` (not stored yet). They go with the next checkpoint, in
    /// its transaction; they are stored alone when another task finishes
    /// or the run stops first.
    last: Option<HeldWrites>,
    parents: &'a Map<String, Value>,
    /// The checkpoint whose channels the run changed without storing them
    /// (the null task's writes applied): not kept for the next run.
    unkept: Option<String>,
}

impl CompiledGraph {
    /// Runs the graph in `ctx.ns` (a subgraph runs in its own namespace,
    /// resuming there when its parent resumes). `outer_resume` is the
    /// parent's unconsumed resume answer.
    pub(crate) fn run_in(
        &self,
        input: Input,
        config: &CheckpointConfig,
        ctx: &Ctx<'_>,
        outer_resume: &mut Option<Value>,
    ) -> Result<Outcome> {
        let ns = ctx.ns.as_str();
        let thread = CheckpointConfig::thread(&config.thread_id).ns(ns);
        let at_config =
            config.checkpoint_id.as_ref().map_or_else(|| thread.clone(), |id| thread.clone().at(id));
        let Loaded { tuple, mut cp, mut channels, mut step, mut pending } =
            self.load_from(&at_config, true)?;
        let input = match input {
            Input::Value(_) if ctx.resuming && !cp.versions.is_empty() => Input::Nothing,
            other => other,
        };
        // Time travel: LangGraph replays from an addressed checkpoint,
        // re-running its tasks, and first saves a "fork" copy of it unless
        // it is the thread's head made by update_state / a fork. Input at
        // an addressed checkpoint is applied there: the input checkpoint's
        // parent is that checkpoint (a fork unless it is the head).
        let mut fork = false;
        let mut past = false;
        if config.checkpoint_id.is_some() {
            let Some(t) = &tuple else {
                return Err(Error::NotFound(format!("checkpoint {:?}", config.checkpoint_id)));
            };
            let head = self.saver.get_tuple(&thread)?.map(|h| h.checkpoint.id.clone());
            let is_head = head.as_deref() == Some(t.checkpoint.id.as_str());
            fork = !is_head || !matches!(t.metadata.source(), Some("update" | "fork"));
            past = !is_head;
            pending.clear();
        }
        let mut cur = Cursor {
            thread: thread.clone(),
            parent: tuple,
            tag: CacheTag::default(),
            exit: ctx.durability == Durability::Exit,
            sync: ctx.durability == Durability::Sync,
            unsaved: None,
            held: Vec::new(),
            last: None,
            parents: &ctx.parents,
            unkept: None,
        };
        // Room for every step up to one past the limit, as far as steps can
        // count (a limit of i64::MAX never stops a run); a stored step at
        // the end of the range has none.
        if step >= i64::MAX - 1 {
            return Err(Error::InvalidArgument(format!(
                "the thread's checkpoint is at step {step}: no room for more steps"
            )));
        }
        let stop = step.saturating_add(ctx.recursion_limit).saturating_add(1).min(i64::MAX - 1);
        let mut updated: Option<BTreeSet<String>> = None;
        if let Input::Command(writes, resume) = &input {
            if cp.versions.is_empty() {
                return Err(Error::EmptyInput);
            }
            // LangGraph stores the null task's writes again with the new
            // ones after them, its resume last; its earlier special writes
            // (a resume) drop out of the writes this run reads.
            let special = |c: &str| c == RESUME || c == ERROR || c == INTERRUPT;
            pending.retain(|(t, c, _)| !(t == NULL_TASK_ID && special(c)));
            let mut saved: Vec<(String, Value)> = pending
                .iter()
                .filter(|(t, _, _)| t == NULL_TASK_ID)
                .map(|(_, c, v)| (c.clone(), v.clone()))
                .collect();
            saved.extend(writes.iter().cloned());
            pending.extend(writes.iter().map(|(c, v)| (NULL_TASK_ID.to_string(), c.clone(), v.clone())));
            if let Some(answer) = resume {
                saved.push((RESUME.to_string(), answer.clone()));
                pending.push((NULL_TASK_ID.into(), RESUME.into(), answer.clone()));
            }
            self.write(&mut cur, &cp.id, NULL_TASK_ID, "", saved, false)?;
        }
        // The null task's writes (a Command's update and goto, here or
        // from an earlier run on this checkpoint) are applied first, as
        // LangGraph's input task: new versions, nothing seen.
        let null_writes = null_writes(&pending);
        if !null_writes.is_empty() {
            let mut tw = [TaskWrites::input(&null_writes)];
            apply_writes(&mut cp, &mut channels, &mut tw, true)?;
            cur.unkept = Some(cp.id.clone());
        }
        if let Input::Resume(answer) = &input {
            if cp.versions.is_empty() {
                return Err(Error::EmptyInput);
            }
            self.write(
                &mut cur,
                &cp.id,
                NULL_TASK_ID,
                "",
                vec![(RESUME.to_string(), answer.clone())],
                false,
            )?;
            pending.retain(|(t, c, _)| !(t == NULL_TASK_ID && c == RESUME));
            pending.push((NULL_TASK_ID.into(), RESUME.into(), answer.clone()));
        }
        let mut null_resume =
            pending.iter().find(|(t, c, _)| t == NULL_TASK_ID && c == RESUME).map(|(_, _, v)| v.clone());
        if null_resume.is_none() {
            null_resume = outer_resume.take();
        }
        let mut resuming =
            matches!(input, Input::Nothing | Input::Resume(_) | Input::ResumeMap(_) | Input::Command(..));
        let mut pending = Some(pending);
        match input {
            Input::Nothing if cp.versions.is_empty() => return Err(Error::EmptyInput),
            Input::Nothing | Input::Resume(_) | Input::ResumeMap(_) | Input::Command(..) => {
                let all: BTreeMap<_, _> = cp
                    .versions
                    .iter()
                    .filter(|(k, _)| channels.contains_key(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                cp.seen.insert(INTERRUPT.into(), all);
                if fork {
                    self.save_checkpoint(&mut cur, &mut cp, &mut channels, ("fork", step), None, true)?;
                    step += 1;
                }
                // LangGraph streams the state a resumed run starts from
                // (also when nothing is left to run).
                if let Some(sink) = ctx.sink {
                    sink(StreamEvent::Values(read_shared(&channels, &self.graph.state_keys)));
                }
            }
            Input::Value(input) => {
                if !input.is_object() {
                    return Err(Error::InvalidUpdate(super::expected_dict(&input)));
                }
                let discard = prepare_next_tasks(&self.graph, &cp, &channels, step, ns, None)?;
                let input_writes = [(START.to_string(), input)];
                let mut tw: Vec<TaskWrites<'_>> = discard.iter().map(TaskWrites::from).collect();
                tw.push(TaskWrites::input(&input_writes));
                let up = apply_writes(&mut cp, &mut channels, &mut tw, true)?;
                self.save_checkpoint(&mut cur, &mut cp, &mut channels, ("input", step), Some(&up), past)?;
                updated = Some(up);
                pending = None;
                step += 1;
            }
        }
        loop {
            if step > stop {
                self.finish(&mut cur, &cp, &mut channels)?;
                return Err(Error::Recursion { limit: ctx.recursion_limit });
            }
            let mut tasks = prepare_next_tasks(&self.graph, &cp, &channels, step, ns, updated.as_ref())?;
            if tasks.is_empty() {
                break;
            }
            let loaded = pending.take().unwrap_or_default();
            let done = finished_writes(&loaded);
            for task in &mut tasks {
                if let Some(writes) = done.get(&task.id) {
                    task.writes.clone_from(writes);
                }
            }
            if should_interrupt(&cp, &self.graph.interrupt_before, &tasks) {
                self.finish(&mut cur, &cp, &mut channels)?;
                if let Some(sink) = ctx.sink {
                    sink(StreamEvent::Interrupt { interrupts: Vec::new() });
                }
                drop(tasks);
                return Ok(self.end(&cur, &cp, channels, Vec::new(), true));
            }
            if let Some(sink) = ctx.sink {
                // Tasks that finished in an earlier run are not run again:
                // their stored updates first, as LangGraph reports them.
                for task in tasks.iter().filter(|t| t.name != START && done.contains_key(&t.id)) {
                    let update = self.state_update(&task.writes);
                    sink(StreamEvent::CachedUpdates { node: task.name.clone(), update });
                }
            }
            let mut failure: Option<(usize, NodeError)> = None;
            let mut interrupts: Vec<(usize, Vec<Value>)> = Vec::new();
            let mut outputs: Vec<Option<Vec<(String, Value)>>> = vec![None; tasks.len()];
            let mut fatal: Option<Error> = None;
            let runnable: Vec<usize> =
                (0..tasks.len()).filter(|&i| !done.contains_key(&tasks[i].id)).collect();
            let shared_resume = Arc::new(Mutex::new(null_resume.take()));
            let run = RunOne { ctx, cp_id: &cp.id, thread_id: &config.thread_id, resuming, loaded: &loaded };
            // What becomes of a finished task (`remaining`: how many are
            // still running): its writes are stored as soon as it finishes,
            // the last one's with the checkpoint that follows (`write`).
            let mut finished = |i: usize, outcome: Result<TaskResult>, remaining: usize| {
                let task = &tasks[i];
                let path = task.path.as_str();
                let (result, pad) = match outcome {
                    Ok(done) => done,
                    Err(e) => {
                        fatal.get_or_insert(e);
                        return;
                    }
                };
                let stored = match result {
                    Ok(mut writes) => {
                        if pad.used_resume {
                            // As LangGraph: each interrupt() call that got an
                            // answer wrote `__resume__` with the answers up to
                            // its own, ahead of the node's writes.
                            let resumes = (1..=pad.counter.min(pad.resume.len()))
                                .map(|n| (RESUME.to_string(), Value::Array(pad.resume[..n].to_vec())));
                            writes.splice(0..0, resumes);
                        }
                        outputs[i] = Some(writes.clone());
                        self.write(&mut cur, &cp.id, &task.id, &path, writes, remaining == 0)
                    }
                    // A subgraph stopped at its own breakpoint: the task
                    // is paused with nothing to store (LangGraph stores an
                    // `__interrupt__` write only for interrupts).
                    Err(e) if e.is_interrupt() && e.interrupts().is_empty() => {
                        interrupts.push((i, Vec::new()));
                        Ok(())
                    }
                    Err(e) if e.is_interrupt() => {
                        let values = e.interrupts().to_vec();
                        let mut writes = vec![(INTERRUPT.to_string(), Value::Array(values.clone()))];
                        writes.extend(answers(&pad));
                        interrupts.push((i, values));
                        self.write(&mut cur, &cp.id, &task.id, &path, writes, remaining == 0)
                    }
                    Err(mut e) => {
                        let mut writes: Vec<_> = answers(&pad).into_iter().collect();
                        writes.extend(e.take_writes());
                        writes.push((ERROR.to_string(), Value::String(e.repr())));
                        if failure.as_ref().is_none_or(|(j, _)| i < *j) {
                            failure = Some((i, e));
                        }
                        self.write(&mut cur, &cp.id, &task.id, &path, writes, remaining == 0)
                    }
                };
                if let Err(e) = stored {
                    fatal.get_or_insert(e);
                }
            };
            if let [only] = runnable[..] {
                // One task runs in this thread: no thread, no channel.
                finished(only, self.run_one(&run, &tasks[only], &channels, &shared_resume), 0);
            } else {
                // Several run concurrently, one thread each, as in LangGraph.
                std::thread::scope(|scope| {
                    let (tx, rx) = mpsc::channel();
                    for &i in &runnable {
                        let (tx, run, task, channels, shared) =
                            (tx.clone(), &run, &tasks[i], &channels, &shared_resume);
                        #[cfg(feature = "tokio")]
                        let runtime = tokio::runtime::Handle::try_current().ok();
                        scope.spawn(move || {
                            // Async nodes run on the runtime the run was
                            // started under.
                            #[cfg(feature = "tokio")]
                            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
                            let _ = tx.send((i, self.run_one(run, task, channels, shared)));
                        });
                    }
                    drop(tx);
                    let mut remaining = runnable.len();
                    for (i, outcome) in rx {
                        remaining -= 1;
                        finished(i, outcome, remaining);
                    }
                });
            }
            if let Some(e) = fatal {
                // What finished is kept (the error is the run's).
                let _ = self.store_last(&mut cur);
                return Err(e);
            }
            interrupts.sort_by_key(|(i, _)| *i);
            // What each task of the superstep did, for the stream (task
            // order): finished (its writes), interrupted, or neither.
            let report: Option<Vec<Reported>> = ctx.sink.map(|_| {
                let mut report: Vec<Reported> =
                    outputs.iter().map(|o| if o.is_some() { Reported::Ran } else { Reported::Not }).collect();
                for (i, values) in &interrupts {
                    report[*i] = Reported::Interrupted(values.clone());
                }
                report
            });
            for (task, writes) in tasks.iter_mut().zip(outputs) {
                if let Some(writes) = writes {
                    task.writes = writes;
                }
            }
            let failure = failure.map(|(i, e)| (tasks[i].name.clone(), tasks[i].id.clone(), e));
            let paused = !interrupts.is_empty();
            let interrupts: Vec<Value> = interrupts.into_iter().flat_map(|(_, v)| v).collect();
            null_resume = None;
            resuming = false;
            if let Some((node, task_id, error)) = failure {
                self.finish(&mut cur, &cp, &mut channels)?;
                // What finished before the failure is reported, then the
                // error (LangGraph streams each task's result as it comes).
                if let (Some(sink), Some(report)) = (ctx.sink, &report) {
                    self.report_tasks(sink, &tasks, report, &channels);
                }
                return Err(Error::Node { node, task_id, error: Box::new(error) });
            }
            if paused {
                self.finish(&mut cur, &cp, &mut channels)?;
                if let (Some(sink), Some(report)) = (ctx.sink, &report) {
                    self.report_tasks(sink, &tasks, report, &channels);
                }
                // LangGraph's output of a paused run shows the writes of the
                // superstep's finished tasks applied (to a copy here: they
                // are not stored, the next run applies them again); a stream
                // reports that state last if they changed a state key.
                let shown = if ns.is_empty() && tasks.iter().any(|t| !t.writes.is_empty()) {
                    let mut tw: Vec<TaskWrites<'_>> = tasks.iter().map(TaskWrites::from).collect();
                    let (mut shown_cp, mut shown) = (cp.clone(), channels.clone());
                    let up = apply_writes(&mut shown_cp, &mut shown, &mut tw, false)?;
                    let values = read_shared(&shown, &self.graph.state_keys);
                    if let Some(sink) = ctx.sink.filter(|_| self.touches_state(&up)) {
                        sink(StreamEvent::Values(values.clone()));
                    }
                    Some(values)
                } else {
                    None
                };
                drop(tasks);
                let mut out = self.end(&cur, &cp, channels, interrupts, true);
                if let Some(values) = shown {
                    out.values = values;
                }
                return Ok(out);
            }
            // The inputs share the channels' values: dropping them lets the
            // reducers fold into those values without copying them.
            for task in &mut tasks {
                task.input = TaskInput::Raw(Value::Null);
            }
            let mut tw: Vec<TaskWrites<'_>> = tasks.iter().map(TaskWrites::from).collect();
            let up = match apply_writes(&mut cp, &mut channels, &mut tw, true) {
                Ok(up) => up,
                Err(e) => {
                    // The tasks' writes stay pending (the error is the run's).
                    let _ = self.store_last(&mut cur);
                    return Err(e);
                }
            };
            self.save_checkpoint(&mut cur, &mut cp, &mut channels, ("loop", step), Some(&up), false)?;
            if let (Some(sink), Some(report)) = (ctx.sink, &report) {
                self.report_tasks(sink, &tasks, report, &channels);
                // The state, if the superstep changed a state key.
                if self.touches_state(&up) {
                    sink(StreamEvent::Values(read_shared(&channels, &self.graph.state_keys)));
                }
            }
            updated = Some(up);
            step += 1;
            if should_interrupt(&cp, &self.graph.interrupt_after, &tasks) {
                if let Some(sink) = ctx.sink {
                    sink(StreamEvent::Interrupt { interrupts: Vec::new() });
                }
                self.finish(&mut cur, &cp, &mut channels)?;
                return Ok(self.end(&cur, &cp, channels, Vec::new(), true));
            }
        }
        // In exit mode a subgraph that ran to its end stores nothing: its
        // parent's checkpoint holds the result (LangGraph persists a nested
        // graph's state on exit only after an error or an interrupt).
        if !cur.exit || ns.is_empty() {
            self.finish(&mut cur, &cp, &mut channels)?;
        }
        Ok(self.end(&cur, &cp, channels, Vec::new(), false))
    }

    /// Runs one task of a superstep (a node in its scratchpad, or a
    /// subgraph), on any thread.
    fn run_one(
        &self,
        run: &RunOne<'_>,
        task: &Task,
        channels: &Channels,
        shared_resume: &Arc<Mutex<Option<Value>>>,
    ) -> Result<TaskResult> {
        let ns = run.ctx.ns.as_str();
        let task_ns = if ns.is_empty() {
            format!("{}:{}", task.name, task.id)
        } else {
            format!("{ns}|{}:{}", task.name, task.id)
        };
        // The node's retry policy: a failed attempt whose error it retries
        // is dropped and the node runs again in this task, after a sleep
        // (LangGraph's run_with_retry; nothing is stored in between).
        let policy = self.graph.node(&task.name).and_then(|n| n.retry.as_ref());
        let mut failures = 0u32;
        let mut retry = |result: &std::result::Result<Vec<(String, Value)>, NodeError>| {
            let (Err(e), Some(p)) = (result, policy) else { return false };
            if !p.retries(e) {
                return false;
            }
            failures += 1;
            // The task's thread sleeps: it is never a tokio worker (an
            // async node's future is driven from it with block_on).
            p.backoff(failures).map(std::thread::sleep).is_some()
        };
        if let Some(child) = self.graph.node(&task.name).and_then(|n| n.subgraph()) {
            let mut parents = run.ctx.parents.clone();
            parents.insert(ns.to_string(), Value::String(run.cp_id.to_string()));
            let sub_sink = run.ctx.sub_sink;
            let mut resuming = run.resuming;
            let mut call = 0u32;
            loop {
                // A retry is the subgraph's next call in this task: LangGraph
                // runs it afresh in namespace `<node>:<task id>|<n>`.
                let child_ns = if call == 0 { task_ns.clone() } else { format!("{task_ns}|{call}") };
                // Streaming with subgraphs: the child's run reports its
                // events under its namespace.
                let tag = child_ns.clone();
                let tagged = sub_sink.map(|report| move |e: StreamEvent| report(&tag, e));
                let child_ctx = Ctx {
                    ns: child_ns,
                    parents: parents.clone(),
                    resuming,
                    durability: run.ctx.durability,
                    sink: tagged.as_ref().map(|f| f as &(dyn Fn(StreamEvent) + Sync)),
                    sub_sink,
                    resume_map: run.ctx.resume_map,
                    recursion_limit: if child.own_limit {
                        child.recursion_limit
                    } else {
                        run.ctx.recursion_limit
                    },
                };
                let mut outer = shared_resume.lock().unwrap_or_else(|p| p.into_inner()).take();
                let result = self.run_subgraph(child, task, &child_ctx, run.thread_id, channels, &mut outer);
                if let Some(unused) = outer {
                    *shared_resume.lock().unwrap_or_else(|p| p.into_inner()) = Some(unused);
                }
                let result = result?;
                if retry(&result) {
                    // (LangGraph passes it `resuming`: nothing to resume in
                    // the new namespace.)
                    resuming = true;
                    call += 1;
                    continue;
                }
                return Ok((result, Scratchpad::default()));
            }
        }
        let mut resume = task_resume(run.loaded, &task.id);
        if let Some(answers) = run.ctx.resume_map {
            // The answer to the interrupt the task raises next (or, as
            // LangGraph still accepts, to its first).
            let next = interrupt_id_after(&task_ns, resume.len());
            if let Some(v) = answers.get(&next).or_else(|| answers.get(&interrupt_id_after(&task_ns, 0))) {
                resume.push(v.clone());
            }
        }
        let mut pad = Scratchpad::new(task_ns, resume, shared_resume.clone());
        loop {
            // Each attempt counts its interrupt() calls from the first (the
            // answers the task has are kept) and writes only what it
            // answers itself (LangGraph clears a failed attempt's writes).
            pad.counter = 0;
            pad.used_resume = false;
            let (result, after) = with_scratchpad(pad, || self.run_task(task, channels));
            pad = after;
            if !retry(&result) {
                return Ok((result, pad));
            }
        }
    }

    /// Runs subgraph `child` as `task` (in namespace `ctx.ns`, on the
    /// parent's checkpointer), its input the task's state; its final state
    /// is the task's update, its interrupts the task's, its failure the
    /// task's.
    fn run_subgraph(
        &self,
        child: &Arc<Compiled>,
        task: &Task,
        ctx: &Ctx<'_>,
        thread_id: &str,
        channels: &Channels,
        null_resume: &mut Option<Value>,
    ) -> Result<std::result::Result<Vec<(String, Value)>, NodeError>> {
        let graph = CompiledGraph {
            graph: child.clone(),
            saver: self.saver.clone(),
            durability: ctx.durability,
            live: self.live.clone(),
        };
        let out = match graph.run_in(
            Input::Value(task.input.to_value()),
            &CheckpointConfig::thread(thread_id),
            ctx,
            null_resume,
        ) {
            Ok(out) => out,
            Err(Error::Node { error, .. }) => return Ok(Err(*error)),
            // The subgraph's exception fails the task as it is, as in
            // LangGraph (class and text).
            Err(Error::InvalidUpdate(message)) => {
                return Ok(Err(NodeError::with_kind("InvalidUpdateError", message)));
            }
            Err(Error::Recursion { limit }) => {
                return Ok(Err(NodeError::with_kind("GraphRecursionError", super::recursion_message(limit))));
            }
            Err(Error::EmptyInput) => {
                return Ok(Err(NodeError::with_kind("EmptyInputError", "Received no input for __start__")));
            }
            Err(e) => return Err(e),
        };
        // Paused by an interrupt, or at one of its own breakpoints: the
        // task is paused too, and the parent's resume goes on in the
        // subgraph from its checkpoint.
        if out.paused {
            return Ok(Err(NodeError::interrupted(out.interrupts)));
        }
        Ok(self.node_writes(task, Update::from(out.values.to_map()), channels))
    }

    /// Stores the checkpoint after a superstep (or keeps it in memory in
    /// exit mode, under a fresh id the tasks of the next superstep hash).
    fn save_checkpoint(
        &self,
        cur: &mut Cursor<'_>,
        cp: &mut CpState,
        channels: &mut Channels,
        (source, step): (&str, i64),
        updated: Option<&BTreeSet<String>>,
        fork: bool,
    ) -> Result<()> {
        if cur.exit {
            let after = Some(cp.id.as_str()).filter(|id| !id.is_empty());
            cp.id = uuid6_after(Some(step), after)?;
            let forked = fork || cur.unsaved.as_ref().is_some_and(|u| u.3);
            cur.unsaved = Some((source.to_string(), step, updated.cloned(), forked));
            cur.held.clear();
            return Ok(());
        }
        let writes = cur.last.take();
        let save = Save { source, step, updated, fork, parents: cur.parents, id: None, writes };
        // The commit takes the parent over (its state moves into the new
        // checkpoint); a failed one leaves its config for the task's writes.
        let parent_config = cur.parent.as_ref().map(|p| p.config.clone());
        let (tuple, tag) = match self.commit(cur.parent.take(), &cur.thread, cp, channels, &save) {
            Ok(committed) => committed,
            Err(e) => {
                // The task's writes were in the failed transaction: store
                // them alone (the error is the run's).
                let _ = self.store_writes(parent_config.as_ref(), save.writes, cur.sync);
                return Err(e);
            }
        };
        // Async (LangGraph's `durability="async"`): the commit thread writes
        // the checkpoint while the next superstep runs, with whatever else
        // queues within its short wait; the run's end writes what is still
        // queued.
        if cur.sync {
            self.saver.db().flush_thread(&cur.thread.thread_id)?;
        }
        mark_stored(channels);
        cp.id.clone_from(&tuple.checkpoint.id);
        cur.parent = Some(tuple);
        cur.tag = tag;
        Ok(())
    }

    /// The outcome of a run that ended at checkpoint `cp` (stored): the
    /// state, and the channels kept for the thread's next run.
    fn end(
        &self,
        cur: &Cursor<'_>,
        cp: &CpState,
        channels: Channels,
        interrupts: Vec<Value>,
        paused: bool,
    ) -> Outcome {
        let values = read_shared(&channels, &self.graph.state_keys);
        // Subgraph namespaces carry a task id: a later run does not reuse them.
        if cur.thread.checkpoint_ns.is_empty() && cur.unkept.as_deref() != Some(cp.id.as_str()) {
            let head = cur.parent.as_ref().filter(|p| p.checkpoint.id == cp.id).cloned();
            self.live.keep(&cur.thread.thread_id, "", &cp.id, channels, head.map(|h| (h, cur.tag.clone())));
        }
        Outcome { values, interrupts, paused }
    }

    /// Stores a task's writes for checkpoint `cp_id` (held back in exit
    /// mode). The writes of a superstep's `last` task to finish (no other
    /// is running) are held for the checkpoint that follows: one commit for
    /// both, and a crash loses both or neither, as if it came just before
    /// this call. Writes of a task that finishes while others run are
    /// stored at once (LangGraph's `sync`: a finished task is not rerun).
    fn write(
        &self,
        cur: &mut Cursor<'_>,
        cp_id: &str,
        task: &str,
        path: &str,
        writes: Vec<(String, Value)>,
        last: bool,
    ) -> Result<()> {
        if cur.exit {
            cur.held.push((task.to_string(), path.to_string(), writes));
            return Ok(());
        }
        self.store_last(cur)?;
        if last && cur.parent.as_ref().is_some_and(|p| p.checkpoint.id == cp_id) {
            cur.last = Some((task.to_string(), path.to_string(), writes));
            return Ok(());
        }
        self.saver.put_writes(&cur.thread.clone().at(cp_id), &writes, task, path)?;
        if cur.sync {
            self.saver.db().flush_thread(&cur.thread.thread_id)?;
        }
        Ok(())
    }

    /// Stores the writes of the task that finished last, if they are still
    /// held for the next checkpoint.
    fn store_last(&self, cur: &mut Cursor<'_>) -> Result<()> {
        let parent = cur.parent.as_ref().map(|p| &p.config);
        self.store_writes(parent, cur.last.take(), cur.sync)
    }

    /// Stores a finished task's writes on the checkpoint `at` (the run's
    /// last), durably first in sync mode.
    fn store_writes(
        &self,
        at: Option<&CheckpointConfig>,
        held: Option<HeldWrites>,
        sync: bool,
    ) -> Result<()> {
        let (Some((task, path, writes)), Some(at)) = (held, at) else {
            return Ok(());
        };
        self.saver.put_writes(at, &writes, &task, &path)?;
        if sync {
            self.saver.db().flush_thread(&at.thread_id)?;
        }
        Ok(())
    }

    /// At the end of a run in exit mode: stores the newest checkpoint under
    /// its in-memory id, then the writes of its unfinished superstep.
    fn finish(&self, cur: &mut Cursor<'_>, cp: &CpState, channels: &mut Channels) -> Result<()> {
        if !cur.exit {
            return self.store_last(cur);
        }
        let mut id = cur.parent.as_ref().map(|p| p.checkpoint.id.clone()).unwrap_or_default();
        if let Some((source, step, updated, fork)) = cur.unsaved.take() {
            let save = Save {
                source: &source,
                step,
                updated: updated.as_ref(),
                fork,
                parents: cur.parents,
                id: Some(&cp.id),
                writes: None,
            };
            let (tuple, tag) = self.commit(cur.parent.take(), &cur.thread, cp, channels, &save)?;
            mark_stored(channels);
            id.clone_from(&tuple.checkpoint.id);
            cur.parent = Some(tuple);
            cur.tag = tag;
        }
        for (task, path, writes) in std::mem::take(&mut cur.held) {
            self.saver.put_writes(&cur.thread.clone().at(&id), &writes, &task, &path)?;
        }
        Ok(())
    }
}

/// What a task of a superstep did, as a stream reports it.
enum Reported {
    /// It finished: its writes are the task's.
    Ran,
    /// It paused on `interrupt()` with these interrupts.
    Interrupted(Vec<Value>),
    /// It failed, did not run (finished in an earlier run) or was not
    /// reached.
    Not,
}

impl CompiledGraph {
    /// The state keys among `writes` (what LangGraph's `updates` mode
    /// shows of a task).
    fn state_update(&self, writes: &[(String, Value)]) -> Map<String, Value> {
        writes
            .iter()
            .filter(|(k, _)| self.graph.state_keys.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Whether a superstep that updated `updated` changed a state key (only
    /// then LangGraph streams the state).
    fn touches_state(&self, updated: &BTreeSet<String>) -> bool {
        self.graph.state_keys.iter().any(|k| updated.contains(k))
    }

    /// Reports the tasks of a superstep in task order: a finished task's
    /// update (`__start__`, which applies the input, has none: LangGraph
    /// hides it), an interrupted one's interrupts then the state before the
    /// superstep with them under `"__interrupt__"` (`channels`: that state).
    fn report_tasks(
        &self,
        sink: &(dyn Fn(StreamEvent) + Sync),
        tasks: &[Task],
        report: &[Reported],
        channels: &Channels,
    ) {
        for (task, what) in tasks.iter().zip(report) {
            match what {
                Reported::Ran if task.name != START => {
                    sink(StreamEvent::Updates {
                        node: task.name.clone(),
                        update: self.state_update(&task.writes),
                    });
                }
                Reported::Interrupted(values) => {
                    sink(StreamEvent::Interrupt { interrupts: values.clone() });
                    let mut state = read_shared(channels, &self.graph.state_keys);
                    state.push(INTERRUPT, Arc::new(Value::Array(values.clone())));
                    sink(StreamEvent::Values(state));
                }
                Reported::Ran | Reported::Not => {}
            }
        }
    }
}

/// Records that every channel's value is the one just stored.
fn mark_stored(channels: &mut Channels) {
    for ch in channels.values_mut() {
        ch.mark_stored();
    }
}
