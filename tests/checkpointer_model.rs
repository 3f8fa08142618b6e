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
//! `AGENTSTATE_SOAK=1` runs 20 times as many sequences.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use agentstate::checkpoint::{ChannelVersion, ChannelVersions, PendingWrite};
use agentstate::{
    Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, Db, Error, Filter, ListQuery, Metadata,
    PruneStrategy,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const THREADS: [&str; 3] = ["t0", "t1", "t2"];
const NSS: [&str; 2] = ["", "child:1"];
const CHANNELS: [&str; 4] = ["a", "b", "c", "d"];
const WRITE_CHANNELS: [&str; 6] = ["x", "y", "__error__", "__scheduled__", "__interrupt__", "__resume__"];
const TS: &str = "2024-05-04T06:32:42.235444+00:00";

fn special_idx(channel: &str) -> Option<i64> {
    ["__error__", "__scheduled__", "__interrupt__", "__resume__"]
        .iter()
        .position(|c| *c == channel)
        .map(|i| -(i as i64) - 1)
}

fn is_primitive(v: &Value) -> bool {
    !(v.is_array() || v.is_object())
}

// ---------------------------------------------------------------------------
// Steps

#[derive(Clone, Debug)]
struct Chan {
    name: usize,
    value: Option<Value>,
    version: Option<i64>,
    new_version: Option<i64>,
}

#[derive(Clone, Debug)]
enum Step {
    Put {
        thread: usize,
        ns: usize,
        parent: usize,
        reuse: Option<usize>,
        chans: Vec<Chan>,
        run: usize,
    },
    Writes {
        thread: usize,
        ns: usize,
        target: usize,
        task: usize,
        writes: Vec<(usize, Value)>,
    },
    Fork {
        thread: usize,
        ns: usize,
        target: Option<usize>,
        values: Vec<(usize, Value)>,
    },
    DeleteThread {
        thread: usize,
    },
    Copy {
        src: usize,
        dst: usize,
    },
    Prune {
        threads: Vec<usize>,
        keep_latest: bool,
    },
    DeleteRuns {
        runs: Vec<usize>,
    },
    /// Appends `items` big entries to the list channel `log` of the latest
    /// checkpoint of (thread, ns), which passes the thresholds of
    /// incremental blobs after an append or two: `mode` 0 through `put`
    /// (the whole list, `log` in `new_versions`), 1 through
    /// `step(&latest).append(..)` (or `start`), 2 through `step` from an
    /// older checkpoint (a `Conflict`), 3 the same as a `fork()`.
    Append {
        thread: usize,
        ns: usize,
        items: usize,
        mode: usize,
        from: usize,
    },
    Reopen,
    Get {
        thread: usize,
        ns: usize,
        target: Option<usize>,
    },
    List {
        thread: Option<usize>,
        ns: Option<usize>,
        filter: Option<usize>,
        before: Option<usize>,
        limit: Option<usize>,
    },
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..100).prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
        prop::collection::vec(0i64..9, 0..3).prop_map(|v| json!(v)),
        ("[a-z]{1,3}", 0i64..9).prop_map(|(k, v)| json!({ k.clone(): v, "deep": [v, {"k": k}] })),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    // Mostly what callers do (a changed channel is in new_versions at its
    // version), sometimes not; few versions, so that they collide.
    let new_version = prop_oneof![6 => Just(Some(0i64)), 2 => Just(None), 1 => (1i64..4).prop_map(Some)];
    let chan =
        (0..4usize, prop::option::weighted(0.85, value()), prop::option::weighted(0.9, 1i64..4), new_version)
            .prop_map(|(name, value, version, new_version)| {
                // 0 stands for "the channel's own version".
                let new_version = match new_version {
                    Some(0) => version.or(Some(1)),
                    other => other,
                };
                Chan { name, value, version, new_version }
            });
    prop_oneof![
        6 => (0..3usize, 0..2usize, 0..8usize, prop::option::weighted(0.15, 0..8usize), prop::collection::vec(chan, 0..4), 0..3usize)
            .prop_map(|(thread, ns, parent, reuse, chans, run)| Step::Put { thread, ns, parent, reuse, chans, run }),
        4 => (0..3usize, 0..2usize, 0..8usize, 0..3usize, prop::collection::vec((0..6usize, value()), 1..4))
            .prop_map(|(thread, ns, target, task, writes)| Step::Writes { thread, ns, target, task, writes }),
        2 => (0..3usize, 0..2usize, prop::option::of(0..8usize), prop::collection::vec((0..4usize, value()), 0..3))
            .prop_map(|(thread, ns, target, values)| Step::Fork { thread, ns, target, values }),
        1 => (0..3usize).prop_map(|thread| Step::DeleteThread { thread }),
        1 => (0..3usize, 0..3usize).prop_map(|(src, dst)| Step::Copy { src, dst }),
        1 => (prop::collection::vec(0..3usize, 0..3), any::<bool>()).prop_map(|(threads, keep_latest)| Step::Prune { threads, keep_latest }),
        1 => prop::collection::vec(0..4usize, 0..3).prop_map(|runs| Step::DeleteRuns { runs }),
        5 => (0..3usize, 0..2usize, 8..30usize, 0..4usize, 0..8usize)
            .prop_map(|(thread, ns, items, mode, from)| Step::Append { thread, ns, items, mode, from }),
        1 => Just(Step::Reopen),
        3 => (0..3usize, 0..2usize, prop::option::of(0..8usize)).prop_map(|(thread, ns, target)| Step::Get { thread, ns, target }),
        3 => (prop::option::of(0..3usize), prop::option::of(0..2usize), prop::option::of(0..5usize), prop::option::weighted(0.3, 0..8usize), prop::option::weighted(0.4, 0..4usize))
            .prop_map(|(thread, ns, filter, before, limit)| Step::List { thread, ns, filter, before, limit }),
    ]
}

