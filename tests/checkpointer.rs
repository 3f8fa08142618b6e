//! The checkpointer's contract, through the public API: LangGraph's
//! `BaseCheckpointSaver` behaviour, and where we differ on purpose (each such
//! test says so and names the section of `docs/design.md`).

use agentstate::checkpoint::{next_version, uuid6, ChannelVersion, ChannelVersions, PendingWrite};
use agentstate::{Checkpoint, CheckpointConfig, Checkpointer, Db, Error, ListQuery, Metadata, PruneStrategy};
use serde_json::{json, Map, Value};

fn saver() -> Checkpointer {
    Db::open_in_memory().unwrap().checkpointer()
}

fn meta(source: &str, step: i64) -> Metadata {
    Metadata::new().with("source", source).with("step", step).with("parents", json!({}))
}

fn cp() -> Checkpoint {
    Checkpoint::with_id(uuid6(Some(-1)).to_string())
}

/// A checkpoint with the given values, every channel at version 1 (and
/// `new_versions` naming all of them).
fn cp_with(values: Value) -> (Checkpoint, ChannelVersions) {
    let mut c = cp();
    let mut nv = ChannelVersions::new();
    for (k, v) in values.as_object().unwrap() {
        c.channel_values.insert(k.clone(), (v.clone()).into());
        c.channel_versions.insert(k.clone(), ChannelVersion::Int(1));
        nv.insert(k.clone(), ChannelVersion::Int(1));
    }
    (c, nv)
}

fn none() -> ChannelVersions {
    ChannelVersions::new()
}

fn ids(ts: &[agentstate::CheckpointTuple]) -> Vec<String> {
    ts.iter().map(|t| t.checkpoint.id.clone()).collect()
}

fn put_chain(s: &Checkpointer, thread: &str, ns: &str, n: usize) -> Vec<String> {
    let mut parent: Option<String> = None;
    let mut out = vec![];
    for i in 0..n {
        let c = cp();
        let mut cfg = CheckpointConfig::thread(thread).ns(ns);
        cfg.checkpoint_id = parent.clone();
        let source = if i % 2 == 0 { "input" } else { "loop" };
        s.put(&cfg, &c, &meta(source, i as i64), &none()).unwrap();
        parent = Some(c.id.clone());
        out.push(c.id);
    }
    out
}

#[test]
fn put_returns_the_canonical_config() {
    let s = saver();
    let c = cp();
    let out = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap();
    assert_eq!(
        out.to_json(),
        json!({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": c.id}})
    );
}

#[test]
fn get_tuple_without_id_is_the_latest_with_its_parent_config() {
    let s = saver();
    let ids = put_chain(&s, "t", "", 3);
    let t = s.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(t.checkpoint.id, ids[2]);
    assert_eq!(t.parent_config.unwrap().checkpoint_id.as_deref(), Some(ids[1].as_str()));
    let first = s.get_tuple(&CheckpointConfig::thread("t").at(&ids[0])).unwrap().unwrap();
    assert!(first.parent_config.is_none());
    assert_eq!(first.config, CheckpointConfig::thread("t").at(&ids[0]));
}

#[test]
fn an_unknown_thread_or_id_reads_as_none() {
    let s = saver();
    put_chain(&s, "t", "", 1);
    assert!(s.get_tuple(&CheckpointConfig::thread("unknown")).unwrap().is_none());
    assert!(s.get_tuple(&CheckpointConfig::thread("t").at(uuid6(None).to_string())).unwrap().is_none());
}

/// Case 4 (a missing `checkpoint_ns` raises KeyError in Python) does not carry
/// over: the typed config always has a namespace, and `CheckpointConfig::from_json`
/// defaults a missing one to `""` like `get_tuple` does. A missing
/// `thread_id` is a typed error.
#[test]
fn a_config_needs_a_thread_id() {
    let err = CheckpointConfig::from_json(&json!({"configurable": {"checkpoint_ns": ""}})).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)));
    let cfg = CheckpointConfig::from_json(&json!({"configurable": {"thread_id": "t"}})).unwrap();
    assert_eq!(cfg.checkpoint_ns, "");
    let s = saver();
    assert!(matches!(
        s.put(&CheckpointConfig::thread(""), &cp(), &meta("input", -1), &none()),
        Err(Error::InvalidConfig(_))
    ));
    let no_id = CheckpointConfig::thread("t");
    assert!(matches!(s.put_writes(&no_id, &[("a", json!(1))], "task", ""), Err(Error::InvalidConfig(_))));
}

