//! Operations as JSON, their executor, and a model of their effect: shared
//! by the crash and disk tests, which must check that after a failure the
//! file holds exactly the operations that were acknowledged (plus, possibly,
//! the one that failed, whole).
//!
//! An operation is an object with `"op"`:
//! - `step`: `t`, `ns`, `id`, `parent` (id or null), `values` (every channel),
//!   `versions` (channel -> version), `new` (channels in `new_versions`),
//!   `meta`: one `put`;
//! - `writes`: `t`, `ns`, `id`, `task`, `writes` (`[[channel, value], ...]`):
//!   one `put_writes` (task path `"path"`);
//! - `put`: `items` (`[[namespace, key, value], ...]`): one Store `batch`;
//! - `del`: `ns`, `key`; `prune`: `t` (thread ids, keep latest);
//!   `delete_thread`: `t`; `copy`: `src`, `dst`.
//! - `next`: the step API: `t`, `ns`, `parent` (id, or null for `start`),
//!   `fork` (bool), `set` (channel -> value), `append` (channel -> items),
//!   `meta`, `retain` (null, or `keep_last` of a `with_retention` policy the
//!   checkpointer applies on write), and `values`: every channel after the
//!   step, as the writer expects it. The new id is only known once the call
//!   returned: [`execute`] returns it and the caller adds it as `id`.
//! - `fork_with`: `t`, `ns`, `at` (id), `set` (channel -> value), `values`
//!   and `meta` as expected after; the new id as for `next`.
//! - `retain`: `keep` (`apply_retention` with `Retention::keep_last`),
//!   `exempt` (threads); `delete_runs`: `runs`; `reindex`; `sweep`;
//!   `vacuum` (`Db::vacuum`).
//!
//! A Store item in `put` may carry a fourth element, a TTL in milliseconds:
//! the workloads give 0, so the item has expired by the time it is observed
//! (the model drops it), and `sweep` removes it.

use std::collections::BTreeMap;
use std::path::Path;

use std::time::Duration;

use agentstate::checkpoint::{ChannelVersion, ChannelVersions, Retention};
use agentstate::store::{HashEmbedder, Op, Put, Search};
use agentstate::{
    Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata, PruneStrategy, Store, StoreConfig,
};
use serde_json::Value;

/// How many checkpoints over `keep_last` a checkpointer with a retention
/// policy lets a (thread, namespace) hold before the write that notices
/// trims it back to `keep_last` ("a few more than allowed" in the
/// `Retention` docs; 8 today). The models need the exact number.
pub const RETENTION_SLACK: usize = 8;

