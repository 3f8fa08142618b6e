#!/usr/bin/env python3
"""Generate golden fixtures of the checkpoints real LangGraph writes.

Each scenario builds a small StateGraph, runs it against LangGraph's own
checkpointer (InMemorySaver), and writes tests/fixtures/engine/<scenario>.json
holding:

* the graph in a neutral form (hand-written spec + what LangGraph compiled),
* every call made (invoke / stream / update_state / get_state), its input,
  output (a stream's events) or error, and how many times each node
  function ran during it,
* every checkpoint of every thread and namespace, oldest first, with its
  pending writes and `get_state` at that checkpoint,
* for every task and interrupt, the exact inputs LangGraph hashed to get its
  id, re-derived here with an independent implementation (asserted),
* a normalised view (ordinal ids, integer versions, no timestamps) that is
  identical from run to run.

Usage (from the repository root):

    python tools/engine_goldens/generate.py            # write fixtures
    python tools/engine_goldens/generate.py --check    # compare a fresh run's
                                                       # normalised views with
                                                       # the committed files

Every scenario is run three times per invocation of this script: twice with
InMemorySaver and once with SqliteSaver(":memory:"); the three normalised
views must be equal or the script fails (but for the `__resume__` writes
listed under `saver_dependent`, see `saver_differences`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import operator
import os
import re
import sqlite3
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Callable

import xxhash
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.ephemeral_value import EphemeralValue
from langgraph.channels.named_barrier_value import NamedBarrierValue
from langgraph.channels.topic import Topic
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, RetryPolicy, Send, StateSnapshot, interrupt
from typing_extensions import TypedDict

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "engine"
FIXTURE_FORMAT = 1

# LangGraph's reserved names (copied, not imported, so that the derivation
# below is an independent re-implementation; asserted equal further down).
PULL = "__pregel_pull"
PUSH = "__pregel_push"
NS_SEP = "|"
NS_END = ":"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
INTERRUPT_CH = "__interrupt__"
INPUT_CH = "__input__"


def _assert_constants() -> None:
    from langgraph._internal import _constants as c

    assert (c.PULL, c.PUSH, c.NS_SEP, c.NS_END) == (PULL, PUSH, NS_SEP, NS_END)
    assert (c.NULL_TASK_ID, c.INTERRUPT, c.INPUT) == (
        NULL_TASK_ID,
        INTERRUPT_CH,
        INPUT_CH,
    )


# ---------------------------------------------------------------------------
# Independent re-implementation of LangGraph's id derivations
# ---------------------------------------------------------------------------


def derive_task_id(checkpoint_id: str, parts: list[str]) -> str:
    """xxh3_128(uuid_bytes(checkpoint_id) ++ utf8(concat(parts))) as a UUID string.

    (LangGraph's `_xxhash_str`, used for every checkpoint with v > 1.)
    """
    digest = xxhash.xxh3_128_hexdigest(
        uuid.UUID(checkpoint_id).bytes + "".join(parts).encode("utf-8")
    )
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# How many answers per task the interrupt ids are derived for.
MAX_ANSWERS = 8


def derive_interrupt_id(task_checkpoint_ns: str, answered: int = 0) -> str:
    """xxh3_128 hex of the task's own namespace ("<ns>:<task_id>")."""
    key = f"{task_checkpoint_ns}{NS_SEP}{answered}" if answered else task_checkpoint_ns
    return xxhash.xxh3_128_hexdigest(key.encode("utf-8"))


def task_ns_for(parent_ns: str, name: str) -> str:
    return f"{parent_ns}{NS_SEP}{name}" if parent_ns else name


def task_id_parts(
    parent_ns: str, step: int, name: str, path: list, triggers: list[str]
) -> list[str]:
    ns = task_ns_for(parent_ns, name)
    if path[0] == PULL:
        return [ns, str(step), name, PULL, *sorted(triggers)]
    if path[0] == PUSH and len(path) == 3 and isinstance(path[1], int):
        # a Send consumed from __pregel_tasks: (PUSH, idx, False)
        return [ns, str(step), name, PUSH, str(path[1])]
    raise ValueError(f"unsupported task path {path!r}")


# ---------------------------------------------------------------------------
# JSON conversion
# ---------------------------------------------------------------------------


def J(x: Any) -> Any:
    """Convert a LangGraph value to plain JSON."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, dict):
        return {str(k): J(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [J(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return {"__set__": sorted(J(v) for v in x)}
    if isinstance(x, Interrupt):
        d = {"__type__": "Interrupt", "value": J(x.value), "id": x.id}
        if getattr(x, "response_schema", None) is not None:
            d["response_schema"] = J(x.response_schema)
        return d
    if isinstance(x, Send):
        return {"__type__": "Send", "node": x.node, "arg": J(x.arg)}
    if isinstance(x, Command):
        d = {"__type__": "Command"}
        for f in ("graph", "update", "resume", "goto"):
            v = getattr(x, f)
            if v is not None and v != ():
                d[f] = J(v)
        return d
    if isinstance(x, BaseMessage):
        d = x.model_dump()
        return {"__type__": "message", **J(d)}
    if isinstance(x, BaseException):
        return {"__type__": "exception", "class": type(x).__name__, "str": str(x)}
    if isinstance(x, bytes):
        return {"__type__": "bytes", "hex": x.hex()}
    raise TypeError(f"cannot convert {type(x)!r} to JSON: {x!r}")


def snapshot_json(s: StateSnapshot, full: bool) -> dict:
    d: dict[str, Any] = {
        "values": J(s.values),
        "next": list(s.next),
        "tasks": [task_json(t) for t in s.tasks],
        "interrupts": J(s.interrupts),
    }
    if full:
        # InMemorySaver hands back the config it was given for an id it
        # finds: a subgraph's then holds the checkpointer LangGraph lends it
        conf = lambda c: c and {**c, "configurable": {k: v for k, v in c["configurable"].items() if k != "__pregel_checkpointer"}}  # noqa: E731
        d["config"] = J(conf(s.config))
        d["parent_config"] = J(s.parent_config)
        d["metadata"] = J(s.metadata)
        d["created_at"] = s.created_at
    return d


def task_json(t) -> dict:
    d = {
        "id": t.id,
        "name": t.name,
        "path": J(t.path),
        "error": J(t.error),
        "interrupts": J(t.interrupts),
        "result": J(t.result),
    }
    if t.state is not None:
        d["state"] = (
            snapshot_json(t.state, full=True)
            if isinstance(t.state, StateSnapshot)
            else J(t.state)
        )
    return d


# ---------------------------------------------------------------------------
# Graph introspection
# ---------------------------------------------------------------------------


def _fn_name(f: Any) -> str:
    return getattr(f, "__name__", None) or type(f).__name__


def introspect(g) -> dict:
    """What LangGraph compiled: channels, nodes' triggers and reads, edges."""
    channels = {}
    for name in sorted(g.channels):
        ch = g.channels[name]
        d: dict[str, Any] = {"kind": type(ch).__name__}
        if isinstance(ch, BinaryOperatorAggregate):
            d["operator"] = _fn_name(ch.operator)
        if isinstance(ch, NamedBarrierValue):
            d["names"] = sorted(ch.names)
        if isinstance(ch, Topic):
            d["accumulate"] = ch.accumulate
        channels[name] = d
    nodes = {}
    for name, p in g.nodes.items():
        writes: list[str] = []
        for w in p.writers:
            for e in getattr(w, "writes", ()):
                if hasattr(e, "channel"):
                    writes.append(e.channel)
                elif getattr(e, "static", None):
                    writes.extend(s[0] for s in e.static)
        nodes[name] = {
            "triggers": list(p.triggers),
            "reads": J(p.channels),
            "static_writes": sorted(set(writes)),
            "is_subgraph": bool(p.subgraphs),
        }
    b = g.builder
    branches = {}
    for src, specs in b.branches.items():
        branches[src] = {
            bname: {"ends": J(dict(spec.ends)) if spec.ends else None}
            for bname, spec in specs.items()
        }
    return {
        "channels": channels,
        "nodes": nodes,
        "edges": sorted([list(e) for e in b.edges]),
        "waiting_edges": sorted([[sorted(s), d] for s, d in b.waiting_edges]),
        "branches": branches,
        "input_channels": J(g.input_channels),
        "output_channels": J(g.output_channels),
        "stream_channels": J(g.stream_channels),
        "interrupt_before": J(g.interrupt_before_nodes),
        "interrupt_after": J(g.interrupt_after_nodes),
    }


# ---------------------------------------------------------------------------
# Node execution counting
# ---------------------------------------------------------------------------

_EXEC = Counter()
_EXEC_LOCK = threading.Lock()


def counted(name: str, fn: Callable) -> Callable:
    def wrapper(state):
        with _EXEC_LOCK:
            _EXEC[name] += 1
        return fn(state)

    wrapper.__name__ = name
    return wrapper


# ---------------------------------------------------------------------------
# Scenario harness
# ---------------------------------------------------------------------------


class Harness:
    def __init__(self, saver_kind: str):
        self.saver_kind = saver_kind
        if saver_kind == "memory":
            self.saver = InMemorySaver()
        else:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            self.saver = SqliteSaver(conn)
            self.saver.setup()
        self.graphs: dict[str, Any] = {}
        self.thread_graph: dict[str, str] = {}
        self.calls: list[dict] = []

    # -- recording helpers -------------------------------------------------
    def _all_ids(self) -> set[str]:
        return {t.config["configurable"]["checkpoint_id"] for t in self.saver.list(None)}

    def compile(self, key: str, builder: StateGraph, **kw):
        g = builder.compile(checkpointer=self.saver, **kw)
        self.graphs[key] = g
        return g

    def _record(self, entry: dict, fn: Callable) -> Any:
        before = self._all_ids()
        _EXEC.clear()
        try:
            out = fn()
            if not isinstance(out, StateSnapshot):
                entry["output"] = J(out)
            result = out
        except Exception as e:  # noqa: BLE001 - recorded, not swallowed silently
            entry["error"] = {"class": type(e).__name__, "str": str(e)}
            result = None
        entry["node_executions"] = dict(sorted(_EXEC.items()))
        entry["checkpoints_created"] = sorted(self._all_ids() - before)
        self.calls.append(entry)
        return result

    def invoke(self, key: str, thread: str, inp: Any, config=None, **kw) -> Any:
        kw.setdefault("durability", "sync")
        config = config or {"configurable": {"thread_id": thread}}
        self.thread_graph.setdefault(thread, key)
        entry = {
            "call": "invoke",
            "graph": key,
            "thread_id": thread,
            "input": J(inp),
            "config": J(config),
            "kwargs": J(kw),
        }
        return self._record(entry, lambda: self.graphs[key].invoke(inp, config, **kw))

    def stream(self, key: str, thread: str, inp: Any, config=None, **kw) -> list:
        """`graph.stream(inp, config, stream_mode=["updates", "values"])`: the
        `(mode, chunk)` pairs it yields, in order, under `events` (also those
        yielded before it raised)."""
        kw.setdefault("stream_mode", ["updates", "values"])
        kw.setdefault("durability", "sync")
        config = config or {"configurable": {"thread_id": thread}}
        self.thread_graph.setdefault(thread, key)
        entry = {
            "call": "stream",
            "graph": key,
            "thread_id": thread,
            "input": J(inp),
            "config": J(config),
            "kwargs": J(kw),
            "events": [],
        }

        def run() -> None:
            for item in self.graphs[key].stream(inp, config, **kw):
                if kw.get("subgraphs"):
                    # (namespace, mode, chunk): the namespace a tuple of
                    # "node:task id" segments, () for the graph itself
                    ns, mode, chunk = item
                    entry["events"].append([list(ns), mode, J(chunk)])
                else:
                    mode, chunk = item
                    entry["events"].append([mode, J(chunk)])

        self._record(entry, run)
        entry.pop("output", None)
        return entry["events"]

    def update_state(self, key: str, config: dict, values: Any, as_node: str | None) -> dict:
        entry = {
            "call": "update_state",
            "graph": key,
            "thread_id": config["configurable"]["thread_id"],
            "config": J(config),
            "values": J(values),
            "as_node": as_node,
        }
        return self._record(
            entry, lambda: self.graphs[key].update_state(config, values, as_node=as_node)
        )

    def get_state(self, key: str, config: dict, subgraphs: bool) -> StateSnapshot:
        entry = {
            "call": "get_state",
            "graph": key,
            "thread_id": config["configurable"]["thread_id"],
            "config": J(config),
            "subgraphs": subgraphs,
        }
        snap = self._record(
            entry, lambda: self.graphs[key].get_state(config, subgraphs=subgraphs)
        )
        entry["state"] = snapshot_json(snap, full=True)
        return snap

    def checkpoint_config(self, thread: str, pick: Callable[[Any], bool]) -> dict:
        """Config of the unique root-namespace checkpoint of `thread` matching pick."""
        hits = [
            t
            for t in self.saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            if pick(t)
        ]
        assert len(hits) == 1, f"expected one checkpoint, got {len(hits)}"
        return hits[0].config

    def head_config(self, thread: str) -> dict:
        """Config of the newest root-namespace checkpoint of `thread`."""
        return next(iter(self.saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))).config

    # -- dumping the saver -------------------------------------------------
    def _writes(self, thread: str, ns: str, cid: str) -> list[dict]:
        if self.saver_kind == "memory":
            stored = self.saver.writes.get((thread, ns, cid), {})
            rows = [
                (v[0], k[1], v[1], v[2][0], v[2], v[3]) for k, v in stored.items()
            ]
        else:
            cur = self.saver.conn.execute(
                "SELECT task_id, idx, channel, type, value, task_path FROM writes "
                "WHERE thread_id=? AND checkpoint_ns=? AND checkpoint_id=?",
                (thread, ns, cid),
            )
            rows = [(r[0], r[1], r[2], r[3], (r[3], r[4]), r[5]) for r in cur]
        out = []
        for task_id, idx, channel, typ, typed, task_path in sorted(
            rows, key=lambda r: (r[5], r[0], r[1])
        ):
            out.append(
                {
                    "task_id": task_id,
                    "idx": idx,
                    "channel": channel,
                    "value": J(self.saver.serde.loads_typed(typed)),
                    "serde_type": typ,
                    "task_path": task_path,
                }
            )
        return out

    def dump(self) -> list[dict]:
        self._task_namespaces: set[str] = set()
        tuples = sorted(
            self.saver.list(None), key=lambda t: t.config["configurable"]["checkpoint_id"]
        )
        out = []
        for t in tuples:
            conf = t.config["configurable"]
            thread, ns, cid = conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"]
            gkey = self.thread_graph[thread]
            g = self.graphs[gkey]
            snap = g.get_state(t.config)
            assert snap.config["configurable"]["checkpoint_id"] == cid
            assert J(snap.metadata) == J(t.metadata)
            ckpt = {k: J(v) for k, v in t.checkpoint.items()}
            parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
            rec = {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
                "parent_checkpoint_id": parent,
                "checkpoint": ckpt,
                "metadata": J(t.metadata),
                "pending_writes": self._writes(thread, ns, cid),
                "state": snapshot_json(snap, full=False),
            }
            rec["derivations"] = self._derive(g, ns, cid, t.metadata, snap)
            out.append(rec)
        # the n-th interrupt of a task that already has n answers hashes
        # "<task ns>|n" (see derive_interrupt_id)
        by_hash = {
            derive_interrupt_id(n, k): f"{n}{NS_SEP}{k}" if k else n
            for n in self._task_namespaces
            for k in range(MAX_ANSWERS)
        }
        for rec in out:
            for d in rec["derivations"]["interrupts"]:
                own = d.pop("own_task_ns")
                key = by_hash.get(d["interrupt_id"])
                assert key is not None, f"no namespace hashes to interrupt {d['interrupt_id']}"
                assert key == own or key.startswith(own + NS_SEP), (key, own)
                d["hash"] = "xxh3_128"
                d["input"] = key
        return out

    def _graph_for_ns(self, root, ns: str):
        g = root
        if not ns:
            return g
        for seg in ns.split(NS_SEP):
            if seg.isdigit():
                # the n-th further call of a subgraph in one task (a retried
                # subgraph node runs in "<node>:<task id>|1", "|2", ...)
                continue
            node = seg.split(NS_END)[0]
            subs = g.nodes[node].subgraphs
            assert len(subs) == 1, (ns, node)
            g = subs[0]
        return g

    def _derive(self, root, ns: str, cid: str, metadata: dict, snap: StateSnapshot) -> dict:
        step = metadata["step"] + 1
        g = self._graph_for_ns(root, ns)
        u = uuid.UUID(cid)
        tasks = []
        interrupts = []
        for t in snap.tasks:
            triggers = list(g.nodes[t.name].triggers) if t.path[0] == PULL else [PUSH]
            parts = task_id_parts(ns, step, t.name, list(t.path), triggers)
            got = derive_task_id(cid, parts)
            assert got == t.id, f"task id mismatch for {t.name} at {cid}: {got} != {t.id}"
            tasks.append(
                {
                    "task_id": t.id,
                    "name": t.name,
                    "hash": "xxh3_128",
                    "checkpoint_id": cid,
                    "parts": parts,
                }
            )
            task_ns = f"{task_ns_for(ns, t.name)}{NS_END}{t.id}"
            self._task_namespaces.add(task_ns)
            for intr in t.interrupts:
                # resolved in dump(), once every namespace is known: an
                # interrupt raised inside a subgraph surfaces on the parent's
                # task but is keyed by the inner task's namespace
                interrupts.append({"interrupt_id": intr.id, "own_task_ns": task_ns})
        return {
            "uuid_version": u.version,
            "clock_seq": u.clock_seq,
            "step_plus_one": step,
            "tasks": tasks,
            "interrupts": interrupts,
        }

    def result(self) -> dict:
        return {"calls": self.calls, "checkpoints": self.dump()}


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------

