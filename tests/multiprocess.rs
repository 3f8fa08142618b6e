//! Several processes on one file. The test binary re-runs itself as the child
//! processes: `child_writer` is an ignored test that only the parent runs.

mod common;

use agentstate::checkpoint::{uuid6, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, Db, ListQuery, Metadata};
use common::harness::{child_command, child_env};
use serde_json::json;

const PARENT: &str = "two_processes_write_different_threads_at_once";

const STEPS: usize = 150;

/// The child's body: `STEPS` checkpoints with pending writes on its own
/// thread.
#[test]
#[ignore = "child-process entry point: run by two_processes_write_different_threads_at_once"]
fn child_writer() {
    let path = child_env("AGENTSTATE_MP_PATH", PARENT);
    let thread = child_env("AGENTSTATE_MP_THREAD", PARENT);
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
            child_command(&exe, "child_writer")
                .env("AGENTSTATE_MP_PATH", &path)
                .env("AGENTSTATE_MP_THREAD", t)
                .spawn()
                .unwrap()
        })
        .collect();
    // Meanwhile this process reads both threads again and again through one
    // handle (whose reads may come from memory while the file is
    // unchanged): it sees each thread's steps in order, and after the
    // children exit, their last ones.
    let reader = Db::open(&path).unwrap().checkpointer();
    let step_of =
        |t: &str| reader.get_tuple(&CheckpointConfig::thread(t)).unwrap().and_then(|c| c.metadata.step());
    let mut seen = [None, None];
    let mut children = children;
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        for (i, t) in ["alpha", "beta"].iter().enumerate() {
            let now = step_of(t);
            assert!(now >= seen[i], "{t} went back from {:?} to {now:?}", seen[i]);
            seen[i] = now;
        }
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("test child_writer ... ok"), "the child did not run:\n{stdout}");
    }
    for t in ["alpha", "beta"] {
        assert_eq!(step_of(t), Some(STEPS as i64 - 1), "the reading handle's last view of {t}");
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
