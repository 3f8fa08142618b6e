//! Files written by earlier checkpoint formats open, are upgraded in place,
//! and read back exactly as their version read them (docs/format.md,
//! "Checkpoint rows", "Blob keys").
//!
//! Two fixtures, each with what its version listed from it (`vN.json`),
//! written by the commit before the migration that follows it:
//! - `v5.sqlite` (checkpoint_migrations 5: full-length versions and an `id` in
//!   every checkpoint row, pending writes in a rowid table): 38 checkpoints,
//!   a thread of 31 with message deltas, a fork, a subgraph namespace,
//!   LangGraph `put`s with integer versions and with string versions that
//!   start with `~`, each with its pending writes;
//! - `v6.sqlite` (checkpoint_migrations 6: compact checkpoint rows, blob rows
//!   keyed by full-length versions, a creation time on every blob and write):
//!   `v5.sqlite` opened by that version and continued, 68 checkpoints: thread
//!   `t` continued for 4 steps, a thread `v6` of 25 steps with a delta chain,
//!   and a `put` whose list values sit at every kind of version (padded,
//!   `~`-prefixed, `~A1.x` that looks like a blob key, integers).

use agentstate::{CheckpointConfig, Db, ListQuery};
use serde_json::{json, Value};

/// A copy of fixture `name` in a temporary directory.
fn fixture(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.db"));
    std::fs::copy(format!("tests/fixtures/format/{name}.sqlite"), &path).unwrap();
    (dir, path)
}

fn expected(name: &str) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(format!("tests/fixtures/format/{name}.json")).unwrap())
        .unwrap()
}

fn listed(db: &Db) -> Vec<Value> {
    db.checkpointer()
        .list(&ListQuery::all())
        .unwrap()
        .into_iter()
        .map(|t| {
            json!({
                "config": [t.config.thread_id, t.config.checkpoint_ns, t.config.checkpoint_id],
                "parent": t.parent_config.map(|p| p.checkpoint_id),
                "checkpoint": t.checkpoint,
                "metadata": t.metadata,
                "pending_writes": t.pending_writes,
            })
        })
        .collect()
}

fn sql<T: rusqlite::types::FromSql>(path: &std::path::Path, q: &str) -> T {
    rusqlite::Connection::open(path).unwrap().query_row(q, [], |r| r.get(0)).unwrap()
}