fn filter(n: usize) -> Value {
    match n {
        0 => json!({"step": {"$gte": 3}}),
        1 => json!({"source": "fork"}),
        2 => json!({"run_id": {"$in": ["r0", "r2"]}}),
        3 => json!({"step": 2}),
        _ => json!({"$or": [{"source": "update"}, {"run_id": "r1"}]}),
    }
}

// ---------------------------------------------------------------------------
// The model: the three tables.

#[derive(Clone, Debug)]
struct Row {
    parent: Option<String>,
    inline: Map<String, Value>,
    /// Channels a step's row marks empty (no blob is read or kept for
    /// them; `put` stores an `empty` blob instead).
    empty: BTreeSet<String>,
    versions: ChannelVersions,
    meta: Map<String, Value>,
    ts: String,
    updated: Option<Vec<String>>,
}

type Key = (String, String, String);
/// (thread, ns, checkpoint id, task, idx)
type WriteKey = (String, String, String, String, i64);

#[derive(Clone, Debug, Default)]
struct Model {
    rows: BTreeMap<Key, Row>,
    /// (thread, ns, channel, version text) -> value (`None`: the channel is
    /// empty at that version); never overwritten.
    blobs: BTreeMap<(String, String, String, String), Option<Value>>,
    /// (thread, ns, id, task, idx) -> (channel, value).
    writes: BTreeMap<WriteKey, (String, Value)>,
}

impl Model {
    fn ids(&self, t: &str, ns: &str) -> Vec<String> {
        self.rows.keys().filter(|(kt, kns, _)| kt == t && kns == ns).map(|k| k.2.clone()).collect()
    }

    fn latest(&self, t: &str, ns: &str) -> Option<String> {
        self.ids(t, ns).into_iter().next_back()
    }

    fn has_thread(&self, t: &str) -> bool {
        self.rows.keys().any(|(kt, _, _)| kt == t)
    }

    fn tuple(&self, key: &Key) -> CheckpointTuple {
        let (t, ns, id) = key;
        let row = &self.rows[key];
        let mut values = Map::new();
        for (ch, ver) in &row.versions {
            if let Some(v) = row.inline.get(ch) {
                values.insert(ch.clone(), v.clone());
            } else if row.empty.contains(ch) {
            } else if let Some(Some(v)) =
                self.blobs.get(&(t.clone(), ns.clone(), ch.clone(), ver.to_string()))
            {
                values.insert(ch.clone(), v.clone());
            }
        }
        let mut cp = Checkpoint::with_id(id);
        cp.ts = row.ts.clone();
        cp.set_values(values);
        cp.channel_versions = row.versions.clone();
        cp.updated_channels = row.updated.clone();
        let pending_writes = self
            .writes
            .iter()
            .filter(|((wt, wns, wid, _, _), _)| wt == t && wns == ns && wid == id)
            .map(|((_, _, _, task, _), (ch, v))| PendingWrite {
                task_id: task.clone(),
                channel: ch.clone(),
                value: v.clone(),
            })
            .collect();
        CheckpointTuple {
            config: CheckpointConfig::thread(t).ns(ns).at(id),
            checkpoint: cp.into(),
            metadata: Metadata(row.meta.clone()).into(),
            parent_config: row
                .parent
                .as_ref()
                .filter(|p| !p.is_empty())
                .map(|p| CheckpointConfig::thread(t).ns(ns).at(p)),
            pending_writes,
        }
    }

    /// What `put` refuses, in the order it checks: a value without a
    /// version, a `new_versions` entry that disagrees with
    /// `channel_versions`, a channel whose value is not inline, not in
    /// `new_versions` and not stored (all `InvalidArgument`); then a version
    /// in `new_versions` already stored with another value (`Conflict`).
    /// Whether the row `parent` of (t, ns) marks `ch` empty at `ver` (a
    /// step's row).
    fn parent_marks_empty(
        &self,
        t: &str,
        ns: &str,
        parent: Option<&str>,
        ch: &str,
        ver: &ChannelVersion,
    ) -> bool {
        parent
            .and_then(|p| self.rows.get(&(t.to_string(), ns.to_string(), p.to_string())))
            .is_some_and(|r| r.empty.contains(ch) && r.versions.get(ch) == Some(ver))
    }

