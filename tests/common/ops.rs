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

use std::collections::BTreeMap;
use std::path::Path;

use agentstate::checkpoint::{ChannelVersion, ChannelVersions};
use agentstate::store::{HashEmbedder, Op, Put, Search};
use agentstate::{
    Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata, PruneStrategy, Store, StoreConfig,
};
use serde_json::Value;

/// Runs `op` (see the module docs).
pub fn execute(saver: &Checkpointer, store: &Store, op: &Value) -> agentstate::Result<()> {
    let strings = |v: &Value| -> Vec<String> { v.as_array().unwrap().iter().map(s).collect() };
    match op["op"].as_str().unwrap() {
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
                .map(|i| Op::Put(Put::new(&strings(&i[0]), s(&i[1]), i[2].clone()).no_ttl()))
                .collect();
            store.batch(ops)?;
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
    Ok(())
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
    /// Applies an operation the child reported.
    pub fn apply(&mut self, op: &Value) {
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
                meta: Value::Object(tuple.metadata.0),
                values: Value::Object(tuple.checkpoint.values_json()),
                writes: tuple.pending_writes.into_iter().map(|w| (w.task_id, w.channel, w.value)).collect(),
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
