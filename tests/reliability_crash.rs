//! Crash safety: a child process writes in a loop and the parent kills it
//! with SIGKILL at random moments, hundreds of times, on one file that keeps
//! growing. After every kill the parent reopens the file and checks:
//!
//! - `PRAGMA integrity_check`, `foreign_key_check` and the file invariants
//!   of `common::check_file` (no checkpoint without its blobs, no write
//!   without its checkpoint, no vector without its item, parents resolve);
//! - every item has exactly its one vector, equal to the embedding of its
//!   text (never a stale or missing one);
//! - the whole state (every checkpoint with its values, metadata, parent and
//!   pending writes; every store item) equals a model of the acknowledged
//!   operations, plus the one operation in flight at the kill either wholly
//!   applied or wholly absent. So nothing acknowledged is lost and nothing
//!   is half-applied.
//!
//! The child reports on its stdout (a pipe) each operation before it calls
//! it (`@I <json>`) and after the call returned `Ok` (`@A`). Rounds
//! alternate `Durability::Full` and `Durability::Normal`: against a killed
//! process (not a power loss) both must keep every acknowledged write.
//!
//! `AGENTSTATE_CRASH_KILLS=n` sets the number of kills (default 400);
//! `AGENTSTATE_SOAK=1` makes it 3000. `AGENTSTATE_SEED` replays a run.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions};
use agentstate::{CheckpointConfig, Db, Durability};
use common::harness::{child_command, child_env, soaking, store_config};
use common::ops::{check_vectors, diff, execute, observe_file, s, State};
use common::{check_file, report, seed_from_env, Blobs, Rng};
use serde_json::{json, Map, Value};

const THREADS: [&str; 6] = ["t0", "t1", "t2", "t3", "t4", "t5"];
const NSS: [&str; 2] = ["", "sub:1"];
const STORE_NSS: [&[&str]; 3] = [&["mem", "a"], &["mem", "b"], &["docs"]];
const DIMS: usize = 64;
const WORDS: [&str; 12] = [
    "tea", "rain", "cats", "invoice", "refund", "lyon", "piano", "garden", "train", "moon", "bread", "chess",
];

// ---------------------------------------------------------------------------
// The child

/// The newest checkpoint of a (thread, namespace), as the child knows it.
#[derive(Clone, Debug)]
struct Head {
    id: String,
    step: i64,
    versions: ChannelVersions,
    values: Map<String, Value>,
}

fn say(out: &mut impl Write, line: &str) {
    // One write per line; the parent ignores a line the kill cut short.
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    out.write_all(&buf).unwrap();
    out.flush().unwrap();
}

const PARENT: &str = "sigkill_at_random_moments_loses_nothing";

