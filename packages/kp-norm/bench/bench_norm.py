"""kp-norm benchmarks: RMSNorm / LayerNorm forward and backward, fused residual add, small batches.

    python packages/kp-norm/bench/bench_norm.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

Impls: kp-cuda and kp-triton (forced backends), torch (F.rms_norm / F.layer_norm), torch.compile
(of the plain fp32 reference below: what a user gets by compiling their own norm), and Liger when
installed, and QuACK's RMSNorm (CuTe DSL; forward and backward) when importable. bf16 throughout; the large cases hold 256 MiB of input, so they measure HBM bandwidth.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kp_core import bench

kp_norm = bench.require("kp_norm", "bench_norm", "pip install -e packages/kp-core -e packages/kp-norm")
# Optional baselines: their rows are skipped, with the reason, when they are missing. QuACK (CuTe
# DSL) comes to the device through ../shared/tools/fa4-quack-carry.sh, unpacked in /root/kp-baselines.
(LigerLayerNormFunction, LigerRMSNormFunction), _LIGER_MISSING = bench.optional(
    "Liger", "liger_kernel.ops.layer_norm:LigerLayerNormFunction", "liger_kernel.ops.rms_norm:LigerRMSNormFunction")
(_quack_rmsnorm,), _QUACK_MISSING = bench.optional("QuACK", "quack.rmsnorm:rmsnorm", site_dir="/root/kp-baselines")

HIDDEN = (1024, 2048, 4096, 8192, 16384, 65536, 262144)
QUICK_HIDDEN = (4096, 65536)
FUSED_HIDDEN = (4096, 16384)
SMALL_ROWS = (1, 4, 16, 64)
SMALL_HIDDEN = 4096
INPUT_BYTES = 256 << 20  # of x: large enough that no cache holds it
CPU_HIDDEN, CPU_ROWS = (64, 256), 16  # the no-GPU smoke run only exercises the code
RMS_EPS, LN_EPS = 1e-6, 1e-5
DTYPE, BF16 = torch.bfloat16, 2  # bytes per element


# Plain PyTorch references for the torch.compile baseline: fp32 math, one rounding at the end.
def ref_rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + RMS_EPS) * w.float()).to(x.dtype)


def ref_layer_norm(x, w, b):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).square().mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + LN_EPS) * w.float() + b.float()).to(x.dtype)


def ref_fused_add_rms_norm(x, r, w):
    h = x + r  # rounded to the activation dtype before normalizing, as unfused model code does
    return ref_rms_norm(h, w), h


@functools.cache
def _compiled(fn):
    # One compiled wrapper per function; the runner clears dynamo's cache before each case, so
    # every size gets its own static-shape compile.
    return torch.compile(fn, dynamic=False)


def _liger(name):
    def call(*args):
        if _LIGER_MISSING:
            raise RuntimeError(_LIGER_MISSING)
        if name == "rms":  # in_place=False: keep dy intact, as every other impl does
            return LigerRMSNormFunction.apply(*args, RMS_EPS, 0.0, "llama", False)
        if name == "layer":
            return LigerLayerNormFunction.apply(*args, LN_EPS)
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        return LigerFusedAddRMSNormFunction.apply(*args, RMS_EPS)
    return call


def _quack_rms(x, w):
    if _QUACK_MISSING:
        raise RuntimeError(_QUACK_MISSING)
    return _quack_rmsnorm(x, w, eps=RMS_EPS)


def _rms_impls():
    return {
        "kp-cuda": lambda x, w: kp_norm.rms_norm(x, w, RMS_EPS, backend="cuda"),
        "kp-triton": lambda x, w: kp_norm.rms_norm(x, w, RMS_EPS, backend="triton"),
        "torch": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, RMS_EPS),
        "torch.compile": lambda x, w: _compiled(ref_rms_norm)(x, w),
        "liger": _liger("rms"),
        "quack": _quack_rms,
    }


def _layer_impls():
    return {
        "kp-cuda": lambda x, w, b: kp_norm.layer_norm(x, w, b, LN_EPS, backend="cuda"),
        "kp-triton": lambda x, w, b: kp_norm.layer_norm(x, w, b, LN_EPS, backend="triton"),
        "torch": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS),
        "torch.compile": lambda x, w, b: _compiled(ref_layer_norm)(x, w, b),
        "liger": _liger("layer"),
    }


def _fused_impls():
    def torch_unfused(x, r, w):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, RMS_EPS), h
    return {
        "kp-cuda": lambda x, r, w: kp_norm.fused_add_rms_norm(x, r, w, RMS_EPS, backend="cuda"),
        "kp-triton": lambda x, r, w: kp_norm.fused_add_rms_norm(x, r, w, RMS_EPS, backend="triton"),
        "torch": torch_unfused,
        "torch.compile": lambda x, r, w: _compiled(ref_fused_add_rms_norm)(x, r, w),
        "liger": _liger("fused_add"),
    }


def _grad(y, wrt, dy):
    return torch.autograd.grad(y, wrt, dy, retain_graph=True)


def _backward(forward):
    """Time only the backward: the forward graph is built once per input set, untimed, and every
    impl's backward runs through the same autograd.grad call."""
    def setup(*inputs):
        *args, dy = inputs
        return forward(*args), tuple(args), dy
    return bench.Impl(run=_grad, setup=setup)


