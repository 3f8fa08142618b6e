//! Full disks and I/O failures, through a fault-injecting SQLite VFS
//! (`tests/common/faultvfs.rs`, the process's default VFS, under the
//! crate's own WAL-batching VFS): no library hook is needed.
//!
//! - Disk full: every write that needs space fails with `Error::DiskFull`,
//!   is rolled back entirely, leaves a valid file, and succeeds once space
//!   returns (in the same `Db`, and after a reopen). A file that cannot even
//!   be created says `DiskFull` too.
//! - Fault sweep: the n-th write (or fsync) from now fails, and keeps
//!   failing until the fault is cleared, for n = 1, 2, 3, ... across
//!   checkpoint steps, pending writes, store batches with vectors, prunes,
//!   copies and deletes, in both durability modes. Every failure is a typed
//!   error (`DiskFull`, or `Sqlite` with code `SystemIoFailure`); the
//!   operation is all or nothing (rolled back for a full disk; for an I/O
//!   error, whose outcome a caller cannot know, either wholly applied or
//!   wholly absent); every connection of the pool and a fresh `Db` see the
//!   same state; the next operation succeeds; the file stays valid.
//!
//! `AGENTSTATE_SOAK=1` sweeps 10 times further.

mod common;
#[path = "common/faultvfs.rs"]
mod faultvfs;

use std::collections::BTreeMap;
use std::path::Path;

use agentstate::checkpoint::next_version;
use agentstate::{Db, Durability, Error};
use common::harness::{soak, store_config};
use common::ops::{check_vectors, diff, execute, observe, observe_file, s, State};
use common::{check_file_with, report, seed_from_env, Blobs, Parents, Rng};
use faultvfs::Fault;
use serde_json::{json, Map, Value};

/// The threads `put` steps write (tracked by the workload).
const THREADS: [&str; 3] = ["d0", "d1", "d2"];
/// Every thread observed: also "ds", written only through the step API
/// (`next`, `fork_with`), and "dx", whose checkpoints belong to a run that
/// `delete_runs` removes.
const OBSERVED: [&str; 5] = ["d0", "d1", "d2", "ds", "dx"];
const DIMS: usize = 16;

/// The newest checkpoint of a thread: (id, step, values, versions).
type Head = (String, i64, Map<String, Value>, Map<String, Value>);

/// Makes operations (in the JSON form of `common::ops`) and tracks the
/// heads of the threads from the operations that were applied.
struct Workload {
    rng: Rng,
    n: u64,
    heads: BTreeMap<String, Head>,
    /// The step-API thread "ds": its head, and every checkpoint's (parent,
    /// step, values).
    ds_head: Option<String>,
    ds: BTreeMap<String, DsCheckpoint>,
}

/// A checkpoint of "ds": (parent, step, values).
type DsCheckpoint = (Option<String>, i64, Map<String, Value>);

impl Workload {
    fn new(seed: u64) -> Workload {
        Workload { rng: Rng::new(seed), n: 0, heads: BTreeMap::new(), ds_head: None, ds: BTreeMap::new() }
    }

