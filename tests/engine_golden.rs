//! The engine against LangGraph 1.2.22's recordings
//! (`tests/fixtures/engine/*.json`, see `tools/engine_goldens/README.md`).
//!
//! Each test rebuilds a fixture's graphs from their `spec` by hand, runs the
//! fixture's calls on a fresh file, normalises what we stored the way the
//! generator normalises LangGraph's (ids to `c0..`, task ids to
//! `task(cN,name)`, versions to their counters, Python objects to their
//! tagged forms) and compares every checkpoint: versions, versions_seen,
//! updated_channels, metadata, parent, channel values, pending writes (with
//! idx and task path) and next tasks; and each call's output or error, node
//! executions and checkpoints created. Task ids are re-derived from our raw
//! checkpoint ids with LangGraph's formula and the fixture's triggers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use agentstate::engine::{
    interrupt, interrupt_id, remove_message, task_id, ChannelSpec, CompiledGraph, Durability, Goto, Graph,
    GraphBuilder, NodeError, Reducer, Send, State, Update, END, NULL_TASK_ID, START,
};
use agentstate::{CheckpointConfig, Db, Error, JsonPlusSerializer, ListQuery, Serializer};
use serde_json::{json, Map, Value};

type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/engine/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Counts a node's runs, then runs `f`.
fn counted<F>(counts: &Counts, name: &str, f: F) -> impl Fn(&State) -> Result<Update, NodeError> + 'static
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

fn int(s: &State, k: &str) -> i64 {
    s.get(k).and_then(Value::as_i64).unwrap_or(0)
}

