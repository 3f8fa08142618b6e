//! Contention: threads of this process (sharing a `Db`, or with a `Db` of
//! their own) and threads of two child processes work on one fresh file at
//! once for a few seconds: checkpoint steps, pending writes (many of them on
//! one shared checkpoint), store puts with vectors (many in one shared
//! namespace), deletes, prunes, copies, fork_with, steps with retention on
//! write, delete_for_runs, TTL sweeps, and reads of each other's data.
//!
//! No error of any kind may reach a caller (in particular no `Error::Busy`
//! or "database is locked"), every worker reads its own writes at once, and
//! at the end the file holds exactly what the workers were told was
//! written: each worker keeps a model of its acknowledged operations, the
//! models are disjoint except for the shared checkpoint's writes and the
//! shared namespace (distinct keys and task ids), and the final state must
//! equal their union.
//!
//! `AGENTSTATE_CONTENTION_SECS` sets the duration (default 3);
//! `AGENTSTATE_SOAK=1` makes it 60.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use agentstate::checkpoint::Retention;
use agentstate::checkpoint::{next_version, uuid6, ChannelVersion, ChannelVersions};
use agentstate::store::{ListNamespaces, Put, Search};
use agentstate::{Checkpoint, CheckpointConfig, Db, Durability, ListQuery, Metadata, PruneStrategy};
use common::harness::{child_command, child_env, soaking, store_config};
use common::{check_file, report, seed_from_env, Blobs, Rng};
use serde_json::{json, Value};

const SHARED_THREAD: &str = "shared";
const WORDS: [&str; 8] = ["tea", "rain", "cats", "invoice", "refund", "lyon", "piano", "garden"];

const DIMS: usize = 32;
const PARENT: &str = "threads_and_processes_share_one_file";

fn secs() -> f64 {
    match std::env::var("AGENTSTATE_CONTENTION_SECS").ok().and_then(|v| v.parse().ok()) {
        Some(s) => s,
        None if soaking() => 60.0,
        None => 3.0,
    }
}

/// What one worker was told it wrote, and what it did.
#[derive(Debug, Default)]
struct Model {
    id: String,
    /// Checkpoint ids of its thread, and how many writes each has.
    checkpoints: BTreeMap<String, usize>,
    /// The values of its latest checkpoint.
    latest: Option<Value>,
    /// Its tasks' writes on the shared checkpoint.
    shared_tasks: BTreeSet<String>,
    /// Its items (in `["shared"]` and in `["w", id]`), by (namespace, key).
    items: BTreeMap<(Vec<String>, String), Value>,
    /// Threads it copied its thread to, with the ids copied.
    copies: BTreeMap<String, BTreeSet<String>>,
    writes: u64,
    reads: u64,
    max_write_ms: u64,
}

impl Model {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "checkpoints": self.checkpoints,
            "latest": self.latest,
            "shared_tasks": self.shared_tasks,
            "items": self.items.iter().map(|((ns, k), v)| json!([ns, k, v])).collect::<Vec<_>>(),
            "copies": self.copies,
            "writes": self.writes,
            "reads": self.reads,
            "max_write_ms": self.max_write_ms,
        })
    }

    fn from_json(v: &Value) -> Model {
        Model {
            id: v["id"].as_str().unwrap().into(),
            checkpoints: serde_json::from_value(v["checkpoints"].clone()).unwrap(),
            latest: serde_json::from_value(v["latest"].clone()).unwrap(),
            shared_tasks: serde_json::from_value(v["shared_tasks"].clone()).unwrap(),
            items: v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    (
                        (serde_json::from_value(i[0].clone()).unwrap(), i[1].as_str().unwrap().into()),
                        i[2].clone(),
                    )
                })
                .collect(),
            copies: serde_json::from_value(v["copies"].clone()).unwrap(),
            writes: v["writes"].as_u64().unwrap(),
            reads: v["reads"].as_u64().unwrap(),
            max_write_ms: v["max_write_ms"].as_u64().unwrap(),
        }
    }
}

