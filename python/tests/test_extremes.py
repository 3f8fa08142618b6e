"""The public Python API driven with extreme input: numbers at and beyond 64
bits, NaN and infinities, NUL bytes, lone surrogates, 1 MB strings, values
nested 10,000 deep, huge and negative limits, offsets and TTLs, odd
namespaces, filters and configs, misbehaving embedders.

The rule: each call either works and round-trips exactly (as LangGraph's
SqliteSaver / InMemorySaver / SqliteStore / InMemoryStore do, on their own
files), or raises a typed exception (never a panic, a hang or an untyped
error) and a read afterwards shows that nothing was stored. Where we refuse
what a LangGraph saver or store accepts, the test says so (DIFFERENCE).
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

import agentstate
from agentstate import AgentStateSaver, AgentStateStore

V1 = f"{1:032}.0000000000000001"
CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
MB = 1 << 20


def version(n: int) -> str:
    return f"{n:032}.0000000000000001"


def checkpoint(values: dict[str, Any], versions: dict[str, Any] | None = None) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions if versions is not None else {k: V1 for k in values}
    return cp


def nested_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"d": value}
    return value


def short(value: Any) -> str:
    """A test id: the value's repr, cut short (2**2000 has 600 digits)."""
    return repr(value)[:24]


def run(coro):
    return asyncio.run(coro)


# The savers and stores most tests use are in memory (the same code as on a
# file, a fifth of the setup time); the embedder, construction and thread
# tests use files.


@pytest.fixture
def saver():
    s = AgentStateSaver(":memory:")
    yield s
    s.close()


@pytest.fixture
def sqlite_saver(tmp_path):
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    s = SqliteSaver(conn)
    s.setup()
    yield s
    conn.close()


def nothing_stored(saver: AgentStateSaver) -> bool:
    return list(saver.list(None)) == []


# The sync and async forms of the saver's calls, for parametrizing.


def put(s, config, cp, metadata, new_versions, *, use_async=False):
    if use_async:
        return run(s.aput(config, cp, metadata, new_versions))
    return s.put(config, cp, metadata, new_versions)


def get(s, config, *, use_async=False):
    return run(s.aget_tuple(config)) if use_async else s.get_tuple(config)


def listing(s, config, *, use_async=False, **kwargs):
    if use_async:

        async def collect():
            return [t async for t in s.alist(config, **kwargs)]

        return run(collect())
    return list(s.list(config, **kwargs))


def put_writes(s, config, writes, task_id, task_path="", *, use_async=False):
    if use_async:
        return run(s.aput_writes(config, writes, task_id, task_path))
    return s.put_writes(config, writes, task_id, task_path)


MODES = pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])


# ===========================================================================
# AgentStateSaver
# ===========================================================================

# -- ids and names ------------------------------------------------------------


@MODES
@pytest.mark.parametrize(
    "thread_id, ns",
    [("a\x00b", ""), ("x" * MB, ""), ("t", "ns\x00"), ("t", "n" * MB), ("\U0001f600\u200b", "\u00e9")],
    ids=["nul-thread", "1mb-thread", "nul-ns", "1mb-ns", "non-ascii"],
)
def test_odd_thread_ids_and_namespaces_round_trip_like_sqlitesaver(saver, sqlite_saver, thread_id, ns, use_async):
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    values = {"a": [1, "x"], "b": "\x00"}
    sqlite_saver.put(config, checkpoint(values), {}, {k: V1 for k in values})
    expected = sqlite_saver.get_tuple(config)
    stored = put(saver, config, checkpoint(values), {}, {k: V1 for k in values}, use_async=use_async)
    assert stored["configurable"]["thread_id"] == thread_id
    got = get(saver, config, use_async=use_async)
    assert got.checkpoint["channel_values"] == expected.checkpoint["channel_values"] == values
    assert got.config["configurable"]["thread_id"] == thread_id
    assert got.config["configurable"]["checkpoint_ns"] == ns
    assert [t.checkpoint["id"] for t in listing(saver, config, use_async=use_async)] == [got.checkpoint["id"]]


@MODES
def test_an_empty_thread_id_is_refused_and_nothing_is_stored(saver, sqlite_saver, use_async):
    # DIFFERENCE: SqliteSaver stores a checkpoint under thread "", the crate
    # refuses an empty thread id (CheckpointConfig validation) with ValueError.
    config = {"configurable": {"thread_id": "", "checkpoint_ns": ""}}
    sqlite_saver.put(config, checkpoint({"a": 1}), {}, {"a": V1})
    assert sqlite_saver.get_tuple(config) is not None
    with pytest.raises(ValueError, match="thread_id"):
        put(saver, config, checkpoint({"a": 1}), {}, {"a": V1}, use_async=use_async)
    with pytest.raises(ValueError, match="thread_id"):
        put_writes(saver, {"configurable": {**config["configurable"], "checkpoint_id": "x"}}, [("a", 1)], "task", use_async=use_async)
    with pytest.raises(ValueError, match="thread_id"):
        get(saver, config, use_async=use_async)
    assert listing(saver, config, use_async=use_async) == []
    assert nothing_stored(saver)
    # Maintenance calls on "" are no-ops, copying onto "" is refused.
    put(saver, CONFIG, checkpoint({"a": 1}), {}, {"a": V1}, use_async=use_async)
    saver.delete_thread("")
    with pytest.raises(ValueError, match="thread_id"):
        saver.copy_thread("t", "")
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t"]


@MODES
@pytest.mark.parametrize("where", ["thread_id", "checkpoint_ns", "channel", "task_id", "write_channel"])
def test_lone_surrogates_in_names_raise_and_store_nothing(saver, sqlite_saver, where, use_async):
    # SqliteSaver raises too (UnicodeEncodeError from sqlite3, or its serde's
    # TypeError for a channel name); InMemorySaver keeps them.
    bad = "x\ud800"
    configurable = {"thread_id": bad if where == "thread_id" else "t", "checkpoint_ns": bad if where == "checkpoint_ns" else ""}
    config = {"configurable": configurable}
    channel = bad if where == "channel" else "a"
    for s in (sqlite_saver, saver):
        if where in ("task_id", "write_channel"):
            stored = s.put(CONFIG, checkpoint({"a": [1]}), {}, {"a": V1})
            writes = [(bad if where == "write_channel" else "a", 1)]
            task = bad if where == "task_id" else "task"
            with pytest.raises((ValueError, TypeError)):
                if s is saver:
                    put_writes(s, stored, writes, task, use_async=use_async)
                else:
                    s.put_writes(stored, writes, task)
            assert s.get_tuple(CONFIG).pending_writes == []
        else:
            with pytest.raises((ValueError, TypeError)):
                if s is saver:
                    put(s, config, checkpoint({channel: [1]}), {}, {channel: V1}, use_async=use_async)
                else:
                    s.put(config, checkpoint({channel: [1]}), {}, {channel: V1})
            assert list(s.list(None)) == []
    with pytest.raises(ValueError):
        saver.delete_thread(bad)
    with pytest.raises(ValueError):
        saver.delete_for_runs([bad])


