"""kp-fused-mlp benchmarks: SwiGLU and GeGLU (tanh, Gemma's) forward and backward at transformer MLP sizes.

    python packages/kp-fused-mlp/bench/bench_glu.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

Impls: kp-cuda and kp-triton (forced backends) on the two halves, kp-cuda-packed on the packed
tensor itself (one packed gradient), torch (F.silu(gate) * up, eager), torch.compile-packed (the
same expression in fp32, rounded once, compiled on the packed tensor: what a user gets compiling
their own MLP), and Liger's SwiGLU and
tanh GeGLU when installed (on contiguous halves, as its LlamaMLP gives them). bf16; gate and up are
the halves of one packed [tokens, 2 * intermediate] tensor, as a fused gate-up projection writes them. Memory-bound: the ceiling is copy bandwidth.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from kp_core import bench

kp_fused_mlp = bench.require("kp_fused_mlp", "bench_glu", "pip install -e packages/kp-core -e packages/kp-fused-mlp")
# Liger is an optional baseline: its rows are skipped, with the reason, when it is missing.
(LigerSiLUMulFunction, LigerGELUMulFunction), _LIGER_MISSING = bench.optional(
    "Liger", "liger_kernel.ops.swiglu:LigerSiLUMulFunction", "liger_kernel.ops.geglu:LigerGELUMulFunction")

# (tokens, intermediate): Llama-3-8B's 14336 and a larger model's 28672.
SHAPES = [(t, i) for i in (14336, 28672) for t in (1024, 4096, 8192)]
QUICK_SHAPES = [(4096, 14336)]
CPU_SHAPES = [(16, 64), (16, 256)]  # the no-GPU smoke run only exercises the code
DTYPE, BF16 = torch.bfloat16, 2  # bytes per element


def ref_swiglu(gate, up):  # the torch.compile baseline: fp32 math, one rounding
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def ref_geglu_tanh(gate, up):
    return (F.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def _geglu_tanh(*args, **kwargs):
    return kp_fused_mlp.geglu(*args, approximate="tanh", **kwargs)


# op: (kp's function, torch eager, the torch.compile baseline)
OPS = {
    "swiglu": (kp_fused_mlp.swiglu, lambda g, u: F.silu(g) * u, ref_swiglu),
    "geglu_tanh": (_geglu_tanh, lambda g, u: F.gelu(g, approximate="tanh") * u, ref_geglu_tanh),
}


@functools.cache
def _compiled_packed(op):
    """torch.compile of the op on the packed tensor, the halves sliced inside the graph: its backward
    writes d(gate_up) in one fused kernel (compiling the op on two views instead leaves the slices'
    backward, a zero fill and two copies, outside the graph: 5x slower, not a fair baseline)."""
    ref = OPS[op][2]

    def packed(gate_up):
        h = gate_up.shape[-1] // 2
        return ref(gate_up[:, :h], gate_up[:, h:])
    return torch.compile(packed, dynamic=False)


def _liger(op):
    """Liger's SwiGLU / GeGLU (tanh). Its functions copy non-contiguous inputs, so (as its own LlamaMLP
    calls them, on separate gate and up projections) the halves are made contiguous in `_args`, untimed."""
    def call(gate, up):
        if _LIGER_MISSING:
            raise RuntimeError(_LIGER_MISSING)
        return (LigerSiLUMulFunction if op == "swiglu" else LigerGELUMulFunction).apply(gate, up)
    return call


def _impls(op):
    """Impls on (gate, up) halves; the -packed ones on the packed tensor (up None)."""
    fn, eager, _ = OPS[op]
    impls = {
        "kp-cuda": lambda g, u: fn(g, u, backend="cuda"),
        "kp-cuda-packed": lambda gate_up, _: fn(gate_up, backend="cuda"),
        "kp-triton": lambda g, u: fn(g, u, backend="triton"),
        "torch": eager,
        "torch.compile-packed": lambda gate_up, _: _compiled_packed(op)(gate_up),
    }
    impls["liger"] = _liger(op)
    return impls


def _grad(y, wrt, dy):
    return torch.autograd.grad(y, wrt, dy, retain_graph=True)


def _args(gate_up, name):
    """An impl's arguments: the two halves of gate_up, or (kp-cuda-packed) the packed tensor itself,
    or (liger) contiguous copies of the halves, leaves of their own (made untimed, in setup)."""
    if name.endswith("-packed"):
        return gate_up, None
    h = gate_up.shape[-1] // 2
    if name == "liger":
        return tuple(t.detach().contiguous().requires_grad_(gate_up.requires_grad) for t in (gate_up[:, :h], gate_up[:, h:]))
    return gate_up[:, :h], gate_up[:, h:]


def _backward(forward, name):
    """Time only the backward: the forward graph is built once per input set, untimed."""
    def setup(gate_up, dy):
        args = _args(gate_up, name)
        wrt = args if name == "liger" else (gate_up,)
        return forward(*args), wrt, dy
    return bench.Impl(run=_grad, setup=setup)


def _forward(fn, name):
    return bench.Impl(run=fn, setup=lambda gate_up: _args(gate_up, name))


def _same_bytes_copy(moved: int):
    """A device copy moving the op's bytes: the ceiling at this size. The run's copy ceiling is a
    1 GiB copy; at 1024 tokens a copy of an op's ~88 MB reaches only ~82% of that rate (H200)."""
    def setup(first, *_):
        src = torch.empty(moved // 2, dtype=first.dtype, device=first.device)
        return src, torch.empty_like(src)
    return {"memcpy-same-bytes": bench.Impl(run=lambda src, dst: dst.copy_(src), setup=setup)}


def cases(quick: bool, device: str):
    shapes = CPU_SHAPES if device == "cpu" else QUICK_SHAPES if quick else SHAPES
    for op in OPS:
        for tokens, inter in shapes:
            n = tokens * inter
            params = {"tokens": tokens, "intermediate": inter, "dtype": "bf16"}
            impls = _impls(op)

            def make(tokens=tokens, inter=inter):
                return (torch.randn(tokens, 2 * inter, device=device, dtype=DTYPE),)
            yield bench.Case(
                op=f"{op}_fwd", label=f"{tokens}x{inter}", params=params, make_inputs=make,
                bytes=3 * n * BF16,  # gate, up read; y written
                ceiling="copy", impls={**{k: _forward(f, k) for k, f in impls.items()}, **_same_bytes_copy(3 * n)})

            def make_bwd(tokens=tokens, inter=inter):
                gate_up = torch.randn(tokens, 2 * inter, device=device, dtype=DTYPE, requires_grad=True)
                return gate_up, torch.randn(tokens, inter, device=device, dtype=DTYPE)
            yield bench.Case(
                op=f"{op}_bwd", label=f"{tokens}x{inter}", params=params, make_inputs=make_bwd,
                bytes=5 * n * BF16,  # dy, gate, up read; dgate, dup written
                ceiling="copy", impls={**{k: _backward(f, k) for k, f in impls.items()}, **_same_bytes_copy(5 * n)})


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="glu"))
