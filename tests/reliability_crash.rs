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
use agentstate::{CheckpointConfig, CheckpointTuple, Checkpointer, Db, Durability};
use common::harness::{child_command, child_env, soaking, store_config};
use common::ops::{check_vectors, diff, execute, observe_file, s, State};
use common::{check_file_with, report, seed_from_env, Blobs, Parents, Rng};
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
    parent: Option<String>,
    step: i64,
    versions: ChannelVersions,
    values: Map<String, Value>,
}

impl Head {
    fn of(tuple: &CheckpointTuple) -> Head {
        Head {
            id: tuple.checkpoint.id.clone(),
            parent: tuple.parent_config.as_ref().and_then(|c| c.checkpoint_id.clone()),
            step: tuple.metadata.step().unwrap(),
            versions: tuple.checkpoint.channel_versions.clone(),
            values: tuple.checkpoint.values_json(),
        }
    }
}

/// The newest checkpoint of every (thread, namespace) in the file.
fn load_heads(saver: &Checkpointer) -> BTreeMap<(String, String), Head> {
    let mut heads = BTreeMap::new();
    for t in THREADS {
        for ns in NSS {
            if let Some(tuple) = saver.get_tuple(&CheckpointConfig::thread(t).ns(ns)).unwrap() {
                heads.insert((t.to_string(), ns.to_string()), Head::of(&tuple));
            }
        }
    }
    heads
}

fn say(out: &mut impl Write, line: &str) {
    // One write per line; the parent ignores a line the kill cut short.
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    out.write_all(&buf).unwrap();
    out.flush().unwrap();
}

/// An entry of the `log` channel: about 200 bytes, so that the list passes
/// the 8 KiB above which appends are stored as incremental blobs after about
/// 40 entries (and 16 entries for the step API).
fn log_entry(t: &str, step: i64, n: u64) -> Value {
    json!({"role": "ai", "content": format!("{t} step {step} entry {n} {}", "l".repeat(150))})
}

/// The `log` list is started afresh (a whole blob again) at this length.
const LOG_CAP: usize = 90;

const PARENT: &str = "sigkill_at_random_moments_loses_nothing";

