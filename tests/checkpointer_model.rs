//! Model-based property test of the checkpointer: random sequences of put
//! (new ids, re-put ids, any parent, values with and without versions,
//! channels in and out of `new_versions`, colliding integer versions),
//! put_writes (regular and special channels, repeated tasks, checkpoints
//! that do not exist), fork, fork_with, delete_thread, copy_thread, prune
//! (both strategies), delete_for_runs and reopen, checked step by step
//! against an in-memory model of the three tables and their documented
//! rules (`docs/format.md`): inline primitives, blobs keyed by version and
//! never overwritten, writes keyed by (task, idx) with first-writer-wins or
//! all-special upserts, prune's blob collection. Reads (get_tuple latest and
//! by id, list by thread/namespace/filter/before/limit) must return exactly
//! the model's tuples, and so must `list_iter`. Appends to a list channel
//! past the thresholds of incremental blobs, through `put` and through the
//! step API (`start`, `step(..).append(..)`, a stale `step` that must be a
//! `Conflict`, a `fork()`), check the lists read back whole.
//!
//! The steps and the model are in `tests/checkpointer_model/model.rs`;
//! this file runs sequences against both. `AGENTSTATE_SOAK=1` runs 20 times
//! as many sequences.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use agentstate::checkpoint::{ChannelVersion, ChannelVersions};
use agentstate::{
    Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, Db, Error, ListQuery, Metadata,
    PruneStrategy,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

#[path = "checkpointer_model/model.rs"]
mod model;
use model::*;

// ---------------------------------------------------------------------------
// Running a sequence

fn open(path: &Path) -> Checkpointer {
    Db::open(path).unwrap().checkpointer()
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Lists may order checkpoints with equal ids (copies in other threads)
/// either way: the ids must be the model's, in order, and each tuple one of
/// the model's with its id (`all` is the model's list without its limit).
fn same_list(
    got: &[CheckpointTuple],
    all: &[CheckpointTuple],
    limit: Option<usize>,
) -> Result<(), TestCaseError> {
    let ids = |v: &[CheckpointTuple]| v.iter().map(|t| t.checkpoint.id.clone()).collect::<Vec<_>>();
    let mut want = ids(all);
    want.truncate(limit.unwrap_or(usize::MAX));
    prop_assert_eq!(ids(got), want);
    let exact = got.iter().zip(all).all(|(g, w)| g == w);
    if !exact {
        for g in got {
            prop_assert!(all.iter().any(|w| w == g), "unexpected tuple {:?}", g);
        }
        let distinct: BTreeSet<(String, String, String)> = got
            .iter()
            .map(|t| (t.config.thread_id.clone(), t.config.checkpoint_ns.clone(), t.checkpoint.id.clone()))
            .collect();
        prop_assert_eq!(distinct.len(), got.len(), "a checkpoint listed twice");
    }
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cp.db");
    let mut saver = open(&path);
    let mut m = Model::default();
    let mut counter = 0i64;
    for step in steps {
        counter += 1;
        let mutated = !matches!(step, Step::Get { .. } | Step::List { .. });
        match step {
            Step::Put { thread, ns, parent, reuse, chans, run } => {
                let (t, n) = (THREADS[thread], NSS[ns]);
                let ids = m.ids(t, n);
                let all_ids: Vec<String> = m.rows.keys().map(|k| k.2.clone()).collect();
                let id = match reuse {
                    Some(i) if !ids.is_empty() => ids[i % ids.len()].clone(),
                    Some(i) if !all_ids.is_empty() => all_ids[i % all_ids.len()].clone(),
                    _ => agentstate::checkpoint::uuid6(Some(counter)).to_string(),
                };
                let parent = match parent {
                    0 | 1 => None,
                    2..=4 => m.latest(t, n),
                    5 | 6 if !all_ids.is_empty() => Some(all_ids[parent % all_ids.len()].clone()),
                    _ => Some("no-such-checkpoint".to_string()),
                };
                let mut cp = Checkpoint::with_id(&id);
                cp.ts = TS.into();
                let mut new = ChannelVersions::new();
                for c in chans {
                    let ch = CHANNELS[c.name].to_string();
                    cp.channel_values.remove(&ch);
                    cp.channel_versions.remove(&ch);
                    new.remove(&ch);
                    if let Some(v) = c.value {
                        cp.channel_values.insert(ch.clone(), (v).into());
                    }
                    if let Some(v) = c.version {
                        cp.channel_versions.insert(ch.clone(), ChannelVersion::Int(v));
                    }
                    if let Some(v) = c.new_version {
                        new.insert(ch, ChannelVersion::Int(v));
                    }
                }
                let meta = Metadata::new()
                    .with("source", "loop")
                    .with("step", counter)
                    .with("run_id", format!("r{run}"));
                let mut config = CheckpointConfig::thread(t).ns(n);
                config.checkpoint_id = parent.clone();
                let result = saver.put(&config, &cp, &meta, &new);
                if let Some(kind) = m.refusal(t, n, parent.as_deref(), &cp, &new) {
                    let ok = match kind {
                        "Conflict" => matches!(result, Err(Error::Conflict(_))),
                        _ => matches!(result, Err(Error::InvalidArgument(_))),
                    };
                    prop_assert!(ok, "expected {}: {:?}", kind, result);
                    continue;
                }
                let out = result.map_err(fail)?;
                prop_assert_eq!(out, CheckpointConfig::thread(t).ns(n).at(&id));
                m.put(t, n, &id, parent, &cp, &meta.0, &new, None, false);
            }
            Step::Writes { thread, ns, target, task, writes } => {
                let (t, n) = (THREADS[thread], NSS[ns]);
                let ids = m.ids(t, n);
                let id = if ids.is_empty() || target == 7 {
                    "no-such-checkpoint".to_string()
                } else {
                    ids[target % ids.len()].clone()
                };
                let task = format!("task{task}");
                let writes: Vec<(&str, Value)> =
                    writes.into_iter().map(|(c, v)| (WRITE_CHANNELS[c], v)).collect();
                saver
                    .put_writes(&CheckpointConfig::thread(t).ns(n).at(&id), &writes, &task, "p")
                    .map_err(fail)?;
                let all_special = writes.iter().all(|(c, _)| special_idx(c).is_some());
                for (i, (c, v)) in writes.iter().enumerate() {
                    let idx = special_idx(c).unwrap_or(i as i64);
                    let key = (t.to_string(), n.to_string(), id.clone(), task.clone(), idx);
                    if all_special {
                        m.writes.insert(key, (c.to_string(), v.clone()));
                    } else {
                        m.writes.entry(key).or_insert_with(|| (c.to_string(), v.clone()));
                    }
                }
            }
            Step::Fork { thread, ns, target, values } => {
                let (t, n) = (THREADS[thread], NSS[ns]);
                let ids = m.ids(t, n);
                let config = match target {
                    Some(i) if !ids.is_empty() => CheckpointConfig::thread(t).ns(n).at(&ids[i % ids.len()]),
                    Some(_) => CheckpointConfig::thread(t).ns(n).at("no-such-checkpoint"),
                    None => CheckpointConfig::thread(t).ns(n),
                };
                let values: Map<String, Value> =
                    values.into_iter().map(|(c, v)| (CHANNELS[c].to_string(), v)).collect();
                let base_id = match &config.checkpoint_id {
                    Some(id) if m.rows.contains_key(&(t.into(), n.into(), id.clone())) => Some(id.clone()),
                    Some(_) => None,
                    None => m.latest(t, n),
                };
                let result = saver.fork_with(&config, values.clone());
                let Some(base_id) = base_id else {
                    prop_assert!(matches!(result, Err(Error::NotFound(_))), "{:?}", result);
                    continue;
                };
                let new_config = result.map_err(fail)?;
                let base = m.tuple(&(t.into(), n.into(), base_id.clone()));
                let got = saver.get_tuple(&new_config).map_err(fail)?.expect("the fork exists");
                // What fork promises, checked; then the model learns the
                // fork's id, time and new versions.
                let step = base.metadata.step().unwrap_or(-1);
                let (source, step) = if values.is_empty() { ("fork", step) } else { ("update", step + 1) };
                let meta =
                    Metadata::new().with("source", source).with("step", step).with("parents", json!({}));
                prop_assert_eq!(&*got.metadata, &meta);
                prop_assert_eq!(&got.parent_config, &Some(base.config.clone()));
                prop_assert!(got.pending_writes.is_empty());
                let mut want_values = base.checkpoint.channel_values.clone();
                let mut want_versions = base.checkpoint.channel_versions.clone();
                for (ch, v) in &values {
                    let counter = base.checkpoint.channel_versions.get(ch).map_or(0, ChannelVersion::counter);
                    let ver = got.checkpoint.channel_versions.get(ch).cloned();
                    prop_assert!(
                        matches!(&ver, Some(ChannelVersion::Str(_)))
                            && ver.as_ref().unwrap().counter() == counter + 1,
                        "{:?}",
                        ver
                    );
                    want_versions.insert(ch.clone(), ver.unwrap());
                    want_values.insert(ch.clone(), v.clone().into());
                }
                let mut updated: Vec<String> = values.keys().cloned().collect();
                updated.sort();
                let mut cp = Checkpoint::clone(&base.checkpoint);
                cp.id = got.checkpoint.id.clone();
                cp.ts = got.checkpoint.ts.clone();
                cp.channel_values = want_values;
                cp.channel_versions = want_versions;
                let new: ChannelVersions =
                    values.keys().map(|ch| (ch.clone(), cp.channel_versions[ch].clone())).collect();
                m.put(t, n, &cp.id, Some(base_id), &cp, &meta.0, &new, Some(updated), true);
                prop_assert_eq!(got, m.tuple(&(t.into(), n.into(), cp.id.clone())));
            }
            Step::DeleteThread { thread } => {
                saver.delete_thread(THREADS[thread]).map_err(fail)?;
                m.delete_thread(THREADS[thread]);
            }
            Step::Copy { src, dst } => {
                let (s, d) = (THREADS[src], THREADS[dst]);
                let result = saver.copy_thread(s, d);
                if s == d {
                    result.map_err(fail)?;
                } else if m.has_thread(d) {
                    prop_assert!(matches!(result, Err(Error::Conflict(_))), "{:?}", result);
                } else {
                    result.map_err(fail)?;
                    let rows: Vec<(Key, Row)> = m
                        .rows
                        .iter()
                        .filter(|(k, _)| k.0 == s)
                        .map(|(k, r)| ((d.into(), k.1.clone(), k.2.clone()), r.clone()))
                        .collect();
                    let blobs: Vec<_> = m
                        .blobs
                        .iter()
                        .filter(|(k, _)| k.0 == s)
                        .map(|(k, v)| ((d.to_string(), k.1.clone(), k.2.clone(), k.3.clone()), v.clone()))
                        .collect();
                    let writes: Vec<_> = m
                        .writes
                        .iter()
                        .filter(|(k, _)| k.0 == s)
                        .map(|(k, v)| {
                            ((d.to_string(), k.1.clone(), k.2.clone(), k.3.clone(), k.4), v.clone())
                        })
                        .collect();
                    for (k, r) in rows {
                        m.rows.entry(k).or_insert(r);
                    }
                    for (k, v) in blobs {
                        m.blobs.entry(k).or_insert(v);
                    }
                    for (k, v) in writes {
                        m.writes.entry(k).or_insert(v);
                    }
                }
            }
            Step::Prune { threads, keep_latest } => {
                let ts: Vec<&str> = threads.iter().map(|t| THREADS[*t]).collect();
                let strategy = if keep_latest { PruneStrategy::KeepLatest } else { PruneStrategy::Delete };
                saver.prune(&ts, strategy).map_err(fail)?;
                for t in ts {
                    if keep_latest {
                        let gone: Vec<Key> = m
                            .rows
                            .keys()
                            .filter(|(kt, kns, id)| kt == t && Some(id) != m.latest(t, kns).as_ref())
                            .cloned()
                            .collect();
                        m.remove_rows(&gone);
                        m.collect_blobs(t);
                    } else {
                        m.delete_thread(t);
                    }
                }
            }
            Step::DeleteRuns { runs } => {
                let ids: Vec<String> = runs.iter().map(|r| format!("r{r}")).collect();
                saver.delete_for_runs(&ids).map_err(fail)?;
                let gone: Vec<Key> = m
                    .rows
                    .iter()
                    .filter(|(_, r)| {
                        r.meta
                            .get("run_id")
                            .and_then(Value::as_str)
                            .is_some_and(|id| ids.iter().any(|x| x == id))
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                m.remove_rows(&gone);
                let threads: BTreeSet<String> = gone.iter().map(|k| k.0.clone()).collect();
                for t in threads {
                    m.collect_blobs(&t);
                }
            }
            Step::Append { thread, ns, items, mode, from } => {
                let (t, n) = (THREADS[thread], NSS[ns]);
                let ids = m.ids(t, n);
                let base_id = match mode {
                    2 | 3 if ids.len() >= 2 => Some(ids[from % (ids.len() - 1)].clone()),
                    2 | 3 => continue,
                    _ => m.latest(t, n),
                };
                let base = base_id.as_ref().map(|id| m.tuple(&(t.into(), n.into(), id.clone())));
                let entries: Vec<Value> =
                    (0..items).map(|i| json!({"n": counter, "i": i, "text": "m".repeat(200)})).collect();
                let old_log: Vec<Value> = base
                    .as_ref()
                    .and_then(|b| b.checkpoint.channel_values.get("log"))
                    .and_then(|v| v.to_value().as_array().cloned())
                    .unwrap_or_default();
                let log = Value::Array([old_log, entries.clone()].concat());
                let mut cp = base
                    .as_ref()
                    .map_or_else(|| Checkpoint::with_id(""), |b| Checkpoint::clone(&b.checkpoint));
                let version = agentstate::checkpoint::next_version(cp.channel_versions.get("log"));
                cp.channel_values.insert("log".into(), log.clone().into());
                cp.channel_versions.insert("log".into(), version.clone());
                let new: ChannelVersions = [("log".to_string(), version)].into();
                if mode == 0 {
                    cp.id = agentstate::checkpoint::uuid6(Some(counter)).to_string();
                    cp.ts = TS.into();
                    cp.updated_channels = None;
                    let meta =
                        Metadata::new().with("source", "loop").with("step", counter).with("run_id", "r0");
                    let mut config = CheckpointConfig::thread(t).ns(n);
                    config.checkpoint_id = base_id.clone();
                    let result = saver.put(&config, &cp, &meta, &new);
                    if m.refusal(t, n, base_id.as_deref(), &cp, &new).is_some() {
                        prop_assert!(result.is_err());
                        continue;
                    }
                    result.map_err(fail)?;
                    m.put(t, n, &cp.id, base_id, &cp, &meta.0, &new, None, false);
                    continue;
                }
                let parent = match &base_id {
                    Some(id) => saver.get_tuple(&CheckpointConfig::thread(t).ns(n).at(id)).map_err(fail)?,
                    None => None,
                };
                let step = match &parent {
                    Some(p) => saver.step(p),
                    None => saver.start(&CheckpointConfig::thread(t).ns(n)),
                };
                let step = if mode == 3 { step.fork() } else { step };
                let result = step.append("log", entries).commit();
                if mode == 2 {
                    prop_assert!(matches!(result, Err(Error::Conflict(_))), "a stale step: {:?}", result);
                    continue;
                }
                let got = result.map_err(fail)?;
                let meta = match &base {
                    Some(b) => Metadata::new()
                        .with("source", "loop")
                        .with("step", b.metadata.step().map_or(0, |s| s + 1))
                        .with("parents", json!({})),
                    None => {
                        Metadata::new().with("source", "input").with("step", -1).with("parents", json!({}))
                    }
                };
                prop_assert_eq!(&*got.metadata, &meta);
                prop_assert_eq!(got.checkpoint.channel_values.get("log").map(|v| v.to_value()), Some(log));
                // The crate picks the version: the next counter.
                let ver = got.checkpoint.channel_versions.get("log").cloned();
                prop_assert_eq!(ver.as_ref().map(ChannelVersion::counter), Some(new["log"].counter()));
                let ver = ver.unwrap();
                cp.channel_versions.insert("log".into(), ver.clone());
                let new: ChannelVersions = [("log".to_string(), ver)].into();
                cp.id = got.checkpoint.id.clone();
                cp.ts = got.checkpoint.ts.clone();
                m.put(t, n, &cp.id, base_id, &cp, &meta.0, &new, Some(vec!["log".into()]), true);
                prop_assert_eq!(got, m.tuple(&(t.into(), n.into(), cp.id.clone())));
            }
            Step::Reopen => {
                drop(saver);
                saver = open(&path);
            }
            Step::Get { thread, ns, target } => {
                let (t, n) = (THREADS[thread], NSS[ns]);
                let ids = m.ids(t, n);
                let (config, want) = match target {
                    Some(i) if !ids.is_empty() => {
                        let id = ids[i % ids.len()].clone();
                        (CheckpointConfig::thread(t).ns(n).at(&id), Some(m.tuple(&(t.into(), n.into(), id))))
                    }
                    Some(_) => (CheckpointConfig::thread(t).ns(n).at("no-such-checkpoint"), None),
                    None => (
                        CheckpointConfig::thread(t).ns(n),
                        m.latest(t, n).map(|id| m.tuple(&(t.into(), n.into(), id))),
                    ),
                };
                prop_assert_eq!(saver.get_tuple(&config).map_err(fail)?, want);
            }
            Step::List { thread, ns, filter: f, before, limit } => {
                let all_ids: Vec<String> = m.rows.keys().map(|k| k.2.clone()).collect();
                let q = ListQuery {
                    thread_id: thread.map(|t| THREADS[t].to_string()),
                    checkpoint_ns: ns.map(|n| NSS[n].to_string()),
                    checkpoint_id: None,
                    filter: f.map(filter),
                    before: before.map(|b| {
                        all_ids.get(b % all_ids.len().max(1)).cloned().unwrap_or_else(|| "z".into())
                    }),
                    limit,
                };
                let unlimited = ListQuery { limit: None, ..q.clone() };
                same_list(&saver.list(&q).map_err(fail)?, &m.list(&unlimited), q.limit)?;
            }
        }
        if mutated {
            // The whole state, after every change.
            same_list(&saver.list(&ListQuery::all()).map_err(fail)?, &m.list(&ListQuery::all()), None)?;
            let streamed: Vec<CheckpointTuple> =
                saver.list_iter(&ListQuery::all()).map_err(fail)?.collect::<Result<_, _>>().map_err(fail)?;
            same_list(&streamed, &m.list(&ListQuery::all()), None)?;
            for t in THREADS {
                for n in NSS {
                    let want = m.latest(t, n).map(|id| m.tuple(&(t.into(), n.into(), id)));
                    prop_assert_eq!(saver.get_tuple(&CheckpointConfig::thread(t).ns(n)).map_err(fail)?, want);
                }
            }
        }
    }
    // No blob or write row the model does not have (unreachable rows are
    // invisible through the API), and a sound file.
    drop(saver);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    prop_assert_eq!(ok, "ok");
    // Every blob of the model; the file may keep more of `log`: the bases
    // an incremental blob of a kept checkpoint extends.
    let blobs: i64 = conn
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE channel <> 'log'", [], |r| r.get(0))
        .unwrap();
    prop_assert_eq!(blobs as usize, m.blobs.keys().filter(|k| k.2 != "log").count());
    for (t, n, ch, v) in m.blobs.keys().filter(|k| k.2 == "log") {
        let found: bool = conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM checkpoint_blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 \
                 AND channel = ?3 AND version = ?4)",
                [t, n, ch, &blob_key(v)],
                |r| r.get(0),
            )
            .unwrap();
        prop_assert!(found, "blob {}/{}/{}/{} missing", t, n, ch, v);
    }
    let deltas: i64 = conn
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    DELTA_BLOBS.fetch_add(deltas as u64, Ordering::Relaxed);
    let writes: i64 =
        conn.query_row("SELECT COALESCE(SUM(n), 0) FROM checkpoint_writes", [], |r| r.get(0)).unwrap();
    prop_assert_eq!(writes as usize, m.writes.len());
    Ok(())
}

/// A version as `checkpoint_blobs` keys it (docs/format.md, "Blob keys"):
/// `{counter:032}.{rest}` as `~`, the letter `'@' + n` for the counter's `n`
/// digits without leading zeros, those digits, `.{rest}`.
fn blob_key(v: &str) -> String {
    let b = v.as_bytes();
    if b.len() > 32 && b[32] == b'.' && b[..32].iter().all(u8::is_ascii_digit) {
        let zeros = b[..31].iter().take_while(|&&c| c == b'0').count();
        return format!("~{}{}", char::from(b'@' + (32 - zeros) as u8), &v[zeros..]);
    }
    if v.starts_with('~') {
        format!("~{v}")
    } else {
        v.to_string()
    }
}

fn cases() -> u32 {
    if std::env::var("AGENTSTATE_SOAK").is_ok_and(|v| v != "0") {
        4000
    } else {
        200
    }
}

/// Incremental blobs in the files the sequences left (they must have made
/// some).
static DELTA_BLOBS: AtomicU64 = AtomicU64::new(0);

#[test]
fn checkpointer_matches_in_memory_model() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: cases(),
        source_file: Some(file!()),
        ..ProptestConfig::default()
    });
    runner.run(&prop::collection::vec(step(), 1..40), run).unwrap();
    let deltas = DELTA_BLOBS.load(Ordering::Relaxed);
    eprintln!("[reliability] checkpointer_model: sequences={} delta_blobs={deltas}", cases());
    assert!(deltas > 0, "no sequence stored an incremental blob");
}
