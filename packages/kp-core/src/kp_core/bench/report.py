"""Writes a result: `<suite>.json` (everything), `<suite>.md` (header + a table per op) and
`<suite>-<op>.png` (a plot per op). `regenerate` redoes the Markdown and PNGs from a JSON."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import metrics
from .plot import plot_op

SCHEMA = 1


# How a run flushed the L2 (results before kp-core 0.3.3 have no "flush" key: a zero fill).
_FLUSHES = {"read": "a 256 MB read, lines left clean", "zero": "a 256 MB zero fill, lines left dirty"}


def write(result: dict[str, Any], out_dir: str | Path, *, plot: bool = True) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics.annotate(result["rows"], result["ceilings"])
    json_path = out_dir / f"{result['suite']}.json"
    json_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return [json_path, *render(result, out_dir, plot=plot)]


def load(path: str | Path) -> dict[str, Any]:
    result = json.loads(Path(path).read_text())
    if result.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {result.get('schema')!r}, this kp_core reads {SCHEMA}")
    return result


def regenerate(json_path: str | Path, out_dir: str | Path | None = None, *,
               plot: bool = True) -> list[Path]:
    """Rewrite the Markdown (and PNGs) of one result JSON, beside it unless `out_dir` is given."""
    json_path = Path(json_path)
    out_dir = Path(out_dir) if out_dir else json_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    return render(load(json_path), out_dir, plot=plot)


def render(result: dict[str, Any], out_dir: Path, *, plot: bool = True) -> list[Path]:
    metrics.annotate(result["rows"], result["ceilings"])
    images: dict[str, str] = {}
    paths: list[Path] = []
    if plot:
        for op in _ops(result["rows"]):
            png = plot_op(result, op, out_dir / f"{result['suite']}-{op}.png")
            if png is not None:
                images[op] = png.name
                paths.append(png)
    md = out_dir / f"{result['suite']}.md"
    md.write_text(markdown(result, images))
    return [md, *paths]


def markdown(result: dict[str, Any], images: dict[str, str] | None = None) -> str:
    lines = _header(result)
    by_op = _ops(result["rows"])
    for op, rows in by_op.items():
        lines += ["", f"## {op}", ""]
        if images and op in images:
            lines += [f"![{op}]({images[op]})", ""]
        lines += _table(rows, result["ceilings"])
    return "\n".join(lines) + "\n"


def _header(result: dict[str, Any]) -> list[str]:
    env, timing = result["env"], result["timing"]
    device = env.get("gpu") or f"CPU ({env.get('cpu', '?')}), no GPU"
    lines = [f"# Benchmarks: {result['suite']} on {device}", "", "| | |", "| --- | --- |",
             f"| date | {env['date']} |"]
    if env.get("gpu"):
        lines.append(f"| device | {env['gpu']}: {env['sm_count']} SMs, compute capability "
                     f"{env['capability']}, {env['l2_bytes'] / 2**20:.0f} MiB L2, "
                     f"{env['memory_bytes'] / 2**30:.0f} GiB |")
    lines.append("| software | " + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
                 + " |")
    if env.get("git"):
        lines.append(f"| source | git {env['git']} |")
    for name, c in result["ceilings"].items():
        text = (f"{_num(c['value'])} {c['unit']} ({c['what']})" if "value" in c
                else f"not measured: {c.get('error')}")
        lines.append(f"| ceiling: {name} | {text} |")
    if timing["timer"] == "time.perf_counter":
        lines.append("| timing | wall time of single calls, median of a few (CPU smoke run) |")
    else:
        lines.append(f"| timing | median of {timing['timer']}, warmup {timing['warmup_ms']:g} ms, "
                     f"rep {timing['rep_ms']:g} ms; L2 flushed before each call ({_FLUSHES[timing.get('flush', 'zero')]}), then the stream held "
                     f"(a spin kernel) until the host has issued the call; inputs rotated "
                     f"over enough sets to cover {timing['l2_multiple']}x the L2 (at most "
                     f"{timing['max_input_sets']}) |")
    lines.append(f"| run | {result['run']} |")
    lines += ["", "Time is the median device time of one call. GB/s counts the bytes the op must "
              "move (inputs read once, outputs written once). `% copy` / `% gemm` is that "
              "throughput as a share of the ceiling measured in this run. `vs X` is the speedup "
              "of a kp implementation over baseline X (X's time / kp's time; above 1, kp is "
              "faster). `host` is the wall time per call over 300 back-to-back calls with one "
              "sync at the end, the fastest of 9 such loops: what a launch-bound call costs a "
              "model loop; `vs X (host)` compares those. `sustained` is the time per call in "
              "windows of back-to-back calls (about 250 ms each, no flush), the implementations "
              "in turn, the median of 3 rounds: the clock the power limit allows, as in a training "
              "step; `vs X (sustained)` compares those."]
    return lines


def _table(rows: list[dict[str, Any]], ceilings: dict) -> list[str]:
    ok = [r for r in rows if r["status"] == "ok"]
    out: list[str] = []
    varying = metrics.varying_params(rows)
    keys = varying or list(rows[0]["params"])
    fixed = {k: v for k, v in rows[0]["params"].items() if k not in keys}
    if fixed:
        out += [", ".join(f"{k} = {v}" for k, v in fixed.items()), ""]
    ceiling = next((r["ceiling"] for r in rows if r["ceiling"]), None)
    baselines = list(dict.fromkeys(r["impl"] for r in ok if not r["kp"]))
    cols = [*keys, "impl", "time (µs)"]
    show = {
        "host": any(r["host_ms"] is not None for r in ok),
        "sustained": any(r.get("sustained_ms") is not None for r in ok),
        "gbps": any(r["gbps"] is not None for r in ok),
        "tflops": any(r["tflops"] is not None for r in ok),
        "pct": ceiling is not None and any(r["pct_of_ceiling"] is not None for r in ok),
    }
    extra = [(flag, f"{flag}_ms", f"{flag}_speedup") for flag in ("host", "sustained") if show[flag]]
    cols += [name for flag, name in (("host", "host (µs/call)"), ("sustained", "sustained (µs)"), ("gbps", "GB/s"),
                                     ("tflops", "TFLOP/s"), ("pct", f"% {ceiling}")) if show[flag]]
    cols += [f"vs {b}" for b in baselines]
    cols += [f"vs {b} ({flag})" for flag, _, _ in extra for b in baselines]
    if ok:
        out += ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in ok:
        cells = [str(r["params"].get(k, "")) for k in keys] + [r["impl"], _num(r["ms"] * 1e3)]
        cells += [_num(r[ms] * 1e3) if r.get(ms) is not None else "" for _, ms, _ in extra]
        if show["gbps"]:
            cells.append(_num(r["gbps"]))
        if show["tflops"]:
            cells.append(_num(r["tflops"]))
        if show["pct"]:
            cells.append(_pct(r["pct_of_ceiling"]))
        cells += [f"{r['speedup'][b]:.2f}×" if b in r["speedup"] else "" for b in baselines]
        for _, _, speedup in extra:
            cells += [f"{r[speedup][b]:.2f}×" if b in r.get(speedup, {}) else "" for b in baselines]
        out.append("| " + " | ".join(cells) + " |")
    out += _skipped(rows, keys)
    return out


def _skipped(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """One line per (impl, reason), so a missing package does not fill the table with blanks."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            groups[(r["impl"], r["reason"] or "")].append(r)
    if not groups:
        return []
    n_cases = len({r["label"] for r in rows})
    out = ["", "Skipped:", ""]
    for (impl, reason), rs in groups.items():
        where = ("all sizes" if len(rs) == n_cases else "; ".join(
            ", ".join(f"{k}={r['params'].get(k)}" for k in keys) for r in rs))
        out.append(f"- {impl} ({where}): {reason}")
    return out


def _ops(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_op: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    return by_op


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:.0f}%" if v >= 10 else f"{v:.1f}%"


def _num(v: float) -> str:
    """Three significant figures or more, with thousands separators."""
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3g}"
