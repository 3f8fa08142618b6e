//! Golden tests of interrupts and resuming (see `engine_golden.rs` for how
//! every golden test compares with LangGraph's recordings): `interrupt()`,
//! breakpoints, several interrupts at once, resuming by interrupt id, and
//! their stream events.

#[path = "engine_golden/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::sync::{Arc, Mutex};

use agentstate::engine::{
    interrupt, ChannelSpec, Goto, Graph, GraphBuilder, NodeError, Reducer, Update, END, START,
};
use agentstate::{CheckpointConfig, Error};
use harness::{abc, ask_beside_work, counted, fixture, int, prep_ask_finish, py_str, strs, Counts, Harness};
use serde_json::{json, Value};

#[test]
fn interrupt_resume() {
    let fx = fixture("interrupt_resume");
    let mut h = Harness::new();
    let b = prep_ask_finish(&h.counts);
    h.graph("interrupt", "interrupt", b);
    let before = abc(&h.counts).interrupt_before(["b"]);
    h.graph("before", "before", before);
    let after = abc(&h.counts).interrupt_after(["a"]);
    h.graph("after", "after", after);
    h.check(&fx);
}

#[test]
fn resume_with_nothing_to_resume_is_a_typed_error() {
    let h = Harness::new();
    let g = Graph::builder()
        .node("a", |_| Ok(Update::new()))
        .edge(START, "a")
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(g.invoke(None, &CheckpointConfig::thread("t")), Err(Error::EmptyInput)));
    assert!(matches!(g.invoke(Some(json!(3)), &CheckpointConfig::thread("t")), Err(Error::InvalidUpdate(_))));
    let looped = Graph::builder()
        .state("n", ChannelSpec::last_value())
        .node("a", |s| Ok(Update::new().set("n", json!(int(s, "n") + 1))))
        .edge(START, "a")
        .conditional_edges("a", |_| Ok(vec![Goto::node("a")]))
        .recursion_limit(3)
        .compile(h.db.checkpointer())
        .unwrap();
    assert!(matches!(
        looped.invoke(Some(json!({"n": 0})), &CheckpointConfig::thread("loop")),
        Err(Error::Recursion { limit: 3 })
    ));
}

#[test]
fn breakpoints_on_every_node() {
    let h = Harness::new();
    let counts = Counts::default();
    let g = abc(&counts).interrupt_before(["*"]).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("star");
    // "*" stops before a, b and c, not before __start__ (hidden in LangGraph).
    let mut out = g.invoke(Some(json!({"items": [], "count": 0})), &cfg).unwrap();
    let mut stops = 0;
    while !g.next_tasks(&cfg).unwrap().is_empty() {
        stops += 1;
        out = g.invoke(None, &cfg).unwrap();
        assert!(stops < 10);
    }
    assert_eq!(out["items"], json!(["a", "b", "c"]));
    assert_eq!(stops, 3);
}

/// A node that calls `interrupt()` twice: the second interrupt, raised with
/// one answer given, has its own id (`<task ns>|1`), and the task's
/// `__resume__` write holds the answers it consumed.
#[test]
fn multi_interrupt() {
    let fx = fixture("multi_interrupt");
    let mut h = Harness::new();
    let b = Graph::builder()
        .state("answers", ChannelSpec::reducer(Reducer::Append))
        .state("count", ChannelSpec::last_value())
        .node(
            "ask",
            counted(&h.counts, "ask", |s| {
                let first = interrupt(json!("first?"))?;
                let second = interrupt(json!("second?"))?;
                Ok(Update::new()
                    .set("answers", json!([first, second]))
                    .set("count", json!(int(s, "count") + 1)))
            }),
        )
        .node(
            "done",
            counted(&h.counts, "done", |s| {
                Ok(Update::new().set("answers", json!(["done"])).set("count", json!(int(s, "count") + 1)))
            }),
        )
        .edge(START, "ask")
        .edge("ask", "done")
        .edge("done", END);
    h.graph("twice", "main", b);
    h.check(&fx);
}

