"""Sweep kp-norm's launch configuration on a GPU: % of copy bandwidth per (config, op, hidden).

    python packages/kp-norm/tools/norm_sweep.py [--ops rms,layer] [--dirs fwd,bwd,bwdk] [--hidden 4096,16384]
                               [--levels cuda,triton] [--dtypes bf16,bf16-w32,fp32]
                               [--config NAME:KEY=VAL,KEY=VAL ...] [--out f.json]

Each --config runs its rows under `kp_norm.plan_override(KEY=VAL, ...)` (names:
`kp_norm.plan_override_names()`; the plain "default" config is always run first). Overrides that
reach kernels outside the release lists need kp-norm built with `-C cmake.define.KP_NORM_TUNING=ON`.

Directions: fwd (the public function), bwd (torch.autograd.grad through the public function:
what the benchmark times), bwdk (the native backward kernel alone: no autograd, no allocation,
no col_sum). --dtypes: bf16 x and weights (the benchmark's), bf16 x with fp32 weights (autocast
training), fp32 x and weights. 256 MiB of x, median of kp_core.bench's do_bench (L2 flush + stream hold); the
copy ceiling is measured in the same run. A development tool: the committed numbers come from the benchmarks.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import sys

import torch

HIDDEN = (1024, 2048, 4096, 8192, 16384, 65536, 262144)
INPUT_BYTES = 256 << 20


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="rms,layer")
    p.add_argument("--dirs", default="fwd,bwd")
    p.add_argument("--hidden", default=",".join(map(str, HIDDEN)))
    p.add_argument("--levels", default="cuda",
                   help="cuda, triton, reference, compile (torch.compile, fwd only), quack (QuACK, rms only)")
    p.add_argument("--dtypes", default="bf16", help="bf16, bf16-w32 (fp32 weights), fp32")
    p.add_argument("--config", action="append", default=[], help="NAME:KEY=VAL,KEY=VAL")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def _configs(specs):
    out = [("default", {})]
    for spec in specs:
        name, _, kv = spec.partition(":")
        pairs = (item.split("=", 1) for item in kv.split(",") if item)
        out.append((name, {k.lower().removeprefix("kp_norm_"): int(v) for k, v in pairs}))
    return out


@functools.cache
def _compiled(op):
    """torch.compile of the benchmark's own fp32 reference formula (bench_norm.ref_*), static shapes."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "bench_norm.py")
    spec = importlib.util.spec_from_file_location("kp_bench_norm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return torch.compile(mod.ref_rms_norm if op == "rms" else mod.ref_layer_norm, fullgraph=True, dynamic=False)


DTYPES = {"bf16": (torch.bfloat16, torch.bfloat16), "bf16-w32": (torch.bfloat16, torch.float32),
          "fp32": (torch.float32, torch.float32)}  # x, weights


def _case(op, direction, hidden, level, dtypes_name="bf16"):
    import kp_norm
    from kp_norm import _cuda
    from kp_core import dtypes

    bf16 = torch.bfloat16
    xd, wd = DTYPES[dtypes_name]
    xs = xd.itemsize
    rows = INPUT_BYTES // (hidden * xs)
    grad = direction == "bwd"
    x = torch.randn(rows, hidden, device="cuda", dtype=xd, requires_grad=grad)
    params = [torch.randn(hidden, device="cuda", dtype=wd, requires_grad=grad) for _ in range(1 if op == "rms" else 2)]
    n = rows * hidden
    assert dtypes_name == "bf16" or level == "cuda" and direction != "bwdk", "--dtypes other than bf16: cuda fwd/bwd"
    if level == "compile":  # the baseline to beat: torch.compile of the plain fp32 formula
        torch._dynamo.reset()  # a static-shape compile for each size, as the benchmark does
        fn = functools.partial(_compiled(op), x, *params)
    elif level == "quack":  # QuACK's RMSNorm (CuTe DSL), unpacked by ../shared/tools/fa4-quack-carry.sh
        import site
        site.addsitedir("/root/kp-baselines")
        from quack.rmsnorm import rmsnorm
        assert op == "rms", "QuACK's LayerNorm wants fp32 weights: not the benchmark's workload"
        fn = lambda: rmsnorm(x, params[0], eps=1e-6)  # noqa: E731
    elif op == "rms":
        fn = lambda: kp_norm.rms_norm(x, params[0], 1e-6, backend=level)  # noqa: E731
    else:
        fn = lambda: kp_norm.layer_norm(x, params[0], params[1], 1e-5, backend=level)  # noqa: E731
    if direction == "fwd":
        return fn, 2 * xs * n
    dy = torch.randn(rows, hidden, device="cuda", dtype=xd)
    if direction == "bwd":
        y = fn()
        return (lambda: torch.autograd.grad(y, (x, *params), dy, retain_graph=True)), 3 * xs * n
    # bwdk: the native kernel alone, buffers made once.
    assert level == "cuda", "bwdk times the native kernel"
    is_rms = op == "rms"
    with torch.no_grad():
        _, _, mean, rstd = _cuda.norm_fwd(x, None, params[0], None if is_rms else params[1], 1e-5, is_rms,
                                          0.0, bf16, True)
    mod = _cuda.NATIVE.module
    code = dtypes.code(bf16)
    parts = mod.norm_bwd_partials(rows, hidden, code, code, not is_rms, 0)
    dx = torch.empty_like(x)
    dw = torch.empty(parts, hidden, device="cuda", dtype=torch.float32)
    db = None if is_rms else torch.empty_like(dw)
    stream = torch.cuda.current_stream().cuda_stream

    def run():
        mod.norm_bwd(dy.data_ptr(), hidden, x.data_ptr(), hidden, 0, 0, params[0].data_ptr(),
                     0 if mean is None else mean.data_ptr(), rstd.data_ptr(), dx.data_ptr(), hidden,
                     dw.data_ptr(), 0 if db is None else db.data_ptr(), parts, rows, hidden, code, code, code,
                     0.0, is_rms, 0, stream)
    return run, 6 * n


def main(argv=None) -> int:
    a = _args(argv)
    if not torch.cuda.is_available():
        print("norm_sweep: no GPU here; nothing to measure.")
        return 0
    from kp_core.bench.ceilings import _copy
    from kp_core.bench.timing import do_bench

    copy = _copy("cuda", True, do_bench)["value"]
    print(f"copy ceiling {copy:.0f} GB/s  ({torch.cuda.get_device_name()})", flush=True)
    hiddens = [int(h) for h in a.hidden.split(",")]
    rows = []
    import contextlib

    import kp_norm

    for name, env in _configs(a.config):
        with kp_norm.plan_override(**env) if env else contextlib.nullcontext():  # (older wheels have none)
            for op, dt, direction, level in itertools.product(a.ops.split(","), a.dtypes.split(","),
                                                              a.dirs.split(","), a.levels.split(",")):
                if ((direction == "bwdk" and level != "cuda") or (direction != "fwd" and level == "compile")
                        or (level == "quack" and (op != "rms" or name != "default"))):
                    continue
                line = []
                for h in hiddens:
                    try:
                        fn, nbytes = _case(op, direction, h, level, dt)
                        ms = do_bench(fn)
                        pct = 100 * nbytes / ms / 1e6 / copy
                        row = dict(config=name, env=env, op=op, dir=direction, level=level, hidden=h, ms=ms, pct_copy=pct)
                        rows.append(row if dt == "bf16" else {**row, "op": f"{op}.{dt}", "dtypes": dt})
                        line.append(f"{pct:5.1f}")
                    except Exception as e:  # a config a shape cannot take: show it, go on
                        line.append("  err")
                        print(f"  {name} {op} {dt} {direction} {level} {h}: {type(e).__name__}: {e}", file=sys.stderr)
                    finally:
                        torch.cuda.empty_cache()
                label = op if dt == "bf16" else f"{op}.{dt}"
                print(f"{name:>12} {label:>14} {direction:>4} {level:>6} | " + " ".join(line), flush=True)
    print("hidden: " + " ".join(f"{h:>5}" for h in hiddens))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"copy_gbs": copy, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
