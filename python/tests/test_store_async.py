"""AgentStateStore's async methods: the same answers as the sync ones, the
event loop never blocked, and async embeddings awaited on the caller's loop
(as LangGraph's async stores do) in the caller's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from test_store_support import DIMS, FakeEmbeddings, fake_vector, plain

from agentstate import AgentStateStore

REQUEST = contextvars.ContextVar("REQUEST", default=None)


async def test_async_methods_work(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        await store.aput(("users", "a"), "k1", {"n": 1})
        await store.aput(("users", "b"), "k2", {"n": 2}, ttl=5)
        item = await store.aget(("users", "a"), "k1")
        assert item.value == {"n": 1} and item.namespace == ("users", "a")
        hits = await store.asearch(("users",), filter={"n": {"$gte": 2}})
        assert [h.key for h in hits] == ["k2"]
        assert await store.alist_namespaces(prefix=("users",)) == [("users", "a"), ("users", "b")]
        await store.adelete(("users", "a"), "k1")
        assert await store.aget(("users", "a"), "k1") is None
        assert store.get(("users", "b"), "k2").value == {"n": 2}


async def test_abatch_answers_as_batch(tmp_path):
    ops = [
        PutOp(("x",), "a", {"v": 1}),
        GetOp(("x",), "a"),
        SearchOp(("x",)),
        ListNamespacesOp(),
        PutOp(("y",), "b", {"v": 2}),
    ]
    with AgentStateStore(tmp_path / "sync.db") as sync, AgentStateStore(tmp_path / "async.db") as asyn:
        for store in (sync, asyn):
            store.put(("x",), "a", {"v": 0})
        assert plain(await asyn.abatch(iter(ops))) == plain(sync.batch(ops))
        assert plain(await asyn.aget(("y",), "b")) == plain(sync.get(("y",), "b"))


async def test_many_concurrent_calls(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        await asyncio.gather(*(store.aput(("c", str(i % 5)), str(i), {"i": i}) for i in range(100)))
        items = await asyncio.gather(*(store.aget(("c", str(i % 5)), str(i)) for i in range(100)))
        assert [it.value["i"] for it in items] == list(range(100))
        assert len(await store.alist_namespaces()) == 5


class SlowEmbeddings(FakeEmbeddings):
    """Sync only, and slow: it must not run on the event loop."""

    def embed_documents(self, texts):
        time.sleep(0.5)
        return super().embed_documents(texts)

    def embed_query(self, text):
        time.sleep(0.5)
        return super().embed_query(text)


async def ticks_during(coro):
    """How often a 10 ms ticker ran on the loop while `coro` ran."""
    ticks = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        result = await coro
    finally:
        done.set()
        await task
    return ticks, result


async def test_the_event_loop_is_never_blocked(tmp_path):
    index = {"dims": DIMS, "embed": SlowEmbeddings()}
    with AgentStateStore(tmp_path / "s.db", index=index) as store:
        ticks, _ = await ticks_during(store.aput(("s",), "k", {"text": "cat"}))
        assert ticks >= 10  # the 0.5 s embedding ran in a worker thread
        ticks, hits = await ticks_during(store.asearch(("s",), query="cat"))
        assert ticks >= 10 and [h.key for h in hits] == ["k"]


class AsyncNativeEmbeddings(Embeddings):
    """Embeddings with their own async methods, recording where they ran."""

    def __init__(self):
        self.calls = []

    def embed_documents(self, texts):
        self.calls.append(("sync", threading.get_ident(), None, REQUEST.get()))
        return [fake_vector(t) for t in texts]

    def embed_query(self, text):
        self.calls.append(("sync", threading.get_ident(), None, REQUEST.get()))
        return fake_vector(text)

    async def aembed_documents(self, texts):
        self.calls.append(("async", threading.get_ident(), asyncio.get_running_loop(), REQUEST.get()))
        await asyncio.sleep(0)
        return [fake_vector(t) for t in texts]

    async def aembed_query(self, text):
        self.calls.append(("async", threading.get_ident(), asyncio.get_running_loop(), REQUEST.get()))
        await asyncio.sleep(0)
        return fake_vector(text)


async def test_async_embeddings_are_awaited_on_the_callers_loop(tmp_path):
    embeddings = AsyncNativeEmbeddings()
    loop = asyncio.get_running_loop()
    index = {"dims": DIMS, "embed": embeddings, "fields": ["text"]}
    with AgentStateStore(tmp_path / "s.db", index=index) as store:
        REQUEST.set("req-1")
        await store.aput(("a",), "k", {"text": "cat"})
        hits = await store.asearch(("a",), query="cat")
        assert hits[0].score == pytest.approx(1.0)
        assert embeddings.calls == [
            ("async", threading.get_ident(), loop, "req-1"),
            ("async", threading.get_ident(), loop, "req-1"),
        ]
        # The sync methods use the sync embeddings, in the calling thread.
        embeddings.calls.clear()
        await asyncio.to_thread(store.put, ("a",), "j", {"text": "dog"})
        assert [c[0] for c in embeddings.calls] == ["sync"]
        assert embeddings.calls[0][1] != threading.get_ident()


async def test_sync_embeddings_run_in_the_worker_with_the_callers_context(tmp_path):
    seen = []

    def embed(texts):
        seen.append((threading.current_thread().name, REQUEST.get()))
        return [fake_vector(t) for t in texts]

    with AgentStateStore(tmp_path / "s.db", index={"dims": DIMS, "embed": embed}) as store:
        REQUEST.set("req-2")
        await store.aput(("a",), "k", {"text": "cat"})
    assert len(seen) == 1
    assert seen[0][0].startswith("agentstate-store") and seen[0][1] == "req-2"


async def test_an_async_embedding_function(tmp_path):
    loops = []

    async def aembed(texts):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return [fake_vector(t) for t in texts]

    with AgentStateStore(tmp_path / "s.db", index={"dims": DIMS, "embed": aembed}) as store:
        await store.aput(("a",), "k", {"text": "cat"})
        await store.aput(("a",), "j", {"text": "revenue"})
        assert [h.key for h in await store.asearch(("a",), query="revenue")] == ["j", "k"]
        assert loops == [asyncio.get_running_loop()] * 3
        # As with LangGraph's stores, the sync methods cannot call an
        # async-only function: LangGraph's error, and nothing written.
        with pytest.raises(ValueError, match="async function"):
            store.put(("a",), "m", {"text": "x"})
        assert store.get(("a",), "m") is None
        # Without embedding, sync calls work.
        store.put(("a",), "m", {"text": "x"}, index=False)
        assert store.get(("a",), "m") is not None


async def test_async_errors_are_raised_in_the_caller(tmp_path):
    class ModelDown(Exception):
        pass

    async def aembed(texts):
        raise ModelDown("down")

    with AgentStateStore(tmp_path / "s.db", index={"dims": DIMS, "embed": aembed}) as store:
        with pytest.raises(ModelDown):
            await store.aput(("a",), "k", {"text": "cat"})
        with pytest.raises(ValueError):
            await store.asearch(("a",), filter={"x": {"$bad": 1}})
    with pytest.raises(Exception, match="closed"):
        await store.aget(("a",), "k")
