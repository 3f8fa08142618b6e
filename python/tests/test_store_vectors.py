"""Vector search: AgentStateStore ranks like SqliteStore with the same
deterministic embeddings, and the deliberate differences (docs/design.md,
"Store file format" and "Store search") are tested as ours (DIFFERENCE).
Also: the index configuration, the embedder recorded in the file, and
embedding errors.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp
from test_store_support import DIMS, FakeEmbeddings, cosine, fake_vector, plain, rows, store_pair

from agentstate import AgentStateStore

DOCS = [
    (("docs",), "d1", {"text": "the cat sat on the mat", "kind": "pet", "n": 1}),
    (("docs",), "d2", {"text": "dogs chase cats around", "kind": "pet", "n": 2}),
    (("docs",), "d3", {"text": "quarterly revenue grew", "kind": "finance", "n": 3}),
    (("docs", "old"), "d4", {"text": "zebra xylophone quiz", "kind": "misc", "n": 4}),
    (("docs", "old"), "d5", {"text": "a mat for the cat", "kind": "pet", "n": 5}),
    (("docs", "old"), "d6", {"text": "revenue and profit", "kind": "finance", "n": 6}),
    (("other",), "d7", {"text": "cat", "kind": "pet", "n": 7}),
]

QUERIES = ["cat on a mat", "revenue", "zzz", "dogs"]


def index(embeddings=None, **extra):
    return {"dims": DIMS, "embed": embeddings or FakeEmbeddings(), **extra}


def fill(store):
    for namespace, key, value in DOCS:
        store.put(namespace, key, value)


def ranked(hits):
    return [(tuple(h.namespace), h.key) for h in hits]


def test_scores_are_distinct_so_orders_are_comparable():
    for query in QUERIES:
        texts = [_doc_text(v) for _, _, v in DOCS]
        scores = [round(cosine(fake_vector(query), fake_vector(t)), 6) for t in texts]
        assert len(set(scores)) == len(scores), query


def _doc_text(value):
    """The text LangGraph embeds for the whole document (field "$")."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(
    "prefix, filter, limit, offset",
    [
        ((), None, 10, 0),
        (("docs",), None, 10, 0),
        (("docs",), None, 3, 0),
        (("docs",), None, 3, 2),  # SqliteStore is exact while offset + limit <= 2 * limit
        ((), {"kind": "pet"}, 10, 0),
        ((), {"n": {"$gte": 3}}, 2, 1),
    ],
)
def test_vector_search_ranks_like_sqlitestore(tmp_path, query, prefix, filter, limit, offset):
    with store_pair(tmp_path, index=index()) as (theirs, ours):
        fill(theirs)
        fill(ours)
        expected = theirs.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
        got = ours.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
        assert ranked(got) == ranked(expected)
        assert plain(got) == plain(expected)
        for mine, python in zip(got, expected):
            assert mine.score == pytest.approx(python.score, abs=1e-5)


def test_scores_are_cosine_of_the_query_and_the_document(tmp_path):
    with AgentStateStore(tmp_path / "s.db", index=index()) as store:
        fill(store)
        for hit in store.search((), query="cat on a mat", limit=10):
            expected = cosine(fake_vector("cat on a mat"), fake_vector(_doc_text(hit.value)))
            assert hit.score == pytest.approx(expected, abs=1e-6)


def test_per_put_index_fields_rank_like_sqlitestore(tmp_path):
    # Several vectors per item (one per field, one per list element), max-pooled.
    values = [
        ("a", {"title": "cat", "body": "revenue report", "tags": ["zebra", "mat"]}),
        ("b", {"title": "profit", "body": "dogs and cats", "tags": ["quiz"]}),
        ("c", {"title": "xylophone", "body": "the mat", "tags": []}),
    ]
    with store_pair(tmp_path, index=index()) as (theirs, ours):
        for store in (theirs, ours):
            for key, value in values:
                store.put(("p",), key, value, index=["title", "body", "tags[*]"])
        names = "SELECT key, field_name FROM store_vectors ORDER BY key, field_name"
        assert rows(tmp_path / "agentstate.db", names) == rows(tmp_path / "python.db", names)
        assert ("a", "tags[*].1") in rows(tmp_path / "agentstate.db", names)
        for query in ["cat", "revenue", "quiz", "mat"]:
            expected = theirs.search(("p",), query=query)
            got = ours.search(("p",), query=query)
            assert ranked(got) == ranked(expected), query
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-5)


def test_offset_counts_items_after_pooling(tmp_path):
    # DIFFERENCE: SqliteStore keeps the top 2 * limit vectors before pooling
    # and applying the offset, so a page past them comes back empty; ours is
    # the page of the full ranking (docs/design.md, "Store search").
    with store_pair(tmp_path, index=index()) as (theirs, ours):
        fill(theirs)
        fill(ours)
        full = ranked(ours.search((), query="cat", limit=10))
        assert full == ranked(theirs.search((), query="cat", limit=10))
        assert theirs.search((), query="cat", limit=2, offset=4) == []
        assert ranked(ours.search((), query="cat", limit=2, offset=4)) == full[4:6]


