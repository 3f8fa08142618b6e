#!/usr/bin/env python3
"""Writes tests/fixtures/import/sqlite_saver.sqlite: a file LangGraph's
SqliteSaver and SqliteStore wrote, for `tests/import.rs`.

Run with the venv of tools/sqlite_saver_fixture/README.md:

    /tmp/aspy-imp/bin/python tools/sqlite_saver_fixture/make.py

Threads (one graph each, real LangGraph 1.2.22 runs):

- `chat`: add_messages, four invokes (messages are pydantic ext types);
- `approval`: interrupt() then Command(resume=...), interrupt_before, then
  update_state on the paused checkpoint (a fork) and a run from it;
- `nested`: a subgraph interrupted inside (checkpoint namespaces), resumed;
- `fanout`: Send fan-out to three tasks and a join;
- `error`: a node that raises (an `__error__` write) beside one that succeeds.

Store: five items in three namespaces with 4-dimensional vectors of the
`text` field, then one item deleted (Python leaves its vector behind).
"""

from __future__ import annotations

import operator
import os
import sqlite3
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.sqlite import SqliteStore
from langgraph.types import Command, Send, interrupt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "import", "sqlite_saver.sqlite")


class Chat(TypedDict):
    messages: Annotated[list, add_messages]
    turns: int


def chat() -> StateGraph:
    g = StateGraph(Chat)
    g.add_node("agent", lambda s: {"messages": [("ai", f"reply {len(s['messages'])}")]})
    g.add_node("count", lambda s: {"turns": s.get("turns", 0) + 1})
    g.add_edge(START, "agent")
    g.add_edge("agent", "count")
    g.add_edge("count", END)
    return g


class Approval(TypedDict):
    plan: str
    approved: str
    done: bool


def approval() -> StateGraph:
    def ask(s: Approval):
        return {"approved": interrupt({"question": "approve?", "plan": s["plan"]})}

    g = StateGraph(Approval)
    g.add_node("plan", lambda s: {"plan": "delete the logs"})
    g.add_node("ask", ask)
    g.add_node("act", lambda s: {"done": s["approved"] == "yes"})
    g.add_edge(START, "plan")
    g.add_edge("plan", "ask")
    g.add_edge("ask", "act")
    g.add_edge("act", END)
    return g


class Outer(TypedDict):
    text: str
    log: Annotated[list, operator.add]


def nested() -> StateGraph:
    def inner_step(s: Outer):
        return {"log": [f"inner got {interrupt('inner needs input')}"]}

    inner = StateGraph(Outer)
    inner.add_node("inner_step", inner_step)
    inner.add_edge(START, "inner_step")
    inner.add_edge("inner_step", END)
    g = StateGraph(Outer)
    g.add_node("before", lambda s: {"log": ["before"]})
    g.add_node("sub", inner.compile())
    g.add_node("after", lambda s: {"log": ["after"], "text": s["text"].upper()})
    g.add_edge(START, "before")
    g.add_edge("before", "sub")
    g.add_edge("sub", "after")
    g.add_edge("after", END)
    return g


class FanOut(TypedDict):
    topics: list[str]
    results: Annotated[list, operator.add]


def fanout() -> StateGraph:
    g = StateGraph(FanOut)
    g.add_node("research", lambda item: {"results": [f"notes on {item['topic']}"]})
    g.add_node("summarize", lambda s: {"results": [f"{len(s['results'])} notes"]})
    g.add_conditional_edges(START, lambda s: [Send("research", {"topic": t}) for t in s["topics"]], ["research"])
    g.add_edge("research", "summarize")
    g.add_edge("summarize", END)
    return g


class Log(TypedDict):
    log: Annotated[list, operator.add]


FAIL = {"on": True}


def failing() -> StateGraph:
    def flaky(s: Log):
        if FAIL["on"]:
            raise ValueError("tool down")
        return {"log": ["flaky"]}

    g = StateGraph(Log)
    g.add_node("ok", lambda s: {"log": ["ok"]})
    g.add_node("flaky", flaky)
    g.add_edge(START, "ok")
    g.add_edge(START, "flaky")
    g.add_edge("ok", END)
    g.add_edge("flaky", END)
    return g


# The graphs by thread id (tests/import.rs and python/tests/test_import.py
# run them too).
GRAPHS = {"chat": chat, "approval": approval, "nested": nested, "fanout": fanout, "error": failing}


def embed(texts: list[str]) -> list[list[float]]:
    return [[1.0 + t.count("a"), float(t.count("e")), float(t.count("i")), float(len(t) % 7)] for t in texts]


def main() -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(OUT + suffix):
            os.remove(OUT + suffix)
    conn = sqlite3.connect(OUT, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()

    def cfg(thread: str):
        return {"configurable": {"thread_id": thread}}

    g = chat().compile(checkpointer=saver)
    for i in range(4):
        g.invoke({"messages": [("user", f"hi {i}")]}, cfg("chat"))

    g = approval().compile(checkpointer=saver, interrupt_before=["act"])
    g.invoke({"plan": "", "approved": "", "done": False}, cfg("approval"))
    g.invoke(Command(resume="no"), cfg("approval"))
    paused = g.get_state(cfg("approval"))
    fork = g.update_state(paused.config, {"approved": "yes"}, as_node="ask")
    g.invoke(None, fork)

    g = nested().compile(checkpointer=saver)
    g.invoke({"text": "hello", "log": []}, cfg("nested"))
    g.invoke(Command(resume="42"), cfg("nested"))

    fanout().compile(checkpointer=saver).invoke({"topics": ["a", "b", "c"], "results": []}, cfg("fanout"))

    try:
        failing().compile(checkpointer=saver).invoke({"log": []}, cfg("error"))
    except ValueError:
        pass

    conn.close()
    with SqliteStore.from_conn_string(OUT, index={"dims": 4, "embed": embed, "text_fields": ["text"]}) as store:
        store.setup()
        store.put(("users", "alice"), "m1", {"text": "likes hiking", "score": 0.9})
        store.put(("users", "alice"), "m2", {"text": "allergic to peanuts"})
        store.put(("users", "bob"), "m1", {"text": "plays bass", "tags": ["music"]})
        store.put(("docs",), "readme", {"text": "one file", "version": 1}, index=False)
        store.put(("docs",), "gone", {"text": "deleted later"})
        store.delete(("docs",), "gone")

    conn = sqlite3.connect(OUT)
    # Small pages keep the committed file small; it stays in WAL mode, as
    # SqliteSaver leaves its files.
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA page_size = 1024")
    conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
