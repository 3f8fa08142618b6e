"""`agentstate.import_sqlite_saver`: a file LangGraph's SqliteSaver wrote
(real graphs: add_messages over several invokes, an interrupt and its resume,
interrupt_before and an update_state fork, a subgraph in its own namespace,
Send fan-out, a node error's `__error__` write, a SqliteStore beside them)
imports into an agentstate file that LangGraph, through AgentStateSaver,
reads back as the same history: every checkpoint, parent, metadata entry,
channel value and pending write, in the same order; `get_state_history` and
`get_state` equal; and the imported threads go on running."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore
from langgraph.types import Command, Interrupt

import agentstate
from agentstate import AgentStateSaver, ConflictError, import_sqlite_saver


from fixture_graphs import FAIL, GRAPHS, approval, chat, failing, fanout, nested  # noqa: F401


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def write_langgraph_file(path: Path) -> None:
    """Every scenario on SqliteSaver, one thread each, and a SqliteStore."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()

    g = chat().compile(checkpointer=saver)
    for i in range(6):
        g.invoke({"messages": [("user", f"hi {i}")]}, cfg("chat"))
    # A manual edit on top (source "update").
    g.update_state(cfg("chat"), {"messages": [("user", "edited by hand")]})

    g = approval().compile(checkpointer=saver, interrupt_before=["act"])
    g.invoke({"plan": "", "approved": "", "done": False}, cfg("approval"))
    g.invoke(Command(resume="no"), cfg("approval"))
    paused = g.get_state(cfg("approval"))
    fork = g.update_state(paused.config, {"approved": "yes"}, as_node="ask")
    g.invoke(None, fork)

    g = nested().compile(checkpointer=saver)
    g.invoke({"text": "hello", "log": []}, cfg("nested"))
    g.invoke(Command(resume="42"), cfg("nested"))
    # Paused inside the subgraph, waiting.
    g.invoke({"text": "again", "log": []}, cfg("nested-paused"))

    fanout().compile(checkpointer=saver).invoke({"topics": ["a", "b", "c"], "results": []}, cfg("fanout"))

    FAIL["on"] = True
    with pytest.raises(ValueError):
        failing().compile(checkpointer=saver).invoke({"log": []}, cfg("error"))
    conn.close()

    with SqliteStore.from_conn_string(str(path)) as store:
        store.setup()
        store.put(("users", "alice"), "prefs", {"theme": "dark"})
        store.put(("docs",), "readme", {"text": "one file"})


