//! Extreme and lying input found by an adversarial audit of the public API:
//! each test names the guarantee it holds ("bad input is a typed error,
//! never a panic, never partial state; extreme numbers are input too").

mod common;

use std::time::Duration;

use agentstate::checkpoint::ChannelVersions;
use agentstate::rusqlite;
use agentstate::{Checkpoint, CheckpointConfig, Db, Error, JsonPlusSerializer, Metadata, Serializer};
use serde_json::json;

// ---------------------------------------------------------------------------
// Busy timeouts

/// Guarantee: a `Duration` is input too. A busy timeout longer than SQLite
/// can hold (`i32::MAX` milliseconds, about 24.8 days), `Duration::MAX`
/// included ("wait forever"), opens the file and waits as long as SQLite
/// can; it used to panic inside `DbBuilder::open` (rusqlite's "too big",
/// and `Instant + Duration` overflowing).
#[test]
fn a_busy_timeout_longer_than_sqlite_holds_opens_and_works() {
    let dir = tempfile::tempdir().unwrap();
    for (i, timeout) in [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 1000),
        Duration::from_millis(i32::MAX as u64 + 1),
        Duration::from_millis(i32::MAX as u64),
    ]
    .into_iter()
    .enumerate()
    {
        for write_behind in [false, true] {
            let path = dir.path().join(format!("busy{i}{write_behind}.db"));
            let db = Db::builder().busy_timeout(timeout).write_behind(write_behind).open(&path).unwrap();
            let saver = db.checkpointer();
            let head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(1)).commit().unwrap();
            saver.step(&head).set("n", json!(2)).commit().unwrap();
            let store = db.store(agentstate::StoreConfig::default()).unwrap();
            store.put(&["a"], "k", json!({"x": 1})).unwrap();
            db.flush().unwrap();
            assert_eq!(store.get(&["a"], "k").unwrap().unwrap().value, json!({"x": 1}));
            let t = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
            assert_eq!(t.checkpoint.channel_values["n"], json!(2));
        }
        let mem = Db::builder().busy_timeout(timeout).open_in_memory().unwrap();
        mem.store(agentstate::StoreConfig::default()).unwrap().put(&["a"], "k", json!({"x": 1})).unwrap();
    }
}

// ---------------------------------------------------------------------------
// MessagePack that lies about its lengths

/// `levels` nested msgpack containers (`marker` 0xdd: array 32, 0xdf: map
/// 32), each claiming as many elements as there are bytes left (the most a
/// per-container check lets through), in `size` bytes filled with nils:
/// the innermost is whole, every other one is cut short.
fn lying_nest(marker: u8, levels: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    for _ in 0..levels {
        let at = out.len();
        out.push(marker);
        out.extend_from_slice(&[0; 4]);
        if marker == 0xdf {
            // A map's entries: a one-character key, then the next level.
            out.extend_from_slice(&[0xa1, b'k']);
        }
        let left = u32::try_from(size - out.len()).unwrap();
        let n = if marker == 0xdf { left / 2 } else { left };
        out[at + 1..at + 5].copy_from_slice(&n.to_be_bytes());
    }
    out.resize(size, 0xc0);
    out
}

/// 4 MB of lies: 500 nested headers in it claim 500 times 4 M elements.
const LIES: usize = 4 << 20;

const CODEC_PARENT: &str = "lying_msgpack_lengths_decode_in_memory_bounded_by_the_input";

/// Guarantee: msgpack bytes are untrusted input (a damaged file, a foreign
/// writer): decoding them allocates in proportion to the bytes, whatever
/// their headers claim, and lying bytes are `Error::Serialization`. Every
/// array and map header used to reserve room for the elements it claimed,
/// checked only against the bytes left, so 500 nested headers in 4 MB
/// reserved 500 times 4 M values (160 GB) and aborted the process. Through
/// the public serializer, and through a blob of the file damaged by raw SQL.
#[test]
fn lying_msgpack_lengths_decode_in_memory_bounded_by_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lies.db");
    let db = Db::open(&path).unwrap();
    db.checkpointer().start(&CheckpointConfig::thread("t")).set("list", json!([1, 2, 3])).commit().unwrap();
    drop(db);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE checkpoint_blobs SET blob = ?1 WHERE channel = 'list'",
            [lying_nest(0xdd, 500, LIES)],
        )
        .unwrap();
    common::harness::run_memory_limited("lying_msgpack_lengths_child", "AGENTSTATE_CODEC_LIES_CHILD", &path);
}

