"""AgentStateStore as the long-term memory of a real LangGraph graph: nodes
reach it through LangGraph's store injection, sync and async."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from test_store_support import DIMS, FakeEmbeddings

from agentstate import AgentStateStore


class State(TypedDict):
    user: str
    fact: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict:
    store.put(("memories", state["user"]), state["fact"][:12], {"text": state["fact"]})
    return {}


def recall(state: State, *, store: BaseStore) -> dict:
    hits = store.search(("memories", state["user"]), query=state["fact"], limit=3)
    return {"recalled": [h.value["text"] for h in hits]}


async def aremember(state: State, *, store: BaseStore) -> dict:
    await store.aput(("memories", state["user"]), state["fact"][:12], {"text": state["fact"]})
    return {}


async def arecall(state: State, *, store: BaseStore) -> dict:
    hits = await store.asearch(("memories", state["user"]), query=state["fact"], limit=3)
    return {"recalled": [h.value["text"] for h in hits]}


def build(store, first, second):
    graph = StateGraph(State)
    graph.add_node("remember", first)
    graph.add_node("recall", second)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


def index():
    return {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}


def test_a_graph_uses_the_store(tmp_path):
    with AgentStateStore(tmp_path / "s.db", index=index()) as store:
        app = build(store, remember, recall)
        app.invoke({"user": "alice", "fact": "likes green tea", "recalled": []})
        out = app.invoke({"user": "alice", "fact": "lives in Lyon", "recalled": []})
        assert out["recalled"][0] == "lives in Lyon"
        assert sorted(out["recalled"]) == ["likes green tea", "lives in Lyon"]
        assert store.list_namespaces() == [("memories", "alice")]


async def test_an_async_graph_uses_the_store(tmp_path):
    with AgentStateStore(tmp_path / "s.db", index=index()) as store:
        app = build(store, aremember, arecall)
        await app.ainvoke({"user": "bob", "fact": "owns a cat", "recalled": []})
        out = await app.ainvoke({"user": "bob", "fact": "plays chess", "recalled": []})
        assert out["recalled"][0] == "plays chess"
        assert len(out["recalled"]) == 2
