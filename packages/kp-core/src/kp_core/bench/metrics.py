"""Figures derived from the raw timings: GB/s, TFLOP/s, % of ceiling, speedups.

Kept apart from the runner so a report regenerated from an old JSON computes them the same way.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

# Which throughput figure each ceiling is compared with.
CEILING_METRIC = {"copy": "gbps", "gemm": "tflops"}
# The other per-call times a row may carry, and the speedups computed from each.
EXTRA_TIMES = {"host_ms": "host_speedup", "sustained_ms": "sustained_speedup"}


def annotate(rows: list[dict[str, Any]], ceilings: dict[str, dict]) -> list[dict[str, Any]]:
    """Fill gbps, tflops, pct_of_ceiling, speedup, host_speedup and sustained_speedup (by baseline
    name) into each row, in place; also returned."""
    for row in rows:
        row["gbps"] = row["tflops"] = row["pct_of_ceiling"] = None
        row["speedup"] = {}
        for speedup in EXTRA_TIMES.values():
            row[speedup] = {}
        ms = row.get("ms")
        if row["status"] != "ok" or not ms:
            continue
        if row.get("bytes"):
            row["gbps"] = row["bytes"] / ms / 1e6
        if row.get("flops"):
            row["tflops"] = row["flops"] / ms / 1e9
        ceiling = ceilings.get(row.get("ceiling") or "", {})
        metric = CEILING_METRIC.get(row.get("ceiling") or "")
        if metric and row[metric] is not None and ceiling.get("value"):
            row["pct_of_ceiling"] = 100.0 * row[metric] / ceiling["value"]
    for group in _by_case(rows).values():
        base = [r for r in group if not r["kp"] and r["status"] == "ok"]
        for r in group:
            if r["kp"] and r["status"] == "ok":
                # > 1 means kp is faster than that baseline.
                r["speedup"] = {b["impl"]: b["ms"] / r["ms"] for b in base}
                for ms, speedup in EXTRA_TIMES.items():
                    if r.get(ms):
                        r[speedup] = {b["impl"]: b[ms] / r[ms] for b in base if b.get(ms)}
    return rows


def _by_case(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["label"])].append(r)
    return groups


def varying_params(rows: list[dict[str, Any]]) -> list[str]:
    """The params keys whose value differs between rows, in the order the cases list them."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r["params"] if k not in keys]
    return [k for k in keys if len({repr(r["params"].get(k)) for r in rows}) > 1]


def sweep_key(rows: list[dict[str, Any]]) -> str | None:
    """The plot's x axis: the key a case names, else the first varying one, else the first one."""
    named = next((r["sweep"] for r in rows if r.get("sweep")), None)
    if named:
        return named
    varying = varying_params(rows)
    if varying:
        return varying[0]
    return next(iter(rows[0]["params"]), None) if rows else None
