"""The saver and the importer driven with extreme input: numbers at and
beyond 64 bits, NaN and infinities, NUL bytes, lone surrogates, 1 MB
strings, values nested 10,000 deep, huge and negative limits, odd names,
filters and configs. (The Store's extremes: test_extremes_store.py.)

The rule: each call either works and round-trips exactly (as LangGraph's
SqliteSaver / InMemorySaver do, on their own files), or raises a typed
exception (never a panic, a hang or an untyped error) and a read afterwards
shows that nothing was stored. Where we refuse what a LangGraph saver
accepts, the test says so (DIFFERENCE).
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from test_extremes_support import MB, MODES, nested_lists, run, short

import agentstate
from agentstate import AgentStateSaver

V1 = f"{1:032}.0000000000000001"
CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def version(n: int) -> str:
    return f"{n:032}.0000000000000001"


def checkpoint(values: dict[str, Any], versions: dict[str, Any] | None = None) -> dict[str, Any]:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions if versions is not None else {k: V1 for k in values}
    return cp


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


def assert_lists_like_inmemorysaver(saver, config, use_async, **query):
    """Three checkpoints in each: `saver` lists the steps InMemorySaver does."""
    reference = InMemorySaver()
    three_checkpoints(reference)
    three_checkpoints(saver)
    expected = [t.metadata["step"] for t in reference.list(config, **query)]
    assert [t.metadata["step"] for t in listing(saver, config, use_async=use_async, **query)] == expected


@MODES
@pytest.mark.parametrize("limit", [0, 1, True, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30])
def test_list_limits_match_inmemorysaver(saver, limit, use_async):
    # SqliteSaver raises OverflowError from sqlite3 beyond 2**63 - 1;
    # InMemorySaver (and we) take a limit beyond any count as no limit.
    assert_lists_like_inmemorysaver(saver, CONFIG, use_async, limit=limit)


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
    assert_lists_like_inmemorysaver(saver, None, use_async, filter=filter)


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
def test_configs_missing_keys(saver, sqlite_saver, use_async):
    three_checkpoints(saver)
    with pytest.raises(KeyError):
        get(saver, {}, use_async=use_async)
    with pytest.raises(KeyError):
        get(saver, {"configurable": {}}, use_async=use_async)
    with pytest.raises(KeyError):
        put(saver, {"configurable": {}}, checkpoint({"a": 1}), {}, {"a": V1}, use_async=use_async)
    with pytest.raises(KeyError):
        put_writes(saver, CONFIG, [("a", 1)], "task", use_async=use_async)  # no checkpoint_id
    # Reference 2.1: put requires checkpoint_ns (SqliteSaver and InMemorySaver
    # read config["configurable"]["checkpoint_ns"]); nothing is stored.
    no_ns = {"configurable": {"thread_id": "t"}}
    for s in (sqlite_saver, saver):
        with pytest.raises(KeyError):
            put(s, no_ns, checkpoint({"a": 1}), {}, {"a": V1}, use_async=use_async and s is saver)
    assert len(listing(saver, no_ns, use_async=use_async)) == 3
    # Reference 2.3: a None namespace matches no checkpoint (None in both savers).
    none_ns = {"configurable": {"thread_id": "t", "checkpoint_ns": None}}
    assert sqlite_saver.get_tuple(none_ns) is None
    assert get(saver, none_ns, use_async=use_async) is None
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