    /// The next operation; `big` makes its values large (hundreds of KB).
    fn next(&mut self, big: bool) -> Value {
        self.n += 1;
        let n = self.n;
        let size = if big { 400_000 } else { self.rng.range(100, 9_000) as usize };
        let t = self.rng.pick(&THREADS).to_string();
        let roll = self.rng.below(100);
        if !big && self.rng.chance(15) {
            let kind = self.rng.below(8);
            return self.maintenance(kind, size);
        }
        if roll < 35 || big && roll < 50 {
            let head = self.heads.get(&t);
            let step = head.map_or(-1, |h| h.1) + 1;
            let mut values = head.map(|h| h.2.clone()).unwrap_or_default();
            let mut versions = head.map(|h| h.3.clone()).unwrap_or_default();
            let mut new = vec![];
            for (ch, v) in [
                ("a", json!([format!("{t} {step}"), "a".repeat(size)])),
                ("b", json!({"step": step, "pad": "b".repeat(size / 2)})),
                ("c", json!(step)),
            ] {
                let cur = versions.get(ch).map(|v| agentstate::checkpoint::ChannelVersion::Str(s(v)));
                versions.insert(ch.into(), json!(next_version(cur.as_ref()).to_string()));
                values.insert(ch.into(), v);
                new.push(ch);
            }
            let id = agentstate::checkpoint::uuid6(Some(step)).to_string();
            json!({"op": "step", "t": t, "ns": "", "id": id, "parent": head.map(|h| h.0.clone()),
                   "values": values, "versions": versions, "new": new,
                   "meta": {"source": "loop", "step": step}})
        } else if roll < 55 {
            match self.heads.get(&t) {
                Some(h) => {
                    let writes: Vec<Value> =
                        (0..3).map(|i| json!(["out", {"i": i, "pad": "w".repeat(size / 3)}])).collect();
                    json!({"op": "writes", "t": t, "ns": "", "id": h.0, "task": format!("task-{n:06}"), "writes": writes})
                }
                None => self.next(big),
            }
        } else if roll < 85 || big {
            let items: Vec<Value> = (0..3)
                .map(|i| {
                    let text = format!("note {n} {i} {}", ["tea", "rain", "cats"][i % 3]);
                    json!([["disk", format!("ns{}", i % 2)], format!("k{}", self.rng.below(12)),
                           {"text": text, "pad": "p".repeat(size / 3)}])
                })
                .collect();
            json!({"op": "put", "items": items})
        } else if roll < 90 {
            json!({"op": "del", "ns": ["disk", "ns0"], "key": format!("k{}", self.rng.below(12))})
        } else if roll < 95 {
            json!({"op": "prune", "t": [t]})
        } else {
            let empty: Vec<&str> = THREADS.iter().copied().filter(|d| !self.heads.contains_key(*d)).collect();
            if empty.is_empty() {
                json!({"op": "delete_thread", "t": t})
            } else if self.heads.contains_key(&t) {
                json!({"op": "copy", "src": t, "dst": self.rng.pick(&empty)})
            } else {
                self.next(big)
            }
        }
    }

    /// The operations beyond steps, writes and Store puts: the step API and
    /// fork_with on "ds", retention of one thread, a run's deletion, TTL
    /// puts and the sweep, reindex, vacuum.
    fn maintenance(&mut self, kind: u64, size: usize) -> Value {
        let n = self.n;
        match kind {
            0 | 1 => {
                // A step-API step on "ds", appending to its log.
                let (parent, step, mut values) = match &self.ds_head {
                    Some(h) => (Some(h.clone()), self.ds[h].1 + 1, self.ds[h].2.clone()),
                    None => (None, 0, Map::new()),
                };
                let items: Vec<Value> =
                    (0..3).map(|i| json!({"n": n, "i": i, "pad": "l".repeat(size / 3)})).collect();
                let mut log = values.get("log").and_then(Value::as_array).cloned().unwrap_or_default();
                log.extend(items.iter().cloned());
                values.insert("log".into(), Value::Array(log));
                json!({"op": "next", "t": "ds", "ns": "", "parent": parent, "fork": false, "set": {},
                       "append": {"log": items}, "retain": null, "values": values,
                       "meta": {"source": "loop", "step": step}})
            }
            2 => {
                // fork_with from the head's parent.
                let Some(at) = self.ds_head.as_ref().and_then(|h| self.ds[h].0.clone()) else {
                    return json!({"op": "reindex"});
                };
                let (_, step, mut values) = self.ds[&at].clone();
                values.insert("note".into(), json!({"n": n}));
                json!({"op": "fork_with", "t": "ds", "ns": "", "at": at, "set": {"note": {"n": n}},
                       "values": values, "meta": {"source": "update", "step": step + 1, "parents": {}}})
            }
            3 => {
                // Retention of one thread (one transaction).
                let t = self.rng.pick(&THREADS).to_string();
                let exempt: Vec<&str> = OBSERVED.iter().copied().filter(|o| *o != t).collect();
                json!({"op": "retain", "keep": self.rng.range(1, 4), "exempt": exempt})
            }
            4 => {
                // A run on "dx", or its deletion.
                if self.rng.chance(50) {
                    let id = agentstate::checkpoint::uuid6(Some(n as i64)).to_string();
                    json!({"op": "step", "t": "dx", "ns": "", "id": id, "parent": null,
                           "values": {"x": {"pad": "x".repeat(size)}}, "versions": {"x": format!("{n}")},
                           "new": ["x"], "meta": {"source": "loop", "step": 0, "run_id": "doomed"}})
                } else {
                    json!({"op": "delete_runs", "runs": ["doomed"]})
                }
            }
            5 => {
                // Items that expire at once, then the sweep.
                if self.rng.chance(50) {
                    let items: Vec<Value> = (0..3)
                        .map(|i| json!([["disk", "tmp"], format!("t{n}-{i}"), {"text": "gone", "pad": "t".repeat(size / 3)}, 0]))
                        .collect();
                    json!({"op": "put", "items": items})
                } else {
                    json!({"op": "sweep"})
                }
            }
            6 => json!({"op": "reindex"}),
            _ => json!({"op": "vacuum"}),
        }
    }

