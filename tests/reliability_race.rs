//! Races between writers with their own `Db` handles (own connection pools,
//! as separate processes would have) on one file:
//!
//! - the step API under contention: writers continue the same threads from
//!   the head they read; exactly one commit per head wins, the others get
//!   `Error::Conflict`; no checkpoint has two children unless one is a fork;
//!   two writers starting one thread make one root; every list reads back
//!   as its parent's plus the winner's appended items, through `list_iter`,
//!   `get_tuple` and after reopening the file;
//! - maintenance beside writers: `apply_retention`, `delete_for_runs`,
//!   `fork_with`, a checkpointer with retention on write, `sweep_expired`
//!   and Store puts with and without a TTL, all at once: no error but the
//!   documented `Conflict` reaches a writer, the newest checkpoint survives,
//!   nothing acknowledged and not removed on purpose is lost;
//! - `Store::reindex` beside Store puts: every acknowledged item keeps the
//!   vector of its text.
//!
//! `AGENTSTATE_SOAK=1` runs each for 30 s instead of 2.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use agentstate::checkpoint::Retention;
use agentstate::store::Put;
use agentstate::{CheckpointConfig, CheckpointTuple, Db, Error, ListQuery, Metadata};
use common::harness::{soaking, store_config};
use common::ops::check_vectors;
use common::{check_file_with, report, seed_from_env, Blobs, Parents, Rng};
use serde_json::{json, Value};

const WRITERS: usize = 4;
const SHARED: [&str; 2] = ["a", "b"];
const DIMS: usize = 32;

fn duration() -> Duration {
    Duration::from_secs(if soaking() { 30 } else { 2 })
}

/// A ~300-byte log entry: the lists pass the thresholds of incremental
/// blobs after a few dozen steps.
fn entry(writer: usize, n: u64) -> Value {
    json!({"w": writer, "n": n, "text": "x".repeat(260)})
}

/// A commit a writer was told succeeded.
#[derive(Clone, Debug)]
struct Win {
    thread: String,
    id: String,
    parent: Option<String>,
    fork: bool,
    appended: Vec<Value>,
}