VERSION_RE = re.compile(r"^(\d{32})\.(.+)$")
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HEX32_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
DROP_KEYS = {"ts", "created_at"}


def id_names(raw: dict) -> dict[str, str]:
    """raw id -> stable name for every checkpoint, task and interrupt id."""
    names: dict[str, str] = {}
    for i, c in enumerate(raw["checkpoints"]):
        cid = c["checkpoint_id"]
        cname = f"c{i}"
        names[cid] = cname
        u = uuid.UUID(cid)
        # ids LangGraph derives with uuid5 for update_state / delta-channel input writes
        names[str(uuid.uuid5(u, INTERRUPT_CH))] = f"update({cname})"
        names[str(uuid.uuid5(u, INPUT_CH))] = f"input({cname})"
    # every interrupt id a task could raise: "interrupt(<task>)" for its
    # first, "interrupt(<task>|n)" for one raised with n answers given
    derived: dict[str, str] = {}
    for c in raw["checkpoints"]:
        cname = names[c["checkpoint_id"]]
        for t in c["state"]["tasks"]:
            tname = _task_name(cname, t)
            task_ns = f"{task_ns_for(c['checkpoint_ns'], t['name'])}{NS_END}{t['id']}"
            for k in range(MAX_ANSWERS):
                derived[derive_interrupt_id(task_ns, k)] = (
                    f"interrupt({tname}|{k})" if k else f"interrupt({tname})"
                )
    for c in raw["checkpoints"]:
        cname = names[c["checkpoint_id"]]
        for t in c["state"]["tasks"]:
            tname = _task_name(cname, t)
            assert names.get(t["id"], tname) == tname
            names[t["id"]] = tname
            for intr in t["interrupts"]:
                answered = derived.get(intr["id"], "")
                names[intr["id"]] = answered if "|" in answered else f"interrupt({tname})"
    for raw_id, name in derived.items():
        names.setdefault(raw_id, name)
    # tasks only their pending writes show (a Command input's goto, applied
    # after get_state's task list was made): derived from the write's path
    for c in raw["checkpoints"]:
        cname = names[c["checkpoint_id"]]
        step = c["metadata"]["step"] + 1
        for w in c["pending_writes"]:
            if w["task_id"] in names or w["task_id"] == NULL_TASK_ID:
                continue
            path = w["task_path"]
            cands = {
                ch[len("branch:to:") :]
                for x in raw["checkpoints"]
                for ch in x["checkpoint"]["channel_versions"]
                if ch.startswith("branch:to:")
            } | {
                x["value"]["node"]
                for y in raw["checkpoints"]
                for x in y["pending_writes"]
                if isinstance(x["value"], dict) and x["value"].get("__type__") == "Send"
            }
            for node in sorted(cands):
                if path.startswith("~" + PULL):
                    if not path.endswith(", " + node):
                        continue
                    t = {"name": node, "path": [PULL, node]}
                    parts = task_id_parts(c["checkpoint_ns"], step, node, t["path"], [f"branch:to:{node}"])
                else:
                    i = int(path.split(",")[1].strip())
                    t = {"name": node, "path": [PUSH, i, False]}
                    parts = task_id_parts(c["checkpoint_ns"], step, node, t["path"], [])
                if derive_task_id(c["checkpoint_id"], parts) == w["task_id"]:
                    names[w["task_id"]] = _task_name(cname, t)
                    break
    return names


def _task_name(cname: str, t: dict) -> str:
    path = t["path"]
    if path[0] == PULL:
        return f"task({cname},{t['name']})"
    return f"task({cname},{t['name']},push{path[1]})"


def normalise(raw: dict, names: dict[str, str]) -> dict:
    pattern = re.compile("|".join(re.escape(k) for k in sorted(names, key=len, reverse=True)))

    def s(x: str) -> Any:
        m = VERSION_RE.match(x)
        if m:
            return int(m.group(1))
        return pattern.sub(lambda m: names[m.group(0)], x) if names else x

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            return {s(k): walk(v) for k, v in x.items() if k not in DROP_KEYS}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str):
            return s(x)
        return x

    out = walk(raw)
    # writes of one step sorted by (task_path, task name, idx): raw task ids
    # are random from run to run, their names are not
    for c in out["checkpoints"]:
        c["pending_writes"].sort(key=lambda w: (w["task_path"], w["task_id"], w["idx"]))
        c.pop("derivations", None)
    text = json.dumps(out)
    left = [m for m in UUID_RE.findall(text) if m != NULL_TASK_ID] + HEX32_RE.findall(text)
    assert not left, f"ids left un-normalised: {sorted(set(left))[:5]}"
    return out


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[Harness], dict]] = {}


def scenario(fn: Callable[[Harness], dict]) -> Callable[[Harness], dict]:
    SCENARIOS[fn.__name__] = fn
    return fn


class ListCount(TypedDict):
    items: Annotated[list, operator.add]
    count: int


def _linear_builder() -> StateGraph:
    def step(tag: str):
        return lambda s: {"items": [tag], "count": s["count"] + 1}

    b = StateGraph(ListCount)
    for n in ("a", "b", "c"):
        b.add_node(n, counted(n, step(n)))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    return b


LINEAR_SPEC = {
    "state": {
        "items": {"type": "list", "reducer": "operator.add (list concatenation)"},
        "count": {"type": "int", "reducer": "last value"},
    },
    "nodes": [
        {"node": n, "writes": {"items": {"literal": [n]}, "count": {"expr": "state.count + 1"}}}
        for n in ("a", "b", "c")
    ],
    "edges": [["__start__", "a"], ["a", "b"], ["b", "c"], ["c", "__end__"]],
    "prose": "Each of a, b, c appends its own name to items and writes count = count + 1.",
}


@scenario
def linear(h: Harness) -> dict:
    h.compile("main", _linear_builder())
    h.invoke("main", "linear", {"items": ["in"], "count": 0})
    return {
        "description": "START -> a -> b -> c -> END, one invoke with input.",
        "graphs": {"main": {"spec": LINEAR_SPEC}},
    }


@scenario
def conditional_loop(h: Harness) -> dict:
    class S(TypedDict):
        count: int
        trace: Annotated[list, operator.add]

    def inc(s):
        return {"count": s["count"] + 1, "trace": [f"inc{s['count'] + 1}"]}

    def route(s):
        return "inc" if s["count"] < 3 else END

    b = StateGraph(S)
    b.add_node("inc", counted("inc", inc))
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", route)
    h.compile("main", b)
    h.invoke("main", "loop", {"count": 0, "trace": []})
    return {
        "description": "inc loops on itself through a conditional edge until count >= 3.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {
                        "count": {"type": "int", "reducer": "last value"},
                        "trace": {"type": "list", "reducer": "operator.add"},
                    },
                    "nodes": [
                        {
                            "node": "inc",
                            "writes": {
                                "count": {"expr": "state.count + 1"},
                                "trace": {"expr": "['inc' + str(state.count + 1)]"},
                            },
                        }
                    ],
                    "edges": [["__start__", "inc"]],
                    "conditional_edges": [
                        {
                            "source": "inc",
                            "rule": "'inc' if state.count < 3 else END",
                            "path_map": None,
                        }
                    ],
                    "prose": "inc writes count+1 and appends 'inc<new count>' to trace; "
                    "after it, the router (reading the state after inc's write) "
                    "goes back to inc while count < 3, else to END.",
                }
            }
        },
    }


@scenario
def send_fanout_join(h: Harness) -> dict:
    class S(TypedDict):
        topics: list
        results: Annotated[list, operator.add]
        joined: str

    def plan(s):
        return {"topics": ["t1", "t2", "t3"]}

    def fan_out(s):
        return [Send("worker", {"topic": t}) for t in s["topics"]]

    def worker(arg):
        return {"results": [f"done:{arg['topic']}"]}

    def join(s):
        return {"joined": ",".join(s["results"])}

    b = StateGraph(S)
    b.add_node("plan", counted("plan", plan))
    b.add_node("worker", counted("worker", worker))
    b.add_node("join", counted("join", join))
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan_out, ["worker"])
    b.add_edge("worker", "join")
    b.add_edge("join", END)
    h.compile("send", b)
    h.invoke("send", "send", {"results": []})

    class B(TypedDict):
        results: Annotated[list, operator.add]
        joined: str

    def tag(n):
        return lambda s: {"results": [n]}

    def join2(s):
        return {"joined": "+".join(s["results"])}

    b2 = StateGraph(B)
    for n in ("x", "y1", "y"):
        b2.add_node(n, counted(n, tag(n)))
    b2.add_node("join", counted("join", join2))
    b2.add_edge(START, "x")
    b2.add_edge(START, "y1")
    b2.add_edge("y1", "y")
    b2.add_edge(["x", "y"], "join")
    b2.add_edge("join", END)
    h.compile("barrier", b2)
    h.invoke("barrier", "barrier", {"results": []})
    return {
        "description": "Thread 'send': plan's conditional edge returns three Sends to worker, "
        "worker -> join. Thread 'barrier': START -> x and START -> y1 -> y, "
        "add_edge(['x','y'], 'join') (NamedBarrierValue), x finishes a step before y.",
        "graphs": {
            "send": {
                "spec": {
                    "state": {
                        "topics": {"type": "list", "reducer": "last value"},
                        "results": {"type": "list", "reducer": "operator.add"},
                        "joined": {"type": "str", "reducer": "last value"},
                    },
                    "nodes": [
                        {"node": "plan", "writes": {"topics": {"literal": ["t1", "t2", "t3"]}}},
                        {
                            "node": "worker",
                            "input": "the Send arg {'topic': t}, not the state",
                            "writes": {"results": {"expr": "['done:' + arg.topic]"}},
                        },
                        {"node": "join", "writes": {"joined": {"expr": "','.join(state.results)"}}},
                    ],
                    "edges": [["__start__", "plan"], ["worker", "join"], ["join", "__end__"]],
                    "conditional_edges": [
                        {
                            "source": "plan",
                            "rule": "[Send('worker', {'topic': t}) for t in state.topics]",
                            "path_map": ["worker"],
                        }
                    ],
                    "prose": "plan writes topics; its conditional edge sends one worker task per "
                    "topic (PUSH tasks from __pregel_tasks); each worker appends "
                    "'done:<topic>'; join runs once after all workers.",
                }
            },
            "barrier": {
                "spec": {
                    "state": {
                        "results": {"type": "list", "reducer": "operator.add"},
                        "joined": {"type": "str", "reducer": "last value"},
                    },
                    "nodes": [
                        {"node": n, "writes": {"results": {"literal": [n]}}}
                        for n in ("x", "y1", "y")
                    ]
                    + [{"node": "join", "writes": {"joined": {"expr": "'+'.join(state.results)"}}}],
                    "edges": [
                        ["__start__", "x"],
                        ["__start__", "y1"],
                        ["y1", "y"],
                        ["join", "__end__"],
                    ],
                    "waiting_edges": [[["x", "y"], "join"]],
                    "prose": "x and y1 run in step 1, y in step 2; join waits for both x and y "
                    "(channel 'join:x+y:join', NamedBarrierValue) and runs in step 3.",
                }
            },
        },
    }


_APPROVE_SPEC_STATE = {
    "items": {"type": "list", "reducer": "operator.add"},
    "count": {"type": "int", "reducer": "last value"},
    "answer": {"type": "str", "reducer": "last value"},
}