def test_items_without_vectors_follow_the_scored_ones(tmp_path):
    # DIFFERENCE: SqliteStore's vector search joins on vectors, so an item
    # put with index=False is never found by a query; ours comes after every
    # scored item, with score None (docs/design.md, "Store search").
    with store_pair(tmp_path, index=index()) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("n",), "scored", {"text": "cat"})
            store.put(("n",), "unscored", {"text": "cat"}, index=False)
        assert [h.key for h in theirs.search(("n",), query="cat")] == ["scored"]
        hits = ours.search(("n",), query="cat")
        assert [(h.key, h.score is None) for h in hits] == [("scored", False), ("unscored", True)]
        assert rows(tmp_path / "agentstate.db", "SELECT key FROM store_vectors") == [("scored",)]


def test_configured_fields_are_honoured(tmp_path):
    # DIFFERENCE: SqliteStore reads `text_fields` and ignores LangGraph's
    # `fields`, embedding the whole document; we embed the configured fields
    # (docs/design.md, "Store file format").
    embeddings = FakeEmbeddings()
    with store_pair(tmp_path, index=index(embeddings, fields=["text"])) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("f",), "k", {"text": "cat", "other": "revenue"})
        field_names = "SELECT field_name FROM store_vectors"
        assert rows(tmp_path / "python.db", field_names) == [("$",)]
        assert rows(tmp_path / "agentstate.db", field_names) == [("text",)]
        (hit,) = ours.search(("f",), query="cat")
        assert hit.score == pytest.approx(1.0)
    # SqliteStore's own key works too, for configs written for it.
    with AgentStateStore(tmp_path / "t.db", index=index(text_fields=["other"])) as store:
        store.put(("f",), "k", {"text": "cat", "other": "revenue"})
        assert store.search(("f",), query="revenue")[0].score == pytest.approx(1.0)


def test_reput_and_delete_replace_vectors(tmp_path):
    # DIFFERENCE: SqliteStore leaves the vectors of fields an update no
    # longer indexes, and of deleted items (its connection has no foreign
    # keys); ours go with their item (docs/design.md, "Store file format").
    with store_pair(tmp_path, index=index()) as (theirs, ours):
        for store in (theirs, ours):
            store.put(("r",), "k", {"a": "cat", "b": "dog"}, index=["a", "b"])
            store.put(("r",), "k", {"a": "cat", "b": "dog"}, index=["a"])
        vectors = "SELECT field_name FROM store_vectors ORDER BY field_name"
        assert rows(tmp_path / "python.db", vectors) == [("a",), ("b",)]
        assert rows(tmp_path / "agentstate.db", vectors) == [("a",)]
        for store in (theirs, ours):
            store.delete(("r",), "k")
        assert rows(tmp_path / "python.db", vectors) == [("a",), ("b",)]
        assert rows(tmp_path / "agentstate.db", vectors) == []


def test_queries_are_embedded_as_queries(tmp_path):
    # DIFFERENCE: SqliteStore embeds a query with embed_documents; we call
    # embed_query (models that embed them differently rank better).
    embeddings = FakeEmbeddings()  # shared by both stores: the calls come in order
    with store_pair(tmp_path, index=index(embeddings)) as (theirs, ours):
        for store in (theirs, ours):
            fill(store)
        assert embeddings.queries == []
        ours.search((), query="cat")
        assert embeddings.queries == ["cat"]
        assert embeddings.documents[-1] != "cat"
        theirs.search((), query="cat")
        assert embeddings.queries == ["cat"]
        assert embeddings.documents[-1] == "cat"


def test_a_sync_function_embeds(tmp_path):
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return [fake_vector(t) for t in texts]

    with AgentStateStore(tmp_path / "s.db", index={"dims": DIMS, "embed": embed, "fields": ["text"]}) as store:
        store.put(("f",), "a", {"text": "cat"})
        store.put(("f",), "b", {"text": "revenue"})
        assert [h.key for h in store.search(("f",), query="revenue")] == ["b", "a"]
    assert calls == [["cat"], ["revenue"], ["revenue"]]


def test_a_batch_embeds_its_puts_in_one_call(tmp_path):
    embeddings = FakeEmbeddings()
    with AgentStateStore(tmp_path / "s.db", index=index(embeddings, fields=["text"])) as store:
        store.batch([PutOp(("b",), str(i), {"text": f"t{i}"}) for i in range(5)])
        assert embeddings.documents == [f"t{i}" for i in range(5)]


# ---------------------------------------------------------------------------
# The embedder recorded in the file


def test_the_embedder_name_defaults_to_the_model(tmp_path):
    class Named(FakeEmbeddings):
        model = "fake-model-v1"

    with AgentStateStore(tmp_path / "s.db", index=index(Named())) as store:
        store.put(("a",), "k", {"text": "cat"})
    recorded = "SELECT value FROM agentstate_meta WHERE key = 'store.embedder'"
    assert rows(tmp_path / "s.db", recorded) == [(f"fake-model-v1/{DIMS}",)]


