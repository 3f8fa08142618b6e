"""AgentStateSaver beyond the conformance suite: any serde's bytes stored
unchanged (encryption included), a growing message list stored as its new
messages only, write-behind, errors as exceptions, and one file shared by a
Python app and the Rust `agentstate` CLI."""

from __future__ import annotations

import gc
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentstate import AgentStateSaver, ConflictError


class XorSerializer:
    """A stand-in for EncryptedSerializer: LangGraph's serde, then every byte
    xor 0x5A, under its own tag. Rust cannot read these bytes; it must store
    them unchanged."""

    inner = JsonPlusSerializer()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        tag, data = self.inner.dumps_typed(obj)
        return f"{tag}+xor", bytes(b ^ 0x5A for b in data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        tag, raw = data
        assert tag.endswith("+xor"), tag
        return self.inner.loads_typed((tag[: -len("+xor")], bytes(b ^ 0x5A for b in raw)))


def _release(saver) -> None:
    """Closes the saver's file before Python's own sqlite3 opens it: two SQLite
    copies in one process must never have one file open at once (closing
    one drops the other's POSIX locks)."""
    saver.close()
    del saver
    gc.collect()


def _put(saver, config, values: dict[str, Any], parent_versions=None, step=0):
    cp = empty_checkpoint()
    cp["channel_values"] = values
    versions = dict(parent_versions or {})
    for k in values:
        versions[k] = saver.get_next_version(versions.get(k), None)
    cp["channel_versions"] = versions
    stored = saver.put(config, cp, {"source": "loop", "step": step, "parents": {}}, {k: versions[k] for k in values})
    return stored, versions


def test_a_custom_serde_round_trips_and_its_bytes_are_stored_unchanged(tmp_path):
    path = str(tmp_path / "xor.db")
    saver = AgentStateSaver(path, serde=XorSerializer())
    value = {"messages": [HumanMessage(content="secret", id="1")], "n": {"nested": [1, 2.5, None]}}
    stored, _ = _put(saver, {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, value)
    saver.put_writes(stored, [("messages", [AIMessage(content="w", id="2")])], "task-1")

    t = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert t.checkpoint["channel_values"] == value
    assert t.pending_writes == [("task-1", "messages", [AIMessage(content="w", id="2")])]
    _release(saver)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT channel, type, blob FROM checkpoint_blobs ORDER BY channel").fetchall()
    expected = {k: XorSerializer().dumps_typed(v) for k, v in value.items()}
    assert {ch: (tag, bytes(blob)) for ch, tag, blob in rows} == expected


def test_a_growing_message_list_is_stored_as_its_new_messages(tmp_path):
    path = str(tmp_path / "grow.db")
    saver = AgentStateSaver(path)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions = None
    messages = []
    for i in range(200):
        messages = messages + [AIMessage(content=f"message {i} " * 20, id=str(i))]
        config, versions = _put(saver, config, {"messages": messages}, versions, step=i)
    whole = sum(len(JsonPlusSerializer().dumps_typed(messages[: i + 1])[1]) for i in range(200))
    _release(saver)
    with sqlite3.connect(path) as conn:
        stored, deltas = conn.execute(
            "SELECT sum(length(blob)), count(base_version) FROM checkpoint_blobs WHERE channel = 'messages'"
        ).fetchone()
    assert deltas > 150
    assert stored * 20 < whole, (stored, whole)
    # Every version reads back whole, from a fresh saver.
    fresh = AgentStateSaver(path)
    history = list(fresh.list({"configurable": {"thread_id": "t"}}))
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in history] == list(range(200, 0, -1))
    assert history[0].checkpoint["channel_values"]["messages"] == messages


def test_list_decodes_each_message_once_and_equals_get_tuple(tmp_path):
    """An older version of an appended list is cut from the newer one the
    listing decoded (Checkpointer::list_encoded_sharing): every checkpoint
    still equals what get_tuple reads, across threads and with a limit; the
    checkpoints of one listing share message objects. A serde of yours is
    given every version whole."""
    path = str(tmp_path / "share.db")
    saver = AgentStateSaver(path)
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        versions, messages = None, []
        for i in range(120):
            messages = messages + [AIMessage(content=f"{thread} message {i} " * 20, id=f"{thread}{i}")]
            config, versions = _put(saver, config, {"messages": messages}, versions, step=i)
    fresh = AgentStateSaver(path)
    for config, limit in (({"configurable": {"thread_id": "a"}}, None), (None, None), (None, 7)):
        history = list(fresh.list(config, limit=limit))
        assert len(history) == limit or len(history) in (120, 240)
        for t in history:
            got = fresh.get_tuple(t.config)
            assert t.checkpoint["channel_values"] == got.checkpoint["channel_values"]
            assert t.metadata == got.metadata
    history = list(fresh.list({"configurable": {"thread_id": "b"}}))
    newest, older = (t.checkpoint["channel_values"]["messages"] for t in history[:2])
    assert older == newest[:-1] and older[0] is newest[0]
    # A value of another kind between two lists ends the list older ones
    # are cut from; a caller changing a listed list changes nothing else.
    config, versions, messages = {"configurable": {"thread_id": "c", "checkpoint_ns": ""}}, None, []
    long = [AIMessage(content=f"c {i} " * 40, id=str(i)) for i in range(60)]
    for step, value in enumerate([long[:50], b"raw", long[:51], {"k": 1}, long[:52]]):
        config, versions = _put(saver, config, {"messages": value}, versions, step=step)
    listed = [t.checkpoint["channel_values"]["messages"] for t in saver.list({"configurable": {"thread_id": "c"}})]
    assert listed == [long[:52], {"k": 1}, long[:51], b"raw", long[:50]]
    history = saver.list({"configurable": {"thread_id": "a"}})
    first = next(history)
    first.checkpoint["channel_values"]["messages"].clear()
    assert len(next(history).checkpoint["channel_values"]["messages"]) == 119
    # A serde that is not LangGraph's own gets whole bytes for every version.
    xor = AgentStateSaver(str(tmp_path / "xor.db"), serde=XorSerializer())
    config, versions, messages = {"configurable": {"thread_id": "x", "checkpoint_ns": ""}}, None, []
    for i in range(60):
        messages = messages + [AIMessage(content=f"x {i} " * 40, id=str(i))]
        config, versions = _put(xor, config, {"messages": messages}, versions, step=i)
    listed = [t.checkpoint["channel_values"]["messages"] for t in xor.list({"configurable": {"thread_id": "x"}})]
    assert listed == [messages[:n] for n in range(60, 0, -1)]
    assert listed[1][0] is not listed[0][0]


def test_write_behind_is_durable_after_flush_and_close(tmp_path):
    path = str(tmp_path / "wb.db")
    with AgentStateSaver.from_conn_string(path, write_behind=True) as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        versions = None
        for i in range(50):
            config, versions = _put(saver, config, {"n": [i]}, versions, step=i)
        # Reads through the same saver see every queued write.
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["channel_values"] == {"n": [49]}
    _release(saver)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 50


def test_write_behind_failure_is_raised_by_its_own_threads_flush(tmp_path):
    # Rust: Db::flush_thread. A queued put that is refused when it commits
    # (a version reused with another value) is raised by a flush of its own
    # thread, never by another thread's; a plain flush raises any thread's.
    saver = AgentStateSaver(str(tmp_path / "wb.db"), write_behind=True)
    a = {"configurable": {"thread_id": "a", "checkpoint_ns": ""}}
    b = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}
    stored, versions = _put(saver, a, {"x": [1]})
    saver.flush()
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": [2]}
    cp["channel_versions"] = versions
    saver.put(stored, cp, {"source": "loop", "step": 1, "parents": {}}, versions)  # queued
    _put(saver, b, {"y": [1]})
    saver.flush("b")
    with pytest.raises(ConflictError):
        saver.flush("a")
    saver.flush("a")  # reported once
    saver.put(stored, cp, {"source": "loop", "step": 1, "parents": {}}, versions)
    with pytest.raises(ConflictError):
        saver.flush()
    saver.flush()
    assert saver.get_tuple(a).checkpoint["channel_values"] == {"x": [1]}
    assert saver.get_tuple(b).checkpoint["channel_values"] == {"y": [1]}
    saver.close()


