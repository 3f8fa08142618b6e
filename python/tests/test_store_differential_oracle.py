"""What test_store_differential.py generates and how it judges filters (no
tests here): random namespaces, keys, values and filters, and an oracle of
docs/design.md's filter language with the documented differences from
InMemoryStore's own filter."""

from __future__ import annotations

import copy
import random
from typing import Any, Optional

from langgraph.store.memory import _compare_values as inmemory_compare_values

LABELS = ["a", "b", "c", "ab", "x", "x-y", "é", "A", "日本", "*"]  # "x" and "x-y": tuple order is not text order; "*" is a wildcard in
# list_namespaces conditions and a plain label everywhere else.
KEYS = ["k0", "k1", "k2", "k3", "k.dot", "ключ", " sp", ""]
WORDS = [
    "cat", "dog", "bird", "hiking", "python", "rust", "sqlite", "ocean", "mountain",
    "jazz", "tea", "coffee", "chess", "snow", "zebra", "quartz", "fjord", "lynx",
]  # fmt: skip
# Strings and numbers include what Python's str() and json.dumps() spell in
# their own ways (escapes, exponents), since embedded texts must be the same.
STRINGS = [
    "", "a", "b", "ab", "B", "é", "zeta", "10", "9", "1.5", "cat",
    'say "hi"', "back\\slash", "line\nbreak", "\u0001ctl", "emoji 🎉", "\u2028sep", "日本語",
]  # fmt: skip
NUMBERS = [
    -3, -1, 0, 1, 2, 3, 7, 2.0, 1.5, -0.5, 0.1, 2**53 + 1, 2**53, 2**60, -(2**63),
    1e-7, 1e16, 1.5e300, 123456789.125, -0.0, 5e-324,
]  # fmt: skip

ORDERING = ("$gt", "$gte", "$lt", "$lte")
MISSING = object()  # a key the item does not have

# Index configurations by seed: fields, whole document ("$", the default),
# or no index (no query searches then).
INDEX_FIELDS: list[Optional[list[str]]] = [["text", "meta.note", "tags[*]"], None, []]


# ---------------------------------------------------------------------------
# Random data


def rand_namespace(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 3)))


def rand_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))


def rand_scalar(rng: random.Random) -> Any:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return round(rng.uniform(-10, 10), rng.randint(0, 3))
    if kind == 2:
        return rng.choice(STRINGS)
    if kind == 3:
        return rng.random() < 0.5
    return None


