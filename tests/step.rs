//! The step API (`Checkpointer::start` / `step` / `commit`): what it computes,
//! what it refuses, and how it stores a growing list (docs/design.md, "Writes
//! that would lose data" and "Checkpoint storage").

use agentstate::checkpoint::ChannelVersion;
use agentstate::{
    Checkpoint, CheckpointConfig, CheckpointTuple, Checkpointer, Db, Error, ListQuery, Metadata,
};
use serde_json::{json, Value};

fn msg(i: usize) -> Value {
    json!({"role": if i % 2 == 0 { "user" } else { "ai" }, "content": format!("message {i} {}", "x".repeat(100))})
}

/// A checkpointer on a new file (the directory lives as long as the first
/// value).
fn on_file(name: &str) -> (tempfile::TempDir, std::path::PathBuf, Checkpointer) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let saver = Db::open(&path).unwrap().checkpointer();
    (dir, path, saver)
}

fn count(db: &std::path::Path, sql: &str) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A checkpoint's `created_at` (what age-based retention reads) is the
/// time of its commit in SQLite's `strftime('%Y-%m-%d %H:%M:%f', 'now')`
/// form, as the column's default would have written it.
#[test]
fn created_at_is_the_commit_time_in_sqlite_form() {
    let (_dir, path, saver) = on_file("c.db");
    let first = saver.start(&CheckpointConfig::thread("t")).set("x", json!(1)).commit().unwrap();
    saver.step(&first).set("x", json!(2)).commit().unwrap();
    assert_eq!(
        count(&path, "SELECT COUNT(*) FROM checkpoints WHERE created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]'"),
        2
    );
    assert_eq!(count(&path, "SELECT COUNT(*) FROM checkpoints WHERE abs(julianday(created_at) - julianday('now')) * 86400 < 60"), 2);
}

#[test]
fn a_step_versions_what_changed_and_keeps_the_rest() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let first = saver
        .start(&CheckpointConfig::thread("t"))
        .set("topic", json!({"name": "rust"}))
        .set("n", json!(0))
        .commit()
        .unwrap();
    assert_eq!(
        *first.metadata,
        Metadata::new().with("source", "input").with("step", -1).with("parents", json!({}))
    );
    assert_eq!(first.parent_config, None);
    let second = saver.step(&first).set("n", json!(1)).append("messages", [msg(0)]).commit().unwrap();
    let (a, b) = (&first.checkpoint, &second.checkpoint);
    assert!(b.id > a.id);
    assert_eq!(b.channel_versions["topic"], a.channel_versions["topic"], "unchanged: same version");
    assert_eq!(b.channel_versions["n"].counter(), a.channel_versions["n"].counter() + 1);
    assert!(matches!(b.channel_versions["messages"], ChannelVersion::Str(_)));
    assert_eq!(b.updated_channels, Some(vec!["messages".to_string(), "n".to_string()]));
    assert_eq!(second.metadata.step(), Some(0));
    assert_eq!(second.metadata.source(), Some("loop"));
    assert_eq!(second.parent_config.as_ref(), Some(&first.config));
    // What commit returned is what a read returns.
    assert_eq!(saver.get_tuple(&second.config).unwrap().unwrap(), second);
    // Clearing a channel keeps a version and drops the value.
    let third = saver.step(&second).clear("topic").commit().unwrap();
    let read = saver.get_tuple(&third.config).unwrap().unwrap();
    assert!(!read.checkpoint.channel_values.contains_key("topic"));
    assert!(read.checkpoint.channel_versions.contains_key("topic"));
    assert_eq!(read, third);
}

