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
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions};
use agentstate::store::{HashEmbedder, Index, IndexConfig, Op, PutOp, SearchOptions};
use agentstate::{Checkpoint, Config, Db, Durability, ListQuery, Metadata, PruneStrategy, StoreConfig};
use common::{check_file, report, seed_from_env, Blobs, Rng};
use serde_json::{json, Map, Value};

const THREADS: [&str; 6] = ["t0", "t1", "t2", "t3", "t4", "t5"];
const NSS: [&str; 2] = ["", "sub:1"];
const STORE_NSS: [&[&str]; 3] = [&["mem", "a"], &["mem", "b"], &["docs"]];
const DIMS: usize = 64;
const WORDS: [&str; 12] = [
    "tea", "rain", "cats", "invoice", "refund", "lyon", "piano", "garden", "train", "moon", "bread", "chess",
];

fn store_config() -> StoreConfig {
    StoreConfig::default().with_index(IndexConfig::hashed(DIMS).unwrap().fields(["text"]))
}

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

/// The child's body: a no-op unless run as the child.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var("AGENTSTATE_CRASH_CHILD") else { return };
    let seed: u64 = std::env::var("AGENTSTATE_CRASH_CHILD_SEED").unwrap().parse().unwrap();
    let durability = match std::env::var("AGENTSTATE_CRASH_CHILD_DURABILITY").as_deref() {
        Ok("full") => Durability::Full,
        _ => Durability::Normal,
    };
    let mut rng = Rng::new(seed);
    let mut out = std::io::stdout().lock();
    let db = Db::builder().durability(durability).open(&path).unwrap();
    let saver = db.checkpointer();
    let store = db.store(store_config()).unwrap();
    let mut heads: BTreeMap<(String, String), Head> = BTreeMap::new();
    for t in THREADS {
        for ns in NSS {
            if let Some(tuple) = saver.get_tuple(&Config::thread(t).ns(ns)).unwrap() {
                let head = Head {
                    id: tuple.checkpoint.id.clone(),
                    step: tuple.metadata.step().unwrap(),
                    versions: tuple.checkpoint.channel_versions.clone(),
                    values: tuple.checkpoint.channel_values.clone(),
                };
                heads.insert((t.to_string(), ns.to_string()), head);
            }
        }
    }
    say(&mut out, "@ready");
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
            let parent = head.map(|h| h.id.clone());
            let intent = json!({"op": "step", "t": t, "ns": ns, "id": id, "parent": parent, "values": values, "meta": meta});
            say(&mut out, &format!("@I {intent}"));
            let mut cp = Checkpoint::with_id(&id);
            cp.channel_values = values.clone();
            cp.channel_versions = versions.clone();
            let mut config = Config::thread(&t).ns(&ns);
            config.checkpoint_id = parent;
            saver.put(&config, &cp, &Metadata(meta.as_object().unwrap().clone()), &new_versions).unwrap();
            say(&mut out, "@A");
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
            let intent =
                json!({"op": "writes", "t": t, "ns": ns, "id": head.id, "task": task, "writes": writes});
            say(&mut out, &format!("@I {intent}"));
            let config = Config::thread(&t).ns(&ns).at(&head.id);
            saver.put_writes(&config, &writes, &task, "path").unwrap();
            say(&mut out, "@A");
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
            let intent = json!({"op": "put", "items": items});
            say(&mut out, &format!("@I {intent}"));
            let ops = items
                .into_iter()
                .map(|(namespace, key, value)| {
                    Op::Put(PutOp { namespace, key, value: Some(value), index: Index::Default, ttl: None })
                })
                .collect();
            store.batch(ops).unwrap();
            say(&mut out, "@A");
        } else if roll < 86 {
            let ns = rng.pick(&STORE_NSS);
            let key = format!("k{}", rng.below(30));
            say(&mut out, &format!("@I {}", json!({"op": "del", "ns": ns, "key": key})));
            store.delete(ns, &key).unwrap();
            say(&mut out, "@A");
        } else if roll < 89 {
            let ts: Vec<String> = (0..rng.range(1, 3)).map(|_| rng.pick(&THREADS).to_string()).collect();
            say(&mut out, &format!("@I {}", json!({"op": "prune", "t": ts})));
            saver.prune(&ts, PruneStrategy::KeepLatest).unwrap();
            say(&mut out, "@A");
        } else if roll < 91 {
            say(&mut out, &format!("@I {}", json!({"op": "delete_thread", "t": t})));
            saver.delete_thread(&t).unwrap();
            say(&mut out, "@A");
            heads.retain(|(ht, _), _| *ht != t);
        } else {
            // Copy a thread onto an empty one.
            let empty: Vec<&str> =
                THREADS.iter().copied().filter(|d| !heads.keys().any(|(ht, _)| ht == d)).collect();
            if empty.is_empty() || !heads.keys().any(|(ht, _)| *ht == t) {
                continue;
            }
            let dst = rng.pick(&empty).to_string();
            say(&mut out, &format!("@I {}", json!({"op": "copy", "src": t, "dst": dst})));
            saver.copy_thread(&t, &dst).unwrap();
            say(&mut out, "@A");
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
// The model

/// One checkpoint as the API returns it.
#[derive(Clone, Debug, PartialEq)]
struct Cp {
    parent: Option<String>,
    meta: Value,
    values: Value,
    /// (task, channel, value) in (task, idx) order.
    writes: Vec<(String, String, Value)>,
}

type CpKey = (String, String, String);
type ItemKey = (Vec<String>, String);

#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    cps: BTreeMap<CpKey, Cp>,
    items: BTreeMap<ItemKey, Value>,
}

