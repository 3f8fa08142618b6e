#!/usr/bin/env python3
"""Cold reads on Python's SqliteSaver, to set beside agentstate's cold rows.

shared/peer-bench/bench_checkpointer.py times get_tuple on the connection
that wrote the thread (warm: SQLite's page cache and statement cache are
full). agentstate's cold rows time get_tuple on a fresh `Db` (a new
connection that has only checked the schema, empty caches). This script
measures Python the same way: it writes the same workload with the peer
bench's own ThreadSim, closes the connection, then per read opens a new
connection, runs SqliteSaver.setup() (the schema work agentstate does in
Db::open) untimed, and times the first get_tuple.

    python bench/py_cold.py --steps 1000 [--threads 100 --thread-steps 50 --reads 30]

Prints one JSON object: get_tuple_latest_cold_us, get_tuple_by_id_mid_cold_us,
multi_get_tuple_latest_cold_us (medians).
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

PEER = os.environ.get("PEER_BENCH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                 "shared", "peer-bench"))
sys.path.insert(0, PEER)
from bench_checkpointer import ThreadSim, open_saver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402


def cold(path: str, cfg: dict, reads: int) -> float:
    ts = []
    for _ in range(reads):
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        s = time.perf_counter()
        tup = saver.get_tuple(cfg)
        ts.append(time.perf_counter() - s)
        assert tup is not None
        conn.close()
    return statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=100)
    ap.add_argument("--thread-steps", type=int, default=50)
    ap.add_argument("--msg-bytes", type=int, default=200)
    ap.add_argument("--msgs-per-step", type=int, default=1)
    ap.add_argument("--reads", type=int, default=30)
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="py-cold-") as d:
        path = os.path.join(d, "single.sqlite")
        conn, saver = open_saver(path, "NORMAL")
        sim = ThreadSim(saver, "thread-single", args)
        for _ in range(args.steps):
            sim.one_step()
        cfg = {"configurable": {"thread_id": "thread-single", "checkpoint_ns": ""}}
        mid = list(saver.list(cfg, filter={"step": args.steps // 2}))[0].config
        conn.close()
        out["get_tuple_latest_cold_us"] = cold(path, cfg, args.reads)
        out["get_tuple_by_id_mid_cold_us"] = cold(path, mid, args.reads)
        path = os.path.join(d, "multi.sqlite")
        conn, saver = open_saver(path, "NORMAL")
        sims = [ThreadSim(saver, f"thread-{i:04d}", args) for i in range(args.threads)]
        for _ in range(args.thread_steps):
            for s in sims:
                s.one_step()
        conn.close()
        cfg = {"configurable": {"thread_id": f"thread-{args.threads // 2:04d}", "checkpoint_ns": ""}}
        out["multi_get_tuple_latest_cold_us"] = cold(path, cfg, args.reads)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