/// One worker's loop. Every error is returned (and fails the test).
fn work(db: &Db, id: &str, seed: u64, until: Instant, shared_cp: &CheckpointConfig) -> Result<Model, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: agentstate::Error| format!("worker {id}: {what}: {err} ({err:?})")
    };
    let mut rng = Rng::new(seed);
    let saver = db.checkpointer();
    let store = db.store(store_config(DIMS)).map_err(e("open the store"))?;
    let mut m = Model { id: id.to_string(), ..Model::default() };
    let thread = format!("w{id}");
    let mut head: Option<(CheckpointConfig, ChannelVersions, Value, i64)> = None;
    let mut n = 0u64;
    let timed = |m: &mut Model, start: Instant| {
        m.writes += 1;
        m.max_write_ms = m.max_write_ms.max(start.elapsed().as_millis() as u64);
    };
    while Instant::now() < until {
        n += 1;
        let roll = rng.below(100);
        let start = Instant::now();
        if roll < 25 {
            // A step on its own thread, then a write on it; read back at once.
            let step = head.as_ref().map_or(-1, |h| h.3) + 1;
            let mut versions = head.as_ref().map(|h| h.1.clone()).unwrap_or_default();
            let v = next_version(versions.get("messages"));
            versions.insert("messages".into(), v.clone());
            let c = ChannelVersion::Int(step + 1);
            versions.insert("count".into(), c.clone());
            let values = json!({"messages": [format!("{id} step {step}"), {"n": n}], "count": step});
            let mut cp = Checkpoint::with_id(uuid6(Some(step)).to_string());
            cp.set_values(values.as_object().unwrap().clone());
            cp.channel_versions = versions.clone();
            let nv: ChannelVersions = [("messages".to_string(), v), ("count".to_string(), c)].into();
            let parent =
                head.as_ref().map(|h| h.0.clone()).unwrap_or_else(|| CheckpointConfig::thread(&thread));
            let meta = Metadata::new().with("source", "loop").with("step", step).with("worker", id);
            let config = saver.put(&parent, &cp, &meta, &nv).map_err(e("put"))?;
            saver.put_writes(&config, &[("out", json!(n))], "t", "").map_err(e("put_writes"))?;
            timed(&mut m, start);
            m.checkpoints.insert(cp.id.clone(), 1);
            m.latest = Some(values.clone());
            let got = saver.get_tuple(&CheckpointConfig::thread(&thread)).map_err(e("get_tuple"))?;
            let got = got.ok_or_else(|| format!("worker {id}: its checkpoint is not there"))?;
            if got.checkpoint.id != cp.id || Value::Object(got.checkpoint.values_json()) != values {
                return Err(format!("worker {id}: get_tuple after put returned another checkpoint"));
            }
            head = Some((config, versions, values, step));
        } else if roll < 40 {
            let task = format!("{id}-{n}");
            saver
                .put_writes(shared_cp, &[("a", json!(n)), ("b", json!({"from": id}))], &task, "")
                .map_err(e("put_writes on the shared checkpoint"))?;
            timed(&mut m, start);
            m.shared_tasks.insert(task);
        } else if roll < 60 {
            let ns: Vec<String> =
                if rng.chance(50) { vec!["shared".into()] } else { vec!["w".into(), id.to_string()] };
            let key = format!("{id}-k{}", rng.below(20));
            let text: Vec<&str> = (0..3).map(|_| *rng.pick(&WORDS)).collect();
            let value = json!({"text": text.join(" "), "n": n, "by": id});
            let nsr: Vec<&str> = ns.iter().map(String::as_str).collect();
            store.put(&nsr, &key, value.clone()).map_err(e("store put"))?;
            timed(&mut m, start);
            let got = store.get(&nsr, &key).map_err(e("store get"))?.map(|i| i.value);
            if got.as_ref() != Some(&value) {
                return Err(format!("worker {id}: get after put returned {got:?}"));
            }
            m.items.insert((ns, key), value);
        } else if roll < 65 {
            let Some(((ns, key), _)) = m.items.iter().nth(rng.below(m.items.len().max(1) as u64) as usize)
            else {
                continue;
            };
            let (ns, key) = (ns.clone(), key.clone());
            let nsr: Vec<&str> = ns.iter().map(String::as_str).collect();
            store.delete(&nsr, &key).map_err(e("store delete"))?;
            timed(&mut m, start);
            m.items.remove(&(ns, key));
        } else if roll < 68 {
            saver.prune(&[&thread], PruneStrategy::KeepLatest).map_err(e("prune"))?;
            timed(&mut m, start);
            if let Some(latest) = m.checkpoints.keys().next_back().cloned() {
                m.checkpoints.retain(|k, _| *k == latest);
            }
        } else if roll < 70 {
            let dst = format!("w{id}-copy{n}");
            saver.copy_thread(&thread, &dst).map_err(e("copy_thread"))?;
            timed(&mut m, start);
            m.copies.insert(dst, m.checkpoints.keys().cloned().collect());
        } else if roll < 72 {
            // A fork_with of its own thread's head: the new head.
            let Some(h) = &head else { continue };
            let values: serde_json::Map<String, Value> =
                [("note".to_string(), json!(n))].into_iter().collect();
            let config = saver.fork_with(&h.0, values).map_err(e("fork_with"))?;
            timed(&mut m, start);
            let got = saver.get_tuple(&config).map_err(e("get_tuple of the fork"))?;
            let got = got.ok_or_else(|| format!("worker {id}: its fork is not there"))?;
            let values = Value::Object(got.checkpoint.values_json());
            m.checkpoints.insert(got.checkpoint.id.clone(), 0);
            m.latest = Some(values.clone());
            let step = got.metadata.step().unwrap_or(0);
            // The next step (a `put` of messages and count) drops the note.
            let mut versions = got.checkpoint.channel_versions.clone();
            versions.remove("note");
            head = Some((config, versions, values, step));
        } else if roll < 74 {
            // Steps with retention on write on a side thread, and a run
            // deleted on another.
            let side = CheckpointConfig::thread(format!("w{id}-retained"));
            let kept = saver.clone().with_retention(Retention::keep_last(3));
            let prev = kept.get_tuple(&side).map_err(e("get_tuple retained"))?;
            let next = match &prev {
                Some(p) => kept.step(p),
                None => kept.start(&side),
            };
            let tuple = next.append("log", [json!({"n": n})]).commit().map_err(e("step with retention"))?;
            let runs = CheckpointConfig::thread(format!("w{id}-runs"));
            let doomed = Metadata::new().with("run_id", format!("{id}-doomed")).with("step", 0);
            saver.start(&runs).metadata(doomed).commit().map_err(e("start a doomed run"))?;
            saver.delete_for_runs(&[format!("{id}-doomed")]).map_err(e("delete_for_runs"))?;
            timed(&mut m, start);
            let left = kept.list(&ListQuery::from_config(&side)).map_err(e("list retained"))?;
            if left.first().map(|t| &t.checkpoint.id) != Some(&tuple.checkpoint.id) || left.len() > 3 + 8 {
                return Err(format!("worker {id}: retention on write left {} checkpoints", left.len()));
            }
            if saver.get_tuple(&runs).map_err(e("get_tuple of a deleted run"))?.is_some() {
                return Err(format!("worker {id}: delete_for_runs left its run"));
            }
        } else if roll < 76 {
            // An item that expires at once, swept.
            let ns = ["tmp", id];
            let put = Put::new(&ns, format!("k{n}"), json!({"text": "gone", "n": n})).ttl(Duration::ZERO);
            store.put_with(put).map_err(e("put with a TTL"))?;
            // Live for the rest of its millisecond.
            std::thread::sleep(Duration::from_millis(2));
            store.sweep_expired().map_err(e("sweep_expired"))?;
            timed(&mut m, start);
            if store.get(&ns, &format!("k{n}")).map_err(e("get of a swept item"))?.is_some() {
                return Err(format!("worker {id}: an expired item is still there"));
            }
        } else {
            // Reads of everyone's data.
            match rng.below(6) {
                0 => {
                    let other = format!("w{}", rng.below(12));
                    saver
                        .get_tuple(&CheckpointConfig::thread(other))
                        .map_err(e("get_tuple of another thread"))?;
                }
                1 => {
                    // (None until the parent's put of it has landed.)
                    let Some(t) = saver.get_tuple(shared_cp).map_err(e("get_tuple shared"))? else {
                        continue;
                    };
                    let mine =
                        t.pending_writes.iter().filter(|w| w.task_id.starts_with(&format!("{id}-"))).count();
                    if mine != 2 * m.shared_tasks.len() {
                        return Err(format!(
                            "worker {id}: sees {mine} of its shared writes, wrote {}",
                            2 * m.shared_tasks.len()
                        ));
                    }
                }
                2 => {
                    let q = ListQuery::all().filter(json!({"step": {"$gte": 3}, "source": "loop"})).limit(20);
                    saver.list(&q).map_err(e("list with a filter"))?;
                }
                3 => {
                    let opts = Search::new(&["shared"]).query(*rng.pick(&WORDS)).limit(5);
                    store.search(opts).map_err(e("vector search"))?;
                }
                4 => {
                    store.list_namespaces(ListNamespaces::new()).map_err(e("list_namespaces"))?;
                }
                _ => {
                    let f = json!({"by": id});
                    let hits = store
                        .search(Search::new(&["shared"]).filter(f).limit(1000))
                        .map_err(e("filtered search"))?;
                    let want = m.items.keys().filter(|(ns, _)| ns[0] == "shared").count();
                    if hits.len() != want {
                        return Err(format!(
                            "worker {id}: search sees {} of its {want} shared items",
                            hits.len()
                        ));
                    }
                }
            }
            m.reads += 1;
        }
    }
    Ok(m)
}

