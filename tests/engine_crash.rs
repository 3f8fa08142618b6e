//! A SIGKILL during a graph run: the resumed run never reruns a task whose
//! writes were stored, and it ends in the state an uninterrupted run reaches.
//!
//! Random layered graphs (1-3 nodes per layer, every node of a layer feeding
//! every node of the next, a conditional edge from the last layer back to the
//! first until the log is long enough); every node sleeps a little (so kills
//! land inside supersteps, between tasks of one superstep, and between a
//! task's return and its stored writes), appends its name to an `Append`
//! channel, and notes each start in a side file. A child process runs the
//! graph on a file; the parent kills it at a random moment, reads which tasks
//! of the interrupted superstep have stored writes, resumes with
//! `invoke(None)`, and checks the side file and the final state. Twice: with
//! `Durability::Sync`, and with `Durability::Async` on a write-behind `Db`
//! (the child's writes are queued and committed behind its run, so a kill
//! also loses a suffix of them).

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use agentstate::engine::{
    ChannelSpec, CompiledGraph, Durability, Goto, Graph, Reducer, State, Update, END, START,
};
use agentstate::{CheckpointConfig, Db};
use common::harness::{child_command, child_env, soak};
use common::{seed_from_env, Rng};
use serde_json::{json, Value};

const PARENT: &str = "sigkill_during_a_run_never_reruns_a_stored_task";

/// Layers of node names for `seed`, and the log length that ends the loop.
fn shape(seed: u64) -> (Vec<Vec<String>>, usize) {
    let mut rng = Rng::new(seed);
    let layers = rng.range(1, 4) as usize;
    let mut names = vec![];
    for l in 0..layers {
        names.push((0..rng.range(1, 3)).map(|i| format!("n{l}{i}")).collect());
    }
    (names, rng.range(6, 14) as usize)
}

fn log_len(s: &State) -> usize {
    s.get("log").and_then(Value::as_array).map_or(0, Vec::len)
}

/// The graph of `seed`; nodes note their starts in `side` (if any).
fn graph(seed: u64, db: &Db, side: Option<&Path>) -> CompiledGraph {
    let (layers, until) = shape(seed);
    let mut b = Graph::builder().state("log", ChannelSpec::reducer(Reducer::Append)).recursion_limit(200);
    for layer in &layers {
        for name in layer {
            let (name, side) = (name.clone(), side.map(Path::to_path_buf));
            b = b.node(name.clone(), move |s| {
                let at = log_len(s);
                if let Some(side) = &side {
                    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(side).unwrap();
                    f.write_all(format!("{name} {at}\n").as_bytes()).unwrap();
                }
                let salt = name.bytes().fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
                let pause = (seed ^ (at as u64 * 7919) ^ salt.wrapping_mul(0x9e37_79b9)) % 8000;
                std::thread::sleep(Duration::from_micros(pause));
                Ok(Update::new().set("log", json!([format!("{name}@{at}")])))
            });
        }
    }
    for n in &layers[0] {
        b = b.edge(START, n.clone());
    }
    for w in layers.windows(2) {
        for from in &w[0] {
            for to in &w[1] {
                b = b.edge(from.clone(), to.clone());
            }
        }
    }
    let last = layers.last().unwrap();
    let first = layers[0].clone();
    for (i, from) in last.iter().enumerate() {
        if i == 0 {
            let first = first.clone();
            b = b.conditional_edges(from.clone(), move |s| {
                Ok(if log_len(s) < until {
                    first.iter().map(|n| Goto::node(n.clone())).collect()
                } else {
                    vec![Goto::end()]
                })
            });
        } else {
            b = b.edge(from.clone(), END);
        }
    }
    b.compile(db.checkpointer()).unwrap()
}