# -- channel values -------------------------------------------------------------


EXACT_VALUES = {
    "i64_min": -(2**63),
    "i64_max": 2**63 - 1,
    "u64_max": 2**64 - 1,
    "big_float": 1e308,
    "neg_big_float": -1e308,
    "subnormal": 5e-324,
    "neg_zero": -0.0,
    "inf": float("inf"),
    "neg_inf": float("-inf"),
    "nul": "a\x00b",
    "empty": "",
    "true": True,
    "none": None,
    "mb": "m" * MB,
    "non_ascii": "\U0001f600 \u00e9",
    "nested_200": nested_lists(200),
}


@MODES
@pytest.mark.parametrize("name", list(EXACT_VALUES))
def test_extreme_channel_values_round_trip_exactly_like_sqlitesaver(saver, sqlite_saver, name, use_async):
    value = EXACT_VALUES[name]
    values = {"v": value, "empty_name": 1, "": "empty channel name", "nul\x00name": 2}
    sqlite_saver.put(CONFIG, checkpoint(values), {}, {k: V1 for k in values})
    expected = sqlite_saver.get_tuple(CONFIG).checkpoint["channel_values"]
    put(saver, CONFIG, checkpoint(values), {}, {k: V1 for k in values}, use_async=use_async)
    got = get(saver, CONFIG, use_async=use_async).checkpoint["channel_values"]
    assert got == expected == values
    assert type(got["v"]) is type(value)
    if name == "neg_zero":
        assert math.copysign(1.0, got["v"]) == -1.0
    [listed] = listing(saver, CONFIG, use_async=use_async)
    assert listed.checkpoint["channel_values"] == values


def test_nan_channel_value_comes_back_as_nan(saver, sqlite_saver):
    for s in (sqlite_saver, saver):
        s.put(CONFIG, checkpoint({"v": float("nan")}), {}, {"v": V1})
        assert math.isnan(s.get_tuple(CONFIG).checkpoint["channel_values"]["v"])


@MODES
@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, [1, 2**100], {"k": -(2**64)}, nested_lists(10_000)],
    ids=["2**64", "-2**63-1", "nested-big", "dict-big", "depth-10000"],
)
def test_channel_values_the_serde_cannot_encode_raise_and_store_nothing(saver, sqlite_saver, value, use_async):
    with pytest.raises(TypeError):
        sqlite_saver.put(CONFIG, checkpoint({"v": value}), {}, {"v": V1})
    with pytest.raises(TypeError):
        put(saver, CONFIG, checkpoint({"ok": [1], "v": value}), {}, {"ok": V1, "v": V1}, use_async=use_async)
    assert get(saver, CONFIG, use_async=use_async) is None
    assert nothing_stored(saver)


# -- the checkpoint's own JSON ----------------------------------------------------


@MODES
@pytest.mark.parametrize(
    "field, value",
    [("extra", 2**64), ("extra", {"x": [2**70]}), ("extra", -(2**63) - 1), ("v", 2**64)],
    ids=["extra-2**64", "extra-nested-2**70", "extra--2**63-1", "v-2**64"],
)
def test_integers_beyond_64_bits_in_the_checkpoint_are_refused_not_rounded(saver, sqlite_saver, field, value, use_async):
    # LangGraph's savers refuse them (msgpack: TypeError). Before the fix the
    # crate's JSON read an unknown key's 2**64 back as 1.8446744073709552e19.
    cp = checkpoint({"a": [1]})
    cp[field] = value
    with pytest.raises(TypeError):
        sqlite_saver.put(CONFIG, cp, {}, {"a": V1})
    with pytest.raises(ValueError, match="64 bits"):
        put(saver, CONFIG, cp, {}, {"a": V1}, use_async=use_async)
    assert nothing_stored(saver)


def test_extra_checkpoint_fields_at_the_64_bit_edges_round_trip(saver, sqlite_saver):
    cp = checkpoint({"a": [1]})
    cp["extra"] = {"u64": 2**64 - 1, "i64": -(2**63), "f": 1e308, "s": "\x00"}
    sqlite_saver.put(CONFIG, cp, {}, {"a": V1})
    saver.put(CONFIG, cp, {}, {"a": V1})
    assert saver.get_tuple(CONFIG).checkpoint["extra"] == sqlite_saver.get_tuple(CONFIG).checkpoint["extra"] == cp["extra"]


@MODES
@pytest.mark.parametrize("v", [2**63 - 1, -1, 0, "", "x\x00", "9" * 40 + ".5"])
def test_extreme_channel_versions_round_trip(saver, v, use_async):
    put(saver, CONFIG, checkpoint({"a": [1]}, {"a": v}), {}, {"a": v}, use_async=use_async)
    got = get(saver, CONFIG, use_async=use_async)
    assert got.checkpoint["channel_versions"] == {"a": v}
    assert got.checkpoint["channel_values"] == {"a": [1]}


@MODES
@pytest.mark.parametrize("v", [2**63, 2**64, -(2**63) - 1, None, True, 1.5, [1]])
def test_channel_versions_the_crate_cannot_hold_are_refused(saver, v, use_async):
    with pytest.raises(ValueError):
        put(saver, CONFIG, checkpoint({"a": [1]}, {"a": v}), {}, {"a": v}, use_async=use_async)
    assert nothing_stored(saver)