/// The children's body: three workers until the deadline, then their models
/// on stdout.
#[test]
#[ignore = "child-process entry point: run by threads_and_processes_share_one_file"]
fn contention_child() {
    let path = child_env("AGENTSTATE_CONTENTION_CHILD", PARENT);
    let proc_id: u64 = child_env("AGENTSTATE_CONTENTION_ID", PARENT).parse().unwrap();
    let until_ms: u64 = child_env("AGENTSTATE_CONTENTION_MS", PARENT).parse().unwrap();
    let seed: u64 = child_env("AGENTSTATE_CONTENTION_SEED", PARENT).parse().unwrap();
    let durability = if proc_id == 1 { Durability::Full } else { Durability::Normal };
    let db = Db::builder().durability(durability).open(&path).unwrap();
    let shared = CheckpointConfig::thread(SHARED_THREAD).at(child_env("AGENTSTATE_CONTENTION_CP", PARENT));
    let until = Instant::now() + Duration::from_millis(until_ms);
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let (db, shared) = (db.clone(), shared.clone());
            std::thread::spawn(move || {
                let id = (6 + proc_id * 3 + t).to_string();
                work(&db, &id, seed ^ (proc_id * 100 + t), until, &shared)
            })
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for h in handles {
        let line = match h.join().unwrap() {
            Ok(m) => format!("\n@MODEL {}\n", m.to_json()),
            Err(e) => format!("\n@ERROR {}\n", json!(e)),
        };
        out.write_all(line.as_bytes()).unwrap();
    }
}