/// Runs `op` (see the module docs). Returns the id of the checkpoint a
/// `next` or `fork_with` created.
pub fn execute(saver: &Checkpointer, store: &Store, op: &Value) -> agentstate::Result<Option<String>> {
    let strings = |v: &Value| -> Vec<String> { v.as_array().unwrap().iter().map(s).collect() };
    match op["op"].as_str().unwrap() {
        "next" => {
            let config = CheckpointConfig::thread(s(&op["t"])).ns(s(&op["ns"]));
            let saver = match op["retain"].as_u64() {
                Some(n) => saver.clone().with_retention(Retention::keep_last(n as usize)),
                None => saver.clone(),
            };
            let parent = match op["parent"].as_str() {
                Some(id) => Some(saver.get_tuple(&config.clone().at(id))?.ok_or_else(|| {
                    agentstate::Error::NotFound(format!("the workload's parent {id} is gone"))
                })?),
                None => None,
            };
            let mut step = match &parent {
                Some(p) => saver.step(p),
                None => saver.start(&config),
            };
            if op["fork"].as_bool() == Some(true) {
                step = step.fork();
            }
            for (ch, v) in op["set"].as_object().unwrap() {
                step = step.set(ch.clone(), v.clone());
            }
            for (ch, items) in op["append"].as_object().unwrap() {
                step = step.append(ch.clone(), items.as_array().unwrap().iter().cloned());
            }
            if let Some(pw) = op.get("parent_writes").filter(|w| !w.is_null()) {
                let writes: Vec<(String, Value)> =
                    pw["writes"].as_array().unwrap().iter().map(|w| (s(&w[0]), w[1].clone())).collect();
                step = step.parent_writes(s(&pw["task"]), "path", &writes);
            }
            let tuple = step.metadata(Metadata(op["meta"].as_object().unwrap().clone())).commit()?;
            assert_eq!(
                Value::Object(tuple.checkpoint.values_json()),
                op["values"],
                "commit returned other values than the step made"
            );
            return Ok(Some(tuple.checkpoint.id.clone()));
        }
        "fork_with" => {
            let config = CheckpointConfig::thread(s(&op["t"])).ns(s(&op["ns"])).at(s(&op["at"]));
            let new = saver.fork_with(&config, op["set"].as_object().unwrap().clone())?;
            return Ok(new.checkpoint_id);
        }
        "retain" => {
            let mut policy = Retention::keep_last(op["keep"].as_u64().unwrap() as usize);
            for t in strings(&op["exempt"]) {
                policy = policy.exempt(t);
            }
            saver.apply_retention(&policy)?;
        }
        "delete_runs" => saver.delete_for_runs(&strings(&op["runs"]))?,
        "reindex" => {
            store.reindex()?;
        }
        "sweep" => {
            store.sweep_expired()?;
        }
        "vacuum" => {
            saver.db().vacuum()?;
        }
        "step" => {
            let mut cp = Checkpoint::with_id(s(&op["id"]));
            cp.set_values(op["values"].as_object().unwrap().clone());
            cp.channel_versions = op["versions"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), ChannelVersion::Str(s(v))))
                .collect();
            let new: ChannelVersions = strings(&op["new"])
                .into_iter()
                .map(|c| (c.clone(), cp.channel_versions[&c].clone()))
                .collect();
            let mut config = CheckpointConfig::thread(s(&op["t"])).ns(s(&op["ns"]));
            config.checkpoint_id = op["parent"].as_str().map(String::from);
            saver.put(&config, &cp, &Metadata(op["meta"].as_object().unwrap().clone()), &new)?;
        }
        "writes" => {
            let config = CheckpointConfig::thread(s(&op["t"])).ns(s(&op["ns"])).at(s(&op["id"]));
            let writes: Vec<(String, Value)> =
                op["writes"].as_array().unwrap().iter().map(|w| (s(&w[0]), w[1].clone())).collect();
            saver.put_writes(&config, &writes, &s(&op["task"]), "path")?;
        }
        "put" => {
            let ops = op["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    let put = Put::new(&strings(&i[0]), s(&i[1]), i[2].clone());
                    Op::Put(match i.get(3).and_then(Value::as_u64) {
                        Some(ms) => put.ttl(Duration::from_millis(ms)),
                        None => put.no_ttl(),
                    })
                })
                .collect();
            store.batch(ops)?;
            // Expiry is to the millisecond (an item is alive while
            // `expires_at >= now`): let a TTL pass before anyone looks.
            if let Some(ms) = op["items"].as_array().unwrap().iter().filter_map(|i| i.get(3)?.as_u64()).max()
            {
                std::thread::sleep(Duration::from_millis(ms + 2));
            }
        }
        "del" => {
            let ns = strings(&op["ns"]);
            let ns: Vec<&str> = ns.iter().map(String::as_str).collect();
            store.delete(&ns, &s(&op["key"]))?;
        }
        "prune" => saver.prune(&strings(&op["t"]), PruneStrategy::KeepLatest)?,
        "delete_thread" => saver.delete_thread(&s(&op["t"]))?,
        "copy" => saver.copy_thread(&s(&op["src"]), &s(&op["dst"]))?,
        other => panic!("unknown op {other}"),
    }
    Ok(None)
}

/// One checkpoint as the API returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cp {
    pub parent: Option<String>,
    pub meta: Value,
    pub values: Value,
    /// (task, channel, value) in (task, idx) order.
    pub writes: Vec<(String, String, Value)>,
}

pub type CpKey = (String, String, String);
pub type ItemKey = (Vec<String>, String);

#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    pub cps: BTreeMap<CpKey, Cp>,
    pub items: BTreeMap<ItemKey, Value>,
}

pub fn special_idx(channel: &str) -> Option<i64> {
    ["__error__", "__scheduled__", "__interrupt__", "__resume__"]
        .iter()
        .position(|c| *c == channel)
        .map(|i| -(i as i64) - 1)
}

pub fn s(v: &Value) -> String {
    v.as_str().unwrap().to_string()
}

impl State {
    /// The ids of (thread, ns), oldest first.
    pub fn ids_of(&self, t: &str, ns: &str) -> Vec<String> {
        self.cps.keys().filter(|(kt, kns, _)| kt == t && kns == ns).map(|(_, _, id)| id.clone()).collect()
    }

    /// Keeps the newest `n` checkpoints of (t, ns).
    pub fn keep_last(&mut self, t: &str, ns: &str, n: usize) {
        let ids = self.ids_of(t, ns);
        let cut = ids.len().saturating_sub(n.max(1));
        for id in &ids[..cut] {
            self.cps.remove(&(t.to_string(), ns.to_string(), id.clone()));
        }
    }