def _shapes(quick, device, hiddens=None):
    """(rows, hidden) pairs: x holds INPUT_BYTES of bf16 (tiny sizes on CPU)."""
    if device == "cpu":
        return [(CPU_ROWS, h) for h in CPU_HIDDEN]
    hiddens = hiddens or (QUICK_HIDDEN if quick else HIDDEN)
    return [(INPUT_BYTES // (h * BF16), h) for h in hiddens]


def _randn(*shape, device, grad=False):
    return torch.randn(*shape, device=device, dtype=DTYPE).requires_grad_(grad)


def cases(quick: bool, device: str):
    for layer in (False, True):
        name = "layer_norm" if layer else "rms_norm"
        impls = _layer_impls() if layer else _rms_impls()
        n_params = 2 if layer else 1  # weight (+ bias) vectors

        for rows, hidden in _shapes(quick, device):
            def make(rows=rows, hidden=hidden, layer=layer):
                params = [_randn(hidden, device=device) for _ in range(2 if layer else 1)]
                return (_randn(rows, hidden, device=device), *params)
            n = rows * hidden
            yield bench.Case(
                op=f"{name}_fwd", label=f"hidden={hidden}",
                params={"hidden": hidden, "rows": rows, "dtype": "bf16"}, make_inputs=make,
                bytes=(2 * n + n_params * hidden) * BF16,  # x read, y written, weight (+ bias) read
                ceiling="copy", impls=impls)

        for rows, hidden in _shapes(quick, device):
            def make_bwd(rows=rows, hidden=hidden, layer=layer):
                params = [_randn(hidden, device=device, grad=True) for _ in range(2 if layer else 1)]
                x = _randn(rows, hidden, device=device, grad=True)
                return (x, *params, _randn(rows, hidden, device=device))
            n = rows * hidden
            yield bench.Case(
                op=f"{name}_bwd", label=f"hidden={hidden}",
                params={"hidden": hidden, "rows": rows, "dtype": "bf16"}, make_inputs=make_bwd,
                # x, dy read, dx written; weight read, dweight (+ dbias) written
                bytes=(3 * n + (1 + n_params) * hidden) * BF16,
                ceiling="copy", impls={k: _backward(f) for k, f in impls.items()})

    for rows, hidden in _shapes(quick, device, FUSED_HIDDEN):
        def make_fused(rows=rows, hidden=hidden):
            return (_randn(rows, hidden, device=device), _randn(rows, hidden, device=device),
                    _randn(hidden, device=device))
        n = rows * hidden
        yield bench.Case(
            op="fused_add_rms_norm_fwd", label=f"hidden={hidden}",
            params={"hidden": hidden, "rows": rows, "dtype": "bf16"}, make_inputs=make_fused,
            bytes=(4 * n + hidden) * BF16,  # x, residual read; y, residual_out written; weight
            ceiling="copy", impls=_fused_impls())

    # Decode-like batches: launch- and host-bound, so time per call, device and host.
    small_rows = SMALL_ROWS if device != "cpu" else SMALL_ROWS[::3]
    for rows in small_rows:
        def make_small(rows=rows):
            return _randn(rows, SMALL_HIDDEN, device=device), _randn(SMALL_HIDDEN, device=device)
        yield bench.Case(
            op="rms_norm_fwd_small_batch", label=f"rows={rows}",
            params={"rows": rows, "hidden": SMALL_HIDDEN, "dtype": "bf16"}, make_inputs=make_small,
            host_timing=True, sweep="rows",
            impls={"kp": lambda x, w: kp_norm.rms_norm(x, w, RMS_EPS),
                   "torch": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, RMS_EPS)})

    # A training step's small norms: the host cost of one autograd backward (dx, dw, db).
    for rows in small_rows:
        def make_small_bwd(rows=rows):
            params = [_randn(SMALL_HIDDEN, device=device, grad=True) for _ in range(2)]
            x = _randn(rows, SMALL_HIDDEN, device=device, grad=True)
            return (x, *params, _randn(rows, SMALL_HIDDEN, device=device))
        yield bench.Case(
            op="layer_norm_bwd_small_batch", label=f"rows={rows}",
            params={"rows": rows, "hidden": SMALL_HIDDEN, "dtype": "bf16"}, make_inputs=make_small_bwd,
            host_timing=True, sweep="rows",
            impls={k: _backward(f) for k, f in _layer_impls().items() if k != "kp-triton"})


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="norm"))
