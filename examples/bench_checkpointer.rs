//! The checkpointer workload of the Python reference benchmark
//! `bench_checkpointer.py` (run beside it by `bench/compare.sh`) on
//! agentstate: per step one checkpoint of 6 channels (a `messages` list that
//! grows by `--msgs-per-step` dicts of `--msg-bytes` content, a `counter`, and
//! four that do not change) and one `put_writes` of 3 writes; then reads on
//! the long thread (every value read is touched: each message's content);
//! warm reads (the writing process) and cold ones (a fresh `Db`, empty
//! caches); then `--threads` x `--thread-steps` round-robin; then
//! `--writers` threads writing at once. Prints one JSON object with the
//! Python script's metric names, and `single_step_us` (ours only): the
//! single-thread steps' latency quantiles and the share of their time
//! spent in steps slower than four times the median.
//!
//! ```text
//! cargo run --release --example bench_checkpointer -- [--steps 1000] [--full] [--put] [--write-behind] [--writers 8]
//! cargo run --release --example bench_checkpointer -- --build-history 5000 FILE
//! cargo run --release --example bench_checkpointer -- --read-history FILE iter|meta
//! ```
//!
//! A step goes through [`Checkpointer::step`] (say what changed) unless
//! `--put` selects LangGraph's `put` with hand-made versions; with `--put`,
//! the first step lists every channel in `new_versions` (as LangGraph's
//! runtime does for its input step), so that the unchanged channels get their
//! one blob: `put` refuses a checkpoint whose channels have no stored value.
//! `--write-behind` opens the file with `DbBuilder::write_behind`; the timed
//! loops end with `Db::flush`.
//!
//! On the step path a step's 3 writes (its task's, made after the
//! checkpoint) are stored with the next step (`Step::parent_writes`: one
//! commit per step, as a runtime does with a superstep's last task), the
//! last step's when the loop ends (inside the timing): the same rows as
//! Python's `put` + `put_writes`, one transaction per step instead of two.

use std::sync::Arc;
use std::time::Instant;

use agentstate::checkpoint::{uuid6, ChannelVersion, ChannelVersions};
use agentstate::{
    Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, Db, Durability, ListQuery, Metadata, Result,
};
use serde_json::{json, Map, Value};

#[path = "common/mod.rs"]
mod common;
use common::{arg, flag, median};

const NODES: [&str; 3] = ["agent", "tools", "summarize"];

fn make_msg(i: usize, nbytes: usize) -> Value {
    let role = if i % 2 == 0 { "user" } else { "assistant" };
    let body: String =
        format!("message {i} {}", "lorem ipsum dolor sit amet ".repeat(20)).chars().take(nbytes).collect();
    json!({"role": role, "content": body, "id": format!("msg-{i:08}")})
}

/// How a step is written.
#[derive(Clone, Copy, PartialEq)]
enum Api {
    /// `Checkpointer::step`: say what changed.
    Step,
    /// LangGraph's `put` with hand-made versions.
    Put,
}

struct ThreadSim {
    saver: Checkpointer,
    api: Api,
    config: CheckpointConfig,
    step: i64,
    msg_no: usize,
    /// The state, mutated in place step by step (Python's bench makes a
    /// shallow dict copy per step; a deep clone here would measure Rust's
    /// allocator, not the saver). The put path only.
    cp: Checkpoint,
    /// The last checkpoint written. The step path only.
    head: Option<CheckpointTuple>,
    msg_bytes: usize,
    msgs_per_step: usize,
    /// The step path: the writes of the head's task, stored with the next
    /// step (`Step::parent_writes`: one commit per step) or by `finish`.
    held: Option<TaskWrites>,
}

/// A task's writes: task id, task path, (channel, value) pairs.
type TaskWrites = (String, String, Vec<(String, Value)>);

fn initial_values() -> Map<String, Value> {
    let mut values = Map::new();
    values.insert("messages".into(), json!([]));
    values.insert("scratch".into(), json!({"plan": "search then answer", "attempt": 0}));
    values.insert("counter".into(), json!(0));
    values.insert("route".into(), json!("agent"));
    values.insert("user_profile".into(), json!({"name": "bench", "lang": "en", "tier": "pro"}));
    values.insert("branch:to:agent".into(), Value::Null);
    values
}