/// A channel a step clears (or carries over empty) is marked empty in the
/// checkpoint row itself: no blob row is written for it (docs/format.md,
/// migration 8), it reads back as "version, no value" in every handle, the
/// file checks clean, and pruning keeps nothing for it. An `empty` row that
/// an earlier `put` wrote still reads the same.
#[test]
fn an_empty_channel_costs_a_step_no_blob_row() {
    let (_dir, path, saver) = on_file("empty.db");
    let blob_rows = || count(&path, "SELECT COUNT(*) FROM checkpoint_blobs WHERE channel = 'route'");
    let first = saver.start(&CheckpointConfig::thread("t")).set("route", json!(["agent"])).commit().unwrap();
    assert_eq!(blob_rows(), 1);
    let cleared = saver.step(&first).clear("route").set("n", json!(1)).commit().unwrap();
    let carried = saver.step(&cleared).set("n", json!(2)).commit().unwrap();
    assert_eq!(blob_rows(), 1, "only the value's row");
    let fresh = Db::open(&path).unwrap().checkpointer();
    for t in [&cleared, &carried] {
        for s in [&saver, &fresh] {
            let read = s.get_tuple(&t.config).unwrap().unwrap();
            assert_eq!(&read, t);
            assert!(!read.checkpoint.channel_values.contains_key("route"));
            assert_eq!(
                read.checkpoint.channel_versions["route"],
                cleared.checkpoint.channel_versions["route"]
            );
        }
    }
    assert!(fresh.db().check().unwrap().is_ok());
    // Keeping only the newest: the first checkpoint's value goes, and no
    // blob is needed for the empty channel.
    saver.prune(&["t"], agentstate::checkpoint::PruneStrategy::KeepLatest).unwrap();
    assert_eq!(blob_rows(), 0);
    assert_eq!(saver.get_tuple(&carried.config).unwrap().unwrap(), carried);

    // A put that lists a channel without a value stores an `empty` row (its
    // caller may leave out values its versions already stored); a step
    // after it marks the channel in its row.
    let mut cp = Checkpoint::clone(&carried.checkpoint);
    cp.id = agentstate::checkpoint::uuid6(Some(5)).to_string();
    let v = agentstate::checkpoint::next_version(cp.channel_versions.get("route"));
    cp.channel_versions.insert("route".into(), v.clone());
    let put = saver.put(&carried.config, &cp, &Metadata::new(), &[("route".to_string(), v)].into()).unwrap();
    assert_eq!(count(&path, "SELECT COUNT(*) FROM checkpoint_blobs WHERE type = 'empty'"), 1);
    let head = saver.get_tuple(&put).unwrap().unwrap();
    assert!(!head.checkpoint.channel_values.contains_key("route"));
    let next = saver.step(&head).set("n", json!(3)).commit().unwrap();
    assert_eq!(saver.get_tuple(&next.config).unwrap().unwrap(), next);
    assert!(saver.db().check().unwrap().is_ok());
}

/// LangGraph (through the Python package's `put_encoded`, or `put`) may
/// continue a history the engine wrote: its next checkpoint leaves the
/// channel a step emptied out of `new_versions`, at the same version, with
/// no value. The parent's row says the channel is empty there, so the put is
/// taken (an `empty` row then answers for it); a version the parent does not
/// mark empty, with no stored value, is still refused (its value would be
/// lost).
#[test]
fn a_put_continues_a_step_that_left_a_channel_empty() {
    use agentstate::checkpoint::{uuid6, ChannelVersions};
    let (_dir, _path, saver) = on_file("continue.db");
    let first = saver.start(&CheckpointConfig::thread("t")).set("route", json!(["a"])).commit().unwrap();
    let cleared = saver.step(&first).clear("route").set("n", json!(1)).commit().unwrap();
    // Only the cleared checkpoint is kept: no row holds "route" any more.
    saver.prune(&["t"], agentstate::checkpoint::PruneStrategy::KeepLatest).unwrap();
    let mut cp = Checkpoint::clone(&cleared.checkpoint);
    cp.channel_values.insert("n".into(), json!(2).into());
    let n = agentstate::checkpoint::next_version(cp.channel_versions.get("n"));
    cp.channel_versions.insert("n".into(), n.clone());
    let listed: ChannelVersions = [("n".to_string(), n)].into();
    for (i, encoded) in [(1, false), (2, true)] {
        cp.id = uuid6(Some(i)).to_string();
        let put = if encoded {
            let inline = cp.clone();
            saver.put_encoded(&cleared.config, &inline, &Default::default(), &Metadata::new(), &listed)
        } else {
            saver.put(&cleared.config, &cp, &Metadata::new(), &listed)
        }
        .unwrap();
        let read = saver.get_tuple(&put).unwrap().unwrap();
        assert!(!read.checkpoint.channel_values.contains_key("route"), "encoded: {encoded}");
        assert_eq!(read.checkpoint.channel_versions["route"], cleared.checkpoint.channel_versions["route"]);
    }
    assert!(saver.db().check().unwrap().is_ok());
    // Another version of the emptied channel, never stored: refused.
    cp.id = uuid6(Some(3)).to_string();
    let other = agentstate::checkpoint::next_version(cp.channel_versions.get("route"));
    cp.channel_versions.insert("route".into(), other);
    let refused = saver.put(&cleared.config, &cp, &Metadata::new(), &listed);
    assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
}

