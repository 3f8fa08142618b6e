"""AgentStateStore against LangGraph's SqliteStore: the same ops give the same
results (get, put, delete, search with filters, pagination, list_namespaces,
TTL), and each deliberate difference (agentstate's docs/design.md, Store
sections) is tested as our documented behaviour and marked DIFFERENCE.

Configuration, lifecycle and errors of AgentStateStore are at the end.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta, timezone

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from test_store_support import by_key, execute, file_time, plain, rows, store_pair

import agentstate
from agentstate import AgentStateStore

# ---------------------------------------------------------------------------
# get, put, delete


def test_get_put_overwrite_delete_match_sqlitestore(tmp_path):
    def run(store):
        out = []
        store.put(("users", "alice"), "prefs", {"theme": "dark", "n": 1})
        store.put(("users", "bob"), "prefs", {"theme": "light"})
        out.append(store.get(("users", "alice"), "prefs"))
        store.put(("users", "alice"), "prefs", {"theme": "light", "tags": ["a", "b"]})
        out.append(store.get(("users", "alice"), "prefs"))
        out.append(store.get(("users", "alice"), "missing"))
        out.append(store.get(("users",), "prefs"))  # a namespace is not a prefix here
        store.delete(("users", "alice"), "prefs")
        out.append(store.get(("users", "alice"), "prefs"))
        store.delete(("users", "alice"), "never-there")
        out.append(store.get(("users", "bob"), "prefs"))
        return plain(out)

    with store_pair(tmp_path) as (theirs, ours):
        expected = run(theirs)
        assert run(ours) == expected
        assert expected[1] == (("users", "alice"), "prefs", {"theme": "light", "tags": ["a", "b"]})
        assert expected[4] is None


def test_values_round_trip_like_sqlitestore(tmp_path):
    value = {
        "text": "héllo \u2603 \"quoted\" \\ \n",
        "int": -(2**63),
        "big": 2**64 - 1,
        "float": 0.1 + 0.2,
        "tiny": 5e-324,
        "bool": True,
        "none": None,
        "nested": {"list": [1, 2.5, "x", {"deep": [[]]}], "empty": {}},
    }
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("v",), "k", value)
        assert ours.get(("v",), "k").value == theirs.get(("v",), "k").value == value


def test_batch_reads_see_the_state_before_the_batch_like_sqlitestore(tmp_path):
    ops = [
        PutOp(("ns",), "a", {"v": 1}),
        GetOp(("ns",), "a"),
        SearchOp(("ns",)),
        ListNamespacesOp(),
        PutOp(("ns",), "a", {"v": 2}),  # puts to one key collapse to the last
        PutOp(("ns", "sub"), "b", {"v": 3}),
        GetOp(("ns", "sub"), "b"),
    ]
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("ns",), "a", {"v": 0})
        expected = plain(theirs.batch(ops))
        assert plain(ours.batch(ops)) == expected
        assert expected == [None, (("ns",), "a", {"v": 0}), [(("ns",), "a", {"v": 0})], [("ns",)], None, None, None]
        assert plain(ours.get(("ns",), "a")) == plain(theirs.get(("ns",), "a")) == (("ns",), "a", {"v": 2})


def test_times_are_aware_utc_datetimes(tmp_path):
    # DIFFERENCE: SqliteStore returns naive datetimes holding UTC; we return
    # aware ones (as LangGraph's InMemoryStore and PostgresStore do).
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("t",), "k", {"x": 1})
        mine, python = ours.get(("t",), "k"), theirs.get(("t",), "k")
        assert mine.created_at.tzinfo == timezone.utc and mine.updated_at.tzinfo == timezone.utc
        assert python.created_at.tzinfo is None
        assert abs(mine.created_at - python.created_at.replace(tzinfo=timezone.utc)) < timedelta(seconds=2)
        hit = ours.search(("t",))[0]
        assert (hit.created_at, hit.updated_at) == (mine.created_at, mine.updated_at)


def test_an_update_keeps_created_at(tmp_path):
    # DIFFERENCE: SqliteStore's INSERT OR REPLACE resets created_at on
    # update; we keep it (docs/design.md, "Store file format").
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("t",), "k", {"v": 1})
        first = {id(s): s.get(("t",), "k") for s in (theirs, ours)}
        time.sleep(1.1)  # the file keeps whole seconds
        for store in (theirs, ours):
            store.put(("t",), "k", {"v": 2})
        mine = ours.get(("t",), "k")
        assert mine.created_at == first[id(ours)].created_at
        assert mine.updated_at > first[id(ours)].updated_at
        assert theirs.get(("t",), "k").created_at > first[id(theirs)].created_at


# ---------------------------------------------------------------------------
# search: filters, order, pagination

ITEMS = [
    (("shop", "fruit"), "apple", {"color": "red", "n": 3, "price": 0.5, "active": True, "meta": {"level": 1}}),
    (("shop", "fruit"), "banana", {"color": "yellow", "n": 1, "price": 0.25, "active": False, "meta": {"level": 2}}),
    (("shop", "fruit"), "cherry", {"color": "red", "n": 10, "price": 4.0, "active": True, "meta": {"level": 2}}),
    (("shop", "veg"), "kale", {"color": "green", "n": 2, "price": 2.5, "active": True, "meta": {"level": 3}}),
    (("shop", "veg"), "beet", {"color": "purple", "n": 2, "price": 1.0, "active": False, "meta": {"level": 1}}),
    (("shop",), "bag", {"color": "brown", "n": 0, "price": 0.1, "active": True, "meta": {"level": 0}}),
    (("shopping",), "list", {"color": "red", "n": 3, "price": 0.5, "active": True, "meta": {"level": 1}}),
]


def fill(store):
    for namespace, key, value in ITEMS:
        store.put(namespace, key, value)


@pytest.mark.parametrize(
    "filter",
    [
        {"color": "red"},
        {"n": 2},
        {"price": 0.5},
        {"active": True},
        {"active": False},
        {"meta.level": 2},
        {"n": {"$eq": 3}},
        {"color": {"$eq": "red"}},
        {"n": {"$ne": 3}},
        {"color": {"$ne": "red"}},
        {"n": {"$gt": 2}},
        {"n": {"$gte": 2}},
        {"n": {"$lt": 2}},
        {"n": {"$lte": 2}},
        {"price": {"$gt": 0.25, "$lte": 2.5}},
        {"color": {"$gt": "green"}},
        {"color": {"$lte": "purple"}},
        {"meta.level": {"$gte": 2}},
        {"color": "red", "n": {"$gt": 3}},
        {"color": "red", "active": True, "price": {"$lt": 1}},
        {"color": "blue"},
        {"missing": {"$gt": 1}},
    ],
)
def test_search_filters_match_sqlitestore(tmp_path, filter):
    with store_pair(tmp_path) as (theirs, ours):
        fill(theirs)
        fill(ours)
        for prefix in [(), ("shop",), ("shop", "fruit")]:
            expected = by_key(theirs.search(prefix, filter=filter, limit=100))
            assert by_key(ours.search(prefix, filter=filter, limit=100)) == expected, prefix


def test_search_prefix_is_label_aligned_like_sqlitestore(tmp_path):
    with store_pair(tmp_path) as (theirs, ours):
        fill(theirs)
        fill(ours)
        for prefix in [("shop",), ("shopping",), ("shop", "veg"), ("sho",), ("veg",)]:
            assert by_key(ours.search(prefix, limit=100)) == by_key(theirs.search(prefix, limit=100)), prefix
        assert [i.key for i in ours.search(("shop",), limit=100)].count("list") == 0


def distinct_update_times(store_path, keys):
    """Gives each item its own updated_at (a second apart, in `keys` order),
    as puts a second apart would; behind the stores' backs, test setup only."""
    for i, key in enumerate(keys):
        execute(store_path, "UPDATE store SET updated_at = ? WHERE key = ?", f"2030-01-01 00:00:{i:02d}", key)


