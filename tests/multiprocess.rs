//! Several processes on one file. The test binary re-runs itself as the child
//! processes (selected by an environment variable).

use std::process::{Command, Stdio};

use agentstate::checkpoint::{uuid6, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, Db, ListQuery, Metadata};
use serde_json::json;

const STEPS: usize = 150;

/// The child's body: `STEPS` checkpoints with pending writes on its own
/// thread. A no-op when not run as a child.
#[test]
fn child_writer() {
    let (Ok(path), Ok(thread)) = (std::env::var("AGENTSTATE_MP_PATH"), std::env::var("AGENTSTATE_MP_THREAD"))
    else {
        return;
    };
    let saver = Db::open(&path).unwrap().checkpointer();
    let mut config = CheckpointConfig::thread(&thread);
    let mut version = None;
    for step in 0..STEPS {
        let mut cp = Checkpoint::with_id(uuid6(Some(step as i64)).to_string());
        let v = saver.get_next_version(version.as_ref());
        cp.channel_values.insert("messages".into(), (json!([format!("{thread} step {step}")])).into());
        cp.channel_versions.insert("messages".into(), v.clone());
        let nv: ChannelVersions = [("messages".to_string(), v.clone())].into_iter().collect();
        version = Some(v);
        let meta = Metadata::new().with("source", "loop").with("step", step as i64);
        config = saver.put(&config, &cp, &meta, &nv).unwrap();
        saver.put_writes(&config, &[("out", json!(step))], "task", "").unwrap();
    }
}

#[test]
fn two_processes_write_different_threads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let exe = std::env::current_exe().unwrap();
    // Both children create the (new) file at the same moment.
    let children: Vec<_> = ["alpha", "beta"]
        .iter()
        .map(|t| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
                .env("AGENTSTATE_MP_PATH", &path)
                .env("AGENTSTATE_MP_THREAD", t)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let saver = Db::open(&path).unwrap().checkpointer();
    for t in ["alpha", "beta"] {
        let all = saver.list(&ListQuery::thread(t)).unwrap();
        assert_eq!(all.len(), STEPS, "thread {t}");
        for (i, tuple) in all.iter().rev().enumerate() {
            assert_eq!(tuple.metadata.step(), Some(i as i64));
            assert_eq!(tuple.checkpoint.channel_values["messages"], json!([format!("{t} step {i}")]));
            assert_eq!(tuple.pending_writes.len(), 1);
            assert_eq!(tuple.pending_writes[0].value, json!(i));
        }
    }
}