fn log_of(tuple: &CheckpointTuple) -> Vec<Value> {
    tuple
        .checkpoint
        .channel_values
        .get("log")
        .map(|v| v.to_value())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Every checkpoint of `thread`, through `list_iter` on a fresh `Db`.
fn history(path: &Path, thread: &str) -> Vec<CheckpointTuple> {
    let db = Db::open(path).unwrap();
    let saver = db.checkpointer();
    saver.list_iter(&ListQuery::thread(thread)).unwrap().collect::<agentstate::Result<Vec<_>>>().unwrap()
}

#[test]
fn step_api_lets_exactly_one_writer_continue_each_head() {
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!("step race: AGENTSTATE_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    Db::open(&path).unwrap();
    let starts = 20;
    let barrier = Barrier::new(WRITERS);
    let wins = Mutex::new(Vec::<Win>::new());
    let start_wins = Mutex::new(BTreeMap::<String, usize>::new());
    let conflicts = Mutex::new(0u64);
    let deadline = Instant::now() + duration();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (path, barrier, wins, start_wins, conflicts) =
                (&path, &barrier, &wins, &start_wins, &conflicts);
            scope.spawn(move || {
                let mut rng = Rng::new(seed.wrapping_add(w as u64));
                let db = Db::open(path).unwrap();
                let saver = db.checkpointer();
                // Every writer starts the same threads at once: one root each.
                let fresh: Vec<String> = (0..starts).map(|k| format!("s{k}")).collect();
                for t in SHARED.iter().map(|t| t.to_string()).chain(fresh) {
                    barrier.wait();
                    let item = entry(w, 0);
                    match saver.start(&CheckpointConfig::thread(&t)).append("log", [item.clone()]).commit() {
                        Ok(tuple) => {
                            *start_wins.lock().unwrap().entry(t.clone()).or_default() += 1;
                            wins.lock().unwrap().push(Win {
                                thread: t,
                                id: tuple.checkpoint.id.clone(),
                                parent: None,
                                fork: false,
                                appended: vec![item],
                            });
                        }
                        Err(Error::Conflict(_)) => *conflicts.lock().unwrap() += 1,
                        Err(e) => panic!("writer {w}: start {t}: {e:?}"),
                    }
                }
                // Then all continue the shared threads from what they read.
                let mut n = 1;
                while Instant::now() < deadline {
                    let t = *rng.pick(&SHARED);
                    let head = saver.get_tuple(&CheckpointConfig::thread(t)).unwrap().unwrap();
                    let fork = rng.chance(5) && head.parent_config.is_some();
                    let base = if fork {
                        saver.get_tuple(head.parent_config.as_ref().unwrap()).unwrap()
                    } else {
                        Some(head)
                    };
                    let Some(base) = base else { continue };
                    let items: Vec<Value> = (0..rng.range(1, 3)).map(|i| entry(w, n * 10 + i)).collect();
                    n += 1;
                    let mut step = saver.step(&base).append("log", items.clone()).set("count", json!(n));
                    if fork {
                        step = step.fork();
                    }
                    match step.commit() {
                        Ok(tuple) => {
                            assert_eq!(
                                log_of(&tuple),
                                [log_of(&base), items.clone()].concat(),
                                "commit returned another list"
                            );
                            wins.lock().unwrap().push(Win {
                                thread: t.to_string(),
                                id: tuple.checkpoint.id.clone(),
                                parent: base.checkpoint.id.clone().into(),
                                fork,
                                appended: items,
                            });
                        }
                        Err(Error::Conflict(_)) if !fork => *conflicts.lock().unwrap() += 1,
                        Err(e) => panic!("writer {w}: step on {t} (fork: {fork}): {e:?}"),
                    }
                }
            });
        }
    });
    let wins = wins.into_inner().unwrap();
    let start_wins = start_wins.into_inner().unwrap();
    for (t, n) in &start_wins {
        assert_eq!(*n, 1, "{n} writers started thread {t}");
    }
    assert_eq!(start_wins.len(), starts + SHARED.len());
    let by_id: BTreeMap<&str, &Win> = wins.iter().map(|w| (w.id.as_str(), w)).collect();
    let mut checked = 0u64;
    for t in SHARED {
        let stored = history(&path, t);
        let won: BTreeSet<&str> = wins.iter().filter(|w| w.thread == t).map(|w| w.id.as_str()).collect();
        let ids: BTreeSet<&str> = stored.iter().map(|c| c.checkpoint.id.as_str()).collect();
        assert_eq!(ids, won, "thread {t}: the file holds other checkpoints than the writers were told");
        assert_eq!(stored.iter().filter(|c| c.parent_config.is_none()).count(), 1, "thread {t}: roots");
        // At most one non-fork child per parent.
        let mut children: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &stored {
            let win = by_id[c.checkpoint.id.as_str()];
            let parent = c.parent_config.as_ref().and_then(|p| p.checkpoint_id.as_deref());
            assert_eq!(parent, win.parent.as_deref(), "thread {t}: parent of {}", win.id);
            if let (Some(p), false) = (parent, win.fork) {
                *children.entry(p).or_default() += 1;
            }
        }
        if let Some((p, n)) = children.iter().find(|(_, n)| **n > 1) {
            panic!("thread {t}: checkpoint {p} has {n} children that are not forks");
        }
        // Each list is its parent's plus what the winner appended.
        let logs: BTreeMap<&str, Vec<Value>> =
            stored.iter().map(|c| (c.checkpoint.id.as_str(), log_of(c))).collect();
        for c in &stored {
            let win = by_id[c.checkpoint.id.as_str()];
            let before = win.parent.as_deref().map(|p| logs[p].clone()).unwrap_or_default();
            assert_eq!(
                logs[win.id.as_str()],
                [before, win.appended.clone()].concat(),
                "thread {t}: log of {}",
                win.id
            );
            checked += 1;
        }
        // get_tuple agrees with the listing.
        let saver = Db::open(&path).unwrap().checkpointer();
        for c in stored.iter().step_by(7) {
            let got = saver.get_tuple(&c.config).unwrap().unwrap();
            assert_eq!(log_of(&got), logs[c.checkpoint.id.as_str()]);
        }
    }
    check_file_with(&path, Blobs::AllPresent, Parents::OldestMayDangle)
        .unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let deltas: i64 = common::raw_ro(&path)
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    let conflicts = conflicts.into_inner().unwrap();
    report(
        "race_steps",
        &[
            ("writers", WRITERS as u64),
            ("commits", wins.len() as u64),
            ("forks", wins.iter().filter(|w| w.fork).count() as u64),
            ("conflicts", conflicts),
            ("checkpoints_checked", checked),
            ("delta_blobs", deltas as u64),
        ],
    );
    assert!(conflicts > 0, "the writers never raced");
    assert!(deltas > 0, "no incremental blob");
}

/// What a step writer of the maintenance race was told it wrote.
#[derive(Default)]
struct Acked {
    /// id -> (run id, log).
    cps: BTreeMap<String, (String, Vec<Value>)>,
    conflicts: u64,
}

