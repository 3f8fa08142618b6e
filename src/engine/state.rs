//! Reading and editing a thread's state from outside a run:
//! [`CompiledGraph::get_state`] and [`CompiledGraph::update_state`].

use serde_json::Value;

use super::algo::{
    apply_writes, finished_writes, prepare_next_tasks, read_state, with_writes, Task, TaskInput, TaskPath,
    TaskWrites,
};
use super::graph::Update;
use super::run::{CompiledGraph, PendingTask, Save};
use super::task_id::update_task_id;
use super::{INTERRUPT, PUSH};
use crate::checkpoint::{CheckpointConfig, ListQuery, Metadata};
use crate::error::{Error, Result};

/// A thread's state at a checkpoint (LangGraph's `StateSnapshot`, without
/// task paths and subgraph states yet).
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
        Ok(StateSnapshot {
            values: read_state(&channels, &graph.graph.state_keys),
            next,
            tasks,
            config: tuple.as_ref().map(|t| t.config.clone()),
            parent_config: tuple.as_ref().and_then(|t| t.parent_config.clone()),
            metadata: tuple.map(|t| t.metadata),
        })
    }

    /// Every checkpoint of `config`'s thread (in its namespace), newest
    /// first, as [`get_state`](Self::get_state) reads each (LangGraph's
    /// `get_state_history`, without filters yet).
    ///
    /// # Errors
    /// As [`get_state`](Self::get_state).
    pub fn get_state_history(&self, config: &CheckpointConfig) -> Result<Vec<StateSnapshot>> {
        let query = ListQuery::thread(config.thread_id.clone()).namespace(config.checkpoint_ns.clone());
        let tuples = self.saver.list(&query)?;
        tuples.iter().map(|t| self.get_state(&t.config)).collect()
    }

    /// Writes `values` to the state as if node `as_node` had returned them
    /// (its edges and routers apply), in a new checkpoint after `config`'s
    /// (source `"update"`; an older checkpoint is forked). Returns the new
    /// checkpoint's config: `invoke(None, ..)` on it goes on from there.
    ///
    /// # Errors
    /// - [`Error::NotFound`] if the thread or `config.checkpoint_id` has no
    ///   checkpoint (updating an empty thread is not supported yet).
    /// - [`Error::InvalidUpdate`] if `as_node` is not a node, `values` is not
    ///   an object, or the writes do not fit their channels.
    /// - [`Error::InvalidArgument`] for a namespace (subgraphs).
    /// - the checkpointer's errors.
    pub fn update_state(
        &self,
        config: &CheckpointConfig,
        values: Value,
        as_node: &str,
    ) -> Result<CheckpointConfig> {
        if !config.checkpoint_ns.is_empty() {
            return Err(Error::InvalidArgument("update_state in a namespace is not supported yet".into()));
        }
        let mut loaded = self.load(config)?;
        let Some(saved) = loaded.tuple.take() else {
            return Err(Error::NotFound(format!("no checkpoint for thread {:?}", config.thread_id)));
        };
        if self.graph.node(as_node).is_none_or(|n| n.func.is_none()) {
            return Err(Error::InvalidUpdate(format!("Node {as_node} does not exist")));
        }
        let Value::Object(values) = values else {
            return Err(Error::InvalidUpdate(format!("update_state needs an object, got {values}")));
        };
        // On the thread's head (not on a checkpoint the thread has moved
        // past), LangGraph also stores the update's writes as pending writes
        // of the checkpoint updated, under the id of the next superstep's
        // task for `as_node` if there is one (that task then counts as
        // finished), else under `uuid5(checkpoint id, "__interrupt__")`.
        let head = match &config.checkpoint_id {
            None => true,
            Some(id) => self
                .saver
                .get_tuple(&CheckpointConfig::thread(&config.thread_id))?
                .is_some_and(|latest| latest.checkpoint.id == *id),
        };
        let task_id = if head {
            let next = prepare_next_tasks(&self.graph, &loaded.cp, &loaded.channels, loaded.step, "", None)?;
            match next.into_iter().find(|t| t.name == as_node) {
                Some(t) => t.id,
                None => update_task_id(&saved.checkpoint.id)?,
            }
        } else {
            String::new()
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
        if head {
            let stored: Vec<(&str, Value)> =
                writes.iter().filter(|(c, _)| c != PUSH).map(|(c, v)| (c.as_str(), v.clone())).collect();
            if !stored.is_empty() {
                self.saver.put_writes(&saved.config, &stored, &task.id, &task.path.as_str())?;
            }
        }
        apply_writes(&mut loaded.cp, &mut loaded.channels, &mut tw, true)?;
        let parents = serde_json::Map::new();
        let save = Save {
            source: "update",
            step: loaded.step,
            updated: None,
            fork: true,
            parents: &parents,
            id: None,
            writes: None,
        };
        let thread = CheckpointConfig::thread(&config.thread_id);
        let (tuple, _) = self.commit(Some(saved), &thread, &loaded.cp, &loaded.channels, &save)?;
        Ok(tuple.config)
    }
}