    /// `op` was applied (a `next` or `fork_with` with its `id`).
    fn applied(&mut self, op: &Value) {
        match op["op"].as_str().unwrap() {
            "next" | "fork_with" => {
                let id = s(&op["id"]);
                let parent = if op["op"] == "next" { op["parent"].as_str() } else { op["at"].as_str() };
                let step = op["meta"]["step"].as_i64().unwrap();
                self.ds.insert(
                    id.clone(),
                    (parent.map(String::from), step, op["values"].as_object().unwrap().clone()),
                );
                self.ds_head = Some(id);
            }
            "step" => {
                let head = (
                    s(&op["id"]),
                    op["meta"]["step"].as_i64().unwrap(),
                    op["values"].as_object().unwrap().clone(),
                    op["versions"].as_object().unwrap().clone(),
                );
                self.heads.insert(s(&op["t"]), head);
            }
            "delete_thread" => {
                self.heads.remove(&s(&op["t"]));
            }
            "copy" => {
                let h = self.heads[&s(&op["src"])].clone();
                self.heads.insert(s(&op["dst"]), h);
            }
            _ => {}
        }
    }
}

/// Runs `op` against `db`, as the one `Checkpointer` and `Store` of a
/// caller would.
fn run(db: &Db, op: &mut Value) -> agentstate::Result<()> {
    let id = execute(&db.checkpointer(), &db.store(store_config(DIMS))?, op)?;
    if let Some(id) = id {
        op["id"] = json!(id);
    }
    Ok(())
}

/// `model` with `op` applied; for a `next` or `fork_with` whose id the
/// caller never learnt (it failed), the one new checkpoint of its thread in
/// `seen`, if any.
fn applied(model: &State, op: &Value, seen: &State) -> State {
    let mut op = op.clone();
    if (op["op"] == "next" || op["op"] == "fork_with") && op.get("id").is_none() {
        let fresh = seen.cps.keys().find(|k| k.0 == "ds" && !model.cps.contains_key(*k));
        op["id"] = json!(fresh.map(|k| k.2.clone()).unwrap_or_default());
    }
    let mut with = model.clone();
    with.apply(&op);
    with
}

/// The id a `next` or `fork_with` that failed created anyway, as `seen`
/// shows it (added to `op`).
fn learn_id(model: &State, op: &mut Value, seen: &State) {
    if (op["op"] == "next" || op["op"] == "fork_with") && op.get("id").is_none() {
        if let Some(k) = seen.cps.keys().find(|k| k.0 == "ds" && !model.cps.contains_key(*k)) {
            op["id"] = json!(k.2.clone());
        }
    }
}

fn check(path: &Path) {
    assert!(faultvfs::under_agentstate(), "the crate's VFS must write through the faulty one");
    if let Err(bad) = check_file_with(path, Blobs::AllPresent, Parents::MayDangle) {
        panic!("{}", bad.join("\n"));
    }
    check_vectors(path, DIMS).unwrap();
}