#[test]
fn list_is_newest_first_and_spans_namespaces_when_none_is_given() {
    let s = saver();
    let root = put_chain(&s, "t", "", 4);
    let child = put_chain(&s, "t", "child:1", 2);
    let listed = s.list(&ListQuery::thread("t").namespace("")).unwrap();
    let mut expect = root.clone();
    expect.reverse();
    assert_eq!(ids(&listed), expect);
    let all = s.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(all.len(), 6);
    assert!(child.iter().all(|c| ids(&all).contains(c)));
}

#[test]
fn list_of_all_threads_is_sorted_by_id_descending() {
    let s = saver();
    let u = put_chain(&s, "u", "", 1);
    let t = put_chain(&s, "t", "", 3);
    let mut all: Vec<String> = u.into_iter().chain(t).collect();
    all.sort();
    all.reverse();
    assert_eq!(ids(&s.list(&ListQuery::all()).unwrap()), all);
}

/// Case 7's third part (`before={"configurable":{}}` gives `[]` in Python)
/// does not carry over: `before` is a checkpoint id, so there is no
/// "before without an id".
#[test]
fn list_before_and_limit() {
    let s = saver();
    let ids_ = put_chain(&s, "t", "", 4);
    let got = s.list(&ListQuery::thread("t").namespace("").before(&ids_[2])).unwrap();
    assert_eq!(ids(&got), vec![ids_[1].clone(), ids_[0].clone()]);
    let got = s.list(&ListQuery::thread("t").before(&ids_[3]).limit(1)).unwrap();
    assert_eq!(ids(&got), vec![ids_[2].clone()]);
}

#[test]
fn list_with_limit_zero_is_empty() {
    let s = saver();
    put_chain(&s, "t", "", 2);
    assert!(s.list(&ListQuery::thread("t").limit(0)).unwrap().is_empty());
}

#[test]
fn list_filters_on_metadata() {
    let s = saver();
    put_chain(&s, "t", "", 4);
    let count = |f: Value| s.list(&ListQuery::thread("t").filter(f)).unwrap().len();
    assert_eq!(count(json!({"source": "input"})), 2);
    assert_eq!(count(json!({"step": 1})), 1);
    assert_eq!(count(json!({"source": "input", "step": 2})), 1);
    assert_eq!(count(json!({"source": "update", "step": 99})), 0);
}

#[test]
fn custom_metadata_keys_are_kept_and_filterable() {
    let s = saver();
    s.put(
        &CheckpointConfig::thread("t"),
        &cp(),
        &Metadata::new().with("score", 42).with("run_id", "r"),
        &none(),
    )
    .unwrap();
    let got = s.list(&ListQuery::thread("t").filter(json!({"score": 42}))).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].metadata.run_id(), Some("r"));
}

#[test]
fn dotted_filter_keys_are_nested_paths() {
    let s = saver();
    let m: Map<String, Value> = serde_json::from_value(
        json!({"user": {"access-level": "nested", "123abc": "ok2"}, "access-level": "public"}),
    )
    .unwrap();
    s.put(&CheckpointConfig::thread("t"), &cp(), &Metadata(m), &none()).unwrap();
    for f in [
        json!({"user.access-level": "nested"}),
        json!({"access-level": "public"}),
        json!({"user.123abc": "ok2"}),
    ] {
        assert_eq!(s.list(&ListQuery::thread("t").filter(f.clone())).unwrap().len(), 1, "{f}");
    }
}

#[test]
fn a_bad_filter_key_is_a_typed_error() {
    let s = saver();
    let err = s.list(&ListQuery::thread("t").filter(json!({"bad key": 1}))).unwrap_err();
    assert!(matches!(err, Error::InvalidFilter { .. }));
    assert!(err.to_string().starts_with("Invalid filter key: 'bad key'."), "{err}");
}

/// `{"k": null}` matches null or missing (the SqliteSaver side of
/// case 13).
#[test]
fn a_null_filter_matches_a_missing_key() {
    let s = saver();
    put_chain(&s, "t", "", 3);
    assert_eq!(s.list(&ListQuery::thread("t").filter(json!({"absent": null}))).unwrap().len(), 3);
}