/// The child's body: writes until its parent kills it.
#[test]
#[ignore = "child-process entry point: run by sigkill_at_random_moments_loses_nothing and long_lived_children_killed_lose_nothing"]
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
    let mut heads = load_heads(&saver);
    say(&mut out, "@ready");
    // Report the operation, run it, report that it returned Ok (with the id
    // it created, if any).
    let run = |out: &mut std::io::StdoutLock<'_>, op: &Value| -> Option<String> {
        say(out, &format!("@I {op}"));
        let id = execute(&saver, &store, op).unwrap();
        match &id {
            Some(id) => say(out, &format!("@A {id}")),
            None => say(out, "@A"),
        }
        id
    };
    let mut counter = rng.next_u64() % 1_000_000;
    loop {
        counter += 1;
        let roll = rng.below(100);
        let t = rng.pick(&THREADS).to_string();
        let ns = rng.pick(&NSS).to_string();
        let key = (t.clone(), ns.clone());
        if roll < 30 {
            // A step through `put`: a new checkpoint on the head, every
            // changed non-primitive channel in new_versions.
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
            // The log only grows (an incremental blob once it is long).
            let mut log: Vec<Value> =
                values.get("log").and_then(Value::as_array).cloned().unwrap_or_default();
            if log.len() >= LOG_CAP {
                log.clear();
            }
            log.extend((0..rng.range(1, 4)).map(|n| log_entry(&t, step, n)));
            change("log", Value::Array(log), &mut values);
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
                json!({"source": "loop", "step": step, "run_id": format!("r{}", step % 7), "parents": {}});
            let new: Vec<&String> = new_versions.keys().collect();
            let parent = head.map(|h| h.id.clone());
            let op = json!({"op": "step", "t": t, "ns": ns, "id": id, "parent": parent,
                            "values": values, "versions": versions, "new": new, "meta": meta});
            run(&mut out, &op);
            heads.insert(key, Head { id, parent, step, versions, values });
        } else if roll < 42 {
            // A step through the step API: `start`, `step` or `step(..).fork()`
            // from the head's parent, appending to the log; some with a
            // checkpointer that applies retention on write.
            let head = heads.get(&key);
            let fork_from = head.and_then(|h| h.parent.clone()).filter(|_| rng.chance(15));
            let (parent, mut values, base_step) = match (&fork_from, head) {
                (Some(p), _) => {
                    let config = CheckpointConfig::thread(&t).ns(&ns).at(p);
                    let Some(tuple) = saver.get_tuple(&config).unwrap() else { continue };
                    (Some(p.clone()), tuple.checkpoint.values_json(), tuple.metadata.step().unwrap())
                }
                (None, Some(h)) => (Some(h.id.clone()), h.values.clone(), h.step),
                (None, None) => (None, Map::new(), -1),
            };
            let step = base_step + 1;
            let mut set = Map::new();
            let mut append = Map::new();
            set.insert("count".into(), json!(step));
            if rng.chance(30) {
                set.insert("notes".into(), json!({"step": step, "via": "step api"}));
            }
            let items: Vec<Value> = (0..rng.range(1, 4)).map(|n| log_entry(&t, step, n)).collect();
            match values.get("log").and_then(Value::as_array) {
                Some(log) if log.len() < LOG_CAP => {
                    let mut log = log.clone();
                    log.extend(items.iter().cloned());
                    values.insert("log".into(), Value::Array(log));
                    append.insert("log".into(), Value::Array(items));
                }
                _ => {
                    set.insert("log".into(), Value::Array(items));
                }
            }
            for (k, v) in &set {
                values.insert(k.clone(), v.clone());
            }
            let meta =
                json!({"source": "loop", "step": step, "run_id": format!("r{}", step % 7), "parents": {}});
            let retain = rng.chance(25).then(|| rng.range(1, 6));
            // Some steps store their parent's last writes with them
            // (`Step::parent_writes`: one transaction).
            let parent_writes = (parent.is_some() && rng.chance(30)).then(|| {
                let task = format!("task-{counter}-p");
                json!({"task": task, "writes": [["out", {"task": task}], ["notes", step]]})
            });
            let op = json!({"op": "next", "t": t, "ns": ns, "parent": parent, "fork": fork_from.is_some(),
                            "set": set, "append": append, "meta": meta, "retain": retain, "values": values,
                            "parent_writes": parent_writes});
            let id = run(&mut out, &op).unwrap();
            let tuple = saver.get_tuple(&CheckpointConfig::thread(&t).ns(&ns)).unwrap().unwrap();
            assert_eq!(tuple.checkpoint.id, id);
            heads.insert(key, Head::of(&tuple));
        } else if roll < 56 {
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
        } else if roll < 72 {
            // Store puts, one transaction; some with a TTL of 0 (expired at
            // once, for the sweep).
            let items: Vec<Value> = (0..rng.range(1, 4))
                .map(|_| {
                    let ns: Vec<String> = rng.pick(&STORE_NSS).iter().map(|s| s.to_string()).collect();
                    let key = format!("k{}", rng.below(30));
                    let text: Vec<&str> = (0..rng.range(1, 6)).map(|_| *rng.pick(&WORDS)).collect();
                    let mut v = json!({"text": text.join(" "), "n": counter});
                    if rng.chance(10) {
                        v["pad"] = json!("p".repeat(rng.range(1000, 30_000) as usize));
                    }
                    if rng.chance(10) {
                        json!([["tmp"], key, v, 0])
                    } else {
                        json!([ns, key, v])
                    }
                })
                .collect();
            run(&mut out, &json!({"op": "put", "items": items}));
        } else if roll < 79 {
            let ns = rng.pick(&STORE_NSS);
            run(&mut out, &json!({"op": "del", "ns": ns, "key": format!("k{}", rng.below(30))}));
        } else if roll < 82 {
            let ts: Vec<String> = (0..rng.range(1, 3)).map(|_| rng.pick(&THREADS).to_string()).collect();
            run(&mut out, &json!({"op": "prune", "t": ts}));
        } else if roll < 84 {
            run(&mut out, &json!({"op": "delete_thread", "t": t}));
            heads.retain(|(ht, _), _| *ht != t);
        } else if roll < 87 {
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
        } else if roll < 90 {
            // fork / fork_with from the head's parent.
            let Some(at) = heads.get(&key).and_then(|h| h.parent.clone()) else { continue };
            let Some(base) = saver.get_tuple(&CheckpointConfig::thread(&t).ns(&ns).at(&at)).unwrap() else {
                continue;
            };
            let base_step = base.metadata.step().unwrap();
            let mut set = Map::new();
            if rng.chance(60) {
                set.insert("notes".into(), json!({"forked": counter}));
            }
            let (source, step) = if set.is_empty() { ("fork", base_step) } else { ("update", base_step + 1) };
            let mut values = base.checkpoint.values_json();
            values.extend(set.clone());
            let meta = json!({"source": source, "step": step, "parents": {}});
            let op = json!({"op": "fork_with", "t": t, "ns": ns, "at": at, "set": set, "values": values,
                            "meta": meta});
            let id = run(&mut out, &op).unwrap();
            let tuple = saver.get_tuple(&CheckpointConfig::thread(&t).ns(&ns)).unwrap().unwrap();
            assert_eq!(tuple.checkpoint.id, id);
            heads.insert(key, Head::of(&tuple));
        } else if roll < 92 {
            let exempt: Vec<&str> = if rng.chance(50) { vec![*rng.pick(&THREADS)] } else { vec![] };
            run(&mut out, &json!({"op": "retain", "keep": rng.range(1, 8), "exempt": exempt}));
        } else if roll < 94 {
            run(&mut out, &json!({"op": "delete_runs", "runs": [format!("r{}", rng.below(7))]}));
            heads = load_heads(&saver);
        } else if roll < 96 {
            run(&mut out, &json!({"op": "reindex"}));
        } else if roll < 98 {
            run(&mut out, &json!({"op": "sweep"}));
        } else if roll < 99 {
            run(&mut out, &json!({"op": "vacuum"}));
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
    longest_child_ms: u64,
}

/// How long a child lives before the kill.
#[derive(Clone, Copy)]
enum Life {
    /// 0-25 ms after it is ready (10% at once), or 8% while it opens the
    /// file.
    Short,
    /// `lo..hi` milliseconds after it is ready.
    Long(u64, u64),
}

/// One round: start the child, let it run, kill it; return its report
/// lines (complete lines only) and whether it got to `@ready`.
fn run_child(
    exe: &Path,
    path: &Path,
    seed: u64,
    full: bool,
    life: Life,
    rng: &mut Rng,
    fig: &mut Figures,
) -> (Vec<String>, bool) {
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
    let early = matches!(life, Life::Short) && rng.chance(8);
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
        let wait = match life {
            // A kill every few ms of child runtime, sometimes at once.
            Life::Short if rng.chance(10) => 0,
            Life::Short => rng.below(25_000),
            Life::Long(lo, hi) => rng.range(lo, hi) * 1000,
        };
        let until = Instant::now() + Duration::from_micros(wait);
        // Read while the child runs (a long-lived child fills the pipe).
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(l) => lines.push(l),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        fig.longest_child_ms = fig.longest_child_ms.max(wait / 1000);
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

/// The ids of (thread, ns) checkpoints in `got` that `model` lacks.
fn new_ids(got: &State, model: &State, t: &str, ns: &str) -> Vec<String> {
    got.cps
        .keys()
        .filter(|k| k.0 == t && k.1 == ns && !model.cps.contains_key(*k))
        .map(|k| k.2.clone())
        .collect()
}

/// Applies the round's acknowledged operations to `model`, then checks the
/// file against it (the operation in flight wholly applied or wholly
/// absent), its invariants and its vectors.
fn check_round(path: &Path, lines: &[String], ready: bool, model: &mut State, fig: &mut Figures, at: &str) {
    let mut pending: Option<Value> = None;
    for line in lines {
        if let Some(json) = line.strip_prefix("@I ") {
            assert!(pending.is_none(), "two intents without an ack");
            pending = Some(serde_json::from_str(json).unwrap());
        } else if line == "@A" || line.starts_with("@A ") {
            let mut op = pending.take().expect("an ack without an intent");
            if let Some(id) = line.strip_prefix("@A ") {
                op["id"] = json!(id);
            }
            *fig.acked.entry(s(&op["op"])).or_default() += 1;
            model.apply(&op);
        }
    }
    let got = observe_file(path, &THREADS, store_config(DIMS)).unwrap_or_else(|e| panic!("{at}: {e}"));
    match pending {
        None => {
            if ready {
                fig.kills_between_ops += 1;
            }
            assert!(
                got == *model,
                "{at}: state differs from the acknowledged operations:\n{}",
                diff(&got, model)
            );
        }
        Some(mut op) => {
            *fig.in_flight.entry(s(&op["op"])).or_default() += 1;
            if (op["op"] == "next" || op["op"] == "fork_with") && op.get("id").is_none() {
                // A step-API call whose id the child never heard: if it
                // landed, it is the one new checkpoint of its thread.
                let fresh = new_ids(&got, model, &s(&op["t"]), &s(&op["ns"]));
                op["id"] = json!(fresh.first().cloned().unwrap_or_default());
            }
            let mut with = model.clone();
            if op["op"] == "retain" {
                // One transaction per (thread, namespace), as documented: a
                // kill leaves some trimmed and the others untouched.
                let pairs: std::collections::BTreeSet<(String, String)> =
                    model.cps.keys().map(|(t, ns, _)| (t.clone(), ns.clone())).collect();
                for (t, ns) in pairs {
                    let mut trimmed = model.clone();
                    trimmed.keep_last(&t, &ns, op["keep"].as_u64().unwrap() as usize);
                    let exempt = op["exempt"].as_array().unwrap().contains(&json!(t));
                    if !exempt && got.ids_of(&t, &ns) == trimmed.ids_of(&t, &ns) {
                        with.keep_last(&t, &ns, op["keep"].as_u64().unwrap() as usize);
                    }
                }
            } else {
                with.apply(&op);
            }
            if got == with {
                fig.in_flight_applied += 1;
                *model = with;
            } else {
                assert!(
                    got == *model,
                    "{at}: the operation in flight {op} is half-applied, or an acknowledged one is \
                     lost:\nagainst the acknowledged state:\n{}\nagainst it applied:\n{}",
                    diff(&got, model),
                    diff(&got, &with)
                );
            }
        }
    }
    if let Err(bad) = check_file_with(path, Blobs::AllPresent, Parents::MayDangle) {
        panic!("{at}: {}", bad.join("\n"));
    }
    check_vectors(path, DIMS).unwrap_or_else(|e| panic!("{at}: {e}"));
}

/// Incremental blobs in the file (lists stored as a tail over a base).
fn delta_blobs(path: &Path) -> u64 {
    common::raw_ro(path)
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap() as u64
}

/// Runs `kills` rounds of children living `life` (from `exe`) on one file,
/// checking after each kill; reports the figures as `name`.
fn kill_rounds(name: &str, exe: &Path, kills: u64, life: Life, seed: u64) -> Figures {
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut model = State::default();
    let mut fig = Figures::default();
    let started = Instant::now();
    let mut max_deltas = 0;
    for round in 0..kills {
        let full = round % 2 == 0;
        let (lines, ready) = run_child(exe, &path, seed.wrapping_add(round), full, life, &mut rng, &mut fig);
        fig.kills += 1;
        fig.kills_full += u64::from(full);
        if !ready {
            fig.kills_during_open += 1;
        }
        check_round(&path, &lines, ready, &mut model, &mut fig, &format!("round {round} (seed {seed})"));
        max_deltas = max_deltas.max(delta_blobs(&path));
    }
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!("{name}: in flight at the kill, by operation: {:?}", fig.in_flight);
    eprintln!("{name}: acknowledged and checked, by operation: {:?}", fig.acked);
    report(
        name,
        &[
            ("kills", fig.kills),
            ("kills_full", fig.kills_full),
            ("kills_normal", fig.kills - fig.kills_full),
            ("kills_during_open", fig.kills_during_open),
            ("kills_between_ops", fig.kills_between_ops),
            ("kills_in_flight", fig.in_flight.values().sum()),
            ("in_flight_applied", fig.in_flight_applied),
            ("acked_ops_checked", fig.acked.values().sum()),
            ("longest_child_ms", fig.longest_child_ms),
            ("most_delta_blobs", max_deltas),
            ("final_checkpoints", model.cps.len() as u64),
            ("final_items", model.items.len() as u64),
            ("file_bytes", size),
            ("seconds", started.elapsed().as_secs()),
        ],
    );
    assert!(max_deltas > 0, "{name}: no incremental blob was ever written");
    fig
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
    let exe = std::env::current_exe().unwrap();
    let fig = kill_rounds("crash", &exe, kills, Life::Short, seed);
    assert!(fig.acked.values().sum::<u64>() > 0 && fig.in_flight.values().sum::<u64>() > 0);
}

/// Children that write for seconds before the kill: long delta chains,
/// warm caches, retention trimming, thousands of operations per process.
///
/// The children are this test binary, or, if `AGENTSTATE_CRASH_CHILD_EXE`
/// names one, a release build of it (`.ci/run` and `.ci/soak` build it with
/// `cargo test --release --no-run --test reliability_crash`): a release
/// child runs about ten times as many operations per second. It must be
/// built from the same source (the parent reads its reports).
///
/// Default: 4 children of 0.5-2 s (debug) or 1-3 s (release);
/// `AGENTSTATE_SOAK=1`: 30 children of 1-4 s.
#[test]
fn long_lived_children_killed_lose_nothing() {
    let given = std::env::var_os("AGENTSTATE_CRASH_CHILD_EXE").map(std::path::PathBuf::from);
    let exe = given.clone().unwrap_or_else(|| std::env::current_exe().unwrap());
    assert!(exe.exists(), "AGENTSTATE_CRASH_CHILD_EXE={} does not exist", exe.display());
    let (kills, life) = match (soaking(), given.is_some()) {
        (true, _) => (30, Life::Long(1000, 4000)),
        (false, true) => (4, Life::Long(1000, 3000)),
        (false, false) => (4, Life::Long(500, 2000)),
    };
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!(
        "long-lived crash test: {kills} children from {} ({}), AGENTSTATE_SEED={seed}",
        exe.display(),
        if given.is_some() { "given" } else { "this binary" }
    );
    let fig = kill_rounds("crash_long", &exe, kills, life, seed);
    assert!(fig.acked.values().sum::<u64>() > 100 * kills);
}

const REINDEX_PARENT: &str = "sigkill_during_reindex_to_other_dims_leaves_one_embedder";

/// The child of the reindex test: switches the file's embedder between 32
/// and 64 dimensions (`Db::reindex_store`) until killed.
#[test]
#[ignore = "child-process entry point: run by sigkill_during_reindex_to_other_dims_leaves_one_embedder"]
fn reindex_child() {
    let path = child_env("AGENTSTATE_REINDEX_CHILD", REINDEX_PARENT);
    let db = Db::open(&path).unwrap();
    let mut out = std::io::stdout().lock();
    say(&mut out, "@ready");
    let mut dims = [32, 64];
    loop {
        dims.reverse();
        db.reindex_store(store_config(dims[0])).unwrap();
        say(&mut out, &format!("@A {}", dims[0]));
    }
}

/// The embedder a file records, found by opening its Store with each:
/// exactly one must be accepted.
fn recorded_dims(path: &Path) -> usize {
    let db = Db::open(path).unwrap();
    let ok: Vec<usize> = [32, 64].into_iter().filter(|d| db.store(store_config(*d)).is_ok()).collect();
    assert_eq!(ok.len(), 1, "the file accepts the embedders of {ok:?} dimensions");
    ok[0]
}

#[test]
fn sigkill_during_reindex_to_other_dims_leaves_one_embedder() {
    let seed = seed_from_env("AGENTSTATE_SEED");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reindex.db");
    {
        let store = Db::open(&path).unwrap().store(store_config(64)).unwrap();
        for n in 0..400 {
            store
                .put(&["docs"], &format!("k{n}"), json!({"text": format!("{} {n}", WORDS[n % 12])}))
                .unwrap();
        }
    }
    let exe = std::env::current_exe().unwrap();
    let kills = if soaking() { 200 } else { 30 };
    for round in 0..kills {
        let mut child =
            child_command(&exe, "reindex_child").env("AGENTSTATE_REINDEX_CHILD", &path).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("@ready") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the reindex child died");
        }
        std::thread::sleep(Duration::from_micros(rng.below(60_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let dims = recorded_dims(&path);
        let at = format!("round {round} (seed {seed}), recording {dims} dims");
        check_vectors(&path, dims).unwrap_or_else(|e| panic!("{at}: {e}"));
        if let Err(bad) = check_file_with(&path, Blobs::AllPresent, Parents::OldestMayDangle) {
            panic!("{at}: {}", bad.join("\n"));
        }
        let store = Db::open(&path).unwrap().store(store_config(dims)).unwrap();
        let hits = store.search(agentstate::store::Search::new(&["docs"]).query("tea").limit(3));
        assert!(hits.is_ok_and(|h| h.len() == 3), "{at}: search after the kill");
    }
    report("crash_reindex", &[("kills", kills)]);
}
