//! Values encoded outside the crate (`put_encoded`, `get_tuple_encoded`,
//! `list_encoded`, `put_writes_encoded`): the bytes come back unchanged, the
//! file stays one format (encoded and decoded reads see the same values),
//! growing msgpack lists are stored as their tails, and what would lose data
//! is refused. This is the layer the Python package stands on.

use std::collections::BTreeMap;

use agentstate::checkpoint::{next_version, uuid6, ChannelVersions, TypedBytes};
use agentstate::{rusqlite::Connection, Serializer};
use agentstate::{
    Checkpoint, CheckpointConfig, Checkpointer, Db, Error, JsonPlusSerializer, ListQuery, Metadata,
};
use serde_json::{json, Value};

fn enc(v: &Value) -> TypedBytes {
    let (tag, bytes) = JsonPlusSerializer.dumps_typed(v).unwrap();
    TypedBytes::new(tag, bytes)
}

fn msg(i: usize) -> Value {
    json!({"role": "ai", "content": format!("message {i} ").repeat(30), "id": i.to_string()})
}

/// Puts `n` checkpoints on thread `t`, each appending one message; returns
/// their configs, oldest first.
fn grow(s: &Checkpointer, n: usize) -> Vec<CheckpointConfig> {
    let mut parent: Option<CheckpointConfig> = None;
    let mut version = None;
    let mut out = Vec::new();
    for i in 0..n {
        let v = next_version(version.as_ref());
        let mut cp = Checkpoint::with_id(uuid6(Some(i as i64)).to_string());
        cp.channel_versions.insert("messages".into(), v.clone());
        cp.channel_versions.insert("step".into(), v.clone());
        cp.channel_values.insert("step".into(), json!(i).into());
        let values: BTreeMap<String, TypedBytes> =
            [("messages".to_string(), enc(&Value::Array((0..=i).map(msg).collect())))].into();
        let nv: ChannelVersions =
            [("messages".to_string(), v.clone()), ("step".to_string(), v.clone())].into();
        let cfg = parent.clone().unwrap_or_else(|| CheckpointConfig::thread("t"));
        let meta = Metadata::new().with("step", i as i64);
        let c = s.put_encoded(&cfg, &cp, &values, &meta, &nv).unwrap();
        parent = Some(c.clone());
        version = Some(v);
        out.push(c);
    }
    out
}

