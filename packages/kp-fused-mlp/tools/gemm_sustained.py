"""kp's bare GEMM against torch.mm under sustained load: time per call, SM clock and board power.

    python packages/kp-fused-mlp/tools/gemm_sustained.py [--calls 200] [--rounds 2] [--out f.json]

Why: single flushed calls put kp's GEMM at 0.93-1.01x torch.mm, but 50 calls back to back at 0.88x
(4096 -> 14336 at 8192 tokens, H200, 2026-11-26). Training runs GEMMs back to back, so that is the
number that matters. Two explanations predict different things:
  - power: at the board's power limit the clock falls; a kernel that spends more energy a FLOP
    (more shared-memory or L2 traffic, more instructions) runs at a lower clock. Then kp's window
    shows a lower mean SM clock at the same power, and the same time per call per clock.
  - efficiency: kp's kernel does less per clock; single flushed calls hid it (idle gaps let the
    clock boost). Then the clocks match and kp's calls per clock are fewer.
`--flushed N` also times single calls after an L2 flush, N interleaved rounds
(gemm_scheduler_sweep.time_interleaved). Each window runs `--calls` calls of one implementation back to back (CUDA events around the whole
window) while `nvidia-smi` samples clocks.sm and power.draw every 20 ms (read-only queries); the
implementations alternate A B B A per round so neither always runs on a hotter GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import time

import torch

from gemm_scheduler_sweep import _flush_buffer, time_interleaved  # beside this script
from kp_fused_mlp import _cuda

SHAPES = [
    (8192, 4096, 14336),
    (8192, 8192, 8192),
    (8192, 14336, 4096),
    (8192, 8192, 28672),
]  # M, K, N


class Sampler:
    """nvidia-smi in the background: (t, sm clock MHz, power W) every 20 ms."""

    def __init__(self):
        self.p = subprocess.Popen(
            [
                "nvidia-smi",
                "-i",
                str(torch.cuda.current_device()),
                "--query-gpu=clocks.sm,power.draw",
                "--format=csv,noheader,nounits",
                "-lms",
                "20",
            ],
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.rows = []
        import threading

        def read():
            for line in self.p.stdout:
                try:
                    c, w = (float(v) for v in line.strip().split(","))
                except ValueError:
                    continue
                self.rows.append((time.monotonic(), c, w))

        self.t = threading.Thread(target=read, daemon=True)
        self.t.start()

    def window(self, t0, t1):
        got = [(c, w) for t, c, w in self.rows if t0 <= t <= t1]
        if not got:
            return float("nan"), float("nan"), 0
        return (
            statistics.mean(c for c, _ in got),
            statistics.mean(w for _, w in got),
            len(got),
        )

    def stop(self):
        self.p.terminate()


def paired_medians(fns: dict, rounds: int = 30) -> dict:
    """Paired rounds: every callable once a round (the order rotated), each call timed by its own
    CUDA events, so all share one heat; the median ms of each."""
    names = list(fns)
    events = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[k]()
            e.record()
            events[k].append((s, e))
    torch.cuda.synchronize()
    return {k: statistics.median(s.elapsed_time(e) for s, e in v) for k, v in events.items()}


def sustained_windows(fns: dict, sampler: Sampler, calls: int = 20, rounds: int = 3) -> dict:
    """Windows of `calls` back-to-back calls of each callable (A B B A, `rounds` times): per window
    (ms a call, mean SM clock MHz, mean board power W), the clock the power limit allows."""
    got = {k: [] for k in fns}
    names = list(fns)
    for _ in range(rounds):
        for k in names + names[::-1]:
            fns[k]()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.monotonic()
            s.record()
            for _ in range(calls):
                fns[k]()
            e.record()
            e.synchronize()
            got[k].append((s.elapsed_time(e) / calls, *sampler.window(t0 + 0.03, time.monotonic())[:2]))
    return got


def spaced_medians(fns: dict, rounds: int = 15, idle_s: float = 0.03) -> dict:
    """Each callable once a round (the order rotated) after an L2 flush and `idle_s` of an idle GPU,
    timed by its own CUDA events: the median ms of each, a GPU that starts every call cool (the
    regime of the bench harness's flushed column)."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    got = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            torch.cuda.synchronize()
            time.sleep(idle_s)
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fns[k]()
            e.record()
            e.synchronize()
            got[k].append(s.elapsed_time(e))
    return {k: statistics.median(v) for k, v in got.items()}


def three_regimes(fns: dict, sampler: Sampler, base: str, paired_rounds: int = 30, calls: int = 20,
                  window_rounds: int = 3, spaced_rounds: int = 12, width: int = 24) -> dict:
    """`fns` in paired rounds, windows of back-to-back calls and spaced calls; prints a line each
    (us, speed over `base`, the windows' clock and power) and returns name -> (paired ms, windows ms,
    MHz, W, spaced ms)."""
    t = paired_medians(fns, rounds=paired_rounds)
    wn = sustained_windows(fns, sampler, calls=calls, rounds=window_rounds)
    sp = spaced_medians(fns, rounds=spaced_rounds)
    out = {}
    for k in fns:
        tw = statistics.median(v[0] for v in wn[k])
        out[k] = (t[k], tw, statistics.mean(v[1] for v in wn[k]), statistics.mean(v[2] for v in wn[k]), sp[k])
    b = out[base]
    for k, (tp, tw, clk, pw, ts) in out.items():
        print(f"  {k:{width}s} paired {tp * 1e3:7.0f} us x{b[0] / tp:.3f} | windows {tw * 1e3:7.0f} us "
              f"x{b[1] / tw:.3f} {clk:5.0f} MHz {pw:4.0f} W | spaced {ts * 1e3:7.0f} us x{b[4] / ts:.3f}", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--configs",
        default="table",
        help="kp rows to time, gemm_configs() names or 'table' (the row the table picks), comma-separated",
    )
    ap.add_argument(
        "--flushed",
        type=int,
        default=0,
        help="also time this many single calls of each, each after an L2 flush (median)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sampler = Sampler()
    time.sleep(0.5)
    results = []
    for m, k, n in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        wt = w.t()
        impls = {"torch.mm": lambda x=x, wt=wt: torch.mm(x, wt)}
        for c in args.configs.split(","):
            idx = -1 if c == "table" else _cuda.NATIVE.module.gemm_configs().index(c)
            name = f"kp:{_cuda.gemm_plan(m, n, k)}" if c == "table" else f"kp:{c}"
            impls[name] = lambda idx=idx, x=x, w=w: _cuda.linear_act_fwd(
                x, w, None, "none", config=idx
            )
        for f in impls.values():
            f()
        torch.cuda.synchronize()
        flops = 2 * m * n * k
        for r in range(args.rounds):
            order = list(impls)
            for name in order + order[::-1]:
                f = impls[name]
                s, e = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                torch.cuda.synchronize()
                t0 = time.monotonic()
                s.record()
                for _ in range(args.calls):
                    f()
                e.record()
                e.synchronize()
                t1 = time.monotonic()
                ms = s.elapsed_time(e) / args.calls
                clk, pw, ns = sampler.window(t0 + 0.05, t1)
                row = {
                    "m": m,
                    "k": k,
                    "n": n,
                    "impl": name,
                    "round": r,
                    "ms": ms,
                    "tflops": flops / ms / 1e9,
                    "sm_mhz": clk,
                    "power_w": pw,
                    "samples": ns,
                    "gflop_per_mhz": flops / ms / 1e6 / clk
                    if not math.isnan(clk)
                    else None,
                }
                results.append(row)
                print(
                    f"{m}x{k}x{n} r{r} {name:28s} {ms:7.3f} ms  {row['tflops']:6.1f} TFLOP/s  "
                    f"{clk:6.0f} MHz  {pw:6.1f} W  ({ns} samples)",
                    flush=True,
                )
        if args.flushed:  # single flushed calls, interleaved: the sweep tool's timer
            ms_of = time_interleaved(impls, args.flushed, _flush_buffer())
            for name in impls:
                ms = ms_of[name]
                results.append(
                    {
                        "m": m,
                        "k": k,
                        "n": n,
                        "impl": name,
                        "mode": "flushed",
                        "ms": ms,
                        "tflops": flops / ms / 1e9,
                    }
                )
                print(
                    f"{m}x{k}x{n} flushed {name:28s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s",
                    flush=True,
                )
        del x, w, wt, impls
    sampler.stop()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(
                {
                    "device": torch.cuda.get_device_name(),
                    "calls": args.calls,
                    "rows": results,
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
