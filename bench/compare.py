#!/usr/bin/env python3
"""Runs the Python reference benchmarks (shared/peer-bench) and agentstate's
same workloads (examples/bench_checkpointer.rs, examples/bench_store.rs)
alternately in one run, and prints one table: metric, Python median, Rust
median, ratio, target.

Called by bench/compare.sh, which sets up the pinned Python venv and builds
the Rust benchmarks. Peak RSS of every run is read with wait4().
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.environ.get("PEER_BENCH", os.path.join(ROOT, "..", "shared", "peer-bench"))


def run(cmd: list[str], out_json: str | None = None) -> tuple[dict, float, float]:
    """Runs cmd; returns (parsed JSON result, seconds, peak RSS MiB)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    # communicate() has reaped it; rusage of the child comes from the
    # children totals, so measure per run with a fresh wait4 instead:
    el = time.perf_counter() - t
    if p.returncode != 0:
        sys.stderr.write(err.decode(errors="replace"))
        raise SystemExit(f"failed: {' '.join(cmd)}")
    if out_json:
        with open(out_json) as f:
            data = json.load(f)["median"]
    else:
        lines = out.decode().strip().splitlines()
        data = json.loads(lines[-1]) if lines else {}
    return data, el, 0.0


def run_rss(cmd: list[str], out_json: str | None = None) -> tuple[dict, float, float]:
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        el = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.stderr.write(err.read().decode(errors="replace"))
            raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
        if out_json:
            with open(out_json) as f:
                data = json.load(f)["median"]
        else:
            data = json.loads(out.read().decode().strip().splitlines()[-1])
    return data, el, ru.ru_maxrss / 1024.0


# (metric, better, target ratio, note[, Python metric if it differs]). better:
# "lower" times/sizes, "higher" rates. A checkpointer target may depend on the
# table: {"NORMAL": x, "default": y} (Python's `--synchronous` value; default is
# FULL) and {"steps": n} (only the n-step run). They follow the targets as the
# issue and docs/design.md state them: the step >= 10x at Normal and >= 2x at
# Full (one fsync per step is the floor), round robin >= 5x at Normal, the
# file after the 1000-step workload.
CKPT = [
    ("single_steps_per_s", "higher", {"NORMAL": 10, "default": 2},
     "checkpoint step (step API; its 3 writes committed with the next step), 1 thread"),
    ("single_first100_ms", "lower", None, "per-step median, first 100 steps"),
    ("single_last100_ms", "lower", None, "per-step median, last 100 steps"),
    ("multi_steps_per_s", "higher", {"NORMAL": 5}, "100 threads x 50 steps, round-robin"),
    ("get_tuple_latest_us", "lower", 10, "get_tuple latest (long thread), warm: the writing process"),
    ("get_tuple_by_id_mid_us", "lower", 10, "get_tuple by id (middle), warm"),
    ("multi_get_tuple_latest_us", "lower", 10, "get_tuple latest, 50-step thread, warm"),
    # Cold on both sides: a fresh connection whose schema work is done, empty
    # caches (Python's from bench/py_cold.py).
    ("get_tuple_latest_cold_us", "lower", 3, "get_tuple latest, cold: a fresh Db / connection, empty caches"),
    ("get_tuple_by_id_mid_cold_us", "lower", 3, "get_tuple by id (middle), cold"),
    ("multi_get_tuple_latest_cold_us", "lower", 3, "get_tuple latest, 50-step thread, cold"),
    ("list_full_ms", "lower", 20, "list() full history, every message touched"),
    ("list_limit10_ms", "lower", 10, "list(limit=10)"),
    ("list_filter_ms", "lower", 20, "list(filter={source, step}) on the thread"),
    ("list_filter_allthreads_ms", "lower", None, "same filter, all threads"),
    ("single_db_bytes_after_close", "lower", {"steps": 1000, "ratio": 80}, "file size after the run"),
]
STORE = [
    ("put_batch_us_per_item_excl_embed", "lower", 5, "batch put of 100, per item, embedding excluded"),
    ("get_us@{s}", "lower", 5, "get, N={s}"),
    ("get_us@{l}", "lower", 5, "get, N={l}"),
    ("vsearch_ms@{s}", "lower", None, "vector search limit 10, N={s}"),
    ("vsearch_ms@{l}", "lower", 25, "vector search limit 10, N={l} x 384 dims"),
    ("vsearch_ms@{l}_search_memory_16777216", "lower", 3,
     "same search with a 16 MiB search memory budget (a partial copy in memory, the rest streamed from the file; exact)", "vsearch_ms@{l}"),
    ("vsearch_ms@{l}_plus_{l}_elsewhere", "rust", None, "vector search N={l} with {l} more items in other namespaces"),
    ("filter_search_ms@{s}", "lower", 3, "filter-only search, N={s}"),
    ("filter_search_ms@{l}", "lower", 3, "filter-only search, N={l}"),
    ("vsearch+filter_ms@{s}", "lower", None, "vector + filter search, N={s}"),
    ("vsearch+filter_ms@{l}", "lower", None, "vector + filter search, N={l}"),
    ("list_ns_all_ms", "lower", 3, "list_namespaces(prefix) over 1000 ns, repeated (the store's recent answer)"),
    ("list_ns_noprefix_ms", "lower", 3, "list_namespaces() no prefix, repeated"),
    ("list_ns_maxdepth2_ms", "lower", 3, "list_namespaces(max_depth=2), repeated"),
    ("list_ns_suffix_ms", "lower", 3, "list_namespaces(suffix), repeated"),
    ("list_ns_all_after_write_ms", "lower", 3,
     "list_namespaces(prefix), first call after a write (read from the file)", "list_ns_all_ms"),
    ("list_ns_noprefix_after_write_ms", "lower", 3, "list_namespaces() no prefix, after a write",
     "list_ns_noprefix_ms"),
    ("list_ns_maxdepth2_after_write_ms", "lower", 3, "list_namespaces(max_depth=2), after a write",
     "list_ns_maxdepth2_ms"),
    ("list_ns_suffix_after_write_ms", "lower", 3, "list_namespaces(suffix), after a write", "list_ns_suffix_ms"),
]