#[test]
#[ignore = "child-process entry point: run by lying_msgpack_lengths_decode_in_memory_bounded_by_the_input"]
fn lying_msgpack_lengths_child() {
    let path = common::harness::child_env("AGENTSTATE_CODEC_LIES_CHILD", CODEC_PARENT);
    for marker in [0xdd, 0xdf] {
        let got = JsonPlusSerializer.loads_typed("msgpack", &lying_nest(marker, 500, LIES));
        assert!(matches!(got, Err(Error::Serialization { .. })), "{marker:#x}: {got:?}");
    }
    let got = Db::open(&path).unwrap().checkpointer().get_tuple(&CheckpointConfig::thread("t"));
    assert!(matches!(got, Err(Error::Serialization { .. })), "{got:?}");
}

const ROW_PARENT: &str = "a_checkpoint_row_with_lying_lengths_is_corrupt_in_bounded_memory";

/// Guarantee: a damaged checkpoint row is `Error::Corrupt`, never an abort.
/// The row reader reserved room for every array's claimed length, so 126
/// nested arrays (within its depth limit) in a 4 MB row reserved 126 times
/// 4 M values and aborted the process.
#[test]
fn a_checkpoint_row_with_lying_lengths_is_corrupt_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("row.db");
    let db = Db::open(&path).unwrap();
    db.checkpointer().start(&CheckpointConfig::thread("t")).set("n", json!(1)).commit().unwrap();
    drop(db);
    // A row [v, ts, channels, versions, {"a": <lies>}, ...].
    let mut row = vec![0x98, 0x01, 0xa0, 0x90, 0x90, 0x81, 0xa1, b'a'];
    row.extend(lying_nest(0xdd, 126, LIES));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE checkpoints SET checkpoint = ?1 WHERE thread_id = 't'", [row])
        .unwrap();
    common::harness::run_memory_limited("lying_row_lengths_child", "AGENTSTATE_ROW_LIES_CHILD", &path);
}

#[test]
#[ignore = "child-process entry point: run by a_checkpoint_row_with_lying_lengths_is_corrupt_in_bounded_memory"]
fn lying_row_lengths_child() {
    let path = common::harness::child_env("AGENTSTATE_ROW_LIES_CHILD", ROW_PARENT);
    let saver = Db::open(&path).unwrap().checkpointer();
    let got = saver.get_tuple(&CheckpointConfig::thread("t"));
    assert!(matches!(got, Err(Error::Corrupt { .. })), "{got:?}");
    let got = saver.list(&agentstate::ListQuery::thread("t"));
    assert!(matches!(got, Err(Error::Corrupt { .. })), "{got:?}");
}

// ---------------------------------------------------------------------------
// Delta chains

/// Guarantee: a damaged row never panics a write, and never makes it store
/// a wrong value. A blob whose chain position (`checkpoint_blobs.chain`) is
/// `i64::MAX` overflowed the position of the delta extending it: a panic
/// in debug builds, a negative position in release. Now that list is stored
/// whole, and every version reads back exactly.
#[test]
fn a_blob_at_the_largest_chain_position_is_continued_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain.db");
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    // A list past the incremental-blob threshold: appends are stored as deltas.
    let mut want: Vec<serde_json::Value> = (0..3000).map(|i| json!(format!("message {i}"))).collect();
    let mut head =
        saver.start(&CheckpointConfig::thread("t")).set("log", json!(want.clone())).commit().unwrap();
    head = saver.step(&head).append("log", [json!("one more")]).commit().unwrap();
    want.push(json!("one more"));
    drop((saver, db));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let deltas: i64 = conn
        .query_row("SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(deltas, 1, "the test needs a delta chain");
    conn.execute("UPDATE checkpoint_blobs SET chain = ?1", [i64::MAX]).unwrap();
    drop(conn);

    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let head = saver.get_tuple(&head.config).unwrap().unwrap();
    let next = saver.step(&head).append("log", [json!("and another")]).commit().unwrap();
    want.push(json!("and another"));
    drop((saver, db));
    // A fresh handle (no cache) reads every version back exactly.
    let saver = Db::open(&path).unwrap().checkpointer();
    let got = saver.get_tuple(&next.config).unwrap().unwrap();
    assert_eq!(got.checkpoint.channel_values["log"], json!(want));
    let listed = saver.list(&agentstate::ListQuery::thread("t")).unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[1].checkpoint.channel_values["log"], json!(want[..want.len() - 1]));
    let chains: Vec<i64> = rusqlite::Connection::open(&path)
        .unwrap()
        .prepare("SELECT chain FROM checkpoint_blobs")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(chains.iter().all(|c| *c >= 0), "{chains:?}");
}

// ---------------------------------------------------------------------------
// Filters too large for SQL