/// A step's returned tuple is what a read returns, in the writing handle
/// and in a fresh one; any later change, here or in another process, is
/// seen.
#[test]
fn a_committed_step_reads_back_as_returned_and_later_changes_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let latest = CheckpointConfig::thread("t");
    let mut head = saver.start(&latest).set("n", json!(0)).commit().unwrap();
    for i in 1..40 {
        head = saver.step(&head).set("n", json!(i)).append("messages", [msg(i)]).commit().unwrap();
        assert_eq!(saver.get_tuple(&latest).unwrap().unwrap(), head);
        assert_eq!(saver.get_tuple(&head.config).unwrap().unwrap(), head);
    }
    assert_eq!(Db::open(&path).unwrap().checkpointer().get_tuple(&latest).unwrap().unwrap(), head);
    // Writes stored after the step show up in the next read.
    saver.put_writes(&head.config, &[("n", json!(99))], "task-1", "").unwrap();
    let read = saver.get_tuple(&latest).unwrap().unwrap();
    assert_eq!(read.pending_writes.len(), 1);
    // Another process continues the thread: the writer sees the new head.
    let other = Db::open(&path).unwrap().checkpointer();
    let next = other.step(&read).set("n", json!(100)).commit().unwrap();
    assert_eq!(saver.get_tuple(&latest).unwrap().unwrap(), next);
    // A fork is cached by its id only: the head stays the newest.
    let fork = saver.step(&head).fork().set("n", json!(-1)).commit().unwrap();
    assert_eq!(saver.get_tuple(&fork.config).unwrap().unwrap(), fork);
    let newest = saver.get_tuple(&latest).unwrap().unwrap();
    let ids = [fork.checkpoint.id.clone(), next.checkpoint.id.clone()];
    assert_eq!(newest.checkpoint.id, ids.into_iter().max().unwrap());
}

#[test]
fn only_the_head_can_be_continued_and_a_thread_has_one_root() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    // Two handles on one file, as two processes would have.
    let (a, b) = (Db::open(&path).unwrap().checkpointer(), Db::open(&path).unwrap().checkpointer());
    let root = a.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
    assert!(matches!(
        b.start(&CheckpointConfig::thread("t")).set("n", json!(9)).commit(),
        Err(Error::Conflict(_))
    ));
    let seen_by_b = b.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
    a.step(&root).set("n", json!(1)).commit().unwrap();
    let err = b.step(&seen_by_b).set("n", json!(2)).commit().unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    // Nothing was written by the refused steps; a fork on purpose is fine.
    assert_eq!(a.list(&ListQuery::thread("t")).unwrap().len(), 2);
    let forked = b.step(&seen_by_b).fork().set("n", json!(3)).commit().unwrap();
    assert_eq!(forked.parent_config.as_ref(), Some(&root.config));
    assert_eq!(a.list(&ListQuery::thread("t")).unwrap().len(), 3);
    // Namespaces are separate heads.
    a.start(&CheckpointConfig::thread("t").ns("sub:1")).set("n", json!(0)).commit().unwrap();
}

#[test]
fn two_threads_racing_on_one_head_commit_exactly_once() {
    let (_dir, path, saver) = on_file("race.db");
    let mut head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
    for round in 1..=20 {
        let results: Vec<Result<CheckpointTuple, Error>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|w| {
                    let saver = Db::open(&path).unwrap().checkpointer();
                    let head = head.clone();
                    s.spawn(move || saver.step(&head).set("n", json!(round * 10 + w)).commit())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        assert!(results.iter().all(|r| r.is_ok() || matches!(r, Err(Error::Conflict(_)))));
        head = won[0].clone();
    }
    assert_eq!(saver.list(&ListQuery::thread("t")).unwrap().len(), 21);
}

#[test]
fn an_appended_list_stores_each_element_once_and_reads_back_cold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.db");
    let n = 300;
    let mut heads = vec![];
    {
        let saver = Db::open(&path).unwrap().checkpointer();
        let mut head =
            saver.start(&CheckpointConfig::thread("t")).set("messages", json!([])).commit().unwrap();
        for i in 0..n {
            head = saver.step(&head).append("messages", [msg(i)]).commit().unwrap();
            heads.push(head.clone());
        }
        // A branch from the middle grows its own tail on the same chain.
        let mid = &heads[n / 2];
        let mut branch = saver.step(mid).fork().append("messages", [json!("branch 0")]).commit().unwrap();
        for i in 1..20 {
            branch = saver.step(&branch).append("messages", [json!(format!("branch {i}"))]).commit().unwrap();
        }
        heads.push(branch);
    }
    // Every element once: the stored bytes stay within a small factor of
    // the messages' own size (a whole list per version would be ~150x).
    let bytes = count(&path, "SELECT SUM(LENGTH(blob)) FROM checkpoint_blobs WHERE channel = 'messages'");
    let own: usize = (0..n).map(|i| serde_json::to_string(&msg(i)).unwrap().len()).sum();
    assert!((bytes as usize) < own * 2, "{bytes} bytes stored for {own} bytes of messages");
    let deltas = count(&path, "SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL");
    assert!(deltas as usize >= n - 20, "{deltas} deltas");
    // A fresh handle (nothing cached) reads every version, in any order.
    let saver = Db::open(&path).unwrap().checkpointer();
    for h in heads.iter().rev().step_by(7).chain(heads.iter().step_by(11)) {
        assert_eq!(&saver.get_tuple(&h.config).unwrap().unwrap(), h);
    }
    let fresh = Db::open(&path).unwrap().checkpointer();
    let all = fresh.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(all.len(), n + 1 + 20);
    for h in &heads {
        assert!(all.contains(h));
    }
    let branch = heads.last().unwrap().checkpoint.channel_values["messages"].as_list().unwrap();
    assert_eq!(branch.len(), n / 2 + 1 + 20);
    assert_eq!(branch.last(), Some(&json!("branch 19")));
}