fn special_idx(channel: &str) -> Option<i64> {
    ["__error__", "__scheduled__", "__interrupt__", "__resume__"]
        .iter()
        .position(|c| *c == channel)
        .map(|i| -(i as i64) - 1)
}

fn s(v: &Value) -> String {
    v.as_str().unwrap().to_string()
}

impl State {
    /// Applies an operation the child reported.
    fn apply(&mut self, op: &Value) {
        match op["op"].as_str().unwrap() {
            "step" => {
                let key = (s(&op["t"]), s(&op["ns"]), s(&op["id"]));
                let cp = Cp {
                    parent: op["parent"].as_str().map(String::from),
                    meta: op["meta"].clone(),
                    values: op["values"].clone(),
                    writes: vec![],
                };
                self.cps.insert(key, cp);
            }
            "writes" => {
                let key = (s(&op["t"]), s(&op["ns"]), s(&op["id"]));
                let task = s(&op["task"]);
                let cp = self.cps.get_mut(&key).expect("writes on a checkpoint the model has");
                // Rows are keyed (task, idx); the workload never repeats an
                // idx within a call, and every call has a task of its own.
                let mut new: Vec<(i64, (String, String, Value))> = op["writes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .map(|(i, w)| {
                        let ch = s(&w[0]);
                        (special_idx(&ch).unwrap_or(i as i64), (task.clone(), ch, w[1].clone()))
                    })
                    .collect();
                new.sort_by_key(|(idx, _)| *idx);
                cp.writes.extend(new.into_iter().map(|(_, w)| w));
                // Read back in (task, idx) order; the sort is stable.
                cp.writes.sort_by(|a, b| a.0.cmp(&b.0));
            }
            "put" => {
                for item in op["items"].as_array().unwrap() {
                    let ns: Vec<String> = item[0].as_array().unwrap().iter().map(s).collect();
                    self.items.insert((ns, s(&item[1])), item[2].clone());
                }
            }
            "del" => {
                let ns: Vec<String> = op["ns"].as_array().unwrap().iter().map(s).collect();
                self.items.remove(&(ns, s(&op["key"])));
            }
            "prune" => {
                for t in op["t"].as_array().unwrap().iter().map(s) {
                    let mut latest: BTreeMap<String, String> = BTreeMap::new();
                    for (kt, kns, id) in self.cps.keys() {
                        if *kt == t {
                            let e = latest.entry(kns.clone()).or_default();
                            if id > e {
                                *e = id.clone();
                            }
                        }
                    }
                    self.cps.retain(|(kt, kns, id), _| *kt != t || latest.get(kns) == Some(id));
                }
            }
            "delete_thread" => {
                let t = s(&op["t"]);
                self.cps.retain(|(kt, _, _), _| *kt != t);
            }
            "copy" => {
                let (src, dst) = (s(&op["src"]), s(&op["dst"]));
                let copied: Vec<(CpKey, Cp)> = self
                    .cps
                    .iter()
                    .filter(|((t, _, _), _)| *t == src)
                    .map(|((_, ns, id), cp)| ((dst.clone(), ns.clone(), id.clone()), cp.clone()))
                    .collect();
                self.cps.extend(copied);
            }
            other => panic!("unknown op {other}"),
        }
    }
}