/// Decision: like SqliteSaver, the key `writes` is kept (Postgres strips it).
#[test]
fn metadata_key_writes_is_kept_and_filterable() {
    let s = saver();
    s.put(
        &CheckpointConfig::thread("t"),
        &cp(),
        &Metadata::new().with("writes", json!({"foo": "bar"})),
        &none(),
    )
    .unwrap();
    assert_eq!(s.list(&ListQuery::thread("t").filter(json!({"writes": {"foo": "bar"}}))).unwrap().len(), 1);
}

#[test]
fn put_merges_config_entries_into_metadata() {
    let s = saver();
    let cfg = CheckpointConfig::from_json(&json!({
        "configurable": {"thread_id": "t", "checkpoint_ns": "", "__x": "s", "foo": "bar", "n": 5,
                         "obj": {"a": 1}, "langgraph_step": 3},
        "metadata": {"user": "u\u{0}z"}
    }))
    .unwrap();
    let m: Map<String, Value> =
        serde_json::from_value(json!({"source": "input", "step": -1, "nul": "a\u{0}b"})).unwrap();
    s.put(&cfg, &cp(), &Metadata(m), &none()).unwrap();
    let t = s.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    assert_eq!(
        Value::Object(t.metadata.0.clone()),
        json!({"source": "input", "step": -1, "nul": "ab", "user": "uz", "foo": "bar", "n": 5})
    );
}

fn pw(task: &str, ch: &str, v: Value) -> PendingWrite {
    PendingWrite { task_id: task.into(), channel: ch.into(), value: v }
}

#[test]
fn special_writes_get_fixed_indexes_and_writes_come_back_in_task_order() {
    let s = saver();
    let c = cp();
    let cfg = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap();
    s.put_writes(
        &cfg,
        &[
            ("messages", json!("m1")),
            ("__error__", json!("boom")),
            ("__interrupt__", json!({"x": 1})),
            ("other", Value::Null),
        ],
        "task1",
        "",
    )
    .unwrap();
    let t = s.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(
        t.pending_writes,
        vec![
            pw("task1", "__interrupt__", json!({"x": 1})),
            pw("task1", "__error__", json!("boom")),
            pw("task1", "messages", json!("m1")),
            pw("task1", "other", Value::Null),
        ]
        .into()
    );
}

#[test]
fn put_writes_is_idempotent() {
    let s = saver();
    let cfg = s.put(&CheckpointConfig::thread("t"), &cp(), &meta("input", -1), &none()).unwrap();
    s.put_writes(&cfg, &[("ch", json!("val"))], "T", "").unwrap();
    s.put_writes(&cfg, &[("ch", json!("val"))], "T", "").unwrap();
    assert_eq!(s.get_tuple(&cfg).unwrap().unwrap().pending_writes.len(), 1);
}

/// a call whose writes are all special upserts; any other call is
/// insert-or-ignore, special rows included.
#[test]
fn special_writes_upsert_only_when_every_write_of_the_call_is_special() {
    let s = saver();
    let cfg = s.put(&CheckpointConfig::thread("t"), &cp(), &meta("input", -1), &none()).unwrap();
    s.put_writes(&cfg, &[("__error__", json!("e1")), ("ch", json!("a"))], "T", "").unwrap();
    s.put_writes(&cfg, &[("__error__", json!("e2")), ("ch", json!("b"))], "T", "").unwrap();
    let w = s.get_tuple(&cfg).unwrap().unwrap().pending_writes;
    assert_eq!(w, vec![pw("T", "__error__", json!("e1")), pw("T", "ch", json!("a"))].into());
    s.put_writes(&cfg, &[("__error__", json!("e3"))], "T", "").unwrap();
    let w = s.get_tuple(&cfg).unwrap().unwrap().pending_writes;
    assert_eq!(w, vec![pw("T", "__error__", json!("e3")), pw("T", "ch", json!("a"))].into());
}

#[test]
fn writes_belong_to_their_checkpoint() {
    let s = saver();
    let a = s.put(&CheckpointConfig::thread("t"), &cp(), &meta("input", -1), &none()).unwrap();
    s.put_writes(&a, &[("ch", json!(1))], "T", "").unwrap();
    let b = s.put(&a, &cp(), &meta("loop", 0), &none()).unwrap();
    assert!(s.get_tuple(&b).unwrap().unwrap().pending_writes.is_empty());
    assert_eq!(s.get_tuple(&a).unwrap().unwrap().pending_writes.len(), 1);
}