def fmt(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.1f} M"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def target_for(target, sync: str | None, steps: int | None):
    """A row's target ratio in one table (None: the row has none there)."""
    if not isinstance(target, dict):
        return target
    if "steps" in target:
        return target["ratio"] if steps == target["steps"] else None
    return target.get(sync)


def table(title: str, rows, py_runs, rs_runs, extra_rows=(), sync: str | None = None, steps: int | None = None):
    lines = [f"\n### {title}\n", "| metric | Python median | Rust median | ratio | target | met |",
             "|---|---:|---:|---:|---:|:-:|"]
    for row in rows:
        key, better, target, note = row[:4]
        target = target_for(target, sync, steps)
        pkey = row[4] if len(row) > 4 else key
        pv = [r[pkey] for r in py_runs if pkey in r]
        rv = [r[key] for r in rs_runs if key in r]
        if better == "rust" and rv:
            lines.append(f"| {note} (`{key}`) | - | {fmt(statistics.median(rv))} | | | |")
            continue
        if not pv or not rv:
            continue
        p, r = statistics.median(pv), statistics.median(rv)
        ratio = (p / r if better == "lower" else r / p) if p and r else float("nan")
        met = "" if target is None else ("yes" if ratio >= target else "**no**")
        tgt = "" if target is None else f">= {target}x"
        lines.append(f"| {note} (`{key}`) | {fmt(p)} | {fmt(r)} | {ratio:.1f}x | {tgt} | {met} |")
    lines.extend(extra_rows)
    return "\n".join(lines)


