"""Seeded, randomized differential test: AgentStateStore against LangGraph's
InMemoryStore.

Each seed builds one random sequence of Store operations (put, delete, get,
search without and with a query, list_namespaces, and mixed batches of
GetOp/PutOp/SearchOp/ListNamespacesOp), applies it to an `AgentStateStore`
on a fresh file and to an `InMemoryStore` with the same configuration and
the same deterministic fake embeddings, and compares what both return.

How a result is checked:

- get: (namespace, key, value) equal, values compared strictly (a bool is
  not an int, an int is not a float).
- search without a query: the *set* of (namespace, key, value). Neither
  LangGraph nor InMemoryStore defines the order (InMemoryStore returns dict
  insertion order); ours is "newest first, then namespace text and key"
  (docs/design.md, Store search), which is checked against our own
  `updated_at` (the check lets namespaces order as tuples or as dot-joined
  text; we use text order here while list_namespaces uses tuple order),
  against the order of the puts, and against our own unpaged result (page ==
  full[offset:offset + limit]). With a page smaller than the match set, the
  page must hold the right number of matching items.
- search with a query: the scored items in ranked order with scores within
  1e-5 (our vectors are float32). Two items with the same text tie exactly
  (the texts come from a small word list so that queries hit), and LangGraph
  does not define the order of ties (docs/design.md, Store search, breaks
  them deterministically, InMemoryStore by its sort's stability): at each rank
  our item must be one of the expected items whose score is within 1e-5 of
  that rank's score, and where nothing ties the order is compared exactly.
- list_namespaces: the exact list, order included (both sort tuples).
- batch: every read sees the state before the batch (docs/design.md, Store
  search), so a batch's reads are checked against expectations computed before it runs.
- every 25 operations and at the end, the whole content of both stores.

Filters are generated from `$eq $ne $gt $gte $lt $lte` and plain equality on
top-level keys and nested keys (as nested partial-match objects, and as
dotted paths), with operands of the stored values' type, plus None, missing
keys and a field ("mix") whose type varies between items. A filter is
evaluated per item by an oracle that implements docs/design.md's filter
language (`oracle_matches` in test_store_differential_oracle.py). For every
item where no documented difference applies, the oracle is checked against
InMemoryStore's own filter function (`_compare_values`), so the oracle is
LangGraph's semantics there; our store is always checked against the oracle,
and InMemoryStore's real `search` result is compared with ours whenever no
documented difference applies to any candidate item.

Exclusions: where InMemoryStore and our documented decisions differ on
purpose, that aspect is not compared with InMemoryStore (our rule is asserted
on our store instead, through the oracle or a direct check):

- design.md (Filter language): a dotted filter key is a nested path for us; InMemoryStore
  looks up a top-level key literally named "a.b". Dotted filters are checked
  against the oracle only.
- design.md (Filter language): `true` equals only `true` (InMemoryStore uses Python's ==, so
  `True == 1`, `False == 0`); `$gt/$gte/$lt/$lte` on a missing key or null
  is no match (InMemoryStore raises TypeError from float(None)); strings
  compare as strings (InMemoryStore converts both sides with float(): it
  raises, or compares "10" and "9" as numbers); values of different types
  never compare (InMemoryStore: float(True) == 1.0, float(list) raises);
  integers compare exactly (InMemoryStore's float() rounds beyond 2**53).
  Cross-type ordering operands (bool, null, list, object: an error for us)
  are not generated.
- design.md (Store file format): re-putting an item replaces all its vectors and
  `index=False` stores none; InMemoryStore keeps the old vectors of paths
  the new put does not embed. The harness drops those stale vectors from
  InMemoryStore after each put so that rankings stay comparable.
- design.md (Store file format): `created_at` is kept on update (InMemoryStore resets it);
  times are not compared with InMemoryStore at all.
- design.md (Store search): items without a vector come after the scored ones and
  `offset` counts over that whole sequence; InMemoryStore fills from the
  unscored items ignoring `offset`. The unscored tail is checked as a set
  against the oracle, and against InMemoryStore only when offset == 0.
  All-zero vectors (unscored for us, score 0.0 in InMemoryStore) are not
  generated: every embedded text is non-empty.
- design.md (Store search): order of a search without a query (see above).
- design.md (Namespaces): namespace validation and its messages (only valid
  namespaces are generated; InMemoryStore validates only in `put`).
- design.md (TTL): TTL (no TTL is configured).
- Not a rule of docs/design.md but documented in `agentstate/store.py`: a search
  with a query on a store without an index raises ValueError (InMemoryStore
  ignores the query). Seeds without an index search without a query.

Normalisations that no rule number covers (InMemoryStore defects; ours
agrees with SqliteStore on both):

- InMemoryStore raises ValueError("Number of embeddings (n) does not match
  number of indices (m)") on a put or batch in which one text occurs at two
  indexed paths, and stores none of the batch's puts; `FixedInMemoryStore`
  below fixes that one method.
- InMemoryStore's `_data` is a defaultdict, so a namespace stays in
  `list_namespaces` after its last item is deleted, and even a `get` on a
  namespace that never held an item adds it.
  SqliteStore and PostgresStore (and we) list namespaces that hold items;
  the expected `list_namespaces` answer is InMemoryStore's own algorithm
  (`_handle_list_namespaces`) over its non-empty namespaces.

The harness reads InMemoryStore's internals (`_data`, `_vectors`,
`_extract_texts`, `_handle_list_namespaces`, `_compare_values`) as of
langgraph 1.2.22, the version CI pins.

Reproduce a failure with
`python -m pytest "python/tests/test_store_differential.py::test_differential[<seed>]"`;
the assertion message names the seed, the operation's index, the operation
as a Python call (a batch as its list of ops), and both results.
"""