@MODES
def test_checkpoint_shapes_that_are_not_checkpoints_are_refused(saver, use_async):
    no_id = checkpoint({"a": 1})
    del no_id["id"]
    empty_id = checkpoint({"a": 1})
    empty_id["id"] = ""
    int_ts = checkpoint({"a": 1})
    int_ts["ts"] = 5
    seen = checkpoint({"a": 1})
    seen["versions_seen"] = {"node": 5}
    for cp in (no_id, empty_id, int_ts, seen):
        with pytest.raises(ValueError):
            put(saver, CONFIG, cp, {}, {"a": V1}, use_async=use_async)
    no_versions = checkpoint({"a": 1})
    del no_versions["channel_versions"]
    with pytest.raises(KeyError):
        put(saver, CONFIG, no_versions, {}, {"a": V1}, use_async=use_async)
    with pytest.raises(KeyError):
        put(saver, CONFIG, {"id": "x"}, {}, {}, use_async=use_async)
    assert nothing_stored(saver)
    # A NUL byte in the id is a string like any other.
    nul = checkpoint({"a": 1})
    nul["id"] = "a\x00b"
    put(saver, CONFIG, nul, {}, {"a": V1}, use_async=use_async)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "a\x00b"}}
    assert get(saver, config, use_async=use_async).checkpoint["id"] == "a\x00b"


# -- metadata ------------------------------------------------------------------------


@MODES
def test_metadata_extremes(saver, sqlite_saver, use_async):
    metadata = {"u64": 2**64 - 1, "i64": -(2**63), "f": -1e308, "tiny": 5e-324, "nul\x00key": "v\x00", "deep": nested_lists(100)}
    sqlite_saver.put(CONFIG, checkpoint({"a": 1}), metadata, {"a": V1})
    put(saver, CONFIG, checkpoint({"a": 1}), metadata, {"a": V1}, use_async=use_async)
    got = get(saver, CONFIG, use_async=use_async).metadata
    assert got == sqlite_saver.get_tuple(CONFIG).metadata
    assert got["u64"] == 2**64 - 1 and got["deep"] == nested_lists(100)


@MODES
def test_metadata_nested_past_the_json_depth_limit_is_refused(saver, sqlite_saver, use_async):
    # DIFFERENCE: SqliteSaver keeps metadata 200 deep; the crate's JSON reads
    # 128 levels. Refused (ValueError), nothing stored.
    sqlite_saver.put(CONFIG, checkpoint({"a": 1}), {"d": nested_lists(200)}, {"a": V1})
    assert sqlite_saver.get_tuple(CONFIG).metadata["d"] == nested_lists(200)
    with pytest.raises(ValueError):
        put(saver, CONFIG, checkpoint({"a": 1}), {"d": nested_lists(200)}, {"a": V1}, use_async=use_async)
    assert nothing_stored(saver)


@MODES
def test_metadata_10000_deep_raises_recursion_error_like_sqlitesaver(saver, sqlite_saver, use_async):
    with pytest.raises(RecursionError):
        sqlite_saver.put(CONFIG, checkpoint({"a": 1}), {"d": nested_lists(10_000)}, {"a": V1})
    with pytest.raises(RecursionError):
        put(saver, CONFIG, checkpoint({"a": 1}), {"d": nested_lists(10_000)}, {"a": V1}, use_async=use_async)
    assert nothing_stored(saver)


# -- list: limits and filters -------------------------------------------------------


def three_checkpoints(s) -> None:
    config = CONFIG
    for i in range(3):
        v = version(i + 1)
        config = s.put(config, checkpoint({"a": [i]}, {"a": v}), {"step": i, "d": {"k": i}, "big": 2**64 - 1}, {"a": v})


@MODES
@pytest.mark.parametrize("limit", [0, 1, True, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30])
def test_list_limits_match_inmemorysaver(saver, limit, use_async):
    # SqliteSaver raises OverflowError from sqlite3 beyond 2**63 - 1;
    # InMemorySaver (and we) take a limit beyond any count as no limit.
    reference = InMemorySaver()
    three_checkpoints(reference)
    three_checkpoints(saver)
    expected = [t.metadata["step"] for t in reference.list(CONFIG, limit=limit)]
    assert [t.metadata["step"] for t in listing(saver, CONFIG, limit=limit, use_async=use_async)] == expected


@MODES
@pytest.mark.parametrize("limit, error", [(-1, ValueError), (-(2**64), ValueError), (1.5, TypeError), ("2", TypeError)])
def test_list_limits_that_are_not_counts_raise(saver, limit, error, use_async):
    # LangGraph's savers disagree on a negative limit (SqliteSaver: no limit,
    # InMemorySaver: nothing); we refuse it.
    three_checkpoints(saver)
    with pytest.raises(error):
        listing(saver, CONFIG, limit=limit, use_async=use_async)


@MODES
@pytest.mark.parametrize(
    "filter",
    [
        {"step": 1},
        {"step": 1.0},
        {"step": 2**64},
        {"big": 2**64 - 1},
        {"d": {"k": 1}},
        {"d": {"$gt": 0}},
        {"step": {"$foo": 1}},
        {"step": [1]},
        {"a.b": 1},
        {"missing": None},
        {"step": "\x00"},
    ],
    ids=short,
)
def test_list_filters_match_inmemorysaver(saver, filter, use_async):
    reference = InMemorySaver()
    three_checkpoints(reference)
    three_checkpoints(saver)
    expected = [t.metadata["step"] for t in reference.list(None, filter=filter)]
    assert [t.metadata["step"] for t in listing(saver, None, filter=filter, use_async=use_async)] == expected


@MODES
@pytest.mark.parametrize(
    "filter", [{"": 1}, {"step\x00": 1}, {"$foo": 1}, {"step": float("nan")}, {"step": float("-inf")}], ids=short
)
def test_list_filters_that_are_not_filters_raise_value_error(saver, sqlite_saver, filter, use_async):
    # NaN and infinities are not JSON: refused (DIFFERENCE: LangGraph's savers
    # match nothing).
    three_checkpoints(saver)
    if not any(isinstance(v, float) for v in filter.values()):
        with pytest.raises(ValueError):  # SqliteSaver: "Invalid filter key"
            list(sqlite_saver.list(None, filter=filter))
    with pytest.raises(ValueError):
        listing(saver, None, filter=filter, use_async=use_async)


@MODES
def test_an_empty_checkpoint_id_means_the_newest_like_sqlitesaver(saver, sqlite_saver, use_async):
    # LangGraph's savers treat checkpoint_id "" as no id. Before the fix
    # get_tuple returned None and list nothing.
    three_checkpoints(sqlite_saver)
    three_checkpoints(saver)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ""}}
    expected = sqlite_saver.get_tuple(config)
    got = get(saver, config, use_async=use_async)
    assert got is not None and got.metadata["step"] == expected.metadata["step"] == 2
    assert [t.metadata["step"] for t in listing(saver, config, use_async=use_async)] == [
        t.metadata["step"] for t in sqlite_saver.list(config)
    ]