@scenario
def interrupt_resume(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]
        count: int
        answer: str

    def prep(s):
        return {"items": ["prep"], "count": s["count"] + 1}

    def ask(s):
        ans = interrupt("approve?")
        return {"items": ["ask"], "answer": ans}

    def finish(s):
        return {"items": [f"finish:{s['answer']}"], "count": s["count"] + 1}

    b = StateGraph(S)
    b.add_node("prep", counted("prep", prep))
    b.add_node("ask", counted("ask", ask))
    b.add_node("finish", counted("finish", finish))
    b.add_edge(START, "prep")
    b.add_edge("prep", "ask")
    b.add_edge("ask", "finish")
    b.add_edge("finish", END)
    h.compile("interrupt", b)
    cfg = {"configurable": {"thread_id": "interrupt"}}
    h.invoke("interrupt", "interrupt", {"items": [], "count": 0})
    h.invoke("interrupt", "interrupt", Command(resume="yes"), cfg)

    h.compile("before", _linear_builder(), interrupt_before=["b"])
    h.invoke("before", "before", {"items": ["in"], "count": 0})
    h.invoke("before", "before", None, {"configurable": {"thread_id": "before"}})

    h.compile("after", _linear_builder(), interrupt_after=["a"])
    h.invoke("after", "after", {"items": ["in"], "count": 0})
    h.invoke("after", "after", None, {"configurable": {"thread_id": "after"}})
    return {
        "description": "Thread 'interrupt': prep -> ask -> finish, ask calls interrupt('approve?'); "
        "first invoke stops, invoke(Command(resume='yes')) finishes. Thread 'before': the "
        "linear graph compiled with interrupt_before=['b'], resumed with invoke(None). "
        "Thread 'after': the linear graph with interrupt_after=['a'], resumed with invoke(None).",
        "graphs": {
            "interrupt": {
                "spec": {
                    "state": _APPROVE_SPEC_STATE,
                    "nodes": [
                        {"node": "prep", "writes": {"items": {"literal": ["prep"]}, "count": {"expr": "state.count + 1"}}},
                        {
                            "node": "ask",
                            "calls": "answer = interrupt('approve?')",
                            "writes": {"items": {"literal": ["ask"]}, "answer": {"expr": "answer"}},
                        },
                        {
                            "node": "finish",
                            "writes": {
                                "items": {"expr": "['finish:' + state.answer]"},
                                "count": {"expr": "state.count + 1"},
                            },
                        },
                    ],
                    "edges": [["__start__", "prep"], ["prep", "ask"], ["ask", "finish"], ["finish", "__end__"]],
                    "prose": "ask raises GraphInterrupt on its first run (no writes of its own "
                    "are kept); on resume it runs again from the start and interrupt() returns "
                    "the resume value.",
                }
            },
            "before": {"spec": {**LINEAR_SPEC, "interrupt_before": ["b"]}},
            "after": {"spec": {**LINEAR_SPEC, "interrupt_after": ["a"]}},
        },
    }


@scenario
def update_state_fork(h: Harness) -> dict:
    h.compile("main", _linear_builder())
    h.invoke("main", "fork", {"items": ["in"], "count": 0})
    # the checkpoint after a ran (step 1, next = b)
    cfg = h.checkpoint_config("fork", lambda t: t.metadata["step"] == 1)
    new_cfg = h.update_state("main", cfg, {"count": 10}, as_node="a")
    h.invoke("main", "fork", None, new_cfg)
    h.get_state("main", {"configurable": {"thread_id": "fork"}}, subgraphs=False)

    # time travel without an update: re-run from an earlier checkpoint
    h.invoke("main", "replay", {"items": ["in"], "count": 0})
    cfg = h.checkpoint_config("replay", lambda t: t.metadata["step"] == 1)
    h.invoke("main", "replay", None, cfg)
    h.get_state("main", {"configurable": {"thread_id": "replay"}}, subgraphs=False)
    return {
        "description": "Thread 'fork': run the linear graph; then update_state(config of the "
        "step-1 checkpoint (after a ran, next=b), {'count': 10}, as_node='a'); then "
        "invoke(None, returned config), which runs b and c on the fork. Thread 'replay': run "
        "the linear graph, then invoke(None, config of its step-1 checkpoint) with no update "
        "(time travel: LangGraph saves a source='fork' checkpoint and re-runs b and c). The "
        "whole history is recorded.",
        "graphs": {"main": {"spec": LINEAR_SPEC}},
    }


@scenario
def input_at_checkpoint(h: Harness) -> dict:
    h.compile("main", _linear_builder())
    h.invoke("main", "branch", {"items": ["in"], "count": 0})
    # new input at the checkpoint after a ran (step 1, next = b): LangGraph
    # discards b, applies the input there (a fork) and runs from START again
    cfg = h.checkpoint_config("branch", lambda t: t.metadata["step"] == 1)
    h.invoke("main", "branch", {"items": ["again"], "count": 100}, cfg)
    h.get_state("main", {"configurable": {"thread_id": "branch"}}, subgraphs=False)
    # new input at the thread's head, addressed by its id: a plain continuation
    head = h.head_config("branch")
    h.invoke("main", "branch", {"items": ["last"], "count": 1000}, head)
    h.get_state("main", {"configurable": {"thread_id": "branch"}}, subgraphs=False)
    return {
        "description": "Thread 'branch': run the linear graph; then invoke({'items': ['again'], "
        "'count': 100}, config of the step-1 checkpoint): the input checkpoint's parent is that "
        "old checkpoint (a fork), b is discarded and a, b, c run; then invoke with input at the "
        "config of the thread's newest checkpoint, addressed by id. The whole history is "
        "recorded.",
        "graphs": {"main": {"spec": LINEAR_SPEC}},
    }


_FLAKY = {"fail": True}


@scenario
def node_error_resume(h: Harness) -> dict:
    _FLAKY["fail"] = True

    def good(s):
        return {"items": ["good"], "count": s["count"] + 1}

    def flaky(s):
        time.sleep(0.05)  # let `good` finish first, so its writes are saved
        if _FLAKY["fail"]:
            raise RuntimeError("flaky failed")
        return {"items": ["flaky"]}

    def after(s):
        return {"items": ["after"], "count": s["count"] + 1}

    b = StateGraph(ListCount)
    b.add_node("good", counted("good", good))
    b.add_node("flaky", counted("flaky", flaky))
    b.add_node("after", counted("after", after))
    b.add_edge(START, "good")
    b.add_edge(START, "flaky")
    b.add_edge("good", "after")
    b.add_edge("flaky", "after")
    b.add_edge("after", END)
    h.compile("main", b)
    h.invoke("main", "error", {"items": [], "count": 0})
    _FLAKY["fail"] = False
    h.invoke("main", "error", None, {"configurable": {"thread_id": "error"}})
    return {
        "description": "good and flaky run in the same superstep; flaky raises RuntimeError on the "
        "first invoke (good's writes are kept as pending writes next to flaky's __error__ write); "
        "then the flag flips and invoke(None) resumes: only flaky re-runs, then after.",
        "graphs": {
            "main": {
                "spec": {
                    "state": LINEAR_SPEC["state"],
                    "nodes": [
                        {"node": "good", "writes": {"items": {"literal": ["good"]}, "count": {"expr": "state.count + 1"}}},
                        {
                            "node": "flaky",
                            "raises": "RuntimeError('flaky failed') while the module flag is set (first invoke)",
                            "writes": {"items": {"literal": ["flaky"]}},
                        },
                        {"node": "after", "writes": {"items": {"literal": ["after"]}, "count": {"expr": "state.count + 1"}}},
                    ],
                    "edges": [
                        ["__start__", "good"],
                        ["__start__", "flaky"],
                        ["good", "after"],
                        ["flaky", "after"],
                        ["after", "__end__"],
                    ],
                    "prose": "flaky sleeps 50 ms before raising so good's writes are committed first.",
                }
            }
        },
    }


@scenario
def subgraph(h: Harness) -> dict:
    class S(TypedDict):
        trace: Annotated[list, operator.add]
        count: int

    def mk(n):
        return lambda s: {"trace": [n], "count": s["count"] + 1}

    def s2_ask(s):
        ans = interrupt("sub approve?")
        return {"trace": [f"s2:{ans}"], "count": s["count"] + 1}

    def build(with_interrupt: bool) -> StateGraph:
        sb = StateGraph(S)
        sb.add_node("s1", counted("s1", mk("s1")))
        sb.add_node("s2", counted("s2", s2_ask if with_interrupt else mk("s2")))
        sb.add_edge(START, "s1")
        sb.add_edge("s1", "s2")
        sb.add_edge("s2", END)
        child = sb.compile()
        pb = StateGraph(S)
        pb.add_node("pre", counted("pre", mk("pre")))
        pb.add_node("sub", child)
        pb.add_node("post", counted("post", mk("post")))
        pb.add_edge(START, "pre")
        pb.add_edge("pre", "sub")
        pb.add_edge("sub", "post")
        pb.add_edge("post", END)
        return pb

    h.compile("plain", build(False))
    h.invoke("plain", "plain", {"trace": [], "count": 0})
    h.get_state("plain", {"configurable": {"thread_id": "plain"}}, subgraphs=True)

    h.compile("interrupted", build(True))
    cfg = {"configurable": {"thread_id": "interrupted"}}
    h.invoke("interrupted", "interrupted", {"trace": [], "count": 0})
    h.get_state("interrupted", cfg, subgraphs=True)
    h.invoke("interrupted", "interrupted", Command(resume="ok"), cfg)
    h.get_state("interrupted", cfg, subgraphs=True)
    sub_spec = {
        "state": {
            "trace": {"type": "list", "reducer": "operator.add"},
            "count": {"type": "int", "reducer": "last value"},
        },
        "nodes": [
            {"node": "s1", "writes": {"trace": {"literal": ["s1"]}, "count": {"expr": "state.count + 1"}}},
            {"node": "s2", "writes": {"trace": {"literal": ["s2"]}, "count": {"expr": "state.count + 1"}}},
        ],
        "edges": [["__start__", "s1"], ["s1", "s2"], ["s2", "__end__"]],
        "compiled": "sb.compile() with no checkpointer argument: it inherits the parent's "
        "and checkpoints in its own namespace 'sub:<task id>'",
    }
    parent_nodes = [
        {"node": "pre", "writes": {"trace": {"literal": ["pre"]}, "count": {"expr": "state.count + 1"}}},
        {"node": "sub", "subgraph": "child", "input": "the parent state", "writes": "the subgraph's final state (trace = whole list, so operator.add appends it again!)"},
        {"node": "post", "writes": {"trace": {"literal": ["post"]}, "count": {"expr": "state.count + 1"}}},
    ]
    parent_edges = [["__start__", "pre"], ["pre", "sub"], ["sub", "post"], ["post", "__end__"]]
    sub_int = dict(sub_spec)
    sub_int["nodes"] = [
        sub_spec["nodes"][0],
        {
            "node": "s2",
            "calls": "answer = interrupt('sub approve?')",
            "writes": {"trace": {"expr": "['s2:' + answer]"}, "count": {"expr": "state.count + 1"}},
        },
    ]
    return {
        "description": "Parent pre -> sub -> post where sub is a compiled StateGraph s1 -> s2 with "
        "the same state schema. Thread 'plain' runs through; thread 'interrupted' uses a child "
        "whose s2 calls interrupt('sub approve?'), is inspected with get_state(subgraphs=True), "
        "resumed with Command(resume='ok'), and inspected again.",
        "graphs": {
            "plain": {
                "spec": {
                    "state": sub_spec["state"],
                    "nodes": parent_nodes,
                    "edges": parent_edges,
                    "subgraphs": {"child": sub_spec},
                }
            },
            "interrupted": {
                "spec": {
                    "state": sub_spec["state"],
                    "nodes": parent_nodes,
                    "edges": parent_edges,
                    "subgraphs": {"child": sub_int},
                }
            },
        },
    }


@scenario
def messages_reducer(h: Harness) -> dict:
    class S(TypedDict):
        messages: Annotated[list, add_messages]

    def reply(s):
        return {"messages": [{"role": "assistant", "content": "hello", "id": "m2"}]}

    def edit(s):
        return {"messages": [{"role": "assistant", "content": "hello (edited)", "id": "m2"}]}

    def prune(s):
        if any(m.id == "m1" for m in s["messages"]):
            return {"messages": [RemoveMessage(id="m1")]}
        return {}

    b = StateGraph(S)
    b.add_node("reply", counted("reply", reply))
    b.add_node("edit", counted("edit", edit))
    b.add_node("prune", counted("prune", prune))
    b.add_edge(START, "reply")
    b.add_edge("reply", "edit")
    b.add_edge("edit", "prune")
    b.add_edge("prune", END)
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "messages"}}
    h.invoke("main", "messages", {"messages": [{"role": "user", "content": "hi", "id": "m1"}]})
    h.invoke("main", "messages", {"messages": [{"role": "user", "content": "again", "id": "m3"}]}, cfg)
    return {
        "description": "messages uses add_messages: reply appends AI message m2, edit replaces m2 "
        "by id, prune removes m1 with RemoveMessage (only while m1 exists). Invoked twice on "
        "the same thread: the second input adds user message m3, reply/edit rewrite m2 in "
        "place, prune writes nothing.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {"messages": {"type": "list[message]", "reducer": "add_messages"}},
                    "nodes": [
                        {"node": "reply", "writes": {"messages": {"literal": [{"role": "assistant", "content": "hello", "id": "m2"}]}}},
                        {"node": "edit", "writes": {"messages": {"literal": [{"role": "assistant", "content": "hello (edited)", "id": "m2"}]}}},
                        {
                            "node": "prune",
                            "writes": {"messages": {"literal": [{"__type__": "RemoveMessage", "id": "m1"}]}},
                            "only_if": "a message with id 'm1' is in state.messages; otherwise it returns {} (no state writes)",
                        },
                    ],
                    "edges": [["__start__", "reply"], ["reply", "edit"], ["edit", "prune"], ["prune", "__end__"]],
                    "prose": "Messages are written as dicts / RemoveMessage; add_messages turns dicts "
                    "into langchain_core messages (fixture values are their model_dump() dicts, "
                    "tagged __type__='message'). Same id replaces in place; RemoveMessage deletes.",
                }
            }
        },
    }


def add_ints(a: int, b: int) -> int:
    return a + b


