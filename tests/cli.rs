//! The `agentstate` command-line inspector, run as a process against files
//! written through the library: every command in text and `--json`, and the
//! error cases (one stderr line, a documented non-zero exit code).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions};
use agentstate::store::{IndexConfig, Put};
use agentstate::{Checkpoint, CheckpointConfig, Db, Metadata, StoreConfig};
use serde_json::{json, Map, Value};

const BIN: &str = env!("CARGO_BIN_EXE_agentstate");

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_with(path: &Path, args: &[&str], stdin: Option<&str>) -> Out {
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

fn run(path: &Path, args: &[&str]) -> Out {
    run_with(path, args, None)
}

/// Runs a command that must succeed quietly; returns its stdout.
fn ok(path: &Path, args: &[&str]) -> String {
    let out = run(path, args);
    assert_eq!(out.code, 0, "{args:?} failed: {}", out.stderr);
    assert_eq!(out.stderr, "", "{args:?} wrote to stderr");
    out.stdout
}

/// Runs a command with `--json` that must succeed; returns its parsed stdout.
fn ok_json(path: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = ok(path, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {text}"))
}

/// Runs a command that must fail with `code`, print nothing on stdout and one
/// line on stderr; returns that line.
fn fails(path: &Path, args: &[&str], code: i32) -> String {
    fails_with(path, args, None, code)
}

fn fails_with(path: &Path, args: &[&str], stdin: Option<&str>, code: i32) -> String {
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
struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    ids: Vec<String>,
    update: String,
}

fn fixture() -> Fixture {
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

fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

fn thread<'a>(threads: &'a Value, id: &str) -> Option<&'a Value> {
    threads.as_array().unwrap().iter().find(|t| t["thread_id"] == id)
}

#[test]
fn threads_history_show_diff() {
    let f = fixture();
    let p = f.path.as_path();

    let text = ok(p, &["threads"]);
    assert!(text.starts_with("THREAD"), "{text}");
    assert!(text.contains("t1") && text.contains("t2") && text.contains("child:1"), "{text}");
    let threads = ok_json(p, &["threads"]);
    let t1 = thread(&threads, "t1").unwrap();
    assert_eq!(t1["checkpoints"], 5);
    assert_eq!(t1["pending_writes"], 4);
    assert_eq!(t1["namespaces"], json!([""]));
    assert_eq!(t1["latest_checkpoint_id"], f.update);
    let t2 = thread(&threads, "t2").unwrap();
    assert_eq!(t2["checkpoints"], 3);
    assert_eq!(t2["namespaces"], json!(["", "child:1"]));
    assert_eq!(ok_json(p, &["threads", "--limit", "1"]).as_array().unwrap().len(), 1);

    // The fork tree: ids[1] has two children, the old chain and the update.
    let h = ok_json(p, &["history", "t1"]);
    let nodes = h["checkpoints"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    let node = |id: &str| nodes.iter().find(|n| n["checkpoint_id"] == id).unwrap();
    assert_eq!(strs(&node(&f.ids[1])["children"]), vec![f.ids[2].clone(), f.update.clone()]);
    assert_eq!(node(&f.update)["parent_checkpoint_id"], f.ids[1]);
    assert_eq!(node(&f.update)["source"], "update");
    assert_eq!(node(&f.ids[0])["step"], -1);
    assert_eq!(node(&f.ids[0])["parent_checkpoint_id"], Value::Null);
    assert_eq!(node(&f.ids[3])["pending_writes"], 1);
    let heads: Vec<&str> =
        nodes.iter().filter(|n| n["head"] == true).map(|n| n["checkpoint_id"].as_str().unwrap()).collect();
    assert_eq!(heads, vec![f.ids[3].as_str(), f.update.as_str()]);
    let text = ok(p, &["history", "t1"]);
    assert!(text.contains("5 checkpoints, 2 heads"), "{text}");
    assert!(text.contains(&format!("├── {}", f.update)), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    // The original chain stays in the first column.
    assert!(lines.iter().any(|l| l.starts_with(&f.ids[3])), "{text}");
    let h2 = ok_json(p, &["history", "t2", "--ns", "child:1"]);
    assert_eq!(h2["checkpoints"].as_array().unwrap().len(), 1);
    assert!(ok(p, &["history", "t2"]).contains("namespace child:1"));

    // One checkpoint, by id and by a suffix of it.
    let s = ok_json(p, &["show", "t1", &f.ids[1]]);
    assert_eq!(s["checkpoint_id"], f.ids[1]);
    assert_eq!(s["parent_checkpoint_id"], f.ids[0]);
    assert_eq!(s["checkpoint"]["channel_values"]["messages"].as_array().unwrap().len(), 2);
    assert_eq!(s["checkpoint"]["channel_values"]["counter"], 1);
    assert_eq!(s["checkpoint"]["channel_values"]["notes"], json!({"lang": "en"}));
    assert_eq!(s["metadata"], json!({"source": "loop", "step": 0}));
    assert_eq!(
        s["pending_writes"],
        json!([{"task_id": "task-1", "channel": "messages", "value": {"role": "ai", "content": "reply 1"}}])
    );
    let suffix = &f.ids[2][f.ids[2].len() - 12..];
    assert_eq!(ok_json(p, &["show", "t1", suffix])["checkpoint_id"], f.ids[2]);
    let latest = ok_json(p, &["show", "t1"]);
    assert_eq!(latest["checkpoint_id"], f.update);
    let text = ok(p, &["show", "t1", &f.ids[3]]);
    assert!(text.contains("channels (3)") && text.contains("pending writes (1)"), "{text}");
    assert!(text.contains("\"content\": \"turn 2\""), "{text}");

    // Diff: messages and counter changed, notes did not.
    let d = ok_json(p, &["diff", "t1", &f.ids[1], &f.ids[3]]);
    assert_eq!(d["added"], json!({}));
    assert_eq!(d["removed"], json!({}));
    assert_eq!(d["changed"]["counter"]["from"], 1);
    assert_eq!(d["changed"]["counter"]["to"], 3);
    assert_eq!(d["changed"]["messages"]["to"].as_array().unwrap().len(), 4);
    assert_eq!(d["unchanged"], json!(["notes"]));
    let text = ok(p, &["diff", "t1", &f.ids[1], &f.ids[3]]);
    assert!(text.contains("~ messages") && text.contains("+ [3]"), "{text}");
    assert!(text.contains("= unchanged: notes"), "{text}");
    let text = ok(p, &["diff", "t1", &f.ids[1], &f.update]);
    assert!(text.contains("\"something else\""), "{text}");
}

#[test]
fn fork_copy_prune_delete() {
    let f = fixture();
    let p = f.path.as_path();

    let fk = ok_json(p, &["fork", "t1", &f.ids[3]]);
    assert_eq!(fk["parent_checkpoint_id"], f.ids[3]);
    assert_eq!(fk["source"], "fork");
    let new_id = fk["checkpoint_id"].as_str().unwrap().to_string();
    let s = ok_json(p, &["show", "t1", &new_id]);
    assert_eq!(s["parent_checkpoint_id"], f.ids[3]);
    assert_eq!(s["checkpoint"]["channel_values"]["counter"], 3);

    let up = ok_json(p, &["fork", "t1", "--set", "counter=42", "--values", r#"{"notes": {"lang": "fr"}}"#]);
    assert_eq!(up["source"], "update");
    assert_eq!(up["parent_checkpoint_id"], new_id);
    let s = ok_json(p, &["show", "t1", up["checkpoint_id"].as_str().unwrap()]);
    assert_eq!(s["checkpoint"]["channel_values"]["counter"], 42);
    assert_eq!(s["checkpoint"]["channel_values"]["notes"], json!({"lang": "fr"}));
    assert!(ok(p, &["fork", "t1", &f.ids[0]]).starts_with("new checkpoint "));
    fails(p, &["fork", "t1", "--set", "counter=forty"], 2);
    fails(p, &["fork", "t1", "--set", "counter"], 2);
    fails(p, &["fork", "nope"], 3);

    // Copy: everything, and never onto an existing thread.
    let c = ok_json(p, &["copy", "t1", "t3"]);
    assert_eq!(c["checkpoints"], 8);
    assert_eq!(c["pending_writes"], 4);
    assert!(ok(p, &["copy", "t2", "t4"]).starts_with("copied thread t2 to t4: 3 checkpoints"));
    let e = fails(p, &["copy", "t1", "t3"], 4);
    assert!(e.contains("already has checkpoints"), "{e}");
    fails(p, &["copy", "nope", "t5"], 3);
    fails(p, &["copy", "t1", "t1"], 2);

    // Prune keeps the latest checkpoint; the check then warns about parents.
    let pr = ok_json(p, &["prune", "t3"]);
    assert_eq!(pr["strategy"], "keep_latest");
    assert_eq!(pr["threads"][0]["checkpoints_removed"], 7);
    assert_eq!(pr["threads"][0]["checkpoints_kept"], 1);
    assert_eq!(pr["threads"][0]["pending_writes_removed"], 4);
    assert!(pr["threads"][0]["blobs_removed"].as_u64().unwrap() > 0);
    let chk = ok_json(p, &["check"]);
    assert_eq!(chk["ok"], true);
    assert_eq!(chk["errors"], 0);
    assert!(chk["warnings"].as_u64().unwrap() >= 1, "{chk}");
    let text = ok(p, &["prune", "t4", "--strategy", "delete"]);
    assert!(text.contains("CHECKPOINTS REMOVED"), "{text}");
    let threads = ok_json(p, &["threads"]);
    assert!(thread(&threads, "t4").is_none());
    assert_eq!(thread(&threads, "t3").unwrap()["checkpoints"], 1);
    fails(p, &["prune", "t1", "nope"], 3);
    fails(p, &["prune"], 2);
    let all = ok_json(p, &["prune", "--all"]);
    assert_eq!(all["threads"].as_array().unwrap().len(), 3);

    // Delete.
    let d = ok_json(p, &["delete", "t1"]);
    assert_eq!(d["checkpoints"], 1);
    assert!(thread(&ok_json(p, &["threads"]), "t1").is_none());
    assert!(ok(p, &["delete", "t2"]).starts_with("deleted thread t2: 2 checkpoints"));
    let e = fails(p, &["delete", "t1"], 3);
    assert_eq!(e, "error: unknown thread 't1'");
}

#[test]
fn store_commands() {
    let f = fixture();
    let p = f.path.as_path();

    let g = ok_json(p, &["store", "get", "users.alice", "m1"]);
    assert_eq!(g["namespace"], json!(["users", "alice"]));
    assert_eq!(g["value"]["kind"], "preference");
    assert_eq!(g["vectors"], json!(["text"]));
    assert_eq!(g["expires_at"], Value::Null);
    let g2 = ok_json(p, &["store", "get", r#"["users","alice"]"#, "m1"]);
    assert_eq!(g2["value"], g["value"]);
    let text = ok(p, &["store", "get", "users.alice", "m2"]);
    assert!(text.contains("\"text\": \"lives in Lyon\"") && text.contains("expires_at  never"), "{text}");
    fails(p, &["store", "get", "users.alice", "nope"], 3);
    let e = fails(p, &["store", "get", "users.alice.session", "cart"], 3);
    assert!(e.contains("expired"), "{e}");

    // Put from an argument (fields inferred from the file: text), from stdin
    // with a TTL, and without a vector.
    let put =
        ok_json(p, &["store", "put", "users.carol", "m1", r#"{"text": "drinks green tea", "kind": "fact"}"#]);
    assert_eq!(put["vectors"], json!(["text"]));
    assert_eq!(put["expires_at"], Value::Null);
    let out = run_with(
        p,
        &["store", "put", "users.carol", "m2", "--ttl", "60", "--json"],
        Some(r#"{"text": "x"}"#),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(v["expires_at"].is_string(), "{v}");
    let out =
        run_with(p, &["store", "put", "users.carol", "m3", "-", "--no-index"], Some(r#"{"text": "y"}"#));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("put users.carol/m3: no vector, expires never"), "{}", out.stdout);
    assert_eq!(ok_json(p, &["store", "get", "users.carol", "m1"])["value"]["text"], "drinks green tea");

    // Search: by similarity, by filter, paged.
    let hits = ok_json(p, &["store", "search", "users", "--query", "refund to store credit"]);
    assert_eq!(hits[0]["key"], "m1");
    assert_eq!(hits[0]["namespace"], json!(["users", "alice"]));
    assert!(hits[0]["score"].as_f64().unwrap() > 0.5);
    let hits = ok_json(p, &["store", "search", "--filter", r#"{"kind": "preference"}"#]);
    let mut found: Vec<String> =
        hits.as_array().unwrap().iter().map(|h| format!("{}/{}", h["namespace"][1], h["key"])).collect();
    found.sort();
    assert_eq!(found, vec![r#""alice"/"m1""#, r#""bob"/"m1""#]);
    assert!(hits.as_array().unwrap().iter().all(|h| h["score"].is_null()));
    let hits = ok_json(p, &["store", "search", "users.alice", "--filter", r#"{"score": {"$lt": 0.5}}"#]);
    assert_eq!(hits.as_array().unwrap().len(), 1);
    assert_eq!(hits[0]["key"], "m2");
    let all = ok_json(p, &["store", "search", "users"]);
    assert_eq!(all.as_array().unwrap().len(), 6);
    let page = ok_json(p, &["store", "search", "users", "--limit", "2", "--offset", "1"]);
    assert_eq!(page.as_array().unwrap(), &all.as_array().unwrap()[1..3]);
    let text = ok(p, &["store", "search", "users.bob"]);
    assert!(text.starts_with("SCORE") && text.contains("running shoes"), "{text}");

    // Namespaces (the expired session item is not listed).
    let ns = ok_json(p, &["store", "ns"]);
    assert_eq!(ns, json!([["users", "alice"], ["users", "bob"], ["users", "carol"]]));
    assert_eq!(ok_json(p, &["store", "ns", "--max-depth", "1"]), json!([["users"]]));
    assert_eq!(ok_json(p, &["store", "ns", "--suffix", "bob"]), json!([["users", "bob"]]));
    assert_eq!(
        ok_json(p, &["store", "ns", "--prefix", "users.*", "--limit", "1", "--offset", "1"]),
        json!([["users", "bob"]])
    );
    assert_eq!(ok(p, &["store", "ns", "--prefix", "users"]), "users.alice\nusers.bob\nusers.carol\n");

    // Delete, sweep.
    assert_eq!(ok(p, &["store", "delete", "users.carol", "m1"]), "deleted users.carol/m1\n");
    fails(p, &["store", "delete", "users.carol", "m1"], 3);
    assert_eq!(ok_json(p, &["store", "delete", "users.carol", "m2"])["deleted"], true);
    assert_eq!(ok_json(p, &["store", "sweep"]), json!({"swept": 1}));
    assert_eq!(ok(p, &["store", "sweep"]), "swept 0 expired items\n");
    let stats = ok_json(p, &["stats"]);
    assert_eq!(stats["store"]["expired"], 0);
    assert_eq!(stats["store"]["items"], 4);

    // Reindex with the recorded dims, then with others.
    let r = ok_json(p, &["store", "reindex"]);
    assert_eq!(r, json!({"items": 4, "vectors": 4, "embedder": "agentstate-hash-v1/64", "fields": ["text"]}));
    let text = ok(p, &["store", "reindex", "--dims", "32", "--fields", "text,kind"]);
    assert!(
        text.starts_with("reindexed 4 items with agentstate-hash-v1/32 (fields: text, kind): 7 vectors"),
        "{text}"
    );
    let stats = ok_json(p, &["stats"]);
    assert_eq!(stats["vectors"]["dims"], json!([32]));
    assert_eq!(stats["vectors"]["embedder"], "agentstate-hash-v1/32");
    let hits = ok_json(p, &["store", "search", "--query", "running shoes", "--limit", "1"]);
    assert_eq!(hits[0]["namespace"], json!(["users", "bob"]));
    fails(p, &["store", "reindex", "--dims", "0"], 2);
}

#[test]
fn stats_and_check() {
    let f = fixture();
    let p = f.path.as_path();

    let s = ok_json(p, &["stats"]);
    assert_eq!(s["tables"]["checkpoints"]["rows"], 8);
    assert!(s["tables"]["checkpoints"]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(s["tables"]["checkpoint_writes"]["rows"], 4);
    assert_eq!(s["tables"]["store"]["rows"], 4);
    assert_eq!(s["tables"]["store_vectors"]["rows"], 4);
    assert_eq!(s["checkpoints"]["threads"], 2);
    assert_eq!(s["checkpoints"]["namespaces"], 3);
    // One `notes` blob serves the five checkpoints of t1; every other blob
    // (a version of `messages` or `state`) serves one.
    assert_eq!(s["checkpoints"]["blobs"], 9);
    assert_eq!(s["checkpoints"]["blob_references"], 13);
    assert_eq!(s["checkpoints"]["shared_blobs"], 1);
    assert!(
        s["checkpoints"]["blob_references"].as_u64().unwrap() > s["checkpoints"]["blobs"].as_u64().unwrap(),
        "{s}"
    );
    assert_eq!(s["checkpoints"]["missing_blobs"], 0);
    assert_eq!(s["store"]["expired"], 1);
    assert_eq!(s["store"]["with_ttl"], 1);
    assert_eq!(s["store"]["namespaces"], 3);
    assert_eq!(s["vectors"]["vectors"], 4);
    assert_eq!(s["vectors"]["dims"], json!([64]));
    assert_eq!(s["vectors"]["embedder"], "agentstate-hash-v1/64");
    assert_eq!(s["schema"]["checkpoint_migrations"], 8);
    let text = ok(p, &["stats"]);
    assert!(text.contains("checkpoint_blobs") && text.contains("embedder agentstate-hash-v1/64"), "{text}");
    assert!(text.contains("1 expired (not yet swept)"), "{text}");

    let text = ok(p, &["check"]);
    assert!(text.ends_with("result: ok\n"), "{text}");
    let c = ok_json(p, &["check"]);
    assert_eq!(c["ok"], true);
    assert_eq!(c["problems"], json!([]));
    assert_eq!(c["checks"].as_array().unwrap().len(), 6);

    // Break the file: a missing blob, a write without its checkpoint, a
    // vector without its item.
    {
        let conn = rusqlite::Connection::open(p).unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF;
             DELETE FROM checkpoint_blobs WHERE channel = 'notes';
             INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, n, writes)
                 VALUES ('t1', '', 'no-such-checkpoint', 'x', 1, x'919400a86d65737361676573a46e756c6cc400');
             INSERT INTO store_vectors (prefix, key, field_name, embedding)
                 SELECT 'ghost', 'k', field_name, embedding FROM store_vectors LIMIT 1;",
        )
        .unwrap();
    }
    let out = run(p, &["check"]);
    assert_eq!(out.code, 7, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("error: integrity check failed"), "{}", out.stderr);
    assert!(out.stdout.contains("which has no blob"), "{}", out.stdout);
    assert!(out.stdout.contains("checkpoint no-such-checkpoint of thread 't1'"), "{}", out.stdout);
    assert!(out.stdout.contains("item ghost/k, which does not exist"), "{}", out.stdout);
    let out = run(p, &["check", "--json"]);
    assert_eq!(out.code, 7);
    let c: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(c["ok"], false);
    assert_eq!(c["errors"], 5, "{c}");
    let orphan = c["problems"].as_array().unwrap().iter().find(|p| p["check"] == "vectors").unwrap();
    assert_eq!(orphan["severity"], "warning", "an orphan vector is a leftover, not corruption: {c}");
    // Writes may come before their checkpoint (LangGraph has no foreign key).
    let early = c["problems"].as_array().unwrap().iter().find(|p| p["check"] == "writes").unwrap();
    assert_eq!(early["severity"], "warning", "writes without their checkpoint are a leftover: {c}");
    let stats = ok_json(p, &["stats"]);
    assert_eq!(stats["checkpoints"]["missing_blobs"], 5);
}

#[test]
fn errors_are_one_line_with_an_exit_code() {
    let f = fixture();
    let p = f.path.as_path();

    assert_eq!(fails(p, &["history", "nope"], 3), "error: unknown thread 'nope'");
    fails(p, &["history", "t1", "--ns", "zzz"], 3);
    fails(p, &["show", "nope"], 3);
    let e = fails(p, &["show", "t1", "zzzzzzzz"], 3);
    assert!(e.contains("no checkpoint 'zzzzzzzz'"), "{e}");
    fails(p, &["diff", "t1", &f.ids[0], "zzzzzzzz"], 3);
    let e = fails(p, &["show", "t1", &f.ids[0][..1]], 2);
    assert!(e.contains("ambiguous"), "{e}");

    let e = fails(p, &["store", "search", "--filter", r#"{"a b": 1}"#], 2);
    assert!(e.to_lowercase().starts_with("error: invalid filter"), "{e}");
    let e = fails(p, &["store", "search", "--filter", r#"{"score": {"$near": 1}}"#], 2);
    assert!(e.starts_with("error: invalid filter:"), "{e}");
    let e = fails(p, &["store", "search", "--filter", "{bad"], 2);
    assert!(e.starts_with("error: invalid JSON filter:"), "{e}");
    let e = fails(p, &["store", "put", "users.x", "k", "{bad"], 2);
    assert!(e.starts_with("error: invalid JSON value:"), "{e}");
    fails_with(p, &["store", "put", "users.x", "k"], Some("not json"), 2);
    fails(p, &["store", "put", "users.x", "k", "[1, 2]"], 2);
    fails(p, &["store", "put", "users.x", "k", "{}", "--ttl", "-1"], 2);
    let e = fails(p, &["store", "put", "langgraph.x", "k", "{}"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    let e = fails(p, &["store", "get", "users..alice", "k"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    let e = fails(p, &["store", "get", r#"["users", 1]"#, "k"], 2);
    assert!(e.starts_with("error: invalid namespace:"), "{e}");
    fails(p, &["store", "get", "[users", "k"], 2);

    // Command-line errors are one line too.
    let e = fails(p, &["frobnicate"], 2);
    assert!(e.contains("frobnicate") && e.ends_with("(see --help)"), "{e}");
    let e = fails(p, &["show"], 2);
    assert!(e.contains("<THREAD>"), "{e}");
    fails(p, &["store", "search", "--limit", "many"], 2);

    // Files that are not usable.
    let dir = tempfile::tempdir().unwrap();
    let e = fails(&dir.path().join("missing.db"), &["threads"], 5);
    assert!(e.contains("missing.db"), "{e}");
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some text that is long enough to have a header\n".repeat(20),
    )
    .unwrap();
    let e = fails(&text, &["stats"], 5);
    assert!(e.contains("not an agentstate database"), "{e}");

    let other = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&other).unwrap().execute_batch("CREATE TABLE foo (x)").unwrap();
    let e = fails(&other, &["threads"], 5);
    assert!(e.contains("not an agentstate database"), "{e}");
    let tables: i64 = rusqlite::Connection::open(&other)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1, "the foreign file was not touched");

    let saver_file = dir.path().join("python_saver.sqlite");
    rusqlite::Connection::open(&saver_file)
        .unwrap()
        .execute_batch("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB); CREATE TABLE writes (x)")
        .unwrap();
    let e = fails(&saver_file, &["threads"], 5);
    assert!(e.contains("SqliteSaver"), "{e}");

    let newer = dir.path().join("newer.db");
    drop(Db::open(&newer).unwrap());
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute("INSERT INTO checkpoint_migrations (v) VALUES (999)", [])
        .unwrap();
    let e = fails(&newer, &["threads"], 5);
    assert!(e.contains("newer") && e.contains("999"), "{e}");

    // A --query needs the file's embedder; a filter does not.
    let plain = dir.path().join("plain.db");
    {
        let db = Db::open(&plain).unwrap();
        db.store(StoreConfig::default()).unwrap().put(&["docs"], "a", json!({"text": "hello"})).unwrap();
    }
    let e = fails(&plain, &["store", "search", "--query", "hello"], 2);
    assert!(e.contains("needs the embedder") && e.contains("--filter"), "{e}");
    assert_eq!(ok_json(&plain, &["store", "search", "--filter", r#"{"text": "hello"}"#])[0]["key"], "a");
    fails(&plain, &["store", "reindex"], 2);
    let r = ok_json(&plain, &["store", "reindex", "--dims", "16"]);
    assert_eq!(r["fields"], json!(["$"]));
    assert_eq!(ok_json(&plain, &["store", "search", "--query", "hello"])[0]["key"], "a");
}

#[test]
fn help_lists_the_commands_and_exit_codes() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in
        ["threads", "history", "show", "diff", "fork", "copy", "prune", "delete", "store", "stats", "check"]
    {
        assert!(text.contains(word), "{word} missing from --help");
    }
    assert!(text.contains("Exit codes:") && text.contains("7  `check` found problems"), "{text}");
    let out = Command::new(BIN).args(["x.db", "store", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in ["get", "put", "delete", "search", "ns", "sweep", "reindex"] {
        assert!(text.contains(word), "{word} missing from store --help");
    }
}

#[test]
fn python_written_store() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("expected.json")).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("python_store.sqlite");
    std::fs::copy(fixtures.join("python_store.sqlite"), &p).unwrap();

    let s = ok_json(&p, &["stats"]);
    assert_eq!(s["store"]["items"], 12);
    assert_eq!(s["store"]["expired"], 1);
    assert_eq!(s["store"]["namespaces"], 6);
    assert_eq!(s["vectors"]["vectors"], expected["vectors"].as_array().unwrap().len());
    assert_eq!(s["vectors"]["dims"], json!([8]));
    assert_eq!(s["vectors"]["embedder"], Value::Null);
    assert_eq!(s["checkpoints"]["checkpoints"], 0);
    assert!(ok(&p, &["stats"]).contains("embedder not recorded"));

    assert_eq!(ok_json(&p, &["store", "ns"]), expected["list_namespaces"]);
    assert_eq!(
        ok_json(&p, &["store", "ns", "--prefix", "users", "--max-depth", "2"]),
        expected["list_namespaces_prefix_users_depth_2"]
    );
    assert_eq!(
        ok_json(&p, &["store", "ns", "--suffix", "memories"]),
        expected["list_namespaces_suffix_memories"]
    );

    for case in expected["search_filter"].as_array().unwrap() {
        let prefix = case["prefix"].to_string();
        let filter = case["filter"].to_string();
        let hits = ok_json(&p, &["store", "search", &prefix, "--filter", &filter]);
        let got: Vec<(Value, Value)> =
            hits.as_array().unwrap().iter().map(|h| (h["namespace"].clone(), h["key"].clone())).collect();
        let want: Vec<(Value, Value)> = case["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["namespace"].clone(), h["key"].clone()))
            .collect();
        assert_eq!(got, want, "filter {filter} under {prefix}");
        for h in hits.as_array().unwrap() {
            assert!(h["score"].is_null());
        }
    }
    let e = fails(&p, &["store", "search", "users", "--query", "cheese"], 2);
    assert!(e.contains("does not record"), "{e}");
    let c = ok_json(&p, &["check"]);
    assert_eq!(c["ok"], true, "{c}");
}

#[test]
fn retain_and_vacuum() {
    let f = fixture();
    let p = f.path.as_path();
    let before = ok_json(p, &["threads"]);
    let r = ok_json(p, &["retain", "--keep-last", "1"]);
    assert!(r["removed_checkpoints"].as_u64().unwrap() > 0, "{r}");
    let after = ok_json(p, &["threads"]);
    assert_eq!(before.as_array().unwrap().len(), after.as_array().unwrap().len(), "no thread disappears");
    let c = ok_json(p, &["check"]);
    assert_eq!(c["ok"], true, "{c}");
    let v = ok_json(p, &["vacuum"]);
    assert!(v["file_bytes_after"].as_u64().unwrap() <= v["file_bytes_before"].as_u64().unwrap(), "{v}");
    assert!(ok(p, &["vacuum"]).starts_with("vacuum freed"));
    let e = fails(p, &["retain"], 2);
    assert!(e.contains("--keep-last"), "{e}");
}

/// The main job, end to end: the quickstart example writes a real file and
/// the CLI inspects it (text and `--json`).
#[test]
fn quickstart_file_through_the_cli() {
    let bin = Path::new(env!("CARGO_BIN_EXE_agentstate"));
    let example = bin.parent().unwrap().join("examples").join("quickstart");
    assert!(example.exists(), "{} not built (cargo test builds examples)", example.display());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("quickstart.db");
    let out = std::process::Command::new(&example).arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("agentstate --") || printed.contains("--bin agentstate"), "{printed}");

    let threads = ok_json(&p, &["threads"]);
    assert_eq!(threads.as_array().unwrap().len(), 1);
    assert_eq!(threads[0]["thread_id"], "support-42");
    let history = ok(&p, &["history", "support-42"]);
    assert!(history.contains("├──"), "the rollback branch shows in the tree: {history}");
    let shown = ok_json(&p, &["show", "support-42"]);
    assert!(shown.to_string().contains("update my address"), "{shown}");
    let stats = ok_json(&p, &["stats"]);
    assert_eq!(stats["vectors"]["embedder"], "agentstate-hash-v1/256");
    assert_eq!(ok_json(&p, &["check"])["ok"], true);
    let ns = ok_json(&p, &["store", "ns"]);
    assert_eq!(ns, json!([["users", "alice", "memories"]]));
    let hits = ok_json(
        &p,
        &[
            "store",
            "search",
            "users.alice",
            "--query",
            "late delivery refund",
            "--filter",
            r#"{"confidence": {"$gte": 0.7}}"#,
        ],
    );
    assert_eq!(hits[0]["key"], "m4", "{hits}");
}

/// The files of `dir`: names, sizes and a hash of their bytes.
fn dir_snapshot(dir: &Path) -> Vec<(String, usize, u64)> {
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

/// Puts `n` checkpoints on thread `t` whose message list grows past the
/// incremental-blob threshold, so later versions are stored as deltas.
fn long_thread(path: &Path, n: usize) {
    common::chain(&Db::open(path).unwrap().checkpointer(), "t", "", n);
}

#[test]
fn stats_and_check_count_delta_bases_as_needed_not_unreferenced() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("deltas.db");
    long_thread(&p, 12);
    ok(&p, &["retain", "--keep-last", "1"]);
    let s = ok_json(&p, &["stats"]);
    assert_eq!(s["checkpoints"]["unreferenced_blobs"], 0, "{s}");
    assert!(s["checkpoints"]["delta_bases"].as_u64().unwrap() > 0, "{s}");
    let c = ok_json(&p, &["check"]);
    let blobs = c["problems"].as_array().unwrap().iter().filter(|p| p["check"] == "blobs").count();
    assert_eq!(blobs, 0, "the bases of the kept delta are needed: {c}");
    let text = ok(&p, &["check"]);
    assert!(!text.contains("nothing needs"), "{text}");
}

#[test]
fn orphan_vectors_are_a_leftover_that_check_repair_deletes() {
    let f = fixture();
    let p = f.path.as_path();
    {
        // What Python's SqliteStore leaves when it deletes an item.
        let conn = rusqlite::Connection::open(p).unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF; DELETE FROM store WHERE prefix = 'users.bob' AND key = 'm1';",
        )
        .unwrap();
    }
    let c = ok_json(p, &["check"]);
    assert_eq!(c["ok"], true, "{c}");
    assert_eq!(c["warnings"], 1, "{c}");
    assert!(c["problems"][0]["message"].as_str().unwrap().contains("users.bob/m1"), "{c}");
    let r = ok_json(p, &["check", "--repair"]);
    assert_eq!(r["repaired"]["orphan_vectors_deleted"], 1, "{r}");
    assert_eq!(r["warnings"], 0, "{r}");
    assert!(ok(p, &["check", "--repair"]).starts_with("repair: deleted 0 orphan vectors\n"));
    assert_eq!(ok_json(p, &["stats"])["vectors"]["vectors"], 3);
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let f = fixture();
    for args in [
        vec!["history", "t1"],
        vec!["show", "t1", "--json"],
        vec!["store", "search"],
        vec!["threads"],
        vec!["check"],
    ] {
        let mut child = Command::new(BIN)
            .arg(&f.path)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before the first line
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn retain_refuses_numbers_it_cannot_honour() {
    let f = fixture();
    let p = f.path.as_path();
    let e = fails(p, &["retain", "--max-age-minutes", "1e308"], 2);
    assert!(e.contains("too large"), "{e}");
    let e = fails(p, &["retain", "--keep-last", "0"], 2);
    assert!(e.contains("at least 1"), "{e}");
    assert_eq!(thread(&ok_json(p, &["threads"]), "t1").unwrap()["checkpoints"], 5, "nothing removed");
}

#[test]
fn input_errors_say_what_to_fix_once() {
    let f = fixture();
    let p = f.path.as_path();
    let e = fails(p, &["store", "search", "--filter", r#"{"a b": 1}"#], 2);
    assert!(!e.to_lowercase().contains("invalid filter: invalid filter"), "{e}");
    let e = fails(p, &["fork", "t1", "--set", "counter=notjson"], 2);
    assert!(e.contains(r#"--set 'counter="notjson"'"#), "{e}");
}

#[test]
fn read_only_commands_leave_the_file_untouched() {
    let f = fixture();
    let dir = f.path.parent().unwrap();
    let before = dir_snapshot(dir);
    assert_eq!(before.len(), 1, "{:?}", before.iter().map(|e| &e.0).collect::<Vec<_>>());
    let p = f.path.as_path();
    let latest = &f.ids[3];
    for args in [
        vec!["threads"],
        vec!["history", "t1"],
        vec!["show", "t1"],
        vec!["diff", "t1", &f.ids[0], latest],
        vec!["stats"],
        vec!["check"],
        vec!["store", "get", "users.alice", "m1"],
        vec!["store", "search", "users"],
        vec!["store", "ns"],
    ] {
        ok(p, &args);
        assert_eq!(dir_snapshot(dir), before, "{args:?} changed the directory");
    }

    // A Python-written Store file: the checkpoint side reads without a
    // migration or a switch to WAL.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store");
    let pdir = tempfile::tempdir().unwrap();
    let py = pdir.path().join("python_store.sqlite");
    std::fs::copy(fixtures.join("python_store.sqlite"), &py).unwrap();
    let before = dir_snapshot(pdir.path());
    for args in [vec!["threads"], vec!["stats"], vec!["check"]] {
        ok(&py, &args);
        assert_eq!(dir_snapshot(pdir.path()), before, "{args:?} changed the Python file");
    }

    // Refused files are left as they were, with no -wal/-shm beside them.
    let saver = pdir.path().join("saver.sqlite");
    rusqlite::Connection::open(&saver)
        .unwrap()
        .execute_batch("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB); CREATE TABLE writes (x)")
        .unwrap();
    let before = dir_snapshot(pdir.path());
    fails(&saver, &["stats"], 5);
    fails(&saver, &["delete", "x"], 5);
    assert_eq!(dir_snapshot(pdir.path()), before);
}
