//! Random graphs against LangGraph 1.2.22: `tests/fixtures/engine/random_graphs.json`
//! (`tools/engine_goldens/random_graphs.py`) holds small graphs generated
//! from a seed as declarative JSON specs, and what LangGraph stored running
//! them. This test builds each graph from its spec alone (one interpreter,
//! no per-graph code), runs the recorded calls on its thread and compares
//! every checkpoint, pending write, next task, output, error and node
//! execution count with the golden harness (`tests/engine_golden/harness.rs`).
//!
//! Each graph is checked on its own (its calls and checkpoints cut out of the
//! fixture, checkpoint names renumbered from `c0`) so that a failure names the
//! graph; then, if all pass, the whole file as one run.
//! `ENGINE_RANDOM_FIXTURE=<path>` checks another fixture generated with
//! `RANDOM_GRAPHS_SEED` / `RANDOM_GRAPHS_N` (see the README);
//! `ENGINE_RANDOM_KEEP=<dir>` copies a failing graph's file there.

#[path = "engine_golden/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use agentstate::engine::{
    interrupt, ChannelSpec, Goto, Graph, GraphBuilder, NodeError, Reducer, Send, State, Update, END,
};
use harness::{counted, fixture, int, one_task_path, Counts, Harness};
use serde_json::{json, Map, Value};

/// `value(e)` of the spec: `(sum of terms + add) % 7`; a missing int reads
/// 0, a missing list has length 0, `{"arg": true}` is the Send argument
/// (absent, 0, when the node runs from an edge), `{"answer": j}` what the
/// node's j-th `interrupt()` returned.
fn value(s: &State, e: &Value, answers: &[i64]) -> i64 {
    let terms = e["terms"].as_array().unwrap();
    let sum: i64 = terms
        .iter()
        .map(|t| {
            if let Some(k) = t["int"].as_str() {
                int(s, k)
            } else if let Some(k) = t["len"].as_str() {
                s.get(k).and_then(Value::as_array).map_or(0, |a| a.len() as i64)
            } else if let Some(j) = t["answer"].as_u64() {
                answers[j as usize]
            } else {
                assert_eq!(t["arg"], true, "unknown term {t}");
                int(s, "arg")
            }
        })
        .sum();
    (sum + e["add"].as_i64().unwrap()).rem_euclid(7)
}

/// A node's function (see `nodes` in `SEMANTICS`): counts its runs on the
/// thread if it can fail (one graph per thread here, so one counter per
/// build), asks its `interrupt()`s, fails on its first `fail.runs` runs,
/// writes.
fn node_fn(
    node: &Value,
    types: &Map<String, Value>,
) -> impl Fn(&State) -> Result<Update, NodeError> + std::marker::Send + Sync + 'static {
    let name = node["name"].as_str().unwrap().to_string();
    let writes = node["writes"].as_array().unwrap().clone();
    let asks = node.get("interrupt").filter(|v| !v.is_null()).cloned();
    let fail = node.get("fail").filter(|v| !v.is_null()).cloned();
    let types = types.clone();
    let runs = Arc::new(Mutex::new(0_i64));
    move |s| {
        let mut r = 0;
        if fail.is_some() {
            let mut n = runs.lock().unwrap();
            *n += 1;
            r = *n;
        }
        let mut answers = Vec::new();
        for e in asks.iter().flat_map(|a| a["asks"].as_array().unwrap()) {
            let answer = interrupt(json!(format!("{name}?{}", value(s, e, &[]))))?;
            answers.push(answer.as_i64().unwrap_or_else(|| panic!("{name}: answer {answer} is no int")));
        }
        if let Some(f) = &fail {
            if r <= f["runs"].as_i64().unwrap() {
                return Err(NodeError::with_kind(
                    f["class"].as_str().unwrap(),
                    format!("{name} failed ({r})"),
                ));
            }
        }
        let mut out = Map::new();
        for w in &writes {
            let key = w["key"].as_str().unwrap();
            let v = value(s, w, &answers);
            let item = match types[key].as_str().unwrap() {
                "int" => json!(v),
                "list" => json!([format!("{name}:{v}")]),
                _ => json!([{"role": "assistant", "content": format!("{name}:{v}"), "id": format!("m{v}")}]),
            };
            out.insert(key.to_string(), item);
        }
        if let Some(a) = &asks {
            let echo = a["echo"].as_str().unwrap();
            let said: Vec<String> = answers.iter().map(i64::to_string).collect();
            let item = json!(format!("{name}?{}", said.join(",")));
            match out.get_mut(echo) {
                Some(Value::Array(items)) => items.push(item),
                _ => {
                    out.insert(echo.to_string(), json!([item]));
                }
            }
        }
        Ok(out.into_iter().fold(Update::new(), |u, (k, v)| u.set(&k, v)))
    }
}