def test_another_embedder_is_refused_until_reindexed(tmp_path):
    path = tmp_path / "s.db"
    with AgentStateStore(path, index=index(embedder_name="model-a")) as store:
        fill(store)
    with pytest.raises(ValueError, match="model-a"):
        AgentStateStore(path, index=index(embedder_name="model-b"))
    with pytest.raises(ValueError):
        AgentStateStore(path, index={"dims": DIMS + 1, "embed": FakeEmbeddings(), "embedder_name": "model-a"})
    embeddings = FakeEmbeddings()
    with AgentStateStore(path, index=index(embeddings, embedder_name="model-b"), reindex=True) as store:
        assert len(embeddings.documents) == len(DOCS)
        assert store.search((), query="cat")[0].score is not None
        assert store.reindex() == len(DOCS)
    with AgentStateStore(path, index=index(embedder_name="model-b")) as store:
        assert len(store.search((), query="cat")) == len(DOCS)
    with pytest.raises(ValueError, match="needs an index"):
        AgentStateStore(path, reindex=True)
    # reindex() on a store without an index removes the vectors and the record.
    with AgentStateStore(path) as store:
        assert store.reindex() == len(DOCS)
    assert rows(path, "SELECT COUNT(*) FROM store_vectors") == [(0,)]
    with AgentStateStore(path, index=index(embedder_name="model-c")) as store:
        assert all(hit.score is None for hit in store.search((), query="cat"))


def test_wrong_vectors_from_the_embedder_raise_value_error(tmp_path):
    def short(texts):
        return [[1.0, 2.0] for _ in texts]

    def too_few(texts):
        return [fake_vector("x")]

    def nan(texts):
        return [[float("nan")] * DIMS for _ in texts]

    for embed in (short, too_few, nan):
        with AgentStateStore(tmp_path / f"{embed.__name__}.db", index={"dims": DIMS, "embed": embed}) as store:
            with pytest.raises(ValueError):
                store.batch([PutOp(("e",), k, {"t": k}) for k in ("a", "b")])
            assert store.list_namespaces() == []  # nothing written

    def not_numbers(texts):
        return ["abc" for _ in texts]

    with AgentStateStore(tmp_path / "types.db", index={"dims": DIMS, "embed": not_numbers}) as store:
        with pytest.raises(TypeError):  # the conversion's own error, not a crash
            store.put(("e",), "k", {"t": "x"})
        assert store.get(("e",), "k") is None


def test_the_embedders_own_exception_comes_back(tmp_path):
    class ModelDown(Exception):
        pass

    class Failing(Embeddings):
        def embed_documents(self, texts):
            raise ModelDown("the model is down")

        def embed_query(self, text):
            raise ModelDown("the model is down for queries")

    with AgentStateStore(tmp_path / "s.db", index={"dims": DIMS, "embed": Failing()}) as store:
        with pytest.raises(ModelDown, match="the model is down"):
            store.put(("e",), "k", {"text": "cat"})
        assert store.get(("e",), "k") is None
        store.put(("e",), "k", {"text": "cat"}, index=False)
        with pytest.raises(ModelDown, match="queries"):
            store.search(("e",), query="cat")


def test_invalid_index_configs_raise_value_error(tmp_path):
    for bad in [
        {"embed": FakeEmbeddings()},
        {"dims": 0, "embed": FakeEmbeddings()},
        {"dims": "16", "embed": FakeEmbeddings()},
        {"dims": DIMS},
        {"dims": DIMS, "embed": FakeEmbeddings(), "distance_type": "l2"},
        {"dims": DIMS, "embed": FakeEmbeddings(), "fields": [1]},
        {"dims": 70000, "embed": FakeEmbeddings()},
    ]:
        with pytest.raises(ValueError):
            AgentStateStore(tmp_path / "s.db", index=bad)


@pytest.mark.parametrize("search_memory", [0, 200, 2_000])
@pytest.mark.parametrize("query", QUERIES)
def test_a_small_search_memory_gives_the_same_results(tmp_path, search_memory, query):
    """`search_memory` caps what searches keep in memory (0: everything is
    read from the file; 200 and 2,000 bytes: part or all of the vectors in
    memory, the rest from the file); results, order and scores stay those of
    the default."""
    with AgentStateStore.from_conn_string(str(tmp_path / "s.db"), index=index()) as roomy:
        fill(roomy)
        with AgentStateStore.from_conn_string(
            str(tmp_path / "s.db"), index=index(), search_memory=search_memory
        ) as small:
            for prefix, filter, limit, offset in [(("docs",), None, 10, 0), ((), {"kind": "pet"}, 2, 1)]:
                want = roomy.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
                got = small.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
                assert ranked(got) == ranked(want)
                assert [h.score for h in got] == [h.score for h in want]


@pytest.mark.parametrize("bad", [-1, True])
def test_a_negative_search_memory_is_a_value_error(tmp_path, bad):
    with pytest.raises(ValueError, match="search_memory"):
        AgentStateStore(str(tmp_path / "s.db"), search_memory=bad)