@pytest.mark.parametrize("limit, offset", [(10, 0), (3, 0), (3, 3), (2, 5), (1, 6), (4, 10), (0, 0)])
def test_search_order_limit_offset_match_sqlitestore(tmp_path, limit, offset):
    keys = [key for _, key, _ in ITEMS]
    with store_pair(tmp_path) as (theirs, ours):
        fill(theirs)
        fill(ours)
        distinct_update_times(tmp_path / "python.db", keys)
        distinct_update_times(tmp_path / "agentstate.db", keys)
        for prefix, filter in [((), None), (("shop",), None), ((), {"color": "red"})]:
            expected = plain(theirs.search(prefix, filter=filter, limit=limit, offset=offset))
            got = plain(ours.search(prefix, filter=filter, limit=limit, offset=offset))
            assert got == expected, (prefix, filter)
        # Newest first.
        assert [i.key for i in ours.search((), limit=3)] == ["list", "bag", "beet"]


def test_ne_matches_a_missing_key(tmp_path):
    # DIFFERENCE: `$ne` matches items without the key (SqliteStore's SQL
    # `json_extract(...) != ?` is NULL there, so it drops them).
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("d",), "with", {"color": "red"})
            store.put(("d",), "other", {"color": "blue"})
            store.put(("d",), "without", {"size": 1})
        assert [i.key for i in theirs.search(("d",), filter={"color": {"$ne": "red"}})] == ["other"]
        assert sorted(i.key for i in ours.search(("d",), filter={"color": {"$ne": "red"}})) == ["other", "without"]