/// The graph a spec describes (see `SEMANTICS` in random_graphs.py).
fn build(spec: &Value, counts: &Counts) -> GraphBuilder {
    build_with_limit(spec, counts, spec["recursion_limit"].as_i64())
}

/// [`build`] with the recursion limit of the calls' config: LangGraph's
/// `recursion_limit` config key applies to subgraphs too, ours is the
/// builder's, so a subgraph node's builder gets the parent's.
fn build_with_limit(spec: &Value, counts: &Counts, limit: Option<i64>) -> GraphBuilder {
    let mut b = Graph::builder();
    let mut types = Map::new();
    for kv in spec["state"].as_array().unwrap() {
        let (key, typ) = (kv[0].as_str().unwrap(), kv[1].as_str().unwrap());
        types.insert(key.into(), json!(typ));
        b = b.state(
            key,
            match typ {
                "int" => ChannelSpec::last_value(),
                "list" => ChannelSpec::reducer(Reducer::Append),
                "messages" => ChannelSpec::reducer(Reducer::Messages),
                other => panic!("unknown state type {other}"),
            },
        );
    }
    for node in spec["nodes"].as_array().unwrap() {
        let name = node["name"].as_str().unwrap();
        b = match node.get("subgraph").filter(|v| !v.is_null()) {
            Some(sub) => b.subgraph(name, build_with_limit(sub, counts, limit)),
            None => b.node(name, counted(counts, name, node_fn(node, &types))),
        };
    }
    for e in spec["edges"].as_array().unwrap() {
        b = b.edge(e[0].as_str().unwrap(), e[1].as_str().unwrap());
    }
    for j in spec["joins"].as_array().unwrap() {
        let from: Vec<String> = j[0].as_array().unwrap().iter().map(|x| x.as_str().unwrap().into()).collect();
        b = b.join(from, j[1].as_str().unwrap());
    }
    for r in spec["routers"].as_array().unwrap() {
        let r = r.clone();
        b = b.conditional_edges(r["source"].as_str().unwrap().to_string(), move |s| {
            let stop = &r["stop"];
            if !stop.is_null() {
                let len = s.get(stop["len"].as_str().unwrap()).and_then(Value::as_array).map_or(0, Vec::len);
                if len as i64 >= stop["at_least"].as_i64().unwrap() {
                    return Ok(vec![Goto::end()]);
                }
            }
            let choices = r["choices"].as_array().unwrap();
            let pick = int(s, r["on"].as_str().unwrap()).rem_euclid(choices.len() as i64) as usize;
            Ok(choices[pick]
                .as_array()
                .unwrap()
                .iter()
                .map(|item| match item {
                    Value::String(n) if n == END => Goto::end(),
                    Value::String(n) => Goto::node(n.clone()),
                    send => Goto::Send(Send::new(
                        send["send"].as_str().unwrap(),
                        json!({"arg": value(s, &send["arg"], &[])}),
                    )),
                })
                .collect())
        });
    }
    let names = |k: &str| -> Vec<String> {
        spec[k].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    b = b.interrupt_before(names("interrupt_before")).interrupt_after(names("interrupt_after"));
    if let Some(limit) = limit {
        b = b.recursion_limit(limit);
    }
    b
}

/// `s` with every checkpoint name `c<N>` (a whole token: not after a letter,
/// digit or `_`, not followed by a digit) renumbered by `f`.
fn renumber_str(s: &str, f: &impl Fn(usize) -> usize) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let starts = b[i] == b'c'
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && b.get(i + 1).is_some_and(u8::is_ascii_digit);
        if starts {
            let end = (i + 1..b.len()).find(|&j| !b[j].is_ascii_digit()).unwrap_or(b.len());
            out.push_str(&format!("c{}", f(s[i + 1..end].parse().unwrap())));
            i = end;
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn renumber(v: &Value, f: &impl Fn(usize) -> usize) -> Value {
    match v {
        Value::String(s) => Value::String(renumber_str(s, f)),
        Value::Array(a) => Value::Array(a.iter().map(|x| renumber(x, f)).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (renumber_str(k, f), renumber(x, f))).collect())
        }
        other => other.clone(),
    }
}

