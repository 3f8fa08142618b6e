"""The `random_graphs` scenario: small random StateGraphs from a fixed seed.

Each graph is a declarative JSON spec (see SEMANTICS below) that this module
interprets to build a LangGraph StateGraph, and `tests/engine_random.rs`
interprets to build the same graph on our engine: combinations of fan-out,
joins, conditional edges (node lists, END, Sends), loops, breakpoints,
recursion limits and repeated input nobody wrote by hand.

`random_graphs(h)` is registered in generate.py like the other scenarios.
`RANDOM_GRAPHS_SEED` / `RANDOM_GRAPHS_N` (environment) override the seed and
the number of graphs, and `RANDOM_GRAPHS_SPECS=<file>` runs the specs of a
JSON list instead (to shrink a failing graph by hand), to explore with
`--out <dir>` (the committed fixture uses the defaults).
"""

from __future__ import annotations

import json
import operator
import os
import random
import sys
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

SEED = 20261204
N_GRAPHS = 12
MOD = 7

SEMANTICS = {
    "state": "ordered [key, type] pairs; 'int': a LastValue channel holding an int; "
    "'list': a list of strings with reducer operator.add",
    "value": "value(e) = (sum(term(t) for t in e.terms) + e.add) % 7, where term({'int': k}) = "
    "state.get(k, 0), term({'len': k}) = len(state.get(k, [])), term({'arg': true}) = "
    "state.get('arg', 0) (the Send argument; 0 when the node runs from an edge, as the Send "
    "argument {'arg': v} has no state keys and an edge-triggered run has no 'arg')",
    "nodes": "node n returns {w.key: value(w) if key is int else [f'{n}:{value(w)}'] "
    "for w in n.writes} (an empty dict when writes is empty)",
    "edges": "add_edge(a, b) for each [a, b]",
    "joins": "add_edge([a, b, ...], c) for each [[a, b, ...], c] (a NamedBarrierValue)",
    "routers": "add_conditional_edges(source, router) with no path map, in this order; the "
    "router (function name r.name) reads the state with the source's writes applied and "
    "returns END if r.stop and len(state.get(r.stop.len, [])) >= r.stop.at_least, else the "
    "list choices[state.get(r.on, 0) % len(choices)], each item a node name, '__end__', or "
    "{'send': node, 'arg': e} meaning Send(node, {'arg': value(e)})",
    "compile": "interrupt_before / interrupt_after lists given to compile(); recursion_limit "
    "(when not null) in the config of every call",
    "calls": "on thread t<i>, in order: {'invoke': input} is invoke(input); "
    "{'resume_until_done': n} is up to n invoke(None) calls, each made only while the "
    "thread's get_state().next is not empty and the previous call raised no error",
}


# ---------------------------------------------------------------------------
# Spec generation
# ---------------------------------------------------------------------------


def _expr(rng: random.Random, ints: list[str], lists: list[str], arg: bool) -> dict:
    pool = [{"int": k} for k in ints] + [{"len": k} for k in lists]
    if arg:
        pool += [{"arg": True}] * 2
    terms = rng.sample(pool, k=min(len(pool), rng.randint(0, 2)))
    if arg and {"arg": True} not in terms and rng.random() < 0.7:
        terms.append({"arg": True})
    return {"terms": terms, "add": rng.randrange(MOD)}


def gen_spec(rng: random.Random, index: int) -> dict:
    ints = [f"i{j}" for j in range(rng.randint(1, 2))]
    lists = [f"l{j}" for j in range(rng.randint(1, 2))]
    state = [[k, "int"] for k in ints] + [[k, "list"] for k in lists]
    rng.shuffle(state)
    names = [f"n{j}" for j in range(rng.randint(2, 6))]
    n = len(names)

    # routers first: a router's source must append to its stop list
    routers: list[dict] = []
    must_write: dict[str, set[str]] = {x: set() for x in names}
    send_targets: set[str] = set()
    sources = [START] if rng.random() < 0.15 else []
    sources += [x for x in names if rng.random() < 0.4]
    if any(s != START for s in sources) and rng.random() < 0.15:
        sources.append(rng.choice([s for s in sources if s != START]))  # a second router
    for r, src in enumerate(sources):
        choices = []
        for _ in range(rng.randint(2, 3)):
            items: list[Any] = []
            for _ in range(rng.choice([0, 1, 1, 1, 2, 2])):
                p = rng.random()
                if p < 0.55:
                    items.append(rng.choice(names))
                elif p < 0.75:
                    items.append(END)
                else:
                    t = rng.choice(names)
                    send_targets.add(t)
                    items.append({"send": t, "arg": _expr(rng, ints, lists, False)})
            choices.append(items)
        stop = None
        if src != START:
            key = rng.choice(lists)
            must_write[src].add(key)
            stop = {"len": key, "at_least": rng.randint(2, 5)}
        routers.append({"source": src, "name": f"route_{r}", "stop": stop, "on": rng.choice(ints), "choices": choices})

    # static edges only go forward (n_i -> n_j, j > i): every loop goes
    # through a router, whose stop list grows each time around
    edges: list[list[str]] = []
    if not any(r["source"] == START for r in routers) or rng.random() < 0.5:
        for t in rng.sample(names, k=rng.choice([1, 1, 2])):
            edges.append([START, t])
    for i, a in enumerate(names):
        later = names[i + 1 :] + [END]
        for t in rng.sample(later, k=min(len(later), rng.choice([0, 1, 1, 2]))):
            edges.append([a, t])
    joins: list[list] = []
    in_join: set[str] = set()
    if n >= 3 and rng.random() < 0.4:
        c = rng.randrange(2, n)
        srcs = rng.sample(names[:c], k=rng.randint(2, min(3, c)))
        joins.append([srcs, names[c]])
        in_join.update(srcs)

    nodes = []
    for x in names:
        writes = []
        silent = not must_write[x] and rng.random() < 0.12
        for key, typ in state:
            p = 0.15 if (typ == "int" and x in send_targets) else 0.45
            if key in must_write[x] or (not silent and rng.random() < p):
                writes.append({"key": key, **_expr(rng, ints, lists, x in send_targets)})
        nodes.append({"name": x, "writes": writes})

    def inp() -> dict:
        keys = rng.sample([k for k, _ in state], k=rng.randint(1, len(state)))
        types = dict(state)
        return {k: rng.randrange(MOD) if types[k] == "int" else [f"in:{rng.randrange(MOD)}"] for k in keys}

    interrupt_before = [rng.choice(names)] if rng.random() < 0.25 else []
    interrupt_after = [rng.choice(names)] if rng.random() < 0.2 else []
    breakpoints = bool(interrupt_before or interrupt_after)
    calls: list[dict] = [{"invoke": inp()}]
    if breakpoints and rng.random() < 0.9:
        calls.append({"resume_until_done": 3})
    if rng.random() < 0.4:
        calls.append({"invoke": inp()})
        if breakpoints:
            calls.append({"resume_until_done": 3})
    return {
        "index": index,
        "state": state,
        "nodes": nodes,
        "edges": edges,
        "joins": joins,
        "routers": routers,
        "interrupt_before": interrupt_before,
        "interrupt_after": interrupt_after,
        "recursion_limit": rng.randint(2, 6) if rng.random() < 0.25 else None,
        "calls": calls,
    }


