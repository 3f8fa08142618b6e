//! Incremental blobs (issue #7): a list that grows by appending is stored as
//! its new tail plus a pointer to the previous version, with a full snapshot
//! every `MAX_CHAIN` versions. These tests pin that reads are exact, whatever
//! sequence of appends, rewrites, truncations, forks, reopenings and prunes
//! came before.

use agentstate::checkpoint::{next_version, uuid6, ChannelVersion, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, Error, Metadata, PruneStrategy};
use proptest::prelude::*;
use rusqlite::Connection;
use serde_json::{json, Value};

#[derive(Clone, Debug)]
enum Step {
    /// Append n messages to the list of the checkpoint `from` steps back.
    Append { back: usize, n: usize },
    /// Replace element i (mod len) of the latest list.
    Rewrite { i: usize },
    /// Keep only the first k elements of the latest list.
    Truncate { k: usize },
    /// A new `Checkpointer` (its in-process cache starts empty).
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize, 0..4usize).prop_map(|(back, n)| Step::Append { back, n }),
        1 => (0..50usize).prop_map(|i| Step::Rewrite { i }),
        1 => (0..10usize).prop_map(|k| Step::Truncate { k }),
        1 => Just(Step::Reopen),
    ]
}

fn msg(i: usize) -> Value {
    json!({"role": if i % 2 == 0 { "user" } else { "ai" }, "content": format!("message {i} ").repeat(20 + i % 5), "n": i})
}

struct Node {
    config: CheckpointConfig,
    list: Vec<Value>,
    version: ChannelVersion,
}

fn put(s: &Checkpointer, parent: Option<&Node>, list: Vec<Value>, step: i64) -> Node {
    let version = next_version(parent.map(|p| &p.version));
    let mut cp = Checkpoint::with_id(uuid6(Some(step)).to_string());
    cp.channel_values.insert("messages".into(), (Value::Array(list.clone())).into());
    cp.channel_versions.insert("messages".into(), version.clone());
    let nv: ChannelVersions = [("messages".to_string(), version.clone())].into_iter().collect();
    let cfg = parent.map(|p| p.config.clone()).unwrap_or_else(|| CheckpointConfig::thread("t"));
    let config = s.put(&cfg, &cp, &Metadata::new().with("step", step), &nv).unwrap();
    Node { config, list, version }
}

