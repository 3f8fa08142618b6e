//! The superstep algorithm: which tasks run next ([`prepare_next_tasks`]) and
//! how their writes become channel values and versions ([`apply_writes`]),
//! as LangGraph's `pregel/_algo.py` does it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::channel::Channel;
use super::graph::Compiled;
use super::node::State;
use super::task_id::{pull_task_id, push_task_id};
use super::{ERROR, INTERRUPT, NO_WRITES, NULL_TASK_ID, PULL, PUSH, RESUME, TASKS};
use crate::checkpoint::{next_version, ChannelVersions};
use crate::error::Result;

/// Channel name -> live channel.
pub(crate) type Channels = BTreeMap<String, Channel>;

/// The parts of a checkpoint the algorithm reads and changes.
#[derive(Clone, Debug, Default)]
pub(crate) struct CpState {
    pub(crate) id: String,
    pub(crate) versions: ChannelVersions,
    pub(crate) seen: BTreeMap<String, ChannelVersions>,
}

/// Where a task comes from: a node triggered by its channels, or the
/// `idx`-th Send of `__pregel_tasks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskPath {
    Pull(String),
    Push(usize),
    /// The `i`-th update of an `update_state` call.
    Update(usize),
}

impl TaskPath {
    /// LangGraph's `task_path_str`: `~__pregel_pull, a` or
    /// `~__pregel_push, 0000000002, 0000000000` (the last part is the
    /// `False` LangGraph appends to a Send's path).
    pub(crate) fn as_str(&self) -> String {
        match self {
            TaskPath::Pull(name) => format!("~{PULL}, {name}"),
            TaskPath::Push(idx) => format!("~{PUSH}, {idx:010}, {:010}", 0),
            TaskPath::Update(i) => format!("~{INTERRUPT}, {i:010}"),
        }
    }
}

/// A task of a superstep.
#[derive(Clone, Debug)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) path: TaskPath,
    pub(crate) triggers: Vec<String>,
    /// What the node reads.
    pub(crate) input: TaskInput,
    pub(crate) writes: Vec<(String, Value)>,
}

/// What a task reads.
#[derive(Clone, Debug)]
pub(crate) enum TaskInput {
    /// The state (or a Send's argument object), shared with the channels.
    State(State),
    /// The graph input (for `__start__`), or a Send argument that is not an
    /// object.
    Raw(Value),
}

impl TaskInput {
    /// As JSON (a copy).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            TaskInput::State(s) => Value::Object(s.to_map()),
            TaskInput::Raw(v) => v.clone(),
        }
    }
}

/// The writes of one task, as [`apply_writes`] takes them.
pub(crate) struct TaskWrites<'a> {
    pub(crate) path: String,
    pub(crate) name: &'a str,
    pub(crate) triggers: &'a [String],
    pub(crate) writes: &'a [(String, Value)],
}

impl<'a> TaskWrites<'a> {
    /// LangGraph's `__input__` task: `writes` applied as the graph's input
    /// (or a Command's update and goto), nothing seen.
    pub(crate) fn input(writes: &'a [(String, Value)]) -> TaskWrites<'a> {
        TaskWrites { path: "~".into(), name: super::INPUT, triggers: &[], writes }
    }
}

/// The null task's writes among a checkpoint's pending writes (a
/// Command's update and goto), its `__resume__` aside.
pub(crate) fn null_writes(pending: &[(String, String, Value)]) -> Vec<(String, Value)> {
    pending
        .iter()
        .filter(|(t, c, _)| t == NULL_TASK_ID && c != RESUME)
        .map(|(_, c, v)| (c.clone(), v.clone()))
        .collect()
}

impl<'a> From<&'a Task> for TaskWrites<'a> {
    fn from(t: &'a Task) -> Self {
        TaskWrites { path: t.path.as_str(), name: &t.name, triggers: &t.triggers, writes: &t.writes }
    }
}

/// Channels that only carry bookkeeping, never state.
fn is_special(channel: &str) -> bool {
    matches!(channel, NO_WRITES | PUSH | RESUME | INTERRUPT | ERROR | "__return__" | "__error_source_node__")
}