def long_runs(rs_ck: str, out: str) -> str:
    """Rust only: 10,000 steps (file size, flatness), and the history of a
    5,000-checkpoint thread whose list grows to 5,000 messages, read in fresh
    processes (peak RSS is the reader's)."""
    lines = ["\n### Long runs (Rust only)\n", "| metric | value | target | met |", "|---|---:|---:|:-:|"]
    d, _, rss = run_rss([rs_ck, "--steps", "10000", "--threads", "1", "--thread-steps", "1", "--writers", "1",
                         "--get-iters", "20", "--list-iters", "1"])
    mb = d["single_db_bytes_after_close"] / 1e6
    flat = d["single_last100_ms"] / d["single_first100_ms"]
    lines.append(f"| file after 10,000 steps (MB) | {mb:.1f} | <= 15 | {'yes' if mb <= 15 else '**no**'} |")
    lines.append(f"| step time, last 100 / first 100 of 10,000 | {flat:.2f} | <= 1.2 | {'yes' if flat <= 1.2 else '**no**'} |")
    lines.append(f"| steps/s over 10,000 steps | {d['single_steps_per_s']:.0f} | | |")
    path = os.path.join(out, "history5000.db")
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    run([rs_ck, "--build-history", "5000", path])
    for mode, what, limit_ms in (("iter", "every checkpoint with its values (`list_iter`), each message touched", None),
                                 ("meta", "without values (`Checkpointer::history`)", 100)):
        d, _, rss = run_rss([rs_ck, "--read-history", path, mode])
        assert d["checkpoints"] == 5000, d
        lines.append(f"| history of a 5,000-checkpoint thread, {what}: ms | {d['ms']:.0f} | "
                     f"{'<= ' + str(limit_ms) if limit_ms else ''} | "
                     f"{('yes' if d['ms'] <= limit_ms else '**no**') if limit_ms else ''} |")
        lines.append(f"| same, peak RSS of the reading process (MiB) | {rss:.0f} | <= 64 | "
                     f"{'yes' if rss <= 64 else '**no**'} |")
    return "\n".join(lines)


