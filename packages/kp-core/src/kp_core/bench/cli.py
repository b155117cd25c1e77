"""`bench.main(cases, suite=...)`: the command line every `bench/bench_<op>.py` script runs."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import torch

from . import report
from .case import Case
from .ceilings import measure
from .env import describe
from .runner import L2_MULTIPLE, MAX_INPUT_SETS, run
from .timing import FLUSH, REP_MS, WARMUP_MS, do_bench, timer_name

CasesFn = Callable[..., Iterable[Case]]  # cases(quick: bool, device: str)

NO_GPU = ("kp bench: no GPU found (torch.cuda.is_available() is False): smoke run of every case's "
          "CPU variant at a tiny size, once; the figures mean nothing and nothing is written to "
          "docs/benchmarks.")


def main(cases: CasesFn, *, suite: str, argv: list[str] | None = None) -> int:
    """Run a suite and write its report; returns the exit status (0 also without a GPU)."""
    args = _parser(suite).parse_args(argv)
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    if not gpu:
        print(NO_GPU, flush=True)
    quick = args.quick or not gpu
    selected = [c for c in cases(quick=quick, device=device)
                if not args.filter or args.filter in f"{c.op} {c.label}"]
    if args.impls:
        wanted = args.impls.split(",")
        selected = [dataclasses.replace(c, impls={k: v for k, v in c.impls.items() if k in wanted})
                    for c in selected]
        selected = [c for c in selected if c.impls]
    if not selected:
        print(f"kp bench: no case of suite {suite!r} matches --filter {args.filter!r} "
              f"--impls {args.impls!r}")
        return 1 if args.filter or args.impls else 0

    warmup, rep = (WARMUP_MS, REP_MS) if gpu else (0, 50)
    repo = _repo_root()
    env = describe(device, repo)
    print(f"kp bench {suite}: {len(selected)} cases on {env.get('gpu') or 'CPU'}; "
          "measuring the ceilings", flush=True)
    ceilings = measure(device, timer=functools.partial(do_bench, warmup=warmup, rep=rep))
    for name, c in ceilings.items():
        print(f"  ceiling {name}: " + (f"{c['value']:,.4g} {c['unit']} ({c['what']})"
                                       if "value" in c else f"not measured ({c['error']})"))
    rows = run(selected, device=device, ceilings=ceilings, warmup=warmup, rep=rep)

    result = {
        "schema": report.SCHEMA, "suite": suite, "run": _describe_run(gpu, args), "env": env,
        "ceilings": ceilings,
        "timing": {"timer": timer_name(device), "warmup_ms": warmup, "rep_ms": rep,
                   "l2_multiple": L2_MULTIPLE, "max_input_sets": MAX_INPUT_SETS, "flush": FLUSH},
        "rows": rows,
    }
    out = _out_dir(args, suite, env["slug"], gpu, repo)
    paths = report.write(result, out, plot=not args.no_plot)
    skipped = sum(r["status"] != "ok" for r in rows)
    print(f"kp bench {suite}: {len(rows) - skipped} timed, {skipped} skipped; wrote "
          + ", ".join(str(p) for p in paths))
    return 0


def _parser(suite: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=f"kp benchmarks: {suite}")
    p.add_argument("--out", type=Path, help="output folder (default: docs/benchmarks/<gpu>/ for a "
                   "full GPU run, a temp folder for --quick, --filter and CPU runs)")
    p.add_argument("--quick", action="store_true", help="a few sizes only")
    p.add_argument("--filter", metavar="SUBSTR", help="only cases whose '<op> <label>' holds SUBSTR")
    p.add_argument("--impls", metavar="A,B", help="only these implementations (names as in the "
                   "tables, e.g. kp-cuda,torch.compile)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    return p


def _describe_run(gpu: bool, args: argparse.Namespace) -> str:
    if not gpu:
        return "CPU smoke run (no GPU): tiny sizes, the figures mean nothing"
    parts = ["quick" if args.quick else "full"]
    if args.filter:
        parts.append(f"filter {args.filter!r}")
    if args.impls:
        parts.append(f"impls {args.impls}")
    return ", ".join(parts)


def _out_dir(args: argparse.Namespace, suite: str, slug: str, gpu: bool, repo: Path) -> Path:
    if args.out:
        return args.out
    if gpu and not args.quick and not args.filter and not args.impls:
        return repo / "docs" / "benchmarks" / slug
    # Partial and CPU runs must not overwrite the committed results of a full run.
    return Path(tempfile.mkdtemp(prefix=f"kp-bench-{suite}-"))


def _repo_root() -> Path:
    """The checkout the bench script lives in (bench scripts are not installed), else the cwd."""
    start = Path(sys.argv[0]).resolve().parent if sys.argv and sys.argv[0] else Path.cwd()
    for p in (start, *start.parents):
        if (p / "noxfile.py").exists() or (p / ".git").exists():
            return p
    return Path.cwd()