#[test]
fn disk_full_is_typed_rolled_back_and_recoverable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let (disk, uri) = faultvfs::disk(&path);

    // No space to create the file: a typed error, and a file that opens
    // once there is space.
    disk.arm(Fault::Full(0));
    let err = Db::open(&uri).expect_err("no space for the schema");
    assert!(matches!(err, Error::DiskFull), "{err:?}");
    disk.disarm();
    let db = Db::open(&uri).unwrap();

    let mut work = Workload::new(seed_from_env("AGENTSTATE_SEED"));
    let mut model = State::default();
    for _ in 0..15 {
        let mut op = work.next(false);
        run(&db, &mut op).unwrap();
        model.apply(&op);
        work.applied(&op);
    }
    let mut refused = 0u64;
    let mut accepted_while_full = 0u64;
    disk.arm(Fault::Full(0));
    // Large operations need space: refused, rolled back, file valid.
    let mut big_ops = vec![];
    for _ in 0..6 {
        let mut op = work.next(true);
        match run(&db, &mut op) {
            Err(Error::DiskFull) => refused += 1,
            other => panic!("a {} of hundreds of KB on a full disk: {other:?}", op["op"]),
        }
        let live = observe(&db, &OBSERVED, store_config(DIMS)).unwrap();
        assert!(live == model, "a refused operation left traces:\n{}", diff(&live, &model));
        check(&path);
        big_ops.push(op);
    }
    // Small ones may fit in space the file already has (freed pages, the
    // WAL's tail); each is all or nothing.
    for _ in 0..40 {
        let mut op = work.next(false);
        match run(&db, &mut op) {
            Ok(()) => {
                model.apply(&op);
                work.applied(&op);
                accepted_while_full += 1;
            }
            Err(Error::DiskFull) => refused += 1,
            Err(e) => panic!("{} on a full disk: {e:?}", op["op"]),
        }
        let live = observe(&db, &OBSERVED, store_config(DIMS)).unwrap();
        assert!(live == model, "after {}:\n{}", op["op"], diff(&live, &model));
    }
    check(&path);
    // Space returns: the refused large operations now succeed, in the same
    // Db and its pooled connections.
    disk.disarm();
    for op in big_ops {
        // (A step or writes refused earlier was made for the heads of its
        // time: fresh ones replace them.)
        let mut op = if op["op"] == "step" || op["op"] == "writes" { work.next(true) } else { op };
        run(&db, &mut op).unwrap();
        model.apply(&op);
        work.applied(&op);
    }
    assert_eq!(observe(&db, &OBSERVED, store_config(DIMS)).unwrap(), model);
    drop(db);
    assert_eq!(observe_file(&path, &OBSERVED, store_config(DIMS)).unwrap(), model);
    check(&path);
    report("disk_full", &[("refused", refused), ("small_ops_fitting_while_full", accepted_while_full)]);
}

/// The fault kinds of the sweep, by name.
fn fault(kind: &str, n: u64) -> Fault {
    match kind {
        "full" => Fault::Full(n),
        "write" => Fault::WriteError(n),
        _ => Fault::SyncError(n),
    }
}