@scenario
def custom_channels(h: Harness) -> dict:
    class S(TypedDict):
        total: Annotated[int, add_ints]
        scratch: Annotated[str, EphemeralValue(str)]
        log: Annotated[list, Topic(str, accumulate=True)]
        out: str

    def p(s):
        return {"total": 5, "scratch": "tmp-p", "log": "p"}

    def q(s):
        return {"total": 7, "log": ["q1", "q2"], "out": f"saw:{s.get('scratch')}"}

    def r(s):
        return {"out": f"{s['out']}|scratch:{s.get('scratch')}|total:{s['total']}"}

    b = StateGraph(S)
    b.add_node("p", counted("p", p))
    b.add_node("q", counted("q", q))
    b.add_node("r", counted("r", r))
    b.add_edge(START, "p")
    b.add_edge("p", "q")
    b.add_edge("q", "r")
    b.add_edge("r", END)
    h.compile("main", b)
    h.invoke("main", "channels", {"total": 1, "log": "in"})
    return {
        "description": "A user binary reducer (add_ints -> BinaryOperatorAggregate), an "
        "EphemeralValue channel (cleared the step after it is written) and an accumulating "
        "Topic channel.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {
                        "total": {"type": "int", "reducer": "user function add_ints(a, b) = a + b"},
                        "scratch": {"type": "str", "reducer": "EphemeralValue(str)"},
                        "log": {"type": "list[str]", "reducer": "Topic(str, accumulate=True)"},
                        "out": {"type": "str", "reducer": "last value"},
                    },
                    "nodes": [
                        {"node": "p", "writes": {"total": {"literal": 5}, "scratch": {"literal": "tmp-p"}, "log": {"literal": "p"}}},
                        {"node": "q", "writes": {"total": {"literal": 7}, "log": {"literal": ["q1", "q2"]}, "out": {"expr": "'saw:' + str(state.get('scratch'))"}}},
                        {"node": "r", "writes": {"out": {"expr": "state.out + '|scratch:' + str(state.get('scratch')) + '|total:' + str(state.total)"}}},
                    ],
                    "edges": [["__start__", "p"], ["p", "q"], ["q", "r"], ["r", "__end__"]],
                }
            }
        },
    }


@scenario
def command_goto(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]
        count: int

    def router(s):
        target = "left" if s["count"] % 2 == 0 else "right"
        return Command(update={"items": ["router"], "count": s["count"] + 1}, goto=target)

    def mk(n):
        return lambda s: {"items": [n]}

    b = StateGraph(S)
    b.add_node("router", counted("router", router), destinations=("left", "right"))
    b.add_node("left", counted("left", mk("left")))
    b.add_node("right", counted("right", mk("right")))
    b.add_edge(START, "router")
    b.add_edge("left", END)
    b.add_edge("right", END)
    h.compile("main", b)
    h.invoke("main", "goto", {"items": [], "count": 0})
    return {
        "description": "router returns Command(update=..., goto='left' if count is even else "
        "'right'); no static edge leaves router.",
        "graphs": {
            "main": {
                "spec": {
                    "state": LINEAR_SPEC["state"],
                    "nodes": [
                        {
                            "node": "router",
                            "returns": "Command(update={'items': ['router'], 'count': state.count + 1}, goto='left' if state.count % 2 == 0 else 'right')",
                            "destinations": ["left", "right"],
                        },
                        {"node": "left", "writes": {"items": {"literal": ["left"]}}},
                        {"node": "right", "writes": {"items": {"literal": ["right"]}}},
                    ],
                    "edges": [["__start__", "router"], ["left", "__end__"], ["right", "__end__"]],
                }
            }
        },
    }


@scenario
def durability_modes(h: Harness) -> dict:
    h.compile("main", _linear_builder())
    h.invoke("main", "exit", {"items": ["in"], "count": 0}, durability="exit")
    h.invoke("main", "async", {"items": ["in"], "count": 0}, durability="async")
    return {
        "description": "The linear graph run with durability='exit' (thread 'exit': only the "
        "last checkpoint is saved) and durability='async' (thread 'async': the same "
        "checkpoints as 'sync', saved in the background).",
        "graphs": {"main": {"spec": LINEAR_SPEC}},
    }


@scenario
def multi_interrupt(h: Harness) -> dict:
    class S(TypedDict):
        answers: Annotated[list, operator.add]
        count: int

    def ask(s):
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [first, second], "count": s["count"] + 1}

    def done(s):
        return {"answers": ["done"], "count": s["count"] + 1}

    b = StateGraph(S)
    b.add_node("ask", counted("ask", ask))
    b.add_node("done", counted("done", done))
    b.add_edge(START, "ask")
    b.add_edge("ask", "done")
    b.add_edge("done", END)
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "twice"}}
    h.invoke("main", "twice", {"answers": [], "count": 0})
    h.get_state("main", cfg, subgraphs=False)
    h.invoke("main", "twice", Command(resume="A"), cfg)
    h.get_state("main", cfg, subgraphs=False)
    h.invoke("main", "twice", Command(resume="B"), cfg)
    h.get_state("main", cfg, subgraphs=False)
    return {
        "description": "ask calls interrupt('first?') then interrupt('second?') in one run. "
        "invoke stops at the first; Command(resume='A') reruns ask, the first call returns 'A' "
        "and the second interrupts (its id hashes '<task ns>|1': one answer already given; "
        "the task's __resume__ write ['A'] is stored next to its __interrupt__); "
        "Command(resume='B') reruns ask with both answers, then done runs. get_state after "
        "each call.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {
                        "answers": {"type": "list", "reducer": "operator.add"},
                        "count": {"type": "int", "reducer": "last value"},
                    },
                    "nodes": [
                        {
                            "node": "ask",
                            "calls": "first = interrupt('first?'); second = interrupt('second?')",
                            "writes": {"answers": {"expr": "[first, second]"}, "count": {"expr": "state.count + 1"}},
                        },
                        {"node": "done", "writes": {"answers": {"literal": ["done"]}, "count": {"expr": "state.count + 1"}}},
                    ],
                    "edges": [["__start__", "ask"], ["ask", "done"], ["done", "__end__"]],
                }
            }
        },
    }


@scenario
def parallel_interrupt(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]
        answer: str

    def ask(s):
        time.sleep(0.05)  # let `work` finish first, so its writes are saved first
        ans = interrupt("approve?")
        return {"items": [f"ask:{ans}"], "answer": ans}

    def work(s):
        return {"items": ["work"]}

    def join(s):
        return {"items": [f"join:{len(s['items'])}"]}

    b = StateGraph(S)
    b.add_node("ask", counted("ask", ask))
    b.add_node("work", counted("work", work))
    b.add_node("join", counted("join", join))
    b.add_edge(START, "ask")
    b.add_edge(START, "work")
    b.add_edge("ask", "join")
    b.add_edge("work", "join")
    b.add_edge("join", END)
    h.compile("mixed", b)
    cfg = {"configurable": {"thread_id": "mixed"}}
    h.invoke("mixed", "mixed", {"items": []})
    h.get_state("mixed", cfg, subgraphs=False)
    h.invoke("mixed", "mixed", Command(resume="yes"), cfg)
    h.get_state("mixed", cfg, subgraphs=False)

    def asker(n):
        def f(s):
            ans = interrupt(f"{n}?")
            return {"items": [f"{n}:{ans}"]}

        return f

    b2 = StateGraph(S)
    b2.add_node("ask1", counted("ask1", asker("ask1")))
    b2.add_node("ask2", counted("ask2", asker("ask2")))
    b2.add_edge(START, "ask1")
    b2.add_edge(START, "ask2")
    b2.add_edge("ask1", END)
    b2.add_edge("ask2", END)
    h.compile("both", b2)
    cfg2 = {"configurable": {"thread_id": "both"}}
    h.invoke("both", "both", {"items": []})
    h.get_state("both", cfg2, subgraphs=False)
    return {
        "description": "Thread 'mixed': START -> ask and START -> work in one superstep, both -> "
        "join. ask calls interrupt('approve?'), work succeeds: work's writes stay pending next "
        "to ask's __interrupt__; Command(resume='yes') reruns only ask, then join. Thread "
        "'both': ask1 and ask2 both interrupt in one superstep (two pending interrupts; "
        "LangGraph refuses a bare Command(resume=...) then, so it is not resumed here).",
        "graphs": {
            "mixed": {
                "spec": {
                    "state": {
                        "items": {"type": "list", "reducer": "operator.add"},
                        "answer": {"type": "str", "reducer": "last value"},
                    },
                    "nodes": [
                        {
                            "node": "ask",
                            "calls": "answer = interrupt('approve?')",
                            "writes": {"items": {"expr": "['ask:' + answer]"}, "answer": {"expr": "answer"}},
                        },
                        {"node": "work", "writes": {"items": {"literal": ["work"]}}},
                        {"node": "join", "writes": {"items": {"expr": "['join:' + str(len(state.items))]"}}},
                    ],
                    "edges": [
                        ["__start__", "ask"],
                        ["__start__", "work"],
                        ["ask", "join"],
                        ["work", "join"],
                        ["join", "__end__"],
                    ],
                    "prose": "ask sleeps 50 ms before interrupting so work's writes are saved first.",
                }
            },
            "both": {
                "spec": {
                    "state": {
                        "items": {"type": "list", "reducer": "operator.add"},
                        "answer": {"type": "str", "reducer": "last value"},
                    },
                    "nodes": [
                        {
                            "node": n,
                            "calls": f"answer = interrupt('{n}?')",
                            "writes": {"items": {"expr": f"['{n}:' + answer]"}},
                        }
                        for n in ("ask1", "ask2")
                    ],
                    "edges": [["__start__", "ask1"], ["__start__", "ask2"], ["ask1", "__end__"], ["ask2", "__end__"]],
                }
            },
        },
    }


@scenario
def resume_by_id(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]

    def asker(n):
        def f(s):
            ans = interrupt(f"{n}?")
            return {"items": [f"{n}:{ans}"]}

        return f

    b = StateGraph(S)
    b.add_node("ask1", counted("ask1", asker("ask1")))
    b.add_node("ask2", counted("ask2", asker("ask2")))
    b.add_node("join", counted("join", lambda s: {"items": [f"join:{len(s['items'])}"]}))
    b.add_edge(START, "ask1")
    b.add_edge(START, "ask2")
    b.add_edge(["ask1", "ask2"], "join")
    b.add_edge("join", END)
    h.compile("main", b)

    def pending(thread: str) -> dict[str, str]:
        snap = h.graphs["main"].get_state({"configurable": {"thread_id": thread}})
        return {i.value: i.id for i in snap.interrupts}

    # One at a time: ask1's answer, then ask2's.
    cfg = {"configurable": {"thread_id": "one"}}
    h.invoke("main", "one", {"items": []})
    ids = pending("one")
    h.invoke("main", "one", Command(resume={ids["ask1?"]: "A"}), cfg)
    h.get_state("main", cfg, subgraphs=False)
    ids = pending("one")
    h.invoke("main", "one", Command(resume={ids["ask2?"]: "B"}), cfg)
    h.get_state("main", cfg, subgraphs=False)
    # Both in one map.
    cfg = {"configurable": {"thread_id": "both"}}
    h.invoke("main", "both", {"items": []})
    ids = pending("both")
    h.invoke("main", "both", Command(resume={ids["ask1?"]: "A", ids["ask2?"]: "B"}), cfg)
    h.get_state("main", cfg, subgraphs=False)
    return {
        "description": "ask1 and ask2 interrupt in one superstep, then join (a barrier). Thread "
        "'one': Command(resume={id(ask1): 'A'}) runs ask1 only (ask2 interrupts again), then "
        "Command(resume={id(ask2): 'B'}) runs ask2 and join. Thread 'both': one map answers both.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {
                            "node": n,
                            "calls": f"answer = interrupt('{n}?')",
                            "writes": {"items": {"expr": f"['{n}:' + answer]"}},
                        }
                        for n in ("ask1", "ask2")
                    ]
                    + [{"node": "join", "writes": {"items": {"expr": "['join:' + str(len(state.items))]"}}}],
                    "edges": [
                        ["__start__", "ask1"],
                        ["__start__", "ask2"],
                        [["ask1", "ask2"], "join"],
                        ["join", "__end__"],
                    ],
                }
            }
        },
    }


@scenario
def recursion_limit(h: Harness) -> dict:
    class S(TypedDict):
        count: int
        trace: Annotated[list, operator.add]

    def inc(s):
        return {"count": s["count"] + 1, "trace": [f"inc{s['count'] + 1}"]}

    b = StateGraph(S)
    b.add_node("inc", counted("inc", inc))
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", lambda s: "inc")
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "forever"}, "recursion_limit": 3}
    h.invoke("main", "forever", {"count": 0, "trace": []}, cfg)
    h.get_state("main", {"configurable": {"thread_id": "forever"}}, subgraphs=False)
    h.invoke("main", "forever", None, cfg)
    h.get_state("main", {"configurable": {"thread_id": "forever"}}, subgraphs=False)
    return {
        "description": "inc loops on itself forever (its conditional edge always returns 'inc'); "
        "invoked with recursion_limit=3: GraphRecursionError after the steps the limit allows. "
        "Then invoke(None) with the same limit resumes from the last checkpoint and hits the "
        "limit again. get_state after each.",
        "graphs": {
            "main": {
                "spec": {
                    "state": {
                        "count": {"type": "int", "reducer": "last value"},
                        "trace": {"type": "list", "reducer": "operator.add"},
                    },
                    "nodes": [
                        {
                            "node": "inc",
                            "writes": {
                                "count": {"expr": "state.count + 1"},
                                "trace": {"expr": "['inc' + str(state.count + 1)]"},
                            },
                        }
                    ],
                    "edges": [["__start__", "inc"]],
                    "conditional_edges": [{"source": "inc", "rule": "always 'inc'", "path_map": None}],
                    "recursion_limit": 3,
                }
            }
        },
    }


@scenario
def update_state_head(h: Harness) -> dict:
    class L(TypedDict):
        count: int
        trace: Annotated[list, operator.add]

    def inc(s):
        return {"count": s["count"] + 1, "trace": [f"inc{s['count'] + 1}"]}

    def route(s):
        return "inc" if s["count"] < 3 else END

    b = StateGraph(L)
    b.add_node("inc", counted("inc", inc))
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", route)
    h.compile("loop", b)
    cfg = {"configurable": {"thread_id": "route"}}
    h.invoke("loop", "route", {"count": 0, "trace": []})
    h.update_state("loop", h.head_config("route"), {"count": 1, "trace": ["manual"]}, as_node="inc")
    h.get_state("loop", cfg, subgraphs=False)
    h.invoke("loop", "route", None, cfg)

    class S(TypedDict):
        items: Annotated[list, operator.add]
        count: int
        answer: str

    def prep(s):
        return {"items": ["prep"], "count": s["count"] + 1}

    def ask(s):
        ans = interrupt("approve?")
        return {"items": ["ask"], "answer": ans}

    def finish(s):
        return {"items": [f"finish:{s['answer']}"], "count": s["count"] + 1}

    b2 = StateGraph(S)
    b2.add_node("prep", counted("prep", prep))
    b2.add_node("ask", counted("ask", ask))
    b2.add_node("finish", counted("finish", finish))
    b2.add_edge(START, "prep")
    b2.add_edge("prep", "ask")
    b2.add_edge("ask", "finish")
    b2.add_edge("finish", END)
    h.compile("approve", b2)
    cfg2 = {"configurable": {"thread_id": "skip"}}
    h.invoke("approve", "skip", {"items": [], "count": 0})
    h.update_state("approve", h.head_config("skip"), {"items": ["manual"], "answer": "manual"}, as_node="ask")
    h.get_state("approve", cfg2, subgraphs=False)
    h.invoke("approve", "skip", None, cfg2)
    return {
        "description": "update_state at the thread's head (addressed by id). Thread 'route': the "
        "conditional loop runs to count 3 (END); update_state({'count': 1, 'trace': ['manual']}, "
        "as_node='inc') at the head: inc's router runs on the updated state and goes back to "
        "inc; invoke(None) loops to 3 again. Thread 'skip': prep -> ask -> finish paused by "
        "ask's interrupt('approve?'); update_state({'items': ['manual'], 'answer': 'manual'}, "
        "as_node='ask') at the head answers in ask's place (ask is a next task of that "
        "checkpoint); invoke(None) runs finish.",
        "graphs": {
            "loop": {
                "spec": {
                    "state": {
                        "count": {"type": "int", "reducer": "last value"},
                        "trace": {"type": "list", "reducer": "operator.add"},
                    },
                    "nodes": [
                        {
                            "node": "inc",
                            "writes": {
                                "count": {"expr": "state.count + 1"},
                                "trace": {"expr": "['inc' + str(state.count + 1)]"},
                            },
                        }
                    ],
                    "edges": [["__start__", "inc"]],
                    "conditional_edges": [
                        {"source": "inc", "rule": "'inc' if state.count < 3 else END", "path_map": None}
                    ],
                }
            },
            "approve": {
                "spec": {
                    "state": _APPROVE_SPEC_STATE,
                    "nodes": [
                        {"node": "prep", "writes": {"items": {"literal": ["prep"]}, "count": {"expr": "state.count + 1"}}},
                        {
                            "node": "ask",
                            "calls": "answer = interrupt('approve?')",
                            "writes": {"items": {"literal": ["ask"]}, "answer": {"expr": "answer"}},
                        },
                        {
                            "node": "finish",
                            "writes": {
                                "items": {"expr": "['finish:' + state.answer]"},
                                "count": {"expr": "state.count + 1"},
                            },
                        },
                    ],
                    "edges": [["__start__", "prep"], ["prep", "ask"], ["ask", "finish"], ["finish", "__end__"]],
                }
            },
        },
    }