#[test]
fn maintenance_beside_writers_removes_only_what_it_should() {
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!("maintenance race: AGENTSTATE_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("maint.db");
    Db::open(&path).unwrap();
    let deadline = Instant::now() + duration();
    let done = AtomicBool::new(false);
    let acked: Vec<Mutex<Acked>> = (0..3).map(|_| Mutex::default()).collect();
    let items = Mutex::new(BTreeMap::<String, Value>::new());
    let passes = Mutex::new(0u64);
    let keep = 6;
    std::thread::scope(|scope| {
        // Step writers on m0 (exempt from retention), m1 (forked by the
        // maintainer), m2 (retention on write, keep 4).
        for (w, acked) in acked.iter().enumerate() {
            let path = &path;
            scope.spawn(move || {
                let mut rng = Rng::new(seed.wrapping_add(w as u64));
                let db = Db::open(path).unwrap();
                let saver = db.checkpointer();
                let saver = if w == 2 { saver.with_retention(Retention::keep_last(4)) } else { saver };
                let config = CheckpointConfig::thread(format!("m{w}"));
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let head = saver.get_tuple(&config).unwrap();
                    let run = if n % 5 == 0 { "doomed".to_string() } else { format!("keep-{w}") };
                    let items: Vec<Value> = (0..rng.range(1, 3)).map(|i| entry(w, n * 10 + i)).collect();
                    let meta = Metadata::new().with("run_id", run.as_str()).with("step", n as i64);
                    let step = match &head {
                        Some(h) => saver.step(h),
                        None => saver.start(&config),
                    };
                    match step.append("log", items.clone()).metadata(meta).commit() {
                        Ok(tuple) => {
                            let log = [head.as_ref().map(log_of).unwrap_or_default(), items].concat();
                            assert_eq!(log_of(&tuple), log);
                            acked.lock().unwrap().cps.insert(tuple.checkpoint.id.clone(), (run, log));
                        }
                        // The maintainer removed or forked past the head.
                        Err(Error::Conflict(_)) => acked.lock().unwrap().conflicts += 1,
                        Err(e) => panic!("writer m{w}: {e:?}"),
                    }
                }
            });
        }
        // Store puts, some with a TTL of 0.
        let (p, items, done_ref) = (&path, &items, &done);
        scope.spawn(move || {
            let store = Db::open(p).unwrap().store(store_config(DIMS)).unwrap();
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let value = json!({"text": format!("item {n} about tea"), "n": n});
                if n % 3 == 0 {
                    store.put_with(Put::new(&["tmp"], format!("k{n}"), value).ttl(Duration::ZERO)).unwrap();
                } else {
                    store.put(&["keep"], &format!("k{}", n % 50), value.clone()).unwrap();
                    items.lock().unwrap().insert(format!("k{}", n % 50), value);
                }
            }
            done_ref.store(true, Ordering::SeqCst);
        });
        // The maintainer.
        let (p, passes) = (&path, &passes);
        scope.spawn(move || {
            let db = Db::open(p).unwrap();
            let saver = db.checkpointer();
            let store = db.store(store_config(DIMS)).unwrap();
            let mut n = 0;
            while Instant::now() < deadline {
                n += 1;
                saver.apply_retention(&Retention::keep_last(keep).exempt("m0")).unwrap();
                saver.delete_for_runs(&["doomed"]).unwrap();
                match saver.fork_with(
                    &CheckpointConfig::thread("m1"),
                    json!({"note": n}).as_object().unwrap().clone(),
                ) {
                    Ok(_) | Err(Error::NotFound(_)) => {}
                    Err(e) => panic!("fork_with: {e:?}"),
                }
                store.sweep_expired().unwrap();
                // A copy of the exempt thread, deleted at once, beside its
                // writer; now and then a vacuum.
                let scratch = format!("scratch-{n}");
                match saver.copy_thread("m0", &scratch) {
                    Ok(()) | Err(Error::NotFound(_)) => {}
                    Err(e) => panic!("copy_thread: {e:?}"),
                }
                saver.delete_thread(&scratch).unwrap();
                if n % 25 == 0 {
                    db.vacuum().unwrap();
                }
                *passes.lock().unwrap() += 1;
            }
        });
    });
    assert!(done.load(Ordering::SeqCst));
    // A last pass, so that what the writers did after the maintainer's last
    // one is covered.
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    saver.delete_for_runs(&["doomed"]).unwrap();
    saver.apply_retention(&Retention::keep_last(keep).exempt("m0")).unwrap();
    let scratch = db.threads().unwrap().into_iter().filter(|t| t.thread_id.starts_with("scratch-")).count();
    assert_eq!(scratch, 0, "a deleted copy left checkpoints");
    let mut stored_total = 0;
    for (w, acked) in acked.iter().enumerate() {
        let acked = acked.lock().unwrap();
        let t = format!("m{w}");
        let stored = history(&path, &t);
        stored_total += stored.len();
        for c in &stored {
            let meta_run = c.metadata.run_id().map(String::from);
            assert_ne!(meta_run.as_deref(), Some("doomed"), "{t}: a doomed checkpoint survived");
            match acked.cps.get(&c.checkpoint.id) {
                Some((_, log)) => assert_eq!(&log_of(c), log, "{t}: log of {}", c.checkpoint.id),
                // The maintainer's forks of m1.
                None => assert!(
                    w == 1 && c.metadata.source() == Some("update"),
                    "{t}: {} unknown",
                    c.checkpoint.id
                ),
            }
        }
        if w == 0 {
            // Exempt from retention: every acknowledged checkpoint not doomed.
            let want: BTreeSet<&String> =
                acked.cps.iter().filter(|(_, (r, _))| r != "doomed").map(|(id, _)| id).collect();
            let got: BTreeSet<&String> = stored.iter().map(|c| &c.checkpoint.id).collect();
            assert_eq!(got, want, "m0 (exempt) lost or kept checkpoints");
        } else {
            assert!(stored.len() <= keep, "{t}: {} checkpoints after retention", stored.len());
        }
    }
    let store = db.store(store_config(DIMS)).unwrap();
    let items = items.into_inner().unwrap();
    for (k, v) in &items {
        assert_eq!(store.get(&["keep"], k).unwrap().map(|i| i.value).as_ref(), Some(v), "item {k}");
    }
    assert!(store.search(agentstate::store::Search::new(&["tmp"])).unwrap().is_empty());
    store.sweep_expired().unwrap();
    assert_eq!(store.sweep_expired().unwrap(), 0, "a second sweep found expired items");
    let raw: i64 = common::raw_ro(&path)
        .query_row("SELECT COUNT(*) FROM store WHERE prefix = 'tmp'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(raw, 0, "expired items left after a sweep");
    check_vectors(&path, DIMS).unwrap();
    check_file_with(&path, Blobs::AllPresent, Parents::MayDangle)
        .unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let conflicts: u64 = acked.iter().map(|a| a.lock().unwrap().conflicts).sum();
    report(
        "race_maintenance",
        &[
            ("commits", acked.iter().map(|a| a.lock().unwrap().cps.len() as u64).sum()),
            ("conflicts", conflicts),
            ("maintenance_passes", *passes.lock().unwrap()),
            ("checkpoints_left", stored_total as u64),
            ("items", items.len() as u64),
        ],
    );
}

