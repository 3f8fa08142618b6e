//! The checkpointer workload of `shared/peer-bench/bench_checkpointer.py` on
//! agentstate: per step one `put` of 6 channels (a `messages` list that grows
//! by `--msgs-per-step` dicts of `--msg-bytes` content, a `counter`, and four
//! that do not change) and one `put_writes` of 3 writes; then reads on the
//! long thread; then `--threads` x `--thread-steps` round-robin. Prints one
//! JSON object with the same metric names as the Python script.
//!
//! `cargo run --release --example bench_checkpointer -- [--steps 1000] [--full]`
//!
//! One difference is forced by the storage layout (docs/design.md, "Checkpoint storage"):
//! the first step lists every channel in `new_versions` (as LangGraph's
//! runtime does for its input step), so that the unchanged channels get their
//! one blob; Python's bench never lists them, which SqliteSaver tolerates
//! because it stores whole states.

use std::sync::Arc;
use std::time::Instant;

use agentstate::checkpoint::{uuid6, ChannelVersion, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, Durability, ListQuery, Metadata, Result};
use serde_json::{json, Map, Value};

const NODES: [&str; 3] = ["agent", "tools", "summarize"];

fn make_msg(i: usize, nbytes: usize) -> Value {
    let role = if i % 2 == 0 { "user" } else { "assistant" };
    let body: String =
        format!("message {i} {}", "lorem ipsum dolor sit amet ".repeat(20)).chars().take(nbytes).collect();
    json!({"role": role, "content": body, "id": format!("msg-{i:08}")})
}

struct ThreadSim {
    saver: Checkpointer,
    config: CheckpointConfig,
    step: i64,
    msg_no: usize,
    /// The state, mutated in place step by step (Python's bench makes a
    /// shallow dict copy per step; a deep clone here would measure Rust's
    /// allocator, not the saver).
    cp: Checkpoint,
    msg_bytes: usize,
    msgs_per_step: usize,
}

impl ThreadSim {
    fn new(saver: &Checkpointer, thread: &str, msg_bytes: usize, msgs_per_step: usize) -> ThreadSim {
        let mut values = Map::new();
        values.insert("messages".into(), json!([]));
        values.insert("scratch".into(), json!({"plan": "search then answer", "attempt": 0}));
        values.insert("counter".into(), json!(0));
        values.insert("route".into(), json!("agent"));
        values.insert("user_profile".into(), json!({"name": "bench", "lang": "en", "tier": "pro"}));
        values.insert("branch:to:agent".into(), Value::Null);
        let mut cp = Checkpoint::with_id(String::new());
        cp.channel_versions = values.keys().map(|k| (k.clone(), saver.get_next_version(None))).collect();
        cp.set_values(values);
        for n in NODES.iter().chain(["__input__"].iter()) {
            cp.versions_seen.insert(n.to_string(), ChannelVersions::new());
        }
        cp.updated_channels = Some(vec!["messages".into(), "counter".into()]);
        ThreadSim {
            saver: saver.clone(),
            config: CheckpointConfig::thread(thread),
            step: -1,
            msg_no: 0,
            cp,
            msg_bytes,
            msgs_per_step,
        }
    }

