//! What the import tests (`tests/import*.rs`) share: the LangGraph fixture
//! file, a comparison of a source's whole history with an imported file's,
//! an embedder for the fixture's Store, and a check that a failed import
//! leaves nothing behind.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentstate::checkpoint::TypedBytes;
use agentstate::import::import_sqlite_saver;
use agentstate::store::Embedder;
use agentstate::{CheckpointConfig, Db, Error, JsonPlusSerializer, ListQuery, Serializer};
use rusqlite::Connection;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_agentstate");

pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import/sqlite_saver.sqlite")
}

/// A copy of the fixture in a fresh directory.
pub fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("langgraph.sqlite");
    std::fs::copy(fixture(), &src).unwrap();
    (dir, src)
}

/// The names in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn sqlite_value_text(v: rusqlite::types::ValueRef<'_>) -> Option<String> {
    match v {
        rusqlite::types::ValueRef::Text(t) => Some(String::from_utf8(t.to_vec()).unwrap()),
        rusqlite::types::ValueRef::Null => None,
        other => panic!("not text: {other:?}"),
    }
}

/// A checkpoint row of a SqliteSaver file.
pub struct SrcCheckpoint {
    thread: String,
    ns: String,
    id: String,
    parent: Option<String>,
    checkpoint: Vec<u8>,
    metadata: Value,
}

pub fn src_checkpoints(src: &Path) -> Vec<SrcCheckpoint> {
    let conn = Connection::open(src).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata \
             FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            assert_eq!(r.get::<_, String>(4)?, "msgpack");
            Ok(SrcCheckpoint {
                thread: r.get(0)?,
                ns: r.get(1)?,
                id: r.get(2)?,
                parent: r.get(3)?,
                checkpoint: r.get(5)?,
                metadata: serde_json::from_slice(&r.get::<_, Vec<u8>>(6)?).unwrap(),
            })
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows
}

/// (thread, ns, checkpoint, task_id, idx, channel, type, bytes, task_path),
/// sorted as get_tuple returns them (LangGraph's writes_sort_key), from the SqliteSaver `writes` table or agentstate's
/// `checkpoint_writes`.
type WriteRow = (String, String, String, String, i64, String, Option<String>, Vec<u8>, String);

pub fn write_rows(path: &Path, table: &str, blob: &str) -> Vec<WriteRow> {
    let conn = Connection::open(path).unwrap();
    if table == "checkpoint_writes" {
        return packed_write_rows(&conn);
    }
    let mut stmt = conn
        .prepare(&format!(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, {blob}, task_path \
             FROM {table} ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_path, task_id, idx"
        ))
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                sqlite_value_text(r.get_ref(6)?),
                r.get(7)?,
                r.get(8)?,
            ))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows
}

/// agentstate's `checkpoint_writes`: one row per task, its writes packed as
/// a msgpack array of `[idx, channel, type or nil, bytes]` (docs/format.md),
/// read here with rmpv.
pub fn packed_write_rows(conn: &Connection) -> Vec<WriteRow> {
    let mut stmt = conn
        .prepare(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes FROM checkpoint_writes \
             ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_path, task_id",
        )
        .unwrap();
    let tasks = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, Vec<u8>>(5)?,
            ))
        })
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    let mut rows = vec![];
    for (thread, ns, id, task, path, packed) in tasks {
        let rmpv::Value::Array(entries) = rmpv::decode::read_value(&mut packed.as_slice()).unwrap() else {
            panic!("packed writes are an array")
        };
        for entry in entries {
            let rmpv::Value::Array(e) = entry else { panic!("an entry is an array") };
            rows.push((
                thread.clone(),
                ns.clone(),
                id.clone(),
                task.clone(),
                e[0].as_i64().unwrap(),
                e[1].as_str().unwrap().to_string(),
                e[2].as_str().map(str::to_string),
                e[3].as_slice().unwrap().to_vec(),
                path.clone(),
            ));
        }
    }
    rows
}

/// The raw msgpack bytes of each `channel_values` entry of a checkpoint
/// (re-encoded by rmpv, after checking that rmpv re-encodes the whole
/// checkpoint to the very bytes Python wrote).
pub fn raw_channel_values(checkpoint: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let v = rmpv::decode::read_value(&mut &checkpoint[..]).unwrap();
    let mut again = Vec::new();
    rmpv::encode::write_value(&mut again, &v).unwrap();
    assert_eq!(again, checkpoint, "rmpv re-encodes Python's msgpack exactly");
    let rmpv::Value::Map(entries) = v else { panic!("a checkpoint is a map") };
    let mut out = BTreeMap::new();
    for (k, val) in entries {
        if k.as_str() == Some("channel_values") {
            let rmpv::Value::Map(values) = val else { panic!("channel_values is a map") };
            for (ch, value) in values {
                let mut bytes = Vec::new();
                rmpv::encode::write_value(&mut bytes, &value).unwrap();
                out.insert(ch.as_str().unwrap().to_string(), bytes);
            }
        }
    }
    out
}

pub fn is_inline(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(_) | Value::String(_)) || v.as_i64().is_some() || v.is_f64()
}