#[test]
fn faults_at_every_write_are_all_or_nothing() {
    let seed = seed_from_env("AGENTSTATE_SEED");
    eprintln!("disk fault sweep: AGENTSTATE_SEED={seed}");
    let mut tally: BTreeMap<String, u64> = BTreeMap::new();
    let mut refused_ops: BTreeMap<String, u64> = BTreeMap::new();
    let dir = tempfile::tempdir().unwrap();
    for kind in ["full", "write", "sync"] {
        for durability in [Durability::Full, Durability::Normal] {
            let path = dir.path().join(format!("{kind}-{durability:?}.db"));
            let (disk, uri) = faultvfs::disk(&path);
            let open = || Db::builder().durability(durability).open(&uri).unwrap();
            let mut db = open();
            let mut work = Workload::new(seed ^ kind.len() as u64 ^ durability as u64);
            let mut model = State::default();
            // Operations refused with an I/O error whose commit record may
            // still sit in the WAL past its last valid frame: a later commit
            // writes over it, but a later operation that writes nothing (a
            // sweep that finds nothing, a failure before its first frame)
            // leaves it there, and recovery after a kill replays it
            // (RELIABILITY.md, "An I/O error has one subtlety").
            let mut limbo: Vec<Value> = Vec::new();
            for _ in 0..10 {
                let mut op = work.next(false);
                run(&db, &mut op).unwrap();
                model.apply(&op);
                work.applied(&op);
            }
            for n in 0..40 * soak(10) {
                // Every fourth operation is one of the maintenance kinds in
                // turn, so that each meets faults at several positions.
                let mut op = if n % 4 == 1 {
                    work.n += 1;
                    work.maintenance((n / 4) % 8, 2_000)
                } else {
                    work.next(n % 7 == 3)
                };
                // (An operation makes one fsync per commit in FULL mode and
                // none in NORMAL mode but at WAL checkpoints: the first few
                // are the ones to fail.)
                disk.arm(fault(kind, if kind == "sync" { n % 3 } else { n % 40 }));
                let result = run(&db, &mut op);
                let injected = disk.disarm();
                let live = observe(&db, &OBSERVED, store_config(DIMS))
                    .unwrap_or_else(|e| panic!("{kind}/{durability:?} n={n}: reading after the fault: {e}"));
                let with = applied(&model, &op, &live);
                let where_ = format!("{kind}/{durability:?} n={n} {}", op["op"]);
                if result.is_err() {
                    // What a process killed right after the failure would
                    // leave: the files as they are now. Also all or nothing
                    // (an fsync that failed after the commit frame was
                    // written leaves a commit that recovery may replay).
                    let copy = dir.path().join("killed.db");
                    for suffix in ["", "-wal"] {
                        let from = format!("{}{suffix}", path.display());
                        let to = format!("{}{suffix}", copy.display());
                        let _ = std::fs::remove_file(&to);
                        if Path::new(&from).exists() {
                            std::fs::copy(&from, &to).unwrap();
                        }
                    }
                    let _ = std::fs::remove_file(format!("{}-shm", copy.display()));
                    let after_kill = observe_file(&copy, &OBSERVED, store_config(DIMS)).unwrap();
                    let with = applied(&model, &op, &after_kill);
                    let earlier =
                        limbo.iter().any(|failed| after_kill == applied(&model, failed, &after_kill));
                    assert!(
                        after_kill == model || after_kill == with || earlier,
                        "{where_}: killed after the failure, the file is half-applied:\n{}",
                        diff(&after_kill, &model)
                    );
                    let outcome = if after_kill == model {
                        "absent"
                    } else if after_kill == with {
                        "applied"
                    } else {
                        "an_earlier_failure_applied"
                    };
                    *tally.entry(format!("killed_after_{kind}_failure_{outcome}")).or_default() += 1;
                    check(&copy);
                }
                match &result {
                    Ok(()) => {
                        assert!(live == with, "{where_}: Ok but not applied:\n{}", diff(&live, &with));
                        *tally.entry("ok".into()).or_default() += 1;
                        if injected > 0 {
                            // A fault after the commit (a WAL checkpoint).
                            *tally.entry("ok_despite_a_fault".into()).or_default() += 1;
                        }
                    }
                    Err(e) => {
                        let typed = match (kind, e) {
                            ("full", Error::DiskFull) => true,
                            ("write" | "sync", e) => {
                                e.sqlite_code() == Some(rusqlite::ErrorCode::SystemIoFailure)
                            }
                            _ => false,
                        };
                        assert!(typed, "{where_}: untyped error {e:?}");
                        if kind == "full" {
                            assert!(
                                live == model,
                                "{where_}: DiskFull but not rolled back:\n{}",
                                diff(&live, &model)
                            );
                        } else {
                            assert!(
                                live == model || live == with,
                                "{where_}: {e} and half-applied:\nagainst before:\n{}\nagainst applied:\n{}",
                                diff(&live, &model),
                                diff(&live, &with)
                            );
                        }
                        *tally.entry(format!("refused_{kind}")).or_default() += 1;
                        *refused_ops.entry(s(&op["op"])).or_default() += 1;
                    }
                }
                if live == with {
                    learn_id(&model, &mut op, &live);
                    if with != model {
                        limbo.clear();
                    }
                    model = with;
                    work.applied(&op);
                } else {
                    limbo.push(op.clone());
                }
                // Every third round, the process closes the file right
                // after the fault: what it saw is what it reopens.
                if n % 3 == 1 {
                    drop(db);
                    db = open();
                    assert!(
                        observe(&db, &OBSERVED, store_config(DIMS)).unwrap() == model,
                        "{where_}: reopened"
                    );
                    // The last connection to close checkpointed the WAL and
                    // removed it.
                    limbo.clear();
                }
                // Work resumes at once.
                let mut next = work.next(false);
                run(&db, &mut next).unwrap_or_else(|e| panic!("{where_}: the next operation failed: {e:?}"));
                let before = model.clone();
                model.apply(&next);
                if model != before {
                    limbo.clear();
                }
                work.applied(&next);
                // Every few rounds: a fresh Db sees the same (the others
                // keep their connections open, then they are reopened too).
                if n % 5 == 4 {
                    assert_eq!(
                        observe_file(&path, &OBSERVED, store_config(DIMS)).unwrap(),
                        model,
                        "{where_}"
                    );
                    check(&path);
                    drop(db);
                    db = open();
                    assert_eq!(
                        observe(&db, &OBSERVED, store_config(DIMS)).unwrap(),
                        model,
                        "{where_} after reopen"
                    );
                    limbo.clear();
                }
            }
            drop(db);
            assert_eq!(observe_file(&path, &OBSERVED, store_config(DIMS)).unwrap(), model);
            check(&path);
        }
    }
    let figures: Vec<(&str, u64)> = tally.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    report("disk_fault_sweep", &figures);
    eprintln!("disk fault sweep: operations refused by a fault, by kind: {refused_ops:?}");
}