#[test]
fn a_missing_blob_is_an_error_never_an_absent_channel() {
    let (_dir, path, saver) = on_file("m.db");
    let head = saver.start(&CheckpointConfig::thread("t")).set("state", json!({"k": 1})).commit().unwrap();
    rusqlite::Connection::open(&path).unwrap().execute("DELETE FROM checkpoint_blobs", []).unwrap();
    let fresh = Db::open(&path).unwrap().checkpointer();
    assert!(matches!(fresh.get_tuple(&head.config), Err(Error::Corrupt { .. })));
    assert!(matches!(fresh.list(&ListQuery::thread("t")), Err(Error::Corrupt { .. })));
}

#[test]
fn explicit_versions_updated_channels_and_ids() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let cfg = CheckpointConfig::thread("explicit");
    let v7 = ChannelVersion::from("00000000000000000000000000000007.0.5");
    let first = saver
        .start(&cfg)
        .set("a", json!(1))
        .clear("b")
        .version("a", v7.clone())
        .updated_channels(["b".to_string(), "a".to_string(), "b".to_string()])
        .commit()
        .unwrap();
    assert_eq!(first.checkpoint.channel_versions["a"], v7);
    assert_eq!(first.checkpoint.channel_versions["b"].counter(), 1);
    assert_eq!(first.checkpoint.updated_channels, Some(vec!["a".to_string(), "b".to_string()]));
    let back = saver.get_tuple(&cfg).unwrap().unwrap();
    assert_eq!(back.checkpoint.channel_versions["a"], v7);
    assert_eq!(back.checkpoint.channel_values["a"].to_value(), json!(1));

    // A version for a channel the step does not update names no value.
    let err = saver.step(&first).version("zzz", v7.clone()).commit().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");

    let second = saver.step(&first).set("a", json!(2)).without_updated_channels().commit().unwrap();
    assert_eq!(second.checkpoint.updated_channels, None);
    assert_eq!(saver.get_tuple(&cfg).unwrap().unwrap().checkpoint.updated_channels, None);

    // An explicit id must be a uuid after the parent's.
    let bad = saver.step(&second).set("a", json!(3)).id(first.checkpoint.id.clone()).commit().unwrap_err();
    assert!(matches!(bad, Error::InvalidArgument(_)), "{bad:?}");
    let bad = saver.step(&second).set("a", json!(3)).id("not-a-uuid").commit().unwrap_err();
    assert!(matches!(bad, Error::InvalidArgument(_)), "{bad:?}");
    let id = agentstate::checkpoint::uuid6(Some(2)).to_string();
    let third = saver.step(&second).set("a", json!(3)).id(id.clone()).commit().unwrap();
    assert_eq!(third.checkpoint.id, id);
    assert_eq!(saver.get_tuple(&cfg).unwrap().unwrap().checkpoint.id, id);
}

/// A fork's explicit id sorts after its parent's, not after every
/// checkpoint's: naming an existing checkpoint is a `Conflict`, and that
/// checkpoint, its values, parent and pending writes stay as they were.
#[test]
fn a_fork_under_an_existing_checkpoints_id_is_a_conflict_that_replaces_nothing() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let cfg = CheckpointConfig::thread("taken");
    let root = saver.start(&cfg).set("msg", json!("root")).commit().unwrap();
    let a = saver.step(&root).set("msg", json!("a")).commit().unwrap();
    let b = saver.step(&a).set("msg", json!("b")).set("log", json!(["kept"])).commit().unwrap();
    saver.put_writes(&b.config, &[("msg", json!("pending"))], "task", "").unwrap();
    let before = saver.get_tuple(&b.config).unwrap().unwrap();
    for taken in [&a, &b] {
        let err = saver.step(&root).fork().set("msg", json!("fork")).id(taken.checkpoint.id.clone()).commit();
        assert!(matches!(&err, Err(Error::Conflict(m)) if m.contains("already exists")), "{err:?}");
    }
    assert_eq!(saver.get_tuple(&b.config).unwrap().unwrap(), before);
    assert_eq!(saver.get_tuple(&a.config).unwrap().unwrap().checkpoint.channel_values["msg"], json!("a"));
    assert_eq!(saver.list(&ListQuery::thread("taken")).unwrap().len(), 3);
    // A fresh id forks as usual.
    let id = agentstate::checkpoint::uuid6(Some(9)).to_string();
    let fork = saver.step(&root).fork().set("msg", json!("fork")).id(id.clone()).commit().unwrap();
    assert_eq!(fork.parent_config.unwrap().checkpoint_id, root.config.checkpoint_id);
    assert_eq!(saver.list(&ListQuery::thread("taken")).unwrap().len(), 4);
}