/// The fixture cut down to thread `thread`: its calls and checkpoints, the
/// checkpoints renamed `c0..` (a thread's checkpoints are consecutive in the
/// file: the graphs run one after the other).
fn one_thread(fx: &Value, thread: &str) -> Value {
    let of_thread = |k: &str| -> Vec<Value> {
        fx["normalized"][k].as_array().unwrap().iter().filter(|c| c["thread_id"] == thread).cloned().collect()
    };
    let (calls, checkpoints) = (of_thread("calls"), of_thread("checkpoints"));
    let index = |c: &Value| c["checkpoint_id"].as_str().unwrap()[1..].parse::<usize>().unwrap();
    let first = checkpoints.first().map_or(0, index);
    for (i, c) in checkpoints.iter().enumerate() {
        assert_eq!(index(c), first + i, "{thread}: checkpoints not consecutive");
    }
    let count = checkpoints.len();
    let shift = |n: usize| {
        assert!(n >= first && n < first + count, "{thread}: c{n} is another thread's");
        n - first
    };
    let mut out = fx.clone();
    out["normalized"] = json!({
        "calls": renumber(&Value::Array(calls), &shift),
        "checkpoints": renumber(&Value::Array(checkpoints), &shift),
    });
    // The `__resume__` values that depend on the saver, of this thread's
    // checkpoints.
    let ours = |d: &&Value| (first..first + count).contains(&index(d));
    let dependent: Vec<Value> = fx["saver_dependent"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(ours)
        .map(|d| renumber(d, &shift))
        .collect();
    out["saver_dependent"] = Value::Array(dependent);
    out
}

fn panic_text(p: &(dyn std::any::Any + std::marker::Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn random_graphs() {
    let fx = match std::env::var("ENGINE_RANDOM_FIXTURE") {
        Ok(path) => serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap(),
        Err(_) => fixture("random_graphs"),
    };
    let graphs = fx["graphs"].as_object().unwrap();
    let mut keys: Vec<&String> = graphs.keys().collect();
    keys.sort_by_key(|k| k[1..].parse::<usize>().unwrap());
    let mut failures = Vec::new();
    for key in &keys {
        let spec = &graphs[key.as_str()]["spec"];
        let thread = format!("t{}", spec["index"]);
        assert_eq!(fx["threads"][&thread], json!(key), "graph {key} runs on {thread}");
        let sub = one_thread(&fx, &thread);
        let mut h = Harness::new();
        let b = build(spec, &h.counts);
        h.graph(&thread, key, b);
        let outcome = catch_unwind(AssertUnwindSafe(|| h.check_adjusted(&sub, one_task_path)));
        if let Err(p) = outcome {
            // ENGINE_RANDOM_KEEP=<dir>: keep the failing graph's file.
            if let Ok(dir) = std::env::var("ENGINE_RANDOM_KEEP") {
                h.db.flush().unwrap();
                for ext in ["", "-wal", "-shm"] {
                    let from = format!("{}{ext}", h.path.display());
                    if std::path::Path::new(&from).exists() {
                        std::fs::copy(&from, format!("{dir}/{key}.db{ext}")).unwrap();
                    }
                }
            }
            failures.push(format!("graph {key} (thread {thread}): {}\n  spec: {spec}", panic_text(&*p)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} random graphs differ from LangGraph:\n{}",
        failures.len(),
        keys.len(),
        failures.join("\n")
    );
    // The whole file as one run, every graph on its thread.
    let mut h = Harness::new();
    for key in &keys {
        let spec = &graphs[key.as_str()]["spec"];
        let b = build(spec, &h.counts);
        h.graph(&format!("t{}", spec["index"]), key, b);
    }
    h.check_adjusted(&fx, one_task_path);
}
