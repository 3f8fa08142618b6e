//! The `agentstate` command-line inspector, run as a process against files
//! written through the library: every command in text and `--json`. (Its
//! error cases, exit codes and what it leaves untouched: `tests/cli_errors.rs`.)

mod cli_support;
mod common;

use std::path::Path;

use agentstate::Db;
use serde_json::{json, Value};

use cli_support::*;

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