/// Write-behind on a full disk: a queued step the disk refuses is rolled
/// back whole, the steps queued after it (continuing it) are refused, and
/// the caller hears of it from `flush` (or its next write), never silently.
/// What the file holds is exactly a prefix of the acknowledged chain, every
/// checkpoint with its blobs; with space back the thread continues from the
/// head the file holds.
#[test]
fn write_behind_on_a_full_disk_keeps_a_whole_prefix_and_reports_the_rest() {
    use agentstate::{CheckpointConfig, ListQuery};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("behind_full.db");
    let (disk, uri) = faultvfs::disk(&path);
    let db = Db::builder().write_behind(true).open(&uri).unwrap();
    let saver = db.checkpointer();
    let config = CheckpointConfig::thread("wb");
    let mut head = saver.start(&config).set("n", json!(0)).commit().unwrap();
    let mut acked = vec![head.checkpoint.id.clone()];
    for i in 1..10 {
        head = saver.step(&head).set("n", json!(i)).append("log", [json!("x".repeat(200))]).commit().unwrap();
        acked.push(head.checkpoint.id.clone());
    }
    db.flush().unwrap();
    let before_fault = acked.len();

    disk.arm(Fault::Full(0));
    let mut reported = 0u64;
    for i in 10..20 {
        let step = saver.step(&head).set("n", json!(i)).set("doc", json!("y".repeat(300_000)));
        match step.commit() {
            Ok(t) => {
                head = t;
                acked.push(head.checkpoint.id.clone());
            }
            // An earlier queued step's failure, reported by this write.
            Err(Error::DiskFull | Error::Conflict(_)) => reported += 1,
            Err(e) => panic!("step {i} on a full disk: {e:?}"),
        }
    }
    match db.flush() {
        Ok(()) => assert!(reported > 0, "every queued step failed and nobody said so"),
        Err(Error::DiskFull | Error::Conflict(_)) => reported += 1,
        Err(e) => panic!("flush on a full disk: {e:?}"),
    }
    disk.disarm();

    // The file holds a prefix of the acknowledged chain, at least what was
    // flushed before the fault, and nothing else.
    let stored: Vec<String> = {
        let mut ids: Vec<String> = saver
            .list(&ListQuery::thread("wb"))
            .unwrap()
            .into_iter()
            .map(|t| t.checkpoint.id.clone())
            .collect();
        ids.reverse();
        ids
    };
    assert!(
        stored.len() >= before_fault && stored.len() < acked.len(),
        "{} of {}",
        stored.len(),
        acked.len()
    );
    assert_eq!(stored[..], acked[..stored.len()], "not a prefix of the acknowledged chain");
    drop((saver, db));
    check(&path);

    // Space is back: the thread continues from the head the file holds.
    let db = Db::builder().write_behind(true).open(&uri).unwrap();
    let saver = db.checkpointer();
    let latest = saver.get_tuple(&config).unwrap().unwrap();
    assert_eq!(&latest.checkpoint.id, stored.last().unwrap());
    let n = latest.checkpoint.values_json()["n"].as_i64().unwrap();
    saver.step(&latest).set("n", json!(n + 1)).commit().unwrap();
    db.flush().unwrap();
    drop((saver, db));
    check(&path);
    report(
        "write_behind_full",
        &[("acknowledged_while_full", (acked.len() - before_fault) as u64), ("reported", reported)],
    );
}

