"""The tables of an interleaved A/B (tools/ab_wheels.sh): % of copy per cell, and host time per call.

    python packages/kp-norm/tools/ab_report.py RESULTS_DIR A B [--json merged.json]

RESULTS_DIR holds `ab_<variant>_r<round>.json` (norm_sweep.py --out) and, if measured,
`host_<variant>_r<round>.json` (host_time.py --out). Prints Markdown: per (op, direction, hidden)
the mean % of copy of A and B over the rounds and the speed ratio B / A (time of A over time of
B, from the mean times); then host time per call, each variant's kp / torch ratio per round (the
ratio cancels the machine's drift between rounds, which moves torch's own call by up to 25%).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics


def _load(directory, kind, variant):
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, f"{kind}_{variant}_r*.json"))):
        runs[int(re.search(r"_r(\d+)\.json$", path).group(1))] = json.load(open(path))
    return runs


def sweep_table(directory, a, b):
    ra, rb = _load(directory, "ab", a), _load(directory, "ab", b)
    cells = {}
    for variant, runs in ((a, ra), (b, rb)):
        for run in runs.values():
            for r in run["rows"]:
                key = (r["op"], r["dir"], r["hidden"])
                cells.setdefault(key, {}).setdefault(variant, []).append((r["ms"], r["pct_copy"]))
    names = {"rms": "RMSNorm", "layer": "LayerNorm"}
    lines = [f"| op | direction | hidden | {a} % of copy | {b} % of copy | speed {b} / {a} |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for (op, d, h), v in sorted(cells.items(), key=lambda kv: (kv[0][0] != "rms", kv[0][1] != "fwd", kv[0][2])):
        if a not in v or b not in v:
            continue
        ms_a, pct_a = (statistics.mean(x) for x in zip(*v[a]))
        ms_b, pct_b = (statistics.mean(x) for x in zip(*v[b]))
        lines.append(f"| {names.get(op, op)} | {d} | {h} | {pct_a:.1f} | {pct_b:.1f} | x{ms_a / ms_b:.3f} |")
    copies = [run["copy_gbs"] for runs in (ra, rb) for run in runs.values()]
    gpu = next(iter(ra.values()))["gpu"] if ra else "?"
    return "\n".join(lines), gpu, (min(copies), max(copies)) if copies else (0, 0)


def host_table(directory, a, b):
    ha, hb = _load(directory, "host", a), _load(directory, "host", b)
    if not ha or not hb:
        return ""
    pairs = [("rms_norm fwd kp", "rms_norm fwd torch"), ("layer_norm bwd kp", "layer_norm bwd torch")]
    lines = ["| rows | call | " + " | ".join(f"{v} r{r}" for v, runs in ((a, ha), (b, hb)) for r in sorted(runs)) + " |"]
    lines.append("| --- | --- | " + " | ".join("---" for _ in range(len(ha) + len(hb))) + " |")
    for rows in next(iter(ha.values()))["rows"]:
        for kp, torch_ in pairs:
            cells = []
            for runs in (ha, hb):
                for r in sorted(runs):
                    t = runs[r]["rows"][rows]
                    cells.append(f"{t[kp]:.1f} us ({t[kp] / t[torch_]:.2f}x torch)")
            lines.append(f"| {rows} | {kp[:-3]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", default=None, help="write every raw run into one file")
    args = p.parse_args(argv)
    table, gpu, (lo, hi) = sweep_table(args.directory, args.a, args.b)
    print(f"{gpu}, copy ceiling {lo:,.0f}-{hi:,.0f} GB/s in these runs\n")
    print(table)
    host = host_table(args.directory, args.a, args.b)
    if host:
        print("\nHost time per eager call (median of 5 blocks; kp / torch in the same round):\n")
        print(host)
    if args.json:
        merged = {k: {v: _load(args.directory, k, v) for v in (args.a, args.b)} for k in ("ab", "host")}
        with open(args.json, "w") as f:
            json.dump(merged, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