@MODES
def test_configs_missing_keys(saver, use_async):
    three_checkpoints(saver)
    with pytest.raises(KeyError):
        get(saver, {}, use_async=use_async)
    with pytest.raises(KeyError):
        get(saver, {"configurable": {}}, use_async=use_async)
    with pytest.raises(KeyError):
        put(saver, {"configurable": {}}, checkpoint({"a": 1}), {}, {"a": V1}, use_async=use_async)
    with pytest.raises(KeyError):
        put_writes(saver, CONFIG, [("a", 1)], "task", use_async=use_async)  # no checkpoint_id
    with pytest.raises(TypeError):
        get(saver, {"configurable": {"thread_id": "t", "checkpoint_ns": None}}, use_async=use_async)
    # A missing namespace is the root one; an unknown checkpoint id is None.
    assert get(saver, {"configurable": {"thread_id": "t"}}, use_async=use_async).metadata["step"] == 2
    unknown = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "\x00" * 100}}
    assert get(saver, unknown, use_async=use_async) is None
    assert listing(saver, {}, use_async=use_async) == listing(saver, None, use_async=use_async)
    assert len(listing(saver, None, use_async=use_async)) == 3


# -- writes ------------------------------------------------------------------------------


@MODES
def test_odd_writes_round_trip_like_sqlitesaver(saver, sqlite_saver, use_async):
    writes = [("nul\x00channel", "v\x00"), ("", 2**64 - 1), ("__error__", "boom"), ("big", "b" * MB)]
    results = []
    for s in (sqlite_saver, saver):
        stored = s.put(CONFIG, checkpoint({"a": [1]}), {}, {"a": V1})
        if s is saver:
            put_writes(s, stored, writes, "", "p" * MB, use_async=use_async)
        else:
            s.put_writes(stored, writes, "", "p" * MB)
        results.append(sorted(s.get_tuple(CONFIG).pending_writes, key=lambda w: w[1]))
    assert results[0] == results[1]
    assert sorted(w[1:] for w in results[1]) == sorted(writes)


@MODES
def test_a_batch_of_writes_with_one_bad_value_stores_none_of_them(saver, sqlite_saver, use_async):
    for s in (sqlite_saver, saver):
        stored = s.put(CONFIG, checkpoint({"a": [1]}), {}, {"a": V1})
        for bad in (2**64, nested_lists(10_000)):
            with pytest.raises(TypeError):
                if s is saver:
                    put_writes(s, stored, [("ok", 1), ("bad", bad)], "task", use_async=use_async)
                else:
                    s.put_writes(stored, [("ok", 1), ("bad", bad)], "task")
        assert s.get_tuple(CONFIG).pending_writes == []


# -- maintenance -------------------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("strategy", ["bogus", "", "KEEP_LATEST", "keep_latest\x00"])
def test_an_unknown_prune_strategy_is_refused_and_deletes_nothing(saver, strategy, use_async):
    three_checkpoints(saver)
    with pytest.raises(ValueError, match="prune strategy"):
        if use_async:
            run(saver.aprune(["t"], strategy=strategy))
        else:
            saver.prune(["t"], strategy=strategy)
    assert len(list(saver.list(CONFIG))) == 3


@MODES
def test_maintenance_with_odd_thread_ids(saver, use_async):
    three_checkpoints(saver)

    def call(name, *args, **kwargs):
        if use_async:
            return run(getattr(saver, "a" + name)(*args, **kwargs))
        return getattr(saver, name)(*args, **kwargs)

    # Unknown, NUL and 1 MB ids are no-ops.
    call("delete_thread", "\x00")
    call("delete_thread", "x" * MB)
    call("delete_for_runs", [])
    call("delete_for_runs", ["", "\x00"])
    call("prune", [], strategy="delete")
    call("prune", ["", "\x00"], strategy="delete")
    call("copy_thread", "missing", "u")
    assert len(list(saver.list(None))) == 3
    # Copying onto a thread that has checkpoints is a conflict and changes nothing.
    call("copy_thread", "t", "\x00copy")
    with pytest.raises(agentstate.ConflictError):
        call("copy_thread", "t", "\x00copy")
    copy = {"configurable": {"thread_id": "\x00copy", "checkpoint_ns": ""}}
    assert [t.metadata["step"] for t in saver.list(copy)] == [2, 1, 0]
    call("prune", ["\x00copy"], strategy="keep_latest")
    assert [t.metadata["step"] for t in saver.list(copy)] == [2]
    assert [t.metadata["step"] for t in saver.list(CONFIG)] == [2, 1, 0]


@pytest.mark.parametrize("current", [None, 0, True, -1, 2**64, "9" * 40 + ".5"])
def test_get_next_version_matches_sqlitesaver_beyond_64_bits(saver, sqlite_saver, current):
    ours, theirs = saver.get_next_version(current, None), sqlite_saver.get_next_version(current, None)
    assert ours.split(".")[0] == theirs.split(".")[0]


def test_get_next_version_of_garbage_raises_like_sqlitesaver(saver, sqlite_saver):
    for current, error in (("", ValueError), ("abc", ValueError), (1.5, AttributeError)):
        for s in (saver, sqlite_saver):
            with pytest.raises(error):
                s.get_next_version(current, None)


# -- construction -----------------------------------------------------------------------------------


def test_saver_construction_with_odd_arguments(tmp_path):
    with pytest.raises(ValueError, match="NUL"):
        AgentStateSaver(str(tmp_path / "a\x00b.db"))
    with pytest.raises(ValueError):
        AgentStateSaver(str(tmp_path / "\ud800.db"))  # not UTF-8 (UnicodeEncodeError)
    with pytest.raises(ValueError, match="durability"):
        AgentStateSaver(str(tmp_path / "d.db"), durability="FULL")
    with pytest.raises(agentstate.Error):
        AgentStateSaver(str(tmp_path))  # a directory
    assert list(tmp_path.iterdir()) == []


# ===========================================================================
# AgentStateStore
# ===========================================================================


@pytest.fixture
def store():
    s = AgentStateStore(":memory:")
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path):
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    s = SqliteStore(conn)
    s.setup()
    yield s
    conn.close()


def empty(store: AgentStateStore) -> bool:
    return store.list_namespaces() == [] and store.search((), limit=10) == []


def s_put(s, ns, key, value, *, use_async=False, **kwargs):
    if use_async:
        return run(s.aput(ns, key, value, **kwargs))
    return s.put(ns, key, value, **kwargs)