/// A copy of `channels` with `tasks`' writes applied (versions unchanged):
/// what LangGraph shows of a superstep not stored yet.
///
/// # Errors
/// As [`apply_writes`].
pub(crate) fn with_writes(
    cp: &CpState,
    channels: &Channels,
    tasks: &mut [TaskWrites<'_>],
) -> Result<Channels> {
    let (mut cp, mut channels) = (cp.clone(), channels.clone());
    apply_writes(&mut cp, &mut channels, tasks, false)?;
    Ok(channels)
}

/// Applies a superstep's writes to `channels` and `cp`: records what each
/// task saw, consumes the channels that triggered them, folds the writes in,
/// gives every changed channel the same new version (the successor of the
/// highest version in `cp`; no version change when `bump` is false) and
/// clears ephemeral values. Returns the updated channels that can trigger a
/// node (LangGraph's `updated_channels`).
///
/// # Errors
/// [`Error::InvalidUpdate`](crate::Error::InvalidUpdate) from a channel that rejects its writes.
pub(crate) fn apply_writes(
    cp: &mut CpState,
    channels: &mut Channels,
    tasks: &mut [TaskWrites<'_>],
    bump: bool,
) -> Result<BTreeSet<String>> {
    tasks.sort_by(|a, b| a.path.cmp(&b.path));
    let bump_step = tasks.iter().any(|t| !t.triggers.is_empty());
    for t in tasks.iter() {
        let seen = cp.seen.entry(t.name.to_string()).or_default();
        for chan in t.triggers {
            if let Some(v) = cp.versions.get(chan) {
                seen.insert(chan.clone(), v.clone());
            }
        }
    }
    let next = bump.then(|| next_version(cp.versions.values().max()));
    let set_version = |cp: &mut CpState, chan: &str| {
        if let Some(v) = &next {
            cp.versions.insert(chan.to_string(), v.clone());
        }
    };
    let consumed: BTreeSet<&String> = tasks.iter().flat_map(|t| t.triggers.iter()).collect();
    for chan in consumed {
        if let Some(ch) = channels.get_mut(chan) {
            if ch.consume() {
                set_version(cp, chan);
            }
        }
    }
    let mut by_channel: Vec<(String, Vec<Value>)> = Vec::new();
    for t in tasks.iter() {
        for (chan, val) in t.writes {
            if is_special(chan) || !channels.contains_key(chan) {
                continue;
            }
            match by_channel.iter_mut().find(|(c, _)| c == chan) {
                Some((_, vals)) => vals.push(val.clone()),
                None => by_channel.push((chan.clone(), vec![val.clone()])),
            }
        }
    }
    let mut updated = BTreeSet::new();
    for (chan, vals) in &by_channel {
        let ch = channels.get_mut(chan).expect("filtered above");
        if ch.update(vals)? {
            set_version(cp, chan);
            if ch.is_available() {
                updated.insert(chan.clone());
            }
        }
    }
    if bump_step {
        for (name, ch) in channels.iter_mut() {
            if ch.is_available() && !updated.contains(name) && ch.update(&[])? {
                set_version(cp, name);
                if ch.is_available() {
                    updated.insert(name.clone());
                }
            }
        }
    }
    Ok(updated)
}

/// The state a node reads: every available channel among `keys`.
pub(crate) fn read_state(channels: &Channels, keys: &[String]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = channels.get(k).and_then(Channel::get) {
            m.insert(k.clone(), v);
        }
    }
    Value::Object(m)
}

/// The state a node reads, its values shared with the channels.
pub(crate) fn read_shared(channels: &Channels, keys: &[String]) -> State {
    State::from_shared(
        keys.iter()
            .filter_map(|k| channels.get(k).and_then(Channel::get_shared).map(|v| (k.clone(), v)))
            .collect(),
    )
}

/// A Send as stored in `__pregel_tasks` (Python's `langgraph.types.Send`).
pub(crate) fn send_value(node: &str, arg: &Value) -> Value {
    json!({"__ext__": {"code": 1, "module": "langgraph.types", "name": "Send", "args": [node, arg]}})
}

/// `(node, arg)` of a stored Send.
pub(crate) fn parse_send(v: &Value) -> Option<(String, Value)> {
    let ext = v.get("__ext__")?;
    if ext.get("name")?.as_str()? != "Send" {
        return None;
    }
    let args = ext.get("args")?.as_array()?;
    Some((args.first()?.as_str()?.to_string(), args.get(1).cloned().unwrap_or(Value::Null)))
}

/// The tasks of the next superstep, prepared from checkpoint `cp` at `step`
/// (its metadata step + 1): a PUSH task per Send in `__pregel_tasks`, then
/// a PULL task per node with a trigger channel newer than what it last saw.
/// With `updated` (the channels the last superstep updated) only the nodes
/// they trigger are candidates, in name order, as in LangGraph.
///
/// # Errors
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the checkpoint id is not a UUID.
pub(crate) fn prepare_next_tasks(
    graph: &Compiled,
    cp: &CpState,
    channels: &Channels,
    step: i64,
    ns: &str,
    updated: Option<&BTreeSet<String>>,
) -> Result<Vec<Task>> {
    let mut tasks = Vec::new();
    if let Some(topic) = channels.get(TASKS).filter(|c| c.is_available()) {
        for (idx, packet) in topic.items().iter().enumerate() {
            let Some((node, arg)) = parse_send(packet) else { continue };
            if graph.node(&node).is_none_or(|n| n.func.is_none()) {
                continue;
            }
            tasks.push(Task {
                id: push_task_id(&cp.id, ns, step, &node, idx)?,
                name: node,
                path: TaskPath::Push(idx),
                triggers: vec![PUSH.to_string()],
                input: match arg {
                    Value::Object(m) => TaskInput::State(State::from(m)),
                    other => TaskInput::Raw(other),
                },
                writes: Vec::new(),
            });
        }
    }
    if cp.versions.is_empty() {
        return Ok(tasks);
    }
    let candidates: Vec<&str> = match updated.filter(|u| !u.is_empty()) {
        Some(updated) => {
            let set: BTreeSet<&str> = updated
                .iter()
                .filter_map(|c| graph.trigger_to_nodes.get(c))
                .flat_map(|nodes| nodes.iter().map(String::as_str))
                .collect();
            set.into_iter().collect()
        }
        None => graph.nodes.iter().map(|n| n.name.as_str()).collect(),
    };
    for name in candidates {
        let Some(node) = graph.node(name) else { continue };
        let seen = cp.seen.get(name);
        let triggered = node.triggers.iter().any(|chan| {
            channels.get(chan).is_some_and(Channel::is_available)
                && seen.is_none_or(|seen| cp.versions.get(chan) > seen.get(chan))
        });
        if !triggered {
            continue;
        }
        let input = if node.func.is_none() {
            match channels.get(&node.reads_single).and_then(Channel::get) {
                Some(v) => TaskInput::Raw(v),
                None => continue,
            }
        } else {
            TaskInput::State(read_shared(channels, &graph.state_keys))
        };
        tasks.push(Task {
            id: pull_task_id(&cp.id, ns, step, name, &node.triggers)?,
            name: name.to_string(),
            path: TaskPath::Pull(name.to_string()),
            triggers: node.triggers.clone(),
            input,
            writes: Vec::new(),
        });
    }
    Ok(tasks)
}

/// Whether a pending write says what happened to its task rather than what
/// it produced (LangGraph's control writes).
pub(crate) fn is_control(channel: &str) -> bool {
    matches!(channel, ERROR | INTERRUPT | RESUME | "__error_source_node__" | "__scheduled__")
}

/// Turns `stored` pending writes of a resumed checkpoint into the outputs of
/// the tasks that finished. As LangGraph reads them, a task finished iff it
/// stored an output (any write but a control write), also if an earlier run
/// of it stored an `__error__` or `__interrupt__`; its output is those writes.
pub(crate) fn finished_writes(pending: &[(String, String, Value)]) -> BTreeMap<String, Vec<(String, Value)>> {
    let mut by_task: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    for (task, chan, val) in pending.iter().filter(|(t, c, _)| t != NULL_TASK_ID && !is_control(c)) {
        by_task.entry(task.clone()).or_default().push((chan.clone(), val.clone()));
    }
    by_task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_paths_format_like_langgraph() {
        assert_eq!(TaskPath::Pull("a".into()).as_str(), "~__pregel_pull, a");
        assert_eq!(TaskPath::Push(2).as_str(), "~__pregel_push, 0000000002, 0000000000");
    }

    #[test]
    fn sends_round_trip() {
        let v = send_value("w", &json!({"topic": "t"}));
        assert_eq!(parse_send(&v), Some(("w".to_string(), json!({"topic": "t"}))));
        assert_eq!(parse_send(&json!({"x": 1})), None);
    }

    #[test]
    fn a_task_finished_iff_it_stored_an_output() {
        let w = |t: &str, c: &str| (t.to_string(), c.to_string(), Value::Null);
        let done = finished_writes(&[
            w("a", "x"),
            // An earlier run's error or interrupt next to an output (LangGraph
            // reads the task as finished: `interrupt_then_error`).
            w("b", ERROR),
            w("b", "x"),
            w("c", NO_WRITES),
            w("d", INTERRUPT),
            w("d", RESUME),
            w("e", ERROR),
            w(NULL_TASK_ID, RESUME),
        ]);
        assert_eq!(done.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(done["b"], [("x".to_string(), Value::Null)]);
    }
}