def test_errors_are_exceptions(tmp_path):
    saver = AgentStateSaver(str(tmp_path / "e.db"))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored, versions = _put(saver, config, {"a": [1]})
    # The same version with another value: a version names one value forever.
    cp = empty_checkpoint()
    cp["channel_values"] = {"a": [2]}
    cp["channel_versions"] = versions
    with pytest.raises(ConflictError):
        saver.put(stored, cp, {"source": "loop", "step": 1, "parents": {}}, versions)
    with pytest.raises(ValueError):
        AgentStateSaver(str(tmp_path / "d.db"), durability="sometimes")
    with pytest.raises(ValueError):
        saver.prune(["t"], strategy="everything")


def test_list_filter_is_langgraph_equality(tmp_path):
    saver = AgentStateSaver(str(tmp_path / "f.db"))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions = None
    for i in range(5):
        config, versions = _put(saver, config, {"n": i}, versions, step=i)
    steps = [t.metadata["step"] for t in saver.list(None, filter={"step": 3})]
    assert steps == [3]
    assert [t.metadata["step"] for t in saver.list(None, filter={"parents": {}})] == [4, 3, 2, 1, 0]
    assert [t.metadata["step"] for t in saver.list(None, limit=2)] == [4, 3]


def _cli() -> str | None:
    """The `agentstate` binary: $AGENTSTATE_CLI (CI sets it, so a missing
    binary fails there), or the workspace's debug build."""
    exe = os.environ.get("AGENTSTATE_CLI")
    if exe:
        return exe
    local = Path(__file__).resolve().parents[2] / "target" / "debug" / "agentstate"
    return str(local) if local.exists() else shutil.which("agentstate")


def test_the_rust_cli_reads_what_python_wrote(tmp_path):
    exe = _cli()
    if exe is None:
        pytest.skip("no agentstate binary: run `cargo build` (CI sets AGENTSTATE_CLI)")
    path = str(tmp_path / "shared.db")
    saver = AgentStateSaver(path)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    messages = [HumanMessage(content=f"hello {i}", id=str(i)) for i in range(300)]
    _put(saver, config, {"messages": messages, "count": 3, "plan": {"steps": ["a", "b"]}})
    out = subprocess.run([exe, "--json", path, "show", "t"], check=True, capture_output=True, text=True).stdout
    shown = json.loads(out)
    text = json.dumps(shown)
    assert '"hello 299"' in text and '"steps"' in text, text[:500]