def concat(a: str, b: str) -> str:
    return a + b


_FLAKY_T2 = {"fail": True}


def _sends(flag: dict, sleeps: dict, raises: str, prose: str | None = None) -> tuple[StateGraph, dict]:
    """plan sends one worker per topic into a user binary reducer (string
    concatenation); the t2 worker raises ValueError while `flag["fail"]` is
    set; a worker sleeps `sleeps[topic]` seconds first. The builder and its
    spec (`raises`: the worker's error as the spec tells it)."""

    class S(TypedDict):
        topics: list
        log: Annotated[str, concat]
        joined: str

    def plan(s):
        return {"topics": ["t1", "t2", "t3"], "log": "|plan"}

    def fan_out(s):
        return [Send("worker", {"topic": t}) for t in s["topics"]]

    def worker(arg):
        if arg["topic"] in sleeps:
            time.sleep(sleeps[arg["topic"]])
        if arg["topic"] == "t2" and flag["fail"]:
            raise ValueError("t2 failed")
        return {"log": f"|{arg['topic']}"}

    def join(s):
        return {"joined": s["log"]}

    b = StateGraph(S)
    b.add_node("plan", counted("plan", plan))
    b.add_node("worker", counted("worker", worker))
    b.add_node("join", counted("join", join))
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan_out, ["worker"])
    b.add_edge("worker", "join")
    b.add_edge("join", END)
    spec = {
        "state": {
            "topics": {"type": "list", "reducer": "last value"},
            "log": {"type": "str", "reducer": "user function concat(a, b) = a + b (starts at '')"},
            "joined": {"type": "str", "reducer": "last value"},
        },
        "nodes": [
            {"node": "plan", "writes": {"topics": {"literal": ["t1", "t2", "t3"]}, "log": {"literal": "|plan"}}},
            {
                "node": "worker",
                "input": "the Send arg {'topic': t}, not the state",
                "raises": raises,
                "writes": {"log": {"expr": "'|' + arg.topic"}},
            },
            {"node": "join", "writes": {"joined": {"expr": "state.log"}}},
        ],
        "edges": [["__start__", "plan"], ["worker", "join"], ["join", "__end__"]],
        "conditional_edges": [
            {
                "source": "plan",
                "rule": "[Send('worker', {'topic': t}) for t in state.topics]",
                "path_map": ["worker"],
            }
        ],
    }
    if prose is not None:
        spec["prose"] = prose
    return b, spec


@scenario
def send_reducer_error(h: Harness) -> dict:
    _FLAKY_T2["fail"] = True
    # t2 sleeps so that t1 and t3 finish first and their writes are saved.
    b, spec = _sends(
        _FLAKY_T2,
        {"t2": 0.05},
        "ValueError('t2 failed') for topic t2 while the module flag is set (first invoke)",
    )
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "sends"}}
    h.invoke("main", "sends", {"log": "in"})
    h.get_state("main", cfg, subgraphs=False)
    _FLAKY_T2["fail"] = False
    h.invoke("main", "sends", None, cfg)
    return {
        "description": "plan writes topics and '|plan' to log (a user binary reducer, string "
        "concatenation: order matters) and sends one worker per topic. Each worker appends "
        "'|<topic>'; the t2 worker raises ValueError on the first invoke (t1's and t3's writes "
        "stay pending next to its __error__). invoke(None) reruns only the t2 push task; the "
        "reducer applies the three writes in task order; join copies log.",
        "graphs": {"main": {"spec": spec}},
    }


_FLAKY_TWICE = {"runs": 0}


def _ask_and_flaky(runs: dict) -> tuple[StateGraph, dict]:
    """ask and flaky in one superstep, both -> join: ask calls
    interrupt('approve?'), flaky raises on its first two runs (counted in
    `runs["runs"]`). The builder and its spec."""

    class S(TypedDict):
        items: Annotated[list, operator.add]

    def ask(s):
        ans = interrupt("approve?")
        return {"items": [f"ask:{ans}"]}

    def flaky(s):
        time.sleep(0.05)  # let `ask` finish first, so its writes are saved
        runs["runs"] += 1
        if runs["runs"] <= 2:
            raise ValueError(f"flaky failed ({runs['runs']})")
        return {"items": ["flaky"]}

    def join(s):
        return {"items": [f"join:{len(s['items'])}"]}

    b = StateGraph(S)
    b.add_node("ask", counted("ask", ask))
    b.add_node("flaky", counted("flaky", flaky))
    b.add_node("join", counted("join", join))
    b.add_edge(START, "ask")
    b.add_edge(START, "flaky")
    b.add_edge("ask", "join")
    b.add_edge("flaky", "join")
    b.add_edge("join", END)
    spec = {
        "state": {"items": {"type": "list", "reducer": "operator.add"}},
        "nodes": [
            {
                "node": "ask",
                "calls": "answer = interrupt('approve?')",
                "writes": {"items": {"expr": "['ask:' + answer]"}},
            },
            {
                "node": "flaky",
                "raises": "ValueError('flaky failed (<n>)') on its first two runs (n = 1, 2)",
                "writes": {"items": {"literal": ["flaky"]}},
            },
            {"node": "join", "writes": {"items": {"expr": "['join:' + str(len(state.items))]"}}},
        ],
        "edges": [
            ["__start__", "ask"],
            ["__start__", "flaky"],
            ["ask", "join"],
            ["flaky", "join"],
            ["join", "__end__"],
        ],
        "prose": "flaky sleeps 50 ms first so ask's writes are saved before its error.",
    }
    return b, spec


@scenario
def interrupt_then_error(h: Harness) -> dict:
    _FLAKY_TWICE["runs"] = 0
    b, spec = _ask_and_flaky(_FLAKY_TWICE)
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "mixed"}}
    h.invoke("main", "mixed", {"items": []})
    h.invoke("main", "mixed", Command(resume="yes"), cfg)
    h.get_state("main", cfg, subgraphs=False)
    h.invoke("main", "mixed", None, cfg)
    h.get_state("main", cfg, subgraphs=False)
    return {
        "description": "ask and flaky run in one superstep, both -> join. Invoke: ask calls "
        "interrupt('approve?'), flaky raises ValueError (the run fails with flaky's error; ask's "
        "__interrupt__ is stored). Command(resume='yes'): ask reruns and finishes, flaky fails "
        "again. ask now has an __interrupt__ write and its output: it finished, so get_state "
        "shows its output applied and only flaky next, and invoke(None) reruns only flaky, "
        "then join.",
        "graphs": {"main": {"spec": spec}},
    }


def _approve_builder() -> StateGraph:
    class S(TypedDict):
        items: Annotated[list, operator.add]
        count: int
        answer: str

    def prep(s):
        return {"items": ["prep"], "count": s["count"] + 1}

    def ask(s):
        ans = interrupt("approve?")
        return {"items": ["ask"], "answer": ans}

    def finish(s):
        return {"items": [f"finish:{s['answer']}"], "count": s["count"] + 1}

    b = StateGraph(S)
    b.add_node("prep", counted("prep", prep))
    b.add_node("ask", counted("ask", ask))
    b.add_node("finish", counted("finish", finish))
    b.add_edge(START, "prep")
    b.add_edge("prep", "ask")
    b.add_edge("ask", "finish")
    b.add_edge("finish", END)
    return b


_APPROVE_SPEC = {
    "state": _APPROVE_SPEC_STATE,
    "nodes": [
        {"node": "prep", "writes": {"items": {"literal": ["prep"]}, "count": {"expr": "state.count + 1"}}},
        {
            "node": "ask",
            "calls": "answer = interrupt('approve?')",
            "writes": {"items": {"literal": ["ask"]}, "answer": {"expr": "answer"}},
        },
        {
            "node": "finish",
            "writes": {"items": {"expr": "['finish:' + state.answer]"}, "count": {"expr": "state.count + 1"}},
        },
    ],
    "edges": [["__start__", "prep"], ["prep", "ask"], ["ask", "finish"], ["finish", "__end__"]],
}


@scenario
def update_state_infer(h: Harness) -> dict:
    h.compile("before_c", _linear_builder(), interrupt_before=["c"])
    cfg = {"configurable": {"thread_id": "infer"}}
    h.invoke("before_c", "infer", {"items": ["in"], "count": 0})
    h.update_state("before_c", cfg, {"count": 10}, as_node=None)
    h.get_state("before_c", cfg, subgraphs=False)
    h.invoke("before_c", "infer", None, cfg)

    h.compile("approve", _approve_builder())
    cfg2 = {"configurable": {"thread_id": "asked"}}
    h.invoke("approve", "asked", {"items": [], "count": 0})
    h.update_state("approve", cfg2, {"answer": "early"}, as_node=None)
    h.get_state("approve", cfg2, subgraphs=False)
    h.invoke("approve", "asked", None, cfg2)
    h.invoke("approve", "asked", Command(resume="yes"), cfg2)
    return {
        "description": "update_state without as_node: LangGraph infers the node whose "
        "versions_seen holds the newest version (the last node that finished). Thread 'infer': "
        "the linear graph with interrupt_before=['c'] pauses before c; "
        "update_state(thread config, {'count': 10}) is applied as b (b's edge writes "
        "branch:to:c again), get_state, invoke(None) runs c. Thread 'asked': prep -> ask -> "
        "finish paused by ask's interrupt('approve?'); update_state({'answer': 'early'}) is "
        "applied as prep (ask did not finish: it is not in versions_seen), so ask is next "
        "again under a new task id; invoke(None) runs ask, which interrupts again; "
        "Command(resume='yes') finishes.",
        "graphs": {
            "before_c": {"spec": {**LINEAR_SPEC, "interrupt_before": ["c"]}},
            "approve": {"spec": _APPROVE_SPEC},
        },
    }


@scenario
def update_state_ambiguous(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]

    def tag(n):
        return lambda s: {"items": [n]}

    b = StateGraph(S)
    b.add_node("x", counted("x", tag("x")))
    b.add_node("y", counted("y", tag("y")))
    b.add_edge(START, "x")
    b.add_edge(START, "y")
    b.add_edge("x", END)
    b.add_edge("y", END)
    h.compile("fan", b)
    cfg = {"configurable": {"thread_id": "fan"}}
    h.invoke("fan", "fan", {"items": []})
    h.update_state("fan", cfg, {"items": ["u1"]}, as_node=None)
    h.update_state("fan", cfg, {"items": ["u2"]}, as_node="y")
    h.update_state("fan", cfg, {"items": ["u3"]}, as_node=None)
    h.get_state("fan", cfg, subgraphs=False)

    b2 = StateGraph(S)
    b2.add_node("x", counted("x", tag("x")))
    b2.add_node("y", counted("y", tag("y")))
    b2.add_node("join", counted("join", tag("join")))
    b2.add_edge(START, "x")
    b2.add_edge(START, "y")
    b2.add_edge("x", "join")
    b2.add_edge("y", "join")
    b2.add_edge("join", END)
    h.compile("joined", b2)
    cfg2 = {"configurable": {"thread_id": "joined"}}
    h.invoke("joined", "joined", {"items": []})
    h.update_state("joined", cfg2, {"items": ["u"]}, as_node=None)
    h.get_state("joined", cfg2, subgraphs=False)
    return {
        "description": "update_state without as_node when the last superstep ran two nodes. "
        "Thread 'fan': START -> x, START -> y, both -> END; update_state({'items': ['u1']}) "
        "raises InvalidUpdateError('Ambiguous update, specify as_node') and stores nothing; "
        "with as_node='y' it is applied; without as_node again it is still ambiguous (an "
        "update does not change versions_seen). Thread 'joined': x and y both -> join -> END; "
        "the last node that ran is join, so update_state({'items': ['u']}) is applied as join.",
        "graphs": {
            "fan": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {"node": "x", "writes": {"items": {"literal": ["x"]}}},
                        {"node": "y", "writes": {"items": {"literal": ["y"]}}},
                    ],
                    "edges": [["__start__", "x"], ["__start__", "y"], ["x", "__end__"], ["y", "__end__"]],
                }
            },
            "joined": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {"node": "x", "writes": {"items": {"literal": ["x"]}}},
                        {"node": "y", "writes": {"items": {"literal": ["y"]}}},
                        {"node": "join", "writes": {"items": {"literal": ["join"]}}},
                    ],
                    "edges": [
                        ["__start__", "x"],
                        ["__start__", "y"],
                        ["x", "join"],
                        ["y", "join"],
                        ["join", "__end__"],
                    ],
                }
            },
        },
    }