/// A transaction larger than the page cache spills its pages to the log
/// before its commit, and the crate's VFS holds some of them back until
/// another operation needs the file. When that operation is a read and the
/// disk is full, the statement that read fails with `SQLITE_FULL`, and
/// SQLite rolls back only that statement if it may change several rows: a
/// caller that goes on and commits must find every row it wrote, in the file and
/// in what a kill leaves. (The VFS dropped the frames it could not write:
/// the commit succeeded over ~30 missing pages, a malformed database.) A
/// raw connection through the crate's VFS, with a small page cache.
#[test]
fn a_full_disk_met_by_a_read_in_a_spilled_transaction_loses_nothing() {
    use agentstate::rusqlite::{Connection, ErrorCode, OpenFlags};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spill.db");
    let (disk, uri) = faultvfs::disk(&path);
    drop(Db::open(&uri).unwrap());
    assert!(faultvfs::under_agentstate());
    let flags =
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let c = Connection::open_with_flags_and_vfs(&uri, flags, "agentstate").unwrap();
    c.execute_batch("PRAGMA cache_size = 20; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB); BEGIN;").unwrap();
    for i in 0..100 {
        c.execute("INSERT INTO t VALUES (?1, randomblob(3000))", [i]).unwrap();
    }
    // A statement that reads pages from the log, and may change several
    // rows (so SQLite undoes only it).
    disk.arm(Fault::Full(0));
    let update = c.execute("UPDATE t SET v = zeroblob(3000) WHERE k IN (0, 50)", []);
    assert!(disk.disarm() > 0, "the update met the full disk");
    let code = update.expect_err("no room").sqlite_error_code();
    assert_eq!(code, Some(ErrorCode::DiskFull));
    assert!(!c.is_autocommit(), "one statement rolled back, not the transaction");
    for i in 100..150 {
        c.execute("INSERT INTO t VALUES (?1, randomblob(3000))", [i]).unwrap();
    }
    c.execute_batch("COMMIT").unwrap();
    let sums = |c: &Connection| -> (i64, i64, String) {
        let (n, total) = c
            .query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        (n, total, c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap())
    };
    let want = (150, 150 * 3_000, "ok".to_string());
    assert_eq!(sums(&c), want);
    // What a kill leaves: the files without `-shm`.
    let copy = dir.path().join("killed.db");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(format!("{}-wal", path.display()), format!("{}-wal", copy.display())).unwrap();
    assert_eq!(sums(&Connection::open(&copy).unwrap()), want);
    drop(c);
    assert_eq!(sums(&Connection::open(&path).unwrap()), want);
}