#[test]
#[ignore = "child-process entry point: run by sigkill_during_a_run_never_reruns_a_stored_task"]
fn engine_crash_child() {
    let path = child_env("AGENTSTATE_ENGINE_CHILD", PARENT);
    let seed: u64 = child_env("AGENTSTATE_ENGINE_CHILD_SEED", PARENT).parse().unwrap();
    let async_mode = std::env::var("AGENTSTATE_ENGINE_CHILD_ASYNC").is_ok_and(|v| v == "1");
    let db = Db::builder().write_behind(async_mode).open(&path).unwrap();
    let mut g = graph(seed, &db, Some(Path::new(&format!("{path}.side"))));
    if async_mode {
        g = g.with_durability(Durability::Async);
    }
    println!("@ready");
    g.invoke(Some(json!({"log": ["in"]})), &CheckpointConfig::thread("t")).unwrap();
    println!("@done");
}

#[test]
fn sigkill_during_a_run_never_reruns_a_stored_task() {
    crash_rounds(false);
}

#[test]
fn sigkill_during_an_async_run_never_reruns_a_stored_task() {
    crash_rounds(true);
}

/// Kills children running random graphs (with `Durability::Async` on a
/// write-behind Db if `async_mode`), resumes each, checks.
fn crash_rounds(async_mode: bool) {
    let seed = seed_from_env("AGENTSTATE_SEED");
    let mut rng = Rng::new(seed);
    let exe = std::env::current_exe().unwrap();
    let (mut resumed, mut protected) = (0u64, 0u64);
    // At least 40 rounds, and more (up to ten times as many) until a kill has
    // landed inside a run and one between two tasks of a superstep: where
    // the kills land depends on the machine's speed.
    for round in 0..400 * soak(10) {
        if round >= 40 * soak(10) && resumed > 0 && protected > 0 {
            break;
        }
        let gseed = rng.next_u64();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.db");
        let side = dir.path().join("run.db.side");
        let mut child = child_command(&exe, "engine_crash_child")
            .env("AGENTSTATE_ENGINE_CHILD", &path)
            .env("AGENTSTATE_ENGINE_CHILD_SEED", gseed.to_string())
            .env("AGENTSTATE_ENGINE_CHILD_ASYNC", if async_mode { "1" } else { "0" })
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.range(5, 60)));
        let _ = child.kill();
        child.wait().unwrap();

        // What the file says about the interrupted superstep.
        let db = Db::builder().write_behind(async_mode).open(&path).unwrap();
        let mut g = graph(gseed, &db, Some(&side));
        if async_mode {
            g = g.with_durability(Durability::Async);
        }
        let thread = CheckpointConfig::thread("t");
        let snap = g.get_state(&thread).unwrap();
        let starts_before = std::fs::read_to_string(&side).unwrap_or_default().lines().count();
        let out = match &snap.config {
            None => g.invoke(Some(json!({"log": ["in"]})), &thread).unwrap(),
            Some(_) => {
                resumed += 1;
                g.invoke(None, &thread).unwrap()
            }
        };
        // No task with stored writes ran again in the superstep it belongs to.
        let at = snap.values.get("log").and_then(Value::as_array).map_or(0, Vec::len);
        let stored: BTreeSet<&str> =
            snap.tasks.iter().filter(|t| t.result.is_some()).map(|t| t.name.as_str()).collect();
        protected += stored.len() as u64;
        let side_text = std::fs::read_to_string(&side).unwrap_or_default();
        for line in side_text.lines().skip(starts_before) {
            let (name, line_at) = line.split_once(' ').unwrap();
            assert!(
                !(stored.contains(name) && line_at.parse::<usize>().unwrap() == at),
                "round {round} (graph seed {gseed}): {name} ran again at log length {at} after its writes were stored"
            );
        }
        // The same end as an uninterrupted run.
        let reference = graph(gseed, &Db::open_in_memory().unwrap(), None)
            .invoke(Some(json!({"log": ["in"]})), &CheckpointConfig::thread("t"))
            .unwrap();
        assert_eq!(out["log"], reference["log"], "round {round} (graph seed {gseed})");
    }
    let name = if async_mode { "engine_crash_async" } else { "engine_crash" };
    common::report(name, &[("resumed_runs", resumed), ("tasks_with_stored_writes", protected)]);
    assert!(resumed > 0, "no kill landed inside a run");
    assert!(
        protected > 0,
        "no kill landed between two tasks of a superstep: the rerun check checked nothing"
    );
}
