//! Golden tests of editing a thread's state (see `engine_golden.rs` for how
//! every golden test compares with LangGraph's recordings): `update_state`
//! at the head, at a past checkpoint (a fork) and on an empty thread, the
//! node it infers, and input given at a checkpoint.

#[path = "engine_golden/harness.rs"]
#[allow(dead_code)]
mod harness;

use agentstate::engine::{ChannelSpec, Durability, Goto, Graph, Reducer, Update, END, START};
use agentstate::{CheckpointConfig, Db, Error, ListQuery};
use harness::{abc, counted, fixture, int, one_task_path, prep_ask_finish, Counts, Harness};
use serde_json::json;

#[test]
fn update_state_fork() {
    let fx = fixture("update_state_fork");
    let mut h = Harness::new();
    let (fork, replay) = (abc(&h.counts), abc(&h.counts));
    h.graph("fork", "main", fork);
    h.graph("replay", "main", replay);
    h.check(&fx);
}

/// New input at an old checkpoint (its step-1 checkpoint: a fork whose
/// input checkpoint's parent is the old one), then at the head addressed by
/// its id.
#[test]
fn input_at_checkpoint() {
    let fx = fixture("input_at_checkpoint");
    let mut h = Harness::new();
    let branch = abc(&h.counts);
    h.graph("branch", "main", branch);
    h.check(&fx);
}

/// The `abc` graph on a fresh file at `durability` (write-behind for
/// `Async`).
fn abc_at(durability: Durability) -> (tempfile::TempDir, Db, agentstate::engine::CompiledGraph) {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Db::builder().write_behind(durability == Durability::Async).open(dir.path().join("f.db")).unwrap();
    let g = abc(&Counts::default()).compile(db.checkpointer()).unwrap().with_durability(durability);
    (dir, db, g)
}

/// Thread "t" still lists `old_head` (the old branch is kept), and its new
/// head descends from `fork_point`.
fn assert_forked(saver: &agentstate::Checkpointer, old_head: &str, fork_point: &str, durability: Durability) {
    let after = saver.list(&ListQuery::thread("t")).unwrap();
    assert!(after.iter().any(|t| t.checkpoint.id == old_head), "{durability:?}: the old branch is kept");
    let mut cur = after[0].clone();
    while cur.checkpoint.id != fork_point {
        let parent = cur.parent_config.clone().expect("a parent on the way to the fork point");
        cur = saver.get_tuple(&parent).unwrap().unwrap();
    }
}

/// Input at an old checkpoint forks from it at every durability: the run
/// ends in the state the `sync` golden records, the old branch stays in the
/// history, and the new head descends from the addressed checkpoint.
#[test]
fn input_at_a_past_checkpoint_forks_at_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (_dir, db, g) = abc_at(durability);
        let cfg = CheckpointConfig::thread("t");
        g.invoke(Some(json!({"items": ["in"], "count": 0})), &cfg).unwrap();
        let saver = db.checkpointer();
        let history = saver.list(&ListQuery::thread("t")).unwrap();
        let old_head = history[0].checkpoint.id.clone();
        // Exit stores only the run's last checkpoint: fork from it there.
        let at = history.iter().find(|t| t.metadata.step() == Some(1)).unwrap_or(&history[0]);
        let out = g.invoke(Some(json!({"items": ["again"], "count": 100})), &at.config).unwrap();
        let expected = match durability {
            Durability::Exit => json!({"items": ["in", "a", "b", "c", "again", "a", "b", "c"], "count": 103}),
            _ => json!({"items": ["in", "a", "again", "a", "b", "c"], "count": 103}),
        };
        assert_eq!(out, expected, "{durability:?}");
        assert_forked(&saver, &old_head, &at.checkpoint.id, durability);
    }
}

/// Input at the last checkpoint of an earlier run (not the head) forks
/// from it at every durability, `exit` included, and a plain invoke then
/// continues the new branch.
#[test]
fn input_at_an_earlier_runs_checkpoint_forks_at_every_durability() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let (_dir, db, g) = abc_at(durability);
        let cfg = CheckpointConfig::thread("t");
        g.invoke(Some(json!({"items": ["one"], "count": 0})), &cfg).unwrap();
        let saver = db.checkpointer();
        let first = saver.get_tuple(&cfg).unwrap().unwrap();
        g.invoke(Some(json!({"items": ["two"], "count": 0})), &cfg).unwrap();
        let old_head = saver.get_tuple(&cfg).unwrap().unwrap().checkpoint.id.clone();
        let out = g.invoke(Some(json!({"items": ["fork"], "count": 10})), &first.config).unwrap();
        assert_eq!(
            out,
            json!({"items": ["one", "a", "b", "c", "fork", "a", "b", "c"], "count": 13}),
            "{durability:?}"
        );
        assert_forked(&saver, &old_head, &first.checkpoint.id, durability);
        let next = g.invoke(Some(json!({"items": ["more"], "count": 0})), &cfg).unwrap();
        assert_eq!(
            next["items"],
            json!(["one", "a", "b", "c", "fork", "a", "b", "c", "more", "a", "b", "c"])
        );
    }
}