/// Guarantee: a filter is accepted or refused alike by every way of
/// evaluating it, and a refusal is `InvalidFilter`. A filter of 40 000
/// `$in` elements (or conditions) parsed, and matched in Rust (a Store
/// search from memory), but `Checkpointer::list` and a Store search from
/// the file (`with_search_memory(0)`) failed with an untyped
/// `Error::Sqlite` ("too many SQL variables"): the search budget changed
/// the result. Now `Filter::parse` refuses a filter of more conditions than
/// SQL can bind everywhere, a filter just under the limit runs everywhere
/// with one answer, and an `$in` list of any length is one parameter.
#[test]
fn a_filter_too_large_for_sql_is_refused_alike_everywhere() {
    use agentstate::store::Search;
    use agentstate::{ListQuery, StoreConfig};
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let meta = Metadata::new().with("x", json!(5));
    saver.put(&CheckpointConfig::thread("t"), &Checkpoint::new(), &meta, &ChannelVersions::new()).unwrap();
    let memory = db.store(StoreConfig::default()).unwrap();
    memory.put(&["a"], "k", json!({"x": 5})).unwrap();
    let file = db.store(StoreConfig::default().with_search_memory(0)).unwrap();
    let conditions = |n: usize| {
        let mut m = serde_json::Map::new();
        m.insert("x".into(), json!(5));
        m.extend((0..n).map(|i| (format!("k{i}"), json!({"$ne": 1}))));
        serde_json::Value::Object(m)
    };
    let too_large =
        [json!({"$or": (0..20_000).map(|i| json!({"x": i})).collect::<Vec<_>>()}), conditions(20_000)];
    for f in &too_large {
        let refused = |r: agentstate::Result<usize>| {
            assert!(
                matches!(&r, Err(Error::InvalidFilter { reason, .. }) if reason.contains("too large")),
                "{r:?}"
            )
        };
        refused(agentstate::Filter::parse(f).map(|_| 0));
        refused(saver.list(&ListQuery::thread("t").filter(f.clone())).map(|v| v.len()));
        refused(memory.search(Search::new(&["a"]).filter(f.clone())).map(|v| v.len()));
        refused(file.search(Search::new(&["a"]).filter(f.clone())).map(|v| v.len()));
    }
    for f in [
        json!({"x": {"$in": (0..30_000).collect::<Vec<_>>()}}),
        json!({"x": {"$nin": (10..30_000).collect::<Vec<_>>()}}),
        json!({"x": {"$in": (0..1_000_000).collect::<Vec<_>>()}}),
        json!({"x": {"$nin": (10..40_000).map(|i| format!("s{i}")).collect::<Vec<_>>()}}),
        conditions(9_000),
    ] {
        assert!(agentstate::Filter::parse(&f).unwrap().matches(&json!({"x": 5})));
        assert_eq!(saver.list(&ListQuery::thread("t").filter(f.clone())).unwrap().len(), 1);
        assert_eq!(memory.search(Search::new(&["a"]).filter(f.clone())).unwrap().len(), 1);
        assert_eq!(file.search(Search::new(&["a"]).filter(f.clone())).unwrap().len(), 1);
    }
}

