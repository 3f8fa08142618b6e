//! An insurance-advice chat checkpointed step by step, then rolled back to its
//! second checkpoint to start a new branch. Asserts the rows of the three
//! checkpoint tables: which blobs were written once and shared, which writes
//! belong to which checkpoint, and both branches' parent chains.

use std::collections::BTreeMap;

use agentstate::checkpoint::{uuid6, ChannelVersions};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, ListQuery, Metadata};
use rusqlite::Connection;
use serde_json::{json, Map, Value};

const THREAD: &str = "thread_abc123";

struct Agent {
    saver: Checkpointer,
    values: Map<String, Value>,
    versions: ChannelVersions,
    config: CheckpointConfig,
    step: i64,
}

impl Agent {
    /// A node ran as a task of the next step: its writes go onto the current
    /// checkpoint first (so a crash would not rerun it), then the step's
    /// checkpoint is put with the changed channels' new versions.
    fn run_node(&mut self, node: &str, updates: Vec<(&str, Value)>) -> CheckpointConfig {
        let task_id = format!("task-{node}");
        let writes: Vec<(&str, Value)> = updates.iter().map(|(c, v)| (*c, v.clone())).collect();
        self.saver.put_writes(&self.config, &writes, &task_id, node).unwrap();
        self.step += 1;
        let mut new_versions = ChannelVersions::new();
        for (ch, v) in updates {
            let merged = match (self.values.get(ch), v) {
                (Some(Value::Array(old)), Value::Array(add)) if ch == "messages" => {
                    Value::Array(old.iter().cloned().chain(add).collect())
                }
                (_, v) => v,
            };
            self.values.insert(ch.to_string(), merged);
            let next = self.saver.get_next_version(self.versions.get(ch));
            self.versions.insert(ch.to_string(), next.clone());
            new_versions.insert(ch.to_string(), next);
        }
        self.checkpoint(node, "loop", new_versions)
    }

    fn checkpoint(&mut self, node: &str, source: &str, new_versions: ChannelVersions) -> CheckpointConfig {
        let mut cp = Checkpoint::with_id(uuid6(Some(self.step)).to_string());
        cp.set_values(self.values.clone());
        cp.channel_versions = self.versions.clone();
        cp.updated_channels = Some(new_versions.keys().cloned().collect());
        let mut seen = ChannelVersions::new();
        for ch in new_versions.keys() {
            seen.insert(ch.clone(), self.versions[ch].clone());
        }
        cp.versions_seen.insert(node.to_string(), seen);
        let meta = Metadata::new().with("source", source).with("step", self.step).with("parents", json!({}));
        self.config = self.saver.put(&self.config, &cp, &meta, &new_versions).unwrap();
        self.config.clone()
    }
}

fn msg(role: &str, text: &str) -> Value {
    json!({"type": role, "content": text})
}