/// `append` continues the list as the step has made it so far: after a
/// `set` or `clear` of the same channel in the same step, that value, not
/// the parent's list.
#[test]
fn append_after_set_or_clear_in_one_step_continues_what_the_step_made() {
    let (_dir, path, saver) = on_file("append.db");
    let cfg = CheckpointConfig::thread("t");
    let mut head = saver.start(&cfg).set("log", json!(["old-1", "old-2"])).commit().unwrap();
    type Build = fn(agentstate::Step<'_>) -> agentstate::Step<'_>;
    let cases: [(Build, Value); 5] = [
        (|s| s.set("log", json!(["new"])).append("log", [json!("more")]), json!(["new", "more"])),
        (|s| s.clear("log").append("log", [json!("fresh")]), json!(["fresh"])),
        (|s| s.set("log", json!("text")).append("log", [json!("a")]), json!(["a"])),
        (|s| s.append("log", [json!(1)]).set("log", json!([2])).append("log", [json!(3)]), json!([2, 3])),
        (|s| s.append("log", [json!(4)]).append("log", [json!(5)]), json!([2, 3, 4, 5])),
    ];
    for (build, want) in cases {
        head = build(saver.step(&head)).commit().unwrap();
        assert_eq!(head.checkpoint.channel_values["log"].to_value(), want);
        assert_eq!(saver.get_tuple(&cfg).unwrap().unwrap().checkpoint.channel_values["log"], want);
        let cold = Db::open(&path).unwrap().checkpointer();
        assert_eq!(cold.get_tuple(&cfg).unwrap().unwrap().checkpoint.channel_values["log"], want);
    }
}

/// `Step::parent_writes` stores what `put_writes` on the parent would, in the
/// checkpoint's own transaction (docs/design.md, "One commit per step").
#[test]
fn parent_writes_are_stored_as_put_writes_would_store_them() {
    let saver = Db::open_in_memory().unwrap().checkpointer();
    let writes = [
        ("messages".to_string(), msg(1)),
        ("__interrupt__".to_string(), json!({"value": "why?"})),
        ("n".to_string(), json!(7)),
    ];
    let special = [("__error__".to_string(), json!("boom"))];
    // One thread through put_writes then step, one through parent_writes.
    let mut heads = vec![];
    for (thread, combined) in [("separate", false), ("combined", true)] {
        let root = saver.start(&CheckpointConfig::thread(thread)).set("n", json!(0)).commit().unwrap();
        let next = if combined {
            saver
                .step(&root)
                .parent_writes("task-a", "~path, a", &writes)
                .parent_writes("task-b", "~path, b", &special)
                .set("n", json!(7))
                .commit()
                .unwrap()
        } else {
            saver.put_writes(&root.config, &writes, "task-a", "~path, a").unwrap();
            saver.put_writes(&root.config, &special, "task-b", "~path, b").unwrap();
            saver.step(&root).set("n", json!(7)).commit().unwrap()
        };
        assert!(next.pending_writes.is_empty(), "the new checkpoint has no writes yet");
        heads.push((root, next));
    }
    let read = |t: &CheckpointTuple| saver.get_tuple(&t.config).unwrap().unwrap().pending_writes;
    let (separate, combined) = (read(&heads[0].0), read(&heads[1].0));
    assert_eq!(combined.len(), 4);
    assert_eq!(combined, separate, "same rows, same order (LangGraph's writes_sort_key)");
    assert!(read(&heads[1].1).is_empty());
}

#[test]
fn parent_writes_of_a_step_that_fails_are_not_stored() {
    let (_dir, path, saver) = on_file("a.db");
    let root = saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
    let head = saver.step(&root).set("n", json!(1)).commit().unwrap();
    // `root` is no longer the head: the step is a conflict, and its writes
    // are rolled back with it.
    let err = saver.step(&root).parent_writes("task", "", &[("n", json!(2))]).set("n", json!(2)).commit();
    assert!(matches!(err, Err(Error::Conflict(_))), "{err:?}");
    assert_eq!(count(&path, "SELECT count(*) FROM checkpoint_writes"), 0);
    // A first step has no parent to write to.
    let err =
        saver.start(&CheckpointConfig::thread("u")).parent_writes("task", "", &[("n", json!(2))]).commit();
    assert!(matches!(err, Err(Error::InvalidArgument(_))), "{err:?}");
    assert_eq!(count(&path, "SELECT count(*) FROM checkpoints WHERE thread_id = 'u'"), 0);
    // A fork may write to an older checkpoint.
    saver
        .step(&root)
        .fork()
        .parent_writes("task", "", &[("n", json!(3))])
        .set("n", json!(3))
        .commit()
        .unwrap();
    assert_eq!(saver.get_tuple(&root.config).unwrap().unwrap().pending_writes.len(), 1);
    assert_eq!(saver.get_tuple(&head.config).unwrap().unwrap().pending_writes.len(), 0);
}

#[test]
fn parent_writes_with_write_behind_reach_the_file_with_their_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let db = Db::builder().write_behind(true).open(&path).unwrap();
    let saver = db.checkpointer();
    let mut head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
    for i in 1..=20 {
        head = saver
            .step(&head)
            .parent_writes("task", "", &[("n", json!(i))])
            .set("n", json!(i))
            .commit()
            .unwrap();
    }
    db.flush().unwrap();
    assert_eq!(count(&path, "SELECT count(*) FROM checkpoint_writes"), 20);
    assert_eq!(count(&path, "SELECT count(*) FROM checkpoints"), 21);
    let history = saver.list(&ListQuery::thread("t")).unwrap();
    assert_eq!(history.iter().filter(|t| t.pending_writes.len() == 1).count(), 20);
}