    fn one_step(&mut self) -> Result<()> {
        self.step += 1;
        let mut new_msgs = vec![];
        for _ in 0..self.msgs_per_step {
            new_msgs.push(make_msg(self.msg_no, self.msg_bytes));
            self.msg_no += 1;
        }
        let values = &mut self.cp.channel_values;
        if let Some(m) =
            values.get("messages").and_then(|m| m.appended(new_msgs.iter().cloned().map(Arc::new)))
        {
            values.insert("messages".into(), m);
        }
        let counter = values["counter"].as_value().and_then(Value::as_i64).unwrap_or(0) + 1;
        values.insert("counter".into(), json!(counter).into());
        let mut new_versions = ChannelVersions::new();
        for ch in ["messages", "counter"] {
            let v = self.saver.get_next_version(self.cp.channel_versions.get(ch));
            self.cp.channel_versions.insert(ch.into(), v.clone());
            new_versions.insert(ch.into(), v);
        }
        if self.step == 0 {
            new_versions = self.cp.channel_versions.clone();
        }
        let node = NODES[self.step as usize % NODES.len()];
        let seen: ChannelVersions = ["messages", "counter"]
            .iter()
            .map(|c| (c.to_string(), self.cp.channel_versions[*c].clone()))
            .collect();
        self.cp.versions_seen.insert(node.into(), seen);
        self.cp.id = uuid6(Some(self.step)).to_string();

        let cp = &self.cp;
        let meta = Metadata::new()
            .with("source", if self.step == 0 { "input" } else { "loop" })
            .with("step", self.step)
            .with("parents", json!({}));
        self.config = self.saver.put(&self.config, cp, &meta, &new_versions)?;
        let task_id = uuid::Uuid::new_v4().to_string();
        let next = format!("branch:to:{}", NODES[(self.step as usize + 1) % NODES.len()]);
        let writes = vec![
            ("messages".to_string(), Value::Array(new_msgs)),
            ("counter".to_string(), json!(counter)),
            (next, Value::Null),
        ];
        self.saver.put_writes(&self.config, &writes, &task_id, &format!("~__pregel_pull, {node}"))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn timed<T>(iters: usize, mut f: impl FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut ts = vec![];
    let mut out = None;
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        out = Some(f()?);
        ts.push(t.elapsed().as_secs_f64());
    }
    Ok((median(ts), out.expect("at least one iteration")))
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn file_size(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn main() -> Result<()> {
    let steps = arg("--steps", 1000);
    let threads = arg("--threads", 100);
    let thread_steps = arg("--thread-steps", 50);
    let msg_bytes = arg("--msg-bytes", 200);
    let msgs_per_step = arg("--msgs-per-step", 1);
    let get_iters = arg("--get-iters", 200);
    let list_iters = arg("--list-iters", 5);
    let durability =
        if std::env::args().any(|a| a == "--full") { Durability::Full } else { Durability::Normal };
    let dir = std::env::temp_dir().join(format!("agentstate-bench-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut r = Map::new();

    let path = dir.join("single.db");
    let db = Db::builder().durability(durability).open(&path)?;
    let saver = db.checkpointer();
    let mut sim = ThreadSim::new(&saver, "thread-single", msg_bytes, msgs_per_step);
    let mut lat = vec![];
    let t0 = Instant::now();
    for _ in 0..steps {
        let t = Instant::now();
        sim.one_step()?;
        lat.push(t.elapsed().as_secs_f64());
    }
    r.insert("single_steps_per_s".into(), json!(steps as f64 / t0.elapsed().as_secs_f64()));
    let k = steps.min(100);
    r.insert("single_first100_ms".into(), json!(median(lat[..k].to_vec()) * 1e3));
    r.insert("single_last100_ms".into(), json!(median(lat[lat.len() - k..].to_vec()) * 1e3));

    let cfg = CheckpointConfig::thread("thread-single");
    let tup = saver.get_tuple(&cfg)?.expect("latest");
    assert_eq!(tup.metadata.step(), Some(steps as i64 - 1));
    assert_eq!(
        tup.checkpoint.channel_values["messages"].as_list().map(<[_]>::len),
        Some(steps * msgs_per_step)
    );
    assert_eq!(tup.pending_writes.len(), 3);
    let (t, _) = timed(get_iters, || saver.get_tuple(&cfg))?;
    r.insert("get_tuple_latest_us".into(), json!(t * 1e6));
    let mid = saver.list(&ListQuery::from_config(&cfg).filter(json!({"step": steps / 2})))?[0].config.clone();
    let (t, _) = timed(get_iters, || saver.get_tuple(&mid))?;
    r.insert("get_tuple_by_id_mid_us".into(), json!(t * 1e6));
    let (t, hist) = timed(list_iters, || saver.list(&ListQuery::from_config(&cfg)))?;
    assert_eq!(hist.len(), steps);
    r.insert("list_full_ms".into(), json!(t * 1e3));
    let (t, hist) = timed(get_iters / 10, || saver.list(&ListQuery::from_config(&cfg).limit(10)))?;
    assert_eq!(hist.len(), 10);
    r.insert("list_limit10_ms".into(), json!(t * 1e3));
    let flt = json!({"source": "loop", "step": steps / 2});
    let (t, hits) = timed(get_iters / 10, || saver.list(&ListQuery::from_config(&cfg).filter(flt.clone())))?;
    assert_eq!(hits.len(), 1);
    r.insert("list_filter_ms".into(), json!(t * 1e3));
    let (t, hits) = timed(get_iters / 10, || saver.list(&ListQuery::all().filter(flt.clone())))?;
    assert_eq!(hits.len(), 1);
    r.insert("list_filter_allthreads_ms".into(), json!(t * 1e3));
    r.insert("single_db_bytes".into(), json!(file_size(&path)));
    r.insert("single_wal_bytes".into(), json!(file_size(&path.with_extension("db-wal"))));
    drop((sim, saver, db));
    r.insert("single_db_bytes_after_close".into(), json!(file_size(&path)));

    let path = dir.join("multi.db");
    let db = Db::builder().durability(durability).open(&path)?;
    let saver = db.checkpointer();
    let mut sims: Vec<ThreadSim> = (0..threads)
        .map(|i| ThreadSim::new(&saver, &format!("thread-{i:04}"), msg_bytes, msgs_per_step))
        .collect();
    let t0 = Instant::now();
    for _ in 0..thread_steps {
        for s in sims.iter_mut() {
            s.one_step()?;
        }
    }
    r.insert("multi_steps_per_s".into(), json!((threads * thread_steps) as f64 / t0.elapsed().as_secs_f64()));
    let cfg = CheckpointConfig::thread(format!("thread-{:04}", threads / 2));
    let (t, tup) = timed(get_iters, || saver.get_tuple(&cfg))?;
    assert_eq!(tup.and_then(|t| t.metadata.step()), Some(thread_steps as i64 - 1));
    r.insert("multi_get_tuple_latest_us".into(), json!(t * 1e6));
    drop((sims, saver, db));
    r.insert("multi_db_bytes_after_close".into(), json!(file_size(&path)));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ChannelVersion::Int(0);
    println!("{}", Value::Object(r));
    Ok(())
}