/// Guarantee: a long `$in` / `$nin` list (bound as one JSON array) keeps
/// the filter language's types: numbers match numbers of equal value
/// (integer or float, at the extremes too), strings match strings, never
/// each other or booleans; every way of evaluating it gives one answer.
#[test]
fn long_in_lists_keep_their_types_everywhere() {
    use agentstate::store::Search;
    use agentstate::{ListQuery, StoreConfig};
    let docs = [
        json!(5),
        json!(5.0),
        json!("5"),
        json!(true),
        json!(null),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e308),
        json!(0.1),
        json!(-0.0),
        json!("s7"),
        json!([5]),
    ];
    let db = Db::open_in_memory().unwrap();
    let saver = db.checkpointer();
    let memory = db.store(StoreConfig::default()).unwrap();
    let file = db.store(StoreConfig::default().with_search_memory(0)).unwrap();
    for (i, x) in docs.iter().enumerate() {
        let meta = Metadata::new().with("x", x.clone()).with("i", json!(i));
        saver
            .put(
                &CheckpointConfig::thread(format!("t{i}")),
                &Checkpoint::new(),
                &meta,
                &ChannelVersions::new(),
            )
            .unwrap();
        memory.put(&["a"], &format!("k{i}"), json!({"x": x, "i": i})).unwrap();
    }
    let filler = |n: usize| (1000..1000 + n).map(|i| json!(i)).collect::<Vec<_>>();
    let lists = [
        [vec![json!(5)], filler(40)].concat(),
        [vec![json!(5.0), json!(u64::MAX), json!(i64::MIN), json!(1e308), json!(0.1), json!(0)], filler(40)]
            .concat(),
        [vec![json!("5"), json!("s7")], (0..40).map(|i| json!(format!("w{i}"))).collect()].concat(),
        [vec![json!(5), json!("5"), json!(true), json!(null)], filler(40)].concat(),
    ];
    for list in lists {
        for op in ["$in", "$nin"] {
            let f = json!({"x": {op: list}});
            let parsed = agentstate::Filter::parse(&f).unwrap();
            let expected: Vec<usize> =
                (0..docs.len()).filter(|i| parsed.matches(&json!({"x": docs[*i], "i": i}))).collect();
            assert!(!expected.is_empty() && expected.len() < docs.len(), "{f}: {expected:?}");
            let ids = |v: Vec<serde_json::Value>| {
                let mut v: Vec<usize> = v.iter().map(|i| i.as_u64().unwrap() as usize).collect();
                v.sort_unstable();
                v
            };
            let listed = saver.list(&ListQuery::all().filter(f.clone())).unwrap();
            assert_eq!(ids(listed.iter().map(|t| t.metadata.0["i"].clone()).collect()), expected, "list {f}");
            for store in [&memory, &file] {
                let hits = store.search(Search::new(&["a"]).filter(f.clone()).limit(100)).unwrap();
                assert_eq!(
                    ids(hits.iter().map(|h| h.item.value["i"].clone()).collect()),
                    expected,
                    "search {f}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// TTLs damaged in the file

/// Guarantee: a damaged row never silently loses or changes data. An
/// item's `ttl_minutes` holding what no put writes (text, a negative
/// number, 1e308, an infinity) used to be "refreshed" by the next read
/// into an expiry of now (text counts as 0 minutes: the item vanished
/// from the next search and the sweep deleted it) or into none at all (the
/// item never expired). Now a read refreshes only a TTL a put could have
/// written, and leaves such an item's expiry as it is.
#[test]
fn a_damaged_ttl_is_never_refreshed_into_another_expiry() {
    use agentstate::store::{Put, Search};
    use agentstate::StoreConfig;
    let dir = tempfile::tempdir().unwrap();
    for (i, damage) in ["'abc'", "-5", "1e308", "9e999", "-9e999", "X'00'"].into_iter().enumerate() {
        let path = dir.path().join(format!("ttl{i}.db"));
        let db = Db::open(&path).unwrap();
        let store = db.store(StoreConfig::default()).unwrap();
        store.put_with(Put::new(&["a"], "k", json!({"x": 1})).ttl(Duration::from_secs(600))).unwrap();
        let expires = store.get(&["a"], "k").unwrap().unwrap().expires_at.unwrap();
        drop((store, db));
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(&format!("UPDATE store SET ttl_minutes = {damage}"))
            .unwrap();
        let store = Db::open(&path).unwrap().store(StoreConfig::default()).unwrap();
        for _ in 0..2 {
            let item = store.get(&["a"], "k").unwrap();
            assert_eq!(item.and_then(|i| i.expires_at), Some(expires), "ttl_minutes = {damage}");
            let hits = store.search(Search::new(&["a"])).unwrap();
            assert_eq!(hits.len(), 1, "ttl_minutes = {damage}");
            assert_eq!(hits[0].item.expires_at, Some(expires), "ttl_minutes = {damage}");
        }
        assert_eq!(store.sweep_expired().unwrap(), 0, "ttl_minutes = {damage}");
    }
}

// ---------------------------------------------------------------------------
// Paths that name no file

/// Guarantee: every call through one `Db` sees one database. `":memory:"`,
/// `""` (a temporary file) and `mode=memory` URIs name a database private
/// to each SQLite connection; `Db::open` gave them a pool of up to 8
/// connections, so a call on any but the first met an empty database
/// without the schema ("no such table", an untyped `Error::Sqlite`) and
/// could not see what the others wrote. Now they get one connection, as
/// `Db::open_in_memory` does.
#[test]
fn a_path_naming_a_private_database_gets_one_database() {
    for path in [":memory:", "", "file::memory:", "file:x?mode=memory"] {
        for write_behind in [false, true] {
            let db = Db::builder().write_behind(write_behind).open(path).unwrap();
            let store = db.store(agentstate::StoreConfig::default()).unwrap();
            store.put(&["a"], "k", json!({"x": 1})).unwrap();
            let saver = db.checkpointer();
            let head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(1)).commit().unwrap();
            std::thread::scope(|s| {
                for _ in 0..6 {
                    let (store, saver, head) = (store.clone(), saver.clone(), &head);
                    s.spawn(move || {
                        for _ in 0..20 {
                            assert_eq!(
                                store.get(&["a"], "k").unwrap().unwrap().value,
                                json!({"x": 1}),
                                "{path:?}"
                            );
                            let t = saver.get_tuple(&head.config).unwrap().unwrap();
                            assert_eq!(t.checkpoint.channel_values["n"], json!(1), "{path:?}");
                        }
                    });
                }
            });
        }
    }
}