fn verify(path: &Path, models: &[Model]) -> Result<(), String> {
    let db = Db::open(path).map_err(|e| e.to_string())?;
    let saver = db.checkpointer();
    let store = db.store(store_config(DIMS)).map_err(|e| e.to_string())?;
    for m in models {
        let thread = format!("w{}", m.id);
        let got = saver.list(&ListQuery::thread(&thread)).map_err(|e| e.to_string())?;
        let ids: BTreeMap<String, usize> =
            got.iter().map(|t| (t.checkpoint.id.clone(), t.pending_writes.len())).collect();
        if ids != m.checkpoints {
            return Err(format!("worker {}: checkpoints {ids:?}, acknowledged {:?}", m.id, m.checkpoints));
        }
        if got.first().map(|t| Value::Object(t.checkpoint.values_json())) != m.latest {
            return Err(format!("worker {}: latest values differ", m.id));
        }
        for (dst, ids) in &m.copies {
            let got: BTreeSet<String> = saver
                .list(&ListQuery::thread(dst))
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|t| t.checkpoint.id.clone())
                .collect();
            if got != *ids {
                return Err(format!("copy {dst}: {got:?}, acknowledged {ids:?}"));
            }
        }
        let own = store
            .search(Search::new(&["w", &m.id]).limit(1000))
            .map_err(|e| e.to_string())?
            .into_iter()
            .chain(
                store
                    .search(Search::new(&["shared"]).filter(json!({"by": m.id})).limit(1000))
                    .map_err(|e| e.to_string())?,
            )
            .map(|h| ((h.item.namespace.into_labels(), h.item.key), h.item.value))
            .collect::<BTreeMap<_, _>>();
        if own != m.items {
            return Err(format!("worker {}: {} items, acknowledged {}", m.id, own.len(), m.items.len()));
        }
    }
    // Whatever expired is gone after one more sweep.
    store.sweep_expired().map_err(|e| e.to_string())?;
    let tmp: i64 = common::raw_ro(path)
        .query_row("SELECT COUNT(*) FROM store WHERE prefix LIKE 'tmp.%'", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if tmp != 0 {
        return Err(format!("{tmp} expired items left after a sweep"));
    }
    let shared =
        saver.get_tuple(&CheckpointConfig::thread(SHARED_THREAD)).map_err(|e| e.to_string())?.unwrap();
    let tasks: BTreeSet<String> = shared.pending_writes.iter().map(|w| w.task_id.clone()).collect();
    let want: BTreeSet<String> = models.iter().flat_map(|m| m.shared_tasks.iter().cloned()).collect();
    if tasks != want || shared.pending_writes.len() != 2 * want.len() {
        return Err(format!("shared checkpoint: {} tasks, acknowledged {}", tasks.len(), want.len()));
    }
    Ok(())
}

