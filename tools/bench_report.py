#!/usr/bin/env python3
"""Regenerate the Markdown table and PNG plots of one benchmark result JSON.

    python tools/bench_report.py docs/benchmarks/h100/norm.json [--out DIR] [--no-plot]

Use it after changing how reports look: the timings stay as measured; only the derived figures
(GB/s, % of ceiling, speedups), the Markdown and the plots are rewritten, beside the JSON by default.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from kp_core.bench import report
except ImportError:  # a bare checkout: use kp-core from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "kp-core" / "src"))
    from kp_core.bench import report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", type=Path, help="a result written by a bench/bench_<op>.py script")
    p.add_argument("--out", type=Path, help="output folder (default: the JSON's folder)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    args = p.parse_args(argv)
    for path in report.regenerate(args.json, args.out, plot=not args.no_plot):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