fn check_all(s: &Checkpointer, nodes: &[Node]) -> Result<(), TestCaseError> {
    for n in nodes {
        let got = s.get(&n.config).unwrap().unwrap();
        prop_assert_eq!(&got.channel_values["messages"], &Value::Array(n.list.clone()));
    }
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inc.db");
    let mut s = Db::open(&path).unwrap().checkpointer();
    let mut nodes: Vec<Node> = vec![put(&s, None, vec![msg(0)], 0)];
    let mut counter = 1;
    for (i, st) in steps.into_iter().enumerate() {
        let latest = nodes.len() - 1;
        let step = i as i64 + 1;
        match st {
            Step::Append { back, n } => {
                let from = latest.saturating_sub(back);
                let mut list = nodes[from].list.clone();
                for _ in 0..n {
                    list.push(msg(counter));
                    counter += 1;
                }
                let node = put(&s, Some(&nodes[from]), list, step);
                nodes.push(node);
            }
            Step::Rewrite { i } => {
                let mut list = nodes[latest].list.clone();
                if !list.is_empty() {
                    let at = i % list.len();
                    list[at] = json!({"rewritten": counter});
                    counter += 1;
                }
                let node = put(&s, Some(&nodes[latest]), list, step);
                nodes.push(node);
            }
            Step::Truncate { k } => {
                let mut list = nodes[latest].list.clone();
                list.truncate(k);
                let node = put(&s, Some(&nodes[latest]), list, step);
                nodes.push(node);
            }
            Step::Reopen => {
                s = Db::open(&path).unwrap().checkpointer();
            }
        }
        check_all(&s, &nodes[nodes.len().saturating_sub(3)..])?;
    }
    check_all(&s, &nodes)?;
    // Chains stay bounded.
    let conn = Connection::open(&path).unwrap();
    let max_chain: i64 =
        conn.query_row("SELECT COALESCE(MAX(chain), 0) FROM checkpoint_blobs", [], |r| r.get(0)).unwrap();
    prop_assert!(max_chain <= 64);
    // After a retention run, the kept checkpoints read back exactly.
    s.apply_retention(&agentstate::checkpoint::Retention::keep_last(5)).unwrap();
    let mut by_id: Vec<&Node> = nodes.iter().collect();
    by_id.sort_by(|a, b| b.config.checkpoint_id.cmp(&a.config.checkpoint_id));
    let kept: Vec<&Node> = by_id.into_iter().take(5).collect();
    for n in &kept {
        let got = s.get(&n.config).unwrap().unwrap();
        prop_assert_eq!(&got.channel_values["messages"], &Value::Array(n.list.clone()));
    }
    let fresh = Db::open(&path).unwrap().checkpointer();
    for n in &kept {
        let got = fresh.get(&n.config).unwrap().unwrap();
        prop_assert_eq!(&got.channel_values["messages"], &Value::Array(n.list.clone()));
    }
    // After pruning, the kept checkpoint still reads back exactly.
    s.prune(&["t"], PruneStrategy::KeepLatest).unwrap();
    let newest = nodes.iter().max_by(|a, b| a.config.checkpoint_id.cmp(&b.config.checkpoint_id)).unwrap();
    check_all(&s, std::slice::from_ref(newest))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_checkpoint_reads_back_exactly(steps in prop::collection::vec(step(), 1..80)) {
        run(steps)?;
    }
}

/// An append-only conversation stores each message about once (small lists
/// are kept whole, large ones get a snapshot every 65 versions) and reads
/// back every step exactly.
#[test]
fn appends_store_only_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let s = Db::open(&path).unwrap().checkpointer();
    let mut nodes = vec![put(&s, None, vec![msg(0)], 0)];
    for i in 1..200 {
        let mut list = nodes[i - 1].list.clone();
        list.push(msg(i));
        let node = put(&s, Some(&nodes[i - 1]), list, i as i64);
        nodes.push(node);
    }
    let conn = Connection::open(&path).unwrap();
    let (full, deltas): (i64, i64) = conn
        .query_row(
            "SELECT SUM(base_version IS NULL), SUM(base_version IS NOT NULL) FROM checkpoint_blobs",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(full + deltas, 200);
    assert!(deltas > 100, "most versions are deltas ({deltas})");
    let stored: i64 =
        conn.query_row("SELECT SUM(length(blob)) FROM checkpoint_blobs", [], |r| r.get(0)).unwrap();
    let whole: usize = nodes.iter().map(|n| serde_json::to_vec(&n.list).unwrap().len()).sum();
    assert!((stored as usize) * 10 < whole, "stored {stored} bytes for {whole} bytes of states");
    for n in nodes.iter().step_by(7) {
        assert_eq!(
            s.get(&n.config).unwrap().unwrap().channel_values["messages"],
            Value::Array(n.list.clone())
        );
    }
    // A copy of the thread reads the same.
    s.copy_thread("t", "t2").unwrap();
    let last = nodes.last().unwrap();
    let copied = s
        .get(&CheckpointConfig::thread("t2").at(last.config.checkpoint_id.clone().unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(copied.channel_values["messages"], Value::Array(last.list.clone()));
}

/// A thread of `n` appended versions of `messages` whose versions are made
/// by `version(i)`, stored through `put`; its nodes.
fn appended_thread(s: &Checkpointer, n: usize, version: impl Fn(usize) -> ChannelVersion) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        let mut list = nodes.last().map(|p| p.list.clone()).unwrap_or_default();
        list.push(msg(i));
        let v = version(i);
        let mut cp = Checkpoint::with_id(uuid6(Some(i as i64)).to_string());
        cp.channel_values.insert("messages".into(), Value::Array(list.clone()).into());
        cp.channel_versions.insert("messages".into(), v.clone());
        let nv: ChannelVersions = [("messages".to_string(), v.clone())].into_iter().collect();
        let cfg = nodes.last().map(|p| p.config.clone()).unwrap_or_else(|| CheckpointConfig::thread("t"));
        let config = s.put(&cfg, &cp, &Metadata::new().with("step", i as i64), &nv).unwrap();
        nodes.push(Node { config, list, version: v });
    }
    nodes
}