from __future__ import annotations

import random
import types
from typing import Any, Optional

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from test_store_differential_oracle import (
    INDEX_FIELDS,
    KEYS,
    LABELS,
    documented_differences,
    inmemory_matches,
    oracle_matches,
    rand_filter,
    rand_namespace,
    rand_text,
    rand_value,
)
from test_store_support import DIMS, FakeEmbeddings

from agentstate import AgentStateStore

SEEDS = range(40)
OPS_PER_SEED = 400
FULL_CHECK_EVERY = 25
SCORE_TOLERANCE = 1e-5
BIG = 10**6  # "no limit" for the harness's own full reads


# ---------------------------------------------------------------------------
# Comparison helpers


def strict(v: Any) -> Any:
    """A form of a JSON value whose == tells bools, ints and floats apart."""
    if isinstance(v, dict):
        return ("obj", tuple(sorted((k, strict(x)) for k, x in v.items())))
    if isinstance(v, list):
        return ("list", tuple(strict(x) for x in v))
    if isinstance(v, tuple):  # a plain() item or a namespace
        return ("tuple", tuple(strict(x) for x in v))
    return (type(v).__name__, v)


def plain(item: Any) -> Any:
    if item is None:
        return None
    return (tuple(item.namespace), item.key, item.value)


def show(result: Any, limit: int = 6000) -> str:
    if isinstance(result, list):
        text = "[" + ", ".join(show(r) for r in result) + "]"
        return text if len(text) <= limit else f"{text[:limit]}... ({len(result)} items)"
    if hasattr(result, "namespace") and hasattr(result, "key"):
        score = getattr(result, "score", None)
        extra = f", score={score!r}" if score is not None else ""
        return f"({tuple(result.namespace)!r}, {result.key!r}, {result.value!r}{extra})"
    return repr(result)


class Mismatch(AssertionError):
    pass


class Context:
    def __init__(self, seed: int, index_fields: Any) -> None:
        self.seed = seed
        self.index_fields = index_fields
        self.step = -1
        self.call = ""

    def fail(self, what: str, ours: Any, inmemory: Any, expected: Any = None) -> None:
        msg = (
            f"seed={self.seed} (index fields {self.index_fields!r}) op #{self.step}: {self.call}\n"
            f"  {what}\n"
            f"  AgentStateStore: {show(ours)}\n"
            f"  InMemoryStore:   {show(inmemory)}"
        )
        if expected is not None:
            msg += f"\n  expected (docs/design.md's rules over InMemoryStore's items): {expected}"
        raise Mismatch(msg)


