#!/usr/bin/env python3
"""Imports the file /work/shared/peer-bench/bench_graph.py's `sqlite` mode
leaves (its `build()` graph: 3 nodes, add_messages, 200-byte messages,
invoked --invokes times on one thread with SqliteSaver, durability async),
checks that LangGraph reads the same history from the imported file through
AgentStateSaver, continues the thread there, and prints the figures.

    cd python && maturin develop --release      # the agentstate package
    python bench/import_sqlite_saver.py [--invokes 200] [--dir /tmp/import-bench] [--json out.json]

`python/tests/test_import.py::test_bench_graph_file_of_200_invokes` runs it
when AGENTSTATE_IMPORT_BENCH=1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver

from agentstate import AgentStateSaver, import_sqlite_saver

BENCH_GRAPH = "/work/shared/peer-bench/bench_graph.py"
THREAD = {"configurable": {"thread_id": "bench-thread"}}


def load_bench_graph(path: str):
    spec = importlib.util.spec_from_file_location("bench_graph", path)
    module = importlib.util.module_from_spec(spec)
    # Registered first: its TypedDict's annotations are resolved by module name.
    sys.modules["bench_graph"] = module
    spec.loader.exec_module(module)
    return module


def make_source(bench, path: Path, invokes: int, msg_bytes: int) -> float:
    """bench_graph's `sqlite` mode: returns the seconds the invokes took."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    app = bench.build(msg_bytes).compile(checkpointer=saver)
    t0 = time.perf_counter()
    for i in range(invokes):
        app.invoke({"messages": [{"role": "user", "content": bench.text(i, msg_bytes)}]}, THREAD, durability="async")
    elapsed = time.perf_counter() - t0
    out = app.get_state(THREAD).values
    assert len(out["messages"]) == 2 * invokes
    conn.close()
    return elapsed


def _norm(x: Any) -> Any:
    if isinstance(x, BaseException):
        return ("exception", type(x).__name__, x.args)
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_norm(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_norm(v) for v in x)
    return x


def verify(bench, src: Path, dst: Path, msg_bytes: int) -> int:
    """Every checkpoint the same from both files (ids, parents, metadata,
    checkpoint, channel values, pending writes in agentstate's (task_id, idx)
    order), get_state_history and get_state equal. Returns the checkpoints."""
    reference = SqliteSaver(sqlite3.connect(f"file:{src}?mode=ro", uri=True, check_same_thread=False))
    ours = AgentStateSaver(str(dst))
    n = 0
    for w, g in zip(reference.list(THREAD), ours.list(THREAD), strict=True):
        cid = w.config["configurable"]["checkpoint_id"]
        assert g.config == w.config and g.parent_config == w.parent_config and g.metadata == w.metadata, cid
        for key in ("v", "id", "ts", "channel_versions", "versions_seen", "channel_values"):
            assert g.checkpoint[key] == w.checkpoint[key], (cid, key)
        assert g.checkpoint.get("updated_channels") == w.checkpoint.get("updated_channels"), cid
        assert _norm(g.pending_writes) == sorted(_norm(w.pending_writes), key=lambda x: x[0]), cid
        n += 1
    graph = bench.build(msg_bytes)
    a, b = graph.compile(checkpointer=reference), graph.compile(checkpointer=ours)
    assert [_norm(s) for s in b.get_state_history(THREAD)] == [_norm(s) for s in a.get_state_history(THREAD)]
    assert _norm(b.get_state(THREAD)) == _norm(a.get_state(THREAD))
    return n


def run(workdir: Path, invokes: int = 200, msg_bytes: int = 200, bench_graph: str = BENCH_GRAPH) -> dict:
    bench = load_bench_graph(bench_graph)
    workdir = Path(workdir)
    src, dst = workdir / "sqlite.sqlite", workdir / "agentstate.db"
    for p in (dst, Path(f"{dst}-wal"), Path(f"{dst}-shm")):
        if p.exists():
            p.unlink()
    figures: dict[str, Any] = {"invokes": invokes, "msg_bytes": msg_bytes}
    if not src.exists():
        figures["make_seconds"] = round(make_source(bench, src, invokes, msg_bytes), 2)
    t0 = time.perf_counter()
    report = import_sqlite_saver(str(src), str(dst))
    figures["import_seconds"] = round(time.perf_counter() - t0, 2)
    figures.update(report)
    t0 = time.perf_counter()
    figures["verified_checkpoints"] = verify(bench, src, dst, msg_bytes)
    figures["verify_seconds"] = round(time.perf_counter() - t0, 2)
    # The imported thread goes on.
    app = bench.build(msg_bytes).compile(checkpointer=AgentStateSaver(str(dst)))
    out = app.invoke({"messages": [{"role": "user", "content": "one more"}]}, THREAD)
    assert len(out["messages"]) == 2 * invokes + 2 and out["counter"] == invokes + 1
    figures["continued"] = True
    figures["ratio"] = round(report["source_bytes"] / report["destination_bytes"], 1)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--invokes", type=int, default=200)
    ap.add_argument("--msg-bytes", type=int, default=200)
    ap.add_argument("--bench-graph", default=BENCH_GRAPH)
    ap.add_argument("--dir", default=None, help="work directory (kept); default a temporary one")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        figures = run(Path(args.dir), args.invokes, args.msg_bytes, args.bench_graph)
    else:
        with tempfile.TemporaryDirectory(prefix="import-bench-") as d:
            figures = run(Path(d), args.invokes, args.msg_bytes, args.bench_graph)
    for k, v in figures.items():
        print(f"{k:24s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