def s_get(s, ns, key, *, use_async=False):
    return run(s.aget(ns, key)) if use_async else s.get(ns, key)


def s_search(s, prefix, *, use_async=False, **kwargs):
    return run(s.asearch(prefix, **kwargs)) if use_async else s.search(prefix, **kwargs)


def s_list(s, *, use_async=False, **kwargs):
    return run(s.alist_namespaces(**kwargs)) if use_async else s.list_namespaces(**kwargs)


def s_batch(s, ops, *, use_async=False):
    return run(s.abatch(ops)) if use_async else s.batch(ops)


# -- keys and namespaces -------------------------------------------------------


@MODES
@pytest.mark.parametrize(
    "namespace, key",
    [
        (("a",), ""),
        (("a",), "k\x00"),
        (("a",), "k" * MB),
        (("a", "b" * MB), "k"),
        (("a",) + tuple(str(i) for i in range(1000)), "k"),
        (("*",), "*"),
        (("\U0001f600", "\u00e9"), "\u200b"),
    ],
    ids=["empty-key", "nul-key", "1mb-key", "1mb-label", "1000-labels", "star", "non-ascii"],
)
def test_odd_keys_and_namespaces_round_trip_like_sqlitestore(store, sqlite_store, namespace, key, use_async):
    value = {"x": 1}
    sqlite_store.put(namespace, key, value)
    assert sqlite_store.get(namespace, key).value == value
    s_put(store, namespace, key, value, use_async=use_async)
    item = s_get(store, namespace, key, use_async=use_async)
    assert (item.namespace, item.key, item.value) == (namespace, key, value)
    assert [(i.namespace, i.key) for i in s_search(store, namespace, use_async=use_async)] == [(namespace, key)]
    assert s_list(store, use_async=use_async) == [namespace]


@MODES
@pytest.mark.parametrize(
    "namespace, key, error",
    [
        (("a", ""), "k", InvalidNamespaceError),
        (("a.b",), "k", InvalidNamespaceError),
        (("a", "b\x00"), "k", InvalidNamespaceError),
        (("langgraph",), "k", InvalidNamespaceError),
        ((), "k", InvalidNamespaceError),
        (("a", 1), "k", InvalidNamespaceError),
        (("a", "\ud800"), "k", UnicodeEncodeError),
        (("a",), "\ud800", UnicodeEncodeError),
    ],
    ids=["empty-label", "dot", "nul-label", "langgraph", "empty", "int-label", "surrogate-label", "surrogate-key"],
)
def test_bad_namespaces_and_keys_raise_and_store_nothing(store, sqlite_store, namespace, key, error, use_async):
    with pytest.raises(error):
        sqlite_store.put(namespace, key, {"x": 1})
    with pytest.raises(error):
        s_put(store, namespace, key, {"x": 1}, use_async=use_async)
    # Also as a raw op in a batch (BaseStore.put's own checks skipped).
    with pytest.raises((error, InvalidNamespaceError, TypeError)):
        s_batch(store, [PutOp(("ok",), "k", {"x": 1}), PutOp(namespace, key, {"x": 1})], use_async=use_async)
    assert empty(store)


# -- values ---------------------------------------------------------------------


@MODES
def test_extreme_values_round_trip_like_sqlitestore(store, sqlite_store, use_async):
    value = {
        "u64": 2**64 - 1,
        "i64": -(2**63),
        "big": 1e308,
        "tiny": 5e-324,
        "neg_zero": -0.0,
        "nul": "\x00",
        "nul\x00key": 1,
        "mb": "m" * MB,
        "deep": nested_dicts(125),
        "": [],
    }
    sqlite_store.put(("a",), "k", value)
    s_put(store, ("a",), "k", value, use_async=use_async)
    got = s_get(store, ("a",), "k", use_async=use_async).value
    assert got == sqlite_store.get(("a",), "k").value == value
    assert type(got["u64"]) is int and math.copysign(1.0, got["neg_zero"]) == -1.0
    [hit] = s_search(store, ("a",), use_async=use_async)
    assert hit.value == value