#[test]
fn encoded_bytes_round_trip_unchanged_with_inline_values_and_writes() {
    let db = Db::open_in_memory().unwrap();
    let s = db.checkpointer();
    let mut cp = Checkpoint::with_id(uuid6(Some(1)).to_string());
    for ch in ["secret", "count", "empty"] {
        cp.channel_versions.insert(ch.into(), next_version(None));
    }
    cp.channel_values.insert("count".into(), json!(7).into());
    // A tag this crate cannot decode (an encrypting serializer's).
    let secret = TypedBytes::new("msgpack+aes", vec![0, 1, 2, 255]);
    let values = BTreeMap::from([("secret".to_string(), secret.clone())]);
    let nv = cp.channel_versions.clone();
    let cfg = s.put_encoded(&CheckpointConfig::thread("t"), &cp, &values, &Metadata::new(), &nv).unwrap();
    let w = TypedBytes::new("bytes", b"raw".to_vec());
    s.put_writes_encoded(&cfg, &[("out", w.clone()), ("__error__", secret.clone())], "task", "").unwrap();

    let t = s.get_tuple_encoded(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(t.config, cfg);
    assert_eq!(t.values, values, "bytes unchanged; the empty channel has no value");
    assert_eq!(t.checkpoint.channel_values.len(), 1);
    assert_eq!(t.checkpoint.channel_values["count"], json!(7));
    assert_eq!(t.checkpoint.channel_versions, cp.channel_versions);
    // LangGraph's WRITES_IDX_MAP: __error__ is idx -1, so it sorts first.
    let writes: Vec<_> = t.pending_writes.iter().map(|w| (w.channel.as_str(), &w.value)).collect();
    assert_eq!(writes, vec![("__error__", &secret), ("out", &w)]);

    // The decoded read cannot decode the foreign tag: a typed error.
    assert!(matches!(s.get_tuple(&cfg), Err(Error::UnknownSerialization { .. })), "{:?}", s.get_tuple(&cfg));
}

#[test]
fn encoded_and_decoded_reads_see_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.db");
    let configs = grow(&Db::open(&path).unwrap().checkpointer(), 30);
    // A fresh process: no cached bases, every read comes from the file.
    let s = Db::open(&path).unwrap().checkpointer();
    for (i, cfg) in configs.iter().enumerate() {
        let decoded = s.get_tuple(cfg).unwrap().unwrap();
        let list: Vec<Value> = (0..=i).map(msg).collect();
        assert_eq!(decoded.checkpoint.channel_values["messages"], Value::Array(list.clone()));
        assert_eq!(decoded.checkpoint.channel_values["step"], json!(i));
        let encoded = s.get_tuple_encoded(cfg).unwrap().unwrap();
        assert_eq!(encoded.values["messages"], enc(&Value::Array(list)), "version {i}");
        assert_eq!(encoded.metadata, *decoded.metadata);
        assert_eq!(encoded.parent_config, decoded.parent_config);
    }
    // A checkpoint written decoded reads back encoded as JsonPlusSerializer's bytes.
    let mut cp = Checkpoint::with_id(uuid6(Some(99)).to_string());
    cp.channel_versions.insert("m".into(), next_version(None));
    cp.channel_values.insert("m".into(), json!({"a": [1, 2]}).into());
    let nv = cp.channel_versions.clone();
    let cfg = s.put(&CheckpointConfig::thread("u"), &cp, &Metadata::new(), &nv).unwrap();
    assert_eq!(s.get_tuple_encoded(&cfg).unwrap().unwrap().values["m"], enc(&json!({"a": [1, 2]})));
}

#[test]
fn growing_msgpack_lists_are_stored_as_tails_and_listed_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tails.db");
    let n = 120;
    let writer = Db::open(&path).unwrap().checkpointer();
    let configs = grow(&writer, n);
    let conn = Connection::open(&path).unwrap();
    let (deltas, stored): (i64, i64) = conn
        .query_row(
            "SELECT count(base_version), sum(length(blob)) FROM checkpoint_blobs WHERE channel = 'messages'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let whole: usize = (0..n).map(|i| enc(&Value::Array((0..=i).map(msg).collect())).bytes.len()).sum();
    assert!(deltas > 90, "most versions are deltas: {deltas}");
    assert!((stored as usize) * 10 < whole, "stored {stored} bytes for lists of {whole} bytes in all");

    // The writer (whose newest list is in memory, and whose get_tuple
    // cached a version) and a fresh process list the same whole values.
    writer.get_tuple_encoded(&configs[60]).unwrap();
    for s in [writer.clone(), Db::open(&path).unwrap().checkpointer()] {
        let listed: Vec<_> =
            s.list_encoded(&ListQuery::thread("t")).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(listed.len(), n);
        for (t, (i, cfg)) in listed.iter().zip(configs.iter().enumerate().rev()) {
            assert_eq!(&t.config, cfg);
            assert_eq!(t.values["messages"], enc(&Value::Array((0..=i).map(msg).collect())), "version {i}");
            assert_eq!(t.metadata.step(), Some(i as i64));
        }
    }
    let s = Db::open(&path).unwrap().checkpointer();
    let limited =
        s.list_encoded(&ListQuery::thread("t").limit(3).before(configs[10].checkpoint_id.clone().unwrap()));
    let ids: Vec<_> = limited.unwrap().map(|t| t.unwrap().config).collect();
    assert_eq!(ids, vec![configs[9].clone(), configs[8].clone(), configs[7].clone()]);
}