def graph_runs(python: str, rs_graph: str, out: str, work: str, reps: int) -> str:
    """bench_graph.py's graph (3 nodes, add_messages, 200 invokes on one
    thread) on LangGraph + SqliteSaver and on agentstate's engine, each
    durability mode against the same mode."""
    py_runs = []
    rs = {m: [] for m in ("sync", "async", "exit", "memory")}
    modes = "none_carry,sqlite,sqlite_sync,sqlite_exit"
    for rep in range(reps):
        path = os.path.join(out, f"py_graph_{rep}.json")
        d, _, _ = run([python, os.path.join(PEER, "bench_graph.py"), "--modes", modes, "--repeats", "1",
                       "--dir", work, "--json", path], path)
        py_runs.append(d)
        for m in rs:
            rs[m].append(run([rs_graph] + ([] if m == "sync" else [f"--{m}"]))[0])
        print(f"# graph repeat {rep + 1}/{reps}", file=sys.stderr)

    def med(runs, key, mode=None):
        return statistics.median([(r[mode] if mode else r)[key] for r in runs])

    lines = ["\n### Graph engine: bench_graph.py's graph, 200 invokes on one thread\n",
             "| metric | Python median | Rust median | ratio | target | met |", "|---|---:|---:|---:|---:|:-:|"]
    py_default = med(py_runs, "invokes_per_s", "sqlite")
    for py_mode, rs_mode, what in (("sqlite", "async", "durability=async (LangGraph's default)"),
                                   ("sqlite_sync", "sync", "durability=sync (the engine's default)"),
                                   ("sqlite_exit", "exit", "durability=exit")):
        p, r = med(py_runs, "invokes_per_s", py_mode), med(rs[rs_mode], "invokes_per_s")
        lines.append(f"| invokes/s, {what}, file at `Normal` | {fmt(p)} | {fmt(r)} | {r / p:.1f}x | | |")
    for rs_mode in ("sync", "async", "exit"):
        r = med(rs[rs_mode], "invokes_per_s")
        lines.append(f"| engine at `{rs_mode}` vs LangGraph at its default (async) | {fmt(py_default)} | {fmt(r)} | "
                     f"{r / py_default:.1f}x | >= 50x | {'yes' if r / py_default >= 50 else '**no**'} |")
    for rs_mode in ("sync", "async"):
        growth = med(rs[rs_mode], "ms_last20_median") / med(rs[rs_mode], "ms_first20_median")
        lines.append(f"| ms per invoke, last 20 / first 20 (`{rs_mode}`) | | {growth:.2f} | | | |")
    # Python's figure is its default durability (async) against no
    # checkpointer; ours, each mode against the engine on an in-memory Db
    # (it cannot run without a checkpointer).
    pov = med(py_runs, "ms_per_invoke_mean", "sqlite") / med(py_runs, "ms_per_invoke_mean", "none_carry")
    for rs_mode, what in (("async", "LangGraph's default, async"), ("sync", "sync")):
        rov = med(rs["memory"], "invokes_per_s") / med(rs[rs_mode], "invokes_per_s")
        lines.append(f"| persistence cost ({what}): time per invoke with a file / without (Python `none_carry` "
                     f"vs async; Rust: in-memory Db) | {pov:.1f}x | {rov:.1f}x | | <= 2x (Rust) | "
                     f"{'yes' if rov <= 2 else '**no**'} |")
    pb, rb = med(py_runs, "db_bytes_after_close", "sqlite_sync"), med(rs["sync"], "db_bytes_after_close")
    lines.append(f"| file after 200 invokes (bytes), sync | {fmt(pb)} | {fmt(rb)} | {pb / rb:.1f}x | | |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="the venv python with the pinned LangGraph packages")
    ap.add_argument("--rust-dir", default=os.path.join(ROOT, "target", "release", "examples"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", default="100,1000", help="checkpointer sizes")
    ap.add_argument("--n-small", type=int, default=10_000)
    ap.add_argument("--n-large", type=int, default=50_000)
    ap.add_argument("--store-reps", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "agentstate-compare"))
    ap.add_argument("--sections", default="checkpointer,store,graph",
                    help="which tables to run: checkpointer, store, graph")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    rs_ck = os.path.join(args.rust_dir, "bench_checkpointer")
    rs_st = os.path.join(args.rust_dir, "bench_store")
    rs_graph = os.path.join(args.rust_dir, "bench_graph")
    report = [f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python {args.python}; "
              f"{args.reps} alternating repeats per checkpointer row, {args.store_reps} per store row; "
              "medians of the repeats (each Python repeat is itself one --repeats 1 run)."]
    raw = {}
    if "checkpointer" in sections:
        for steps in [int(s) for s in args.steps.split(",")]:
            # Python's default is synchronous=FULL in WAL; NORMAL is our default.
            for sync, rs_flag in (("default", ["--full"]), ("NORMAL", [])):
                py_runs, rs_runs, py_rss, rs_rss = [], [], [], []
                variants: dict[str, list[dict]] = {}
                for rep in range(args.reps):
                    out = os.path.join(args.out, f"py_ckpt_{steps}_{sync}_{rep}.json")
                    d, _, rss = run_rss([args.python, os.path.join(PEER, "bench_checkpointer.py"), "--steps", str(steps),
                                         "--synchronous", sync, "--repeats", "1", "--dir", work, "--json", out], out)
                    py_rss.append(rss)
                    cold, _, _ = run([args.python, os.path.join(HERE, "py_cold.py"), "--steps", str(steps)])
                    d.update(cold)
                    py_runs.append(d)
                    d, _, rss = run_rss([rs_ck, "--steps", str(steps)] + rs_flag)
                    rs_runs.append(d)
                    rs_rss.append(rss)
                    # The same workload through LangGraph's put, and write-behind.
                    for variant, flags in (("put", ["--put"]), ("behind", ["--write-behind"])):
                        d, _, _ = run_rss([rs_ck, "--steps", str(steps), "--get-iters", "20", "--list-iters", "1"]
                                          + rs_flag + flags)
                        variants.setdefault(variant, []).append(d)
                    print(f"# checkpointer steps={steps} sync={sync} repeat {rep + 1}/{args.reps}", file=sys.stderr)
                raw[f"ckpt_{steps}_{sync}"] = {"python": py_runs, "rust": rs_runs, "py_rss": py_rss, "rs_rss": rs_rss}
                mode = "synchronous=FULL (Python's default) vs Durability::Full" if sync == "default" else \
                    "synchronous=NORMAL vs Durability::Normal (agentstate's default)"
                rss_row = (f"| peak RSS of the whole run (MiB) | {statistics.median(py_rss):.0f} | "
                           f"{statistics.median(rs_rss):.0f} | {statistics.median(py_rss) / statistics.median(rs_rss):.1f}x | | |")
                flat = [r["single_last100_ms"] / r["single_first100_ms"] for r in rs_runs]
                pflat = [r["single_last100_ms"] / r["single_first100_ms"] for r in py_runs]
                flat_row = (f"| step cost growth: last 100 / first 100 steps (`flatness`) | {statistics.median(pflat):.2f} | "
                            f"{statistics.median(flat):.2f} | | <= 1.5 (Rust) | "
                            f"{'yes' if statistics.median(flat) <= 1.5 else '**no**'} |")
                pst = statistics.median([r["single_steps_per_s"] for r in py_runs])
                extra = [flat_row, rss_row]
                for variant, label in (("put", "step through LangGraph's `put` (versions made by hand)"),
                                       ("behind", "step with write-behind (`DbBuilder::write_behind`, flushed at the end)")):
                    for key, what in (("single_steps_per_s", "1 thread"), ("multi_steps_per_s", "100 threads round-robin")):
                        v = statistics.median([r[key] for r in variants[variant]])
                        p = statistics.median([r[key] for r in py_runs])
                        extra.append(f"| {label}, {what} (`{key}`) | {fmt(p)} | {fmt(v)} | {v / p:.1f}x | | |")
                conc = statistics.median([r["concurrent_steps_per_s"] for r in rs_runs])
                n = rs_runs[0].get("concurrent_writers", 8)
                tgt = 5 if sync == "default" else None
                extra.append(f"| {n} writer threads on one Db (group commit at Full) vs Python's 1 thread "
                             f"(`concurrent_steps_per_s`) | {fmt(pst)} | {fmt(conc)} | {conc / pst:.1f}x | "
                             f"{'>= 5x' if tgt else ''} | {('yes' if conc / pst >= 5 else '**no**') if tgt else ''} |")
                raw[f"ckpt_{steps}_{sync}"]["variants"] = variants
                report.append(table(f"Checkpointer, {steps} steps, {mode}", CKPT, py_runs, rs_runs, extra,
                                    sync=sync, steps=steps))
        report.append(long_runs(rs_ck, args.out))
    if "store" in sections:
        py_runs, rs_runs, py_rss, rs_rss = [], [], [], []
        s, l = args.n_small, args.n_large
        for rep in range(args.store_reps):
            out = os.path.join(args.out, f"py_store_{rep}.json")
            d, _, rss = run_rss([args.python, os.path.join(PEER, "bench_store.py"), "--backend", "sqlite", "--repeats", "1",
                                 "--n-small", str(s), "--n-large", str(l), "--dir", work, "--json", out], out)
            py_runs.append(d)
            py_rss.append(rss)
            d, _, rss = run_rss([rs_st, "--n-small", str(s), "--n-large", str(l), "--full"])
            rs_runs.append(d)
            rs_rss.append(rss)
            print(f"# store repeat {rep + 1}/{args.store_reps}", file=sys.stderr)
        raw["store"] = {"python": py_runs, "rust": rs_runs, "py_rss": py_rss, "rs_rss": rs_rss}
        rows = [tuple(x.format(s=s, l=l) if isinstance(x, str) else x for x in row) for row in STORE]
        rss_ratio = statistics.median(rs_rss) / statistics.median(py_rss)
        rss_row = (f"| peak RSS of the whole run (MiB), Rust / Python | {statistics.median(py_rss):.0f} | "
                   f"{statistics.median(rs_rss):.0f} | {rss_ratio:.1f}x | <= 1.5x | "
                   f"{'yes' if rss_ratio <= 1.5 else '**no**'} |")
        report.append(table(f"Store, {s} and {l} items x 384 dims, synchronous=FULL on both sides", rows, py_runs,
                            rs_runs, [rss_row]))
    if "graph" in sections and os.path.exists(rs_graph):
        report.append(graph_runs(args.python, rs_graph, args.out, work, args.reps))
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump(raw, f, indent=1)
    print("\n".join(report))


if __name__ == "__main__":
    main()
