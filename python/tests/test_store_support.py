"""What the Store tests share (no tests here): a deterministic fake
embeddings class, the pair of stores the differential tests compare, and
ways to look at a file's rows.

The differential tests run one sequence of ops against LangGraph's
`SqliteStore` and against `AgentStateStore`, each on its own file, and
compare what the public APIs return.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item
from langgraph.store.sqlite import SqliteStore

from agentstate import AgentStateStore

DIMS = 16


def fake_vector(text: str) -> list[float]:
    """A deterministic vector: how often each character class occurs."""
    v = [0.0] * DIMS
    for c in text.lower():
        v[ord(c) % DIMS] += 1.0
        v[(ord(c) * 7 + 3) % DIMS] += 0.5
    return v


class FakeEmbeddings(Embeddings):
    """Deterministic embeddings that record what they were asked."""

    def __init__(self, query_prefix: str = "") -> None:
        self.query_prefix = query_prefix
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [fake_vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return fake_vector(self.query_prefix + text)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@contextmanager
def store_pair(
    tmp_path: Any,
    *,
    index: Optional[dict[str, Any]] = None,
    ttl: Optional[dict[str, Any]] = None,
) -> Iterator[tuple[SqliteStore, AgentStateStore]]:
    """(LangGraph's SqliteStore, AgentStateStore) on two fresh files, same config."""
    with ExitStack() as stack:
        theirs = stack.enter_context(
            SqliteStore.from_conn_string(str(tmp_path / "python.db"), index=index, ttl=ttl)
        )
        theirs.setup()
        ours = stack.enter_context(
            AgentStateStore.from_conn_string(tmp_path / "agentstate.db", index=index, ttl=ttl)
        )
        ours.setup()
        yield theirs, ours


def plain(result: Any) -> Any:
    """A result with the parts both stores must agree on: items as
    (namespace, key, value), lists element-wise; times and scores left out."""
    if isinstance(result, Item):
        return (tuple(result.namespace), result.key, result.value)
    if isinstance(result, list):
        return [plain(r) for r in result]
    return result


def by_key(items: list[Item]) -> list[Any]:
    """Items as `plain` tuples, sorted (for results whose order ties)."""
    return sorted(plain(items))


_SQL_IN_A_CHILD = """
import json, sqlite3, sys
path, sql, params = json.loads(sys.stdin.read())
conn = sqlite3.connect(path, isolation_level=None)
print(json.dumps(conn.execute(sql, params).fetchall()))
conn.close()
"""


def rows(path: Any, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Runs `sql` on the file at `path` in another process and returns its rows.

    Never with Python's sqlite3 in this process: it is another copy of the
    SQLite library than the one inside agentstate, and POSIX locks are per
    process, so closing its connection would drop agentstate's locks and
    delete the WAL agentstate is using (https://sqlite.org/howtocorrupt.html,
    "multiple copies of SQLite linked into the same application").
    """
    out = subprocess.run(
        [sys.executable, "-c", _SQL_IN_A_CHILD],
        input=json.dumps([str(path), sql, list(params)]),
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(row) for row in json.loads(out.stdout)]


def execute(path: Any, sql: str, *params: Any) -> None:
    """Changes the file at `path` behind the stores' backs (test setup only),
    from another process (see `rows`)."""
    rows(path, sql, *params)


def file_time(text: str) -> datetime:
    """A timestamp as either store writes it (`2026-01-01 10:00:00`, with a
    fraction, with `+00:00`), as an aware UTC datetime."""
    text = text.replace("T", " ")
    if text.endswith("+00:00"):
        text = text[: -len("+00:00")]
    if "." in text:
        whole, frac = text.split(".")
        text = f"{whole}.{(frac + '000000')[:6]}"
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