/// A task's write that is exactly the elements its step appends to a list is
/// stored once: the pending write refers to the list's new delta row
/// (docs/format.md, `checkpoint_writes`), reads back as written, and keeps
/// that row alive when the step's checkpoint is deleted.
#[test]
fn a_write_the_step_appends_is_stored_once_and_outlives_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let db = Db::open(&path).unwrap();
    let saver = db.checkpointer();
    let mut head = saver.start(&CheckpointConfig::thread("t")).set("messages", json!([])).commit().unwrap();
    let mut heads = vec![head.clone()];
    for i in 0..120 {
        let m = msg(i);
        head = saver
            .step(&head)
            .parent_writes("task", "~p", &[("messages", json!([m.clone()])), ("n", json!(i))])
            .append("messages", [m])
            .metadata(Metadata::new().with("run_id", format!("r{i}")))
            .commit()
            .unwrap();
        heads.push(head.clone());
    }
    // Past the first lists (stored whole while small), the message is kept
    // once: in the delta row, with the write referring to it.
    let shared = || -> usize {
        let c = rusqlite::Connection::open(&path).unwrap();
        let mut stmt = c.prepare("SELECT writes FROM checkpoint_writes").unwrap();
        let rows: Vec<Vec<u8>> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        rows.iter()
            .flat_map(|p| match rmpv::decode::read_value(&mut p.as_slice()).unwrap() {
                rmpv::Value::Array(entries) => entries,
                _ => panic!("packed writes are an array"),
            })
            .filter(|e| e[3].is_str())
            .count()
    };
    let deltas =
        count(&path, "SELECT COUNT(*) FROM checkpoint_blobs WHERE base_version IS NOT NULL") as usize;
    assert!(deltas > 50, "{deltas}");
    assert_eq!(shared(), deltas);
    // Every parent reads back its task's writes as they were made.
    for (i, parent) in heads[..120].iter().enumerate() {
        let back = saver.get_tuple(&parent.config).unwrap().unwrap();
        let got: Vec<(String, Value)> =
            back.pending_writes.iter().map(|w| (w.channel.clone(), w.value.clone())).collect();
        assert_eq!(
            got,
            vec![("messages".to_string(), json!([msg(i)])), ("n".to_string(), json!(i))],
            "step {i}"
        );
    }
    // Listed, in this process (values from its cache) and in a fresh one
    // (each chain decoded once, a shared write taken from the delta decoded
    // on the way), page after page: the same writes.
    let fresh = Db::open(&path).unwrap().checkpointer();
    for s in [&saver, &fresh] {
        let listed = s.list(&ListQuery::thread("t")).unwrap();
        assert_eq!(listed.len(), heads.len());
        for (t, head) in listed.iter().rev().zip(&heads) {
            assert_eq!(t.config, head.config);
            let got: Vec<(&str, &Value)> =
                t.pending_writes.iter().map(|w| (w.channel.as_str(), &w.value)).collect();
            let step = heads.iter().position(|h| h.config == t.config).unwrap();
            if step == 120 {
                assert!(got.is_empty());
            } else {
                assert_eq!(got, vec![("messages", &json!([msg(step)])), ("n", &json!(step))], "step {step}");
            }
        }
    }
    // Deleting the last step's checkpoint leaves its parent's writes whole:
    // the delta row they refer to stays.
    saver.delete_for_runs(&["r119"]).unwrap();
    let parent = saver.get_tuple(&heads[119].config).unwrap().unwrap();
    assert_eq!(parent.pending_writes[0].value, json!([msg(119)]));
    assert_eq!(saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap().config, heads[119].config);
    let report = db.check().unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    // A copy of the thread reads the same.
    saver.copy_thread("t", "u").unwrap();
    let copied =
        saver.get_tuple(&CheckpointConfig::thread("u").at(&heads[60].checkpoint.id)).unwrap().unwrap();
    assert_eq!(copied.pending_writes[0].value, json!([msg(60)]));
}