def test_nested_object_filter_matches_partially(tmp_path):
    # DIFFERENCE: SqliteStore errors on a nested object filter; we match
    # its keys partially, and offer $in $nin $exists $and $or $not.
    with store_pair(tmp_path) as (theirs, ours):
        fill(theirs)
        fill(ours)
        with pytest.raises(Exception):
            theirs.search(("shop",), filter={"meta": {"level": 2}})
        assert sorted(i.key for i in ours.search((), filter={"meta": {"level": 2}})) == ["banana", "cherry"]
        assert sorted(i.key for i in ours.search((), filter={"color": {"$in": ["green", "purple"]}})) == ["beet", "kale"]
        assert sorted(
            i.key for i in ours.search((), filter={"$or": [{"n": 10}, {"color": "brown"}]})
        ) == ["bag", "cherry"]


def test_bad_filters_raise_value_error(tmp_path):
    with store_pair(tmp_path) as (theirs, ours):
        for bad in [{"n": {"$regex": "x"}}, {"bad key!": 1}]:
            with pytest.raises(ValueError):
                theirs.search(("shop",), filter=bad)
            with pytest.raises(ValueError):
                ours.search(("shop",), filter=bad)


def test_query_without_an_index_is_an_error(tmp_path):
    # DIFFERENCE: SqliteStore ignores the query of a store without an index
    # and returns unranked items; we refuse (docs/design.md, "Store search").
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("d",), "k", {"text": "hello"})
        assert len(theirs.search(("d",), query="hello")) == 1
        with pytest.raises(ValueError, match="index"):
            ours.search(("d",), query="hello")
        assert len(ours.search(("d",), query="")) == 1  # an empty query is no query, as in LangGraph


# ---------------------------------------------------------------------------
# list_namespaces

NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "1", "memories"),
    ("users", "2", "memories"),
    ("users", "2", "prefs"),
    ("users2", "x"),
]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "b")},
        {"prefix": ("a", "b", "d", "e")},
        {"prefix": ("users",)},
        {"prefix": ("user",)},
        {"suffix": ("f",)},
        {"suffix": ("memories",)},
        {"suffix": ("d", "i")},
        {"prefix": ("a", "*")},
        {"prefix": ("*", "b")},
        {"prefix": ("users", "*", "memories")},
        {"suffix": ("*", "f")},
        {"suffix": ("*", "memories")},
        {"prefix": ("a",), "suffix": ("f",)},
        {"prefix": ("*",), "suffix": ("*",)},
        {"max_depth": 1},
        {"max_depth": 2},
        {"max_depth": 3},
        {"prefix": ("a",), "max_depth": 2},
        {"prefix": ("users",), "max_depth": 2},
        {"suffix": ("f",), "max_depth": 1},
        {"limit": 3},
        {"limit": 3, "offset": 3},
        {"offset": 8},
        {"max_depth": 2, "limit": 2, "offset": 1},
    ],
)
def test_list_namespaces_matches_sqlitestore(tmp_path, kwargs):
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            for namespace in NAMESPACES:
                store.put(namespace, "k", {"x": 1})
        expected = theirs.list_namespaces(**kwargs)
        assert ours.list_namespaces(**kwargs) == expected
        assert all(isinstance(ns, tuple) for ns in expected)


def test_list_namespaces_with_match_conditions_in_a_batch(tmp_path):
    op = ListNamespacesOp(
        match_conditions=(
            MatchCondition(match_type="prefix", path=("a", "*")),
            MatchCondition(match_type="suffix", path=("f",)),
        ),
        max_depth=3,
    )
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            for namespace in NAMESPACES:
                store.put(namespace, "k", {"x": 1})
        assert ours.batch([op]) == theirs.batch([op]) == [[("a", "b", "f"), ("a", "c", "f")]]


def test_list_namespaces_sorts_as_tuples(tmp_path):
    # DIFFERENCE: SqliteStore sorts dot-joined text, so ("a-b",) comes
    # before ("a", "b") ("-" < "."); we sort tuples (docs/design.md,
    # "Namespaces").
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("a-b",), "k", {"x": 1})
            store.put(("a", "b"), "k", {"x": 1})
        assert theirs.list_namespaces() == [("a-b",), ("a", "b")]
        assert ours.list_namespaces() == [("a", "b"), ("a-b",)]


def test_namespaces_go_straight_back_in(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        for namespace in NAMESPACES:
            store.put(namespace, "k", {"ns": list(namespace)})
        for namespace in store.list_namespaces(limit=100):
            assert store.get(namespace, "k").value == {"ns": list(namespace)}


# ---------------------------------------------------------------------------
# TTL


def expiry(path, key):
    (text,) = rows(path, "SELECT expires_at FROM store WHERE key = ?", key)[0]
    return None if text is None else file_time(text)


def ttl_minutes(path):
    return dict(rows(path, "SELECT key, ttl_minutes FROM store"))


def test_ttl_minutes_are_stored_like_sqlitestore(tmp_path):
    with store_pair(tmp_path, ttl={"default_ttl": 30}) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("t",), "default", {"x": 1})
            store.put(("t",), "explicit", {"x": 1}, ttl=2.5)
            store.put(("t",), "never", {"x": 1}, ttl=None)
            store.batch([PutOp(("t",), "raw-op", {"x": 1})])  # a raw PutOp has no TTL
        expected = {"default": 30.0, "explicit": 2.5, "never": None, "raw-op": None}
        assert ttl_minutes(tmp_path / "python.db") == expected
        assert ttl_minutes(tmp_path / "agentstate.db") == expected
        for path in (tmp_path / "python.db", tmp_path / "agentstate.db"):
            put_at = file_time(rows(path, "SELECT updated_at FROM store WHERE key = 'explicit'")[0][0])
            assert abs(expiry(path, "explicit") - put_at - timedelta(minutes=2.5)) < timedelta(seconds=2)
            assert expiry(path, "never") is None


