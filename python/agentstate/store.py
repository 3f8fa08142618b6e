"""LangGraph's `BaseStore` on an agentstate file: `AgentStateStore`.

The store keeps LangGraph's long-term memory (namespaced JSON items, TTL,
filters, exact cosine vector search) in one SQLite file, in the format of
LangGraph's `SqliteStore` (tables `store` and `store_vectors`), so either
store opens the other's files. The work happens in the Rust crate with the
GIL released; this module turns LangGraph's ops into the native module's
tuples and its answers into `Item` and `SearchItem`.

Where it differs from `SqliteStore` on purpose (agentstate's docs/design.md,
"Store decisions"):

- `index["fields"]` is honoured (`SqliteStore` reads `text_fields` and
  embeds the whole document otherwise); a query is embedded with
  `embed_query`; re-putting an item replaces all its vectors and deleting it
  deletes them.
- Vector search is exact and max-pooled per item, with `offset` and `limit`
  counted after pooling; items without a vector (`index=False`) follow the
  scored ones with `score=None`.
- A search with a `query` on a store without an index raises `ValueError`.
- Filters have JSON semantics and add `$in $nin $exists $and $or $not`.
- `created_at` is kept when an item is updated.
- TTL: reads refresh by default (`refresh_on_read` defaults to True, as
  LangGraph's `TTLConfig` documents; `SqliteStore` refreshes only when it is
  spelled out), and expired items are never returned, even before a sweep.
- `list_namespaces` sorts namespaces as tuples, not as dot-joined text.
- Times are timezone-aware (UTC) `datetime`s; `SqliteStore` returns naive
  ones holding UTC.
- The file records which embedder (name and dims) made its vectors and a
  store with another one is refused (`ValueError`) unless it reindexes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Optional, Union

import orjson
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    validate_op_namespace,
)
from langgraph.store.base.embed import EmbeddingsLambda

from agentstate import _native

logger = logging.getLogger(__name__)


class AgentStateIndexConfig(IndexConfig, total=False):
    """LangGraph's `IndexConfig` (`dims`, `embed`, `fields`) and agentstate's keys.

    `embedder_name`: the identity recorded in the file with `dims` (default:
    the embeddings' model name, or its class or function name). A store whose
    embedder has another name or dims is refused until it reindexes, so that
    vectors of two models are never compared. Set it to keep a file usable
    when only the Python name of the same model changes.

    `adopt_existing_vectors`: take the vectors of a file that records no
    embedder (one written by LangGraph's `SqliteStore`) as this embedder's.
    Set it only when the same model made them.

    `distance_type`: only `"cosine"` (`SqliteStore`'s default).
    """

    embedder_name: str
    adopt_existing_vectors: bool
    distance_type: Literal["cosine"]


class AgentStateStore(BaseStore):
    """LangGraph's long-term memory store in one SQLite file, backed by agentstate.

    Configured like LangGraph's `SqliteStore`:

    ```python
    from agentstate import AgentStateStore

    with AgentStateStore.from_conn_string(
        "agent.db",
        index={"dims": 1536, "embed": OpenAIEmbeddings(), "fields": ["text"]},
        ttl={"default_ttl": 60 * 24, "refresh_on_read": True},
    ) as store:
        store.put(("users", "alice"), "m1", {"text": "likes hiking"})
        hits = store.search(("users",), query="outdoor hobbies", limit=5)
    ```

    Args:
        path: the file (created if missing), or `":memory:"`.
        index: LangGraph's `IndexConfig` (`dims`, `embed`: a LangChain
            `Embeddings`, a sync or async function, or a provider string;
            `fields`, default `["$"]`), plus `AgentStateIndexConfig`'s keys.
        ttl: LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`,
            `sweep_interval_minutes` for `start_ttl_sweeper`).
        reindex: re-embed every item now (one transaction) with `index` and
            record its embedder; for a file whose vectors another embedder
            made.
        search_memory: the bytes searches may keep in memory (default 256
            MiB). A search whose namespaces need more keeps the vectors that
            fit and reads the rest from the file: the same results, slower.
            `0` always reads from the file.

    Every method of `BaseStore` works (`get`, `put`, `delete`, `search`,
    `list_namespaces` and their async forms). Calls from several threads run
    in parallel; async calls run in a thread and never block the event loop.
    Several stores, processes and agentstate savers may share one file.

    Warning:
        Do not open the file with Python's `sqlite3` (`SqliteStore`,
        `SqliteSaver`, your own connections) in the same process while an
        agentstate store has it open: agentstate carries its own copy of
        SQLite, POSIX locks are per process, and closing the other copy's
        connection drops this one's locks and deletes the WAL it is using
        (https://sqlite.org/howtocorrupt.html, section 2.2.1). Close one
        before opening the other, or use another process.
    """

    supports_ttl = True

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        index: Optional[AgentStateIndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
        reindex: bool = False,
        search_memory: Optional[int] = None,
    ) -> None:
        if search_memory is not None and (isinstance(search_memory, bool) or search_memory < 0):
            raise ValueError(f"search_memory must be a number of bytes >= 0, got {search_memory!r}")
        if isinstance(search_memory, int):
            search_memory = min(search_memory, _MAX_COUNT)  # more than any memory: no bound
        self.path = os.fspath(path)
        if isinstance(self.path, str) and "\x00" in self.path:
            raise ValueError("path must not contain a NUL byte")  # as open() and sqlite3.connect()
        self.ttl_config = _check_ttl_config(ttl)
        self.index_config: Optional[AgentStateIndexConfig] = None
        self.embeddings: Optional[Embeddings] = None
        self._bridge: Optional[_EmbeddingsBridge] = None
        native_index = None
        if reindex and index is None:
            raise ValueError("reindex=True needs an index (reindex() without one removes every vector)")
        if index is not None:
            self.index_config, self.embeddings, native_index = _index_config(index)
            self._bridge = native_index[0]
        self._native = _native.Store(self.path, index=native_index, reindex=reindex, search_memory=search_memory)
        self._ttl_sweeper_thread: Optional[threading.Thread] = None
        self._ttl_stop_event = threading.Event()

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: Union[str, os.PathLike[str]],
        *,
        index: Optional[AgentStateIndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
        reindex: bool = False,
        search_memory: Optional[int] = None,
    ) -> Iterator[AgentStateStore]:
        """A store on the file `conn_string` (a path or `":memory:"`), closed on exit."""
        store = cls(conn_string, index=index, ttl=ttl, reindex=reindex, search_memory=search_memory)
        try:
            yield store
        finally:
            store.close()

    def setup(self) -> None:
        """Does nothing: the file's tables are created or migrated when the store opens.

        Kept so that code written for `SqliteStore` (which needs it) runs unchanged.
        """

    def close(self) -> None:
        """Stops the TTL sweeper and lets the file go. Later calls raise `agentstate.Error`."""
        self.stop_ttl_sweeper()
        self._native.close()

    def __enter__(self) -> AgentStateStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_ttl_stop_event") and hasattr(self, "_ttl_sweeper_thread"):
            self.stop_ttl_sweeper(timeout=0.1)

    # -- batches ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs `ops` as one transaction; one result per op, in order.

        Every read sees the state before the batch; puts to the same
        (namespace, key) collapse to the last one.
        """
        return self._run(list(ops), None)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread: the event loop is never blocked.

        Embeddings with their own async methods (`aembed_documents`,
        `aembed_query`, or an async `embed` function) are awaited on this
        event loop, as LangGraph's async stores do; others run in the worker.
        """
        ops = list(ops)
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return await loop.run_in_executor(_executor(), context.run, self._run, ops, loop)

    def _run(
        self, ops: list[Op], loop: Optional[asyncio.AbstractEventLoop]
    ) -> list[Result]:
        native_ops = [_op_to_native(op, self._bridge is not None) for op in ops]
        if self._bridge is None:
            answers = self._native.batch(native_ops)
        else:
            with self._bridge.awaiting_on(loop):
                answers = self._native.batch(native_ops)
        return [_result_from_native(op, answer) for op, answer in zip(ops, answers)]

    # -- maintenance --------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Deletes the expired items (and their vectors) now; returns how many."""
        return self._native.sweep_expired()

    def reindex(self) -> int:
        """Re-embeds every item with the configured index, in one transaction.

        Records the embedder in the file; a store without an index removes
        every vector. Returns the number of items.
        """
        return self._native.reindex()

    def start_ttl_sweeper(
        self, sweep_interval_minutes: Optional[int] = None
    ) -> concurrent.futures.Future[None]:
        """Deletes expired items every `sweep_interval_minutes` in a background thread.

        As `SqliteStore`'s: the interval defaults to the TTL config's
        `sweep_interval_minutes`, then 5; without a TTL config nothing runs.
        Returns a future that cancelling stops the sweeper.
        """
        if not self.ttl_config:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            future.set_result(None)
            return future

        if self._ttl_sweeper_thread and self._ttl_sweeper_thread.is_alive():
            logger.info("TTL sweeper thread is already running")
            future = concurrent.futures.Future()
            future.add_done_callback(
                lambda f: self._ttl_stop_event.set() if f.cancelled() else None
            )
            return future

        interval = float(
            sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5
        )
        if not interval > 0:
            # Zero is the default (5); a negative or NaN interval would sweep
            # in a busy loop.
            raise ValueError(f"sweep_interval_minutes must be a positive number, got {sweep_interval_minutes!r}")
        # Event.wait refuses a timeout beyond TIMEOUT_MAX (the sweeper died).
        wait = min(interval * 60, threading.TIMEOUT_MAX)
        self._ttl_stop_event.clear()
        logger.info("Starting store TTL sweeper with interval %s minutes", interval)
        future = concurrent.futures.Future()

        def sweep_loop() -> None:
            try:
                while not self._ttl_stop_event.wait(wait):
                    try:
                        swept = self.sweep_ttl()
                        if swept > 0:
                            logger.info("Store swept %d expired items", swept)
                    except Exception as exc:
                        logger.exception("Store TTL sweep iteration failed", exc_info=exc)
                future.set_result(None)
            except Exception as exc:  # pragma: no cover - the loop catches sweeps' errors
                future.set_exception(exc)

        thread = threading.Thread(target=sweep_loop, daemon=True, name="agentstate-ttl-sweeper")
        self._ttl_sweeper_thread = thread
        thread.start()
        future.add_done_callback(
            lambda f: self._ttl_stop_event.set() if f.cancelled() else None
        )
        return future

    def stop_ttl_sweeper(self, timeout: Optional[float] = None) -> bool:
        """Stops the sweeper thread; False if it did not stop within `timeout` seconds."""
        thread = self._ttl_sweeper_thread
        if thread is None or not thread.is_alive():
            return True
        self._ttl_stop_event.set()
        thread.join(timeout)
        if thread.is_alive():
            logger.warning("Timed out waiting for TTL sweeper thread to stop")
            return False
        self._ttl_sweeper_thread = None
        return True


# ---------------------------------------------------------------------------
# Configuration


def _check_ttl_config(ttl: Optional[TTLConfig]) -> Optional[TTLConfig]:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise TypeError(f"ttl must be a TTLConfig dict, got {type(ttl).__name__}")
    default = ttl.get("default_ttl")
    if default is not None and not (isinstance(default, (int, float)) and 0 <= default < float("inf")):
        raise ValueError(f"default_ttl must be a non-negative number of minutes, got {default!r}")
    interval = ttl.get("sweep_interval_minutes")
    if interval is not None and not (isinstance(interval, (int, float)) and interval > 0):
        raise ValueError(f"sweep_interval_minutes must be a positive number, got {interval!r}")
    return ttl


def _index_config(
    index: AgentStateIndexConfig,
) -> tuple[AgentStateIndexConfig, Embeddings, tuple[Any, ...]]:
    """Checks `index` and returns it, its embeddings, and the native module's index tuple."""
    if not isinstance(index, Mapping):
        raise TypeError(f"index must be an IndexConfig dict, got {type(index).__name__}")
    config = dict(index)
    dims = config.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or not 0 < dims <= _MAX_COUNT:
        raise ValueError(f"index needs 'dims', a positive int, got {dims!r}")
    if config.get("embed") is None:
        raise ValueError("index needs 'embed': an Embeddings, a function or a provider string")
    distance = config.get("distance_type", "cosine")
    if distance != "cosine":
        raise ValueError(f"AgentStateStore scores by cosine similarity only, got distance_type={distance!r}")
    # LangGraph's key is `fields`; `SqliteStore` reads `text_fields`.
    fields = config.get("fields") or config.get("text_fields")
    if isinstance(fields, str):
        fields = [fields]
    if fields is not None:
        if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields):
            raise ValueError(f"index 'fields' must be a list of field paths, got {fields!r}")
        fields = list(fields)
    embeddings = ensure_embeddings(config["embed"])
    name = config.get("embedder_name") or _embedder_name(config["embed"], embeddings)
    adopt = bool(config.get("adopt_existing_vectors", False))
    bridge = _EmbeddingsBridge(embeddings)
    return config, embeddings, (bridge, dims, name, fields, adopt)  # type: ignore[return-value]


def _embedder_name(embed: Any, embeddings: Embeddings) -> str:
    """The identity recorded with `dims`: the model's name if the embeddings
    have one (`model`, `model_name`, `model_id`), else the provider string,
    function or class name."""
    if isinstance(embed, str):
        return embed
    for attr in ("model", "model_name", "model_id"):
        model = getattr(embeddings, attr, None)
        if isinstance(model, str) and model:
            return model
    target: Any = embeddings
    if isinstance(embeddings, EmbeddingsLambda):
        target = getattr(embeddings, "func", None) or getattr(embeddings, "afunc", embeddings)
    else:
        target = type(embeddings)
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{qualname}" if module else qualname


def _overrides(embeddings: Embeddings, method: str) -> bool:
    """Whether the embeddings have their own async `method` (not LangChain's
    default, which runs the sync one in the event loop's executor)."""
    if isinstance(embeddings, EmbeddingsLambda):
        return getattr(embeddings, "afunc", None) is not None
    return getattr(type(embeddings), method, None) is not getattr(Embeddings, method)


class _EmbeddingsBridge:
    """What the native store calls to embed, from the thread running the batch.

    In a sync `batch` it calls the embeddings' sync methods. In `abatch` (a
    worker thread while the caller's event loop waits), embeddings with their
    own async methods are awaited on that loop, in the caller's context, as
    LangGraph's async stores await them; the others run in the worker.
    """

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings
        self._async_documents = _overrides(embeddings, "aembed_documents")
        self._async_query = _overrides(embeddings, "aembed_query")
        self._local = threading.local()

    @contextmanager
    def awaiting_on(self, loop: Optional[asyncio.AbstractEventLoop]) -> Iterator[None]:
        """Embeds on `loop` (if not None) during the block, in this thread."""
        previous = getattr(self._local, "loop", None)
        self._local.loop = loop
        try:
            yield
        finally:
            self._local.loop = previous

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        loop = getattr(self._local, "loop", None)
        if loop is not None and self._async_documents:
            return _await_on(loop, lambda: self.embeddings.aembed_documents(texts))
        return self.embeddings.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        loop = getattr(self._local, "loop", None)
        if loop is not None and self._async_query:
            return _await_on(loop, lambda: self.embeddings.aembed_query(text))
        return self.embeddings.embed_query(text)


def _await_on(loop: asyncio.AbstractEventLoop, make: Callable[[], Any]) -> Any:
    """Runs the coroutine `make()` on `loop` (in this thread's context) and waits for it."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def start() -> None:
        try:
            task = asyncio.ensure_future(make())
        except BaseException as exc:
            done.set_exception(exc)
            return

        def finish(task: asyncio.Future[Any]) -> None:
            if task.cancelled():
                done.cancel()
            elif task.exception() is not None:
                done.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                done.set_result(task.result())

        task.add_done_callback(finish)

    loop.call_soon_threadsafe(start, context=contextvars.copy_context())
    return done.result()


_EXECUTOR: Optional[concurrent.futures.ThreadPoolExecutor] = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    """The threads async calls run in: our own, so that a worker waiting for an
    embedding on the event loop never holds a thread of the loop's default
    executor that the embedding may need."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="agentstate-store")
        return _EXECUTOR


# ---------------------------------------------------------------------------
# Ops in, results out (the tuples are documented in python/src/store.rs)


def _op_to_native(op: Op, indexed: bool) -> tuple[Any, ...]:
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        return ("get", op.namespace, op.key, bool(op.refresh_ttl))
    if isinstance(op, PutOp):
        value = None if op.value is None else orjson.dumps(dict(op.value))
        index = op.index
        if index is not None and index is not False:
            if isinstance(index, str) or not isinstance(index, (list, tuple)):
                raise TypeError(f"index must be None, False or a list of field paths, got {index!r}")
            index = list(index)
        return ("put", op.namespace, op.key, value, index, _minutes(op.ttl))
    if isinstance(op, SearchOp):
        filter_json = orjson.dumps(op.filter) if op.filter else None
        query = op.query or None  # LangGraph's stores ignore an empty query
        if query is not None and not indexed:
            # SqliteStore ignores the query then; a silently unranked search
            # would look like a ranked one.
            raise ValueError(
                "a search with a query needs a store with an index: "
                "AgentStateStore(path, index={'dims': ..., 'embed': ...})"
            )
        return (
            "search",
            op.namespace_prefix,
            filter_json,
            _count("limit", op.limit),
            _count("offset", op.offset),
            query,
            bool(op.refresh_ttl),
        )
    if isinstance(op, ListNamespacesOp):
        conditions = [
            (condition.match_type, tuple(condition.path))
            for condition in op.match_conditions or ()
        ]
        max_depth = None if op.max_depth is None else _count("max_depth", op.max_depth)
        return (
            "list",
            conditions,
            max_depth,
            _count("limit", op.limit),
            _count("offset", op.offset),
        )
    raise TypeError(f"unknown store op: {op!r}")


def _minutes(ttl: Optional[float]) -> Optional[float]:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be a number of minutes or None, got {ttl!r}")
    try:
        return float(ttl)
    except OverflowError:
        raise ValueError(f"ttl must be a finite, non-negative number of minutes, got {ttl!r}") from None


def _count(name: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    # Beyond any count (the native module takes a usize): the same as no bound.
    return min(n, _MAX_COUNT)


_MAX_COUNT = 2**63 - 1


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _result_from_native(op: Op, answer: Any) -> Result:
    if isinstance(op, GetOp):
        if answer is None:
            return None
        namespace, key, value, created, updated = answer
        return Item(
            value=orjson.loads(value),
            key=key,
            namespace=namespace,
            created_at=_time(created),
            updated_at=_time(updated),
        )
    if isinstance(op, SearchOp):
        return [
            SearchItem(
                namespace,
                key,
                orjson.loads(value),
                _time(created),
                _time(updated),
                score,
            )
            for namespace, key, value, created, updated, score in answer
        ]
    return answer  # None for a put, namespace tuples for a list