@MODES
def test_nan_and_infinity_are_stored_as_null_like_sqlitestore(store, sqlite_store, use_async):
    # orjson writes them as null, in SqliteStore too.
    value = {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf")}
    sqlite_store.put(("a",), "k", value)
    s_put(store, ("a",), "k", value, use_async=use_async)
    expected = {"nan": None, "inf": None, "ninf": None}
    assert s_get(store, ("a",), "k", use_async=use_async).value == sqlite_store.get(("a",), "k").value == expected


@MODES
@pytest.mark.parametrize(
    "value, error",
    [
        ({"x": 2**64}, TypeError),
        ({"x": -(2**63) - 1}, TypeError),
        ({"x": "\ud800"}, TypeError),
        ({"\ud800": 1}, TypeError),
        ({1: 2}, TypeError),
        ({"x": nested_dicts(10_000)}, TypeError),
        ({"x": object()}, TypeError),
    ],
    ids=["2**64", "-2**63-1", "surrogate", "surrogate-key", "int-key", "depth-10000", "object"],
)
def test_values_json_cannot_hold_raise_like_sqlitestore_and_store_nothing(store, sqlite_store, value, error, use_async):
    with pytest.raises(error):
        sqlite_store.put(("a",), "k", value)
    with pytest.raises(error):
        s_put(store, ("a",), "k", value, use_async=use_async)
    assert empty(store)


@MODES
def test_values_past_the_depth_limit_are_refused(store, sqlite_store, use_async):
    # DIFFERENCE: SqliteStore keeps any depth orjson writes; the store keeps
    # 127 levels (documented in python/src/store.rs).
    s_put(store, ("a",), "ok", nested_dicts(127), use_async=use_async)
    assert s_get(store, ("a",), "ok", use_async=use_async).value == nested_dicts(127)
    sqlite_store.put(("a",), "k", nested_dicts(200))
    with pytest.raises(ValueError, match="127"):
        s_put(store, ("b",), "k", nested_dicts(128), use_async=use_async)
    assert s_list(store, use_async=use_async) == [("a",)]


# -- TTL --------------------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("ttl", [0.5, 1e6, 1e9, 2**20, 1e-300])
def test_long_and_tiny_ttls_work(store, ttl, use_async):
    s_put(store, ("a",), "k", {"x": 1}, ttl=ttl, use_async=use_async)
    if ttl >= 0.5:
        assert s_get(store, ("a",), "k", use_async=use_async).value == {"x": 1}
    else:
        # Expired a moment later (the store keeps milliseconds): never returned.
        time.sleep(0.01)
        assert s_get(store, ("a",), "k", use_async=use_async) is None
        assert s_search(store, ("a",), use_async=use_async) == []


@MODES
@pytest.mark.parametrize(
    "ttl, error",
    [
        (1e10, ValueError),  # beyond the crate's 10**9 minutes (SqliteStore: OverflowError)
        (2**53, ValueError),
        (2**64, ValueError),
        (2**2000, ValueError),  # float() of it overflowed: OverflowError before the fix
        (10**400, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (-1, ValueError),
        (-1e-300, ValueError),
        (True, TypeError),
        ("5", TypeError),
    ],
    ids=short,
)
def test_ttls_out_of_range_raise_and_store_nothing(store, ttl, error, use_async):
    with pytest.raises(error):
        s_put(store, ("a",), "k", {"x": 1}, ttl=ttl, use_async=use_async)
    with pytest.raises(error):
        s_batch(store, [PutOp(("a",), "k0", {"x": 0}), PutOp(("a",), "k", {"x": 1}, ttl=ttl)], use_async=use_async)
    assert empty(store)


def test_a_default_ttl_beyond_floats_is_refused_at_put(tmp_path):
    with AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": 2**2000}) as store:
        with pytest.raises(ValueError):
            store.put(("a",), "k", {"x": 1})
        assert empty(store)
    for bad in (float("nan"), float("inf"), -1e-9):
        with pytest.raises(ValueError):
            AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": bad})


@pytest.mark.parametrize("interval", [-5, -1e-9, float("nan"), float("-inf")])
def test_a_sweep_interval_that_would_busy_loop_is_refused(tmp_path, interval):
    # LangGraph's SqliteStore waits interval * 60 seconds: a negative or NaN
    # interval swept in a busy loop (as ours did before the fix).
    with AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": 1}) as store:
        with pytest.raises(ValueError, match="sweep_interval_minutes"):
            store.start_ttl_sweeper(interval)
        assert store._ttl_sweeper_thread is None


@pytest.mark.parametrize("interval", [1e300, float("inf"), 2**70])
def test_a_huge_sweep_interval_keeps_the_sweeper_alive_and_close_stops_it(tmp_path, interval):
    # Before the fix Event.wait(1e302) raised OverflowError in the thread and
    # the sweeper died at once.
    store = AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": 1})
    future = store.start_ttl_sweeper(interval)
    time.sleep(0.05)
    thread = store._ttl_sweeper_thread
    assert thread.is_alive() and not future.done()
    started = time.monotonic()
    store.close()
    assert not thread.is_alive() and time.monotonic() - started < 5


# -- search: limits, offsets, filters ---------------------------------------------


def fill(s) -> None:
    for j in range(3):
        s.put(("a", "b"), f"k{j}", {"n": j, "s": str(j), "big": 2**64 - 1 if j == 0 else -(2**63), "nested": {"x": j}})


COUNTS = [0, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30]


@MODES
@pytest.mark.parametrize("limit", COUNTS)
def test_search_limits_and_offsets_match_inmemorystore(store, limit, use_async):
    # SqliteStore raises OverflowError from sqlite3 beyond 2**63 - 1; before
    # the fix we raised it beyond 2**64 - 1.
    reference = InMemoryStore()
    fill(reference)
    fill(store)
    for offset in (0, 1, 2**63, 2**64, 10**30):
        expected = [i.key for i in reference.search(("a",), limit=limit, offset=offset)]
        got = [i.key for i in s_search(store, ("a",), limit=limit, offset=offset, use_async=use_async)]
        assert got == expected, offset


@MODES
@pytest.mark.parametrize("kwargs", [{"limit": -1}, {"offset": -1}, {"limit": 1.5}, {"limit": True}, {"offset": "1"}], ids=short)
def test_search_limits_that_are_not_counts_raise_value_error(store, kwargs, use_async):
    # LangGraph's stores disagree on negative limits and offsets (SqliteStore:
    # no limit, InMemoryStore: Python slicing); we refuse them.
    fill(store)
    with pytest.raises(ValueError):
        s_search(store, ("a",), use_async=use_async, **kwargs)


@MODES
@pytest.mark.parametrize(
    "filter",
    [
        {"n": 1},
        {"n": 1.0},
        {"big": 2**64 - 1},
        {"big": -(2**63)},
        {"n": float("nan")},
        {"n": float("inf")},
        {"n": {"$gt": 0, "$lt": 2}},
        {"n": {"$gt": 1e308}},
        {"n": {"$gte": -1e308}},
        {"nested": {"x": 1}},
        {"s": "\x00"},
        {"n": {"$eq": {"$gt": 1}}},
    ],
    ids=short,
)
def test_search_filters_match_inmemorystore(store, filter, use_async):
    reference = InMemoryStore()
    fill(reference)
    fill(store)
    expected = [i.key for i in reference.search(("a",), filter=filter)]
    assert [i.key for i in s_search(store, ("a",), filter=filter, use_async=use_async)] == expected


@MODES
@pytest.mark.parametrize(
    "filter, error",
    [
        ({"n": {"$foo": 1}}, ValueError),
        ({"$foo": 1}, ValueError),
        ({"": 1}, ValueError),
        ({"\x00": 1}, ValueError),
        ({"n": {"$gt": None}}, ValueError),
        ({"n": {"$in": 5}}, ValueError),
        ({"n": {"$gt": [1]}}, ValueError),
        ({"$or": 5}, ValueError),
        ({"n": 2**64}, TypeError),  # orjson, as in SqliteStore's put
    ],
    ids=short,
)
def test_search_filters_that_are_not_filters_raise_and_change_nothing(store, filter, error, use_async):
    fill(store)
    with pytest.raises(error):
        s_search(store, ("a",), filter=filter, use_async=use_async)
    # In a batch, the put before the bad search is not stored either.
    with pytest.raises(error):
        s_batch(store, [PutOp(("z",), "k", {"x": 1}), SearchOp(("a",), filter=filter)], use_async=use_async)
    assert s_list(store, use_async=use_async) == [("a", "b")]


# -- list_namespaces ----------------------------------------------------------------------


def fill_namespaces(s) -> None:
    fill(s)
    s.put(("a", "c", "d"), "k", {"x": 1})
    s.put(("z",), "k", {"x": 1})


@MODES
@pytest.mark.parametrize(
    "cases",
    [
        [{"max_depth": d} for d in (0, 1, 2**63, 2**64, 10**30)],
        [{"limit": n} for n in COUNTS],
        [{"offset": n} for n in COUNTS],
        [{"prefix": ("*",)}, {"prefix": ("a", "*")}, {"suffix": ("*",)}, {"suffix": ("d",)}, {"prefix": ()}, {"suffix": ()}],
    ],
    ids=["max_depth", "limit", "offset", "wildcards"],
)
def test_list_namespaces_extremes_match_inmemorystore(store, cases, use_async):
    reference = InMemoryStore()
    fill_namespaces(reference)
    fill_namespaces(store)
    for kwargs in cases:
        assert s_list(store, use_async=use_async, **kwargs) == reference.list_namespaces(**kwargs), kwargs


@MODES
@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"max_depth": -1}, ValueError),
        ({"limit": -1}, ValueError),
        ({"offset": -1}, ValueError),
        ({"prefix": ("",)}, InvalidNamespaceError),
        ({"prefix": ("a.b",)}, InvalidNamespaceError),
        ({"suffix": ("\x00",)}, InvalidNamespaceError),
        ({"prefix": ("\ud800",)}, UnicodeEncodeError),
    ],
    ids=short,
)
def test_list_namespaces_bad_arguments_raise(store, kwargs, error, use_async):
    fill_namespaces(store)
    with pytest.raises(error):
        s_list(store, use_async=use_async, **kwargs)