#[test]
fn reindex_beside_puts_keeps_every_acknowledged_vector() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reindex.db");
    let db = Db::open(&path).unwrap();
    let store = db.store(store_config(DIMS)).unwrap();
    for n in 0..300 {
        store.put(&["seed"], &format!("k{n}"), json!({"text": format!("seed item {n}")})).unwrap();
    }
    let deadline = Instant::now() + duration();
    let puts = Mutex::new(BTreeMap::<String, Value>::new());
    let reindexes = Mutex::new(0u64);
    std::thread::scope(|scope| {
        let (path, puts, reindexes) = (&path, &puts, &reindexes);
        scope.spawn(move || {
            let store = Db::open(path).unwrap().store(store_config(DIMS)).unwrap();
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let value = json!({"text": format!("fresh item {n} about rain")});
                store.put(&["fresh"], &format!("k{n}"), value.clone()).unwrap();
                puts.lock().unwrap().insert(format!("k{n}"), value);
            }
        });
        scope.spawn(move || {
            let store = Db::open(path).unwrap().store(store_config(DIMS)).unwrap();
            while Instant::now() < deadline {
                store.reindex().unwrap();
                *reindexes.lock().unwrap() += 1;
            }
        });
    });
    let puts = puts.into_inner().unwrap();
    for (k, v) in &puts {
        assert_eq!(store.get(&["fresh"], k).unwrap().map(|i| i.value).as_ref(), Some(v));
    }
    let vectors = check_vectors(&path, DIMS).unwrap_or_else(|e| panic!("after concurrent reindexes: {e}"));
    report(
        "race_reindex",
        &[
            ("puts", puts.len() as u64),
            ("reindexes", reindexes.into_inner().unwrap()),
            ("items_checked", vectors as u64),
        ],
    );
}
