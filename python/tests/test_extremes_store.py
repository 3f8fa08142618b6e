"""The Store driven with extreme input: numbers at and beyond 64 bits, NaN
and infinities, NUL bytes, lone surrogates, 1 MB strings, values nested
10,000 deep, huge and negative limits, offsets and TTLs, odd namespaces and
filters, misbehaving embedders. (The saver's extremes:
test_extremes_saver.py.)

The rule: each call either works and round-trips exactly (as LangGraph's
SqliteStore / InMemoryStore do, on their own files), or raises a typed
exception (never a panic, a hang or an untyped error) and a read afterwards
shows that nothing was stored. Where we refuse what a LangGraph store
accepts, the test says so (DIFFERENCE).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
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
from test_extremes_support import MB, MODES, nested_dicts, run, short

import agentstate
from agentstate import AgentStateStore


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