fn strs(s: &State, k: &str) -> Vec<String> {
    s.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Python's `str()` of a state value (`None` when absent).
fn py_str(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// One scenario run: the file, the graphs by thread.
struct Harness {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    db: Db,
    graphs: BTreeMap<String, (String, CompiledGraph)>,
    counts: Counts,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("golden.db");
        let db = Db::open(&path).unwrap();
        Harness { _dir: dir, path, db, graphs: BTreeMap::new(), counts: Counts::default() }
    }

    fn graph(&mut self, thread: &str, key: &str, build: GraphBuilder) {
        self.graph_with(thread, key, build, Durability::Sync);
    }

    fn graph_with(&mut self, thread: &str, key: &str, build: GraphBuilder, durability: Durability) {
        let g = build.compile(self.db.checkpointer()).unwrap().with_durability(durability);
        self.graphs.insert(thread.to_string(), (key.to_string(), g));
    }

    /// Every checkpoint id of the file (all namespaces), oldest first,
    /// with its thread and namespace.
    fn ids(&self) -> Vec<(String, String, String)> {
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
    fn check(&self, fx: &Value) {
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
            let mut cfg = CheckpointConfig::thread(thread);
            let at = &call["config"]["configurable"]["checkpoint_id"];
            if !at.is_null() {
                cfg = cfg.at(raw_of(at));
            }
            let result = match call["call"].as_str().unwrap() {
                "invoke" => match Some(call["input"].clone()).filter(|v| !v.is_null()) {
                    Some(cmd) if cmd["__type__"] == "Command" => graph.resume(cmd["resume"].clone(), &cfg),
                    input => graph.invoke(input, &cfg),
                },
                "update_state" => graph
                    .update_state(&cfg, call["values"].clone(), call["as_node"].as_str().unwrap())
                    .map(|c| json!({"configurable": {"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns, "checkpoint_id": c.checkpoint_id}})),
                "get_state" => graph.get_state(&cfg).map(|s| {
                    let conf = |c: Option<CheckpointConfig>| {
                        c.map(|c| json!({"configurable": {"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns, "checkpoint_id": c.checkpoint_id}}))
                    };
                    json!({"values": s.values, "next": s.next, "config": conf(s.config), "parent_config": conf(s.parent_config), "metadata": s.metadata.map(|m| Value::Object(m.0))})
                }),
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
                let st = &call["state"];
                json!({"values": st["values"], "next": st["next"], "config": st["config"], "parent_config": st["parent_config"], "metadata": st["metadata"]})
            } else {
                call["output"].clone()
            };
            match (result, call.get("error")) {
                (Ok(out), None) => outputs.push((n, norm_value(&out), expected)),
                (Err(Error::Node { error, .. }), Some(expected)) => {
                    assert_eq!(error.kind(), expected["class"], "call {n}: error class");
                    assert_eq!(error.message(), expected["str"], "call {n}: error");
                }
                (other, expected) => panic!("call {n}: got {other:?}, expected error {expected:?}"),
            }
        }
        let mut renames = names.clone();
        let ours = self.checkpoints(fx, &names, &mut renames);
        for (n, ours, theirs) in outputs {
            assert_eq!(rename(&ours, &renames), theirs, "call {n}: output");
        }
        let theirs = fx["normalized"]["checkpoints"].as_array().unwrap();
        assert_eq!(ours.len(), theirs.len(), "number of checkpoints");
        for (a, b) in ours.iter().zip(theirs) {
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
    fn checkpoints(
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
            let compiled = match ns.split(':').next().filter(|_| !ns.is_empty()) {
                Some(node) => &fx["graphs"][key]["compiled_subgraphs"][node]["nodes"],
                None => &fx["graphs"][key]["compiled"]["nodes"],
            };
            let tasks = task_names(compiled, &id, &ns, step + 1, &names[&id]);
            for (raw, name) in &tasks {
                let node = name.trim_start_matches("task(").split(',').nth(1).unwrap().trim_end_matches(')');
                let task_ns =
                    if ns.is_empty() { format!("{node}:{raw}") } else { format!("{ns}|{node}:{raw}") };
                renames.insert(interrupt_id(&task_ns), format!("interrupt({name})"));
                renames.insert(raw.clone(), name.clone());
            }
            let tname = |raw: &str| {
                tasks
                    .get(raw)
                    .cloned()
                    .or_else(|| (raw == NULL_TASK_ID).then(|| raw.to_string()))
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
            let mut stmt = conn
                .prepare("SELECT task_id, idx, channel, type, blob, task_path FROM checkpoint_writes WHERE thread_id = ?1 AND checkpoint_ns = ?3 AND checkpoint_id = ?2")
                .unwrap();
            let writes: Vec<Value> = stmt
                .query_map([&thread, &id, &ns], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?, r.get::<_, Vec<u8>>(4)?, r.get::<_, String>(5)?))
                })
                .unwrap()
                .map(|r| {
                    let (task, idx, channel, tag, blob, path) = r.unwrap();
                    let value = serde.loads_typed(&tag, &blob).unwrap();
                    json!({"task_id": tname(&task), "idx": idx, "channel": channel, "value": norm_value(&value), "serde_type": tag, "task_path": path})
                })
                .collect();
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

/// `v` with every raw id (a whole string, or inside one such as a
/// namespace) replaced by its name.
fn rename(v: &Value, names: &BTreeMap<String, String>) -> Value {
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
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), rename(x, names))).collect()),
        other => other.clone(),
    }
}

/// Raw task id -> `task(cN,name)` / `task(cN,name,pushI)` for every task
/// that could be prepared from checkpoint `id`, derived with LangGraph's
/// formula from the fixture's compiled triggers.
fn task_names(nodes: &Value, id: &str, ns: &str, step: i64, cname: &str) -> BTreeMap<String, String> {
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
fn norm_value(v: &Value) -> Value {
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
fn canonical_writes(writes: &Value) -> Vec<Value> {
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

#[test]
fn linear() {
    let fx = fixture("linear");
    let mut h = Harness::new();
    let mut b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value());
    for n in ["a", "b", "c"] {
        b = b.node(
            n,
            counted(&h.counts, n, move |s| {
                Ok(Update::new().set("items", json!([n])).set("count", json!(int(s, "count") + 1)))
            }),
        );
    }
    h.graph("linear", "main", b.edge(START, "a").edge("a", "b").edge("b", "c").edge("c", END));
    h.check(&fx);
}

#[test]
fn conditional_loop() {
    let fx = fixture("conditional_loop");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("count", ChannelSpec::last_value())
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("count", json!(n)).set("trace", json!([format!("inc{n}")])))
            }),
        )
        .edge(START, "inc")
        .conditional_edges("inc", |s| {
            Ok(vec![if int(s, "count") < 3 { Goto::node("inc") } else { Goto::end() }])
        });
    h.graph("loop", "main", b);
    h.check(&fx);
}

#[test]
fn node_error_resume() {
    let fx = fixture("node_error_resume");
    let mut h = Harness::new();
    // flaky fails on its first run only (the fixture flips a flag between
    // the failing invoke and the resuming one).
    let fail = Arc::new(Mutex::new(true));
    let flag = fail.clone();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "good",
            counted(&h.counts, "good", |s| {
                Ok(Update::new().set("items", json!(["good"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "flaky",
            counted(&h.counts, "flaky", move |_| {
                let mut f = flag.lock().unwrap();
                if *f {
                    *f = false;
                    return Err(NodeError::with_kind("RuntimeError", "flaky failed"));
                }
                Ok(Update::new().set("items", json!(["flaky"])))
            }),
        )
        .node(
            "after",
            counted(&h.counts, "after", |s| {
                Ok(Update::new().set("items", json!(["after"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "good")
        .edge(START, "flaky")
        .edge("good", "after")
        .edge("flaky", "after")
        .edge("after", END);
    h.graph("error", "main", b);
    h.check(&fx);
    assert!(!*fail.lock().unwrap(), "flaky ran twice");
}

/// The fixtures' linear a -> b -> c graph.
fn abc(counts: &Counts) -> GraphBuilder {
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

#[test]
fn interrupt_resume() {
    let fx = fixture("interrupt_resume");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .state("answer", ChannelSpec::last_value())
        .node(
            "prep",
            counted(&h.counts, "prep", |s| {
                Ok(Update::new().set("items", json!(["prep"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!(["ask"])).set("answer", answer))
            }),
        )
        .node(
            "finish",
            counted(&h.counts, "finish", |s| {
                Ok(Update::new()
                    .set("items", json!([format!("finish:{}", py_str(s.get("answer")))]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "finish")
        .edge("finish", END);
    h.graph("interrupt", "interrupt", b);
    let before = abc(&h.counts).interrupt_before(["b"]);
    h.graph("before", "before", before);
    let after = abc(&h.counts).interrupt_after(["a"]);
    h.graph("after", "after", after);
    h.check(&fx);
}

#[test]
fn command_goto() {
    let fx = fixture("command_goto");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "router",
            counted(&h.counts, "router", |s| {
                let to = if int(s, "count") % 2 == 0 { "left" } else { "right" };
                Ok(Update::new()
                    .set("items", json!(["router"]))
                    .set("count", json!(int(s, "count") + 1))
                    .goto(Goto::node(to)))
            }),
        )
        .node("left", counted(&h.counts, "left", |_| Ok(Update::new().set("items", json!(["left"])))))
        .node("right", counted(&h.counts, "right", |_| Ok(Update::new().set("items", json!(["right"])))))
        .edge(START, "router")
        .edge("left", END)
        .edge("right", END);
    h.graph("goto", "main", b);
    h.check(&fx);
}

#[test]
fn durability_modes() {
    let fx = fixture("durability_modes");
    let mut h = Harness::new();
    let (exit, background) = (abc(&h.counts), abc(&h.counts));
    h.graph_with("exit", "main", exit, Durability::Exit);
    h.graph_with("async", "main", background, Durability::Async);
    h.check(&fx);
}

#[test]
fn exit_durability_stores_the_failed_superstep() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |_| Ok(Update::new().set("n", json!(1))))
        .node("b", |_| Err(NodeError::new("no")))
        .edge(START, "a")
        .edge("a", "b")
        .compile(h.db.checkpointer())
        .unwrap()
        .with_durability(Durability::Exit);
    let cfg = CheckpointConfig::thread("t");
    assert!(matches!(g.invoke(Some(json!({"n": 0})), &cfg), Err(Error::Node { node, .. }) if node == "b"));
    let saver = h.db.checkpointer();
    assert_eq!(saver.list(&ListQuery::thread("t")).unwrap().len(), 1);
    let t = saver.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(t.metadata.step(), Some(1));
    assert_eq!(t.pending_writes.len(), 1);
    assert_eq!(t.pending_writes[0].channel, "__error__");
    // The stored checkpoint is the one b's task id hashed: resuming finds it.
    let next = g.next_tasks(&cfg).unwrap();
    assert_eq!(next[0].id, t.pending_writes[0].task_id);
}

#[test]
fn update_state_fork() {
    let fx = fixture("update_state_fork");
    let mut h = Harness::new();
    let (fork, replay) = (abc(&h.counts), abc(&h.counts));
    h.graph("fork", "main", fork);
    h.graph("replay", "main", replay);
    h.check(&fx);
}

fn subgraph_parent(counts: &Counts, ask: bool) -> GraphBuilder {
    let step = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |s| {
            Ok(Update::new().set("trace", json!([n])).set("count", json!(int(s, "count") + 1)))
        })
    };
    let mut child = Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node("s1", step(counts, "s1"));
    child = if ask {
        child.node(
            "s2",
            counted(counts, "s2", |s| {
                let answer = interrupt(json!("sub approve?"))?;
                let trace = format!("s2:{}", py_str(Some(&answer)));
                Ok(Update::new().set("trace", json!([trace])).set("count", json!(int(s, "count") + 1)))
            }),
        )
    } else {
        child.node("s2", step(counts, "s2"))
    };
    let child = child.edge(START, "s1").edge("s1", "s2").edge("s2", END);
    Graph::builder()
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node("pre", step(counts, "pre"))
        .subgraph("sub", child)
        .node("post", step(counts, "post"))
        .edge(START, "pre")
        .edge("pre", "sub")
        .edge("sub", "post")
        .edge("post", END)
}

#[test]
fn subgraph() {
    let fx = fixture("subgraph");
    let mut h = Harness::new();
    let (plain, asking) = (subgraph_parent(&h.counts, false), subgraph_parent(&h.counts, true));
    h.graph("plain", "plain", plain);
    h.graph("interrupted", "interrupted", asking);
    h.check(&fx);
}

fn send_graph(counts: &Counts) -> GraphBuilder {
    Graph::builder()
        .state("topics", ChannelSpec::last_value())
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .state("joined", ChannelSpec::last_value())
        .node("plan", counted(counts, "plan", |_| Ok(Update::new().set("topics", json!(["t1", "t2", "t3"])))))
        .node(
            "worker",
            counted(counts, "worker", |s| {
                Ok(Update::new().set("results", json!([format!("done:{}", py_str(s.get("topic")))])))
            }),
        )
        .node(
            "join",
            counted(counts, "join", |s| Ok(Update::new().set("joined", json!(strs(s, "results").join(","))))),
        )
        .edge(START, "plan")
        .conditional_edges("plan", |s| {
            Ok(strs(s, "topics")
                .into_iter()
                .map(|t| Goto::Send(Send::new("worker", json!({"topic": t}))))
                .collect())
        })
        .edge("worker", "join")
        .edge("join", END)
}

fn barrier_graph(counts: &Counts) -> GraphBuilder {
    let mut b = Graph::builder()
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .state("joined", ChannelSpec::last_value());
    for n in ["x", "y1", "y"] {
        b = b.node(n, counted(counts, n, move |_| Ok(Update::new().set("results", json!([n])))));
    }
    b.node(
        "join",
        counted(counts, "join", |s| Ok(Update::new().set("joined", json!(strs(s, "results").join("+"))))),
    )
    .edge(START, "x")
    .edge(START, "y1")
    .edge("y1", "y")
    .join(["x", "y"], "join")
    .edge("join", END)
}

#[test]
fn send_fanout_join() {
    let fx = fixture("send_fanout_join");
    let mut h = Harness::new();
    let (s, b) = (send_graph(&h.counts), barrier_graph(&h.counts));
    h.graph("send", "send", s);
    h.graph("barrier", "barrier", b);
    h.check(&fx);
}

#[test]
fn messages_reducer() {
    let fx = fixture("messages_reducer");
    let mut h = Harness::new();
    let has_m1 = |s: &State| {
        s.get("messages").and_then(Value::as_array).is_some_and(|ms| {
            ms.iter().any(|m| m.pointer("/__ext__/args/id").and_then(Value::as_str) == Some("m1"))
        })
    };
    let b = Graph::builder()
        .state("messages", ChannelSpec::reducer(Reducer::Messages))
        .node(
            "reply",
            counted(&h.counts, "reply", |_| {
                Ok(Update::new()
                    .set("messages", json!([{"role": "assistant", "content": "hello", "id": "m2"}])))
            }),
        )
        .node(
            "edit",
            counted(&h.counts, "edit", |_| {
                Ok(Update::new()
                    .set("messages", json!([{"role": "assistant", "content": "hello (edited)", "id": "m2"}])))
            }),
        )
        .node(
            "prune",
            counted(&h.counts, "prune", move |s| {
                Ok(if has_m1(s) {
                    Update::new().set("messages", json!([remove_message("m1")]))
                } else {
                    Update::new()
                })
            }),
        )
        .edge(START, "reply")
        .edge("reply", "edit")
        .edge("edit", "prune")
        .edge("prune", END);
    h.graph("messages", "main", b);
    h.check(&fx);
}

#[test]
fn custom_channels() {
    let fx = fixture("custom_channels");
    let mut h = Harness::new();
    let add_ints = |a: &Value, b: &Value| Ok(json!(a.as_i64().unwrap_or(0) + b.as_i64().unwrap_or(0)));
    let b = Graph::builder()
        .state("total", ChannelSpec::custom(add_ints, Some(json!(0))))
        .state("scratch", ChannelSpec::ephemeral())
        .state("log", ChannelSpec::topic(true))
        .state("out", ChannelSpec::last_value())
        .node(
            "p",
            counted(&h.counts, "p", |_| {
                Ok(Update::new().set("total", json!(5)).set("scratch", json!("tmp-p")).set("log", json!("p")))
            }),
        )
        .node(
            "q",
            counted(&h.counts, "q", |s| {
                Ok(Update::new()
                    .set("total", json!(7))
                    .set("log", json!(["q1", "q2"]))
                    .set("out", json!(format!("saw:{}", py_str(s.get("scratch"))))))
            }),
        )
        .node(
            "r",
            counted(&h.counts, "r", |s| {
                let out = format!(
                    "{}|scratch:{}|total:{}",
                    py_str(s.get("out")),
                    py_str(s.get("scratch")),
                    int(s, "total")
                );
                Ok(Update::new().set("out", json!(out)))
            }),
        )
        .edge(START, "p")
        .edge("p", "q")
        .edge("q", "r")
        .edge("r", END);
    h.graph("channels", "main", b);
    h.check(&fx);
}

#[test]
fn resume_with_nothing_to_resume_is_a_typed_error() {
    let h = Harness::new();
    let g = Graph::builder()
        .node("a", |_| Ok(Update::new()))
        .edge(START, "a")
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(g.invoke(None, &CheckpointConfig::thread("t")), Err(Error::EmptyInput)));
    assert!(matches!(g.invoke(Some(json!(3)), &CheckpointConfig::thread("t")), Err(Error::InvalidUpdate(_))));
    let looped = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |s| Ok(Update::new().set("n", json!(int(s, "n") + 1))))
        .edge(START, "a")
        .conditional_edges("a", |_| Ok(vec![Goto::node("a")]))
        .recursion_limit(3)
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(
        looped.invoke(Some(json!({"n": 0})), &CheckpointConfig::thread("loop")),
        Err(Error::Recursion { limit: 3 })
    ));
}

#[test]
fn a_panicking_node_fails_its_task_and_history_lists_every_checkpoint() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |s| Ok(Update::new().set("n", json!(int(s, "n") + 1))))
        .node("boom", |s| if int(s, "n") == 1 { panic!("kaboom") } else { Ok(Update::new()) })
        .edge(START, "a")
        .edge("a", "boom")
        .compile(h.db.checkpointer())
        .unwrap();
    let cfg = CheckpointConfig::thread("p");
    let err = g.invoke(Some(json!({"n": 0})), &cfg).unwrap_err();
    match err {
        Error::Node { node, error, .. } => {
            assert_eq!(node, "boom");
            assert_eq!(error.kind(), "Panic");
            assert_eq!(error.message(), "kaboom");
        }
        other => panic!("{other:?}"),
    }
    let latest = h.db.checkpointer().get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(latest.pending_writes[0].value, json!("Panic('kaboom')"));
    let history = g.get_state_history(&cfg).unwrap();
    let steps: Vec<i64> = history.iter().map(|s| s.metadata.as_ref().unwrap().step().unwrap()).collect();
    assert_eq!(steps, [1, 0, -1]);
    assert_eq!(history[0].next, ["boom"]);
    assert_eq!(history[0].values, json!({"n": 1}));
}

#[test]
fn a_growing_append_channel_is_stored_incrementally() {
    let h = Harness::new();
    let g = Graph::builder()
        .state("log", ChannelSpec::reducer(Reducer::Append))
        .node("tick", |s| Ok(Update::new().set("log", json!([format!("entry {}", strs(s, "log").len())]))))
        .edge(START, "tick")
        .conditional_edges("tick", |s| {
            Ok(vec![if strs(s, "log").len() < 40 { Goto::node("tick") } else { Goto::end() }])
        })
        .recursion_limit(100)
        .compile(h.db.checkpointer())
        .unwrap();
    let cfg = CheckpointConfig::thread("grow");
    let out = g.invoke(Some(json!({"log": []})), &cfg).unwrap();
    assert_eq!(out["log"].as_array().unwrap().len(), 40);
    h.db.flush().unwrap();
    let conn = agentstate::rusqlite::Connection::open(&h.path).unwrap();
    let deltas: i64 = conn
        .query_row("SELECT count(*) FROM checkpoint_blobs WHERE channel = 'log' AND chain > 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(deltas > 10, "only {deltas} incremental rows");
    // Read back cold: the whole list.
    let fresh = Db::open(&h.path).unwrap().checkpointer();
    let t = fresh.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(t.checkpoint.channel_values["log"].to_value(), out["log"]);
}

#[test]
fn breakpoints_on_every_node() {
    let h = Harness::new();
    let counts = Counts::default();
    let g = abc(&counts).interrupt_before(["*"]).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("star");
    // "*" stops before a, b and c, not before __start__ (hidden in LangGraph).
    let mut out = g.invoke(Some(json!({"items": [], "count": 0})), &cfg).unwrap();
    let mut stops = 0;
    while !g.next_tasks(&cfg).unwrap().is_empty() {
        stops += 1;
        out = g.invoke(None, &cfg).unwrap();
        assert!(stops < 10);
    }
    assert_eq!(out["items"], json!(["a", "b", "c"]));
    assert_eq!(stops, 3);
}

#[test]
fn the_tasks_of_a_superstep_run_concurrently() {
    let h = Harness::new();
    // Three Sends to a node that sleeps.
    let g = Graph::builder()
        .state("results", ChannelSpec::reducer(Reducer::Append))
        .node("plan", |_| Ok(Update::new()))
        .node("worker", |s| {
            std::thread::sleep(std::time::Duration::from_millis(150));
            Ok(Update::new().set("results", json!([py_str(s.get("topic"))])))
        })
        .edge(START, "plan")
        .conditional_edges("plan", |_| {
            Ok(["t1", "t2", "t3"]
                .iter()
                .map(|t| Goto::Send(Send::new("worker", json!({"topic": t}))))
                .collect())
        })
        .compile(h.db.checkpointer())
        .unwrap();
    let started = std::time::Instant::now();
    let out = g.invoke(Some(json!({"results": []})), &CheckpointConfig::thread("par")).unwrap();
    let took = started.elapsed();
    assert_eq!(out["results"], json!(["t1", "t2", "t3"]), "applied in task path order, not finish order");
    assert!(took < std::time::Duration::from_millis(420), "took {took:?}");
}
