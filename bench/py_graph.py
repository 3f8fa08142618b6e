#!/usr/bin/env python3
"""LangGraph's graph benchmark (shared/peer-bench/bench_graph.py's graph: 3 nodes,
add_messages, N invokes on one thread, ~200-byte messages) with the agentstate
Python saver beside SqliteSaver, in one run, modes interleaved.

    python bench/py_graph.py [--invokes 200] [--repeats 3] [--json out.json]

Needs a Python with langgraph 1.2.22, langgraph-checkpoint-sqlite and the
`agentstate` package (bench/compare.sh sets one up). Prints one markdown
table: invokes/s per durability mode, the persistence overhead per invoke
(an invoke's time minus the same invoke without a checkpointer, the state
passed back in so it grows alike), and the file size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

from langgraph.checkpoint.sqlite import SqliteSaver

from agentstate import AgentStateSaver

PEER = os.environ.get("PEER_BENCH", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peer-bench"))
_spec = importlib.util.spec_from_file_location("bench_graph", os.path.join(PEER, "bench_graph.py"))
bench_graph = importlib.util.module_from_spec(_spec)
sys.modules["bench_graph"] = bench_graph  # its TypedDict hints resolve through sys.modules
_spec.loader.exec_module(bench_graph)

DURABILITY = {"": "async", "_sync": "sync", "_exit": "exit"}


def run(mode: str, invokes: int, msg_bytes: int, workdir: str) -> dict:
    graph = bench_graph.build(msg_bytes)
    conn = saver = None
    path = os.path.join(workdir, f"{mode}.db")
    if mode.startswith("sqlite"):
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        durability = DURABILITY[mode[len("sqlite"):]]
    elif mode.startswith("agentstate"):
        saver = AgentStateSaver(path)
        durability = DURABILITY[mode[len("agentstate"):]]
    else:
        durability = None
    app = graph.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "bench-thread"}}
    lat = []
    prev = None
    t0 = time.perf_counter()
    for i in range(invokes):
        user = {"role": "user", "content": bench_graph.text(i, msg_bytes)}
        if durability is None:
            inp = {"messages": [user]}
            if prev is not None:
                inp = {"messages": prev["messages"] + [user], "scratch": prev["scratch"], "counter": prev["counter"]}
            s = time.perf_counter()
            out = app.invoke(inp)
        else:
            s = time.perf_counter()
            out = app.invoke({"messages": [user]}, cfg, durability=durability)
        lat.append(time.perf_counter() - s)
        prev = out
    elapsed = time.perf_counter() - t0
    assert len(prev["messages"]) == 2 * invokes, (mode, len(prev["messages"]))
    r = {"invokes_per_s": invokes / elapsed, "ms_per_invoke": elapsed / invokes * 1e3,
         "ms_median": statistics.median(lat) * 1e3}
    if conn is not None:
        conn.close()
    if saver is not None:
        if isinstance(saver, AgentStateSaver):
            saver.close()
            del app, saver
        r["bytes"] = sum(os.path.getsize(os.path.join(workdir, f)) for f in os.listdir(workdir))
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--invokes", type=int, default=200)
    ap.add_argument("--msg-bytes", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="none_carry,sqlite,agentstate,sqlite_sync,agentstate_sync,sqlite_exit,agentstate_exit")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    modes = args.modes.split(",")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for rep in range(args.repeats):
        for m in modes:
            d = tempfile.mkdtemp(prefix="pygraph-")
            try:
                runs[m].append(run(m, args.invokes, args.msg_bytes, d))
            finally:
                shutil.rmtree(d)
        print(f"# repeat {rep + 1}/{args.repeats}", file=sys.stderr)
    med = {m: {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]} for m in modes}
    base = med.get("none_carry", {}).get("ms_per_invoke")
    print(f"\nLangGraph StateGraph (3 nodes, add_messages) x {args.invokes} invokes on one thread, "
          f"{args.msg_bytes}-byte messages, median of {args.repeats}")
    print("\n| durability | SqliteSaver invokes/s | agentstate invokes/s | ratio | SqliteSaver overhead ms/invoke "
          "| agentstate overhead ms/invoke | overhead ratio | SqliteSaver file | agentstate file | smaller |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for suffix, name in DURABILITY.items():
        py, ours = med.get("sqlite" + suffix), med.get("agentstate" + suffix)
        if not py or not ours:
            continue
        ov_py = py["ms_per_invoke"] - base if base else float("nan")
        ov_ours = ours["ms_per_invoke"] - base if base else float("nan")
        print(f"| {name} | {py['invokes_per_s']:.0f} | {ours['invokes_per_s']:.0f} | "
              f"{ours['invokes_per_s'] / py['invokes_per_s']:.1f}x | {ov_py:.2f} | {ov_ours:.2f} | "
              f"{ov_ours / ov_py:.2f} | {py['bytes'] / 1e6:.1f} MB | {ours['bytes'] / 1e6:.2f} MB | "
              f"{py['bytes'] / ours['bytes']:.0f}x |")
    if base:
        print(f"\nWithout a checkpointer (state passed back in): {base:.2f} ms/invoke.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
