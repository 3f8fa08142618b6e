"""LangGraph's own graphs on AgentStateSaver reach the same states and
histories as on SqliteSaver: an agent loop with add_messages, an interrupt
and resume, interrupt_before, a subgraph in its own namespace, update_state
with time travel (a fork), Send fan-out, a failing node resumed, and the
async API. Ids and timestamps differ between runs; everything else of every
snapshot is compared (values, next, metadata source/step/parents shape, tasks
with their names, errors, interrupts and results)."""

from __future__ import annotations

import operator
import sqlite3
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from agentstate import AgentStateSaver

from fixture_graphs import approval, chat, fanout, nested


def _savers(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "python.sqlite"), check_same_thread=False)
    reference = SqliteSaver(conn)
    reference.setup()
    return reference, AgentStateSaver(str(tmp_path / "agentstate.db"))


def _norm(value: Any) -> Any:
    """Messages without their random ids; containers walked."""
    if isinstance(value, BaseMessage):
        return (value.type, value.content)
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_norm(v) for v in value)
    return value


def _snapshot(s, ids: dict[str, int]) -> dict[str, Any]:
    def ref(config):
        if not config:
            return None
        cid = config["configurable"]["checkpoint_id"]
        return ids.setdefault(cid, len(ids))

    meta = dict(s.metadata or {})
    return {
        "values": _norm(s.values),
        "next": s.next,
        "config": ref(s.config),
        "parent": ref(s.parent_config),
        "source": meta.get("source"),
        "step": meta.get("step"),
        "parents": sorted(meta.get("parents", {})),
        "tasks": [
            (t.name, t.error is not None, [i.value for i in t.interrupts], _norm(t.result))
            for t in s.tasks
        ],
        "interrupts": [i.value for i in s.interrupts],
    }


def _history(graph, config) -> list[dict[str, Any]]:
    ids: dict[str, int] = {}
    # Oldest first, so that the numbering of ids follows creation.
    return [_snapshot(s, ids) for s in reversed(list(graph.get_state_history(config)))]


def _same_run(tmp_path, build, drive):
    """Runs `drive(graph, config)` on a graph from `build()` with each saver and
    compares what it returns and the thread's whole history."""
    reference, ours = _savers(tmp_path)
    results = []
    for saver in (reference, ours):
        graph = build().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        out = drive(graph, config)
        results.append((out, _history(graph, config)))
    assert _norm(results[1][0]) == _norm(results[0][0])
    assert results[1][1] == results[0][1]
    return results[1]


def _plain(values):
    return [(m.type, m.content) for m in values["messages"]], values.get("turns")


def test_agent_loop_with_add_messages(tmp_path):
    def drive(graph, config):
        outs = [_plain(graph.invoke({"messages": [("user", f"hi {i}")]}, config)) for i in range(12)]
        return outs, _plain(graph.get_state(config).values)

    _, history = _same_run(tmp_path, chat, drive)
    assert len(history) == 12 * 4


def test_interrupt_then_resume(tmp_path):
    def drive(graph, config):
        first = graph.invoke({"plan": "", "approved": "", "done": False}, config)
        paused = graph.get_state(config)
        second = graph.invoke(Command(resume="yes"), config)
        return [i.value for i in first["__interrupt__"]], paused.next, second

    (out, history) = _same_run(tmp_path, approval, drive)
    assert out[1] == ("ask",) and out[2]["done"] is True
    assert any(s["interrupts"] for s in history)


def test_interrupt_before_and_update_state_fork(tmp_path):
    def build():
        return approval()

    def drive(graph, config):
        # interrupt_before is a compile option: recompile on the same saver.
        g2 = build().compile(checkpointer=graph.checkpointer, interrupt_before=["act"])
        g2.invoke({"plan": "", "approved": "", "done": False}, config)
        g2.invoke(Command(resume="no"), config)
        paused = g2.get_state(config)
        # Time travel: change the answer as if "ask" had said yes, and go on.
        fork = g2.update_state(paused.config, {"approved": "yes"}, as_node="ask")
        done = g2.invoke(None, fork)
        # Replaying an older checkpoint forks again; history is kept.
        first = list(g2.get_state_history(config))[-2]
        replay = g2.invoke(None, first.config)
        return paused.next, done, [i.value for i in replay.get("__interrupt__", [])]

    out, history = _same_run(tmp_path, build, drive)
    assert out[0] == ("act",) and out[1]["done"] is True
    assert any(s["source"] == "update" for s in history)


def test_subgraph_in_its_own_namespace(tmp_path):
    def drive(graph, config):
        graph.invoke({"text": "hello", "log": []}, config)
        state = graph.get_state(config, subgraphs=True)
        sub = state.tasks[0].state
        done = graph.invoke(Command(resume="42"), config)
        return state.next, sub.next, sub.values, done

    out, _ = _same_run(tmp_path, nested, drive)
    assert out[1] == ("inner_step",)
    # The subgraph returns its whole state, so operator.add sees "before" twice
    # (LangGraph's behaviour, the same on both savers).
    assert out[3]["log"] == ["before", "before", "inner got 42", "after"]


def test_send_fan_out(tmp_path):
    def drive(graph, config):
        return graph.invoke({"topics": ["a", "b", "c"], "results": []}, config)

    out, _ = _same_run(tmp_path, fanout, drive)
    assert sorted(out["results"][:3]) == ["notes on a", "notes on b", "notes on c"]


def test_failing_node_is_resumed_without_rerunning_finished_work(tmp_path):
    calls = {"ok": 0, "flaky": 0}
    fail = {"on": True}

    class S(TypedDict):
        log: Annotated[list, operator.add]

    def build():
        def ok(state: S):
            calls["ok"] += 1
            return {"log": ["ok"]}

        def flaky(state: S):
            calls["flaky"] += 1
            if fail["on"]:
                raise ValueError("tool down")
            return {"log": ["flaky"]}

        g = StateGraph(S)
        g.add_node("ok", ok)
        g.add_node("flaky", flaky)
        # Both run in the same superstep: ok's write is kept when flaky fails.
        g.add_edge(START, "ok")
        g.add_edge(START, "flaky")
        g.add_edge("ok", END)
        g.add_edge("flaky", END)
        return g

    def drive(graph, config):
        calls.update(ok=0, flaky=0)
        fail["on"] = True
        with pytest.raises(ValueError):
            graph.invoke({"log": []}, config)
        errors = [t.error is not None for t in graph.get_state(config).tasks]
        fail["on"] = False
        done = graph.invoke(None, config)
        return errors, done, dict(calls)

    out, _ = _same_run(tmp_path, build, drive)
    assert out[2] == {"ok": 1, "flaky": 2}, "ok's stored write was not redone"
    assert sorted(out[1]["log"]) == ["flaky", "ok"]


async def test_async_api_gives_the_same_history(tmp_path):
    reference, ours = _savers(tmp_path)
    from langgraph.checkpoint.memory import InMemorySaver

    histories = []
    for saver in (InMemorySaver(), ours):
        graph = chat().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "a"}}
        for i in range(5):
            await graph.ainvoke({"messages": [("user", f"hi {i}")]}, config)
        ids: dict[str, int] = {}
        histories.append([_snapshot(s, ids) async for s in graph.aget_state_history(config)])
    assert histories[1] == histories[0]
    assert len(histories[1]) == 20