/// The child's body: writes until its parent kills it.
#[test]
#[ignore = "child-process entry point: run by sigkill_at_random_moments_loses_nothing"]
fn crash_child() {
    let path = child_env("AGENTSTATE_CRASH_CHILD", PARENT);
    let seed: u64 = child_env("AGENTSTATE_CRASH_CHILD_SEED", PARENT).parse().unwrap();
    let durability = match std::env::var("AGENTSTATE_CRASH_CHILD_DURABILITY").as_deref() {
        Ok("full") => Durability::Full,
        _ => Durability::Normal,
    };
    let mut rng = Rng::new(seed);
    let mut out = std::io::stdout().lock();
    let db = Db::builder().durability(durability).open(&path).unwrap();
    let saver = db.checkpointer();
    let store = db.store(store_config(DIMS)).unwrap();
    let mut heads: BTreeMap<(String, String), Head> = BTreeMap::new();
    for t in THREADS {
        for ns in NSS {
            if let Some(tuple) = saver.get_tuple(&CheckpointConfig::thread(t).ns(ns)).unwrap() {
                let head = Head {
                    id: tuple.checkpoint.id.clone(),
                    step: tuple.metadata.step().unwrap(),
                    versions: tuple.checkpoint.channel_versions.clone(),
                    values: tuple.checkpoint.values_json(),
                };
                heads.insert((t.to_string(), ns.to_string()), head);
            }
        }
    }
    say(&mut out, "@ready");
    // Report the operation, run it, report that it returned Ok.
    let run = |out: &mut std::io::StdoutLock<'_>, op: &Value| {
        say(out, &format!("@I {op}"));
        execute(&saver, &store, op).unwrap();
        say(out, "@A");
    };
    let mut counter = rng.next_u64() % 1_000_000;
    loop {
        counter += 1;
        let roll = rng.below(100);
        let t = rng.pick(&THREADS).to_string();
        let ns = rng.pick(&NSS).to_string();
        let key = (t.clone(), ns.clone());
        if roll < 40 {
            // A step: a new checkpoint on the head, every changed
            // non-primitive channel in new_versions.
            let head = heads.get(&key);
            let step = head.map_or(-1, |h| h.step) + 1;
            let id = uuid6(Some(step)).to_string();
            let mut values = head.map(|h| h.values.clone()).unwrap_or_default();
            let mut versions = head.map(|h| h.versions.clone()).unwrap_or_default();
            let mut new_versions = ChannelVersions::new();
            let mut change = |ch: &str, v: Value, values: &mut Map<String, Value>| {
                let nv = next_version(versions.get(ch));
                versions.insert(ch.to_string(), nv.clone());
                new_versions.insert(ch.to_string(), nv);
                values.insert(ch.to_string(), v);
            };
            let mut messages: Vec<Value> =
                values.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
            messages.push(json!({"role": "ai", "content": format!("{t} step {step} {}", rng.pick(&WORDS))}));
            if messages.len() > 4 {
                messages.remove(0);
            }
            change("messages", Value::Array(messages), &mut values);
            change("count", json!(step), &mut values);
            if step % 3 == 0 || !values.contains_key("notes") {
                change("notes", json!({"step": step, "about": rng.pick(&WORDS)}), &mut values);
            }
            if step % 5 == 0 || !values.contains_key("flag") {
                change("flag", json!(step % 2 == 0), &mut values);
            }
            if rng.chance(15) || !values.contains_key("doc") {
                let n = rng.range(100, 20_000) as usize;
                change("doc", json!({"body": "d".repeat(n), "n": n}), &mut values);
            }
            let meta =
                json!({"source": "loop", "step": step, "run_id": format!("r{}", step % 3), "parents": {}});
            let new: Vec<&String> = new_versions.keys().collect();
            let op = json!({"op": "step", "t": t, "ns": ns, "id": id, "parent": head.map(|h| h.id.clone()),
                            "values": values, "versions": versions, "new": new, "meta": meta});
            run(&mut out, &op);
            heads.insert(key, Head { id, step, versions, values });
        } else if roll < 58 {
            // Pending writes on a head.
            let Some(head) = heads.get(&key) else { continue };
            let task = format!("task-{counter}");
            let mut writes: Vec<(String, Value)> = (0..rng.range(1, 4))
                .map(|i| (rng.pick(&["messages", "out", "notes"]).to_string(), json!({"task": task, "i": i})))
                .collect();
            if rng.chance(20) {
                writes.push(("__error__".into(), json!(format!("boom in {task}"))));
            }
            run(
                &mut out,
                &json!({"op": "writes", "t": t, "ns": ns, "id": head.id, "task": task, "writes": writes}),
            );
        } else if roll < 78 {
            // Store puts, one transaction.
            let items: Vec<(Vec<String>, String, Value)> = (0..rng.range(1, 4))
                .map(|_| {
                    let ns: Vec<String> = rng.pick(&STORE_NSS).iter().map(|s| s.to_string()).collect();
                    let key = format!("k{}", rng.below(30));
                    let text: Vec<&str> = (0..rng.range(1, 6)).map(|_| *rng.pick(&WORDS)).collect();
                    let mut v = json!({"text": text.join(" "), "n": counter});
                    if rng.chance(10) {
                        v["pad"] = json!("p".repeat(rng.range(1000, 30_000) as usize));
                    }
                    (ns, key, v)
                })
                .collect();
            run(&mut out, &json!({"op": "put", "items": items}));
        } else if roll < 86 {
            let ns = rng.pick(&STORE_NSS);
            run(&mut out, &json!({"op": "del", "ns": ns, "key": format!("k{}", rng.below(30))}));
        } else if roll < 89 {
            let ts: Vec<String> = (0..rng.range(1, 3)).map(|_| rng.pick(&THREADS).to_string()).collect();
            run(&mut out, &json!({"op": "prune", "t": ts}));
        } else if roll < 91 {
            run(&mut out, &json!({"op": "delete_thread", "t": t}));
            heads.retain(|(ht, _), _| *ht != t);
        } else {
            // Copy a thread onto an empty one.
            let empty: Vec<&str> =
                THREADS.iter().copied().filter(|d| !heads.keys().any(|(ht, _)| ht == d)).collect();
            if empty.is_empty() || !heads.keys().any(|(ht, _)| *ht == t) {
                continue;
            }
            let dst = rng.pick(&empty).to_string();
            run(&mut out, &json!({"op": "copy", "src": t, "dst": dst}));
            let copied: Vec<((String, String), Head)> = heads
                .iter()
                .filter(|((ht, _), _)| *ht == t)
                .map(|((_, hns), h)| ((dst.clone(), hns.clone()), h.clone()))
                .collect();
            heads.extend(copied);
        }
    }
}

// ---------------------------------------------------------------------------
// The parent

#[derive(Default)]
struct Figures {
    kills: u64,
    kills_full: u64,
    kills_during_open: u64,
    kills_between_ops: u64,
    in_flight: BTreeMap<String, u64>,
    in_flight_applied: u64,
    acked: BTreeMap<String, u64>,
}