fn deltas(conn: &Connection) -> i64 {
    conn.query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| r.get(0))
        .unwrap()
}

/// A chain is read newest first in one range of keys; integer versions do
/// not sort by their text ("100" < "99"), so there a link is found by a new
/// lookup. Both read back exactly from a fresh handle.
#[test]
fn chains_read_back_whatever_order_their_versions_sort_in() {
    let dir = tempfile::tempdir().unwrap();
    for (name, version) in [
        (
            "ints.db",
            Box::new(|i: usize| ChannelVersion::Int(i as i64 + 1)) as Box<dyn Fn(usize) -> ChannelVersion>,
        ),
        ("strings.db", Box::new(|i: usize| ChannelVersion::from(format!("{:032}.0.5", i + 1)))),
    ] {
        let path = dir.path().join(name);
        let nodes = appended_thread(&Db::open(&path).unwrap().checkpointer(), 130, version);
        assert!(deltas(&Connection::open(&path).unwrap()) > 80, "{name}: the list is stored as deltas");
        for n in nodes.iter().rev().step_by(3) {
            let fresh = Db::open(&path).unwrap().checkpointer();
            let got = fresh.get(&n.config).unwrap().unwrap();
            assert_eq!(
                got.channel_values["messages"],
                Value::Array(n.list.clone()),
                "{name} {:?}",
                n.version
            );
        }
    }
}

/// Damage inside a chain is a typed error naming the missing link, never a
/// shorter list; a chain made to loop is an error, not a hang.
#[test]
fn a_damaged_chain_is_corrupt_never_a_shorter_list() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let nodes = appended_thread(&Db::open(&path).unwrap().checkpointer(), 80, |i| {
        ChannelVersion::from(format!("{:032}.0.5", i + 1))
    });
    let conn = Connection::open(&path).unwrap();
    assert!(deltas(&conn) > 30);
    let tip = &nodes.last().unwrap().config;
    // A missing middle link.
    let gone: String = conn
        .query_row(
            "SELECT version FROM checkpoint_blobs WHERE base_version IS NOT NULL ORDER BY version LIMIT 1 OFFSET 10",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute("UPDATE checkpoint_blobs SET version = version || 'x' WHERE version = ?1", [&gone]).unwrap();
    let e = Db::open(&path).unwrap().checkpointer().get(tip).unwrap_err();
    assert!(matches!(&e, Error::Corrupt { .. }) && e.to_string().contains("is missing"), "{e}");
    conn.execute("UPDATE checkpoint_blobs SET version = ?1 WHERE version = ?1 || 'x'", [&gone]).unwrap();
    assert_eq!(
        Db::open(&path).unwrap().checkpointer().get(tip).unwrap().unwrap().channel_values["messages"],
        Value::Array(nodes.last().unwrap().list.clone())
    );
    // The value stored whole made to extend the tip: a loop.
    conn.execute(
        "UPDATE checkpoint_blobs SET base_version = (SELECT MAX(version) FROM checkpoint_blobs) \
         WHERE base_version IS NULL",
        [],
    )
    .unwrap();
    let e = Db::open(&path).unwrap().checkpointer().get(tip).unwrap_err();
    assert!(matches!(&e, Error::Corrupt { .. }) && e.to_string().contains("loops"), "{e}");
}