#[test]
fn writes_are_isolated_by_namespace() {
    let s = saver();
    let c = cp();
    let root = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap();
    let child = s.put(&CheckpointConfig::thread("t").ns("child:1"), &c, &meta("input", -1), &none()).unwrap();
    s.put_writes(&root, &[("ch", json!("root"))], "T", "").unwrap();
    s.put_writes(&child, &[("ch", json!("child"))], "T", "").unwrap();
    assert_eq!(
        s.get_tuple(&root).unwrap().unwrap().pending_writes,
        vec![pw("T", "ch", json!("root"))].into()
    );
    assert_eq!(
        s.get_tuple(&child).unwrap().unwrap().pending_writes,
        vec![pw("T", "ch", json!("child"))].into()
    );
}

#[test]
fn delete_thread_removes_every_namespace() {
    let s = saver();
    put_chain(&s, "t", "", 2);
    put_chain(&s, "t", "child:1", 2);
    put_chain(&s, "u", "", 1);
    s.delete_thread("t").unwrap();
    assert!(s.list(&ListQuery::thread("t")).unwrap().is_empty());
    assert_eq!(s.list(&ListQuery::thread("u")).unwrap().len(), 1);
    s.delete_thread("nope").unwrap();
}

/// re-putting an id replaces checkpoint and metadata and keeps the
/// stored parent (Postgres behaviour); writes survive.
#[test]
fn re_putting_an_id_replaces_it_and_keeps_its_parent() {
    let s = saver();
    let ids_ = put_chain(&s, "t", "", 2);
    let target = CheckpointConfig::thread("t").at(&ids_[1]);
    s.put_writes(&target, &[("ch", json!(1))], "T", "").unwrap();
    let mut again = Checkpoint::with_id(&ids_[1]);
    again.extra.insert("note".into(), json!("second"));
    let other_parent = CheckpointConfig::thread("t").at(uuid6(None).to_string());
    s.put(&other_parent, &again, &meta("update", 7), &none()).unwrap();
    let t = s.get_tuple(&target).unwrap().unwrap();
    assert_eq!(t.metadata.step(), Some(7));
    assert_eq!(t.checkpoint.extra.get("note"), Some(&json!("second")));
    assert_eq!(t.parent_config.unwrap().checkpoint_id.as_deref(), Some(ids_[0].as_str()));
    assert_eq!(t.pending_writes.len(), 1);
}

#[test]
fn channel_values_round_trip() {
    let s = saver();
    let vals =
        json!({"str_val": "hello", "int_val": 42, "list_val": [1, 2, 3], "dict_val": {"nested": true}});
    let (c, nv) = cp_with(vals.clone());
    let cfg = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &nv).unwrap();
    let got = s.get(&cfg).unwrap().unwrap();
    assert_eq!(got, c);
    assert_eq!(Value::Object(got.values_json()), vals);
}

#[test]
fn a_channel_dropped_from_versions_and_values_is_absent_and_older_checkpoints_keep_it() {
    let s = saver();
    let (c1, nv1) = cp_with(json!({"a": [1], "b": [2]}));
    let cfg1 = s.put(&CheckpointConfig::thread("t"), &c1, &meta("input", -1), &nv1).unwrap();
    let mut c2 = cp();
    c2.channel_values.insert("a".into(), json!([1, 1]).into());
    c2.channel_versions.insert("a".into(), ChannelVersion::Int(2));
    let nv2: ChannelVersions = [("a".to_string(), ChannelVersion::Int(2))].into_iter().collect();
    let cfg2 = s.put(&cfg1, &c2, &meta("loop", 0), &nv2).unwrap();
    let got2 = s.get(&cfg2).unwrap().unwrap();
    assert_eq!(Value::Object(got2.values_json()), json!({"a": [1, 1]}));
    let got1 = s.get(&cfg1).unwrap().unwrap();
    assert_eq!(Value::Object(got1.values_json()), json!({"a": [1], "b": [2]}));
}

/// LangGraph's savers drop a value whose channel has no version without a
/// word; `put` refuses it (docs/design.md, "Writes that would lose data").
#[test]
fn put_refuses_a_value_without_a_version() {
    let s = saver();
    let mut c = cp();
    c.channel_values.insert("a".into(), json!([1]).into());
    c.channel_values.insert("b".into(), json!([2]).into()); // no version
    c.channel_versions.insert("a".into(), ChannelVersion::Int(1));
    let nv: ChannelVersions = [("a".to_string(), ChannelVersion::Int(1))].into_iter().collect();
    let err = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &nv).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("'b'")), "{err}");
    assert!(s.get_tuple(&CheckpointConfig::thread("t")).unwrap().is_none(), "nothing written");
}

