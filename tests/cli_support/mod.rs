//! What the CLI tests (`tests/cli*.rs`) share: running the `agentstate`
//! binary on a file and checking how it ended, and a fixture file written
//! through the library.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions};
use agentstate::store::{IndexConfig, Put};
use agentstate::{Checkpoint, CheckpointConfig, Db, Metadata, StoreConfig};
use serde_json::{json, Map, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_agentstate");

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run_with(path: &Path, args: &[&str], stdin: Option<&str>) -> Out {
    let mut cmd = Command::new(BIN);
    cmd.arg(path).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().expect("run the agentstate binary");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

pub fn run(path: &Path, args: &[&str]) -> Out {
    run_with(path, args, None)
}

/// Runs a command that must succeed quietly; returns its stdout.
pub fn ok(path: &Path, args: &[&str]) -> String {
    let out = run(path, args);
    assert_eq!(out.code, 0, "{args:?} failed: {}", out.stderr);
    assert_eq!(out.stderr, "", "{args:?} wrote to stderr");
    out.stdout
}

/// Runs a command with `--json` that must succeed; returns its parsed stdout.
pub fn ok_json(path: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = ok(path, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
}

/// Runs a command that must fail with `code`, print nothing on stdout and one
/// line on stderr; returns that line.
pub fn fails(path: &Path, args: &[&str], code: i32) -> String {
    fails_with(path, args, None, code)
}

pub fn fails_with(path: &Path, args: &[&str], stdin: Option<&str>, code: i32) -> String {
    let out = run_with(path, args, stdin);
    assert_eq!(out.code, code, "{args:?}: expected exit {code}, got {}: {}", out.code, out.stderr);
    assert_eq!(out.stdout, "", "{args:?} wrote to stdout");
    assert_eq!(out.stderr.lines().count(), 1, "{args:?}: not one stderr line: {:?}", out.stderr);
    assert!(out.stderr.starts_with("error: "), "{args:?}: {}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    out.stderr.trim_end().to_string()
}

/// A file with two threads and a Store.
///
/// - `t1` (root namespace): checkpoints `ids[0..4]` (steps -1..=2) in a
///   chain, channels `messages` (a list: a blob per version), `counter` (an
///   integer: inline) and `notes` (an object written once: one blob shared by
///   every checkpoint); a pending write on each of `ids[0..4]`; and `update`,
///   a branch from `ids[1]` with other messages.
/// - `t2`: two checkpoints in the root namespace and one in `child:1`.
/// - Store (hashed embedder, 64 dims, field `text`): `users.alice/m1`,
///   `users.alice/m2`, `users.bob/m1`, and `users.alice.session/cart`, expired.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub ids: Vec<String>,
    pub update: String,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();

    let mut config = CheckpointConfig::thread("t1");
    let mut versions = ChannelVersions::new();
    let mut msgs = vec![];
    let mut ids = vec![];
    for step in -1i64..3 {
        if step >= 0 {
            let write = json!({"role": "ai", "content": format!("reply {step}")});
            saver.put_writes(&config, &[("messages", write)], &format!("task-{step}"), "").unwrap();
        }
        msgs.push(json!({"role": "human", "content": format!("turn {step}")}));
        let mut new_versions = ChannelVersions::new();
        for ch in ["messages", "counter"] {
            let v = next_version(versions.get(ch));
            versions.insert(ch.to_string(), v.clone());
            new_versions.insert(ch.to_string(), v);
        }
        if step == -1 {
            let v = next_version(None);
            versions.insert("notes".into(), v.clone());
            new_versions.insert("notes".into(), v);
        }
        let mut cp = Checkpoint::with_id(uuid6(Some(step)).to_string());
        cp.channel_values.insert("messages".into(), (json!(msgs)).into());
        cp.channel_values.insert("counter".into(), (json!(step + 1)).into());
        cp.channel_values.insert("notes".into(), (json!({"lang": "en"})).into());
        cp.channel_versions = versions.clone();
        let source = if step < 0 { "input" } else { "loop" };
        let meta = Metadata::new().with("source", source).with("step", step);
        config = saver.put(&config, &cp, &meta, &new_versions).unwrap();
        ids.push(config.checkpoint_id.clone().unwrap());
    }
    saver
        .put_writes(&config, &[("messages", json!({"role": "ai", "content": "pending"}))], "task-2", "")
        .unwrap();
    let mut edit = Map::new();
    edit.insert("messages".into(), json!([{"role": "human", "content": "something else"}]));
    let update = saver.fork_with(&CheckpointConfig::thread("t1").at(ids[1].clone()), edit).unwrap();

    for ns in ["", "", "child:1"] {
        let parent = saver.get_tuple(&CheckpointConfig::thread("t2").ns(ns)).unwrap().map(|t| t.config);
        let mut cp = Checkpoint::new();
        let v = next_version(None);
        cp.channel_values.insert("state".into(), (json!({"ns": ns})).into());
        cp.channel_versions.insert("state".into(), v.clone());
        let config = parent.unwrap_or_else(|| CheckpointConfig::thread("t2").ns(ns));
        saver
            .put(
                &config,
                &cp,
                &Metadata::new().with("source", "loop").with("step", 0),
                &[("state".to_string(), v)].into(),
            )
            .unwrap();
    }

    let store = db
        .store(StoreConfig::default().with_index(IndexConfig::hashed(64).unwrap().with_fields(["text"])))
        .unwrap();
    store
        .put(
            &["users", "alice"],
            "m1",
            json!({"text": "prefers refunds to store credit", "kind": "preference", "score": 0.9}),
        )
        .unwrap();
    store
        .put(&["users", "alice"], "m2", json!({"text": "lives in Lyon", "kind": "fact", "score": 0.4}))
        .unwrap();
    store
        .put(
            &["users", "bob"],
            "m1",
            json!({"text": "likes running shoes", "kind": "preference", "score": 0.7}),
        )
        .unwrap();
    store
        .put_with(
            Put::new(&["users", "alice", "session"], "cart", json!({"text": "2 items in cart"}))
                .ttl(std::time::Duration::ZERO),
        )
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    drop(store);
    drop(db);
    Fixture { _dir: dir, path, update: update.checkpoint_id.unwrap(), ids }
}

pub fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

pub fn thread<'a>(threads: &'a Value, id: &str) -> Option<&'a Value> {
    threads.as_array().unwrap().iter().find(|t| t["thread_id"] == id)
}

/// The files of `dir`: names, sizes and a hash of their bytes.
pub fn dir_snapshot(dir: &Path) -> Vec<(String, usize, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out: Vec<(String, usize, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            (e.file_name().to_string_lossy().into_owned(), bytes.len(), h.finish())
        })
        .collect();
    out.sort();
    out
}
