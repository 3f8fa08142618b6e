"""One file format: a file AgentStateStore wrote is read and written by
LangGraph's SqliteStore and the other way round, with vectors and TTLs; and
both can use one file at once from two processes.

In one process the two stores take turns on a file (one is closed before the
other opens it): Python's sqlite3 and agentstate hold two copies of SQLite,
and POSIX locks are per process, so closing a connection of one copy drops
the locks of the other (see test_store_support.rows). Two processes are
safe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from langgraph.store.sqlite import SqliteStore
from test_store_support import DIMS, FakeEmbeddings, cosine, fake_vector, plain, rows

from agentstate import AgentStateStore

DOCS = [
    (("users", "alice"), "m1", {"text": "prefers refunds to store credit", "score": 0.9}),
    (("users", "alice"), "m2", {"text": "lives in Lyon", "score": 0.4}),
    (("users", "bob"), "m1", {"text": "allergic to cats", "score": 0.7, "tags": ["health"]}),
    (("notes",), "n1", {"text": "the quarterly report is due", "score": 0.1}),
]


def index(**extra):
    return {"dims": DIMS, "embed": FakeEmbeddings(), **extra}


def fill(store):
    for namespace, key, value in DOCS:
        store.put(namespace, key, value)
    store.put(("ttl",), "short", {"text": "gone soon"}, ttl=0.001)
    store.put(("ttl",), "long", {"text": "kept"}, ttl=600)


def snapshot(store, ranked=True):
    """What both stores must read from one file (`ranked`: with a vector search)."""
    shot = {
        "get": plain([store.get(ns, key) for ns, key, _ in DOCS]),
        "filtered": sorted(plain(store.search(("users",), filter={"score": {"$gte": 0.5}}))),
        "namespaces": store.list_namespaces(prefix=("users",)),
    }
    if ranked:
        query = "refund policy for cats"
        shot["ranked"] = [(h.namespace, h.key) for h in store.search((), query=query, limit=4)]
    return shot


def test_a_file_written_here_is_read_and_written_by_sqlitestore(tmp_path):
    path = tmp_path / "agent.db"
    with AgentStateStore(path, index=index(embedder_name="fake")) as ours:
        fill(ours)
        expected = snapshot(ours)
    time.sleep(1.1)  # let the short TTL pass (SqliteStore compares whole seconds)
    with SqliteStore.from_conn_string(str(path), index=index()) as theirs:
        theirs.setup()
        assert snapshot(theirs) == expected
        assert theirs.get(("ttl",), "long").value == {"text": "kept"}
        assert theirs.sweep_ttl() == 1  # our expiry times are in its format
        theirs.put(("users", "carol"), "m1", {"text": "asked for a refund", "score": 0.8})
        theirs.delete(("users", "alice"), "m2")
    with AgentStateStore(path, index=index(embedder_name="fake")) as ours:
        assert ours.get(("users", "alice"), "m2") is None
        carol = ours.get(("users", "carol"), "m1")
        assert carol.value == {"text": "asked for a refund", "score": 0.8}
        assert ours.list_namespaces(prefix=("users",)) == [("users", "alice"), ("users", "bob"), ("users", "carol")]
        # SqliteStore's vector for carol is searched like ours.
        hits = ours.search(("users",), query="asked for a refund")
        assert hits[0].key == "m1" and hits[0].namespace == ("users", "carol")
        document = json.dumps(carol.value, sort_keys=True, ensure_ascii=False)  # what "$" embeds
        expected_score = cosine(fake_vector("asked for a refund"), fake_vector(document))
        assert hits[0].score == pytest.approx(expected_score, abs=1e-6)


def test_a_file_written_by_sqlitestore_is_read_here(tmp_path):
    path = tmp_path / "python.db"
    with SqliteStore.from_conn_string(str(path), index=index()) as theirs:
        theirs.setup()
        fill(theirs)
        expected = snapshot(theirs)
    time.sleep(0.1)
    # Without an index: values, filters, namespaces and TTLs.
    with AgentStateStore(path) as ours:
        assert snapshot(ours, ranked=False) == {k: v for k, v in expected.items() if k != "ranked"}
        assert ours.get(("ttl",), "short") is None  # expired (SqliteStore wrote the expiry)
        assert ours.get(("ttl",), "long").value == {"text": "kept"}
        assert ours.get(("users", "bob"), "m1").created_at.tzinfo is not None
    # With an index: the file holds vectors but does not say which model
    # made them, so we refuse until told to adopt them (or to reindex).
    with pytest.raises(ValueError, match="adopt_existing_vectors"):
        AgentStateStore(path, index=index())
    with AgentStateStore(path, index=index(adopt_existing_vectors=True)) as ours:
        assert snapshot(ours)["ranked"] == expected["ranked"]
    # Adopted: the file now records the embedder, and SqliteStore still reads it.
    assert rows(path, "SELECT value FROM agentstate_meta WHERE key = 'store.embedder'") != []
    with SqliteStore.from_conn_string(str(path), index=index()) as theirs:
        theirs.setup()
        assert snapshot(theirs)["get"] == expected["get"]


_SQLITESTORE_CHILD = textwrap.dedent(
    """
    import json, sys
    from langgraph.store.sqlite import SqliteStore
    path, puts, deletes = json.loads(sys.stdin.read())
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        for ns, key, value in puts:
            store.put(tuple(ns), key, value)
        for ns, key in deletes:
            store.delete(tuple(ns), key)
        print(json.dumps([[list(i.namespace), i.key, i.value] for i in store.search((), limit=100)]))
    """
)


def sqlitestore_in_a_child(path, puts=(), deletes=()):
    out = subprocess.run(
        [sys.executable, "-c", _SQLITESTORE_CHILD],
        input=json.dumps([str(path), list(puts), list(deletes)]),
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted((tuple(ns), key, value) for ns, key, value in json.loads(out.stdout))


def test_both_stores_on_one_file_at_once_from_two_processes(tmp_path):
    path = tmp_path / "shared.db"
    with AgentStateStore(path) as ours:
        ours.put(("a",), "one", {"v": 1})
        ours.put(("a",), "two", {"v": 2})
        assert sorted(i.key for i in ours.search(("a",), limit=10)) == ["one", "two"]  # fills the search copy
        seen = sqlitestore_in_a_child(path, puts=[(["a"], "three", {"v": 3})], deletes=[(["a"], "one")])
        assert seen == [(("a",), "three", {"v": 3}), (("a",), "two", {"v": 2})]
        # Our search copy notices the other process's writes.
        assert sorted(plain(ours.search(("a",), limit=10))) == seen
        ours.put(("b",), "four", {"v": 4})
        assert (("b",), "four", {"v": 4}) in sqlitestore_in_a_child(path)