/// LangGraph's Postgres saver stores a non-primitive value only if its
/// channel is in `new_versions`, so a changed channel left out of it is lost
/// on load. `put` refuses such a checkpoint; primitives are inline and need
/// no blob.
#[test]
fn put_refuses_a_changed_channel_left_out_of_new_versions() {
    let s = saver();
    let mut c = cp();
    c.channel_values.insert("obj".into(), json!({"k": 1}).into());
    c.channel_values.insert("n".into(), json!(3).into());
    c.channel_versions.insert("obj".into(), ChannelVersion::Int(1));
    c.channel_versions.insert("n".into(), ChannelVersion::Int(1));
    let err = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("'obj'")), "{err}");
    assert!(s.get_tuple(&CheckpointConfig::thread("t")).unwrap().is_none(), "nothing written");
    c.channel_values.remove("obj");
    c.channel_versions.remove("obj");
    let cfg = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap();
    assert_eq!(Value::Object(s.get(&cfg).unwrap().unwrap().values_json()), json!({"n": 3}));
}

#[test]
fn ids_sort_by_creation_and_versions_count_up() {
    let ids: Vec<String> = (0..10_000).map(|_| uuid6(None).to_string()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(ids.iter().all(|i| &i[14..15] == "6"));
    assert_eq!(uuid6(Some(-1)).to_string().split('-').nth(3), Some("bfff"));
    let v = next_version(None).to_string();
    assert!(v.starts_with("00000000000000000000000000000001."));
}

fn with_writes(s: &Checkpointer, thread: &str) -> Vec<String> {
    let ids_ = put_chain(s, thread, "", 3);
    for id in &ids_ {
        s.put_writes(&CheckpointConfig::thread(thread).at(id), &[("ch", json!(id))], "T", "p:1").unwrap();
    }
    ids_
}

#[test]
fn copy_thread_copies_everything_and_refuses_a_non_empty_target() {
    let s = saver();
    let (c, nv) = cp_with(json!({"msgs": ["a", "b"]}));
    let cfg = s.put(&CheckpointConfig::thread("src"), &c, &meta("input", -1), &nv).unwrap();
    s.put_writes(&cfg, &[("x", json!(1))], "T", "").unwrap();
    with_writes(&s, "src");
    put_chain(&s, "src", "child:1", 2);
    let before = s.list(&ListQuery::thread("src")).unwrap();
    s.copy_thread("src", "dst").unwrap();
    let src = s.list(&ListQuery::thread("src")).unwrap();
    let dst = s.list(&ListQuery::thread("dst")).unwrap();
    assert_eq!(src, before, "source unchanged");
    assert_eq!(ids(&dst), ids(&src));
    for (a, b) in src.iter().zip(&dst) {
        assert_eq!(a.checkpoint, b.checkpoint);
        assert_eq!(a.metadata, b.metadata);
        assert_eq!(a.pending_writes, b.pending_writes);
        assert_eq!(
            a.parent_config.as_ref().map(|p| &p.checkpoint_id),
            b.parent_config.as_ref().map(|p| &p.checkpoint_id)
        );
        assert_eq!(b.config.thread_id, "dst");
    }
    s.copy_thread("missing", "empty").unwrap();
    assert!(s.list(&ListQuery::thread("empty")).unwrap().is_empty());
    assert!(matches!(s.copy_thread("src", "dst"), Err(Error::Conflict(_))));
}

#[test]
fn prune_keeps_the_latest_or_deletes() {
    let s = saver();
    let root = with_writes(&s, "t");
    let child = put_chain(&s, "t", "child:1", 2);
    put_chain(&s, "other", "", 2);
    s.prune(&["t"], PruneStrategy::KeepLatest).unwrap();
    let left = s.list(&ListQuery::thread("t")).unwrap();
    let mut got = ids(&left);
    got.sort();
    let mut expect = vec![root[2].clone(), child[1].clone()];
    expect.sort();
    assert_eq!(got, expect);
    let kept = s.get_tuple(&CheckpointConfig::thread("t").at(&root[2])).unwrap().unwrap();
    assert_eq!(kept.pending_writes.len(), 1);
    s.prune(&["t"], PruneStrategy::Delete).unwrap();
    assert!(s.list(&ListQuery::thread("t")).unwrap().is_empty());
    assert_eq!(s.list(&ListQuery::thread("other")).unwrap().len(), 2);
    s.prune::<&str>(&[], PruneStrategy::KeepLatest).unwrap();
    s.prune(&["nope"], PruneStrategy::Delete).unwrap();
    assert!(matches!("bogus".parse::<PruneStrategy>(), Err(Error::InvalidArgument(_))));
}

#[test]
fn delete_for_runs_removes_the_runs_checkpoints() {
    let s = saver();
    let a =
        s.put(&CheckpointConfig::thread("t"), &cp(), &Metadata::new().with("run_id", "r1"), &none()).unwrap();
    s.put_writes(&a, &[("ch", json!(1))], "T", "").unwrap();
    let b = s.put(&a, &cp(), &Metadata::new().with("run_id", "r2"), &none()).unwrap();
    let c = s
        .put(
            &CheckpointConfig::thread("t").ns("child:1"),
            &cp(),
            &Metadata::new().with("run_id", "r1"),
            &none(),
        )
        .unwrap();
    let d =
        s.put(&CheckpointConfig::thread("u"), &cp(), &Metadata::new().with("run_id", "r1"), &none()).unwrap();
    s.delete_for_runs::<&str>(&[]).unwrap();
    s.delete_for_runs(&["nope"]).unwrap();
    s.delete_for_runs(&["r1"]).unwrap();
    assert!(s.get_tuple(&a).unwrap().is_none());
    assert!(s.get_tuple(&c).unwrap().is_none());
    assert!(s.get_tuple(&d).unwrap().is_none());
    assert!(s.get_tuple(&b).unwrap().is_some());
}

/// the metadata filter is the Store's filter language, so
/// operators work on history too.
#[test]
fn list_metadata_filter_uses_the_filter_language() {
    let s = saver();
    let all = put_chain(&s, "t", "", 8);
    let got = s.list(&ListQuery::thread("t").filter(json!({"step": {"$gte": 5}}))).unwrap();
    assert_eq!(ids(&got), vec![all[7].clone(), all[6].clone(), all[5].clone()]);
    let got = s
        .list(&ListQuery::thread("t").filter(json!({"$or": [{"step": 0}, {"step": {"$in": [6, 7]}}]})))
        .unwrap();
    assert_eq!(got.len(), 3);
}

/// pending writes of every listed checkpoint come back with it.
#[test]
fn list_includes_pending_writes() {
    let s = saver();
    let ids_ = with_writes(&s, "t");
    let got = s.list(&ListQuery::thread("t")).unwrap();
    for t in &got {
        assert_eq!(t.pending_writes, vec![pw("T", "ch", json!(t.checkpoint.id))].into());
    }
    assert_eq!(got.len(), ids_.len());
}

/// ids are UUIDv6 and sort by creation; versions use Python's
/// format, and integer versions are accepted.
#[test]
fn integer_and_string_versions_both_work() {
    let s = saver();
    let mut c = cp();
    let v = s.get_next_version(None);
    c.channel_values.insert("a".into(), (json!([1])).into());
    c.channel_values.insert("b".into(), (json!([2])).into());
    c.channel_versions.insert("a".into(), v.clone());
    c.channel_versions.insert("b".into(), ChannelVersion::Int(3));
    let nv: ChannelVersions = c.channel_versions.clone();
    let cfg = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &nv).unwrap();
    let got = s.get(&cfg).unwrap().unwrap();
    assert_eq!(got.channel_versions.get("a"), Some(&v));
    assert_eq!(got.channel_versions.get("b"), Some(&ChannelVersion::Int(3)));
    assert_eq!(Value::Object(got.values_json()), json!({"a": [1], "b": [2]}));
}