/// Extreme ids, versions and steps (found by a new user's probes): each is
/// a typed error or works, never a panic, a wrap-around or a head that
/// stops being the latest.
mod extremes {
    use super::*;
    use agentstate::checkpoint::ChannelVersions;
    use agentstate::engine::{ChannelSpec, Graph, Reducer, Update, END, START};
    use agentstate::inspect::Severity;
    use agentstate::Checkpoint;
    use serde_json::Map;

    fn xs(saver: &agentstate::Checkpointer, thread: &str) -> Vec<Value> {
        let listed = saver.list(&ListQuery::thread(thread)).unwrap();
        listed.iter().map(|t| t.checkpoint.channel_values["x"].to_value()).collect()
    }

    /// The head of a new thread: an empty checkpoint `put` under `id`.
    fn head_with_id(saver: &agentstate::Checkpointer, thread: &str, id: &str) -> CheckpointTuple {
        let cp = Checkpoint::with_id(id);
        saver.put(&CheckpointConfig::thread(thread), &cp, &Metadata::new(), &ChannelVersions::new()).unwrap();
        saver.get_tuple(&CheckpointConfig::thread(thread)).unwrap().unwrap()
    }

    /// A checkpoint at the last UUIDv6 timestamp (any `put` may store one):
    /// continuing it is refused, and no other thread's ids change.
    #[test]
    fn an_id_at_the_end_of_time_stalls_nothing_else() {
        let saver = Db::open_in_memory().unwrap().checkpointer();
        let a = saver.start(&CheckpointConfig::thread("normal")).set("x", json!(1)).commit().unwrap();
        let b = saver.step(&a).set("x", json!(2)).commit().unwrap();
        let o = head_with_id(&saver, "other", "ffffffff-ffff-6fff-bfff-ffffffffffff");
        let err = saver.step(&o).set("y", json!(1)).commit().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        let c = saver.step(&b).set("x", json!(3)).commit().unwrap();
        assert_eq!(saver.get_tuple(&CheckpointConfig::thread("normal")).unwrap().unwrap().config, c.config);
        saver.step(&c).set("x", json!(4)).commit().unwrap();
        assert_eq!(xs(&saver, "normal"), vec![json!(4), json!(3), json!(2), json!(1)]);
        // One tick before the end still leaves room for one.
        let l = head_with_id(&saver, "late", "ffffffff-ffff-6ffe-bfff-ffffffffffff");
        let next = saver.step(&l).set("y", json!(1)).commit().unwrap();
        assert!(next.checkpoint.id > l.checkpoint.id);
    }