def gen_specs(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    return [gen_spec(rng, i) for i in range(n)]


# ---------------------------------------------------------------------------
# Spec interpretation (LangGraph side)
# ---------------------------------------------------------------------------


def value(state: dict, e: dict) -> int:
    total = e["add"]
    for t in e["terms"]:
        if "int" in t:
            total += state.get(t["int"], 0)
        elif "len" in t:
            total += len(state.get(t["len"], []))
        else:
            total += state.get("arg", 0)
    return total % MOD


def _node_fn(name: str, writes: list[dict], types: dict[str, str]):
    def fn(state):
        return {
            w["key"]: value(state, w) if types[w["key"]] == "int" else [f"{name}:{value(state, w)}"]
            for w in writes
        }

    return fn


def _router(r: dict):
    def route(state):
        stop = r["stop"]
        if stop and len(state.get(stop["len"], [])) >= stop["at_least"]:
            return END
        out = []
        for item in r["choices"][state.get(r["on"], 0) % len(r["choices"])]:
            if isinstance(item, dict):
                out.append(Send(item["send"], {"arg": value(state, item["arg"])}))
            else:
                out.append(item)
        return out

    route.__name__ = r["name"]
    return route


def build(spec: dict, counted) -> StateGraph:
    types = dict(spec["state"])
    fields = {k: int if t == "int" else Annotated[list, operator.add] for k, t in spec["state"]}
    S = TypedDict(f"S{spec['index']}", fields)  # type: ignore[misc]
    b = StateGraph(S)
    for node in spec["nodes"]:
        b.add_node(node["name"], counted(node["name"], _node_fn(node["name"], node["writes"], types)))
    for a, c in spec["edges"]:
        b.add_edge(a, c)
    for srcs, c in spec["joins"]:
        b.add_edge(list(srcs), c)
    for r in spec["routers"]:
        b.add_conditional_edges(r["source"], _router(r))
    return b


def random_graphs(h) -> dict:
    # counted() of the module that defined the Harness (generate.py runs as
    # __main__): its execution counter is the one the Harness reads
    counted = sys.modules[type(h).__module__].counted
    seed = int(os.environ.get("RANDOM_GRAPHS_SEED", SEED))
    n = int(os.environ.get("RANDOM_GRAPHS_N", N_GRAPHS))
    specs = gen_specs(seed, n)
    if os.environ.get("RANDOM_GRAPHS_SPECS"):
        with open(os.environ["RANDOM_GRAPHS_SPECS"]) as f:
            specs = json.load(f)
        n = len(specs)
    graphs = {}
    for spec in specs:
        i = spec["index"]
        key, thread = f"g{i}", f"t{i}"
        h.compile(
            key,
            build(spec, counted),
            interrupt_before=spec["interrupt_before"] or None,
            interrupt_after=spec["interrupt_after"] or None,
        )
        config: dict = {"configurable": {"thread_id": thread}}
        if spec["recursion_limit"] is not None:
            config["recursion_limit"] = spec["recursion_limit"]
        for call in spec["calls"]:
            if "invoke" in call:
                h.invoke(key, thread, call["invoke"], config)
                continue
            for _ in range(call["resume_until_done"]):
                if "error" in h.calls[-1] or not h.graphs[key].get_state(config).next:
                    break
                h.invoke(key, thread, None, config)
        graphs[key] = {"spec": spec}
    return {
        "description": f"{n} random graphs from random.Random({seed}) (tools/engine_goldens/random_graphs.py), "
        "graph g<i> run on thread t<i>. Each spec is JSON; its meaning: "
        + "; ".join(f"{k}: {v}" for k, v in SEMANTICS.items()),
        "graphs": graphs,
    }