    fn refusal(
        &self,
        t: &str,
        ns: &str,
        parent: Option<&str>,
        cp: &Checkpoint,
        new: &ChannelVersions,
    ) -> Option<&'static str> {
        let values = cp.values_json();
        if values.keys().any(|ch| !cp.channel_versions.contains_key(ch)) {
            return Some("InvalidArgument");
        }
        let blob = |ch: &str, ver: &ChannelVersion| {
            self.blobs.get(&(t.into(), ns.into(), ch.into(), ver.to_string()))
        };
        let mut conflict = false;
        for (ch, ver) in &cp.channel_versions {
            let value = values.get(ch);
            match new.get(ch) {
                Some(nv) if nv != ver => return Some("InvalidArgument"),
                Some(_) => {
                    if !value.is_some_and(is_primitive) {
                        if let Some(stored) = blob(ch, ver) {
                            conflict |= stored.as_ref() != value;
                        }
                    }
                }
                None => {
                    let empty_in_parent = value.is_none() && self.parent_marks_empty(t, ns, parent, ch, ver);
                    if !value.is_some_and(is_primitive) && blob(ch, ver).is_none() && !empty_in_parent {
                        return Some("InvalidArgument");
                    }
                }
            }
        }
        conflict.then_some("Conflict")
    }

    /// `put`: blobs first (a version is never overwritten), then the row (a
    /// re-put keeps its parent). A `step`'s row marks its channels without
    /// a value empty instead of storing `empty` blobs.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        t: &str,
        ns: &str,
        id: &str,
        parent: Option<String>,
        cp: &Checkpoint,
        meta: &Map<String, Value>,
        new: &ChannelVersions,
        updated: Option<Vec<String>>,
        step: bool,
    ) {
        let mut inline = Map::new();
        let mut empty = BTreeSet::new();
        let values = cp.values_json();
        for (ch, ver) in &cp.channel_versions {
            match values.get(ch) {
                Some(v) if is_primitive(v) => {
                    inline.insert(ch.clone(), v.clone());
                }
                None if step => {
                    empty.insert(ch.clone());
                }
                // Left out, emptied by the parent step and not stored: an
                // `empty` blob answers for it.
                None if !new.contains_key(ch)
                    && self.parent_marks_empty(t, ns, parent.as_deref(), ch, ver) =>
                {
                    self.blobs.entry((t.into(), ns.into(), ch.clone(), ver.to_string())).or_insert(None);
                }
                value if new.contains_key(ch) => {
                    self.blobs
                        .entry((t.into(), ns.into(), ch.clone(), ver.to_string()))
                        .or_insert_with(|| value.cloned());
                }
                _ => {}
            }
        }
        let key = (t.to_string(), ns.to_string(), id.to_string());
        let parent = self.rows.get(&key).map_or(parent, |r| r.parent.clone());
        let row = Row {
            parent,
            inline,
            empty,
            versions: cp.channel_versions.clone(),
            meta: meta.clone(),
            ts: cp.ts.clone(),
            updated,
        };
        self.rows.insert(key, row);
    }

    fn collect_blobs(&mut self, t: &str) {
        let referenced: BTreeSet<(String, String, String)> = self
            .rows
            .iter()
            .filter(|((kt, _, _), _)| kt == t)
            .flat_map(|((_, ns, _), r)| {
                r.versions
                    .iter()
                    .filter(|(ch, _)| !r.empty.contains(*ch))
                    .map(move |(ch, v)| (ns.clone(), ch.clone(), v.to_string()))
            })
            .collect();
        self.blobs.retain(|(bt, ns, ch, v), _| {
            bt != t || referenced.contains(&(ns.clone(), ch.clone(), v.clone()))
        });
    }

    fn remove_rows(&mut self, gone: &[Key]) {
        for k in gone {
            self.rows.remove(k);
            self.writes.retain(|(t, ns, id, _, _), _| (t, ns, id) != (&k.0, &k.1, &k.2));
        }
    }

    fn delete_thread(&mut self, t: &str) {
        self.rows.retain(|(kt, _, _), _| kt != t);
        self.blobs.retain(|(kt, _, _, _), _| kt != t);
        self.writes.retain(|(kt, _, _, _, _), _| kt != t);
    }

    fn list(&self, q: &ListQuery) -> Vec<CheckpointTuple> {
        let f = q.filter.as_ref().map(|f| Filter::parse(f).unwrap());
        let mut keys: Vec<&Key> = self
            .rows
            .iter()
            .filter(|((t, ns, id), row)| {
                q.thread_id.as_ref().is_none_or(|x| x == t)
                    && q.checkpoint_ns.as_ref().is_none_or(|x| x == ns)
                    && q.before.as_ref().is_none_or(|b| id < b)
                    && f.as_ref().is_none_or(|f| f.matches(&Value::Object(row.meta.clone())))
            })
            .map(|(k, _)| k)
            .collect();
        keys.sort_by(|a, b| b.2.cmp(&a.2));
        keys.truncate(q.limit.unwrap_or(usize::MAX));
        keys.into_iter().map(|k| self.tuple(k)).collect()
    }
}

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