/// What every upgraded file must look like, whatever version wrote it.
fn assert_current_format(path: &std::path::Path) {
    assert_eq!(sql::<i64>(path, "SELECT max(v) FROM checkpoint_migrations"), 8);
    let ddl: String = sql(path, "SELECT sql FROM sqlite_master WHERE name = 'checkpoint_writes'");
    assert!(
        ddl.contains("WITHOUT ROWID") && ddl.contains("writes BLOB") && !ddl.contains("created_at"),
        "{ddl}"
    );
    let ddl: String = sql(path, "SELECT sql FROM sqlite_master WHERE name = 'checkpoint_blobs'");
    assert!(!ddl.contains("created_at"), "{ddl}");
    // No blob row is keyed by a zero-padded version any more.
    let padded = "SELECT count(*) FROM checkpoint_blobs WHERE version GLOB '0000000000*' \
                  OR base_version GLOB '0000000000*' OR root_version GLOB '0000000000*'";
    assert_eq!(sql::<i64>(path, padded), 0);
    let report = Db::open(path).unwrap().check().unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

#[test]
fn a_v5_file_reads_back_as_it_was_written() {
    let (_dir, path) = fixture("v5");
    let expected = expected("v5");
    let db = Db::open(&path).unwrap();
    let now = listed(&db);
    assert_eq!(now.len(), 38);
    assert_eq!(now, expected);
    drop(db);
    assert_current_format(&path);
    assert_eq!(sql::<i64>(&path, "SELECT sum(n) FROM checkpoint_writes"), 60);
    // Old rows stay as they were (no `type`); the upgraded file reads the
    // same after a reopen.
    assert_eq!(sql::<i64>(&path, "SELECT count(*) FROM checkpoints WHERE type IS NULL"), 38);
    assert_eq!(listed(&Db::open(&path).unwrap()), expected);
}

#[test]
fn a_v6_file_reads_back_as_it_was_written() {
    let (_dir, path) = fixture("v6");
    let expected = expected("v6");
    let blobs: i64 = sql(&path, "SELECT count(*) FROM checkpoint_blobs");
    let deltas: i64 = sql(&path, "SELECT count(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL");
    let db = Db::open(&path).unwrap();
    let now = listed(&db);
    assert_eq!(now.len(), 68);
    assert_eq!(now, expected);
    drop(db);
    assert_current_format(&path);
    assert_eq!(sql::<i64>(&path, "SELECT count(*) FROM checkpoint_blobs"), blobs);
    assert_eq!(
        sql::<i64>(&path, "SELECT count(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL"),
        deltas
    );
    assert_eq!(listed(&Db::open(&path).unwrap()), expected);
}

/// An old file opened read only is not upgraded, and still reads as its
/// version read it.
#[test]
fn a_v6_file_opened_read_only_reads_back_unchanged() {
    let (_dir, path) = fixture("v6");
    let db = Db::builder().read_only(true).open(&path).unwrap();
    assert_eq!(listed(&db), expected("v6"));
    drop(db);
    assert_eq!(sql::<i64>(&path, "SELECT max(v) FROM checkpoint_migrations"), 6);
}

/// The integrity check of an old file opened read only finds what it finds
/// once the file is upgraded: it reads blob rows keyed as their version
/// wrote them (a version such as `~A1.x` was not a blob key before
/// migration 7).
#[test]
fn an_old_file_checked_read_only_finds_what_the_upgraded_file_finds() {
    for name in ["v5", "v6"] {
        let (_dir, path) = fixture(name);
        let shown = |db: &Db| db.check().unwrap().findings.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        let read_only = shown(&Db::builder().read_only(true).open(&path).unwrap());
        let upgraded = shown(&Db::open(&path).unwrap());
        assert_eq!(read_only, upgraded, "{name}");
        assert!(Db::open(&path).unwrap().check().unwrap().is_ok(), "{name}");
    }
}

/// Continues thread `t` of an upgraded fixture (its head holds `messages`
/// messages; the file `checkpoints` checkpoints) by one step.
fn continue_thread_t(name: &str, messages: usize, checkpoints: u64) {
    let (_dir, path) = fixture(name);
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let head = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(head.checkpoint.channel_values["messages"].as_list().unwrap().len(), messages);
    let next = saver
        .step(&head)
        .parent_writes("task", "~path", &[("n", json!(99))])
        .append("messages", [json!("after the upgrade")])
        .set("n", json!(99))
        .commit()
        .unwrap();
    let back = saver.get_tuple(&next.config).unwrap().unwrap();
    assert_eq!(back.checkpoint, next.checkpoint);
    assert_eq!(back.checkpoint.channel_values["messages"].as_list().unwrap().len(), messages + 1);
    assert_eq!(saver.get_tuple(&head.config).unwrap().unwrap().pending_writes.len(), 1);
    // The new row is MessagePack (docs/format.md), without the id; and the
    // integrity check finds every blob of old and new rows.
    drop((saver, db));
    let row =
        |col: &str| format!("SELECT {col} FROM checkpoints WHERE checkpoint_id = '{}'", next.checkpoint.id);
    assert_eq!(sql::<String>(&path, &row("type")), "msgpack");
    let stored = String::from_utf8_lossy(&sql::<Vec<u8>>(&path, &row("checkpoint"))).into_owned();
    assert!(!stored.contains(&next.checkpoint.id), "{stored}");
    let report = Db::open(&path).unwrap().check().unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.checkpoints, checkpoints + 1);
}

#[test]
fn an_upgraded_v5_thread_continues_in_the_current_format() {
    // The newest checkpoint of "t" is the fork (12 messages).
    continue_thread_t("v5", 12, 38);
}