#[test]
fn threads_and_processes_share_one_file() {
    let secs = secs();
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!("contention: {secs} s, AGENTSTATE_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("contended.db");
    // The shared checkpoint every worker writes to; this thread puts it
    // while the workers already run (writes may precede their checkpoint).
    let shared_id = uuid6(None).to_string();
    // Every worker starts on a file that does not exist yet: they create it
    // (schema, WAL switch, store metadata) all at once.
    let shared_cp = CheckpointConfig::thread(SHARED_THREAD).at(&shared_id);
    let ms = (secs * 1000.0) as u64;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2u64)
        .map(|p| {
            child_command(&exe, "contention_child")
                .env("AGENTSTATE_CONTENTION_CHILD", &path)
                .env("AGENTSTATE_CONTENTION_ID", p.to_string())
                .env("AGENTSTATE_CONTENTION_MS", ms.to_string())
                .env("AGENTSTATE_CONTENTION_SEED", seed.wrapping_add(p).to_string())
                .env("AGENTSTATE_CONTENTION_CP", &shared_id)
                .spawn()
                .unwrap()
        })
        .collect();
    let barrier = Arc::new(Barrier::new(6));
    let shared_db = Arc::new(std::sync::OnceLock::<Db>::new());
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let (barrier, path, shared_cp, shared_db) =
                (barrier.clone(), path.clone(), shared_cp.clone(), shared_db.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // Four threads share one Db (one pool); two have their own.
                let db = if t < 4 {
                    match shared_db.get() {
                        Some(db) => db.clone(),
                        None => {
                            let db = Db::open(&path).map_err(|e| format!("open: {e}"))?;
                            let _ = shared_db.set(db);
                            shared_db.get().unwrap().clone()
                        }
                    }
                } else {
                    Db::open(&path).map_err(|e| format!("open: {e}"))?
                };
                let until = Instant::now() + Duration::from_millis(ms);
                work(&db, &t.to_string(), seed ^ (1000 + t), until, &shared_cp)
            })
        })
        .collect();
    {
        let saver = Db::open(&path).unwrap().checkpointer();
        let cp = Checkpoint::with_id(&shared_id);
        saver
            .put(&CheckpointConfig::thread(SHARED_THREAD), &cp, &Metadata::new(), &ChannelVersions::new())
            .unwrap();
    }
    let mut models = vec![];
    let mut errors = vec![];
    for t in threads {
        match t.join().unwrap() {
            Ok(m) => models.push(m),
            Err(e) => errors.push(e),
        }
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        for line in stdout.lines() {
            if let Some(j) = line.strip_prefix("@MODEL ") {
                models.push(Model::from_json(&serde_json::from_str(j).unwrap()));
            } else if let Some(j) = line.strip_prefix("@ERROR ") {
                errors.push(serde_json::from_str::<String>(j).unwrap());
            }
        }
    }
    assert!(errors.is_empty(), "errors reached callers:\n{}", errors.join("\n"));
    assert_eq!(models.len(), 12, "every worker reports");
    verify(&path, &models).unwrap();
    check_file(&path, Blobs::AllPresent).unwrap_or_else(|bad| panic!("{}", bad.join("\n")));
    let writes: u64 = models.iter().map(|m| m.writes).sum();
    let reads: u64 = models.iter().map(|m| m.reads).sum();
    let max_wait = models.iter().map(|m| m.max_write_ms).max().unwrap_or(0);
    report(
        "contention",
        &[
            ("seconds", secs as u64),
            ("workers", models.len() as u64),
            ("processes", 3),
            ("writes_acked", writes),
            ("reads", reads),
            ("shared_checkpoint_tasks", models.iter().map(|m| m.shared_tasks.len() as u64).sum()),
            ("slowest_write_ms", max_wait),
            ("errors", 0),
        ],
    );
}