/// `update_state` at the thread's head: as a node with a router (the
/// router runs on the updated state), and as an interrupted node (the
/// update answers in its place). Both store the update's writes on the head
/// too, as LangGraph does.
///
/// One difference on purpose (docs/design.md, "The engine"): our file keeps
/// one task path per task and checkpoint, so the update's writes for the
/// interrupted `ask` carry `ask`'s path and sort with its `__interrupt__`
/// write by index, where LangGraph keeps `~__interrupt__, 0000000000` on
/// them.
#[test]
fn update_state_head() {
    let fx = fixture("update_state_head");
    update_state_head_graphs().check_adjusted(&fx, one_task_path);
}

fn update_state_head_graphs() -> Harness {
    let mut h = Harness::new();
    let looped = Graph::builder()
        .state("count", ChannelSpec::last_value())
        .state("trace", ChannelSpec::reducer(Reducer::Append))
        .node(
            "inc",
            counted(&h.counts, "inc", |s| {
                let n = int(s, "count") + 1;
                Ok(Update::new().set("count", json!(n)).set("trace", json!([format!("inc{n}")])))
            }),
        )
        .edge(START, "inc")
        .conditional_edges("inc", |s| {
            Ok(vec![if int(s, "count") < 3 { Goto::node("inc") } else { Goto::end() }])
        });
    h.graph("route", "loop", looped);
    let approve = prep_ask_finish(&h.counts);
    h.graph("skip", "approve", approve);
    h
}

/// `update_state` without `as_node` (`update_state_inferred`): applied as
/// the last node that finished. Paused before c, the update is b's (c is
/// next again); paused inside ask's `interrupt()`, it is prep's (ask did
/// not finish), so ask runs again and interrupts again.
#[test]
fn update_state_infer() {
    let fx = fixture("update_state_infer");
    let mut h = Harness::new();
    let before_c = abc(&h.counts).interrupt_before(["c"]);
    h.graph("infer", "before_c", before_c);
    let approve = prep_ask_finish(&h.counts);
    h.graph("asked", "approve", approve);
    h.check(&fx);
}

/// Two nodes finishing in the last superstep make an update without
/// `as_node` ambiguous (a typed `InvalidUpdate`, nothing stored), also after
/// an update as one of them; after a join it is the join's.
#[test]
fn update_state_ambiguous() {
    let fx = fixture("update_state_ambiguous");
    let mut h = Harness::new();
    let tag = |counts: &Counts, n: &'static str| {
        counted(counts, n, move |_| Ok(Update::new().set("items", json!([n]))))
    };
    let fan = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("x", tag(&h.counts, "x"))
        .node("y", tag(&h.counts, "y"))
        .edge(START, "x")
        .edge(START, "y")
        .edge("x", END)
        .edge("y", END);
    h.graph("fan", "fan", fan);
    let joined = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("x", tag(&h.counts, "x"))
        .node("y", tag(&h.counts, "y"))
        .node("join", tag(&h.counts, "join"))
        .edge(START, "x")
        .edge(START, "y")
        .edge("x", "join")
        .edge("y", "join")
        .edge("join", END);
    h.graph("joined", "joined", joined);
    h.check(&fx);
}

/// `update_state` on threads with no checkpoint: the update makes the first
/// checkpoint (step 0, no parent), as START when inferred (twice: updates
/// leave `versions_seen` empty) or as a given node; `invoke(None)` goes on
/// from there.
#[test]
fn update_state_empty_thread() {
    let fx = fixture("update_state_empty_thread");
    let mut h = Harness::new();
    let (fresh, fresh_as) = (abc(&h.counts), abc(&h.counts));
    h.graph("fresh", "main", fresh);
    h.graph("fresh_as", "main", fresh_as);
    h.check(&fx);
}

/// What the goldens do not record: an unknown checkpoint id is `NotFound`
/// (LangGraph would start a thread whose first checkpoint's parent is that
/// missing id), an unknown node `InvalidUpdate` with LangGraph's message,
/// and neither stores anything.
#[test]
fn update_state_refusals_store_nothing() {
    let h = Harness::new();
    let g = abc(&h.counts).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("t");
    let missing = cfg.clone().at("1f0c0000-0000-6000-8000-000000000000");
    assert!(matches!(g.update_state_inferred(&missing, json!({"count": 1})), Err(Error::NotFound(_))));
    assert!(matches!(g.update_state(&missing, json!({"count": 1}), "a"), Err(Error::NotFound(_))));
    let err = g.update_state(&cfg, json!({"count": 1}), "zz");
    assert!(matches!(err, Err(Error::InvalidUpdate(m)) if m == "Node zz does not exist"));
    let err = g.update_state_inferred(&cfg, json!([1]));
    assert!(matches!(err, Err(Error::InvalidUpdate(_))));
    assert!(g.get_state(&cfg).unwrap().config.is_none(), "the thread is still empty");
    // An update as __end__ is not one LangGraph accepts either.
    let err = g.update_state(&cfg, json!({"count": 1}), END);
    assert!(matches!(err, Err(Error::InvalidUpdate(m)) if m == "Node __end__ does not exist"));
}