def test_reads_refresh_ttl_like_sqlitestore(tmp_path):
    ttl = {"default_ttl": 10, "refresh_on_read": True}
    with store_pair(tmp_path, ttl=ttl) as (theirs, ours):
        stores = {theirs: tmp_path / "python.db", ours: tmp_path / "agentstate.db"}
        for store in stores:
            for key in ["got", "searched", "not-refreshed"]:
                store.put(("t", key), key, {"x": 1})
        before = {(s, k): expiry(p, k) for s, p in stores.items() for k in ["got", "searched", "not-refreshed"]}
        time.sleep(1.5)  # SqliteStore's refresh truncates to whole seconds
        for store, path in stores.items():
            assert store.get(("t", "got"), "got") is not None
            assert len(store.search(("t", "searched"))) == 1
            assert store.get(("t", "not-refreshed"), "not-refreshed", refresh_ttl=False) is not None
            assert len(store.search(("t", "not-refreshed"), refresh_ttl=False)) == 1
            for key in ["got", "searched"]:
                assert expiry(path, key) - before[(store, key)] >= timedelta(seconds=0.4), (store, key)
            assert expiry(path, "not-refreshed") == before[(store, "not-refreshed")]


def test_refresh_on_read_is_the_default(tmp_path):
    # DIFFERENCE: SqliteStore refreshes only when the TTL config says
    # refresh_on_read=True; we follow LangGraph's documented default (True),
    # also without a TTL config (docs/design.md, "TTL").
    with store_pair(tmp_path) as (theirs, ours):
        stores = {theirs: tmp_path / "python.db", ours: tmp_path / "agentstate.db"}
        for store in stores:
            store.put(("t",), "k", {"x": 1}, ttl=10)
        before = {s: expiry(p, "k") for s, p in stores.items()}
        time.sleep(1.2)
        for store in stores:
            store.get(("t",), "k")
        assert expiry(tmp_path / "python.db", "k") == before[theirs]
        assert expiry(tmp_path / "agentstate.db", "k") - before[ours] >= timedelta(seconds=1)


def test_expired_items_are_never_returned(tmp_path):
    # DIFFERENCE: SqliteStore returns expired items until a sweep deletes
    # them; we never return them (docs/design.md, "TTL"). Sweeping deletes
    # them in both.
    with store_pair(tmp_path, ttl={"refresh_on_read": False}) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("t",), "short", {"x": 1}, ttl=0.001)  # 60 ms
            store.put(("t",), "long", {"x": 2}, ttl=60)
        time.sleep(1.1)
        assert theirs.get(("t",), "short") is not None
        assert ours.get(("t",), "short") is None
        assert [i.key for i in ours.search(("t",))] == ["long"]
        assert ours.list_namespaces() == [("t",)]
        assert ours.sweep_ttl() == theirs.sweep_ttl() == 1
        assert theirs.get(("t",), "short") is None
        assert rows(tmp_path / "agentstate.db", "SELECT key FROM store") == [("long",)]


def test_ttl_sweeper_thread(tmp_path):
    with AgentStateStore(tmp_path / "s.db", ttl={"sweep_interval_minutes": 0.005}) as store:
        store.put(("t",), "short", {"x": 1}, ttl=0.001)
        store.put(("t",), "kept", {"x": 1})
        future = store.start_ttl_sweeper()
        assert not future.done()
        assert any(t.name == "agentstate-ttl-sweeper" for t in threading.enumerate())
        deadline = time.monotonic() + 10
        while rows(tmp_path / "s.db", "SELECT COUNT(*) FROM store")[0][0] != 1:
            assert time.monotonic() < deadline, "the sweeper did not delete the expired item"
            time.sleep(0.05)
        assert store.stop_ttl_sweeper(timeout=5)
        assert future.done()
        assert store.stop_ttl_sweeper()  # not running: True at once
    # Without a TTL config there is nothing to sweep: a finished future.
    with AgentStateStore(tmp_path / "t.db") as store:
        assert store.start_ttl_sweeper().done()


def test_close_stops_the_sweeper(tmp_path):
    store = AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": 1})
    store.start_ttl_sweeper(sweep_interval_minutes=1)
    thread = store._ttl_sweeper_thread
    store.close()
    assert not thread.is_alive()


