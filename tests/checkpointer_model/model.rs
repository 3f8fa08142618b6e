//! The model of `tests/checkpointer_model.rs`: the random steps a sequence
//! is made of, and the checkpointer's three tables as plain maps with their
//! documented rules (`docs/format.md`): inline primitives, blobs keyed by
//! version and never overwritten, writes keyed by (task, idx) with
//! first-writer-wins or all-special upserts, prune's blob collection; and
//! the tuples and lists a read must return.

use std::collections::{BTreeMap, BTreeSet};

use agentstate::checkpoint::{ChannelVersion, ChannelVersions, PendingWrite};
use agentstate::{Checkpoint, CheckpointConfig, CheckpointTuple, Filter, ListQuery, Metadata};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

pub const THREADS: [&str; 3] = ["t0", "t1", "t2"];
pub const NSS: [&str; 2] = ["", "child:1"];
pub const CHANNELS: [&str; 4] = ["a", "b", "c", "d"];
pub const WRITE_CHANNELS: [&str; 6] = ["x", "y", "__error__", "__scheduled__", "__interrupt__", "__resume__"];
pub const TS: &str = "2024-05-04T06:32:42.235444+00:00";

pub fn special_idx(channel: &str) -> Option<i64> {
    ["__error__", "__scheduled__", "__interrupt__", "__resume__"]
        .iter()
        .position(|c| *c == channel)
        .map(|i| -(i as i64) - 1)
}

pub fn is_primitive(v: &Value) -> bool {
    !(v.is_array() || v.is_object())
}

// ---------------------------------------------------------------------------
// Steps

#[derive(Clone, Debug)]
pub struct Chan {
    pub name: usize,
    pub value: Option<Value>,
    pub version: Option<i64>,
    pub new_version: Option<i64>,
}

#[derive(Clone, Debug)]
pub enum Step {
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

pub fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..100).prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
        prop::collection::vec(0i64..9, 0..3).prop_map(|v| json!(v)),
        ("[a-z]{1,3}", 0i64..9).prop_map(|(k, v)| json!({ k.clone(): v, "deep": [v, {"k": k}] })),
    ]
}

pub fn step() -> impl Strategy<Value = Step> {
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

pub fn filter(n: usize) -> Value {
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
pub struct Row {
    pub parent: Option<String>,
    pub inline: Map<String, Value>,
    /// Channels a step's row marks empty (no blob is read or kept for
    /// them; `put` stores an `empty` blob instead).
    pub empty: BTreeSet<String>,
    pub versions: ChannelVersions,
    pub meta: Map<String, Value>,
    pub ts: String,
    pub updated: Option<Vec<String>>,
}

pub type Key = (String, String, String);
/// (thread, ns, checkpoint id, task, idx)
pub type WriteKey = (String, String, String, String, i64);

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub rows: BTreeMap<Key, Row>,
    /// (thread, ns, channel, version text) -> value (`None`: the channel is
    /// empty at that version); never overwritten.
    pub blobs: BTreeMap<(String, String, String, String), Option<Value>>,
    /// (thread, ns, id, task, idx) -> (channel, value).
    pub writes: BTreeMap<WriteKey, (String, Value)>,
}

impl Model {
    pub fn ids(&self, t: &str, ns: &str) -> Vec<String> {
        self.rows.keys().filter(|(kt, kns, _)| kt == t && kns == ns).map(|k| k.2.clone()).collect()
    }

    pub fn latest(&self, t: &str, ns: &str) -> Option<String> {
        self.ids(t, ns).into_iter().next_back()
    }

    pub fn has_thread(&self, t: &str) -> bool {
        self.rows.keys().any(|(kt, _, _)| kt == t)
    }

    pub fn tuple(&self, key: &Key) -> CheckpointTuple {
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
    pub fn parent_marks_empty(
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

    pub fn refusal(
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
    pub fn put(
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

    pub fn collect_blobs(&mut self, t: &str) {
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

    pub fn remove_rows(&mut self, gone: &[Key]) {
        for k in gone {
            self.rows.remove(k);
            self.writes.retain(|(t, ns, id, _, _), _| (t, ns, id) != (&k.0, &k.1, &k.2));
        }
    }

    pub fn delete_thread(&mut self, t: &str) {
        self.rows.retain(|(kt, _, _), _| kt != t);
        self.blobs.retain(|(kt, _, _, _), _| kt != t);
        self.writes.retain(|(kt, _, _, _, _), _| kt != t);
    }

    pub fn list(&self, q: &ListQuery) -> Vec<CheckpointTuple> {
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