/// Every checkpoint of `src` reads back from `dst` with the same parent,
/// metadata, checkpoint (decoded), channel value bytes and pending writes;
/// every write row is stored with its idx, type, bytes and task path.
pub fn assert_same_history(src: &Path, dst: &Path) {
    let db = Db::builder().read_only(true).open(dst).unwrap();
    let saver = db.checkpointer();
    let checkpoints = src_checkpoints(src);
    assert!(!checkpoints.is_empty());
    let src_writes = write_rows(src, "writes", "value");
    for c in &checkpoints {
        let config = CheckpointConfig::thread(c.thread.as_str()).ns(c.ns.as_str()).at(c.id.as_str());
        let t = saver.get_tuple(&config).unwrap().unwrap_or_else(|| panic!("{} missing", c.id));
        assert_eq!(t.parent_config.and_then(|p| p.checkpoint_id), c.parent, "parent of {}", c.id);
        assert_eq!(Value::Object(t.metadata.0.clone()), c.metadata, "metadata of {}", c.id);
        let mut expected = JsonPlusSerializer.loads_typed("msgpack", &c.checkpoint).unwrap();
        // agentstate leaves out an updated_channels that is None (LangGraph
        // reads both with .get()).
        if expected["updated_channels"].is_null() {
            expected.as_object_mut().unwrap().remove("updated_channels");
        }
        assert_eq!(serde_json::to_value(&*t.checkpoint).unwrap(), expected, "checkpoint {}", c.id);

        let e = saver.get_tuple_encoded(&config).unwrap().unwrap();
        let raw = raw_channel_values(&c.checkpoint);
        assert_eq!(
            raw.keys().collect::<Vec<_>>(),
            e.checkpoint
                .channel_values
                .keys()
                .chain(e.values.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>(),
            "channels of {}",
            c.id
        );
        for (ch, bytes) in &raw {
            let decoded = JsonPlusSerializer.loads_typed("msgpack", bytes).unwrap();
            if is_inline(&decoded) {
                assert_eq!(e.checkpoint.channel_values[ch].to_value(), decoded, "inline {ch} of {}", c.id);
            } else {
                assert_eq!(
                    e.values[ch],
                    TypedBytes::new("msgpack", bytes.clone()),
                    "bytes of {ch} of {}",
                    c.id
                );
            }
        }
        let want: Vec<(String, String, Option<String>, Vec<u8>)> = src_writes
            .iter()
            .filter(|w| w.0 == c.thread && w.1 == c.ns && w.2 == c.id)
            .map(|w| (w.3.clone(), w.5.clone(), w.6.clone(), w.7.clone()))
            .collect();
        let got: Vec<(String, String, Option<String>, Vec<u8>)> = e
            .pending_writes
            .iter()
            .map(|w| (w.task_id.clone(), w.channel.clone(), Some(w.value.tag.clone()), w.value.bytes.clone()))
            .collect();
        assert_eq!(got, want, "pending writes of {}", c.id);
    }
    // Per thread and namespace, list gives the same ids newest first.
    let mut threads: Vec<&str> = checkpoints.iter().map(|c| c.thread.as_str()).collect();
    threads.dedup();
    for thread in threads {
        let mut want: Vec<&str> =
            checkpoints.iter().filter(|c| c.thread == thread).map(|c| c.id.as_str()).collect();
        want.sort_unstable_by(|a, b| b.cmp(a));
        let got: Vec<String> = saver
            .list(&ListQuery::thread(thread))
            .unwrap()
            .into_iter()
            .map(|t| t.config.checkpoint_id.unwrap())
            .collect();
        assert_eq!(got, want, "history of {thread}");
    }
    // Every write row, idx and task path included.
    assert_eq!(write_rows(dst, "checkpoint_writes", "blob"), src_writes);
}

/// The fixture's embedder (tools/sqlite_saver_fixture/make.py).
pub struct FixtureEmbed;

impl Embedder for FixtureEmbed {
    fn name(&self) -> &str {
        "fixture"
    }
    fn dims(&self) -> usize {
        4
    }
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, agentstate::BoxError> {
        Ok(texts.iter().map(|t| embed(t)).collect())
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, agentstate::BoxError> {
        Ok(embed(text))
    }
}

pub fn embed(t: &str) -> Vec<f32> {
    let n = |c: char| t.chars().filter(|x| *x == c).count() as f32;
    vec![1.0 + n('a'), n('e'), n('i'), (t.chars().count() % 7) as f32]
}

/// Runs an import that must fail: no destination, no temporary file, the
/// source unchanged. Returns the error.
pub fn fails(src: &Path, dst: &Path) -> Error {
    let dir = dst.parent().unwrap();
    let before_src = std::fs::read(src).ok();
    let before_dir = listing(dir);
    let before_dst = std::fs::read(dst).ok();
    let err = import_sqlite_saver(src, dst).unwrap_err();
    assert_eq!(listing(dir), before_dir, "{err}: files left behind");
    assert_eq!(std::fs::read(src).ok(), before_src, "{err}: the source changed");
    assert_eq!(std::fs::read(dst).ok(), before_dst, "{err}: the destination changed");
    err
}