@scenario
def update_state_empty_thread(h: Harness) -> dict:
    h.compile("main", _linear_builder())
    cfg = {"configurable": {"thread_id": "fresh"}}
    h.update_state("main", cfg, {"items": ["u"], "count": 5}, as_node=None)
    h.get_state("main", cfg, subgraphs=False)
    h.update_state("main", cfg, {"count": 6}, as_node=None)
    h.invoke("main", "fresh", None, cfg)
    h.get_state("main", cfg, subgraphs=False)

    cfg2 = {"configurable": {"thread_id": "fresh_as"}}
    h.update_state("main", cfg2, {"items": ["u"], "count": 5}, as_node="b")
    h.get_state("main", cfg2, subgraphs=False)
    h.invoke("main", "fresh_as", None, cfg2)
    return {
        "description": "update_state on threads with no checkpoint, then invoke(None). Thread "
        "'fresh': update_state({'items': ['u'], 'count': 5}) without as_node is applied as "
        "__start__ (nothing ran yet: the input node), in a first checkpoint (source 'update', "
        "step 0, no parent, nothing stored as pending writes); get_state shows a next; a second "
        "update_state({'count': 6}) is again applied as __start__ (updates leave versions_seen "
        "empty), at the head; invoke(None) runs a, b, c. Thread 'fresh_as': update_state(..., "
        "as_node='b') on an empty thread; invoke(None) runs c.",
        "graphs": {"main": {"spec": LINEAR_SPEC}},
    }


# ---------------------------------------------------------------------------
# Streaming: graph.stream(..., stream_mode=["updates", "values"])
# ---------------------------------------------------------------------------


@scenario
def stream_chain(h: Harness) -> dict:
    def a(s):
        return {"items": ["a"], "count": s["count"] + 1}

    def noop(s):
        return {}

    def inc(s):
        return {"items": [f"inc{s['count'] + 1}"], "count": s["count"] + 1}

    def route(s):
        return "inc" if s["count"] < 3 else END

    b = StateGraph(ListCount)
    b.add_node("a", counted("a", a))
    b.add_node("noop", counted("noop", noop))
    b.add_node("inc", counted("inc", inc))
    b.add_edge(START, "a")
    b.add_edge("a", "noop")
    b.add_edge("noop", "inc")
    b.add_conditional_edges("inc", route)
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "chain"}}
    h.stream("main", "chain", {"items": ["in"], "count": 0})
    h.stream("main", "chain", None, cfg)
    h.stream("main", "chain", {"items": ["again"]}, cfg)
    return {
        "description": "stream(stream_mode=['updates', 'values']) on START -> a -> noop -> inc, "
        "inc looping on itself while count < 3. The input superstep (__start__, hidden) "
        "gives only a values event; each node an updates event; noop writes no state key: "
        "its update is None and no values event follows its superstep. stream(None) on the "
        "finished thread gives one values event (the state) and nothing runs; new input "
        "starts again at a.",
        "graphs": {
            "main": {
                "spec": {
                    "state": LINEAR_SPEC["state"],
                    "nodes": [
                        {"node": "a", "writes": {"items": {"literal": ["a"]}, "count": {"expr": "state.count + 1"}}},
                        {"node": "noop", "writes": {}},
                        {
                            "node": "inc",
                            "writes": {
                                "items": {"expr": "['inc' + str(state.count + 1)]"},
                                "count": {"expr": "state.count + 1"},
                            },
                        },
                    ],
                    "edges": [["__start__", "a"], ["a", "noop"], ["noop", "inc"]],
                    "conditional_edges": [
                        {"source": "inc", "rule": "'inc' if state.count < 3 else END", "path_map": None}
                    ],
                }
            }
        },
    }


@scenario
def stream_interrupt(h: Harness) -> dict:
    class S(TypedDict):
        items: Annotated[list, operator.add]

    def ask(s):
        ans = interrupt("approve?")
        return {"items": [f"ask:{ans}"]}

    def work(s):
        time.sleep(0.05)  # finish after ask has interrupted (task order: ask, work)
        return {"items": ["work"]}

    def join(s):
        return {"items": [f"join:{len(s['items'])}"]}

    b = StateGraph(S)
    b.add_node("ask", counted("ask", ask))
    b.add_node("work", counted("work", work))
    b.add_node("join", counted("join", join))
    b.add_edge(START, "ask")
    b.add_edge(START, "work")
    b.add_edge("ask", "join")
    b.add_edge("work", "join")
    b.add_edge("join", END)
    h.compile("pause", b)
    cfg = {"configurable": {"thread_id": "pause"}}
    h.stream("pause", "pause", {"items": []})
    h.get_state("pause", cfg, subgraphs=False)
    h.stream("pause", "pause", Command(resume="yes"), cfg)

    def asker(n: str, delay: float):
        def f(s):
            time.sleep(delay)
            ans = interrupt(f"{n}?")
            return {"items": [f"{n}:{ans}"]}

        return f

    b2 = StateGraph(S)
    b2.add_node("p", counted("p", asker("p", 0)))
    b2.add_node("q", counted("q", asker("q", 0.05)))
    b2.add_edge(START, "p")
    b2.add_edge(START, "q")
    b2.add_edge("p", END)
    b2.add_edge("q", END)
    h.compile("two", b2)
    h.stream("two", "two", {"items": ["in"]})

    h.compile("breakpoints", _linear_builder(), interrupt_before=["b"], interrupt_after=["c"])
    cfg3 = {"configurable": {"thread_id": "breakpoints"}}
    h.stream("breakpoints", "breakpoints", {"items": [], "count": 0})
    h.stream("breakpoints", "breakpoints", None, cfg3)
    h.stream("breakpoints", "breakpoints", None, cfg3)
    return {
        "description": "Streams that pause. Thread 'pause': ask calls interrupt('approve?') while "
        "its sibling work finishes (after it): an updates event {'__interrupt__': (Interrupt,)} "
        "and a values event holding the state before the superstep plus '__interrupt__', then "
        "work's update, then a last values event with work's write applied (not stored). The "
        "resume streams the state first, work's stored update marked "
        "'__metadata__': {'cached': True}, then ask's update and the rest. Thread 'two': two "
        "tasks interrupt (p, then q): a pair of events for each. Thread 'breakpoints': a -> b -> c "
        "with interrupt_before=['b'], interrupt_after=['c']: each breakpoint ends the stream "
        "with {'__interrupt__': ()}; stream(None) first streams the state.",
        "graphs": {
            "pause": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {"node": "ask", "calls": "answer = interrupt('approve?')", "writes": {"items": {"expr": "['ask:' + answer]"}}},
                        {"node": "work", "writes": {"items": {"literal": ["work"]}}},
                        {"node": "join", "writes": {"items": {"expr": "['join:' + str(len(state.items))]"}}},
                    ],
                    "edges": [["__start__", "ask"], ["__start__", "work"], ["ask", "join"], ["work", "join"], ["join", "__end__"]],
                    "prose": "work sleeps 50 ms first, so it finishes after ask interrupted.",
                }
            },
            "two": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {"node": n, "calls": f"answer = interrupt('{n}?')", "writes": {"items": {"expr": f"['{n}:' + answer]"}}}
                        for n in ("p", "q")
                    ],
                    "edges": [["__start__", "p"], ["__start__", "q"], ["p", "__end__"], ["q", "__end__"]],
                    "prose": "q sleeps 50 ms before interrupting, so p interrupts first.",
                }
            },
            "breakpoints": {"spec": {**LINEAR_SPEC, "interrupt_before": ["b"], "interrupt_after": ["c"]}},
        },
    }


_FLAKY_STREAM = {"fail": True}


@scenario
def stream_send(h: Harness) -> dict:
    _FLAKY_STREAM["fail"] = True
    # t1 finishes first, t3 next, t2 last (in task order but for the failing t2).
    b, spec = _sends(
        _FLAKY_STREAM,
        {"t3": 0.03, "t2": 0.08},
        "ValueError('t2 failed') for topic t2 on the first stream",
        "t3 sleeps 30 ms, t2 80 ms, so they finish t1, t3, t2.",
    )
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "sends"}}
    h.stream("main", "sends", {"log": "in"})
    _FLAKY_STREAM["fail"] = False
    h.stream("main", "sends", None, cfg)
    return {
        "description": "plan sends one worker per topic into a user binary reducer (string "
        "concatenation); the t2 worker raises ValueError on the first stream, after t1 and t3 "
        "finished: their updates are streamed, then the error is raised (no values event for "
        "the failed superstep). stream(None) streams the state, t1's and t3's stored updates "
        "(marked cached, one event each), t2's update, the state, join.",
        "graphs": {"main": {"spec": spec}},
    }


_FLAKY_STREAM_TWICE = {"runs": 0}


@scenario
def stream_interrupt_error(h: Harness) -> dict:
    _FLAKY_STREAM_TWICE["runs"] = 0
    b, spec = _ask_and_flaky(_FLAKY_STREAM_TWICE)
    h.compile("main", b)
    cfg = {"configurable": {"thread_id": "mixed"}}
    h.stream("main", "mixed", {"items": []})
    h.stream("main", "mixed", Command(resume="yes"), cfg)
    h.stream("main", "mixed", None, cfg)
    return {
        "description": "interrupt_then_error, streamed. ask interrupts and flaky (finishing "
        "after it) raises: the interrupt's two events, then the error. Command(resume='yes'): "
        "the state, ask's update, then flaky's error again. stream(None): the state, ask's "
        "stored update (cached; it has an __interrupt__ write next to its output), flaky's "
        "update, the state, join.",
        "graphs": {"main": {"spec": spec}},
    }


class _TraceCount(TypedDict):
    trace: Annotated[list, operator.add]
    count: int


def _step(n):
    return lambda s: {"trace": [n], "count": s["count"] + 1}


def _sub_ask(s):
    ans = interrupt("sub approve?")
    return {"trace": [f"s2:{ans}"], "count": s["count"] + 1}


def _sub_child() -> Any:
    """s1 then s2, which asks for approval (subgraph_state, stream_subgraphs)."""
    sb = StateGraph(_TraceCount)
    sb.add_node("s1", counted("s1", _step("s1")))
    sb.add_node("s2", counted("s2", _sub_ask))
    sb.add_edge(START, "s1")
    sb.add_edge("s1", "s2")
    sb.add_edge("s2", END)
    return sb.compile()


def _sub_parent(sub_name: str, sub: Any) -> StateGraph:
    """pre, the subgraph `sub` as node `sub_name`, post."""
    pb = StateGraph(_TraceCount)
    pb.add_node("pre", counted("pre", _step("pre")))
    pb.add_node(sub_name, sub)
    pb.add_node("post", counted("post", _step("post")))
    pb.add_edge(START, "pre")
    pb.add_edge("pre", sub_name)
    pb.add_edge(sub_name, "post")
    pb.add_edge("post", END)
    return pb


@scenario
def subgraph_state(h: Harness) -> dict:
    S, mk, child, parent = _TraceCount, _step, _sub_child, _sub_parent

    # One level: inspect, edit the subgraph's state through the config
    # get_state(subgraphs=True) shows for it (checkpoint id and map), resume.
    h.compile("edit", parent("sub", child()))
    cfg = {"configurable": {"thread_id": "edit"}}
    h.invoke("edit", "edit", {"trace": [], "count": 0})
    h.get_state("edit", cfg, subgraphs=False)
    snap = h.get_state("edit", cfg, subgraphs=True)
    sub_cfg = snap.tasks[0].state.config
    h.get_state("edit", sub_cfg, subgraphs=False)
    h.update_state("edit", sub_cfg, {"trace": ["edited"]}, as_node=None)
    h.get_state("edit", cfg, subgraphs=True)
    h.invoke("edit", "edit", Command(resume="ok"), cfg)
    h.get_state("edit", cfg, subgraphs=True)
    # an older parent checkpoint: its sub task shows the namespace's latest
    h.get_state("edit", h.checkpoint_config("edit", lambda t: t.metadata["step"] == 1), subgraphs=True)

    # Update as the interrupted node itself: s2 counts as finished, the
    # resume has nothing left to answer.
    cfg = {"configurable": {"thread_id": "answer"}}
    h.thread_graph["answer"] = "edit"
    h.invoke("edit", "answer", {"trace": [], "count": 0})
    ns = h.graphs["edit"].get_state(cfg, subgraphs=False).tasks[0].state["configurable"]["checkpoint_ns"]
    h.update_state("edit", {"configurable": {"thread_id": "answer", "checkpoint_ns": ns}}, {"trace": ["manual"]}, as_node="s2")
    h.get_state("edit", cfg, subgraphs=True)
    h.invoke("edit", "answer", Command(resume="unused"), cfg)
    h.get_state("edit", cfg, subgraphs=True)

    # Paused before the subgraph starts: its task's state is empty.
    h.compile("before", parent("sub", child()), interrupt_before=["sub"])
    cfg = {"configurable": {"thread_id": "before"}}
    h.invoke("before", "before", {"trace": [], "count": 0})
    h.get_state("before", cfg, subgraphs=True)
    h.invoke("before", "before", None, cfg)
    h.get_state("before", cfg, subgraphs=True)

    # Two levels: pre -> mid -> post, mid = m1 -> inner (the asking child).
    mb = StateGraph(S)
    mb.add_node("m1", counted("m1", mk("m1")))
    mb.add_node("inner", child())
    mb.add_edge(START, "m1")
    mb.add_edge("m1", "inner")
    mb.add_edge("inner", END)
    h.compile("nested", parent("mid", mb.compile()))
    cfg = {"configurable": {"thread_id": "nested"}}
    h.invoke("nested", "nested", {"trace": [], "count": 0})
    snap = h.get_state("nested", cfg, subgraphs=True)
    inner_ns = snap.tasks[0].state.tasks[0].state.config["configurable"]["checkpoint_ns"]
    inner_cfg = {"configurable": {"thread_id": "nested", "checkpoint_ns": inner_ns}}
    h.get_state("nested", inner_cfg, subgraphs=True)
    h.update_state("nested", inner_cfg, {"trace": ["fixed"]}, as_node="s1")
    h.get_state("nested", cfg, subgraphs=True)
    h.invoke("nested", "nested", Command(resume="yes"), cfg)
    h.get_state("nested", cfg, subgraphs=True)

    state = {
        "trace": {"type": "list", "reducer": "operator.add"},
        "count": {"type": "int", "reducer": "last value"},
    }
    step = lambda n: {"node": n, "writes": {"trace": {"literal": [n]}, "count": {"expr": "state.count + 1"}}}  # noqa: E731
    child_spec = {
        "state": state,
        "nodes": [
            step("s1"),
            {
                "node": "s2",
                "calls": "answer = interrupt('sub approve?')",
                "writes": {"trace": {"expr": "['s2:' + answer]"}, "count": {"expr": "state.count + 1"}},
            },
        ],
        "edges": [["__start__", "s1"], ["s1", "s2"], ["s2", "__end__"]],
        "compiled": "compiled with no checkpointer argument: checkpoints in its own namespace",
    }
    sub_node = lambda n, g: {"node": n, "subgraph": g, "input": "the parent state", "writes": "the subgraph's final state (trace = whole list, so operator.add appends it again!)"}  # noqa: E731
    mid_spec = {
        "state": state,
        "nodes": [step("m1"), sub_node("inner", "child")],
        "edges": [["__start__", "m1"], ["m1", "inner"], ["inner", "__end__"]],
        "subgraphs": {"child": child_spec},
    }
    return {
        "description": "Subgraph state from the parent. Graph 'edit': pre -> sub -> post, sub = "
        "s1 -> s2 where s2 calls interrupt('sub approve?'). After the pause: get_state without "
        "and with subgraphs=True (the sub task's state: its namespace's config, or the subgraph's "
        "snapshot), get_state on the subgraph's config from that snapshot (with checkpoint_id "
        "and checkpoint_map), update_state on that config without as_node ({'trace': "
        "['edited']}, applied as s1), get_state(subgraphs=True), Command(resume='ok'), "
        "get_state(subgraphs=True). Graph 'nested': pre -> mid -> post, mid = m1 -> inner, "
        "inner = the same asking child: get_state(subgraphs=True) two levels deep, get_state "
        "and update_state(as_node='s1', {'trace': ['fixed']}) on the inner namespace (config "
        "with thread and namespace only), get_state(subgraphs=True), Command(resume='yes'), "
        "get_state(subgraphs=True); get_state(subgraphs=True) at the parent's step-1 checkpoint. "
        "Thread 'answer' (graph 'edit'): after the pause, update_state on the sub namespace as "
        "s2 ({'trace': ['manual']}), get_state(subgraphs=True), Command(resume='unused'), "
        "get_state(subgraphs=True). Graph 'before': 'edit' compiled with interrupt_before=['sub']: "
        "get_state(subgraphs=True) before the subgraph started (an empty snapshot), invoke(None) "
        "(pauses inside), get_state(subgraphs=True).",
        "graphs": {
            "edit": {
                "spec": {
                    "state": state,
                    "nodes": [step("pre"), sub_node("sub", "child"), step("post")],
                    "edges": [["__start__", "pre"], ["pre", "sub"], ["sub", "post"], ["post", "__end__"]],
                    "subgraphs": {"child": child_spec},
                }
            },
            "before": {
                "spec": {
                    "state": state,
                    "nodes": [step("pre"), sub_node("sub", "child"), step("post")],
                    "edges": [["__start__", "pre"], ["pre", "sub"], ["sub", "post"], ["post", "__end__"]],
                    "subgraphs": {"child": child_spec},
                    "interrupt_before": ["sub"],
                }
            },
            "nested": {
                "spec": {
                    "state": state,
                    "nodes": [step("pre"), sub_node("mid", "mid"), step("post")],
                    "edges": [["__start__", "pre"], ["pre", "mid"], ["mid", "post"], ["post", "__end__"]],
                    "subgraphs": {"mid": mid_spec},
                }
            },
        },
    }