/// A blob version names one value forever: re-putting it with the same value
/// is a harmless retry, with another value a [`Error::Conflict`] (LangGraph's
/// Postgres saver keeps the first value and returns the old one on read).
/// Unchanged channels share one blob across checkpoints.
#[test]
fn a_version_reused_for_another_value_is_a_conflict_and_unchanged_channels_share_blobs() {
    let s = saver();
    let (c1, nv) = cp_with(json!({"msgs": ["first"]}));
    let cfg1 = s.put(&CheckpointConfig::thread("t"), &c1, &meta("input", -1), &nv).unwrap();
    let mut c2 = c1.clone();
    c2.id = uuid6(None).to_string();
    c2.channel_values.insert("msgs".into(), json!(["rewritten"]).into());
    let err = s.put(&cfg1, &c2, &meta("loop", 0), &nv).unwrap_err(); // same version again
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(s.get(&CheckpointConfig::thread("t").at(&c2.id)).unwrap().is_none(), "nothing written");
    let mut retry = c1.clone();
    retry.id = uuid6(None).to_string();
    let cfg2 = s.put(&cfg1, &retry, &meta("loop", 0), &nv).unwrap(); // same version, same value
    assert_eq!(s.get(&cfg2).unwrap().unwrap().channel_values["msgs"], json!(["first"]));
    let mut c3 = c1.clone();
    c3.id = uuid6(None).to_string();
    let cfg3 = s.put(&cfg2, &c3, &meta("loop", 1), &none()).unwrap(); // unchanged: shares
    assert_eq!(s.get(&cfg3).unwrap().unwrap().channel_values["msgs"], json!(["first"]));
}

