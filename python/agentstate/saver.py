"""`AgentStateSaver`: LangGraph's checkpointer on an agentstate file.

Values are serialized by the saver's LangGraph serde (``JsonPlusSerializer``
by default, or yours, encryption included) and stored by Rust as typed bytes,
unchanged. The tables are agentstate's: a Rust program (or the ``agentstate``
CLI) reads the same file, and a message list that grows by appending is
stored as its new messages only.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentstate._native import Saver as _Saver

__all__ = ["AgentStateSaver"]

# Values stored inline in the checkpoint's JSON (as LangGraph's Postgres
# saver does), with LangGraph's own serde only: a serde of yours (encryption)
# sees every value. Exactly these types, so that a subclass (an enum, a bool
# posing as an int) never loses its type on the way back.
_INLINE = (bool, type(None))
_I64 = (-(2**63), 2**63 - 1)
# The integers the crate's JSON keeps exactly (i64 and u64).
_JSON_INTS = (-(2**63), 2**64 - 1)
# A `list` limit above this is no limit (the native module takes a usize).
_MAX_LIMIT = 2**63 - 1


def _inline(value: Any) -> bool:
    t = type(value)
    if t is str:
        # A lone surrogate (a broken escape in JSON from elsewhere) is not
        # UTF-8: the serde stores it as LangGraph's savers do.
        return value.isascii() or _utf8(value)
    if t in _INLINE:
        return True
    if t is int:
        return _I64[0] <= value <= _I64[1]
    if t is float:
        return value == value and value not in (float("inf"), float("-inf"))
    return False


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _typed(dumps: Any, value: Any) -> tuple[str, bytes]:
    """`dumps(value)` with bytes: LangGraph's serde hands a bytearray over
    as it is (`("bytearray", value)`), and the crate takes bytes."""
    tag, data = dumps(value)
    return tag, data if type(data) is bytes else bytes(data)


def _metadata_json(metadata: Any) -> str:
    """The metadata as JSON, as SqliteSaver stores it (a character UTF-8
    cannot encode is dropped), refusing integers the crate's JSON would not
    keep exactly (it would read 2**64 back as a float)."""
    _check_ints(metadata, "metadata")
    text = _dumps(metadata)
    return text if text.isascii() or _utf8(text) else text.encode("utf-8", "ignore").decode("utf-8")


def _check_ints(obj: Any, where: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_ints(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_ints(v, f"{where}[{i}]")
    elif isinstance(obj, int) and not isinstance(obj, bool) and not _JSON_INTS[0] <= obj <= _JSON_INTS[1]:
        raise ValueError(
            f"{where} is {obj}, which does not fit in 64 bits: agentstate would not read it back "
            "exactly (store it as a string)"
        )


class AgentStateSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps its checkpoints in one agentstate file.

    Args:
        path: the database file (created if needed), or ``":memory:"``.
        serde: the serializer for channel values and writes (default
            LangGraph's ``JsonPlusSerializer``).
        durability: ``"normal"`` (a crashed process loses nothing committed;
            a power loss may lose the last commits) or ``"full"`` (every
            commit is fsynced).
        write_behind: queue writes and commit them in the background, many
            per transaction; ``flush()`` or leaving the ``with`` block makes
            them durable. A crash loses at most the writes not yet committed,
            never part of one.

    Use it as LangGraph's other savers::

        with AgentStateSaver.from_conn_string("agent.db") as saver:
            graph = builder.compile(checkpointer=saver)
    """

    def __init__(
        self,
        path: str,
        *,
        serde: SerializerProtocol | None = None,
        durability: Literal["normal", "full"] = "normal",
        write_behind: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        if "\x00" in str(path):
            raise ValueError("path must not contain a NUL byte")  # as open() and sqlite3.connect()
        self.path = path
        # LangGraph's default serde gives one value the same bytes every time,
        # so a version stored again with other bytes is a real conflict; any
        # other serde (encryption with a random nonce) may not: then a
        # version put again keeps the value first stored, as LangGraph's
        # Postgres saver does.
        self._native = _Saver(
            str(path),
            durability=durability,
            write_behind=write_behind,
            unstable_encoding=type(self.serde) is not JsonPlusSerializer,
        )
        # (thread, ns, channel, version) this saver knows to be stored: a put
        # encodes a channel left out of new_versions only if its version is
        # not known (Rust stores it then, if the file lacks it).
        self._stored: set[tuple[str, str, str, Any]] = set()

    @classmethod
    @contextmanager
    def from_conn_string(cls, path: str, **kwargs: Any) -> Iterator[AgentStateSaver]:
        """A saver on the file at ``path``, flushed when the block ends."""
        saver = cls(path, **kwargs)
        try:
            yield saver
        finally:
            saver.close()

    def __enter__(self) -> AgentStateSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def setup(self) -> None:
        """Nothing to do: the schema is created when the file is opened."""

    def flush(self, thread_id: str | None = None) -> None:
        """Commits everything write-behind has queued.

        Raises the first failure of a queued write not reported yet (a
        write's failure is otherwise raised by the next write to its
        thread). With ``thread_id``, only a failure of a write to that
        thread is raised: another thread's stays for that thread's next
        write or flush, so that one conversation on a shared saver never
        receives another's error.
        """
        self._native.flush(thread_id)

    def close(self) -> None:
        """Commits what is queued and lets the file go (once calls in flight
        and open ``list`` iterators are done with it). Later calls raise
        ``agentstate.Error``; closing again does nothing."""
        self._native.close()

    # -- reading ---------------------------------------------------------

    def _tuple(self, row: tuple, lists: dict | None = None) -> CheckpointTuple:
        """A checkpoint from the native row. `lists` (a sharing listing):
        the last list decoded per (thread, namespace, channel), which a value
        given as `(channel, None, n)` is the first `n` elements of."""
        thread_id, ns, checkpoint_id, parent_id, checkpoint, metadata, values, writes = row
        checkpoint = json.loads(checkpoint)
        # Stored only when known (LangGraph writes None for "unknown").
        checkpoint.setdefault("updated_channels", None)
        channel_values = checkpoint.setdefault("channel_values", {})
        loads = self.serde.loads_typed
        versions = checkpoint.get("channel_versions", {})
        for channel, tag, data in values:
            key = (thread_id, ns, channel)
            if tag is None:
                # Cut from the list decoded last (kept privately, whole: the
                # caller may change the lists it is given).
                value = lists[key][:data]  # type: ignore[index]
            else:
                value = loads((tag, data))
                if lists is not None:
                    # Rust's rule: a msgpack list is the one later versions
                    # are cut from; any other value ends it.
                    if tag == "msgpack" and type(value) is list:
                        lists[key] = value
                        value = value[:]
                    else:
                        lists.pop(key, None)
            channel_values[channel] = value
            self._remember(thread_id, ns, channel, versions.get(channel))
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,
            metadata=json.loads(metadata),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
                if parent_id
                else None
            ),
            pending_writes=[(task_id, channel, loads((tag, data))) for task_id, channel, tag, data in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        if ns is None:
            # No namespace matches None: SqliteSaver's `checkpoint_ns = NULL`
            # and InMemorySaver's lookup both find nothing.
            return None
        row = self._native.get_tuple(
            thread_id,
            ns,
            # An empty id is no id (the newest), as in LangGraph's savers.
            get_checkpoint_id(config) or None,
        )
        return None if row is None else self._tuple(row)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable", {})
        thread_id = configurable.get("thread_id")
        share = type(self.serde) is JsonPlusSerializer
        cursor = self._native.list(
            thread_id=None if thread_id is None else str(thread_id),
            checkpoint_ns=configurable.get("checkpoint_ns"),
            # An empty id is no id, as in LangGraph's savers.
            checkpoint_id=configurable.get("checkpoint_id") or None,
            filter=_dumps(_equality(filter)) if filter else None,
            # A `before` without an id lists nothing, as SqliteSaver's
            # `checkpoint_id < NULL` (InMemorySaver ignores it).
            before=None if before is None else (get_checkpoint_id(before) or ""),
            limit=_limit(limit),
            share=share,
        )
        # An older version of an appended message list is cut from the newer
        # one already decoded: each message is decoded once per listing, and
        # the checkpoints of one listing share message objects (as a list and
        # its slice do). Only with LangGraph's own serde, whose msgpack lists
        # decode element by element.
        lists: dict | None = {} if share else None
        for row in cursor:
            yield self._tuple(row, lists)

    # -- writing ---------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        # Required, as SqliteSaver and InMemorySaver require it (a KeyError).
        ns = configurable["checkpoint_ns"]
        stored = dict(checkpoint)
        inline: dict[str, Any] = {}
        encoded = []
        skipped = []
        dumps = self.serde.dumps_typed
        # Only LangGraph's own serde: any other (encryption) sees every value.
        inline_ok = type(self.serde) is JsonPlusSerializer
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        known = self._stored
        for channel, value in values.items():
            if inline_ok and _inline(value):
                inline[channel] = value
            elif channel in new_versions or (thread_id, ns, channel, versions.get(channel)) not in known:
                encoded.append((channel, *_typed(dumps, value)))
            else:
                skipped.append(channel)
        stored["channel_values"] = inline
        # The crate would read an integer beyond 64 bits anywhere in the
        # checkpoint's JSON back as a float (LangGraph's savers refuse it).
        _check_ints(stored, "checkpoint")
        args = [
            thread_id,
            ns,
            configurable.get("checkpoint_id"),
            _dumps(stored),
            encoded,
            # `writes` kept, as SqliteSaver and InMemorySaver keep it.
            _metadata_json(get_checkpoint_metadata(config, metadata)),
            _dumps(new_versions),
        ]
        try:
            self._native.put(*args)
        except ValueError:
            if not skipped:
                raise
            # What this saver remembers may be stale: another saver or
            # process deleted or pruned the thread. Send every value.
            for channel in skipped:
                known.discard((thread_id, ns, channel, versions.get(channel)))
                encoded.append((channel, *_typed(dumps, values[channel])))
            self._native.put(*args)
        for channel, _, _ in encoded:
            self._remember(thread_id, ns, channel, versions.get(channel))
        return {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _remember(self, thread_id: str, ns: str, channel: str, version: Any) -> None:
        if len(self._stored) > 100_000:
            self._stored.clear()
        self._stored.add((thread_id, ns, channel, version))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        dumps = self.serde.dumps_typed
        self._native.put_writes(
            str(configurable["thread_id"]),
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
            [(channel, *_typed(dumps, value)) for channel, value in writes],
            task_id,
            task_path,
        )

    def delete_thread(self, thread_id: str) -> None:
        self._stored.clear()
        self._native.delete_thread(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._stored.clear()
        self._native.delete_for_runs([str(r) for r in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._native.copy_thread(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._stored.clear()
        self._native.prune([str(t) for t in thread_ids], strategy)

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """LangGraph's string versions: ``"{counter:032}.{random:016}"``."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # -- async: the same calls on a worker thread ------------------------

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        it = self.list(config, filter=filter, before=before, limit=limit)
        done = object()
        while True:
            # A page at a time, off the event loop.
            batch = await self._run(_take, it, 64, done)
            for item in batch:
                if item is done:
                    return
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(self.prune, thread_ids, strategy=strategy)


def _take(it: Iterator[Any], n: int, done: Any) -> list[Any]:
    out = []
    for _ in range(n):
        item = next(it, done)
        out.append(item)
        if item is done:
            break
    return out


def _limit(limit: Any) -> Any:
    """`list`'s limit for the native module: a negative one is refused
    (LangGraph's savers disagree on what it means), one beyond any count is
    no limit; anything else goes as is (a non-int raises `TypeError` there)."""
    if isinstance(limit, int) and not isinstance(limit, bool):
        if limit < 0:
            raise ValueError(f"limit must be None or a non-negative int, got {limit!r}")
        return min(limit, _MAX_LIMIT)
    return limit


def _equality(filter: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's ``list(filter=...)``: every key equals its value. Values that
    are objects would read as operators in agentstate's filter language, so
    they are wrapped in ``$eq``."""
    return {k: {"$eq": v} if isinstance(v, dict) else v for k, v in filter.items()}