    /// Pending writes of `task` (`[[channel, value], ...]`, one call) on the
    /// checkpoint `key`.
    fn add_writes(&mut self, key: &(String, String, String), task: &str, writes: &Value) {
        let cp = self.cps.get_mut(key).expect("writes on a checkpoint the model has");
        // Rows are keyed (task, idx); the workload never repeats an idx
        // within a call, and every call has a task of its own.
        let mut new: Vec<(i64, (String, String, Value))> = writes
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let ch = s(&w[0]);
                (special_idx(&ch).unwrap_or(i as i64), (task.to_string(), ch, w[1].clone()))
            })
            .collect();
        new.sort_by_key(|(idx, _)| *idx);
        cp.writes.extend(new.into_iter().map(|(_, w)| w));
        // Read back in (task, idx) order; the sort is stable.
        cp.writes.sort_by(|a, b| a.0.cmp(&b.0));
    }

    /// Applies an operation the child reported (a `next` or `fork_with`
    /// with the `id` it created added).
    pub fn apply(&mut self, op: &Value) {
        match op["op"].as_str().unwrap() {
            "next" | "fork_with" => {
                let (t, ns) = (s(&op["t"]), s(&op["ns"]));
                let parent = if op["op"] == "next" { op["parent"].as_str() } else { op["at"].as_str() };
                // A step's writes to its parent (`Step::parent_writes`) come
                // in the same transaction.
                if let (Some(pw), Some(p)) = (op.get("parent_writes").filter(|w| !w.is_null()), parent) {
                    self.add_writes(&(t.clone(), ns.clone(), p.to_string()), &s(&pw["task"]), &pw["writes"]);
                }
                let cp = Cp {
                    parent: parent.map(String::from),
                    meta: op["meta"].clone(),
                    values: op["values"].clone(),
                    writes: vec![],
                };
                self.cps.insert((t.clone(), ns.clone(), s(&op["id"])), cp);
                if let Some(n) = op["retain"].as_u64() {
                    if self.ids_of(&t, &ns).len() > n.max(1) as usize + RETENTION_SLACK {
                        self.keep_last(&t, &ns, n as usize);
                    }
                }
            }
            "retain" => {
                let exempt: Vec<String> = op["exempt"].as_array().unwrap().iter().map(s).collect();
                let pairs: std::collections::BTreeSet<(String, String)> =
                    self.cps.keys().map(|(t, ns, _)| (t.clone(), ns.clone())).collect();
                for (t, ns) in pairs {
                    if !exempt.contains(&t) {
                        self.keep_last(&t, &ns, op["keep"].as_u64().unwrap() as usize);
                    }
                }
            }
            "delete_runs" => {
                let runs = &op["runs"].as_array().unwrap();
                self.cps.retain(|_, cp| !cp.meta.get("run_id").is_some_and(|r| runs.contains(r)));
            }
            "reindex" | "sweep" | "vacuum" => {}
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
                self.add_writes(&key, &s(&op["task"]), &op["writes"]);
            }
            "put" => {
                for item in op["items"].as_array().unwrap() {
                    let ns: Vec<String> = item[0].as_array().unwrap().iter().map(s).collect();
                    if item.get(3).is_some() {
                        // A TTL of 0: expired by the time anyone looks.
                        self.items.remove(&(ns, s(&item[1])));
                    } else {
                        self.items.insert((ns, s(&item[1])), item[2].clone());
                    }
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

/// The state through the public API: every checkpoint of `threads`, every
/// store item.
pub fn observe(db: &Db, threads: &[&str], store_config: StoreConfig) -> Result<State, String> {
    let saver = db.checkpointer();
    let store = db.store(store_config).map_err(|e| format!("store: {e}"))?;
    let mut state = State::default();
    for t in threads {
        for tuple in saver.list(&ListQuery::thread(*t)).map_err(|e| format!("list {t}: {e}"))? {
            let key = (t.to_string(), tuple.config.checkpoint_ns.clone(), tuple.checkpoint.id.clone());
            let cp = Cp {
                parent: tuple.parent_config.and_then(|c| c.checkpoint_id),
                meta: Value::Object(tuple.metadata.0.clone()),
                values: Value::Object(tuple.checkpoint.values_json()),
                writes: tuple
                    .pending_writes
                    .iter()
                    .map(|w| (w.task_id.clone(), w.channel.clone(), w.value.clone()))
                    .collect(),
            };
            state.cps.insert(key, cp);
        }
    }
    for hit in store.search(Search::all().limit(1_000_000)).map_err(|e| format!("search: {e}"))? {
        state.items.insert((hit.item.namespace.into_labels(), hit.item.key), hit.item.value);
    }
    Ok(state)
}

/// [`observe`] through a fresh `Db` (so a WAL a killed process left is
/// recovered first).
pub fn observe_file(path: &Path, threads: &[&str], store_config: StoreConfig) -> Result<State, String> {
    let db = Db::open(path).map_err(|e| format!("reopen: {e}"))?;
    observe(&db, threads, store_config)
}

/// Every item has exactly one vector, `text`, the `dims`-dimensional
/// `HashEmbedder` embedding of its text (never a stale or missing one).
pub fn check_vectors(path: &Path, dims: usize) -> Result<usize, String> {
    let conn = super::raw_ro(path);
    let embedder = HashEmbedder::new(dims).unwrap();
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
pub fn diff(got: &State, want: &State) -> String {
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