/// fork creates a new checkpoint whose parent is the chosen one;
/// the old branch is untouched; `fork_with` gives the changed channels new
/// versions and shares the rest.
#[test]
fn fork_and_fork_with_branch_the_history() {
    let s = saver();
    let (c1, nv) = cp_with(json!({"msgs": ["a"], "profile": {"name": "x"}}));
    let cfg1 = s.put(&CheckpointConfig::thread("t"), &c1, &meta("loop", 0), &nv).unwrap();
    let mut c2 = c1.clone();
    c2.id = uuid6(None).to_string();
    c2.channel_values.insert("msgs".into(), (json!(["a", "b"])).into());
    c2.channel_versions.insert("msgs".into(), ChannelVersion::Int(2));
    let nv2: ChannelVersions = [("msgs".to_string(), ChannelVersion::Int(2))].into_iter().collect();
    let cfg2 = s.put(&cfg1, &c2, &meta("loop", 1), &nv2).unwrap();

    let f = s.fork(&cfg1).unwrap();
    let ft = s.get_tuple(&f).unwrap().unwrap();
    assert_eq!(ft.parent_config.unwrap().checkpoint_id, cfg1.checkpoint_id);
    assert_eq!(ft.metadata.source(), Some("fork"));
    assert_eq!(ft.checkpoint.channel_values, c1.channel_values);
    assert_eq!(s.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap().checkpoint.id, ft.checkpoint.id);

    let mut vals = Map::new();
    vals.insert("msgs".into(), json!(["a", "edited"]));
    let u = s.fork_with(&cfg1, vals).unwrap();
    let ut = s.get_tuple(&u).unwrap().unwrap();
    assert_eq!(ut.metadata.source(), Some("update"));
    assert_eq!(ut.metadata.step(), Some(1));
    assert_eq!(ut.checkpoint.channel_values["msgs"], json!(["a", "edited"]));
    assert_eq!(ut.checkpoint.channel_values["profile"], json!({"name": "x"}));
    assert_eq!(ut.checkpoint.updated_channels, Some(vec!["msgs".to_string()]));
    assert_eq!(s.get(&cfg2).unwrap().unwrap().channel_values["msgs"], json!(["a", "b"]), "old branch intact");
    assert!(matches!(s.fork(&CheckpointConfig::thread("nope")), Err(Error::NotFound(_))));
}

/// Checkpoint keys the struct does not name (e.g. legacy `pending_sends`)
/// round-trip.
#[test]
fn unknown_checkpoint_keys_round_trip() {
    let s = saver();
    let mut c = cp();
    c.v = 1;
    c.extra.insert("pending_sends".into(), json!([]));
    c.versions_seen.insert("node".into(), [("a".to_string(), ChannelVersion::Int(1))].into_iter().collect());
    c.updated_channels = Some(vec!["a".into()]);
    let cfg = s.put(&CheckpointConfig::thread("t"), &c, &meta("input", -1), &none()).unwrap();
    assert_eq!(s.get(&cfg).unwrap().unwrap(), c);
}