/// An interrupting task next to one that succeeds (thread "mixed": the
/// resume runs only the interrupted one), and two interrupting tasks in one
/// superstep (thread "both", not resumed: LangGraph refuses a bare resume
/// with two interrupts pending).
#[test]
fn parallel_interrupt() {
    let fx = fixture("parallel_interrupt");
    let mut h = Harness::new();
    let mixed = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("answer", ChannelSpec::last_value())
        .node(
            "ask",
            counted(&h.counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new()
                    .set("items", json!([format!("ask:{}", py_str(Some(&answer)))]))
                    .set("answer", answer))
            }),
        )
        .node("work", counted(&h.counts, "work", |_| Ok(Update::new().set("items", json!(["work"])))))
        .node(
            "join",
            counted(&h.counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "work")
        .edge("ask", "join")
        .edge("work", "join")
        .edge("join", END);
    h.graph("mixed", "mixed", mixed);
    let mut both = Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .state("answer", ChannelSpec::last_value());
    for n in ["ask1", "ask2"] {
        both = both
            .node(
                n,
                counted(&h.counts, n, move |_| {
                    let answer = interrupt(json!(format!("{n}?")))?;
                    Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
                }),
            )
            .edge(START, n)
            .edge(n, END);
    }
    h.graph("both", "both", both);
    h.check(&fx);
}

/// A task that interrupted, then finished on the resume while its sibling
/// failed again, keeps its `__interrupt__` write next to its output: it
/// counts as finished (get_state shows its output, only the sibling is next)
/// and the next resume does not run it again.
#[test]
fn interrupt_then_error() {
    check_ask_and_flaky("interrupt_then_error");
}

/// The fixture `name` on [`ask_and_flaky`] (flaky runs three times).
fn check_ask_and_flaky(name: &str) {
    let fx = fixture(name);
    let mut h = Harness::new();
    let runs = Arc::new(Mutex::new(0));
    let b = ask_and_flaky(&h.counts, &runs);
    h.graph("mixed", "main", b);
    h.check(&fx);
    assert_eq!(*runs.lock().unwrap(), 3, "flaky ran three times");
}

/// Two interrupts pending in one superstep, answered by id (LangGraph's
/// `Command(resume={id: answer})`): one at a time (the other task stops at
/// its interrupt again), and both in one map.
#[test]
fn resume_by_id() {
    let fx = fixture("resume_by_id");
    let mut h = Harness::new();
    for thread in ["one", "both"] {
        let b = two_askers(&h.counts);
        h.graph(thread, "main", b);
    }
    h.check(&fx);
}

/// `resume_by_id` checks its ids against the interrupts pending on the
/// head (LangGraph's strict resume): none, or one that is not pending, is a
/// typed error and the thread does not move.
#[test]
fn resume_by_id_takes_only_pending_interrupts() {
    let h = Harness::new();
    let g = two_askers(&h.counts).compile(h.db.checkpointer()).unwrap();
    let cfg = CheckpointConfig::thread("t");
    let paused = g.invoke(Some(json!({"items": []})), &cfg).unwrap();
    let ids: Vec<String> =
        agentstate::engine::Interrupt::from_output(&paused).into_iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 2);
    let head = g.get_state(&cfg).unwrap().config;
    let no_answers: [(String, Value); 0] = [];
    assert!(
        matches!(g.resume_by_id(no_answers, &cfg), Err(Error::InvalidArgument(m)) if m.contains(&ids[0]))
    );
    let unknown = "0".repeat(32);
    let err = g.resume_by_id([(unknown.clone(), json!("x")), (ids[0].clone(), json!("A"))], &cfg);
    assert!(matches!(err, Err(Error::InvalidArgument(m)) if m.contains(&unknown)));
    assert_eq!(g.get_state(&cfg).unwrap().config, head, "a refused resume stores nothing");
    // Answering one leaves the other pending; its answer then finishes.
    let out = g.resume_by_id([(ids[1].clone(), json!("B"))], &cfg).unwrap();
    assert_eq!(
        agentstate::engine::Interrupt::from_output(&out).iter().map(|i| &i.id).collect::<Vec<_>>(),
        [&ids[0]]
    );
    let err = g.resume_by_id([(ids[1].clone(), json!("again"))], &cfg);
    assert!(matches!(err, Err(Error::InvalidArgument(_))), "an answered interrupt is not pending");
    let done = g.resume_by_id([(ids[0].clone(), json!("A"))], &cfg).unwrap();
    assert_eq!(done["items"], json!(["ask1:A", "ask2:B", "join:2"]));
}