def call_repr(op: Any) -> str:
    if isinstance(op, GetOp):
        return f"store.get({op.namespace!r}, {op.key!r})"
    if isinstance(op, PutOp):
        if op.value is None:
            return f"store.delete({op.namespace!r}, {op.key!r})"
        idx = "" if op.index is None else f", index={op.index!r}"
        return f"store.put({op.namespace!r}, {op.key!r}, {op.value!r}{idx})"
    if isinstance(op, SearchOp):
        q = f", query={op.query!r}" if op.query else ""
        return (
            f"store.search({op.namespace_prefix!r}{q}, filter={op.filter!r}, "
            f"limit={op.limit}, offset={op.offset})"
        )
    if isinstance(op, ListNamespacesOp):
        kw = []
        for c in op.match_conditions or ():
            kw.append(f"{c.match_type}={tuple(c.path)!r}")
        kw += [f"max_depth={op.max_depth!r}", f"limit={op.limit}", f"offset={op.offset}"]
        return f"store.list_namespaces({', '.join(kw)})"
    return repr(op)


# ---------------------------------------------------------------------------
# The harness


class FixedInMemoryStore(InMemoryStore):
    """InMemoryStore with its duplicate-text bug fixed (nothing else changed).

    `_extract_texts` groups the paths to embed by text and `embed_documents`
    gets each distinct text once, but `_insertinmem_store` zips the
    embeddings with the flattened paths: a put (or batch) in which one text
    occurs at two paths (`tags == ["cat", "cat"]`, or `text` equal to
    `meta.note`) raises "Number of embeddings (4) does not match number of
    indices (5)" after the batch's reads, without storing its puts.
    """

    def _insertinmem_store(self, to_embed, embeddings):  # type: ignore[no-untyped-def]
        if len(to_embed) != len(embeddings):
            raise ValueError(f"{len(embeddings)} embeddings for {len(to_embed)} texts")
        for indices, embedding in zip(to_embed.values(), embeddings):
            for ns, key, path in indices:
                self._vectors[ns][key][path] = embedding