/// `list_encoded_sharing` gives each older version of an appended list as
/// its length (a cut of the list returned just before it) instead of its
/// bytes; a reader that keeps the last list per channel rebuilds exactly
/// what `list_encoded` returns, across threads, forks and pages, in the
/// writing process and in a fresh one.
#[test]
fn a_sharing_listing_cuts_older_lists_from_newer_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("share.db");
    let writer = Db::open(&path).unwrap().checkpointer();
    let configs = grow(&writer, 90);
    // A fork from the 50th checkpoint, and a second thread.
    writer.copy_thread("t", "u").unwrap();
    let mut cp = Checkpoint::with_id(uuid6(Some(99)).to_string());
    let v = ChannelVersions::from([("messages".to_string(), next_version(None))]);
    cp.channel_versions = v.clone();
    let forked: Vec<Value> = (0..50).map(msg).chain([json!("fork")]).collect();
    let values = BTreeMap::from([("messages".to_string(), enc(&Value::Array(forked)))]);
    writer.put_encoded(&configs[49], &cp, &values, &Metadata::new(), &v).unwrap();

    let split = |b: &TypedBytes| -> Vec<rmpv::Value> {
        match rmpv::decode::read_value(&mut b.bytes.as_slice()).unwrap() {
            rmpv::Value::Array(items) => items,
            other => vec![other],
        }
    };
    for s in [writer.clone(), Db::open(&path).unwrap().checkpointer()] {
        for query in [ListQuery::all(), ListQuery::thread("t").limit(40)] {
            let whole: Vec<_> = s.list_encoded(&query).unwrap().collect::<Result<_, _>>().unwrap();
            let shared: Vec<_> = s.list_encoded_sharing(&query).unwrap().collect::<Result<_, _>>().unwrap();
            assert_eq!(whole.len(), shared.len());
            let mut last: std::collections::HashMap<(String, String, String), Vec<rmpv::Value>> =
                Default::default();
            let mut cuts = 0;
            for (w, t) in whole.iter().zip(&shared) {
                assert_eq!(w.config, t.config);
                assert!(w.prefixes.is_empty());
                for (ch, b) in &w.values {
                    let key = (t.config.thread_id.clone(), t.config.checkpoint_ns.clone(), ch.clone());
                    let got = match (t.values.get(ch), t.prefixes.get(ch)) {
                        (Some(bytes), None) => {
                            assert_eq!(bytes, b);
                            split(bytes)
                        }
                        (None, Some(&n)) => {
                            cuts += 1;
                            last[&key][..n].to_vec()
                        }
                        other => panic!("{ch}: {other:?}"),
                    };
                    assert_eq!(got, split(b), "{:?} {ch}", t.config);
                    last.insert(key, got);
                }
            }
            // Lists under 8 KiB are stored whole (not cut); the rest are.
            assert!(cuts * 3 > shared.len() * 2, "{cuts} cuts in {} checkpoints", shared.len());
        }
    }
}

/// A value of another kind between two versions of a list ends the list a
/// sharing listing cuts from, on both sides of the protocol: the older list
/// comes whole, not as a cut of a list the reader has forgotten.
#[test]
fn a_sharing_listing_cuts_nothing_across_a_value_of_another_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("share-bytes.db");
    let s = Db::open(&path).unwrap().checkpointer();
    let list = |n: usize| enc(&Value::Array((0..n).map(msg).collect()));
    let mut parent = CheckpointConfig::thread("t");
    let mut version = None;
    let raw = TypedBytes::new("bytes", b"raw".to_vec());
    for (i, value) in [list(40), raw, list(41), enc(&json!({"k": 1})), list(42)].into_iter().enumerate() {
        let v = next_version(version.as_ref());
        let mut cp = Checkpoint::with_id(uuid6(Some(i as i64)).to_string());
        cp.channel_versions.insert("messages".into(), v.clone());
        let nv: ChannelVersions = [("messages".to_string(), v.clone())].into();
        let values = BTreeMap::from([("messages".to_string(), value)]);
        parent = s.put_encoded(&parent, &cp, &values, &Metadata::new(), &nv).unwrap();
        version = Some(v);
    }
    for reader in [s.clone(), Db::open(&path).unwrap().checkpointer()] {
        let shared: Vec<_> =
            reader.list_encoded_sharing(&ListQuery::thread("t")).unwrap().collect::<Result<_, _>>().unwrap();
        let whole: Vec<_> =
            reader.list_encoded(&ListQuery::thread("t")).unwrap().collect::<Result<_, _>>().unwrap();
        for (t, w) in shared.iter().zip(&whole) {
            assert!(t.prefixes.is_empty(), "cut from a list the reader no longer has: {:?}", t.prefixes);
            assert_eq!(t.values, w.values);
        }
    }
}