/// ask1 and ask2 interrupt in one superstep; join waits for both.
fn two_askers(counts: &Counts) -> GraphBuilder {
    let asker = |n: &'static str| {
        counted(counts, n, move |_| {
            let answer = interrupt(json!(format!("{n}?")))?;
            Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
        })
    };
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node("ask1", asker("ask1"))
        .node("ask2", asker("ask2"))
        .node(
            "join",
            counted(counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask1")
        .edge(START, "ask2")
        .join(["ask1", "ask2"], "join")
        .edge("join", END)
}

/// `stream` of runs that pause: an `interrupt()` next to a sibling that
/// finishes (the interrupt, the state with it, the sibling's update, the
/// state with the sibling's write), its resume (the state, the sibling's
/// stored update as cached, the rest), two interrupts in one superstep, and
/// breakpoints before and after a node.
#[test]
fn stream_interrupt() {
    let fx = fixture("stream_interrupt");
    let mut h = Harness::new();
    let pause = ask_beside_work(&h.counts);
    h.graph("pause", "pause", pause);
    let mut two = Graph::builder().state("items", ChannelSpec::reducer(Reducer::Append));
    for n in ["p", "q"] {
        two = two
            .node(
                n,
                counted(&h.counts, n, move |_| {
                    let answer = interrupt(json!(format!("{n}?")))?;
                    Ok(Update::new().set("items", json!([format!("{n}:{}", py_str(Some(&answer)))])))
                }),
            )
            .edge(START, n)
            .edge(n, END);
    }
    h.graph("two", "two", two);
    let breakpoints = abc(&h.counts).interrupt_before(["b"]).interrupt_after(["c"]);
    h.graph("breakpoints", "breakpoints", breakpoints);
    h.check(&fx);
}

/// `stream` of `interrupt_then_error`: a superstep that both pauses and
/// fails reports the interrupt, then fails; the resume reports the answered
/// task's update before the error; the next run reports it as cached.
#[test]
fn stream_interrupt_error() {
    check_ask_and_flaky("stream_interrupt_error");
}

/// ask interrupts, flaky fails its first two runs (counted in `runs`), both
/// join (`interrupt_then_error`, `stream_interrupt_error`).
fn ask_and_flaky(counts: &Counts, runs: &Arc<Mutex<i32>>) -> GraphBuilder {
    let flaky_runs = runs.clone();
    Graph::builder()
        .state("items", ChannelSpec::reducer(Reducer::Append))
        .node(
            "ask",
            counted(counts, "ask", |_| {
                let answer = interrupt(json!("approve?"))?;
                Ok(Update::new().set("items", json!([format!("ask:{}", py_str(Some(&answer)))])))
            }),
        )
        .node(
            "flaky",
            counted(counts, "flaky", move |_| {
                let mut n = flaky_runs.lock().unwrap();
                *n += 1;
                if *n <= 2 {
                    return Err(NodeError::with_kind("ValueError", format!("flaky failed ({n})")));
                }
                Ok(Update::new().set("items", json!(["flaky"])))
            }),
        )
        .node(
            "join",
            counted(counts, "join", |s| {
                Ok(Update::new().set("items", json!([format!("join:{}", strs(s, "items").len())])))
            }),
        )
        .edge(START, "ask")
        .edge(START, "flaky")
        .edge("ask", "join")
        .edge("flaky", "join")
        .edge("join", END)
}