impl ThreadSim {
    fn new(
        saver: &Checkpointer,
        api: Api,
        thread: &str,
        msg_bytes: usize,
        msgs_per_step: usize,
    ) -> ThreadSim {
        let values = initial_values();
        let mut cp = Checkpoint::with_id(String::new());
        cp.channel_versions = values.keys().map(|k| (k.clone(), saver.get_next_version(None))).collect();
        cp.set_values(values);
        for n in NODES.iter().chain(["__input__"].iter()) {
            cp.versions_seen.insert(n.to_string(), ChannelVersions::new());
        }
        cp.updated_channels = Some(vec!["messages".into(), "counter".into()]);
        ThreadSim {
            saver: saver.clone(),
            api,
            config: CheckpointConfig::thread(thread),
            step: -1,
            msg_no: 0,
            cp,
            head: None,
            msg_bytes,
            msgs_per_step,
            held: None,
        }
    }

    /// Stores the writes held for the next step (the run ends here).
    fn finish(&mut self) -> Result<()> {
        match self.held.take() {
            Some((task, path, writes)) => self.saver.put_writes(&self.config, &writes, &task, &path),
            None => Ok(()),
        }
    }

    fn one_step(&mut self) -> Result<()> {
        self.step += 1;
        let mut new_msgs = vec![];
        for _ in 0..self.msgs_per_step {
            new_msgs.push(make_msg(self.msg_no, self.msg_bytes));
            self.msg_no += 1;
        }
        let node = NODES[self.step as usize % NODES.len()];
        let meta = Metadata::new()
            .with("source", if self.step == 0 { "input" } else { "loop" })
            .with("step", self.step)
            .with("parents", json!({}));
        let counter = self.step + 1;
        match self.api {
            Api::Step => {
                let next = match &self.head {
                    None => {
                        let mut first = self.saver.start(&self.config);
                        for (k, v) in initial_values() {
                            first = first.set(k, v);
                        }
                        first
                    }
                    Some(head) => match self.held.take() {
                        Some((task, path, writes)) => {
                            self.saver.step(head).parent_writes(task, path, &writes)
                        }
                        None => self.saver.step(head),
                    },
                };
                let seen: ChannelVersions = match &self.head {
                    Some(h) => ["messages", "counter"]
                        .iter()
                        .filter_map(|c| {
                            h.checkpoint.channel_versions.get(*c).map(|v| (c.to_string(), v.clone()))
                        })
                        .collect(),
                    None => ChannelVersions::new(),
                };
                let head = next
                    .append("messages", new_msgs.iter().cloned())
                    .set("counter", json!(counter))
                    .seen(node, seen)
                    .metadata(meta)
                    .commit()?;
                self.config = head.config.clone();
                self.head = Some(head);
            }
            Api::Put => {
                let values = &mut self.cp.channel_values;
                if let Some(m) =
                    values.get("messages").and_then(|m| m.appended(new_msgs.iter().cloned().map(Arc::new)))
                {
                    values.insert("messages".into(), m);
                }
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
                let seen: ChannelVersions = ["messages", "counter"]
                    .iter()
                    .map(|c| (c.to_string(), self.cp.channel_versions[*c].clone()))
                    .collect();
                self.cp.versions_seen.insert(node.into(), seen);
                self.cp.id = uuid6(Some(self.step)).to_string();
                self.config = self.saver.put(&self.config, &self.cp, &meta, &new_versions)?;
            }
        }
        let task_id = uuid::Uuid::new_v4().to_string();
        let next = format!("branch:to:{}", NODES[(self.step as usize + 1) % NODES.len()]);
        let writes = vec![
            ("messages".to_string(), Value::Array(new_msgs)),
            ("counter".to_string(), json!(counter)),
            (next, Value::Null),
        ];
        let path = format!("~__pregel_pull, {node}");
        match self.api {
            Api::Step => {
                self.held = Some((task_id, path, writes));
                Ok(())
            }
            Api::Put => self.saver.put_writes(&self.config, &writes, &task_id, &path),
        }
    }
}