/// top-level keys are ANDed, dotted keys are nested paths, and a
/// key outside `[A-Za-z0-9_.-]` (such as an SQL fragment) is a typed error,
/// never spliced into SQL.
#[test]
fn filter_keys_are_paths_and_validated() {
    let s = saver();
    s.put(
        &CheckpointConfig::thread("t"),
        &cp(),
        &Metadata::new().with("user", json!({"tier": "pro"})).with("step", 1),
        &none(),
    )
    .unwrap();
    let n = |f: Value| s.list(&ListQuery::thread("t").filter(f)).unwrap().len();
    assert_eq!(n(json!({"user.tier": "pro", "step": 1})), 1);
    assert_eq!(n(json!({"user.tier": "pro", "step": 2})), 0);
    for bad in ["x') OR 1=1 --", "a b", "a..b", "$.x"] {
        let err = s.list(&ListQuery::thread("t").filter(json!({ bad: 1 }))).unwrap_err();
        assert!(matches!(err, Error::InvalidFilter { .. }), "{bad}: {err:?}");
    }
    assert_eq!(s.list(&ListQuery::thread("t")).unwrap().len(), 1, "nothing was harmed");
}

/// types never compare across kinds, `$ne` matches a
/// missing key, `true` is not 1.
#[test]
fn metadata_filters_follow_json_semantics() {
    let s = saver();
    s.put(&CheckpointConfig::thread("t"), &cp(), &Metadata::new().with("step", 1).with("ok", true), &none())
        .unwrap();
    let n = |f: Value| s.list(&ListQuery::thread("t").filter(f)).unwrap().len();
    assert_eq!(n(json!({"step": 1.0})), 1);
    assert_eq!(n(json!({"step": "1"})), 0);
    assert_eq!(n(json!({"ok": 1})), 0);
    assert_eq!(n(json!({"ok": true})), 1);
    assert_eq!(n(json!({"missing": {"$ne": 3}})), 1);
    assert_eq!(n(json!({"missing": {"$gt": 0}})), 0);
}

/// Reference §2.3 and §2.4: SqliteSaver and InMemorySaver test the id with
/// `if checkpoint_id := get_checkpoint_id(config)`, so an empty id means
/// none: the newest checkpoint for `get_tuple`, no id condition for `list`.
#[test]
fn an_empty_checkpoint_id_reads_as_none_in_get_tuple_and_list() {
    let s = saver();
    let ids = put_chain(&s, "t", "", 3);
    let empty = CheckpointConfig::thread("t").at("");
    assert_eq!(s.get_tuple(&empty).unwrap().unwrap().config.checkpoint_id.as_deref(), Some(ids[2].as_str()));
    assert_eq!(s.list(&ListQuery::from_config(&empty)).unwrap().len(), 3);
    let json = CheckpointConfig::from_json(&json!({"configurable": {"thread_id": "t", "checkpoint_id": ""}}));
    assert_eq!(json.unwrap().checkpoint_id, None);
    // So `put_writes` under an empty id is refused: no read could find it.
    let err = s.put_writes(&empty, &[("x", json!(1))], "task", "").unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(s.list(&ListQuery::thread("t")).unwrap().iter().all(|t| t.pending_writes.is_empty()));
}

/// Reference §2.4: `list(config)` lists every namespace of the thread when
/// the config has no `checkpoint_ns` (or a null one), only that namespace
/// when it names one (`""` included): `ListQuery::from_json`. A typed
/// `CheckpointConfig` always names one, so `from_config` lists only it.
#[test]
fn list_from_a_json_config_without_a_namespace_lists_every_namespace() {
    let s = saver();
    put_chain(&s, "t", "", 2);
    put_chain(&s, "t", "child:1", 3);
    let count = |q: Value| s.list(&ListQuery::from_json(&q).unwrap()).unwrap().len();
    assert_eq!(count(json!({"configurable": {"thread_id": "t"}})), 5);
    assert_eq!(count(json!({"configurable": {"thread_id": "t", "checkpoint_ns": null}})), 5);
    assert_eq!(count(json!({"thread_id": "t", "checkpoint_ns": ""})), 2);
    assert_eq!(count(json!({"configurable": {"thread_id": "t", "checkpoint_ns": "child:1"}})), 3);
    assert_eq!(s.list(&ListQuery::from_config(&CheckpointConfig::thread("t"))).unwrap().len(), 2);
    assert!(matches!(ListQuery::from_json(&json!({"configurable": {}})), Err(Error::InvalidConfig(_))));
    assert!(matches!(ListQuery::from_json(&json!([1])), Err(Error::InvalidConfig(_))));
}