def norm(x: Any) -> Any:
    """Comparable values: exceptions by type and args (they compare by
    identity), containers walked, named tuples kept as their type."""
    if isinstance(x, BaseException):
        return ("exception", type(x).__name__, x.args)
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(norm(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(norm(v) for v in x)
    return x


def tuples(saver, thread: str) -> list:
    return list(saver.list(cfg(thread)))


def assert_same_history(src: Path, dst: Path, threads: list[str]) -> None:
    """LangGraph lists the same checkpoints from both files, field by field,
    pending writes in LangGraph's `writes_sort_key` order (task_path,
    task_id, idx), as SqliteSaver 3.1 returns them (the importer keeps every
    task_path)."""
    reference = SqliteSaver(sqlite3.connect(f"file:{src}?mode=ro", uri=True, check_same_thread=False))
    ours = AgentStateSaver(str(dst))
    for thread in threads:
        want, got = tuples(reference, thread), tuples(ours, thread)
        assert [t.config for t in got] == [t.config for t in want], thread
        assert len(want) > 0
        for w, g in zip(want, got):
            cid = w.config["configurable"]["checkpoint_id"]
            assert g.parent_config == w.parent_config, cid
            assert g.metadata == w.metadata, cid
            wc, gc = w.checkpoint, g.checkpoint
            for key in ("v", "id", "ts", "channel_versions", "versions_seen"):
                assert gc[key] == wc[key], (cid, key)
            assert gc.get("updated_channels") == wc.get("updated_channels"), cid
            assert norm(gc["channel_values"]) == norm(wc["channel_values"]), cid
            assert set(gc) == set(wc), cid
            # In LangGraph's writes_sort_key order (task_path, task_id, idx).
            assert norm(g.pending_writes) == norm(w.pending_writes), cid
            # get_tuple of that very checkpoint, too.
            one = ours.get_tuple(w.config)
            assert norm(one.checkpoint["channel_values"]) == norm(wc["channel_values"])
            assert norm(one.pending_writes) == norm(g.pending_writes)


def states(graph, thread: str) -> tuple:
    history = [norm(s) for s in graph.get_state_history(cfg(thread))]
    return norm(graph.get_state(cfg(thread), subgraphs=True)), history


@pytest.fixture
def imported(tmp_path):
    src = tmp_path / "langgraph.sqlite"
    write_langgraph_file(src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    dst = tmp_path / "agent.db"
    report = import_sqlite_saver(str(src), str(dst))
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest, "the source changed"
    assert sorted(os.listdir(tmp_path)) == ["agent.db", "langgraph.sqlite"]
    return src, dst, report


def test_report_counts_what_the_file_holds(imported):
    src, dst, report = imported
    conn = sqlite3.connect(str(src))
    count = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    assert report["checkpoints"] == count("SELECT COUNT(*) FROM checkpoints")
    assert report["writes"] == count("SELECT COUNT(*) FROM writes")
    assert report["threads"] == 6
    assert report["namespaces"] == count("SELECT COUNT(*) FROM (SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints)")
    assert report["store_items"] == 2 and report["store_vectors"] == 0
    assert report["source_bytes"] == src.stat().st_size
    assert report["destination_bytes"] == dst.stat().st_size
    assert report["merged"] is False
    assert agentstate.import_sqlite_saver is import_sqlite_saver


def test_langgraph_reads_the_same_history_from_both_files(imported):
    src, dst, _ = imported
    assert_same_history(src, dst, list(GRAPHS) + ["nested-paused"])


def test_pending_writes_come_in_langgraphs_task_path_order(imported):
    """The Send fan-out's tasks sort differently by path and by id."""
    src, dst, _ = imported
    assert_same_history(src, dst, ["fanout"])


def test_get_state_and_history_are_equal_and_threads_go_on(imported):
    src, dst, _ = imported
    reference = SqliteSaver(sqlite3.connect(str(src), check_same_thread=False))
    ours = AgentStateSaver(str(dst))
    for thread, build in list(GRAPHS.items()) + [("nested-paused", nested)]:
        want = states(build().compile(checkpointer=reference), thread)
        got = states(build().compile(checkpointer=ours), thread)
        assert got == want, thread

    # Each thread continues on either file to the same values (new messages
    # and interrupts get new ids: compared by type and content, and value).
    def plain_item(m):
        if isinstance(m, BaseMessage):
            return (m.type, m.content)
        if isinstance(m, Interrupt):
            return ("interrupt", m.value)
        return m

    def plain(values):
        return {k: [plain_item(m) for m in v] if isinstance(v, list) else v for k, v in values.items()}

    runs = {
        "chat": (chat, lambda g: g.invoke({"messages": [("user", "and now?")]}, cfg("chat"))),
        "nested-paused": (nested, lambda g: g.invoke(Command(resume="late"), cfg("nested-paused"))),
        "error": (failing, lambda g: g.invoke(None, cfg("error"))),
        "approval": (approval, lambda g: g.invoke({"plan": "", "approved": "", "done": False}, cfg("approval"))),
    }
    FAIL["on"] = False
    for thread, (build, run) in runs.items():
        outs = [plain(run(build().compile(checkpointer=s))) for s in (reference, ours)]
        assert outs[1] == outs[0], thread
    chat_state = chat().compile(checkpointer=ours).get_state(cfg("chat"))
    assert [m.content for m in chat_state.values["messages"]][-2] == "and now?"
    # The error thread resumed without redoing "ok" (its write was imported).
    assert sorted(failing().compile(checkpointer=ours).get_state(cfg("error")).values["log"]) == ["flaky", "ok"]


def test_errors_are_exceptions_and_leave_nothing(imported, tmp_path):
    src, dst, _ = imported
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileNotFoundError):
        import_sqlite_saver(str(tmp_path / "missing.sqlite"), str(tmp_path / "x.db"))
    with pytest.raises(ValueError, match="same file"):
        import_sqlite_saver(str(src), str(src))
    with pytest.raises(ValueError, match="not a LangGraph SqliteSaver file"):
        import_sqlite_saver(str(dst), str(tmp_path / "y.db"))
    with pytest.raises(ConflictError, match="already has checkpoints"):
        import_sqlite_saver(src, dst)  # path objects work too
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.skipif(not os.environ.get("AGENTSTATE_IMPORT_BENCH"), reason="slow: set AGENTSTATE_IMPORT_BENCH=1")
def test_bench_graph_file_of_200_invokes(tmp_path):
    """The file /work/shared/peer-bench/bench_graph.py's sqlite mode leaves
    (200 invokes on one thread, ~81 MB): see bench/import_sqlite_saver.py."""
    
    script = Path(__file__).resolve().parents[2] / "bench" / "import_sqlite_saver.py"
    spec = importlib.util.spec_from_file_location("import_bench", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    figures = bench.run(tmp_path, invokes=200)
    assert figures["destination_bytes"] * 10 < figures["source_bytes"]