#[test]
fn an_upgraded_v6_thread_continues_in_the_current_format() {
    continue_thread_t("v6", 16, 68);
}

/// Versions in the compact format and blob keys come back exactly as
/// written, also the ones that look like their encodings (docs/format.md).
#[test]
fn every_kind_of_version_round_trips_through_a_compact_row() {
    use agentstate::checkpoint::{ChannelVersion, ChannelVersions};
    use agentstate::{Checkpoint, Metadata};
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let versions = [
        ChannelVersion::Str(format!("{:032}.0.5", 7)),
        ChannelVersion::Str(format!("{:032}.1", 0)),
        ChannelVersion::Str("~7.0.5".into()),
        ChannelVersion::Str("~".into()),
        ChannelVersion::Str("~A1.x".into()),
        ChannelVersion::Str("~`1.x".into()),
        ChannelVersion::Str("7.x".into()),
        ChannelVersion::Int(i64::MAX),
        ChannelVersion::Int(-1),
    ];
    let mut cp = Checkpoint::with_id(agentstate::checkpoint::uuid6(Some(0)).to_string());
    let mut seen = ChannelVersions::new();
    for (i, v) in versions.iter().enumerate() {
        cp.channel_versions.insert(format!("c{i}"), v.clone());
        cp.channel_values.insert(format!("c{i}"), json!(i).into());
        // The same version on a channel whose value is a blob row.
        cp.channel_versions.insert(format!("l{i}"), v.clone());
        cp.channel_values.insert(format!("l{i}"), json!([i, {"v": i}]).into());
        seen.insert(format!("c{i}"), v.clone());
    }
    cp.versions_seen.insert("node".into(), seen);
    let new_versions = cp.channel_versions.clone();
    let config = saver
        .put(&CheckpointConfig::thread("t"), &cp, &Metadata::new().with("step", -1), &new_versions)
        .unwrap();
    let back = saver.get_tuple(&config).unwrap().unwrap().checkpoint;
    assert_eq!(back.channel_versions, cp.channel_versions);
    assert_eq!(back.versions_seen, cp.versions_seen);
    assert_eq!(back.channel_values, cp.channel_values);
    assert_eq!(back.id, cp.id);
    assert!(saver.db().check().unwrap().findings.is_empty());
}

/// A blob row that is missing is an error even when the version's plain text
/// is the key of another version's row (`~A1.x` is how `{1:032}.x` is
/// keyed): never that other version's value.
#[test]
fn a_missing_blob_never_reads_as_the_row_its_text_names() {
    use agentstate::checkpoint::{ChannelVersion, ChannelVersions};
    use agentstate::{Checkpoint, Error, Metadata};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.db");
    let saver = Db::open(&path).unwrap().checkpointer();
    let put = |id: i64, version: ChannelVersion, who: &str| {
        let mut cp = Checkpoint::with_id(agentstate::checkpoint::uuid6(Some(id)).to_string());
        cp.channel_versions.insert("c".into(), version);
        cp.channel_values.insert("c".into(), json!({"who": who}).into());
        let nv: ChannelVersions = cp.channel_versions.clone();
        saver.put(&CheckpointConfig::thread("t"), &cp, &Metadata::new(), &nv).unwrap()
    };
    put(0, ChannelVersion::Str(format!("{:032}.x", 1)), "padded");
    let tilde = put(1, ChannelVersion::Str("~A1.x".into()), "tilde");
    assert_eq!(
        sql::<String>(&path, "SELECT group_concat(version, ' ') FROM checkpoint_blobs"),
        "~A1.x ~~A1.x"
    );
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM checkpoint_blobs WHERE version = '~~A1.x'", [])
        .unwrap();
    let fresh = Db::open(&path).unwrap().checkpointer();
    assert!(matches!(fresh.get_tuple(&tilde), Err(Error::Corrupt { .. })), "{:?}", fresh.get_tuple(&tilde));
}