    /// A head `put` stored under a text that is not a UUID and sorts after
    /// every one (LangGraph's `put` takes any id): `step` cannot make an id
    /// that sorts after it, with or without [`Step::id`], and refuses with
    /// `InvalidArgument` instead of storing a checkpoint that would never be
    /// read back as the latest. Nothing is written; `put` can still continue
    /// the thread. (A damaged file showed one such id, "1f1eeqc2-...".)
    #[test]
    fn a_head_id_after_every_uuid_is_refused_by_step() {
        let saver = Db::open_in_memory().unwrap().checkpointer();
        let h = head_with_id(&saver, "t", "step-2");
        let err = saver.step(&h).set("x", json!(1)).commit().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(ref m) if m.contains("step-2")), "{err:?}");
        let last = "ffffffff-ffff-6fff-bfff-ffffffffffff";
        let err = saver.step(&h).id(last).set("x", json!(1)).commit().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert_eq!(saver.list(&ListQuery::thread("t")).unwrap().len(), 1);
        let cp = Checkpoint::with_id("step-3");
        saver.put(&h.config, &cp, &Metadata::new(), &ChannelVersions::new()).unwrap();
        let next = saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap();
        assert_eq!(next.checkpoint.id, "step-3");
        assert_eq!(next.parent_config.and_then(|c| c.checkpoint_id).as_deref(), Some("step-2"));
    }

    /// `Step::id` takes the canonical text of a UUID only: other spellings
    /// sort apart from their time.
    #[test]
    fn step_ids_must_be_canonical() {
        let saver = Db::open_in_memory().unwrap().checkpointer();
        let head = saver.start(&CheckpointConfig::thread("t")).set("x", json!(1)).commit().unwrap();
        for id in [
            "{00000000-0000-6000-8000-000000000000}",
            "urn:uuid:00000000-0000-6000-8000-000000000000",
            "FFFFFFFF-FFFF-6FFF-BFFF-FFFFFFFFFFFF",
            "ffffffffffff6fffbfffffffffffffff",
        ] {
            let err = saver.step(&head).id(id).set("x", json!(2)).commit().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{id}: {err:?}");
        }
        assert_eq!(xs(&saver, "t"), vec![json!(1)]);
    }

    /// Counters past `i64::MAX` continue as Python's integers do.
    #[test]
    fn versions_at_i64_max_continue() {
        let saver = Db::open_in_memory().unwrap().checkpointer();
        let next = saver.get_next_version(Some(&ChannelVersion::Int(i64::MAX)));
        assert!(next.to_string().starts_with("00000000000009223372036854775808."), "{next}");
        let big = ChannelVersion::Str(format!("{}.5", "9".repeat(32)));
        assert!(saver.get_next_version(Some(&big)).to_string().starts_with(&format!("1{}.", "0".repeat(32))));
        // A checkpoint stored with that version, continued by a step.
        let mut cp = Checkpoint::with_id(agentstate::checkpoint::uuid6(None).to_string());
        let mut values = Map::new();
        values.insert("a".into(), json!([1, 2]));
        cp.set_values(values);
        cp.channel_versions.insert("a".into(), ChannelVersion::Int(i64::MAX));
        let cfg =
            saver.put(&CheckpointConfig::thread("t"), &cp, &Metadata::new(), &cp.channel_versions).unwrap();
        let t = saver.get_tuple(&cfg).unwrap().unwrap();
        let n = saver.step(&t).set("a", json!([3])).commit().unwrap();
        let v = &n.checkpoint.channel_versions["a"];
        assert!(v.to_string().starts_with("00000000000009223372036854775808."), "{v}");
        assert_eq!(saver.get_tuple(&CheckpointConfig::thread("t")).unwrap().unwrap().config, n.config);
    }

    /// A stored step of `i64::MAX`: a fork keeps it, the engine refuses to
    /// run past it.
    #[test]
    fn a_step_at_i64_max_saturates_or_is_refused() {
        let db = Db::open_in_memory().unwrap();
        let saver = db.checkpointer();
        let a = saver
            .start(&CheckpointConfig::thread("t"))
            .metadata(Metadata::new().with("step", i64::MAX))
            .set("x", json!(1))
            .commit()
            .unwrap();
        let mut values = Map::new();
        values.insert("x".into(), json!(2));
        let forked = saver.fork_with(&a.config, values).unwrap();
        let f = saver.get_tuple(&forked).unwrap().unwrap();
        assert_eq!(f.metadata.step(), Some(i64::MAX));
        let graph = Graph::builder()
            .state("x", ChannelSpec::reducer(Reducer::Append))
            .node("n", |_| Ok(Update::new().set("x", json!([1]))))
            .edge(START, "n")
            .edge("n", END)
            .compile(db.checkpointer())
            .unwrap();
        let err = graph.invoke(Some(json!({"x": [0]})), &CheckpointConfig::thread("t")).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }

    /// `copy_thread` onto itself changes nothing, onto another thread with
    /// checkpoints is a conflict, and an empty target is refused as every
    /// read would refuse it.
    #[test]
    fn copy_thread_onto_itself_or_nothing() {
        let db = Db::open_in_memory().unwrap();
        let saver = db.checkpointer();
        saver.start(&CheckpointConfig::thread("t")).set("x", json!(1)).commit().unwrap();
        saver.start(&CheckpointConfig::thread("u")).set("x", json!(5)).commit().unwrap();
        saver.copy_thread("t", "t").unwrap();
        assert!(matches!(saver.copy_thread("t", "u"), Err(Error::Conflict(_))));
        assert!(matches!(saver.copy_thread("t", ""), Err(Error::InvalidConfig(_))));
        saver.copy_thread("none", "none").unwrap();
        assert!(saver.list(&ListQuery::all()).unwrap().iter().all(|t| !t.config.thread_id.is_empty()));
        assert_eq!(xs(&saver, "t"), vec![json!(1)]);
    }

    /// Writes that name a checkpoint not (yet) stored are accepted, as
    /// LangGraph accepts them, and `check` calls them a leftover.
    #[test]
    fn writes_before_their_checkpoint_are_a_leftover() {
        let db = Db::open_in_memory().unwrap();
        db.checkpointer()
            .put_writes(&CheckpointConfig::thread("w").at("nope"), &[("c", json!(1))], "task", "")
            .unwrap();
        let report = db.check().unwrap();
        assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
        assert_eq!(report.findings[0].severity(), Severity::Leftover);
    }
}

/// A step from a head whose thread was deleted meanwhile is a `Conflict`
/// that says so (not "another writer continued it"), and writes nothing.
#[test]
fn a_step_from_a_deleted_threads_head_is_a_conflict_that_says_so() {
    let (_dir, _path, saver) = on_file("deleted.db");
    let head = saver.start(&CheckpointConfig::thread("t")).set("n", json!(0)).commit().unwrap();
    saver.delete_thread("t").unwrap();
    match saver.step(&head).set("n", json!(1)).commit() {
        Err(Error::Conflict(m)) => assert!(m.contains("deleted"), "{m}"),
        other => panic!("expected a Conflict, got {other:?}"),
    }
    assert!(saver.list(&ListQuery::thread("t")).unwrap().is_empty());
}