@scenario
def stream_subgraphs(h: Harness) -> dict:
    S, mk, child, parent = _TraceCount, _step, _sub_child, _sub_parent

    h.compile("one", parent("sub", child()))
    cfg = {"configurable": {"thread_id": "one"}}
    h.stream("one", "one", {"trace": [], "count": 0}, subgraphs=True)
    h.stream("one", "one", Command(resume="ok"), cfg, subgraphs=True)
    # without subgraphs=True nothing comes from inside
    cfg = {"configurable": {"thread_id": "quiet"}}
    h.thread_graph["quiet"] = "one"
    h.stream("one", "quiet", {"trace": [], "count": 0})
    h.stream("one", "quiet", Command(resume="ok"), cfg)

    mb = StateGraph(S)
    mb.add_node("m1", counted("m1", mk("m1")))
    mb.add_node("inner", child())
    mb.add_edge(START, "m1")
    mb.add_edge("m1", "inner")
    mb.add_edge("inner", END)
    h.compile("nested", parent("mid", mb.compile()))
    cfg = {"configurable": {"thread_id": "nested"}}
    h.stream("nested", "nested", {"trace": [], "count": 0}, subgraphs=True)
    h.stream("nested", "nested", Command(resume="yes"), cfg, subgraphs=True)

    # Inside the subgraph, an interrupting task next to one that finishes.
    class I(TypedDict):
        items: Annotated[list, operator.add]

    def ask(s):
        ans = interrupt("approve?")
        return {"items": [f"ask:{ans}"]}

    def work(s):
        time.sleep(0.05)  # finish after ask has interrupted (task order: ask, work)
        return {"items": ["work"]}

    fb = StateGraph(I)
    fb.add_node("ask", counted("ask", ask))
    fb.add_node("work", counted("work", work))
    fb.add_node("join", counted("join", lambda s: {"items": [f"join:{len(s['items'])}"]}))
    fb.add_edge(START, "ask")
    fb.add_edge(START, "work")
    fb.add_edge("ask", "join")
    fb.add_edge("work", "join")
    fb.add_edge("join", END)
    ob = StateGraph(I)
    ob.add_node("pre", counted("pre", lambda s: {"items": ["pre"]}))
    ob.add_node("sub", fb.compile())
    ob.add_edge(START, "pre")
    ob.add_edge("pre", "sub")
    ob.add_edge("sub", END)
    h.compile("fan", ob)
    cfg = {"configurable": {"thread_id": "fan"}}
    h.stream("fan", "fan", {"items": []}, subgraphs=True)
    h.stream("fan", "fan", Command(resume="yes"), cfg, subgraphs=True)

    state = {
        "trace": {"type": "list", "reducer": "operator.add"},
        "count": {"type": "int", "reducer": "last value"},
    }
    step = lambda n: {"node": n, "writes": {"trace": {"literal": [n]}, "count": {"expr": "state.count + 1"}}}  # noqa: E731
    child_spec = {
        "state": state,
        "nodes": [
            step("s1"),
            {
                "node": "s2",
                "calls": "answer = interrupt('sub approve?')",
                "writes": {"trace": {"expr": "['s2:' + answer]"}, "count": {"expr": "state.count + 1"}},
            },
        ],
        "edges": [["__start__", "s1"], ["s1", "s2"], ["s2", "__end__"]],
    }
    sub_node = lambda n, g: {"node": n, "subgraph": g, "input": "the parent state", "writes": "the subgraph's final state"}  # noqa: E731
    mid_spec = {
        "state": state,
        "nodes": [step("m1"), sub_node("inner", "child")],
        "edges": [["__start__", "m1"], ["m1", "inner"], ["inner", "__end__"]],
        "subgraphs": {"child": child_spec},
    }
    return {
        "description": "stream(..., stream_mode=['updates', 'values'], subgraphs=True): events are "
        "[namespace, mode, chunk], the namespace a list of 'node:task id' segments ([] for the "
        "graph itself). Graph 'one': pre -> sub -> post, sub = s1 -> s2 where s2 calls "
        "interrupt('sub approve?'); the input, then Command(resume='ok'). Thread 'quiet': the "
        "same two calls without subgraphs=True. Graph 'nested': pre -> mid -> post, mid = m1 -> "
        "inner, inner = the asking child; the input, then Command(resume='yes'). Graph 'fan': "
        "pre -> sub, sub = START -> ask, START -> work, ask -> join, work -> join (ask calls "
        "interrupt('approve?'), work sleeps 50 ms so it finishes after ask interrupted); the "
        "input, then Command(resume='yes').",
        "graphs": {
            "fan": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}},
                    "nodes": [
                        {"node": "pre", "writes": {"items": {"literal": ["pre"]}}},
                        {"node": "sub", "subgraph": "fan", "input": "the parent state", "writes": "the subgraph's final state"},
                    ],
                    "edges": [["__start__", "pre"], ["pre", "sub"], ["sub", "__end__"]],
                    "subgraphs": {
                        "fan": {
                            "state": {"items": {"type": "list", "reducer": "operator.add"}},
                            "nodes": [
                                {"node": "ask", "calls": "answer = interrupt('approve?')", "writes": {"items": {"expr": "['ask:' + answer]"}}},
                                {"node": "work", "writes": {"items": {"literal": ["work"]}}},
                                {"node": "join", "writes": {"items": {"expr": "['join:' + str(len(state.items))]"}}},
                            ],
                            "edges": [["__start__", "ask"], ["__start__", "work"], ["ask", "join"], ["work", "join"], ["join", "__end__"]],
                        }
                    },
                }
            },
            "one": {
                "spec": {
                    "state": state,
                    "nodes": [step("pre"), sub_node("sub", "child"), step("post")],
                    "edges": [["__start__", "pre"], ["pre", "sub"], ["sub", "post"], ["post", "__end__"]],
                    "subgraphs": {"child": child_spec},
                }
            },
            "nested": {
                "spec": {
                    "state": state,
                    "nodes": [step("pre"), sub_node("mid", "mid"), step("post")],
                    "edges": [["__start__", "pre"], ["pre", "mid"], ["mid", "post"], ["post", "__end__"]],
                    "subgraphs": {"mid": mid_spec},
                }
            },
        },
    }


_RETRY_RUNS: Counter = Counter()


@scenario
def retry_policy(h: Harness) -> dict:
    """Node retry policies (RetryPolicy): retried inside the task, no
    checkpoint between attempts; only the last attempt's outcome is stored."""
    _RETRY_RUNS.clear()

    class S(TypedDict):
        items: Annotated[list, operator.add]

    def failing(name: str, times: int, exc: type):
        # raises on its first `times` runs (over the whole scenario), then writes
        def f(s):
            _RETRY_RUNS[name] += 1
            n = _RETRY_RUNS[name]
            if n <= times:
                raise exc(f"{name} failed ({n})")
            return {"items": [f"{name}:{n}"]}

        return f

    def after(s):
        return {"items": [f"after:{len(s['items'])}"]}

    def ask(s):
        _RETRY_RUNS["ask"] += 1
        ans = interrupt("approve?")
        return {"items": [f"ask:{ans}"]}

    fast = dict(initial_interval=0.001, backoff_factor=2.0, max_interval=0.004, jitter=False)

    def build(node: str, fn: Callable, policy: RetryPolicy) -> StateGraph:
        b = StateGraph(S)
        b.add_node(node, counted(node, fn), retry_policy=policy)
        b.add_node("after", counted("after", after))
        b.add_edge(START, node)
        b.add_edge(node, "after")
        b.add_edge("after", END)
        return b

    # fails twice (ConnectionError: retried by default), succeeds on attempt 3
    h.compile("twice", build("flaky", failing("flaky", 2, ConnectionError), RetryPolicy(max_attempts=3, **fast)))
    # fails three times under max_attempts=2: the run fails after 2 attempts;
    # invoke(None) starts over with a fresh count (fails once more, then succeeds)
    h.compile("exhaust", build("doomed", failing("doomed", 3, ConnectionError), RetryPolicy(max_attempts=2, **fast)))
    # ValueError: not retried by the default retry_on
    h.compile("no_retry", build("picky", failing("picky", 1, ValueError), RetryPolicy(max_attempts=3, **fast)))
    # retry_on=[KeyError]: a ConnectionError is not retried either
    h.compile(
        "only_key",
        build("narrow", failing("narrow", 1, ConnectionError), RetryPolicy(max_attempts=3, retry_on=[KeyError], **fast)),
    )
    # interrupt() in a retried node: not retried
    h.compile("ask", build("ask", ask, RetryPolicy(max_attempts=3, **fast)))

    h.invoke("twice", "twice", {"items": []})
    h.invoke("exhaust", "exhaust", {"items": []})
    h.get_state("exhaust", {"configurable": {"thread_id": "exhaust"}}, False)
    h.invoke("exhaust", "exhaust", None)
    h.invoke("no_retry", "no_retry", {"items": []})
    h.invoke("no_retry", "no_retry", None)
    h.invoke("only_key", "only_key", {"items": []})
    h.invoke("only_key", "only_key", None)
    h.invoke("ask", "ask", {"items": []})
    h.invoke("ask", "ask", Command(resume="yes"), {"configurable": {"thread_id": "ask"}})

    def spec(node: str, raises: str, writes: Any, policy: dict) -> dict:
        return {
            "spec": {
                "state": {"items": {"reducer": "operator.add"}},
                "nodes": [
                    {"node": node, "raises": raises, "writes": {"items": writes}, "retry_policy": policy},
                    {"node": "after", "writes": {"items": {"expr": "['after:' + str(len(state.items))]"}}},
                ],
                "edges": [["__start__", node], [node, "after"], ["after", "__end__"]],
            }
        }

    pol = {"initial_interval": 0.001, "backoff_factor": 2.0, "max_interval": 0.004, "jitter": False}
    return {
        "description": "Node retry policies. 'twice': flaky raises ConnectionError twice and succeeds on "
        "its third attempt under max_attempts=3 (one task, three executions, one set of writes, no "
        "__error__). 'exhaust': doomed raises ConnectionError on its first three runs under "
        "max_attempts=2: the invoke fails after two attempts (one __error__ write), get_state, then "
        "invoke(None) retries with a fresh attempt count (fails once, succeeds). 'no_retry': "
        "ValueError is not retried by the default retry_on (one execution), then invoke(None) "
        "succeeds. 'only_key': retry_on=[KeyError] does not retry a ConnectionError. 'ask': "
        "interrupt() in a node with a retry policy is not retried; then Command(resume='yes').",
        "graphs": {
            "twice": spec("flaky", "ConnectionError('flaky failed (<n>)') on its first 2 runs",
                          {"expr": "['flaky:' + str(n)]"}, {**pol, "max_attempts": 3}),
            "exhaust": spec("doomed", "ConnectionError('doomed failed (<n>)') on its first 3 runs",
                            {"expr": "['doomed:' + str(n)]"}, {**pol, "max_attempts": 2}),
            "no_retry": spec("picky", "ValueError('picky failed (<n>)') on its first run",
                             {"expr": "['picky:' + str(n)]"}, {**pol, "max_attempts": 3}),
            "only_key": spec("narrow", "ConnectionError('narrow failed (<n>)') on its first run",
                             {"expr": "['narrow:' + str(n)]"}, {**pol, "max_attempts": 3, "retry_on": ["KeyError"]}),
            "ask": spec("ask", "calls interrupt('approve?')", {"expr": "['ask:' + answer]"}, {**pol, "max_attempts": 3}),
        },
    }