@MODES
def test_an_unknown_match_type_is_refused(store, use_async):
    # SqliteStore logs it and ignores the condition.
    op = ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),))
    with pytest.raises(ValueError, match="match_type"):
        s_batch(store, [PutOp(("a",), "k", {"x": 1}), op], use_async=use_async)
    assert empty(store)


# -- batches are all or nothing ----------------------------------------------------------------


BAD_SECOND_OPS = {
    "value-2**64": (PutOp(("a",), "k2", {"x": 2**64}), TypeError),
    "value-too-deep": (PutOp(("a",), "k2", nested_dicts(130)), ValueError),
    "ttl-1e10": (PutOp(("a",), "k2", {"x": 1}, ttl=1e10), ValueError),
    "ttl-negative": (PutOp(("a",), "k2", {"x": 1}, ttl=-1), ValueError),
    "langgraph-namespace": (PutOp(("langgraph",), "k", {"x": 1}), InvalidNamespaceError),
    "index-true": (PutOp(("a",), "k2", {"x": 1}, index=True), TypeError),
    "index-str": (PutOp(("a",), "k2", {"x": 1}, index="x"), TypeError),
    "search-limit-negative": (SearchOp(("a",), limit=-1), ValueError),
    "search-query-no-index": (SearchOp(("a",), query="q"), ValueError),
    "get-surrogate-key": (GetOp(("a",), "\ud800"), UnicodeEncodeError),
    "not-an-op": ("not an op", TypeError),
}


@MODES
@pytest.mark.parametrize("name", list(BAD_SECOND_OPS))
def test_a_batch_with_one_bad_op_raises_and_stores_nothing(store, name, use_async):
    bad, error = BAD_SECOND_OPS[name]
    with pytest.raises(error):
        s_batch(store, [PutOp(("a",), "k1", {"x": 1}), bad], use_async=use_async)
    assert empty(store)


# -- embedders ------------------------------------------------------------------------------