/// The file's state through the public API (a fresh `Db`, so the WAL the
/// killed child left is recovered first).
fn observe(path: &Path) -> Result<State, String> {
    let db = Db::open(path).map_err(|e| format!("reopen: {e}"))?;
    let saver = db.checkpointer();
    let store = db.store(store_config()).map_err(|e| format!("store: {e}"))?;
    let mut state = State::default();
    for t in THREADS {
        for tuple in saver.list(&ListQuery::thread(t)).map_err(|e| format!("list {t}: {e}"))? {
            let key = (t.to_string(), tuple.config.checkpoint_ns.clone(), tuple.checkpoint.id.clone());
            let cp = Cp {
                parent: tuple.parent_config.and_then(|c| c.checkpoint_id),
                meta: Value::Object(tuple.metadata.0),
                values: Value::Object(tuple.checkpoint.channel_values),
                writes: tuple.pending_writes.into_iter().map(|w| (w.task_id, w.channel, w.value)).collect(),
            };
            state.cps.insert(key, cp);
        }
    }
    for hit in
        store.search(&[], SearchOptions::default().limit(1_000_000)).map_err(|e| format!("search: {e}"))?
    {
        state.items.insert((hit.item.namespace, hit.item.key), hit.item.value);
    }
    Ok(state)
}

/// Every item has exactly one vector, `text`, the embedding of its text.
fn check_vectors(path: &Path) -> Result<usize, String> {
    let conn = common::raw_ro(path);
    let embedder = HashEmbedder::new(DIMS).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT s.prefix, s.key, CAST(s.value AS TEXT), \
                    (SELECT COUNT(*) FROM store_vectors v WHERE v.prefix = s.prefix AND v.key = s.key), \
                    (SELECT embedding FROM store_vectors v WHERE v.prefix = s.prefix AND v.key = s.key \
                     AND v.field_name = 'text') \
             FROM store s",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<Vec<u8>>>(4)?,
            ))
        })
        .unwrap();
    let mut n = 0;
    for row in rows {
        let (p, k, value, count, blob) = row.unwrap();
        let value: Value = serde_json::from_str(&value).unwrap();
        let want: Vec<u8> =
            embedder.embed(value["text"].as_str().unwrap()).iter().flat_map(|x| x.to_le_bytes()).collect();
        if count != 1 || blob.as_deref() != Some(&want[..]) {
            return Err(format!("item {p}/{k}: {count} vectors, text vector stale or missing"));
        }
        n += 1;
    }
    Ok(n)
}

/// A short account of how `got` differs from `want`.
fn diff(got: &State, want: &State) -> String {
    let mut out = vec![];
    for (k, v) in &want.cps {
        match got.cps.get(k) {
            None => out.push(format!("missing checkpoint {k:?}")),
            Some(g) if g != v => out.push(format!("checkpoint {k:?} differs:\n got {g:?}\nwant {v:?}")),
            _ => {}
        }
    }
    out.extend(
        got.cps.keys().filter(|k| !want.cps.contains_key(*k)).map(|k| format!("extra checkpoint {k:?}")),
    );
    for (k, v) in &want.items {
        match got.items.get(k) {
            None => out.push(format!("missing item {k:?}")),
            Some(g) if g != v => out.push(format!("item {k:?} differs: got {g}, want {v}")),
            _ => {}
        }
    }
    out.extend(
        got.items.keys().filter(|k| !want.items.contains_key(*k)).map(|k| format!("extra item {k:?}")),
    );
    out.truncate(6);
    out.join("\n")
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
    let mut child = Command::new(exe)
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("AGENTSTATE_CRASH_CHILD", path)
        .env("AGENTSTATE_CRASH_CHILD_SEED", seed.to_string())
        .env("AGENTSTATE_CRASH_CHILD_DURABILITY", if full { "full" } else { "normal" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
        None if std::env::var("AGENTSTATE_SOAK").is_ok_and(|v| v != "0") => 3000,
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
        let got = observe(&path).unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
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
        check_vectors(&path).unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
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