@scenario
def retry_subgraph(h: Harness) -> dict:
    """A retry policy on a subgraph node: the retry resumes the subgraph
    (LangGraph passes it `resuming`); and a retried node inside a subgraph."""
    _RETRY_RUNS.clear()

    class S(TypedDict):
        trace: Annotated[list, operator.add]

    def step(name: str):
        return lambda s: {"trace": [name]}

    def failing(name: str, times: int):
        def f(s):
            _RETRY_RUNS[name] += 1
            n = _RETRY_RUNS[name]
            if n <= times:
                raise ConnectionError(f"{name} failed ({n})")
            return {"trace": [f"{name}:{n}"]}

        return f

    fast = dict(initial_interval=0.001, backoff_factor=2.0, max_interval=0.004, jitter=False)

    def child(flaky: str, inner_policy: RetryPolicy | None):
        sb = StateGraph(S)
        sb.add_node("s1", counted("s1", step("s1")))
        sb.add_node(flaky, counted(flaky, failing(flaky, 1)), retry_policy=inner_policy)
        sb.add_edge(START, "s1")
        sb.add_edge("s1", flaky)
        sb.add_edge(flaky, END)
        return sb.compile()

    def parent(sub, outer_policy: RetryPolicy | None) -> StateGraph:
        pb = StateGraph(S)
        pb.add_node("pre", counted("pre", step("pre")))
        pb.add_node("sub", sub, retry_policy=outer_policy)
        pb.add_node("post", counted("post", step("post")))
        pb.add_edge(START, "pre")
        pb.add_edge("pre", "sub")
        pb.add_edge("sub", "post")
        pb.add_edge("post", END)
        return pb

    # the policy on the subgraph node: s2 fails once, the subgraph is retried
    h.compile("outer", parent(child("s2", None), RetryPolicy(max_attempts=3, **fast)))
    # the policy on the node inside the subgraph
    h.compile("inner", parent(child("t2", RetryPolicy(max_attempts=3, **fast)), None))
    # the 'outer' graph again, streamed with subgraphs=True: the retry's
    # events come with namespace [sub:<task id>, "1"]
    h.compile("streamed", parent(child("u2", None), RetryPolicy(max_attempts=3, **fast)))
    h.invoke("outer", "outer", {"trace": []})
    h.invoke("inner", "inner", {"trace": []})
    h.stream("streamed", "streamed", {"trace": []}, subgraphs=True)

    pol = {"initial_interval": 0.001, "backoff_factor": 2.0, "max_interval": 0.004, "jitter": False, "max_attempts": 3}

    def spec(flaky: str, outer: bool) -> dict:
        fl = {"node": flaky, "raises": f"ConnectionError('{flaky} failed (<n>)') on its first run",
              "writes": {"trace": {"expr": f"['{flaky}:' + str(n)]"}}}
        if not outer:
            fl["retry_policy"] = pol
        sub = {"node": "sub", "subgraph": "sub"}
        if outer:
            sub["retry_policy"] = pol
        return {
            "spec": {
                "state": {"trace": {"reducer": "operator.add"}},
                "nodes": [{"node": "pre", "writes": {"trace": {"literal": ["pre"]}}}, sub,
                          {"node": "post", "writes": {"trace": {"literal": ["post"]}}}],
                "edges": [["__start__", "pre"], ["pre", "sub"], ["sub", "post"], ["post", "__end__"]],
                "subgraphs": {
                    "sub": {
                        "state": {"trace": {"reducer": "operator.add"}},
                        "nodes": [{"node": "s1", "writes": {"trace": {"literal": ["s1"]}}}, fl],
                        "edges": [["__start__", "s1"], ["s1", flaky], [flaky, "__end__"]],
                    }
                },
            }
        }

    return {
        "description": "Retry policies and subgraphs. 'outer': the parent's subgraph node 'sub' has "
        "RetryPolicy(max_attempts=3); inside it s2 raises ConnectionError on its first run: the "
        "attempt fails inside the subgraph (its checkpoint stores s2's __error__), the retry resumes "
        "the subgraph (only s2 reruns). 'inner': the policy is on t2 inside the subgraph: t2 is "
        "retried in its task, the subgraph sees one run. 'streamed': 'outer' (its flaky node "
        "named u2) streamed with subgraphs=True: the failed attempt's events under "
        "[sub:<task id>], the retry's under [sub:<task id>, '1'].",
        "graphs": {"outer": spec("s2", True), "inner": spec("t2", False), "streamed": spec("u2", True)},
    }


@scenario
def command_input(h: Harness) -> dict:
    """Command(update=.., goto=..) as input: written as the null task's
    pending writes on the head, applied before the next superstep."""

    class S(TypedDict):
        items: Annotated[list, operator.add]
        count: int

    b = StateGraph(S)
    b.add_node("a", counted("a", lambda s: {"items": ["a"]}))
    b.add_node("side", counted("side", lambda s: {"items": [f"side:{s.get('count')}"]}))
    b.add_node("worker", counted("worker", lambda s: {"items": [f"worker:{s.get('count')}"]}))
    b.add_edge(START, "a")
    b.add_edge("a", END)
    b.add_edge("side", END)
    b.add_edge("worker", END)
    h.compile("main", b)

    def ask(s):
        ans = interrupt("q?")
        return {"items": [f"ask:{ans}:{s.get('count')}"]}

    b2 = StateGraph(S)
    b2.add_node("ask", counted("ask", ask))
    b2.add_node("after", counted("after", lambda s: {"items": [f"after:{s.get('count')}"]}))
    b2.add_edge(START, "ask")
    b2.add_edge("ask", "after")
    b2.add_edge("after", END)
    h.compile("ask", b2)

    def cfg(t):
        return {"configurable": {"thread_id": t}}

    # update only, on a finished thread: no task runs, the writes stay pending
    h.invoke("main", "update", {"items": [], "count": 0})
    h.invoke("main", "update", Command(update={"items": ["u"], "count": 7}), cfg("update"))
    h.get_state("main", cfg("update"), subgraphs=False)
    h.invoke("main", "update", None, cfg("update"))
    # a second Command on the same head: the null task's writes are stored again, the new one last
    h.invoke("main", "update", Command(update={"items": ["v"]}), cfg("update"))
    h.get_state("main", cfg("update"), subgraphs=False)
    # goto only, to a node nothing else triggers
    h.invoke("main", "goto", {"items": [], "count": 0})
    h.invoke("main", "goto", Command(goto="side"), cfg("goto"))
    h.get_state("main", cfg("goto"), subgraphs=False)
    # update and goto (a list)
    h.invoke("main", "both", {"items": [], "count": 0})
    h.invoke("main", "both", Command(update={"count": 3}, goto=["side", "a"]), cfg("both"))
    h.get_state("main", cfg("both"), subgraphs=False)
    # goto with Sends, and an update
    h.invoke("main", "send", {"items": [], "count": 0})
    h.invoke(
        "main",
        "send",
        Command(update={"count": 1}, goto=[Send("worker", {"items": [], "count": 9}), Send("side", {"items": [], "count": 5})]),
        cfg("send"),
    )
    h.get_state("main", cfg("send"), subgraphs=False)
    # streamed: update and goto
    h.invoke("main", "streamed", {"items": [], "count": 0})
    h.stream("main", "streamed", Command(update={"count": 2}, goto="side"), cfg("streamed"))
    # resume and update on an interrupted thread
    h.invoke("ask", "resume", {"items": [], "count": 0})
    h.invoke("ask", "resume", Command(resume="yes", update={"count": 4}), cfg("resume"))
    h.get_state("ask", cfg("resume"), subgraphs=False)
    # resume, update and goto at once
    h.invoke("ask", "all", {"items": [], "count": 0})
    h.invoke("ask", "all", Command(resume="ok", update={"items": ["u"]}, goto="after"), cfg("all"))
    h.get_state("ask", cfg("all"), subgraphs=False)
    nodes = lambda names: [
        {"node": n, "writes": {"items": {"expr": f"['{n}:' + str(state.count)]"}}} for n in names
    ]
    return {
        "description": "Command input. Graph 'main': START -> a -> END; side and worker have no "
        "incoming edge (-> END). 'update': Command(update={items: ['u'], count: 7}) on a finished "
        "thread (no task runs; the null task's writes stay pending on the head, get_state applies "
        "them), then invoke(None) (they are applied again), then Command(update={items: ['v']}) "
        "(stored after the earlier null writes). 'streamed': Command(update={count: 2}, "
        "goto='side') streamed. 'goto': Command(goto='side'). 'both': "
        "Command(update={count: 3}, goto=['side', 'a']). 'send': Command(update={count: 1}, "
        "goto=[Send('worker', {count: 9}), Send('side', {count: 5})]). Graph 'ask': START -> ask "
        "(interrupt('q?')) -> after -> END. 'resume': Command(resume='yes', update={count: 4}). "
        "'all': Command(resume='ok', update={items: ['u']}, goto='after').",
        "graphs": {
            "main": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}, "count": {"type": "int"}},
                    "nodes": [{"node": "a", "writes": {"items": {"literal": ["a"]}}}] + nodes(["side", "worker"]),
                    "edges": [["__start__", "a"], ["a", "__end__"], ["side", "__end__"], ["worker", "__end__"]],
                }
            },
            "ask": {
                "spec": {
                    "state": {"items": {"type": "list", "reducer": "operator.add"}, "count": {"type": "int"}},
                    "nodes": [
                        {
                            "node": "ask",
                            "calls": "answer = interrupt('q?')",
                            "writes": {"items": {"expr": "['ask:' + answer + ':' + str(state.count)]"}},
                        }
                    ]
                    + nodes(["after"]),
                    "edges": [["__start__", "ask"], ["ask", "after"], ["after", "__end__"]],
                }
            },
        },
    }


from random_graphs import random_graphs  # noqa: E402 (tools/engine_goldens/random_graphs.py)

scenario(random_graphs)


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def run_scenario(name: str, saver_kind: str) -> dict:
    h = Harness(saver_kind)
    meta = SCENARIOS[name](h)
    raw = h.result()
    for key, g in h.graphs.items():
        meta["graphs"][key]["compiled"] = introspect(g)
        subs = {n: introspect(p.subgraphs[0]) for n, p in g.nodes.items() if p.subgraphs}
        # nested subgraphs under their node path, "mid|inner"
        stack = [(n, p.subgraphs[0]) for n, p in g.nodes.items() if p.subgraphs]
        while stack:
            path, sg = stack.pop()
            for n, p in sg.nodes.items():
                if p.subgraphs:
                    subs[f"{path}{NS_SEP}{n}"] = introspect(p.subgraphs[0])
                    stack.append((f"{path}{NS_SEP}{n}", p.subgraphs[0]))
        if subs:
            meta["graphs"][key]["compiled_subgraphs"] = subs
    meta["threads"] = dict(h.thread_graph)
    names = id_names(raw)
    norm = normalise({"calls": raw["calls"], "checkpoints": raw["checkpoints"]}, names)
    text = json.dumps(raw)
    raw["id_names"] = {k: v for k, v in names.items() if k in text}
    return {"meta": meta, "raw": raw, "normalized": norm}


def dumps(x: Any, indent: int = 0, width: int = 120, lead: int = 0) -> str:
    """JSON, one space of indent per level, containers on one line where they fit."""
    flat = json.dumps(x, ensure_ascii=False)
    if indent + lead + len(flat) <= width or not isinstance(x, (dict, list)) or not x:
        return flat
    pad = " " * (indent + 1)
    if isinstance(x, dict):
        items = []
        for k, v in x.items():
            key = json.dumps(k, ensure_ascii=False) + ": "
            items.append(pad + key + dumps(v, indent + 1, width, len(key)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1, width) for v in x]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def versions() -> dict:
    v = {
        p: importlib.metadata.version(p)
        for p in (
            "langgraph",
            "langgraph-checkpoint",
            "langgraph-checkpoint-sqlite",
            "langchain-core",
            "xxhash",
        )
    }
    v["python"] = sys.version.split()[0]
    return v


def saver_differences(memory: dict, sqlite: dict) -> list[dict]:
    """Where the InMemorySaver and SqliteSaver views differ; only a
    `__resume__` write's value may.

    A task that consumed several answers writes `__resume__` once per
    `interrupt()` call (the answers up to that call). Both savers keep one
    `__resume__` write per task (idx -4), but InMemorySaver keeps the last
    one put, SqliteSaver (INSERT OR IGNORE when a batch mixes special and
    regular writes) the first: the one the task stored when it was
    interrupted. The fixture keeps InMemorySaver's.
    """
    if memory == sqlite:
        return []
    a, b = memory["checkpoints"], sqlite["checkpoints"]
    assert memory["calls"] == sqlite["calls"] and len(a) == len(b), "savers differ beyond writes"
    out = []
    for ca, cb in zip(a, b):
        rest = lambda c: {k: v for k, v in c.items() if k != "pending_writes"}  # noqa: E731
        assert rest(ca) == rest(cb), f"savers differ at {ca['checkpoint_id']}"
        wa, wb = ca["pending_writes"], cb["pending_writes"]
        assert len(wa) == len(wb), f"savers differ at {ca['checkpoint_id']}"
        for x, y in zip(wa, wb):
            if x == y:
                continue
            same = {k: v for k, v in x.items() if k != "value"} == {k: v for k, v in y.items() if k != "value"}
            assert same and x["channel"] == "__resume__", f"savers differ: {x} {y}"
            out.append(
                {
                    "checkpoint_id": ca["checkpoint_id"],
                    "task_id": x["task_id"],
                    "channel": "__resume__",
                    "memory": x["value"],
                    "sqlite": y["value"],
                }
            )
    return out


def build_fixture(name: str) -> dict:
    first = run_scenario(name, "memory")
    second = run_scenario(name, "memory")
    third = run_scenario(name, "sqlite")
    if first["normalized"] != second["normalized"]:
        raise AssertionError(f"{name}: two InMemorySaver runs differ once normalised")
    saver_dependent = saver_differences(first["normalized"], third["normalized"])
    meta = first["meta"]
    return {
        "fixture_format": FIXTURE_FORMAT,
        "scenario": name,
        "generator": "tools/engine_goldens/generate.py",
        "versions": versions(),
        "description": meta.pop("description"),
        "threads": meta.pop("threads"),
        "graphs": meta.pop("graphs"),
        "checked": [
            "task and interrupt ids re-derived from the formula (every checkpoint)",
            "normalized view equal across two InMemorySaver runs",
            "normalized view equal between InMemorySaver and SqliteSaver(':memory:')"
            + (", but for the saver_dependent writes" if saver_dependent else ""),
        ],
        **({"saver_dependent": saver_dependent} if saver_dependent else {}),
        "raw": first["raw"],
        "normalized": first["normalized"],
    }


def main() -> int:
    # LangGraph keeps a graph's edges in a set, so the order of the writes a
    # node makes to several static out-edges (and so their `idx`) follows
    # str hash order. Pin the hash seed so that order is the same every run.
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare normalised views with committed fixtures; write nothing")
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--out", type=Path, default=FIXTURE_DIR)
    args = ap.parse_args()
    _assert_constants()
    names = args.only or list(SCENARIOS)
    failed = 0
    for name in names:
        fx = build_fixture(name)
        path = args.out / f"{name}.json"
        text = dumps(fx) + "\n"
        assert json.loads(text) == fx
        if args.check:
            old = json.loads(path.read_text())
            ok = old["normalized"] == fx["normalized"] and old["graphs"] == fx["graphs"]
            print(f"{name}: {'ok' if ok else 'DIFFERS'}")
            failed += not ok
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"{name}: {len(fx['raw']['checkpoints'])} checkpoints, {len(text)} bytes -> {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