def test_invalid_ttls_raise_value_error(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        for bad in [-1, float("nan"), float("inf"), 1e12]:
            with pytest.raises(ValueError):
                store.put(("t",), "k", {"x": 1}, ttl=bad)
        assert store.get(("t",), "k") is None
    with pytest.raises(ValueError):
        AgentStateStore(tmp_path / "s.db", ttl={"default_ttl": -5})
    with pytest.raises(ValueError):
        AgentStateStore(tmp_path / "s.db", ttl={"sweep_interval_minutes": 0})


# ---------------------------------------------------------------------------
# Configuration, lifecycle, errors


def test_from_conn_string_setup_and_close(tmp_path):
    path = tmp_path / "s.db"
    with AgentStateStore.from_conn_string(str(path)) as store:
        store.setup()  # a no-op, kept for SqliteStore's users
        store.setup()
        store.put(("a",), "k", {"x": 1})
    with pytest.raises(agentstate.Error, match="closed"):
        store.get(("a",), "k")
    store.close()  # twice is fine
    with AgentStateStore(path) as again:
        assert again.get(("a",), "k").value == {"x": 1}
    with AgentStateStore.from_conn_string(":memory:") as memory:
        memory.put(("a",), "k", {"x": 2})
        assert memory.get(("a",), "k").value == {"x": 2}


def test_base_store_methods_work(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        store.put(("docs", "u1"), "a", {"text": "x", "n": 1})
        store.put(("docs", "u2"), "b", {"text": "y", "n": 2}, index=False, ttl=None)
        assert store.get(("docs", "u1"), "a").value == {"text": "x", "n": 1}
        assert [i.key for i in store.search(("docs",), filter={"n": {"$gt": 1}})] == ["b"]
        assert store.list_namespaces(prefix=("docs",)) == [("docs", "u1"), ("docs", "u2")]
        store.delete(("docs", "u1"), "a")
        assert store.get(("docs", "u1"), "a") is None
        assert store.list_namespaces() == [("docs", "u2")]


def test_invalid_namespaces_raise_langgraphs_error(tmp_path):
    with store_pair(tmp_path) as (theirs, ours):
        for store in (theirs, ours):
            for bad in [(), ("langgraph", "x"), ("a.b",), ("",), ("a", 1)]:
                with pytest.raises(InvalidNamespaceError):
                    store.put(bad, "k", {"x": 1})
            with pytest.raises(InvalidNamespaceError):
                store.batch([GetOp(("a.b",), "k")])
            with pytest.raises(InvalidNamespaceError):
                store.search(("a\x00",))
            with pytest.raises(InvalidNamespaceError):
                store.list_namespaces(prefix=("a.b",))
        # Ops passed to batch directly skip BaseStore.put's checks: the Rust
        # store still refuses an empty or "langgraph" namespace.
        for bad in [(), ("langgraph",)]:
            with pytest.raises(InvalidNamespaceError):
                ours.batch([PutOp(bad, "k", {"x": 1})])
        assert ours.list_namespaces() == []


def test_bad_values_and_ops(tmp_path):
    with AgentStateStore(tmp_path / "s.db") as store:
        with pytest.raises(TypeError):
            store.put(("a",), "k", {"x": object()})  # not JSON: orjson's TypeError, as SqliteStore
        with pytest.raises(TypeError):
            store.put(("a",), "k", {"x": 1}, index=True)
        with pytest.raises(TypeError):
            store.batch(["not an op"])
        with pytest.raises(ValueError):
            store.search(("a",), limit=-1)
        with pytest.raises(ValueError):
            store.batch([ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),))])
        deep = {"x": 1}
        for _ in range(200):
            deep = {"d": deep}
        with pytest.raises(ValueError, match="127"):
            store.put(("a",), "deep", deep)
        assert store.list_namespaces() == []


def test_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(agentstate.Error):
        AgentStateStore(path)


def test_threads_share_a_store(tmp_path):
    errors = []

    with AgentStateStore(tmp_path / "s.db") as store:

        def work(t):
            try:
                for i in range(50):
                    store.put(("t", str(t)), str(i), {"i": i})
                    assert store.get(("t", str(t)), str(i)).value == {"i": i}
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(store.search(("t",), limit=1000)) == 200

