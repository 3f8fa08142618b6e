"""A thread the Rust engine wrote, continued by LangGraph in Python, and the
other way round, on one file.

`examples/graph.rs` (an agent loop: `add_messages`, a model node, a tool node
that asks for approval with `interrupt()`) runs in its own process on the
file; the same graph built with LangGraph runs on `AgentStateSaver`. Each
half may pause at the interrupt and the other resume it: the resumed run
must not redo the finished node, and the thread's whole history must be the
one LangGraph alone writes for the same calls (`_history` compares values,
next nodes, metadata, tasks and interrupts; ids differ between runs).

The example binary comes from `cargo build --examples`; CI names it in
`AGENTSTATE_GRAPH_EXAMPLE`, and these tests fail there if it is missing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from agentstate import AgentStateSaver

from test_graphs import _history, _norm

THREAD = {"configurable": {"thread_id": "weather"}}
INPUT = {"messages": [{"role": "user", "content": "weather?"}]}


def _example() -> str:
    exe = os.environ.get("AGENTSTATE_GRAPH_EXAMPLE")
    if exe:
        assert Path(exe).exists(), f"AGENTSTATE_GRAPH_EXAMPLE={exe} does not exist"
        return exe
    local = Path(__file__).resolve().parents[2] / "target" / "debug" / "examples" / "graph"
    if not local.exists():
        pytest.skip("no examples/graph binary: run `cargo build --examples` (CI sets AGENTSTATE_GRAPH_EXAMPLE)")
    return str(local)


def _rust(path: Path, *flags: str) -> None:
    subprocess.run([_example(), str(path), *flags], check=True, capture_output=True, text=True)


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    approved: Any


def _agent(runs: dict[str, int]):
    """examples/graph.rs, node for node, in LangGraph."""

    def turns(s: State) -> int:
        return len(s.get("messages", []))

    def model(s: State) -> dict:
        runs["model"] = runs.get("model", 0) + 1
        reply = "calling the weather tool" if turns(s) < 3 else "It is sunny."
        return {"messages": [{"role": "assistant", "content": reply}]}

    def tool(s: State) -> dict:
        runs["tool"] = runs.get("tool", 0) + 1
        answer = interrupt("run the weather tool?")
        content = "sunny, 21C" if answer == "yes" else "tool refused"
        return {"approved": answer, "messages": [{"role": "tool", "content": content, "tool_call_id": "t1"}]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tool", tool)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "tool" if turns(s) < 3 else END)
    builder.add_edge("tool", "model")
    return builder


def _reference(*calls: Any) -> list[dict[str, Any]]:
    """The history LangGraph alone writes for `calls` (inputs to invoke)."""
    graph = _agent({}).compile(checkpointer=InMemorySaver())
    for c in calls:
        graph.invoke(c, THREAD)
    return _history(graph, THREAD)


def test_langgraph_resumes_an_interrupt_the_rust_engine_stored(tmp_path):
    path = tmp_path / "shared.db"
    _rust(path, "--pause")
    runs: dict[str, int] = {}
    with AgentStateSaver(str(path)) as saver:
        graph = _agent(runs).compile(checkpointer=saver)
        paused = graph.get_state(THREAD)
        assert paused.next == ("tool",)
        assert [i.value for i in paused.interrupts] == ["run the weather tool?"]
        done = graph.invoke(Command(resume="yes"), THREAD)
        history = _history(graph, THREAD)
    # The model's first turn ran in Rust; here only the tool (answered) and
    # the model's last turn.
    assert runs == {"tool": 1, "model": 1}
    assert _norm(done["messages"]) == [
        ("human", "weather?"),
        ("ai", "calling the weather tool"),
        ("tool", "sunny, 21C"),
        ("ai", "It is sunny."),
    ]
    assert done["approved"] == "yes"
    assert len(history) == 5
    assert history == _reference(INPUT, Command(resume="yes"))


def test_the_rust_engine_resumes_an_interrupt_langgraph_stored(tmp_path):
    path = tmp_path / "shared.db"
    runs: dict[str, int] = {}
    with AgentStateSaver(str(path)) as saver:
        out = _agent(runs).compile(checkpointer=saver).invoke(INPUT, THREAD)
        assert [i.value for i in out["__interrupt__"]] == ["run the weather tool?"]
    assert runs == {"model": 1, "tool": 1}
    _rust(path, "--resume")
    with AgentStateSaver(str(path)) as saver:
        graph = _agent(runs).compile(checkpointer=saver)
        state = graph.get_state(THREAD)
        history = _history(graph, THREAD)
    assert runs == {"model": 1, "tool": 1}, "Python nodes ran while Rust resumed"
    assert state.next == () and state.values["approved"] == "yes"
    assert len(history) == 5
    assert history == _reference(INPUT, Command(resume="yes"))


def test_langgraph_continues_a_thread_the_rust_engine_finished(tmp_path):
    path = tmp_path / "shared.db"
    _rust(path)
    more = {"messages": [{"role": "user", "content": "and tomorrow?"}]}
    with AgentStateSaver(str(path)) as saver:
        graph = _agent({}).compile(checkpointer=saver)
        done = graph.invoke(more, THREAD)
        history = _history(graph, THREAD)
    assert _norm(done["messages"])[-2:] == [("human", "and tomorrow?"), ("ai", "It is sunny.")]
    assert len(history) == 8
    assert history == _reference(INPUT, Command(resume="yes"), more)