class Harness:
    def __init__(self, tmp_path: Any, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fields = INDEX_FIELDS[seed % len(INDEX_FIELDS)]
        self.indexed = self.fields != []
        if self.indexed:
            index: Optional[dict[str, Any]] = {"dims": DIMS, "embed": FakeEmbeddings()}
            index_theirs: Optional[dict[str, Any]] = {"dims": DIMS, "embed": FakeEmbeddings()}
            if self.fields is not None:
                index["fields"] = list(self.fields)
                index_theirs["fields"] = list(self.fields)
        else:
            index = index_theirs = None
        self.ours = AgentStateStore(tmp_path / f"diff-{seed}.db", index=index)
        self.theirs = FixedInMemoryStore(index=index_theirs)
        self.ctx = Context(seed, "no index" if not self.indexed else (self.fields or ["$"]))
        self.last_put: dict[tuple[tuple[str, ...], str], int] = {}  # op index of the last put

    def close(self) -> None:
        self.ours.close()

    # -- InMemoryStore's state -------------------------------------------------

    def items(self) -> dict[tuple[tuple[str, ...], str], dict[str, Any]]:
        return {
            (ns, key): item.value for ns, entries in self.theirs._data.items() for key, item in entries.items()
        }

    def drop_stale_vectors(self, puts: list[PutOp]) -> None:
        """design.md (Store file format): a put replaces all of an item's vectors (InMemoryStore keeps old paths)."""
        if not self.indexed:
            return
        final: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in puts:
            final[(op.namespace, op.key)] = op
        for (ns, key), op in final.items():
            if op.value is None:
                continue
            kept = {
                path
                for entries in self.theirs._extract_texts({(ns, key): op}).values()
                for (_, _, path) in entries
            }
            vectors = self.theirs._vectors[ns].get(key, {})
            for path in list(vectors):
                if path not in kept:
                    del vectors[path]
            if not vectors:
                self.theirs._vectors[ns].pop(key, None)

    # -- random ops ----------------------------------------------------------------

    def rand_put(self) -> PutOp:
        rng = self.rng
        existing = list(self.items())
        if existing and rng.random() < 0.4:
            ns, key = rng.choice(existing)  # an update
        else:
            ns, key = rand_namespace(rng), rng.choice(KEYS)
        index: Any = None
        if self.indexed:
            r = rng.random()
            if r < 0.1:
                index = False
            elif r < 0.15:
                index = ["text"]
            elif r < 0.2:
                index = ["meta.note", "n"]
            elif r < 0.25:
                index = ["meta", "b", "x"]  # texts of objects, bools, floats
        return PutOp(ns, key, rand_value(rng), index=index)

    def rand_delete(self) -> PutOp:
        existing = list(self.items())
        if existing and self.rng.random() < 0.8:
            ns, key = self.rng.choice(existing)
        else:
            ns, key = rand_namespace(self.rng), self.rng.choice(KEYS)
        return PutOp(ns, key, None)

    def rand_get(self) -> GetOp:
        existing = list(self.items())
        if existing and self.rng.random() < 0.7:
            ns, key = self.rng.choice(existing)
        else:
            ns, key = rand_namespace(self.rng), self.rng.choice(KEYS)
        return GetOp(ns, key)

    def rand_prefix(self) -> tuple[str, ...]:
        rng = self.rng
        existing = [ns for (ns, _) in self.items()]
        if existing and rng.random() < 0.6:
            ns = rng.choice(existing)
            return ns[: rng.randint(0, len(ns))]
        return tuple(rng.choice(LABELS) for _ in range(rng.choice([0, 0, 1, 1, 2])))

    def rand_search(self, with_query: bool) -> SearchOp:
        rng = self.rng
        # Fewer filters with a query, so that rankings are long.
        flt = None if with_query and rng.random() < 0.5 else rand_filter(rng, list(self.items().values()))
        limit = rng.choice([0, 1, 2, 3, 5, 10, 10, 100])
        offset = rng.choice([0, 0, 0, 1, 2, 5])
        query = rand_text(rng) if with_query else None
        return SearchOp(self.rand_prefix(), flt, limit, offset, query)

    def rand_list(self) -> ListNamespacesOp:
        rng = self.rng
        conditions = []
        existing = sorted({ns for (ns, _) in self.items()})
        for match_type in ("prefix", "suffix"):
            if rng.random() < 0.4:
                if existing and rng.random() < 0.7:
                    ns = rng.choice(existing)
                    n = rng.randint(1, len(ns))
                    path = list(ns[:n] if match_type == "prefix" else ns[-n:])
                else:
                    path = [rng.choice(LABELS) for _ in range(rng.randint(1, 2))]
                if rng.random() < 0.3:
                    path[rng.randrange(len(path))] = "*"
                conditions.append(MatchCondition(match_type=match_type, path=tuple(path)))
        return ListNamespacesOp(
            match_conditions=tuple(conditions) or None,
            max_depth=rng.choice([None, None, 0, 1, 2, 3]),
            limit=rng.choice([0, 1, 2, 5, 100]),
            offset=rng.choice([0, 0, 1, 3]),
        )

    def rand_op(self) -> Any:
        r = self.rng.random()
        if r < 0.3:
            return self.rand_put()
        if r < 0.38:
            return self.rand_delete()
        if r < 0.48:
            return self.rand_get()
        if r < 0.65:
            return self.rand_search(with_query=False)
        if r < 0.8:
            return self.rand_search(with_query=self.indexed) if self.indexed else self.rand_search(False)
        if r < 0.9:
            return self.rand_list()
        return self.rand_batch()

    def rand_batch(self) -> list[Any]:
        """2-6 ops; some name the item an earlier put of the batch names
        (reads must not see it, puts to one key collapse to the last)."""
        ops: list[Any] = []
        for _ in range(self.rng.randint(2, 6)):
            op = self.rand_batch_op()
            earlier = [o for o in ops if isinstance(o, PutOp)]
            if earlier and self.rng.random() < 0.4:
                target = self.rng.choice(earlier)
                if isinstance(op, GetOp):
                    op = GetOp(target.namespace, target.key)
                elif isinstance(op, PutOp):
                    op = PutOp(target.namespace, target.key, op.value, index=op.index)
                elif isinstance(op, SearchOp):
                    op = op._replace(namespace_prefix=target.namespace[: self.rng.randint(0, len(target.namespace))])
            ops.append(op)
        return ops

    def rand_batch_op(self) -> Any:
        r = self.rng.random()
        if r < 0.35:
            return self.rand_put()
        if r < 0.45:
            return self.rand_delete()
        if r < 0.6:
            return self.rand_get()
        if r < 0.75:
            return self.rand_search(with_query=False)
        if r < 0.88 and self.indexed:
            return self.rand_search(with_query=True)
        return self.rand_list()

    # -- expectations, computed before an op runs ----------------------------------

    def expect(self, op: Any) -> Any:
        if isinstance(op, GetOp):
            return None
        if isinstance(op, SearchOp):
            items = self.items()
            n = len(op.namespace_prefix)
            candidates = {k: v for k, v in items.items() if k[0][:n] == op.namespace_prefix}
            matching = {k: v for k, v in candidates.items() if oracle_matches(v, op.filter)}
            # Check the oracle against InMemoryStore's own filter on every item
            # where no documented difference applies.
            differences = []
            for k, v in candidates.items():
                why = documented_differences(v, op.filter)
                if why:
                    differences.append((k, why))
                    continue
                theirs = inmemory_matches(v, op.filter)
                if theirs is not (k in matching):
                    self.ctx.fail(
                        f"InMemoryStore's filter and docs/design.md's disagree on item {k!r} = {v!r} "
                        "where no documented difference applies (undocumented divergence)",
                        f"match={k in matching}",
                        f"match={theirs!r}",
                    )
            ranking = None
            if op.query:
                full = self.theirs.search(op.namespace_prefix, query=op.query, limit=BIG)
                ranking = [
                    ((tuple(r.namespace), r.key), r.score)
                    for r in full
                    if r.score is not None and (tuple(r.namespace), r.key) in matching
                ]
            return types.SimpleNamespace(matching=matching, differences=differences, ranking=ranking)
        if isinstance(op, ListNamespacesOp):
            live = {ns: entries for ns, entries in self.theirs._data.items() if entries}
            return InMemoryStore._handle_list_namespaces(types.SimpleNamespace(_data=live), op)
        return None

    # -- checks ------------------------------------------------------------------

    def check_get(self, op: GetOp, ours: Any, theirs: Any) -> None:
        if strict(plain(ours)) != strict(plain(theirs)):
            self.ctx.fail("get differs", ours, theirs)

    def check_values(self, ours: list[Any], exp: Any, theirs: Any) -> None:
        seen = set()
        for r in ours:
            k = (tuple(r.namespace), r.key)
            if k in seen:
                self.ctx.fail(f"item {k!r} returned twice", ours, theirs)
            seen.add(k)
            if k not in exp.matching:
                self.ctx.fail(f"item {k!r} should not match", ours, theirs, sorted(exp.matching))
            if strict(r.value) != strict(exp.matching[k]):
                self.ctx.fail(f"value of {k!r} differs: {exp.matching[k]!r}", ours, theirs)

    def check_search(self, op: SearchOp, exp: Any, ours: list[Any], theirs: Any, standalone: bool) -> None:
        self.check_values(ours, exp, theirs)
        hazard_free = not exp.differences
        if hazard_free and isinstance(theirs, Exception):
            self.ctx.fail("InMemoryStore raised where no documented difference applies", ours, theirs)
        if not op.query:
            want = max(0, min(op.limit, len(exp.matching) - op.offset))
            if len(ours) != want:
                self.ctx.fail(
                    f"expected {want} items ({len(exp.matching)} match, offset {op.offset}, limit {op.limit})"
                    f"; documented differences on items: {exp.differences[:3]}",
                    ours,
                    theirs,
                    sorted(exp.matching),
                )
            if hazard_free and not isinstance(theirs, Exception):
                if len(theirs) != want or any((tuple(t.namespace), t.key) not in exp.matching for t in theirs):
                    self.ctx.fail("InMemoryStore's page is not a page of the matching items", ours, theirs)
                if want == len(exp.matching):  # the whole match set: compare as sets
                    if {strict(plain(r)) for r in ours} != {strict(plain(t)) for t in theirs}:
                        self.ctx.fail("search results differ (as sets)", ours, theirs)
            # design.md (Store search): newest first, then namespace text and
            # key. The check lets namespaces order as tuples (the order of
            # list_namespaces) or as the file's dot-joined prefix text (what
            # SqliteStore's column sorts by, e.g. ("x-y",) before ("x", "a")):
            # either passes.
            as_tuples = [(-r.updated_at.timestamp(), tuple(r.namespace), r.key) for r in ours]
            as_text = [(-r.updated_at.timestamp(), ".".join(r.namespace), r.key) for r in ours]
            if as_tuples != sorted(as_tuples) and as_text != sorted(as_text):
                self.ctx.fail("design.md (Store search): not newest first, then namespace and key", ours, theirs)
            for a in ours:
                for b in ours:
                    ka, kb = (tuple(a.namespace), a.key), (tuple(b.namespace), b.key)
                    if self.last_put[ka] > self.last_put[kb] and a.updated_at < b.updated_at:
                        self.ctx.fail(f"{ka!r} was put after {kb!r} but has an older updated_at", ours, theirs)
            if standalone:
                full = self.ours.search(op.namespace_prefix, filter=op.filter, limit=BIG)
                page = full[op.offset : op.offset + op.limit]
                if [plain(r) for r in ours] != [plain(r) for r in page]:
                    self.ctx.fail("the page is not full[offset:offset + limit] of our own unpaged search", ours, page)
            return
        # With a query.
        ranking = exp.ranking
        unscored = set(exp.matching) - {k for k, _ in ranking}
        total = len(ranking) + len(unscored)
        want = max(0, min(op.limit, total - op.offset))
        scored_in_page = max(0, min(op.limit, len(ranking) - op.offset))
        if len(ours) != want:
            self.ctx.fail(
                f"expected {want} items ({len(ranking)} scored, {len(unscored)} unscored match; "
                f"offset {op.offset}, limit {op.limit})",
                ours,
                theirs,
                ranking,
            )
        for i, r in enumerate(ours):
            k = (tuple(r.namespace), r.key)
            if i < scored_in_page:
                rank_score = ranking[op.offset + i][1]
                if r.score is None or abs(r.score - rank_score) > SCORE_TOLERANCE:
                    self.ctx.fail(f"rank {op.offset + i}: score {r.score!r}, expected {rank_score!r}", ours, theirs, ranking)
                tied = {key for key, s in ranking if abs(s - rank_score) <= SCORE_TOLERANCE}
                if k not in tied:
                    self.ctx.fail(f"rank {op.offset + i}: {k!r}, expected one of {sorted(tied)!r}", ours, theirs, ranking)
                expected_score = dict(ranking)[k]
                if abs(r.score - expected_score) > SCORE_TOLERANCE:
                    self.ctx.fail(f"score of {k!r} is {r.score!r}, InMemoryStore's {expected_score!r}", ours, theirs)
            else:
                # design.md (Store search): items without a vector follow, score None.
                if r.score is not None or k not in unscored:
                    self.ctx.fail(f"position {i}: expected an unscored item (score None), got {k!r}", ours, theirs, sorted(unscored))
        if hazard_free and not isinstance(theirs, Exception):
            their_scored = [t for t in theirs if t.score is not None]
            ours_scored = ours[:scored_in_page]
            if len(their_scored) != len(ours_scored):
                self.ctx.fail("the number of scored items differs", ours, theirs)
            for a, b in zip(ours_scored, their_scored):
                if abs(a.score - b.score) > SCORE_TOLERANCE:
                    self.ctx.fail("ranked scores differ", ours, theirs)
                if (tuple(a.namespace), a.key) != (tuple(b.namespace), b.key):
                    tied = {k for k, s in ranking if abs(s - b.score) <= SCORE_TOLERANCE}
                    if (tuple(a.namespace), a.key) not in tied:
                        self.ctx.fail("ranked keys differ", ours, theirs)
            if op.offset == 0 and len(theirs) != len(ours):
                # design.md (Store search) and InMemoryStore agree when offset is 0.
                self.ctx.fail("the number of items (scored + unscored) differs", ours, theirs)

    def check_list(self, op: ListNamespacesOp, expected: Any, ours: Any, theirs: Any) -> None:
        if list(map(tuple, ours)) != expected:
            self.ctx.fail("list_namespaces differs", ours, theirs, expected)

    def check_all(self) -> None:
        self.ctx.call = "(full-state check) store.search((), limit=BIG)"
        ours = self.ours.search((), limit=BIG)
        theirs = self.theirs.search((), limit=BIG)
        if sorted(map(strict, map(plain, ours)), key=repr) != sorted(map(strict, map(plain, theirs)), key=repr):
            self.ctx.fail("the stores' contents differ", sorted(ours, key=lambda r: (r.namespace, r.key)), theirs)

    # -- running ------------------------------------------------------------------

    def check(self, op: Any, exp: Any, ours: Any, theirs: Any, standalone: bool) -> None:
        if isinstance(op, GetOp):
            self.check_get(op, ours, theirs)
        elif isinstance(op, SearchOp):
            self.check_search(op, exp, ours, theirs, standalone)
        elif isinstance(op, ListNamespacesOp):
            self.check_list(op, exp, ours, theirs)
        elif isinstance(op, PutOp):
            if ours is not None:
                self.ctx.fail("a put returned something", ours, theirs)

    def run_single(self, op: Any) -> None:
        self.ctx.call = call_repr(op)
        exp = self.expect(op)
        ours = self.run_ours(op)
        theirs = self.run_theirs(op)
        if isinstance(op, PutOp):
            self.drop_stale_vectors([op])
            self.last_put[(op.namespace, op.key)] = self.ctx.step
        self.check(op, exp, ours, theirs, standalone=True)

    def run_ours(self, op: Any) -> Any:
        if isinstance(op, GetOp):
            return self.ours.get(op.namespace, op.key)
        if isinstance(op, PutOp):
            if op.value is None:
                return self.ours.delete(op.namespace, op.key)
            if op.index is None:
                return self.ours.put(op.namespace, op.key, op.value)
            return self.ours.put(op.namespace, op.key, op.value, index=op.index)
        if isinstance(op, SearchOp):
            return self.ours.search(
                op.namespace_prefix, query=op.query, filter=op.filter, limit=op.limit, offset=op.offset
            )
        conditions = {c.match_type: c.path for c in op.match_conditions or ()}
        return self.ours.list_namespaces(
            prefix=conditions.get("prefix"),
            suffix=conditions.get("suffix"),
            max_depth=op.max_depth,
            limit=op.limit,
            offset=op.offset,
        )

    def run_theirs(self, op: Any) -> Any:
        try:
            return self.theirs.batch([op])[0]
        except Exception as exc:  # noqa: BLE001 - compared by the checks
            return exc

    def run_batch(self, ops: list[Any]) -> None:
        self.ctx.call = f"store.batch({ops!r})"
        expectations = [self.expect(op) for op in ops]
        ours = self.ours.batch(ops)
        # A search that InMemoryStore may raise on (a documented difference)
        # would abort its whole batch, puts included: it runs a harmless
        # search in that slot instead, whose result is not compared.
        placeholder = SearchOp(("-",), None, 0, 0)
        their_ops = [
            placeholder if isinstance(op, SearchOp) and exp.differences else op
            for op, exp in zip(ops, expectations)
        ]
        theirs = self.theirs.batch(their_ops)
        theirs = [
            RuntimeError("not run: a documented difference applies") if o is placeholder else t
            for o, t in zip(their_ops, theirs)
        ]
        puts = [op for op in ops if isinstance(op, PutOp)]
        self.drop_stale_vectors(puts)
        if len(ours) != len(ops):
            self.ctx.fail(f"batch returned {len(ours)} results for {len(ops)} ops", ours, theirs)
        for j, (op, exp, a, b) in enumerate(zip(ops, expectations, ours, theirs)):
            self.ctx.call = f"result {j} ({call_repr(op)}) of store.batch({ops!r})"
            self.check(op, exp, a, b, standalone=False)  # reads see the state before the batch
        for op in puts:
            self.last_put[(op.namespace, op.key)] = self.ctx.step

    def run(self, n_ops: int) -> int:
        for step in range(n_ops):
            self.ctx.step = step
            op = self.rand_op()
            if isinstance(op, list):
                self.run_batch(op)
            else:
                self.run_single(op)
            if step % FULL_CHECK_EVERY == FULL_CHECK_EVERY - 1:
                self.check_all()
        self.ctx.step = n_ops
        self.check_all()
        return n_ops


@pytest.mark.parametrize("seed", SEEDS)
def test_differential(tmp_path, seed):
    harness = Harness(tmp_path, seed)
    try:
        harness.run(OPS_PER_SEED)
    finally:
        harness.close()
