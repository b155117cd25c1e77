"""Runs cases: makes rotating input sets, times every impl, records failures as skipped rows."""
from __future__ import annotations

import itertools
import math
import sys
from typing import Any, Iterable

import torch

from . import metrics
from .case import Case, Impl, is_kp
from .progress import progress
from .timing import REP_MS, WARMUP_MS, do_bench, host_ms_interleaved, is_cuda, sustained_ms, sync

MAX_INPUT_SETS = 8
L2_MULTIPLE = 3  # rotate through at least this many L2s worth of inputs
FREE_SHARE = 0.5  # input sets may take at most this share of free memory: outputs, graphs
                  # and workspaces need the rest


def run(cases: Iterable[Case], *, device: Any, ceilings: dict[str, dict] | None = None,
        warmup: float = WARMUP_MS, rep: float = REP_MS) -> list[dict[str, Any]]:
    """Time every impl of every case; one row per (case, impl), in order."""
    cases = list(cases)
    rows: list[dict[str, Any]] = []
    # host and sustained timing: one step more each
    with progress(sum(len(c.impls) + bool(c.host_timing) + bool(c.sustained) for c in cases)) as bar:
        for case in cases:
            rows.extend(_run_case(case, device, ceilings or {}, warmup, rep, bar))
    return rows


def _run_case(case: Case, device: Any, ceilings: dict, warmup: float, rep: float, bar) -> list:
    _reset_compile_caches()
    torch.manual_seed(0)
    base = {"op": case.op, "label": case.label, "params": dict(case.params),
            "bytes": case.bytes, "flops": case.flops, "ceiling": case.ceiling,
            "sweep": case.sweep, "status": "skipped", "reason": None, "ms": None,
            "host_ms": None, "sustained_ms": None, "input_sets": 0}
    try:
        sets = _input_sets(case, device)
    except Exception as e:  # e.g. OOM making the inputs: every impl of the case is skipped
        sets, failure = [], f"making inputs: {_reason(e)}"
    else:
        failure = None
    rows, calls = [], {}
    late = case.host_timing or case.sustained  # lines wait for the extra columns
    for name in case.impls:
        bar.describe(f"{case.op} {case.label} · {name}")
        row = {**base, "impl": name, "kp": is_kp(name), "input_sets": len(sets),
               "reason": failure}
        if failure is None:
            try:
                ms, call = _time_impl(case.impl(name), sets, device, warmup, rep)
                row.update(ms=ms, status="ok")
                if late:
                    calls[name] = call
            except Exception as e:  # unavailable backend, missing package, OOM, ...
                row["reason"] = _reason(e)
            if row["status"] != "ok":  # outside `except`: its traceback holds the inputs' memory
                _release(device)
        metrics.annotate([row], ceilings)
        rows.append(row)
        bar.advance()
        if not late:
            bar.log(_line(row))
    extra = [("host_ms", "host time", lambda fns: host_ms_interleaved(
        fns, device=device, calls=300 if is_cuda(device) else 20)) if case.host_timing else None,
        ("sustained_ms", "sustained", lambda fns: sustained_ms(fns, device=device)) if case.sustained else None]
    for key, what, timer in filter(None, extra):  # all impls of the case at once, in turn
        bar.describe(f"{case.op} {case.label} · {what}")
        try:
            got = timer(calls) if calls else {}
        except Exception as e:  # an impl that ran once but fails when called in a loop
            got = {}
            bar.log(f"  {case.op} {case.label}: {what} timing failed: {_reason(e)}")
        for row in rows:
            row[key] = got.get(row["impl"])
        bar.advance()
    calls.clear()  # the calls hold their inputs: let _release free them
    if late:
        for row in rows:
            bar.log(_line(row))
    del sets
    _release(device)
    for row in metrics.annotate(rows, ceilings):
        for what, ratios in (("speedup", row["speedup"]), ("host speedup", row["host_speedup"]),
                             ("sustained speedup", row["sustained_speedup"])):
            if ratios:
                bar.log(f"    {row['impl']} {what}: " + ", ".join(
                    f"{v:.2f}x {k}" for k, v in ratios.items()))
    return rows


def _time_impl(impl: Impl, sets: list[tuple], device: Any, warmup: float, rep: float):
    """Device time of one impl (ms), and the call it timed (for the host timing)."""
    args = [impl.setup(*s) if impl.setup else s for s in sets]
    cycle = itertools.cycle(args)
    run = impl.run

    def call():
        return run(*next(cycle))

    call()  # first call: compiles/autotunes, and an impl that cannot serve raises here
    sync(device)
    return do_bench(call, device=device, warmup=warmup, rep=rep), call


def _input_sets(case: Case, device: Any) -> list[tuple]:
    """As many input sets as cover L2_MULTIPLE x the L2 (at most MAX_INPUT_SETS, bounded by free
    memory). do_bench also flushes the L2 before each call; rotating keeps an op from reading
    data the previous call left in the L2 even where that flush is absent."""
    gpu = is_cuda(device)
    before = torch.cuda.memory_allocated() if gpu else 0
    first = _as_tuple(case.make_inputs())
    if not gpu:
        return [first]
    per_set = max(torch.cuda.memory_allocated() - before, 1)
    l2 = torch.cuda.get_device_properties(torch.device(device)).L2_cache_size
    want = min(MAX_INPUT_SETS, max(1, math.ceil(L2_MULTIPLE * l2 / per_set)))
    fits = int(FREE_SHARE * torch.cuda.mem_get_info()[0] // per_set)
    return [first] + [_as_tuple(case.make_inputs()) for _ in range(max(0, min(want, fits) - 1))]


def _as_tuple(inputs: Any) -> tuple:
    return inputs if isinstance(inputs, tuple) else (inputs,)


def _reset_compile_caches() -> None:
    # Each case is a new shape. A fresh cache gives torch.compile a static-shape compile per case
    # (what a user compiling one model gets) instead of hitting the recompile limit, or dynamo's
    # automatic dynamic shapes, after a few sizes.
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


def _release(device: Any) -> None:
    if not is_cuda(device):
        return
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception:  # a sticky CUDA error: the next impls will be skipped with their own reason
        pass


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _line(row: dict[str, Any]) -> str:
    head = f"  {row['op']} {row['label']} {row['impl']}:"
    if row["status"] != "ok":
        return f"{head} skipped ({row['reason']})"
    parts = [f"{row['ms'] * 1e3:.1f} us"]
    if row["host_ms"] is not None:
        parts.append(f"host {row['host_ms'] * 1e3:.1f} us/call")
    if row.get("sustained_ms") is not None:
        parts.append(f"sustained {row['sustained_ms'] * 1e3:.1f} us")
    if row["gbps"] is not None:
        parts.append(f"{row['gbps']:.0f} GB/s")
    if row["tflops"] is not None:
        parts.append(f"{row['tflops']:.1f} TFLOP/s")
    if row["pct_of_ceiling"] is not None:
        parts.append(f"{row['pct_of_ceiling']:.0f}% of {row['ceiling']}")
    return f"{head} " + ", ".join(parts)