class Fixed(Embeddings):
    """Returns `docs(texts)` and `query(text)`; by default [1, 0, 0]."""

    def __init__(self, docs=None, query=None) -> None:
        self.docs = docs or (lambda texts: [[1.0, 0.0, 0.0] for _ in texts])
        self.query = query or (lambda text: [1.0, 0.0, 0.0])

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.docs(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.query(text)


def indexed(path: Path, embeddings: Embeddings, dims: Any = 3, **extra: Any) -> AgentStateStore:
    return AgentStateStore(path, index={"dims": dims, "embed": embeddings, "embedder_name": "fixed", **extra})


@MODES
@pytest.mark.parametrize(
    "vector, error",
    [
        ([float("nan"), 0.0, 0.0], ValueError),
        ([float("inf"), 0.0, 0.0], ValueError),
        ([1e308, 1.0, 1.0], ValueError),  # infinite as f32
        ([1e39, 0.0, 0.0], ValueError),
        ([1.0, 0.0], ValueError),  # dims
        ([1.0, 0.0, 0.0, 0.0], ValueError),
        (["a", 0.0, 0.0], TypeError),
    ],
    ids=["nan", "inf", "1e308", "1e39", "short", "long", "str"],
)
def test_a_bad_document_vector_raises_and_stores_nothing(tmp_path, vector, error, use_async):
    # DIFFERENCE: InMemoryStore stores NaN/inf/wrong-dims vectors and scores
    # them (NaN scores); refused here, nothing stored.
    with indexed(tmp_path / "s.db", Fixed(docs=lambda texts: [list(vector) for _ in texts])) as store:
        with pytest.raises(error):
            s_put(store, ("a",), "k", {"text": "x"}, use_async=use_async)
        assert empty(store)


@MODES
@pytest.mark.parametrize("count", [0, 2])
def test_an_embedder_returning_the_wrong_number_of_vectors_raises_like_inmemorystore(tmp_path, count, use_async):
    embeddings = Fixed(docs=lambda texts: [[1.0, 0.0, 0.0]] * count)
    with pytest.raises(ValueError):
        InMemoryStore(index={"dims": 3, "embed": embeddings}).put(("a",), "k", {"text": "x"})
    with indexed(tmp_path / "s.db", embeddings) as store:
        with pytest.raises(ValueError):
            s_put(store, ("a",), "k", {"text": "x"}, use_async=use_async)
        assert empty(store)


@MODES
@pytest.mark.parametrize(
    "query, error",
    [
        (lambda text: [float("nan"), 0.0, 0.0], ValueError),
        (lambda text: [1.0, 0.0], ValueError),
        (lambda text: None, TypeError),
        (lambda text: 1 / 0, ZeroDivisionError),
    ],
    ids=["nan", "short", "none", "raises"],
)
def test_a_bad_query_vector_raises_and_changes_nothing(tmp_path, query, error, use_async):
    with indexed(tmp_path / "s.db", Fixed(query=query)) as store:
        store.put(("a",), "k", {"text": "x"})
        with pytest.raises(error):
            s_search(store, ("a",), query="q", use_async=use_async)
        assert [(i.key, i.value) for i in store.search(("a",))] == [("k", {"text": "x"})]


@MODES
@pytest.mark.parametrize("query", ["\x00", "q" * MB, "\U0001f600"], ids=["nul", "1mb", "emoji"])
def test_odd_queries_work(tmp_path, query, use_async):
    with indexed(tmp_path / "s.db", Fixed()) as store:
        store.put(("a",), "k", {"text": "x"})
        [hit] = s_search(store, ("a",), query=query, use_async=use_async)
        assert hit.key == "k" and hit.score == pytest.approx(1.0)
        with pytest.raises(UnicodeEncodeError):
            s_search(store, ("a",), query="\ud800", use_async=use_async)


def test_zero_and_subnormal_vectors_have_no_score(tmp_path):
    # Cosine of a zero vector is undefined: the item comes back unscored
    # (InMemoryStore scores it 0.0).
    for vector in ([0.0, 0.0, 0.0], [5e-324, 0.0, 0.0]):
        path = tmp_path / f"{vector[0]}.db"
        with indexed(path, Fixed(docs=lambda texts: [list(vector) for _ in texts])) as store:
            store.put(("a",), "k", {"text": "x"})
            assert [(i.key, i.score) for i in store.search(("a",), query="q")] == [("k", None)]


@pytest.mark.parametrize("dims", [0, -1, 1.5, True, None, 65537, 4_000_000_000, 2**62, 2**64, 10**30])
def test_index_dims_out_of_range_are_refused(tmp_path, dims):
    # 2**64 and beyond raised OverflowError before the fix.
    with pytest.raises(ValueError, match="dims"):
        indexed(tmp_path / "s.db", Fixed(), dims=dims)


@pytest.mark.parametrize(
    "path",
    ["a[999999999999999999999]", "a[18446744073709551616]", "a[-1]", "a[-99999999999999999999]", "a[*]",
     "a[", "a]", "", ".", "$", "$[", "b.*", "a[0].x", "e[*]", "x" * MB, "a[1e3]", "\x00",
     "a[9223372036854775807]", "a[-9223372036854775808]"],
    ids=lambda p: repr(p[:30]),
)
def test_odd_field_paths_embed_what_inmemorystore_embeds(tmp_path, path):
    class Length(Embeddings):
        def embed_documents(self, texts):
            return [[1.0, float(len(t))] for t in texts]

        def embed_query(self, text):
            return [1.0, 0.0]

    value = {"a": ["x", "y"], "b": {"c": "z"}, "e": [], "n": 5}
    reference = InMemoryStore(index={"dims": 2, "embed": Length(), "fields": [path]})
    reference.put(("a",), "k", value)
    reference.put(("a",), "per-put", value, index=[path])
    expected = {i.key: i.score for i in reference.search(("a",), query="q")}
    with AgentStateStore(tmp_path / "s.db", index={"dims": 2, "embed": Length(), "fields": [path], "embedder_name": "len"}) as store:
        store.put(("a",), "k", value)
        store.put(("a",), "per-put", value, index=[path])
        got = {i.key: i.score for i in store.search(("a",), query="q")}
    assert got.keys() == expected.keys()
    for key in got:
        assert (got[key] is None) == (expected[key] is None)
        if got[key] is not None:
            assert got[key] == pytest.approx(expected[key], rel=1e-6)


# -- construction ------------------------------------------------------------------------------


def test_store_construction_with_odd_arguments(tmp_path):
    with pytest.raises(ValueError, match="NUL"):
        AgentStateStore(str(tmp_path / "a\x00b.db"))
    with pytest.raises(ValueError):
        AgentStateStore(tmp_path / "s.db", search_memory=-1)
    with pytest.raises(ValueError):
        AgentStateStore(tmp_path / "s.db", search_memory=True)
    with pytest.raises(TypeError):
        AgentStateStore(tmp_path / "s.db", search_memory=1.5)
    with pytest.raises(TypeError):
        AgentStateStore(tmp_path / "s.db", ttl=[1])
    with pytest.raises(TypeError):
        AgentStateStore(tmp_path / "s.db", index=[1])
    with pytest.raises(agentstate.Error):
        AgentStateStore(tmp_path)  # a directory
    assert list(tmp_path.iterdir()) == []
    # A search budget beyond any memory is no bound (OverflowError before the fix).
    for budget in (2**63, 2**64, 10**30):
        with AgentStateStore(tmp_path / "big.db", search_memory=budget) as store:
            store.put(("a",), "k", {"x": 1})
            assert [i.key for i in store.search(("a",))] == ["k"]


def test_many_threads_with_extreme_calls_do_not_hang(tmp_path):
    # Bad calls from several threads at once: each raises, none wedges the store.
    errors: list[BaseException] = []

    def work(n: int) -> None:
        for i in range(20):
            for bad in (lambda: store.put(("a",), "k", {"x": 2**64}), lambda: store.search(("a",), limit=-1),
                        lambda: store.put(("a",), "k", {"x": 1}, ttl=float("nan"))):
                try:
                    with pytest.raises((TypeError, ValueError)):
                        bad()
                except BaseException as exc:  # pragma: no cover - reported below
                    errors.append(exc)
            store.put(("t", str(n)), str(i), {"i": i})

    with AgentStateStore(tmp_path / "s.db") as store:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
            assert not thread.is_alive()
        assert errors == []
        assert len(store.search(("t",), limit=1000)) == 80
        assert store.search(("a",)) == []


# ===========================================================================
# import_sqlite_saver
# ===========================================================================


def test_import_with_odd_paths_raises_and_writes_no_file(tmp_path):
    dst = tmp_path / "dst.db"
    with pytest.raises(FileNotFoundError):
        agentstate.import_sqlite_saver(tmp_path / "missing.sqlite", dst)
    # A NUL byte in a path: the package's own error (open() would say ValueError).
    with pytest.raises((ValueError, agentstate.Error)):
        agentstate.import_sqlite_saver(str(tmp_path / "a\x00b"), dst)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite" * 1000)
    with pytest.raises(ValueError, match="not a LangGraph SqliteSaver file"):
        agentstate.import_sqlite_saver(junk, dst)
    with pytest.raises(ValueError, match="not a file"):
        agentstate.import_sqlite_saver(tmp_path, dst)
    assert not dst.exists()
    same = tmp_path / "same.db"
    same.write_bytes(b"")
    with pytest.raises(ValueError):
        agentstate.import_sqlite_saver(same, same)
    assert same.read_bytes() == b""