#[test]
fn put_encoded_refuses_what_would_lose_data() {
    let s = Db::open_in_memory().unwrap().checkpointer();
    let t = CheckpointConfig::thread("t");
    let v1 = next_version(None);
    let mut cp = Checkpoint::with_id(uuid6(Some(1)).to_string());
    cp.channel_versions.insert("m".into(), v1.clone());
    let nv: ChannelVersions = cp.channel_versions.clone();

    // A list inline: it must be encoded by the caller.
    let mut inline = cp.clone();
    inline.channel_values.insert("m".into(), json!([1]).into());
    assert!(matches!(
        s.put_encoded(&t, &inline, &BTreeMap::new(), &Metadata::new(), &nv),
        Err(Error::InvalidArgument(_))
    ));
    // A value for a channel without a version.
    let stray = BTreeMap::from([("x".to_string(), enc(&json!([1])))]);
    assert!(matches!(s.put_encoded(&t, &cp, &stray, &Metadata::new(), &nv), Err(Error::InvalidArgument(_))));
    // A channel left out of new_versions whose version was never stored,
    // without a value to store: refused.
    let values = BTreeMap::from([("m".to_string(), enc(&json!([1])))]);
    assert!(matches!(
        s.put_encoded(&t, &cp, &BTreeMap::new(), &Metadata::new(), &ChannelVersions::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(s.get_tuple_encoded(&t).unwrap().is_none(), "nothing was written");

    let cfg = s.put_encoded(&t, &cp, &values, &Metadata::new(), &nv).unwrap();
    // The same version with another value.
    let mut again = cp.clone();
    again.id = uuid6(Some(2)).to_string();
    let other = BTreeMap::from([("m".to_string(), enc(&json!([2])))]);
    assert!(matches!(s.put_encoded(&cfg, &again, &other, &Metadata::new(), &nv), Err(Error::Conflict(_))));
    // The same version with the same value (a retry) is fine.
    s.put_encoded(&cfg, &again, &values, &Metadata::new(), &nv).unwrap();
}

#[test]
fn a_channel_left_out_of_new_versions_is_stored_if_its_version_is_new() {
    let s = Db::open_in_memory().unwrap().checkpointer();
    let v1 = next_version(None);
    let mut cp = Checkpoint::with_id(uuid6(Some(1)).to_string());
    cp.channel_versions.insert("m".into(), v1.clone());
    let values = BTreeMap::from([("m".to_string(), enc(&json!([1])))]);
    // Nothing listed (a hand-written put): the value is stored, not lost.
    let cfg = s
        .put_encoded(&CheckpointConfig::thread("t"), &cp, &values, &Metadata::new(), &ChannelVersions::new())
        .unwrap();
    assert_eq!(s.get_tuple_encoded(&cfg).unwrap().unwrap().values, values);
    // Unlisted again with other bytes: the version keeps its first value.
    let mut next = cp.clone();
    next.id = uuid6(Some(2)).to_string();
    let other = BTreeMap::from([("m".to_string(), enc(&json!([2])))]);
    let cfg2 = s.put_encoded(&cfg, &next, &other, &Metadata::new(), &ChannelVersions::new()).unwrap();
    assert_eq!(s.get_tuple_encoded(&cfg2).unwrap().unwrap().values, values);
}

#[test]
fn a_missing_blob_is_corrupt_not_an_absent_channel() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.db");
    let configs = grow(&Db::open(&path).unwrap().checkpointer(), 40);
    let conn = Connection::open(&path).unwrap();
    // Remove a link in the middle of the delta chain.
    let v: String = conn
        .query_row(
            "SELECT version FROM checkpoint_blobs WHERE channel = 'messages' AND base_version IS NOT NULL \
             ORDER BY version LIMIT 1 OFFSET 5",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute("DELETE FROM checkpoint_blobs WHERE channel = 'messages' AND version = ?1", [&v]).unwrap();
    let s = Db::open(&path).unwrap().checkpointer();
    let last = configs.last().unwrap();
    assert!(
        matches!(s.get_tuple_encoded(last), Err(Error::Corrupt { .. })),
        "{:?}",
        s.get_tuple_encoded(last)
    );
    let listed: Vec<_> = s.list_encoded(&ListQuery::thread("t")).unwrap().collect();
    assert!(listed.iter().any(|r| matches!(r, Err(Error::Corrupt { .. }))));
}

#[test]
fn with_unstable_encoding_a_stored_version_keeps_its_first_bytes() {
    // An encrypting serializer gives the same value new bytes each time.
    let s = Db::open_in_memory().unwrap().checkpointer().with_unstable_encoding();
    let mut cp = Checkpoint::with_id(uuid6(Some(1)).to_string());
    cp.channel_versions.insert("m".into(), next_version(None));
    let nv = cp.channel_versions.clone();
    let first = BTreeMap::from([("m".to_string(), TypedBytes::new("msgpack+aes", vec![1, 2, 3]))]);
    let cfg = s.put_encoded(&CheckpointConfig::thread("t"), &cp, &first, &Metadata::new(), &nv).unwrap();
    // The same checkpoint put again (a retry), re-encrypted: no Conflict.
    let again = BTreeMap::from([("m".to_string(), TypedBytes::new("msgpack+aes", vec![9, 9, 9]))]);
    s.put_encoded(&CheckpointConfig::thread("t"), &cp, &again, &Metadata::new(), &nv).unwrap();
    assert_eq!(s.get_tuple_encoded(&cfg).unwrap().unwrap().values, first);
    // Without it, the difference is refused.
    let strict = Db::open_in_memory().unwrap().checkpointer();
    strict.put_encoded(&CheckpointConfig::thread("t"), &cp, &first, &Metadata::new(), &nv).unwrap();
    assert!(matches!(
        strict.put_encoded(&CheckpointConfig::thread("t"), &cp, &again, &Metadata::new(), &nv),
        Err(Error::Conflict(_))
    ));
}

/// A channel a step emptied is marked in the checkpoint row (no blob row):
/// the encoded reads (what the Python package reads) give it no value, as
/// the decoded ones do, and list it whole otherwise.
#[test]
fn encoded_reads_take_a_channel_a_step_emptied_as_empty() {
    let s = Db::open_in_memory().unwrap().checkpointer();
    let first = s.start(&CheckpointConfig::thread("t")).set("route", json!(["a"])).commit().unwrap();
    let cleared = s.step(&first).clear("route").set("n", json!(1)).commit().unwrap();
    let got = s.get_tuple_encoded(&cleared.config).unwrap().unwrap();
    assert!(got.values.is_empty(), "{:?}", got.values);
    assert_eq!(got.checkpoint.channel_versions, cleared.checkpoint.channel_versions);
    for sharing in [false, true] {
        let q = ListQuery::thread("t");
        let listed = if sharing { s.list_encoded_sharing(&q) } else { s.list_encoded(&q) };
        let listed: Vec<_> = listed.unwrap().map(Result::unwrap).collect();
        assert_eq!(listed.len(), 2);
        assert!(listed[0].values.is_empty() && listed[0].prefixes.is_empty(), "sharing: {sharing}");
        assert_eq!(listed[1].values.keys().collect::<Vec<_>>(), ["route"], "sharing: {sharing}");
    }
}