/// Touches every value of a tuple: each message of a list (decoded: is it an
/// object?), every other channel's value. Returns a checksum so the work
/// cannot be skipped. (Python's benchmark only decodes; a value counted as
/// read here must at least exist decoded, element by element.)
fn touch(t: &CheckpointTuple) -> usize {
    let mut n = 0;
    for (ch, v) in &t.checkpoint.channel_values {
        n += ch.len();
        match v.as_list() {
            Some(items) => {
                n += items.iter().filter(|m| m.is_object()).count();
            }
            None => n += v.as_value().map_or(0, |x| usize::from(!x.is_null())),
        }
    }
    n + t.pending_writes.len()
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

/// Median microseconds of `n` first reads of `config`, each on a fresh `Db`
/// (a new connection, empty caches; the open is not timed), every value
/// touched.
fn cold_read_us(path: &std::path::Path, config: &CheckpointConfig, n: usize) -> Result<f64> {
    let mut ts = vec![];
    for _ in 0..n {
        let fresh = Db::open(path)?.checkpointer();
        let t = Instant::now();
        touch(&fresh.get_tuple(config)?.expect("a stored checkpoint"));
        ts.push(t.elapsed().as_secs_f64());
    }
    Ok(median(ts) * 1e6)
}

fn file_size(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn open(path: &std::path::Path, durability: Durability, behind: bool) -> Result<Db> {
    Db::builder().durability(durability).write_behind(behind).open(path)
}

/// `--history N`: a thread of N steps whose message list grows to N
/// messages, then its history read three ways, each in a fresh process
/// (`--read-history PATH MODE`) so that peak RSS is the reader's own.
fn history_build(n: usize, path: &std::path::Path) -> Result<()> {
    let db = Db::open(path)?;
    let saver = db.checkpointer();
    let mut sim = ThreadSim::new(&saver, Api::Step, "long", 260, 1);
    for _ in 0..n {
        sim.one_step()?;
    }
    sim.finish()
}

fn history_read(path: &str, mode: &str) -> Result<()> {
    let saver = Db::open(path)?.checkpointer();
    let t = Instant::now();
    let mut n = 0usize;
    let mut sum = 0usize;
    match mode {
        "iter" => {
            for tup in saver.list_iter(&ListQuery::thread("long"))? {
                sum += touch(&tup?);
                n += 1;
            }
        }
        "meta" => {
            for e in saver.history(&agentstate::inspect::HistoryQuery::thread("long"))? {
                sum += e.checkpoint_id.len();
                n += 1;
            }
        }
        _ => panic!("mode iter or meta"),
    }
    println!(
        "{}",
        json!({"mode": mode, "checkpoints": n, "ms": t.elapsed().as_secs_f64() * 1e3, "checksum": sum})
    );
    Ok(())
}

/// `--build-multi PATH`: 100 threads of 50 steps written round robin (the
/// multi-thread workload's file); `--cold-read PATH THREAD N`: N cold reads
/// of a thread's latest checkpoint (for profiling the cold rows alone).
fn multi_build(path: &std::path::Path) -> Result<()> {
    let db = Db::open(path)?;
    let saver = db.checkpointer();
    let mut sims: Vec<ThreadSim> =
        (0..100).map(|i| ThreadSim::new(&saver, Api::Step, &format!("thread-{i:04}"), 200, 1)).collect();
    for _ in 0..50 {
        for s in &mut sims {
            s.one_step()?;
        }
    }
    sims.iter_mut().try_for_each(ThreadSim::finish)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--build-multi") {
        return multi_build(std::path::Path::new(&args[i + 1]));
    }
    if let Some(i) = args.iter().position(|a| a == "--cold-read") {
        let n: usize = args[i + 3].parse().expect("--cold-read PATH THREAD N");
        let us =
            cold_read_us(std::path::Path::new(&args[i + 1]), &CheckpointConfig::thread(&args[i + 2]), n)?;
        println!("{}", json!({"thread": args[i + 2], "cold_us": us}));
        return Ok(());
    }
    if let Some(i) = args.iter().position(|a| a == "--read-history") {
        return history_read(&args[i + 1], &args[i + 2]);
    }
    if let Some(i) = args.iter().position(|a| a == "--build-history") {
        let n: usize = args[i + 1].parse().expect("--build-history N PATH");
        return history_build(n, std::path::Path::new(&args[i + 2]));
    }
    let steps = arg("--steps", 1000);
    let threads = arg("--threads", 100);
    let thread_steps = arg("--thread-steps", 50);
    let msg_bytes = arg("--msg-bytes", 200);
    let msgs_per_step = arg("--msgs-per-step", 1);
    let get_iters = arg("--get-iters", 200);
    let list_iters = arg("--list-iters", 5);
    let writers = arg("--writers", 8);
    let durability = if flag("--full") { Durability::Full } else { Durability::Normal };
    let api = if flag("--put") { Api::Put } else { Api::Step };
    let behind = flag("--write-behind");
    let dir = std::env::temp_dir().join(format!("agentstate-bench-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut r = Map::new();

    let path = dir.join("single.db");
    let db = open(&path, durability, behind)?;
    let saver = db.checkpointer();
    let mut sim = ThreadSim::new(&saver, api, "thread-single", msg_bytes, msgs_per_step);
    let mut lat = vec![];
    let t0 = Instant::now();
    for _ in 0..steps {
        let t = Instant::now();
        sim.one_step()?;
        lat.push(t.elapsed().as_secs_f64());
    }
    sim.finish()?;
    // Write-behind: the run ends when everything is committed.
    db.flush()?;
    r.insert("single_steps_per_s".into(), json!(steps as f64 / t0.elapsed().as_secs_f64()));
    let k = steps.min(100);
    r.insert("single_first100_ms".into(), json!(median(lat[..k].to_vec()) * 1e3));
    r.insert("single_last100_ms".into(), json!(median(lat[lat.len() - k..].to_vec()) * 1e3));
    // The rate counts every step; the medians above do not see the slow ones
    // (WAL checkpoints, page splits): their share of the steps' time (the
    // loop's, less the final `finish` and `flush`), ours only.
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize] * 1e6;
    let p50 = sorted[sorted.len() / 2]; // as `median` takes it
    let total: f64 = lat.iter().sum();
    let slow = lat.iter().filter(|t| **t > 4.0 * p50).fold(0.0, |a, t| a + t);
    r.insert(
        "single_step_us".into(),
        json!({"p50": p50 * 1e6, "p90": at(0.9), "p99": at(0.99), "max": at(1.0),
               "share_of_step_time_in_steps_over_4x_median": slow / total}),
    );

    let cfg = CheckpointConfig::thread("thread-single");
    let tup = saver.get_tuple(&cfg)?.expect("latest");
    assert_eq!(tup.metadata.step(), Some(steps as i64 - 1));
    assert_eq!(
        tup.checkpoint.channel_values["messages"].as_list().map(|l| l.len()),
        Some(steps * msgs_per_step)
    );
    assert_eq!(tup.pending_writes.len(), 3);
    // Reads touch every value they count (each message's content).
    let (t, _) = timed(get_iters, || saver.get_tuple(&cfg).map(|t| t.as_ref().map(touch)))?;
    r.insert("get_tuple_latest_us".into(), json!(t * 1e6));
    let mid = saver.list(&ListQuery::from_config(&cfg).filter(json!({"step": steps / 2})))?[0].config.clone();
    let (t, _) = timed(get_iters, || saver.get_tuple(&mid).map(|t| t.as_ref().map(touch)))?;
    r.insert("get_tuple_by_id_mid_us".into(), json!(t * 1e6));
    let (t, hist) = timed(list_iters, || {
        saver.list(&ListQuery::from_config(&cfg)).map(|h| (h.iter().map(touch).sum::<usize>(), h.len()))
    })?;
    assert_eq!(hist.1, steps);
    r.insert("list_full_ms".into(), json!(t * 1e3));
    let (t, hist) = timed(get_iters / 10, || {
        saver
            .list(&ListQuery::from_config(&cfg).limit(10))
            .map(|h| (h.iter().map(touch).sum::<usize>(), h.len()))
    })?;
    assert_eq!(hist.1, 10);
    r.insert("list_limit10_ms".into(), json!(t * 1e3));
    let flt = json!({"source": "loop", "step": steps / 2});
    let (t, hits) = timed(get_iters / 10, || saver.list(&ListQuery::from_config(&cfg).filter(flt.clone())))?;
    assert_eq!(hits.len(), 1);
    r.insert("list_filter_ms".into(), json!(t * 1e3));
    let (t, hits) = timed(get_iters / 10, || saver.list(&ListQuery::all().filter(flt.clone())))?;
    assert_eq!(hits.len(), 1);
    r.insert("list_filter_allthreads_ms".into(), json!(t * 1e3));
    // Cold: a fresh Db handle (empty caches, a new connection) per read.
    let cold = get_iters.clamp(1, 30);
    r.insert("get_tuple_latest_cold_us".into(), json!(cold_read_us(&path, &cfg, cold)?));
    r.insert("get_tuple_by_id_mid_cold_us".into(), json!(cold_read_us(&path, &mid, cold)?));
    r.insert("single_db_bytes".into(), json!(file_size(&path)));
    r.insert("single_wal_bytes".into(), json!(file_size(&path.with_extension("db-wal"))));
    drop((sim, saver, db));
    r.insert("single_db_bytes_after_close".into(), json!(file_size(&path)));

    let path = dir.join("multi.db");
    let db = open(&path, durability, behind)?;
    let saver = db.checkpointer();
    let mut sims: Vec<ThreadSim> = (0..threads)
        .map(|i| ThreadSim::new(&saver, api, &format!("thread-{i:04}"), msg_bytes, msgs_per_step))
        .collect();
    let t0 = Instant::now();
    for _ in 0..thread_steps {
        for s in sims.iter_mut() {
            s.one_step()?;
        }
    }
    for s in sims.iter_mut() {
        s.finish()?;
    }
    db.flush()?;
    r.insert("multi_steps_per_s".into(), json!((threads * thread_steps) as f64 / t0.elapsed().as_secs_f64()));
    let cfg = CheckpointConfig::thread(format!("thread-{:04}", threads / 2));
    let (t, tup) = timed(get_iters, || saver.get_tuple(&cfg).map(|t| t.inspect(|t| assert!(touch(t) > 0))))?;
    assert_eq!(tup.and_then(|t| t.metadata.step()), Some(thread_steps as i64 - 1));
    r.insert("multi_get_tuple_latest_us".into(), json!(t * 1e6));
    r.insert("multi_get_tuple_latest_cold_us".into(), json!(cold_read_us(&path, &cfg, cold)?));
    drop((sims, saver, db));
    r.insert("multi_db_bytes_after_close".into(), json!(file_size(&path)));

    // Concurrent writers, one thread each, on one Db (group commit at Full).
    if writers > 1 {
        let path = dir.join("concurrent.db");
        let db = open(&path, durability, behind)?;
        let per = (steps / writers).max(10);
        let t0 = Instant::now();
        std::thread::scope(|sc| -> Result<()> {
            let hs: Vec<_> = (0..writers)
                .map(|w| {
                    let saver = db.checkpointer();
                    sc.spawn(move || -> Result<()> {
                        let mut sim =
                            ThreadSim::new(&saver, api, &format!("writer-{w}"), msg_bytes, msgs_per_step);
                        for _ in 0..per {
                            sim.one_step()?;
                        }
                        sim.finish()
                    })
                })
                .collect();
            for h in hs {
                h.join().expect("a writer panicked")?;
            }
            Ok(())
        })?;
        db.flush()?;
        r.insert("concurrent_steps_per_s".into(), json!((writers * per) as f64 / t0.elapsed().as_secs_f64()));
        r.insert("concurrent_writers".into(), json!(writers));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ChannelVersion::Int(0);
    println!("{}", Value::Object(r));
    Ok(())
}