def rand_value(rng: random.Random) -> dict[str, Any]:
    v: dict[str, Any] = {}
    if rng.random() < 0.8:
        v["n"] = rng.choice(NUMBERS) if rng.random() < 0.7 else rng.randint(-5, 5)
    if rng.random() < 0.7:
        v["x"] = round(rng.uniform(-10, 10), 2) if rng.random() < 0.8 else rng.randint(-3, 3)
    if rng.random() < 0.7:
        v["s"] = rng.choice(STRINGS)
    if rng.random() < 0.6:
        v["b"] = rng.random() < 0.5
    if rng.random() < 0.3:
        v["z"] = None
    if rng.random() < 0.7:
        kind = rng.randrange(7)
        v["mix"] = (
            rand_scalar(rng)
            if kind < 5
            else [rand_scalar(rng) for _ in range(rng.randint(0, 2))]
            if kind == 5
            else {"q": rand_scalar(rng)}
        )
    if rng.random() < 0.6:
        v["tags"] = [rng.choice(WORDS + [1, 2]) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.75:
        r = rng.random()
        if r < 0.85:
            meta: dict[str, Any] = {}
            if rng.random() < 0.8:
                meta["lvl"] = rng.randint(0, 4)
            if rng.random() < 0.7:
                meta["note"] = rng.choice(WORDS)
            if rng.random() < 0.5:
                meta["flag"] = rng.random() < 0.5
            if rng.random() < 0.4:
                meta["inner"] = {"d": rng.randint(0, 3)} if rng.random() < 0.8 else {}
            if rng.random() < 0.15:
                meta["lvl"] = None
            v["meta"] = meta
        elif r < 0.93:
            v["meta"] = None
        else:
            v["meta"] = rng.choice(["cat", [1, 2], 3])
    if rng.random() < 0.85:
        v["text"] = rand_text(rng)
    if rng.random() < 0.1:
        v["ü-1"] = rng.randint(0, 2)
    return v


# Paths a filter can name, with the kind of operand that matches them.
PATHS = {
    "n": "number",
    "x": "number",
    "s": "string",
    "b": "bool",
    "z": "none",
    "mix": "any",
    "tags": "list",
    "meta": "object",
    "text": "string",
    "nokey": "any",
    "ü-1": "number",
    "meta.lvl": "number",
    "meta.note": "string",
    "meta.flag": "bool",
    "meta.inner.d": "number",
    "meta.nokey": "any",
}


def resolve(value: Any, path: str) -> Any:
    """The value at a dotted path, or MISSING."""
    cur = value
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return MISSING
    return cur


def rand_operand(rng: random.Random, kind: str, seen: list[Any], ordering: bool) -> Any:
    """An operand of the path's type: often one a stored item has, so that filters match."""
    return copy.deepcopy(_rand_operand(rng, kind, seen, ordering))  # never share a stored value


def _rand_operand(rng: random.Random, kind: str, seen: list[Any], ordering: bool) -> Any:
    if ordering:
        # Only numbers and strings are valid operands of ordering ops (design.md (Filter language)).
        candidates = [s for s in seen if isinstance(s, (int, float, str)) and not isinstance(s, bool)]
        if kind == "number" or (kind == "any" and rng.random() < 0.5):
            candidates = [c for c in candidates if not isinstance(c, str)]
            return rng.choice(candidates) if candidates and rng.random() < 0.6 else rng.choice(NUMBERS)
        candidates = [c for c in candidates if isinstance(c, str)]
        return rng.choice(candidates) if candidates and rng.random() < 0.6 else rng.choice(STRINGS + WORDS)
    if rng.random() < 0.12:
        return None
    # Equality across bool and number (design.md (Filter language): true equals only true).
    if kind == "bool" and rng.random() < 0.2:
        return rng.choice([0, 1, 1.0])
    if kind == "number" and rng.random() < 0.1:
        return rng.random() < 0.5
    if seen and rng.random() < 0.6:
        return rng.choice(seen)
    if kind == "number":
        return rng.choice(NUMBERS)
    if kind == "string":
        return rng.choice(STRINGS + WORDS)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [rng.choice(WORDS + [1, 2]) for _ in range(rng.randint(0, 2))]
    if kind == "object":
        return {"lvl": rng.randint(0, 4)}
    return rand_scalar(rng)


def rand_condition(rng: random.Random, kind: str, seen: list[Any]) -> Any:
    r = rng.random()
    if r < 0.3:
        return rand_operand(rng, kind, seen, ordering=False)  # plain equality
    if r < 0.45:
        return {"$eq": rand_operand(rng, kind, seen, ordering=False)}
    if r < 0.6:
        return {"$ne": rand_operand(rng, kind, seen, ordering=False)}
    if kind in ("bool", "none", "list", "object"):
        return {rng.choice(["$eq", "$ne"]): rand_operand(rng, kind, seen, ordering=False)}
    ops = rng.sample(ORDERING, 2 if rng.random() < 0.3 else 1)
    if kind == "any":  # one type for both bounds
        kind = rng.choice(["number", "string"])
    return {op: rand_operand(rng, kind, seen, ordering=True) for op in ops}


def rand_filter(rng: random.Random, values: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    if rng.random() < 0.2:
        return None
    paths = rng.sample(sorted(PATHS), rng.choice([1, 1, 1, 2]))
    flt: dict[str, Any] = {}
    for path in paths:
        seen = [v for v in (resolve(val, path) for val in values) if v is not MISSING]
        cond = rand_condition(rng, PATHS[path], seen)
        parts = path.split(".")
        if len(parts) == 1 or rng.random() < 0.4:
            flt[path] = cond  # top-level, or a dotted path (design.md (Filter language))
        else:
            # A nested partial-match object: {"meta": {"lvl": cond}}.
            node = flt.setdefault(parts[0], {})
            if not isinstance(node, dict) or any(k.startswith("$") for k in node):
                continue  # the top-level key already holds another condition
            for part in parts[1:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict) or any(k.startswith("$") for k in node):
                    break
            else:
                node[parts[-1]] = cond
    return flt or None


# ---------------------------------------------------------------------------
# The oracle: docs/design.md (Filter language)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_eq(a: Any, b: Any) -> bool:
    """JSON equality (design.md (Filter language)): 1 == 1.0, true only equals true, structural lists and objects."""
    if a is MISSING or b is MISSING:
        return False
    if is_number(a) and is_number(b):
        return a == b  # Python compares int and float exactly
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_eq(a[k], b[k]) for k in a)
    return a == b


def _apply(v: Any, op: str, x: Any) -> bool:
    if op == "$eq":
        return (v is MISSING or v is None) if x is None else json_eq(v, x)
    if op == "$ne":
        return not _apply(v, "$eq", x)
    # $gt/$gte/$lt/$lte: no match on missing or null, or on values of another type.
    if not ((is_number(v) and is_number(x)) or (isinstance(v, str) and isinstance(x, str))):
        return False
    return {"$gt": v > x, "$gte": v >= x, "$lt": v < x, "$lte": v <= x}[op]


def _cond(v: Any, cond: Any) -> bool:
    if isinstance(cond, dict):
        if any(k.startswith("$") for k in cond):
            return all(_apply(v, op, x) for op, x in cond.items())
        # A nested object without $ keys: a partial match on its keys.
        if not isinstance(v, dict):
            return False
        return all(_cond(v.get(k, MISSING), c) for k, c in cond.items())
    if cond is None:
        return v is MISSING or v is None  # {"k": null} matches null or missing
    return json_eq(v, cond)


def oracle_matches(value: dict[str, Any], flt: Optional[dict[str, Any]]) -> bool:
    """Whether `value` passes `flt` under docs/design.md (Filter language)."""
    if not flt:
        return True
    return all(_cond(resolve(value, key), cond) for key, cond in flt.items())


def _bool_number_confusion(a: Any, b: Any) -> bool:
    """Whether Python's == and JSON equality can disagree on (a, b): a bool against a number."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return isinstance(a, bool) != isinstance(b, bool)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return any(_bool_number_confusion(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return any(_bool_number_confusion(a[k], b[k]) for k in a.keys() & b.keys())
    return False


def _cond_differences(v: Any, cond: Any, out: list[str]) -> None:
    if isinstance(cond, dict):
        if any(k.startswith("$") for k in cond):
            for op, x in cond.items():
                if op in ORDERING:
                    if v is MISSING or v is None:
                        out.append("design.md (Filter language): $gt/$gte/$lt/$lte on a missing key or null is no match")
                    elif isinstance(v, str) or isinstance(x, str):
                        out.append("design.md (Filter language): strings compare as strings")
                    elif not (is_number(v) and is_number(x)):
                        out.append("design.md (Filter language): values of different types never compare")
                    elif any(isinstance(n, int) and abs(n) > 2**53 for n in (v, x)):
                        out.append("design.md (Filter language): integers compare exactly")
                elif _bool_number_confusion(v, x):
                    out.append("design.md (Filter language): true equals only true")
        elif isinstance(v, dict):
            for k, c in cond.items():
                _cond_differences(v.get(k, MISSING), c, out)
    elif _bool_number_confusion(v, cond):
        out.append("design.md (Filter language): true equals only true")


def documented_differences(value: dict[str, Any], flt: Optional[dict[str, Any]]) -> list[str]:
    """The documented decisions under which InMemoryStore's filter may differ from ours on this item."""
    out: list[str] = []
    for key, cond in (flt or {}).items():
        if "." in key:
            out.append("design.md (Filter language): a dotted key is a nested path")
        else:
            _cond_differences(value.get(key, MISSING), cond, out)
    return out


def inmemory_matches(value: dict[str, Any], flt: Optional[dict[str, Any]]) -> Any:
    """InMemoryStore's own filter function on one item (its exception if it raises)."""
    if not flt:
        return True
    try:
        return all(inmemory_compare_values(value.get(k), c) for k, c in flt.items())
    except Exception as exc:  # noqa: BLE001 - recorded, compared by the caller
        return exc