/// One round: start the child, let it run, kill it; return its report
/// lines (complete lines only) and whether it got to `@ready`.
fn run_child(exe: &Path, path: &Path, seed: u64, full: bool, rng: &mut Rng) -> (Vec<String>, bool) {
    let mut child = child_command(exe, "crash_child")
        .env("AGENTSTATE_CRASH_CHILD", path)
        .env("AGENTSTATE_CRASH_CHILD_SEED", seed.to_string())
        .env("AGENTSTATE_CRASH_CHILD_DURABILITY", if full { "full" } else { "normal" })
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                // A line the kill cut short has no newline: dropped.
                Ok(_) if buf.last() == Some(&b'\n') => {
                    // The harness may have written "test crash_child ... "
                    // before the first report on the same line.
                    let line = String::from_utf8_lossy(&buf[..buf.len() - 1]);
                    if let Some(at) = line.find('@') {
                        if tx.send(line[at..].to_string()).is_err() {
                            return;
                        }
                    }
                }
                Ok(_) => {}
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut lines = vec![];
    let early = rng.chance(8);
    let mut ready = false;
    if early {
        // Kill it while it opens the file.
        std::thread::sleep(Duration::from_micros(rng.below(15_000)));
    } else {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) => {
                    ready = l == "@ready";
                    lines.push(l);
                }
                Err(_) => break,
            }
        }
        assert!(ready, "child never got ready: {}", {
            let _ = child.kill();
            let _ = child.wait();
            err_reader.join().unwrap()
        });
        // A kill every few ms of child runtime, sometimes at once.
        let wait = if rng.chance(10) { 0 } else { rng.below(25_000) };
        std::thread::sleep(Duration::from_micros(wait));
    }
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the child exited by itself ({status}): {}", err_reader.join().unwrap());
    }
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success());
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let _ = err_reader.join();
    let ready = ready || lines.iter().any(|l| l == "@ready");
    (lines, ready)
}

#[test]
fn sigkill_at_random_moments_loses_nothing() {
    let kills: u64 = match std::env::var("AGENTSTATE_CRASH_KILLS").ok().and_then(|v| v.parse().ok()) {
        Some(n) => n,
        None if soaking() => 3000,
        None => 400,
    };
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!("crash test: {kills} kills, AGENTSTATE_SEED={seed}");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let exe = std::env::current_exe().unwrap();
    let mut model = State::default();
    let mut fig = Figures::default();
    let started = Instant::now();
    let mut checked_ops = 0u64;
    for round in 0..kills {
        let full = round % 2 == 0;
        let (lines, ready) = run_child(&exe, &path, seed.wrapping_add(round), full, &mut rng);
        fig.kills += 1;
        fig.kills_full += u64::from(full);
        if !ready {
            fig.kills_during_open += 1;
        }
        // Acknowledged operations, and the one in flight.
        let mut pending: Option<Value> = None;
        for line in &lines {
            if let Some(json) = line.strip_prefix("@I ") {
                assert!(pending.is_none(), "two intents without an ack");
                pending = Some(serde_json::from_str(json).unwrap());
            } else if line == "@A" {
                let op = pending.take().expect("an ack without an intent");
                *fig.acked.entry(s(&op["op"])).or_default() += 1;
                model.apply(&op);
            }
        }
        let got = observe_file(&path, &THREADS, store_config(DIMS))
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        checked_ops = fig.acked.values().sum();
        match pending {
            None => {
                if ready {
                    fig.kills_between_ops += 1;
                }
                assert!(
                    got == model,
                    "round {round} (seed {seed}): state differs from the acknowledged operations:\n{}",
                    diff(&got, &model)
                );
            }
            Some(op) => {
                *fig.in_flight.entry(s(&op["op"])).or_default() += 1;
                let mut with = model.clone();
                with.apply(&op);
                if got == with {
                    fig.in_flight_applied += 1;
                    model = with;
                } else {
                    assert!(
                        got == model,
                        "round {round} (seed {seed}): the operation in flight {op} is half-applied, or an \
                         acknowledged one is lost:\nagainst the acknowledged state:\n{}\nagainst it applied:\n{}",
                        diff(&got, &model),
                        diff(&got, &with)
                    );
                }
            }
        }
        if let Err(bad) = check_file(&path, Blobs::AllPresent) {
            panic!("round {round} (seed {seed}): {}", bad.join("\n"));
        }
        check_vectors(&path, DIMS).unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
    }
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!("in flight at the kill, by operation: {:?}", fig.in_flight);
    eprintln!("acknowledged and checked, by operation: {:?}", fig.acked);
    report(
        "crash",
        &[
            ("kills", fig.kills),
            ("kills_full", fig.kills_full),
            ("kills_normal", fig.kills - fig.kills_full),
            ("kills_during_open", fig.kills_during_open),
            ("kills_between_ops", fig.kills_between_ops),
            ("kills_in_flight", fig.in_flight.values().sum()),
            ("in_flight_applied", fig.in_flight_applied),
            ("acked_ops_checked", checked_ops),
            ("final_checkpoints", model.cps.len() as u64),
            ("final_items", model.items.len() as u64),
            ("file_bytes", size),
            ("seconds", started.elapsed().as_secs()),
        ],
    );
    assert!(checked_ops > 0 && fig.in_flight.values().sum::<u64>() > 0);
}
