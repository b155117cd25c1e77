"""kp_core.bench: the benchmark harness every kp package's `bench/bench_<op>.py` uses.

A script yields `Case`s (one op at one size, with every implementation to compare) from
`cases(quick, device)` and ends with `raise SystemExit(bench.main(cases, suite="norm"))`. The
harness measures the copy and GEMM ceilings, times each impl (median device time per call: CUDA
events after an L2 flush and a stream hold that keeps the host's launch latency out of the window,
over rotating input sets; cases that ask for it also back to back under sustained load), records failing impls as skipped, and writes JSON + Markdown + a PNG
per op to docs/benchmarks/<gpu>/. Without a GPU it runs the CPU variants once as a smoke test.
"""
from .case import Case, Impl, is_kp
from .ceilings import measure as measure_ceilings
from .cli import main
from .env import gpu_slug
from .imports import optional, require
from .report import load, regenerate, write as write_report
from .runner import run
from .timing import do_bench, host_ms, sustained_ms

__all__ = [
    "Case",
    "Impl",
    "do_bench",
    "gpu_slug",
    "host_ms",
    "is_kp",
    "load",
    "main",
    "measure_ceilings",
    "optional",
    "regenerate",
    "require",
    "run",
    "sustained_ms",
    "write_report",
]