#[test]
fn insurance_chat_with_rollback_branch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let mut agent = Agent {
        saver: saver.clone(),
        values: Map::new(),
        versions: ChannelVersions::new(),
        config: CheckpointConfig::thread(THREAD),
        step: -2,
    };

    // Input checkpoint (step -1): the user's first message and profile.
    agent.step = -1;
    let mut nv = ChannelVersions::new();
    for (ch, v) in [
        ("messages", json!([msg("human", "Hi, I'm Alice. I need advice on car insurance.")])),
        ("user", json!({"name": "Alice", "age": 34, "vehicle": "2019 Honda Civic"})),
        ("turn", json!(1)),
    ] {
        agent.values.insert(ch.into(), v);
        let ver = saver.get_next_version(None);
        agent.versions.insert(ch.into(), ver.clone());
        nv.insert(ch.into(), ver);
    }
    let c0 = agent.checkpoint("__input__", "input", nv);

    let c1 = agent
        .run_node("handle_greeting", vec![("messages", json!([msg("ai", "Hello Alice! Happy to help.")]))]);
    let c2 = agent.run_node(
        "retrieve_context",
        vec![("context", json!([{"doc": "policy-guide.pdf", "chunk": 3}, {"doc": "faq.md", "chunk": 1}]))],
    );
    let c3 = agent.run_node(
        "search_products",
        vec![(
            "products",
            json!([{"id": "AUTO-BASIC", "premium": 42.5}, {"id": "AUTO-PLUS", "premium": 61.0}]),
        )],
    );
    let c4 = agent.run_node(
        "generate_response",
        vec![("messages", json!([msg("ai", "For a 2019 Civic I'd suggest AUTO-PLUS at $61/month.")]))],
    );
    let old_branch = [&c0, &c1, &c2, &c3, &c4].map(|c| c.checkpoint_id.clone().unwrap());
    let c4_values = saver.get(&c4).unwrap().unwrap().channel_values;

    // Roll back to the second checkpoint (after handle_greeting) and branch:
    // the user changes their question there.
    let mut edit = Map::new();
    let mut msgs =
        saver.get(&c1).unwrap().unwrap().channel_values["messages"].to_value().as_array().unwrap().clone();
    msgs.push(msg("human", "Actually, what about home insurance?"));
    edit.insert("messages".into(), Value::Array(msgs));
    let b1 = saver.fork_with(&c1, edit).unwrap();
    let b1_tuple = saver.get_tuple(&b1).unwrap().unwrap();
    agent.config = b1.clone();
    agent.values = b1_tuple.checkpoint.values_json();
    agent.versions = b1_tuple.checkpoint.channel_versions.clone();
    agent.step = b1_tuple.metadata.step().unwrap();
    let b2 = agent
        .run_node("retrieve_context", vec![("context", json!([{"doc": "home-policy.pdf", "chunk": 7}]))]);
    let new_branch = [b1.checkpoint_id.clone().unwrap(), b2.checkpoint_id.clone().unwrap()];

    // --- The old branch is still readable, unchanged.
    assert_eq!(saver.get(&c4).unwrap().unwrap().channel_values, c4_values);
    assert_eq!(c4_values["messages"].as_list().unwrap().len(), 3);
    // The latest checkpoint of the thread is the new branch's head.
    assert_eq!(saver.get_tuple(&CheckpointConfig::thread(THREAD)).unwrap().unwrap().config, b2);
    assert_eq!(saver.list(&ListQuery::thread(THREAD)).unwrap().len(), 7);

    // --- Raw rows.
    let conn = Connection::open(&path).unwrap();
    let parent = |id: &str| -> Option<String> {
        conn.query_row(
            "SELECT parent_checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_id = ?2",
            [THREAD, id],
            |r| r.get(0),
        )
        .unwrap()
    };
    // Parent chains.
    assert_eq!(parent(&old_branch[0]), None);
    for i in 1..5 {
        assert_eq!(
            parent(&old_branch[i]).as_deref(),
            Some(old_branch[i - 1].as_str()),
            "old branch link {i}"
        );
    }
    assert_eq!(
        parent(&new_branch[0]).as_deref(),
        Some(old_branch[1].as_str()),
        "branch starts at checkpoint 2"
    );
    assert_eq!(parent(&new_branch[1]).as_deref(), Some(new_branch[0].as_str()));

    // Blobs: one row per (channel, version), each written once; 'turn' is a
    // primitive and stays inline, so it has none.
    let blobs: Vec<(String, String)> = conn
        .prepare(
            "SELECT channel, version FROM checkpoint_blobs WHERE thread_id = ?1 ORDER BY channel, version",
        )
        .unwrap()
        .query_map([THREAD], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let per_channel = blobs.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, (c, _)| {
        *m.entry(c.as_str()).or_default() += 1;
        m
    });
    // messages: input, greeting, response, branch edit; context: 2 branches;
    // products: 1; user: 1 (shared by all seven checkpoints).
    assert_eq!(per_channel, BTreeMap::from([("context", 2), ("messages", 4), ("products", 1), ("user", 1)]));
    assert!(!blobs.iter().any(|(c, _)| c == "turn"));
    let mut types: std::collections::BTreeSet<String> = conn
        .prepare("SELECT DISTINCT type FROM checkpoint_blobs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // A task's writes are one row: a msgpack array of [idx, channel, type, bytes].
    let packed: Vec<Vec<u8>> = conn
        .prepare("SELECT writes FROM checkpoint_writes")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for p in packed {
        let rmpv::Value::Array(entries) = rmpv::decode::read_value(&mut p.as_slice()).unwrap() else {
            panic!()
        };
        for e in entries {
            types.insert(e[2].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        vec!["msgpack"],
        "values are stored as LangGraph's msgpack"
    );

    // Sharing: every checkpoint names the one 'user' blob; c1..c3 share the
    // greeting's messages blob; the branch shares the old 'user' blob.
    let version_of = |id: &str, ch: &str| -> String {
        let t = saver.get_tuple(&CheckpointConfig::thread(THREAD).at(id)).unwrap().unwrap();
        t.checkpoint.channel_versions[ch].to_string()
    };
    let all: Vec<&String> = old_branch.iter().chain(new_branch.iter()).collect();
    let user_v = version_of(&old_branch[0], "user");
    assert!(all.iter().all(|id| version_of(id, "user") == user_v));
    let greet_v = version_of(&old_branch[1], "messages");
    assert_eq!(version_of(&old_branch[2], "messages"), greet_v);
    assert_eq!(version_of(&old_branch[3], "messages"), greet_v);
    assert_ne!(version_of(&old_branch[4], "messages"), greet_v);
    assert_ne!(version_of(&new_branch[0], "messages"), greet_v);
    // The stored row keeps primitives inline and nothing else: its fifth
    // element maps channels (an index into its third, the channel names) to
    // inline values (docs/format.md, "Checkpoint rows").
    let row: Vec<u8> = conn
        .query_row("SELECT checkpoint FROM checkpoints WHERE checkpoint_id = ?1", [&old_branch[4]], |r| {
            r.get(0)
        })
        .unwrap();
    let row = rmpv::decode::read_value(&mut row.as_slice()).unwrap();
    let names = row[2].as_array().unwrap();
    let inline: Vec<(String, i64)> = row[4]
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (names[k.as_u64().unwrap() as usize].as_str().unwrap().to_string(), v.as_i64().unwrap())
        })
        .collect();
    assert_eq!(inline, vec![("turn".to_string(), 1)]);

    // Writes: each node's writes belong to the checkpoint it ran from.
    let rows: Vec<(String, String, Vec<u8>, String)> = conn
        .prepare(
            "SELECT checkpoint_id, task_id, writes, task_path FROM checkpoint_writes WHERE thread_id = ?1 \
             ORDER BY checkpoint_id, task_id",
        )
        .unwrap()
        .query_map([THREAD], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut writes: Vec<(String, String, String, String)> = vec![];
    for (cp, task, packed, path) in rows {
        let rmpv::Value::Array(entries) = rmpv::decode::read_value(&mut packed.as_slice()).unwrap() else {
            panic!()
        };
        for e in entries {
            writes.push((cp.clone(), task.clone(), e[1].as_str().unwrap().to_string(), path.clone()));
        }
    }
    let w = |cp: &str, node: &str, ch: &str| {
        (cp.to_string(), format!("task-{node}"), ch.to_string(), node.to_string())
    };
    assert_eq!(
        writes,
        vec![
            w(&old_branch[0], "handle_greeting", "messages"),
            w(&old_branch[1], "retrieve_context", "context"),
            w(&old_branch[2], "search_products", "products"),
            w(&old_branch[3], "generate_response", "messages"),
            w(&new_branch[0], "retrieve_context", "context"),
        ]
    );
    // And through the API: the pending writes of checkpoint 2 are the
    // retrieval it fed; the head of each branch has none.
    let t2 = saver.get_tuple(&c2).unwrap().unwrap();
    assert_eq!(t2.pending_writes.len(), 1);
    assert_eq!(t2.pending_writes[0].channel, "products");
    assert!(saver.get_tuple(&c4).unwrap().unwrap().pending_writes.is_empty());
    assert!(saver.get_tuple(&b2).unwrap().unwrap().pending_writes.is_empty());

    // The branch's history, walked through parent configs from its head.
    let mut chain = vec![];
    let mut cur = Some(b2.clone());
    while let Some(c) = cur {
        let t = saver.get_tuple(&c).unwrap().unwrap();
        chain.push(t.checkpoint.id.clone());
        cur = t.parent_config;
    }
    assert_eq!(
        chain,
        vec![new_branch[1].clone(), new_branch[0].clone(), old_branch[1].clone(), old_branch[0].clone()]
    );
    let forked = saver.get_tuple(&b1).unwrap().unwrap();
    assert_eq!(forked.metadata.source(), Some("update"));
    assert_eq!(forked.checkpoint.channel_values["messages"].as_list().unwrap().len(), 3);
}
