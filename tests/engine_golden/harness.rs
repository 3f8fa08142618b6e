//! The golden harness: runs a fixture's calls on our engine and compares
//! our checkpoints with LangGraph's in the fixture's normalised form.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use agentstate::engine::{
    interrupt_id, task_id, Command, CompiledGraph, Durability, Goto, GraphBuilder, NodeError, State,
    StateSnapshot, StreamEvent, Update, NULL_TASK_ID,
};
use agentstate::{CheckpointConfig, Db, Error, JsonPlusSerializer, ListQuery, Serializer};
use serde_json::{json, Map, Value};

pub(crate) type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

pub(crate) fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/engine/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Counts a node's runs, then runs `f`.
pub(crate) fn counted<F>(
    counts: &Counts,
    name: &str,
    f: F,
) -> impl Fn(&State) -> Result<Update, NodeError> + 'static
where
    F: Fn(&State) -> Result<Update, NodeError> + 'static,
{
    let counts = counts.clone();
    let name = name.to_string();
    move |s| {
        *counts.lock().unwrap().entry(name.clone()).or_default() += 1;
        f(s)
    }
}

pub(crate) fn int(s: &State, k: &str) -> i64 {
    s.get(k).and_then(Value::as_i64).unwrap_or(0)
}

pub(crate) fn strs(s: &State, k: &str) -> Vec<String> {
    s.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Python's `str()` of a state value (`None` when absent).
pub(crate) fn py_str(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// One scenario run: the file, the graphs by thread.
pub(crate) struct Harness {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) path: std::path::PathBuf,
    pub(crate) db: Db,
    pub(crate) graphs: BTreeMap<String, (String, CompiledGraph)>,
    pub(crate) counts: Counts,
}

impl Harness {
    pub(crate) fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("golden.db");
        let db = Db::open(&path).unwrap();
        Harness { _dir: dir, path, db, graphs: BTreeMap::new(), counts: Counts::default() }
    }

    pub(crate) fn graph(&mut self, thread: &str, key: &str, build: GraphBuilder) {
        self.graph_with(thread, key, build, Durability::Sync);
    }

    pub(crate) fn graph_with(
        &mut self,
        thread: &str,
        key: &str,
        build: GraphBuilder,
        durability: Durability,
    ) {
        let g = build.compile(self.db.checkpointer()).unwrap().with_durability(durability);
        self.graphs.insert(thread.to_string(), (key.to_string(), g));
    }

    /// Every checkpoint id of the file (all namespaces), oldest first,
    /// with its thread and namespace.
    pub(crate) fn ids(&self) -> Vec<(String, String, String)> {
        let saver = self.db.checkpointer();
        let mut ids: Vec<(String, String, String)> = self
            .graphs
            .keys()
            .flat_map(|t| saver.list(&ListQuery::thread(t.clone())).unwrap())
            .map(|t| (t.checkpoint.id.clone(), t.config.thread_id.clone(), t.config.checkpoint_ns.clone()))
            .collect();
        ids.sort();
        ids
    }

    /// Runs the fixture's calls and compares them and every checkpoint.
    pub(crate) fn check(&self, fx: &Value) {
        self.check_adjusted(fx, |_| {});
    }

    /// [`check`](Self::check) against the fixture's checkpoints as
    /// `adjust` changes them (to leave out a known divergence).
    pub(crate) fn check_adjusted(&self, fx: &Value, adjust: impl FnOnce(&mut [Value])) {
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        let name_ids = |names: &mut BTreeMap<String, String>, ids: &[(String, String, String)]| {
            for (i, (id, _, _)) in ids.iter().enumerate() {
                names.insert(id.clone(), format!("c{i}"));
            }
        };
        let mut outputs = Vec::new();
        for (n, call) in fx["normalized"]["calls"].as_array().unwrap().iter().enumerate() {
            let thread = call["thread_id"].as_str().unwrap();
            let (_, graph) = &self.graphs[thread];
            let before: BTreeSet<String> = self.ids().into_iter().map(|(id, _, _)| id).collect();
            self.counts.lock().unwrap().clear();
            let raw_of =
                |name: &Value| names.iter().find(|(_, v)| *v == name).map(|(k, _)| k.clone()).unwrap();
            // A `stream` call's events, as (mode, chunk) pairs.
            let mut streamed: Option<Vec<Value>> = None;
            let mut cfg = CheckpointConfig::thread(thread);
            // A subgraph's namespace, its task ids named `task(cN,node)`.
            let ns = call["config"]["configurable"]["checkpoint_ns"].as_str().unwrap_or_default();
            if !ns.is_empty() {
                cfg = cfg.ns(self.raw_ns(fx, &names, ns));
            }
            let at = &call["config"]["configurable"]["checkpoint_id"];
            if !at.is_null() {
                cfg = cfg.at(raw_of(at));
            }
            let result = match call["call"].as_str().unwrap() {
                "invoke" => match Some(call["input"].clone()).filter(|v| !v.is_null()) {
                    Some(cmd)
                        if cmd["__type__"] == "Command"
                            && (cmd.get("update").is_some() || cmd.get("goto").is_some()) =>
                    {
                        graph.invoke_command(command(&cmd), &cfg)
                    }
                    Some(cmd) if cmd["__type__"] == "Command" => match by_interrupt(&cmd["resume"]) {
                        Some(answers) => graph.resume_by_id(our_interrupt_ids(graph, &cfg, answers), &cfg),
                        None => graph.resume(cmd["resume"].clone(), &cfg),
                    },
                    input => graph.invoke(input, &cfg),
                },
                "stream" if call["kwargs"]["subgraphs"] == true => {
                    // [namespace segments, mode, chunk]
                    let mut events = Vec::new();
                    let collect = |ns: &str, e: StreamEvent| {
                        let segments: Vec<&str> = ns.split('|').filter(|s| !s.is_empty()).collect();
                        let Value::Array(pair) = stream_pair(e) else { unreachable!("a pair") };
                        events.push(json!([segments, pair[0], pair[1]]));
                    };
                    let out = match Some(call["input"].clone()).filter(|v| !v.is_null()) {
                        Some(cmd) if cmd["__type__"] == "Command" => {
                            graph.stream_resume_subgraphs(cmd["resume"].clone(), &cfg, collect)
                        }
                        input => graph.stream_subgraphs(input, &cfg, collect),
                    };
                    streamed = Some(events);
                    out.map(|_| Value::Null)
                }
                "stream" => {
                    let mut events = Vec::new();
                    let collect = |e: StreamEvent| events.push(stream_pair(e));
                    let out = match Some(call["input"].clone()).filter(|v| !v.is_null()) {
                        Some(cmd)
                            if cmd["__type__"] == "Command"
                                && (cmd.get("update").is_some() || cmd.get("goto").is_some()) =>
                        {
                            graph.stream_command(command(&cmd), &cfg, collect)
                        }
                        Some(cmd) if cmd["__type__"] == "Command" => {
                            graph.stream_resume(cmd["resume"].clone(), &cfg, collect)
                        }
                        input => graph.stream(input, &cfg, collect),
                    };
                    streamed = Some(events);
                    out.map(|_| Value::Null)
                }
                "update_state" => match call["as_node"].as_str() {
                    Some(node) => graph.update_state(&cfg, call["values"].clone(), node),
                    None => graph.update_state_inferred(&cfg, call["values"].clone()),
                }
                .map(|c| {
                    let saved = self.db.checkpointer().get_tuple(&c).unwrap().unwrap();
                    config_json(&c, saved.metadata.0.get("parents"))
                }),
                "get_state" if call["subgraphs"] == true => {
                    graph.get_state_with_subgraphs(&cfg).map(|s| snapshot_json(&s))
                }
                "get_state" => graph.get_state(&cfg).map(|s| snapshot_json(&s)),
                other => panic!("call {n}: {other} is not supported"),
            };
            let after = self.ids();
            name_ids(&mut names, &after);
            let created: Vec<Value> = after
                .iter()
                .filter(|(id, _, _)| !before.contains(id))
                .map(|(id, _, _)| json!(names[id]))
                .collect();
            assert_eq!(Value::Array(created), call["checkpoints_created"], "call {n}: checkpoints created");
            let counts: Map<String, Value> =
                self.counts.lock().unwrap().iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            assert_eq!(Value::Object(counts), call["node_executions"], "call {n}: node executions");
            let expected = if call["call"] == "get_state" {
                expected_snapshot(&call["state"])
            } else {
                call["output"].clone()
            };
            if let Some(events) = streamed {
                // Also the events of a stream that failed.
                outputs.push((n, norm_value(&Value::Array(events)), call["events"].clone()));
            }
            match (result, call.get("error")) {
                (Ok(out), None) => outputs.push((n, norm_value(&out), expected)),
                (Err(Error::Node { error, .. }), Some(expected)) => {
                    assert_eq!(error.kind(), expected["class"], "call {n}: error class");
                    assert_eq!(error.message(), expected["str"], "call {n}: error");
                }
                (Err(Error::Recursion { limit }), Some(expected)) => {
                    assert_eq!(expected["class"], "GraphRecursionError", "call {n}: error class");
                    let message = expected["str"].as_str().unwrap();
                    assert!(
                        message.starts_with(&format!("Recursion limit of {limit} reached")),
                        "call {n}: {message}"
                    );
                }
                (Err(Error::InvalidUpdate(message)), Some(expected)) => {
                    assert_eq!(expected["class"], "InvalidUpdateError", "call {n}: error class");
                    assert_eq!(message, expected["str"], "call {n}: error");
                }
                (other, expected) => panic!("call {n}: got {other:?}, expected error {expected:?}"),
            }
        }
        let mut renames = names.clone();
        let ours = self.checkpoints(fx, &names, &mut renames);
        for (n, ours, theirs) in outputs {
            assert_eq!(rename(&ours, &renames), theirs, "call {n}: output");
        }
        let mut theirs = fx["normalized"]["checkpoints"].as_array().unwrap().clone();
        adjust(&mut theirs);
        // Our checkpointer keeps a task's first `__resume__` write, as
        // SqliteSaver does; the fixture holds InMemorySaver's (the last).
        for d in fx["saver_dependent"].as_array().into_iter().flatten() {
            let cp = theirs.iter_mut().find(|c| c["checkpoint_id"] == d["checkpoint_id"]).unwrap();
            for w in cp["pending_writes"].as_array_mut().unwrap() {
                if w["task_id"] == d["task_id"] && w["channel"] == d["channel"] {
                    w["value"] = d["sqlite"].clone();
                }
            }
        }
        assert_eq!(ours.len(), theirs.len(), "number of checkpoints");
        for (a, b) in ours.iter().zip(&theirs) {
            let id = &b["checkpoint_id"];
            for k in ["thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "metadata"] {
                assert_eq!(a[k], b[k], "{id}: {k}");
            }
            for k in ["v", "id", "channel_versions", "versions_seen", "updated_channels", "channel_values"] {
                assert_eq!(a["checkpoint"][k], b["checkpoint"][k], "{id}: checkpoint.{k}");
            }
            assert_eq!(
                canonical_writes(&a["pending_writes"]),
                canonical_writes(&b["pending_writes"]),
                "{id}: pending writes"
            );
            let next = |v: &Value| {
                let mut n: Vec<String> =
                    v["next"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
                n.sort();
                let mut t: Vec<Value> = v["tasks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| json!([x["id"], x["name"], x["error"], x["interrupts"], x["result"]]))
                    .collect();
                t.sort_by_key(|x| x.to_string());
                (n, t)
            };
            assert_eq!(next(&a["state"]), next(&b["state"]), "{id}: next tasks");
        }
    }

    /// Our checkpoints in the fixture's normalised form.
    pub(crate) fn checkpoints(
        &self,
        fx: &Value,
        names: &BTreeMap<String, String>,
        renames: &mut BTreeMap<String, String>,
    ) -> Vec<Value> {
        let saver = self.db.checkpointer();
        self.db.flush().unwrap();
        let conn = agentstate::rusqlite::Connection::open(&self.path).unwrap();
        let serde = JsonPlusSerializer;
        let mut out = Vec::new();
        for (id, thread, ns) in self.ids() {
            let (key, graph) = &self.graphs[&thread];
            let cfg = CheckpointConfig::thread(&thread).ns(&ns).at(&id);
            let t = saver.get_tuple(&cfg).unwrap().unwrap();
            let step = t.metadata.step().unwrap();
            let tasks = task_names(compiled_nodes(fx, key, &ns), &id, &ns, step + 1, &names[&id]);
            for (raw, name) in &tasks {
                let node = name.trim_start_matches("task(").split(',').nth(1).unwrap().trim_end_matches(')');
                let task_ns =
                    if ns.is_empty() { format!("{node}:{raw}") } else { format!("{ns}|{node}:{raw}") };
                renames.insert(interrupt_id(&task_ns), format!("interrupt({name})"));
                // An interrupt raised after k answers hashes `task_ns|k`.
                for k in 1..8 {
                    renames.insert(interrupt_id(&format!("{task_ns}|{k}")), format!("interrupt({name}|{k})"));
                }
                renames.insert(raw.clone(), name.clone());
            }
            // The writes `update_state` stores on the head when no task of
            // the next superstep runs its node: uuid5(checkpoint id,
            // "__interrupt__"), "update(cN)" in the fixtures.
            let update_id = uuid::Uuid::parse_str(&id)
                .map(|u| uuid::Uuid::new_v5(&u, b"__interrupt__").to_string())
                .unwrap();
            let tname = |raw: &str| {
                tasks
                    .get(raw)
                    .cloned()
                    .or_else(|| (raw == NULL_TASK_ID).then(|| raw.to_string()))
                    .or_else(|| (raw == update_id).then(|| format!("update({})", names[&id])))
                    .unwrap_or_else(|| panic!("{}: task id {raw} not derivable", names[&id]))
            };
            let cp = &t.checkpoint;
            let versions = |m: &BTreeMap<String, agentstate::checkpoint::ChannelVersion>| -> Value {
                m.iter().map(|(k, v)| (k.clone(), json!(v.counter()))).collect::<Map<_, _>>().into()
            };
            let seen: Map<String, Value> =
                cp.versions_seen.iter().map(|(n, m)| (n.clone(), versions(m))).collect();
            let values: Map<String, Value> =
                cp.channel_values.iter().map(|(k, v)| (k.clone(), norm_value(&v.to_value()))).collect();
            // One row per task; its writes packed as a msgpack array of
            // [idx, channel, type, bytes] (docs/format.md, read here with rmpv).
            let mut stmt = conn
                .prepare("SELECT task_id, writes, task_path FROM checkpoint_writes WHERE thread_id = ?1 AND checkpoint_ns = ?3 AND checkpoint_id = ?2")
                .unwrap();
            let rows: Vec<(String, Vec<u8>, String)> = stmt
                .query_map([&thread, &id, &ns], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let mut writes: Vec<Value> = vec![];
            for (task, packed, path) in rows {
                let rmpv::Value::Array(entries) = rmpv::decode::read_value(&mut packed.as_slice()).unwrap()
                else {
                    panic!("packed writes are an array")
                };
                for entry in entries {
                    let rmpv::Value::Array(e) = entry else { panic!("an entry is an array") };
                    let idx = e[0].as_i64().unwrap();
                    let channel = e[1].as_str().unwrap().to_string();
                    let tag = e[2].as_str().unwrap().to_string();
                    // The value's bytes, or the key of the delta row of the
                    // channel that holds exactly those bytes (docs/format.md).
                    let blob: Vec<u8> = match &e[3] {
                        rmpv::Value::String(key) => conn
                            .query_row(
                                "SELECT blob FROM checkpoint_blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                                 AND channel = ?3 AND version = ?4",
                                [thread.as_str(), ns.as_str(), channel.as_str(), key.as_str().unwrap()],
                                |r| r.get(0),
                            )
                            .unwrap(),
                        bytes => bytes.as_slice().unwrap().to_vec(),
                    };
                    let value = serde.loads_typed(&tag, &blob).unwrap();
                    writes.push(json!({"task_id": tname(&task), "idx": idx, "channel": channel, "value": norm_value(&value), "serde_type": tag, "task_path": path}));
                }
            }
            let next = graph.next_tasks(&cfg).unwrap();
            let state = json!({
                "next": next.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
                "tasks": next.iter().map(|t| json!({
                    "id": tname(&t.id),
                    "name": t.name,
                    "error": t.error,
                    "interrupts": norm_value(&Value::Array(t.interrupts.clone())),
                    "result": t.result.as_ref().map(norm_value),
                })).collect::<Vec<_>>(),
            });
            out.push(json!({
                "thread_id": thread,
                "checkpoint_ns": t.config.checkpoint_ns,
                "checkpoint_id": names[&id],
                "parent_checkpoint_id": t.parent_config.as_ref().and_then(|p| p.checkpoint_id.as_ref()).map(|p| names[p].clone()),
                "checkpoint": {
                    "v": cp.v,
                    "id": names[&id],
                    "channel_versions": versions(&cp.channel_versions),
                    "versions_seen": seen,
                    "updated_channels": cp.updated_channels,
                    "channel_values": values,
                },
                "metadata": Value::Object(t.metadata.0.clone()),
                "pending_writes": writes,
                "state": state,
            }));
        }
        out.into_iter().map(|v| rename(&v, renames)).collect()
    }
}

impl Harness {
    /// Our raw namespace for a fixture's (`sub:task(c2,sub)|inner:...`):
    /// each task named after one of our checkpoints so far.
    fn raw_ns(&self, fx: &Value, names: &BTreeMap<String, String>, ns: &str) -> String {
        let saver = self.db.checkpointer();
        let mut tasks = BTreeMap::new();
        for (id, thread, cp_ns) in self.ids() {
            let (key, _) = &self.graphs[&thread];
            let t = saver.get_tuple(&CheckpointConfig::thread(&thread).ns(&cp_ns).at(&id)).unwrap().unwrap();
            let step = t.metadata.step().unwrap();
            let cname = &names[&id];
            tasks.extend(task_names(compiled_nodes(fx, key, &cp_ns), &id, &cp_ns, step + 1, cname));
        }
        ns.split('|')
            .map(|segment| {
                let (node, name) = segment.split_once(':').unwrap();
                let raw = tasks.iter().find(|(_, n)| *n == name).map(|(raw, _)| raw).unwrap();
                format!("{node}:{raw}")
            })
            .collect::<Vec<_>>()
            .join("|")
    }
}

/// The compiled nodes of the (sub)graph that runs in namespace `ns`
/// (`compiled_subgraphs` keyed by node path, `mid|inner`; a numeric
/// segment, a subgraph's further call in one task as a retry makes it,
/// `sub:<id>|1`, is no node).
fn compiled_nodes<'a>(fx: &'a Value, key: &str, ns: &str) -> &'a Value {
    if ns.is_empty() {
        return &fx["graphs"][key]["compiled"]["nodes"];
    }
    let path: Vec<&str> = ns
        .split('|')
        .filter(|s| !s.bytes().all(|b| b.is_ascii_digit()))
        .map(|s| s.split(':').next().unwrap())
        .collect();
    &fx["graphs"][key]["compiled_subgraphs"][path.join("|")]["nodes"]
}

/// A config as LangGraph shows it: with a `checkpoint_map` (the metadata
/// `parents` and this checkpoint) when the checkpoint has parents
/// (LangGraph's `patch_checkpoint_map`; our configs carry no map).
fn config_json(c: &CheckpointConfig, parents: Option<&Value>) -> Value {
    let mut conf = json!({"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns});
    // An empty subgraph snapshot's config (its namespace's) has no id.
    if let Some(id) = &c.checkpoint_id {
        conf["checkpoint_id"] = json!(id);
    }
    if let Some(Value::Object(p)) = parents.filter(|p| p.as_object().is_some_and(|m| !m.is_empty())) {
        let mut map = p.clone();
        map.insert(c.checkpoint_ns.clone(), json!(c.checkpoint_id));
        conf["checkpoint_map"] = Value::Object(map);
    }
    json!({"configurable": conf})
}

/// A snapshot as the fixtures' `get_state` calls record it (task paths and
/// `created_at` left out; normalised with the rest of the output).
fn snapshot_json(s: &StateSnapshot) -> Value {
    let parents = s.metadata.as_ref().and_then(|m| m.0.get("parents"));
    let conf = |c: &Option<CheckpointConfig>| c.as_ref().map(|c| config_json(c, parents));
    let interrupts: Vec<Value> = s.tasks.iter().flat_map(|t| t.interrupts.clone()).collect();
    json!({
        "values": s.values,
        "next": s.next,
        "tasks": snapshot_tasks(&s.tasks),
        "interrupts": interrupts,
        "config": conf(&s.config),
        "parent_config": conf(&s.parent_config),
        "metadata": s.metadata.as_ref().map(|m| Value::Object(m.0.clone())),
    })
}

/// A fixture's recorded snapshot in [`snapshot_json`]'s form; a subgraph
/// task's `state` is its namespace's config, or (`subgraphs=True`) the
/// subgraph's snapshot.
fn expected_snapshot(st: &Value) -> Value {
    let tasks: Vec<Value> = st["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut task = json!({"id": t["id"], "name": t["name"], "error": t["error"], "interrupts": t["interrupts"], "result": t["result"]});
            match t.get("state") {
                Some(sub) if sub.get("values").is_some() => task["state"] = expected_snapshot(sub),
                Some(config) => task["state"] = config.clone(),
                None => {}
            }
            task
        })
        .collect();
    json!({"values": st["values"], "next": st["next"], "tasks": tasks, "interrupts": st["interrupts"], "config": st["config"], "parent_config": st["parent_config"], "metadata": st["metadata"]})
}

/// One stream event as the `(mode, chunk)` pair LangGraph's
/// `stream(..., stream_mode=["updates", "values"])` yields, in the
/// fixtures' form.
fn stream_pair(e: StreamEvent) -> Value {
    let update = |u: Map<String, Value>| if u.is_empty() { Value::Null } else { Value::Object(u) };
    match e {
        StreamEvent::Updates { node, update: u } => json!(["updates", { node: update(u) }]),
        StreamEvent::CachedUpdates { node, update: u } => {
            json!(["updates", { node: update(u), "__metadata__": {"cached": true} }])
        }
        StreamEvent::Interrupt { interrupts } => json!(["updates", {"__interrupt__": interrupts}]),
        StreamEvent::Values(state) => json!(["values", Value::Object(state.to_map())]),
        other => panic!("unexpected stream event {other:?}"),
    }
}

/// A recorded `Command` input with `update` / `goto` (a node name, a
/// `Send`, or a list of them) and maybe `resume`, as our [`Command`].
fn command(cmd: &Value) -> Command {
    let mut out = Command::new();
    if let Some(update) = cmd.get("update").and_then(Value::as_object) {
        out = out.update(update.iter().fold(Update::new(), |u, (k, v)| u.set(k, v.clone())));
    }
    let goto = |g: &Value| match g {
        Value::String(n) => Goto::node(n.clone()),
        s => Goto::Send(agentstate::engine::Send::new(s["node"].as_str().unwrap(), s["arg"].clone())),
    };
    match cmd.get("goto") {
        Some(Value::Array(gs)) => out = gs.iter().fold(out, |o, g| o.goto(goto(g))),
        Some(g) => out = out.goto(goto(g)),
        None => {}
    }
    if let Some(answer) = cmd.get("resume") {
        out = out.resume(answer.clone());
    }
    out
}

/// A resume map (`Command(resume={interrupt id: answer})`), its ids named
/// `interrupt(task(cN,node))` in the fixtures.
fn by_interrupt(resume: &Value) -> Option<&Map<String, Value>> {
    resume.as_object().filter(|m| !m.is_empty() && m.keys().all(|k| k.starts_with("interrupt(task(")))
}

/// The answers of a fixture's resume map keyed by our ids: the interrupt
/// pending on our head for the task of the named node.
fn our_interrupt_ids(
    graph: &CompiledGraph,
    cfg: &CheckpointConfig,
    answers: &Map<String, Value>,
) -> Vec<(String, Value)> {
    let state = graph.get_state(cfg).unwrap();
    answers
        .iter()
        .map(|(name, answer)| {
            let node = name.trim_start_matches("interrupt(task(").split([',', ')', '|']).nth(1).unwrap();
            let task = state.tasks.iter().find(|t| t.name == node).unwrap();
            let id = agentstate::engine::Interrupt::from_stored(&task.interrupts[0]).unwrap().id;
            (id, answer.clone())
        })
        .collect()
}

/// A snapshot's tasks as the fixtures' `get_state` calls record them
/// (without their paths; normalised with the rest of the output).
fn snapshot_tasks(tasks: &[agentstate::engine::PendingTask]) -> Vec<Value> {
    tasks
        .iter()
        .map(|t| {
            let mut task = json!({
                "id": t.id,
                "name": t.name,
                "error": t.error,
                "interrupts": t.interrupts,
                "result": t.result,
            });
            match (&t.state, &t.subgraph) {
                (Some(state), _) => task["state"] = snapshot_json(state),
                (None, Some(c)) => {
                    task["state"] =
                        json!({"configurable": {"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns}});
                }
                (None, None) => {}
            }
            task
        })
        .collect()
}

/// `v` with every raw id (a whole string, or inside one such as a
/// namespace) replaced by its name.
pub(crate) fn rename(v: &Value, names: &BTreeMap<String, String>) -> Value {
    match v {
        Value::String(s) => Value::String(names.get(s).cloned().unwrap_or_else(|| {
            let mut s = s.clone();
            if s.contains('-') {
                for (raw, name) in names.iter().filter(|(raw, _)| raw.contains('-')) {
                    if s.contains(raw.as_str()) {
                        s = s.replace(raw.as_str(), name);
                    }
                }
            }
            s
        })),
        Value::Array(a) => Value::Array(a.iter().map(|x| rename(x, names)).collect()),
        // Keys too (a `checkpoint_map`'s namespaces).
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| match rename(&Value::String(k.clone()), names) {
                    Value::String(k) => (k, rename(x, names)),
                    _ => unreachable!("a string renames to a string"),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Raw task id -> `task(cN,name)` / `task(cN,name,pushI)` for every task
/// that could be prepared from checkpoint `id`, derived with LangGraph's
/// formula from the fixture's compiled triggers.
pub(crate) fn task_names(
    nodes: &Value,
    id: &str,
    ns: &str,
    step: i64,
    cname: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let step = step.to_string();
    for (name, node) in nodes.as_object().unwrap() {
        let mut triggers: Vec<&str> =
            node["triggers"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        triggers.sort_unstable();
        let task_ns = if ns.is_empty() { name.clone() } else { format!("{ns}|{name}") };
        let mut parts = vec![task_ns.as_str(), &step, name, "__pregel_pull"];
        parts.extend(triggers);
        out.insert(task_id(id, &parts).unwrap(), format!("task({cname},{name})"));
        for i in 0..16 {
            let push = task_id(id, &[&task_ns, &step, name, "__pregel_push", &i.to_string()]).unwrap();
            out.insert(push, format!("task({cname},{name},push{i})"));
        }
    }
    out
}

/// Python objects in the fixtures' tagged forms: a set is
/// `{"__set__": [sorted]}`, a Send `{"__type__": "Send", ...}`, a LangChain
/// message its dump tagged `"__type__": "message"`.
pub(crate) fn norm_value(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(norm_value).collect()),
        Value::Object(m) => {
            if let Some(ext) = m.get("__ext__").filter(|_| m.len() == 1) {
                let name = ext["name"].as_str().unwrap_or_default();
                let module = ext["module"].as_str().unwrap_or_default();
                if name == "set" {
                    let mut items: Vec<Value> =
                        ext["args"].as_array().unwrap().iter().map(norm_value).collect();
                    items.sort_by_key(|a| a.to_string());
                    return json!({"__set__": items});
                }
                if name == "Interrupt" {
                    let id = ext["args"]["id"].as_str().unwrap();
                    return json!({"__type__": "Interrupt", "value": norm_value(&ext["args"]["value"]), "id": id});
                }
                if name == "Send" {
                    return json!({"__type__": "Send", "node": ext["args"][0], "arg": norm_value(&ext["args"][1])});
                }
                if module.starts_with("langchain_core.messages") {
                    let mut dump = ext["args"].as_object().unwrap().clone();
                    dump.insert("__type__".into(), json!("message"));
                    return Value::Object(dump);
                }
            }
            Value::Object(m.iter().map(|(k, v)| (k.clone(), norm_value(v))).collect())
        }
        other => other.clone(),
    }
}

/// Pending writes in `(task_path, task, idx)` order. Where a task wrote
/// several `branch:to:*` channels (several static out-edges), LangGraph's
/// order of those writes follows Python's hash seed: they are compared as a
/// set (sorted by channel, given their idx values in order).
pub(crate) fn canonical_writes(writes: &Value) -> Vec<Value> {
    let mut ws: Vec<Value> = writes.as_array().unwrap().clone();
    let mut by_task: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, w) in ws.iter().enumerate() {
        if w["channel"].as_str().unwrap().starts_with("branch:to:") {
            by_task.entry(w["task_id"].as_str().unwrap().to_string()).or_default().push(i);
        }
    }
    for positions in by_task.values().filter(|p| p.len() > 1) {
        let mut idxs: Vec<i64> = positions.iter().map(|&i| ws[i]["idx"].as_i64().unwrap()).collect();
        idxs.sort_unstable();
        let mut chans: Vec<String> =
            positions.iter().map(|&i| ws[i]["channel"].as_str().unwrap().to_string()).collect();
        chans.sort();
        for ((&pos, idx), chan) in positions.iter().zip(idxs).zip(chans) {
            ws[pos]["idx"] = json!(idx);
            ws[pos]["channel"] = json!(chan);
        }
    }
    ws.sort_by(|a, b| {
        let key = |w: &Value| {
            (
                w["task_path"].as_str().unwrap().to_string(),
                w["task_id"].as_str().unwrap().to_string(),
                w["idx"].as_i64().unwrap(),
            )
        };
        key(a).cmp(&key(b))
    });
    ws
}

/// The fixture's checkpoints as our file keeps writes, a difference
/// docs/design.md lists: one task path per task and checkpoint, so the
/// writes `update_state(as_node=X)` stores under the pending task of X that
/// already stored writes (an interrupted or failed X) carry that task's
/// path, where LangGraph keeps `~__interrupt__, 0000000000` on them; then
/// sorted as reads order them (task path, task id, idx).
pub(crate) fn one_task_path(checkpoints: &mut [Value]) {
    for cp in checkpoints {
        let writes = cp["pending_writes"].as_array_mut().unwrap();
        let path_of = |task: &Value| {
            writes
                .iter()
                .find(|w| {
                    w["task_id"] == *task && !w["task_path"].as_str().unwrap().starts_with("~__interrupt__")
                })
                .map(|w| w["task_path"].clone())
        };
        let paths: Vec<Option<Value>> = writes.iter().map(|w| path_of(&w["task_id"])).collect();
        for (w, path) in writes.iter_mut().zip(paths) {
            if let Some(path) = path {
                w["task_path"] = path;
            }
        }
        writes.sort_by_key(|w| {
            (
                w["task_path"].as_str().unwrap().to_string(),
                w["task_id"].to_string(),
                w["idx"].as_i64().unwrap(),
            )
        });
    }
}

/// The fixtures' linear a -> b -> c graph.
pub(crate) fn abc(counts: &Counts) -> GraphBuilder {
    use agentstate::engine::{ChannelSpec, Graph, Reducer, END, START};
    let mut b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value());
    for n in ["a", "b", "c"] {
        b = b.node(
            n,
            counted(counts, n, move |s| {
                Ok(Update::new().set("items", json!([n])).set("count", json!(int(s, "count") + 1)))
            }),
        );
    }
    b.edge(START, "a").edge("a", "b").edge("b", "c").edge("c", END)
}

/// prep -> ask -> finish, ask calling `interrupt("approve?")`.
pub(crate) fn prep_ask_finish(counts: &Counts) -> GraphBuilder {
    use agentstate::engine::{interrupt, ChannelSpec, Graph, Reducer, END, START};
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .state("answer", ChannelSpec::last_value())
        .node(
            "prep",
            counted(counts, "prep", |s| {
                Ok(Update::new().set("items", json!(["prep"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "ask",
            counted(counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!(["ask"])).set("answer", answer))
            }),
        )
        .node(
            "finish",
            counted(counts, "finish", |s| {
                Ok(Update::new()
                    .set("items", json!([format!("finish:{}", py_str(s.get("answer")))]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "finish")
        .edge("finish", END)
}

/// ask (calling `interrupt("approve?")`) and work side by side, then join
/// (which counts the items).
pub(crate) fn ask_beside_work(counts: &Counts) -> GraphBuilder {
    use agentstate::engine::{interrupt, ChannelSpec, Graph, Reducer, END, START};
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node("work", counted(counts, "work", |_| Ok(Update::new().set("items", json!(["work"])))))
        .node(
            "join",
            counted(counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "work")
        .edge("ask", "join")
        .edge("work", "join")
        .edge("join", END)
}
