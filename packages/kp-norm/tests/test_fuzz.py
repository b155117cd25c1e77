"""Property-based fuzzing of kp-norm's four public functions against the float64 oracle.

Hypothesis draws whole calls: the op, leading dims and hidden size, layouts of x and the residual
(row-strided with NaN padding, column-major, permuted, stride-0 rows, overlapping rows, a misaligned
start, x aliasing the weight, residual aliasing x), the dtypes of every tensor (the weight's
independent of x's), weight/bias presence, weight_offset, eps, residual_dtype, value scales (plain,
a large mean over a small spread, tiny, a different scale per row), which inputs want a gradient
and which outputs get one, and a sequence of calls: no-grad (the eager inference fast path),
grad, and bad calls after a good one (a bias or weight of another shape, device or dtype, which
the fast path's per-signature plan cache must not wave through).

Every call is checked at every level of this machine (the `level` fixture) against the float64
oracle: `reference.norm_fwd(acc=float64, out_dtype=float64)` on the rounded residual sum
h = (x.to(p) + residual.to(p)).to(residual_dtype), p = promote_types(x, residual): exactly what
torch's unfused `(x + residual).to(residual_dtype)` stores (one rounding of the promoted-precision
sum), and must match bit for bit; except where residual_dtype is wider than p (bf16 + bf16 with
residual_dtype=float32), where the sum is taken in residual_dtype, not rounded to p first (README:
`residual_dtype=torch.float32` keeps the sum unrounded in fp32). Gradients: float64 autograd
through that, h's rounding passing the gradient straight through. Outputs are checked for x's
shape, dtype and device (h: residual_dtype), gradients for their input's dtype, shape and device,
and the inputs for being left unchanged.

Budget: KP_FUZZ_EXAMPLES examples per level (default: 500 reference-cpu, 300 triton-cpu under the
interpreter, 300 on a GPU: the file takes ~20 s with `-n 2` on CPU), from a seed derived from the
test name (KP_FUZZ_SEED mixes in another one to explore further). Each level's test prints how many
examples ran (`pytest -rP` shows it, with xdist too; KP_FUZZ_REPORT=path appends a JSON line per
level; the junit property `fuzz_examples` holds it); with KP_FUZZ_EXAMPLES set, a level that ran
fewer examples fails. KP_FUZZ_SECONDS=t stops checking after t seconds (the remaining draws are
not drawn; the report says how many ran): a campaign on a leased GPU ends on time and
still reports. KP_FUZZ_SHRINK=0 skips shrinking. KP_FUZZ_KEEP_GOING=1 (for long runs, e.g.
KP_FUZZ_EXAMPLES=10000 on a GPU) does not stop at the first failure: the test fails at the end with
every kind of failure seen, its count and its smallest example.

A failure prints hypothesis' falsifying example, a compact `Case(...)` naming every drawn parameter
(the `note`), and a `@reproduce_failure` blob. `test_hard_cases` runs a few explicit cases (the
known-hard ones) at every level, apart from the fuzzing.

Sizes: on CPU at most 16K elements (4K under Triton's interpreter, with its unreliable bf16 left
out), on a GPU up to 16384 columns, 1024 rows and 256K elements: a few ms an example.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import time
from collections import Counter
from typing import Optional

import pytest
import torch
import torch.nn.functional as F

if os.environ.get("KP_FUZZ_EXAMPLES"):
    import hypothesis  # asked for explicitly: a missing hypothesis must fail, not skip
else:
    hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from kp_core import BackendUnavailable
from kp_core import testing as kt
from kp_core.testing.oracle import TORCH_RATIO_EPS

import kp_norm
from kp_norm import reference

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SHORT = {F32: "f32", F16: "f16", BF16: "bf16", None: "None"}
OPS = ("rms_norm", "layer_norm", "fused_add_rms_norm", "fused_add_layer_norm")

# Hidden sizes of real models, and odd ones (tails, vector widths, non-powers of two).
HIDDEN_MODEL = (64, 96, 128, 256, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 7168, 8192)
HIDDEN_MODEL_GPU = (10240, 12288, 14336, 16384)
HIDDEN_ODD = (1, 2, 3, 5, 7, 31, 33, 127, 130, 257, 1000, 1023, 1025, 3001, 4099, 8191)
HIDDEN_ODD_GPU = (8193, 10007, 12289, 16383)
ROWS_SPECIAL = (1, 0, 2, 3, 5, 7, 17, 31, 33, 63, 65, 67)

LAYOUTS = ("contiguous", "row-strided", "column-major", "permuted", "expanded", "overlapping", "misaligned")


@dataclasses.dataclass(frozen=True)
class Budget:
    max_cols: int
    max_elems: int  # rows * cols of x
    max_rows: int
    gpu_sizes: bool
    dtypes: tuple
    default_examples: int


def _budget(backend: str, device: str) -> Budget:
    if device == "cpu" and backend == "triton":
        # Triton's interpreter: cost grows with the row length; its bf16 is unreliable (DESIGN.md).
        return Budget(4099, 4100, 70, False, (F32, F16), 300)
    if device == "cpu":
        return Budget(8192, 1 << 14, 70, False, (F32, F16, BF16), 500)
    return Budget(16384, 1 << 18, 1024, True, (F32, F16, BF16), 300)


def _requested_examples(budget: Budget) -> int:
    env = os.environ.get("KP_FUZZ_EXAMPLES")
    return int(env) if env else budget.default_examples


# ---------------------------------------------------------------------------------------------
# The drawn case


@dataclasses.dataclass(frozen=True)
class Scale:
    kind: str  # normal | large-shift | tiny | rowwise
    mean: float = 0.0
    std: float = 1.0

    def __repr__(self):
        if self.kind == "rowwise":
            return "rowwise(10^U(-3,3) per row)"
        return f"{self.kind}(mean={self.mean:g}, std={self.std:g})"


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    lead: tuple
    norm_shape: tuple
    x_dtype: torch.dtype
    x_layout: str
    x_scale: Scale
    residual_dtype_in: Optional[torch.dtype]  # the residual tensor's dtype (fused ops)
    r_layout: Optional[str]
    r_scale: Optional[Scale]
    residual_dtype: Optional[torch.dtype]  # the argument
    weight_dtype: Optional[torch.dtype]
    bias_dtype: Optional[torch.dtype]
    param_layout: str  # weight and bias: contiguous | strided
    offset: float
    eps: Optional[float]
    calls: tuple
    grad_wrt: tuple
    grad_outputs: str  # y | h | both
    dy_layout: str
    bad: Optional[str]
    pad: int
    overlap: int
    perm: tuple
    seed: int

    @property
    def fused(self) -> bool:
        return self.op.startswith("fused")

    @property
    def is_rms(self) -> bool:
        return "rms" in self.op

    @property
    def cols(self) -> int:
        return math.prod(self.norm_shape)

    @property
    def rows(self) -> int:
        return math.prod(self.lead)

    @property
    def shape(self) -> tuple:
        return self.lead + self.norm_shape

    def __repr__(self):
        s = SHORT
        parts = [
            f"op={self.op}",
            f"x={s[self.x_dtype]}{list(self.lead)}+{list(self.norm_shape)} {self._layout(self.x_layout)} {self.x_scale!r}",
        ]
        if self.fused:
            parts.append(f"residual={s[self.residual_dtype_in]} {self._layout(self.r_layout)} {self.r_scale!r}")
            parts.append(f"residual_dtype={s[self.residual_dtype]}")
        parts += [
            f"weight={s[self.weight_dtype]}", f"bias={s[self.bias_dtype]}", f"params={self.param_layout}",
            f"weight_offset={self.offset}", f"eps={self.eps}", f"calls={list(self.calls)}",
            f"grad_wrt={list(self.grad_wrt)}", f"grad_outputs={self.grad_outputs}", f"dy={self.dy_layout}",
            f"bad={self.bad}", f"seed={self.seed}",
        ]  # fmt: skip
        return "Case(" + ", ".join(parts) + ")"

    def _layout(self, layout):
        if layout == "row-strided":
            return f"row-strided(pad={self.pad})"
        if layout == "overlapping":
            return f"overlapping(row stride={self._overlap_stride()})"
        if layout == "permuted":
            return f"permuted(memory order={list(self.perm)})"
        return layout

    def _overlap_stride(self) -> int:
        return 0 if self.cols == 1 else 1 + (self.overlap - 1) % (self.cols - 1)


@functools.lru_cache(maxsize=None)  # one strategy object a size: hypothesis validates it once
def _rows_st(max_rows: int):
    special = [r for r in ROWS_SPECIAL if r <= max_rows]
    return st.one_of(st.sampled_from(special), st.integers(1, max(1, max_rows)))  # 0 from `special` only


@functools.lru_cache(maxsize=None)  # one strategy object a size: hypothesis validates it once
def _hidden_st(budget: Budget, cap: int):
    model = HIDDEN_MODEL + (HIDDEN_MODEL_GPU if budget.gpu_sizes else ())
    odd = HIDDEN_ODD + (HIDDEN_ODD_GPU if budget.gpu_sizes else ())
    return st.one_of(
        st.sampled_from(tuple(h for h in model if h <= cap) or (1,)),
        st.sampled_from(tuple(h for h in odd if h <= cap)),
        st.integers(1, cap),
    )


@functools.lru_cache(maxsize=None)  # one strategy object a size: hypothesis validates it once
def _scale_st():
    sign = st.sampled_from((1.0, -1.0))
    return st.one_of(
        st.builds(Scale, st.just("normal"), st.sampled_from((0.0, 0.5, -2.0)), st.sampled_from((1.0, 0.5, 3.0))),
        st.builds(
            lambda sg, m, sd: Scale("large-shift", sg * m, sd),
            sign, st.one_of(st.sampled_from((1e3, 3e3, 1e4)), st.floats(1e3, 1e4)),
            st.sampled_from((1e-2, 0.1, 1.0, 10.0)),
        ),  # fmt: skip
        st.builds(Scale, st.just("tiny"), st.just(0.0), st.sampled_from((1e-3, 1e-4, 1e-5))),
        st.just(Scale("rowwise")),
    )


def _tiny_floor(scale: Optional[Scale], floor: float) -> Optional[Scale]:
    if scale is None or scale.kind != "tiny" or scale.std >= floor:
        return scale
    return Scale("tiny", scale.mean, floor)


def _bad_candidates(case_shape: tuple, norm_shape: tuple, has_weight: bool, layer: bool, dtypes) -> dict:
    """Bad follow-up calls that must raise, by group: {group: [kind, ...]}."""
    expected = norm_shape if has_weight else case_shape[-1:]

    def mismatches(shape):  # a weight of this shape cannot normalize x
        return len(case_shape) < len(shape) or tuple(case_shape[len(case_shape) - len(shape):]) != tuple(shape)

    def name(kind, shape):
        return f"{kind}:{'x'.join(map(str, shape))}"

    groups = {"weight-device": ["weight-device"]}
    shapes = [(1,), (2 * norm_shape[0],) + norm_shape[1:], (norm_shape[0] + 1,) + norm_shape[1:]]
    groups["weight-shape"] = [name("weight-shape", s) for s in shapes if mismatches(s)]
    if layer:
        # (the fast path caches a plan per signature: a bias of another shape must still be checked)
        shapes = [(1,), (1,) + tuple(expected), (2 * expected[0],) + tuple(expected[1:])]
        groups["bias-shape"] = [name("bias-shape", s) for s in shapes if tuple(s) != tuple(expected)]
        groups["bias-device"] = ["bias-device"]
        if has_weight and len(dtypes) > 1:
            groups["bias-dtype"] = ["bias-dtype"]
    return {k: v for k, v in groups.items() if v}


@st.composite
def cases(draw, budget: Budget):
    dtypes = budget.dtypes
    op = draw(st.sampled_from(OPS))
    fused, layer = op.startswith("fused"), "layer" in op

    has_weight = draw(st.sampled_from((True, True, True, False)))
    multi = has_weight and draw(st.integers(0, 9)) == 9  # weight over the trailing two dims (shrinks to 1-D)
    if multi:
        a = draw(st.sampled_from((2, 3, 4)))
        norm_shape = (a, draw(_hidden_st(budget, budget.max_cols // a)))
    else:
        norm_shape = (draw(_hidden_st(budget, budget.max_cols)),)
    cols = math.prod(norm_shape)
    max_rows = max(1, min(budget.max_rows, budget.max_elems // cols))
    n_lead = draw(st.sampled_from((1, 0, 1, 1, 1, 2, 2, 3)))
    if n_lead == 0:
        lead = ()
    elif n_lead == 1:
        lead = (draw(_rows_st(max_rows)),)
    elif n_lead == 2:
        d0 = draw(st.integers(1, min(5, max_rows)))
        lead = (d0, draw(_rows_st(max_rows // d0)))
    else:
        d0 = draw(st.integers(1, min(3, max_rows)))
        d1 = draw(st.integers(1, min(4, max_rows // d0)))
        lead = (d0, d1, draw(_rows_st(max_rows // (d0 * d1))))
    shape = lead + norm_shape

    x_dtype = draw(st.sampled_from(dtypes))
    weight_dtype = draw(st.one_of(st.just(x_dtype), st.sampled_from(dtypes))) if has_weight else None
    has_bias = layer and draw(st.booleans())
    bias_dtype = (weight_dtype if has_weight else draw(st.sampled_from(dtypes))) if has_bias else None
    param_layout = draw(st.sampled_from(("contiguous", "strided"))) if (has_weight or has_bias) else "contiguous"
    offset = draw(st.sampled_from((0.0, 1.0))) if has_weight else 0.0
    eps = draw(st.sampled_from((None, 1e-6, 1e-5, 1e-12) if "rms" in op else (1e-5, 1e-6, 1e-12)))

    x_layout = draw(st.sampled_from(LAYOUTS + (("weight-alias",) if has_weight else ())))
    if x_layout == "weight-alias":
        x_dtype = weight_dtype
    x_scale = draw(_scale_st())

    r_dtype = r_layout = r_scale = residual_dtype = None
    if fused:
        r_layout = draw(st.sampled_from(LAYOUTS + ("same-as-x",)))
        r_dtype = x_dtype if r_layout == "same-as-x" else draw(st.one_of(st.just(x_dtype), st.sampled_from(dtypes)))
        r_scale = draw(_scale_st())
        choice = draw(st.sampled_from(("default", "x", "float32", "any")))
        # "any" draws narrower ones too: fp16/bf16 for an fp32 sum, bf16 for fp16 and back
        residual_dtype = {"default": None, "x": x_dtype, "float32": F32}.get(choice)
        if choice == "any":
            residual_dtype = draw(st.sampled_from(dtypes))

    rd_eff = (residual_dtype or torch.promote_types(x_dtype, r_dtype)) if fused else None
    if F16 in (x_dtype, r_dtype, rd_eff):
        # The input gradient is ~ rstd * dy * w, and rstd = 1/sqrt(var + eps) reaches 1e5 on tiny
        # rows and 1e6 on constant ones (a large mean in fp16 rounds a row to one value) with
        # eps = 1e-12: beyond fp16's 65504, where inf is the correct rounding and no relative
        # error can judge it. Keep rstd <= ~1e3 there.
        x_scale, r_scale = (_tiny_floor(sc, 1e-3) for sc in (x_scale, r_scale))
        if eps is not None and eps < 1e-6:
            eps = 1e-6

    calls = draw(st.lists(st.sampled_from(("grad", "nograd", "nograd:no_grad", "nograd:inference", "bad")), min_size=1, max_size=3))
    if all(c == "bad" for c in calls):
        calls = ["nograd"] + calls
    bad = None
    if "bad" in calls:
        groups = _bad_candidates(shape, norm_shape, has_weight, layer, dtypes)
        bad = draw(st.sampled_from(tuple(groups[draw(st.sampled_from(tuple(sorted(groups))))])))

    leaves = []
    if x_layout != "weight-alias":
        leaves.append("x")
    if fused and r_layout != "same-as-x":
        leaves.append("residual")
    if has_weight:
        leaves.append("weight")
    if has_bias:
        leaves.append("bias")
    grad_wrt = tuple(sorted(draw(st.sets(st.sampled_from(tuple(leaves)), min_size=1)), key=leaves.index))
    grad_outputs = draw(st.sampled_from(("both", "y", "h"))) if fused else "y"
    dy_layout = draw(st.sampled_from(("contiguous", "column-major", "expanded")))
    ndim = len(shape)
    return Case(
        op=op, lead=lead, norm_shape=norm_shape, x_dtype=x_dtype, x_layout=x_layout, x_scale=x_scale,
        residual_dtype_in=r_dtype, r_layout=r_layout, r_scale=r_scale, residual_dtype=residual_dtype,
        weight_dtype=weight_dtype, bias_dtype=bias_dtype, param_layout=param_layout, offset=offset, eps=eps,
        calls=tuple(calls), grad_wrt=grad_wrt, grad_outputs=grad_outputs, dy_layout=dy_layout, bad=bad,
        pad=draw(st.sampled_from((1, 3, 8, 64))), overlap=draw(st.integers(1, 1 << 16)),
        perm=tuple(draw(st.permutations(range(ndim)))) if ndim else (), seed=draw(st.integers(0, 2**31 - 1)),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Inputs: fresh values from the case's seed, laid out as drawn


def _values(shape, dtype, scale: Scale, device, seed) -> torch.Tensor:
    if scale.kind == "rowwise":
        v = kt.randn(shape, device=device, seed=seed)
        if len(shape) >= 2 and v.numel():
            g = kt.generator(seed + 1, device)
            rows = torch.rand(shape[:-1], generator=g, device=device)
            v = v * torch.pow(10.0, rows * 6 - 3)[..., None]
        return v.to(dtype)
    return kt.randn(shape, dtype=dtype, device=device, seed=seed, scale=scale.std, shift=scale.mean)


def _activation(case: Case, layout: str, dtype, scale: Scale, device, seed) -> torch.Tensor:
    shape, lead, norm = case.shape, case.lead, case.norm_shape
    if layout == "expanded":  # every row the same memory: stride 0 over the leading dims
        src = _values((1,) * len(lead) + norm, dtype, scale, device, seed)
        return src.expand(shape)
    if layout == "overlapping":  # row r starts s < cols elements after row r-1
        s, rows, cols = case._overlap_stride(), case.rows, case.cols
        base = _values((max((rows - 1) * s + cols, 1),), dtype, scale, device, seed)
        norm_strides = tuple(math.prod(norm[i + 1:]) for i in range(len(norm)))
        lead_strides = tuple(s * math.prod(lead[i + 1:]) for i in range(len(lead)))
        return base.as_strided(shape, lead_strides + norm_strides)
    v = _values(shape, dtype, scale, device, seed)
    if layout == "row-strided":
        return kt.row_strided(v, pad=case.pad)
    if layout == "column-major":
        order = list(reversed(range(v.dim())))
        return v.permute(order).contiguous().permute(order)
    if layout == "permuted":
        inverse = [case.perm.index(i) for i in range(v.dim())]
        return v.permute(list(case.perm)).contiguous().permute(inverse)
    if layout == "misaligned":  # contiguous, but the data starts one element into its storage
        base = kt.poisoned((v.numel() + 1,), dtype=dtype, device=device)
        out = base[1:].view(shape)
        out.copy_(v)
        return out
    return v


def _param(shape, dtype, layout, device, seed, scale, shift) -> torch.Tensor:
    v = kt.randn(shape, dtype=dtype, device=device, seed=seed, scale=scale, shift=shift)
    if layout == "strided":  # every other element of a NaN-filled buffer
        base = kt.poisoned((2 * v.numel(),), dtype=dtype, device=device)
        out = base[::2].view(shape)
        out.copy_(v)
        return out
    return v


@dataclasses.dataclass
class Raw:
    """The example's tensors as laid out for the call, without autograd state."""

    x: Optional[torch.Tensor]  # None: x is the weight expanded
    residual: Optional[torch.Tensor]  # None: no residual, or the residual is x
    weight: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]


def _raw(case: Case, device, seed_shift=0) -> Raw:
    seed = case.seed + seed_shift
    weight = bias = None
    if case.weight_dtype is not None:
        shift = 0.0 if case.offset else 1.0  # Gemma-style weights sit near 0 with the offset 1
        weight = _param(case.norm_shape, case.weight_dtype, case.param_layout, device, seed + 1, 0.5, shift)
    if case.bias_dtype is not None:
        bias = _param(case.norm_shape, case.bias_dtype, case.param_layout, device, seed + 2, 0.5, 0.0)
    x = None
    if case.x_layout != "weight-alias":
        x = _activation(case, case.x_layout, case.x_dtype, case.x_scale, device, seed + 3)
    residual = None
    if case.fused and case.r_layout != "same-as-x":
        residual = _activation(case, case.r_layout, case.residual_dtype_in, case.r_scale, device, seed + 4)
    return Raw(x, residual, weight, bias)


def _args(case: Case, raw: Raw, wrt=(), cast=None):
    """(x, residual, weight, bias, leaves) for one call; `wrt` names the inputs that require grad.

    cast=torch.float64 builds the oracle's leaves (contiguous float64 copies, all requiring grad);
    otherwise the leaves are detached views of the raw tensors, so the layouts are kept."""

    def leaf(t, name):
        if t is None:
            return None
        if cast is not None:
            return t.detach().to(cast).requires_grad_(True)
        return t.detach().requires_grad_(name in wrt)

    w, b = leaf(raw.weight, "weight"), leaf(raw.bias, "bias")
    x = w.expand(case.shape) if case.x_layout == "weight-alias" else leaf(raw.x, "x")
    r = None
    if case.fused:
        r = x if case.r_layout == "same-as-x" else leaf(raw.residual, "residual")
    leaves = {"x": x, "residual": r, "weight": w, "bias": b}
    return x, r, w, b, leaves


def _eps(case: Case) -> float:
    return torch.finfo(case.x_dtype).eps if case.eps is None else case.eps


def _residual_dtype(case: Case) -> Optional[torch.dtype]:
    if not case.fused:
        return None
    return case.residual_dtype or torch.promote_types(case.x_dtype, case.residual_dtype_in)


# ---------------------------------------------------------------------------------------------
# The oracle


class Oracle:
    """float64 forward and autograd of the op, on the rounded residual sum of the real inputs."""

    def __init__(self, case: Case, raw: Raw):
        self.case = case
        x, r, w, b, self.leaves = _args(case, raw, cast=torch.float64)
        cols = case.cols
        self.h_lp = None
        src = x
        if case.fused:
            lx = raw.weight.expand(case.shape) if raw.x is None else raw.x
            lr = lx if raw.residual is None else raw.residual
            self.h_lp = _rounded_sum(lx, lr, _residual_dtype(case))
            s64 = x + r
            src = s64 + (self.h_lp.double() - s64).detach()  # the rounded value; d h / d x = 1
        self.src = src
        y, _, _, _ = reference.norm_fwd(
            src.reshape(-1, cols), None, None if w is None else w.reshape(-1), None if b is None else b.reshape(-1),
            _eps(case), case.is_rms, case.offset, None, False, acc=torch.float64, out_dtype=torch.float64,
        )  # fmt: skip
        self.y = y.view(case.shape)
        self.kappa = self._layer_norm_condition(src.detach().reshape(-1, cols))

    def _layer_norm_condition(self, h) -> float:
        """max over rows of |mean| * rstd: how much of a LayerNorm row's digits hang on its mean.

        Any algorithm that rounds the mean to fp32 (torch's own, Triton's, the kernels') shifts
        x_hat by up to 2^-24 * this; rows of mean 1e4 and spread 1 lose 1e4 x fp32's precision. The
        dtype bound of such a row is widened by that much (8 x, for the sums around it), no more."""
        if self.case.is_rms or h.numel() == 0:
            return 0.0
        mean = h.mean(-1)
        rstd = torch.rsqrt((h - mean[:, None]).square().mean(-1) + _eps(self.case))
        return (mean.abs() * rstd).max().item()

    def bound(self, *dtypes) -> float:
        return max(_bound(*dtypes), 8 * self.kappa * 2.0**-24)

    def y_scale(self) -> float:
        """The size y has for unit-variance rows: a floor for the denominator of y's error, so a
        row that is constant (x_hat = 0, y = bias) is judged against the weight, not against 0."""
        if self.kappa == 0.0:
            return 0.0
        w = self.leaves["weight"]
        w_eff = 1.0 if w is None else (w.detach().reshape(-1) + self.case.offset)
        rows = max(self.case.rows, 1)
        return (torch.linalg.vector_norm(torch.as_tensor(w_eff, dtype=torch.float64)) * rows**0.5).item() if w is not None else (rows * self.case.cols) ** 0.5

    def dw_scale(self, dy) -> float:
        """||dy||: the size dweight = sum_rows dy * x_hat has for unit-variance rows, a floor for its
        error's denominator (as y_scale for y). On constant rows x_hat is 0 and so is dweight, and the
        fp32 mean's rounding (2^-24 kappa an element of x_hat) is all there is to judge."""
        if self.kappa == 0.0 or dy is None:
            return 0.0
        return torch.linalg.vector_norm(dy.detach().double()).item()

    def torch_out(self, args):
        """torch's own op on the same low-precision inputs, where it computes the same function
        (kp's error must then be within 2x torch's + eps, besides the dtype's bound)."""
        case = self.case
        x, _, w, b = args
        if case.offset or (w is not None and w.dtype != case.x_dtype) or (b is not None and b.dtype != case.x_dtype):
            return None
        h = x
        if case.fused:
            if self.h_lp.dtype != case.x_dtype:
                return None
            h = self.h_lp
        with torch.no_grad():
            h, w, b = h.detach(), None if w is None else w.detach(), None if b is None else b.detach()
            if case.is_rms:
                return F.rms_norm(h, case.norm_shape, w, _eps(case))
            return F.layer_norm(h, case.norm_shape, w, b, _eps(case))

    def torch_grads(self, args, dy) -> dict:
        """torch's own gradients where its op computes the same function (no offset, one dtype, not
        x aliasing the weight; fused ops: the parameters' only, which depend on h alone)."""
        case = self.case
        if dy is None or self.torch_out(args) is None or case.x_layout == "weight-alias":
            return {}
        x, _, w, b = args
        leaf = lambda t: None if t is None else t.detach().clone().requires_grad_(True)  # noqa: E731
        h = self.h_lp.detach() if case.fused else leaf(x)
        w, b = leaf(w), leaf(b)
        if case.fused and w is None and b is None:
            return {}
        with torch.enable_grad():
            if case.is_rms:
                y = F.rms_norm(h, case.norm_shape, w, _eps(case))
            else:
                y = F.layer_norm(h, case.norm_shape, w, b, _eps(case))
            named = {k: v for k, v in (("x", None if case.fused else h), ("weight", w), ("bias", b)) if v is not None}
            got = torch.autograd.grad(y, list(named.values()), dy, allow_unused=True)
        return {k: g for k, g in zip(named, got) if g is not None}

    def grads(self, dy, dres):
        """float64 gradients of every leaf (None where unused) for the given output gradients."""
        outs, gouts = [], []
        if dy is not None:
            outs.append(self.y)
            gouts.append(dy.double())
        if dres is not None:
            outs.append(self.src)
            gouts.append(dres.double())
        names = [k for k, v in self.leaves.items() if v is not None and v.requires_grad and v.is_leaf]
        got = torch.autograd.grad(outs, [self.leaves[k] for k in names], gouts, retain_graph=True, allow_unused=True)
        return dict(zip(names, got))

    def term_scale(self, dy) -> float:
        """||dy * w_eff * rstd||: the size of the terms whose difference is dx (it may cancel to ~0)."""
        if dy is None:
            return 0.0
        case = self.case
        h = self.src.detach().reshape(-1, case.cols)
        if not case.is_rms:
            h = h - h.mean(-1, keepdim=True)
        rstd = torch.rsqrt(h.square().mean(-1, keepdim=True) + _eps(case))
        w = self.leaves["weight"]
        w_eff = 1.0 if w is None else (w.detach().reshape(-1) + case.offset)
        return torch.linalg.vector_norm(dy.double().reshape(h.shape) * w_eff * rstd).item()


def _beyond_range(ref64, dtype) -> bool:
    """The exact result overflows the output dtype (fp16: a weight of 1e4, as x aliasing a weight of
    mean 1e4 makes it, times a LayerNorm gradient's rstd of 1e3): inf is then the correct rounding
    and no relative error can judge it."""
    return ref64.numel() > 0 and ref64.abs().max().item() > torch.finfo(dtype).max


def _rounded_sum(x, residual, residual_dtype):
    """h as the fused ops must store it.

    p = torch's promotion of x and residual. Where residual_dtype is p or does not hold p (narrower,
    or bf16 against fp16): what torch's unfused `(x + residual).to(residual_dtype)` stores, the sum
    rounded to p, then to residual_dtype. Where residual_dtype is wider than p (bf16 + bf16 kept in
    fp32): the sum rounded once to residual_dtype, not to p first (README: residual_dtype=float32
    keeps the sum unrounded in fp32)."""
    p = torch.promote_types(x.dtype, residual.dtype)
    q = residual_dtype if torch.promote_types(p, residual_dtype) == residual_dtype else p
    return (x.to(q) + residual.to(q)).to(residual_dtype)


def _forward_oracle(case: Case, raw: Raw) -> Oracle:
    with torch.enable_grad():
        return Oracle(case, raw)


# ---------------------------------------------------------------------------------------------
# Calling kp and checking


def _call(case: Case, backend, x, r, w, b):
    kw = dict(weight_offset=case.offset, backend=backend)
    if case.op == "rms_norm":
        return kp_norm.rms_norm(x, w, case.eps, **kw), None
    if case.op == "layer_norm":
        return kp_norm.layer_norm(x, w, b, case.eps, **kw), None
    if case.op == "fused_add_rms_norm":
        return kp_norm.fused_add_rms_norm(x, r, w, case.eps, residual_dtype=case.residual_dtype, **kw)
    return kp_norm.fused_add_layer_norm(x, r, w, b, case.eps, residual_dtype=case.residual_dtype, **kw)


def _poison(case: Case, device):
    n = max(case.rows * case.cols, 1) * 4
    kt.poison_allocator(device, [n] * 6)


def _bound(*dtypes) -> float:
    return max(kt.REL_ERROR_BOUND[d] for d in dtypes if d is not None)


class Checker:
    def __init__(self, case: Case, backend: str, device: str, stats: Counter):
        self.case, self.backend, self.device, self.stats = case, backend, device, stats

    def serve(self, x, r, w, b):
        """kp's call at this level. A level may refuse a dtype combination with BackendUnavailable
        (DESIGN: auto picks a level that "supports the arch, dtype and shape"), then `auto` must
        serve it; refusing a layout is never allowed (README: non-contiguous inputs are accepted)."""
        case = self.case
        _poison(case, self.device)
        try:
            return _call(case, self.backend, x, r, w, b)
        except BackendUnavailable as e:
            if self.backend != "cuda":
                raise AssertionError(f"the {self.backend} level must serve every call: {e}") from e
            with torch.no_grad():
                plain = [None if t is None else t.detach().contiguous() for t in (x, r, w, b)]
                try:
                    _call(case, self.backend, *plain)
                except BackendUnavailable:
                    pass
                else:
                    raise AssertionError(f"the cuda level refused a layout it serves when contiguous: {e}") from e
            self.stats["refused (dtypes): served by auto"] += 1
            _note(f"cuda refused ({e}); checking backend='auto'")
            _poison(case, self.device)
            return _call(case, "auto", x, r, w, b)

    def forward(self, y, h, x, oracle: Oracle, torch_args, label):
        case = self.case
        assert isinstance(y, torch.Tensor), f"{label}: y is {type(y).__name__}"
        assert tuple(y.shape) == case.shape, f"{label}: y has shape {tuple(y.shape)}, x has {case.shape}"
        assert y.dtype == case.x_dtype, f"{label}: y is {y.dtype}, x is {case.x_dtype}"
        assert y.device == x.device, f"{label}: y is on {y.device}, x on {x.device}"
        self._check_y(y, oracle, torch_args, label)
        if case.fused:
            assert isinstance(h, torch.Tensor), f"{label}: the residual output is {type(h).__name__}"
            rd = _residual_dtype(case)
            assert tuple(h.shape) == case.shape and h.dtype == rd and h.device == x.device, (
                f"{label}: residual output {h.dtype}{tuple(h.shape)} on {h.device}, expected {rd}{case.shape} on {x.device}"
            )
            # One rounding of the promoted-precision sum, as torch's unfused add: bit for bit.
            torch.testing.assert_close(h, oracle.h_lp, rtol=0, atol=0, msg=lambda m: f"{label}: h = x + residual: {m}")
        else:
            assert h is None

    def _check_y(self, y, oracle: Oracle, torch_args, label):
        case = self.case
        if _beyond_range(oracle.y, case.x_dtype):
            self.stats["y beyond its dtype's range: unchecked"] += 1
            return
        # Rows whose conditioning widens the bound are judged by it, or by torch's own error where
        # torch's op computes the same function (kp may be as far off as 2x torch there): torch's
        # error is a third of 2^-24 x kappa on some rows, Triton's one kappa, both what fp32
        # allows; and torch's fp32 CPU LayerNorm of two columns at mean 7e3, spread 1e-2 and eps
        # 1e-12 is 15x past the kappa bound (fuzzed), which kp is not asked to beat.
        bound = oracle.bound(case.x_dtype)
        torch_y = oracle.torch_out(torch_args)
        conditioned = bound > _bound(case.x_dtype)
        if conditioned and torch_y is not None:
            bound = max(bound, 2 * kt.rel_error(torch_y, oracle.y, oracle.y_scale()) + TORCH_RATIO_EPS[case.x_dtype])
        kt.assert_matches_oracle(
            y, oracle.y, dtype=case.x_dtype, name=f"{label}: y", bound=bound,
            torch_out=None if conditioned else torch_y, scale=oracle.y_scale(),
        )  # fmt: skip

    def no_grad_call(self, raw: Raw, oracle: Oracle, flavor: str):
        case = self.case
        ctx = {"nograd": contextlib.nullcontext, "nograd:no_grad": torch.no_grad, "nograd:inference": torch.inference_mode}[flavor]
        # plain: nothing requires grad; no_grad / inference: the leaves that would, under the mode
        wrt = () if flavor == "nograd" else case.grad_wrt
        x, r, w, b, _ = _args(case, raw, wrt)
        with ctx():
            y, h = self.serve(x, r, w, b)
        assert not y.requires_grad, f"{flavor}: y requires grad"
        self.forward(y, h, x, oracle, (x, r, w, b), flavor)

    def grad_call(self, raw: Raw, oracle: Oracle, dy, dres, want):
        case = self.case
        x, r, w, b, leaves = _args(case, raw, case.grad_wrt)
        y, h = self.serve(x, r, w, b)
        self.forward(y, h, x, oracle, (x, r, w, b), "grad")
        outs, gouts = [], []
        if dy is not None:
            outs.append(y)
            gouts.append(dy)
        if dres is not None:
            outs.append(h)
            gouts.append(dres)
        names = [n for n in ("x", "residual", "weight", "bias") if n in case.grad_wrt]
        assert y.requires_grad, "y does not require grad though an input does"
        # h need not: it does not depend on the weight or the bias
        pairs = [(o, g) for o, g in zip(outs, gouts) if o.requires_grad]
        _poison(case, self.device)
        got = [None] * len(names)
        if pairs:
            got = torch.autograd.grad([o for o, _ in pairs], [leaves[n] for n in names], [g for _, g in pairs], allow_unused=True)
        scale = oracle.term_scale(dy)
        rd = _residual_dtype(case)
        # Ill-conditioned LayerNorm rows: as for y, kp may be as far off as 2x torch's own gradients.
        conditioned = oracle.bound(case.x_dtype) > _bound(case.x_dtype)
        torch_g = oracle.torch_grads((x, r, w, b), dy) if conditioned else {}
        for name, g in zip(names, got):
            leaf = leaves[name]
            ref = want.get(name)
            if ref is None:
                ref = torch.zeros(leaf.shape, dtype=torch.float64)
            if g is None:
                g = torch.zeros(leaf.shape, dtype=leaf.dtype, device=leaf.device)
            assert g.dtype == leaf.dtype, f"d{name} is {g.dtype}, {name} is {leaf.dtype}"
            assert tuple(g.shape) == tuple(leaf.shape), f"d{name} has shape {tuple(g.shape)}, {name} has {tuple(leaf.shape)}"
            assert g.device == leaf.device, f"d{name} is on {g.device}, {name} on {leaf.device}"
            # x's and the residual's gradients pass through h, of dtype residual_dtype, as in
            # torch's unfused code; the weight's too when x is the weight.
            through_h = case.fused and (name in ("x", "residual") or case.x_layout == "weight-alias")
            dx_like = name in ("x", "residual") or (name == "weight" and case.x_layout == "weight-alias")
            bound = oracle.bound(leaf.dtype, rd if through_h else None)
            if _beyond_range(ref, leaf.dtype):
                self.stats["gradient beyond its dtype's range: unchecked"] += 1
                continue
            floor = scale if dx_like else (oracle.dw_scale(dy) if name == "weight" else 0.0)
            if name in torch_g:
                torch_err = kt.rel_error(torch_g[name], ref, floor)
                bound = max(bound, 2 * torch_err + TORCH_RATIO_EPS[leaf.dtype])
            kt.assert_matches_oracle(g, ref, dtype=leaf.dtype, bound=bound, scale=floor, name=f"d{name}")

    def bad_sequence(self):
        """good call, bad call, good call: a wrong weight or bias right after a good call of the
        same signature (which warmed the fast path's plan cache) must be refused, and the next
        good call, with other parameter values, must be right.

        The calls use a contiguous x and contiguous parameters, with a bias beside the weight for
        a bias kind, so that the good call takes the eager fast path where one exists."""
        case = self.case
        kind, _, spec = case.bad.partition(":")
        warm = dataclasses.replace(
            case,
            x_layout="weight-alias" if case.x_layout == "weight-alias" else "contiguous",
            param_layout="contiguous",
            bias_dtype=case.bias_dtype or (case.weight_dtype if kind.startswith("bias") else None),
        )  # fmt: skip
        chk = Checker(warm, self.backend, self.device, self.stats)
        raw = _raw(warm, self.device, seed_shift=1000)
        chk.no_grad_call(raw, _forward_oracle(warm, raw), "nograd")

        x, r, w, b, _ = _args(warm, raw)
        other = "cpu" if self.device.startswith("cuda") else "meta"
        p_dtype = warm.weight_dtype or warm.bias_dtype or warm.x_dtype
        seed = case.seed + 5
        if kind == "weight-shape":
            shape = tuple(int(n) for n in spec.split("x"))
            w, error = kt.randn(shape, dtype=p_dtype, device=self.device, seed=seed, shift=1.0), ValueError
        elif kind == "weight-device":
            w = kt.randn(warm.norm_shape, dtype=p_dtype, device=self.device, seed=seed, shift=1.0).to(other)
            error = ValueError
        elif kind == "bias-shape":
            shape = tuple(int(n) for n in spec.split("x"))
            b, error = kt.randn(shape, dtype=p_dtype, device=self.device, seed=seed), ValueError
        elif kind == "bias-device":
            shape = warm.norm_shape if w is not None else warm.shape[-1:]
            b, error = kt.randn(shape, dtype=p_dtype, device=self.device, seed=seed).to(other), ValueError
        else:  # bias-dtype: the weight's and the bias' dtypes must agree
            dt = next(d for d in (F16, F32, BF16) if d != warm.weight_dtype)
            b, error = kt.randn(warm.norm_shape, dtype=dt, device=self.device, seed=seed), TypeError
        what = f"{case.op} with a {kind} {spec or ''} after a good call".replace("  ", " ")
        _poison(warm, self.device)
        try:
            with torch.no_grad():
                _call(warm, self.backend, x, r, w, b)
        except error:
            pass
        except Exception as e:
            raise AssertionError(f"{what}: raised {type(e).__name__} ({e}), expected {error.__name__}") from e
        else:
            raise AssertionError(f"{what}: served, expected {error.__name__} (the fast path's plan cache let it through?)")

        fresh = _raw(warm, self.device, seed_shift=2000)
        if warm.x_layout != "weight-alias":
            fresh = Raw(raw.x, raw.residual, fresh.weight, fresh.bias)
        chk.no_grad_call(fresh, _forward_oracle(warm, fresh), "nograd")


def _note(text: str):
    """hypothesis' note (printed with a falsifying example); nothing outside a hypothesis test."""
    with contextlib.suppress(hypothesis.errors.InvalidArgument):
        note(text)


def _check_example(case: Case, backend: str, device: str, stats: Counter):
    _note(repr(case))
    raw = _raw(case, device)
    before = {k: v.clone() for k, v in _tensors(raw).items()}
    oracle = _forward_oracle(case, raw)
    chk = Checker(case, backend, device, stats)

    dy = dres = want = None
    if "grad" in case.calls:
        if case.grad_outputs in ("y", "both"):
            dy = _activation(case, case.dy_layout, case.x_dtype, Scale("normal"), device, case.seed + 7)
        if case.grad_outputs in ("h", "both"):
            dres = kt.randn(case.shape, dtype=_residual_dtype(case), device=device, seed=case.seed + 8)
        with torch.enable_grad():
            want = _oracle_grads(case, oracle, dy, dres)

    for call in case.calls:
        if call == "grad":
            chk.grad_call(raw, oracle, dy, dres, want)
        elif call == "bad":
            chk.bad_sequence()
        else:
            chk.no_grad_call(raw, oracle, call)
        stats[call.split(":")[0] + " calls"] += 1

    for k, v in _tensors(raw).items():
        assert torch.equal(v, before[k]), f"a call wrote into its input {k}"
    stats[case.op] += 1


def _tensors(raw: Raw) -> dict:
    return {k: v for k, v in vars(raw).items() if v is not None}


def _oracle_grads(case: Case, oracle: Oracle, dy, dres) -> dict:
    """float64 gradients for the leaves of the grad call (x aliasing the weight: the weight's)."""
    grads = oracle.grads(dy, dres)
    return {n: grads.get(n) for n in case.grad_wrt}


# ---------------------------------------------------------------------------------------------
# Explicit examples: run first at every level, whatever the budget


def _explicit(**kw) -> Case:
    base = dict(
        op="layer_norm", lead=(5,), norm_shape=(130,), x_dtype=F32, x_layout="contiguous", x_scale=Scale("normal", 0.5, 1.0),
        residual_dtype_in=None, r_layout=None, r_scale=None, residual_dtype=None, weight_dtype=F32, bias_dtype=F32,
        param_layout="contiguous", offset=0.0, eps=1e-5, calls=("nograd", "grad"), grad_wrt=("x", "weight", "bias"),
        grad_outputs="y", dy_layout="contiguous", bad=None, pad=3, overlap=57, perm=(0, 1), seed=1234,
    )  # fmt: skip
    base.update(kw)
    if base["op"].startswith("fused") and base["r_layout"] is None:
        base.update(r_layout="contiguous", r_scale=Scale("normal"), residual_dtype_in=base["x_dtype"])
    return Case(**base)


EXPLICIT = [
    # the fast path's plan cache must not serve a bias of another shape or device
    _explicit(calls=("nograd", "bad"), bad="bias-shape:1"),
    _explicit(calls=("nograd", "bad"), bad="bias-shape:1x130"),
    _explicit(calls=("nograd", "bad"), bad="bias-shape:260"),
    _explicit(calls=("nograd", "bad"), bad="bias-device"),
    _explicit(op="rms_norm", bias_dtype=None, grad_wrt=("x", "weight"), calls=("nograd", "bad"), bad="weight-shape:260"),
    # stride-0 and overlapping rows, x aliasing the weight
    _explicit(op="rms_norm", lead=(4,), norm_shape=(1024,), x_dtype=F16, weight_dtype=F16, bias_dtype=None,
              x_layout="expanded", grad_wrt=("x", "weight")),
    _explicit(op="fused_add_rms_norm", lead=(6,), norm_shape=(96,), x_dtype=F16, weight_dtype=F32, bias_dtype=None,
              x_layout="overlapping", overlap=40, grad_wrt=("x", "residual", "weight"), grad_outputs="both"),
    _explicit(lead=(3, 2), norm_shape=(64,), x_layout="weight-alias", grad_wrt=("weight", "bias")),
    # residual_dtype narrower than x + residual: rounded once from the fp32 sum
    _explicit(op="fused_add_layer_norm", x_dtype=F32, residual_dtype=F16, x_scale=Scale("normal", 0.0, 3.0),
              grad_wrt=("x", "residual", "weight"), grad_outputs="both"),
    # LayerNorm of rows with a large mean (catastrophic cancellation of E[x^2] - E[x]^2)
    _explicit(lead=(3,), norm_shape=(1024,), x_dtype=F16, weight_dtype=F16, bias_dtype=F16,
              x_scale=Scale("large-shift", 3000.0, 10.0)),
    _explicit(lead=(3,), norm_shape=(1024,), x_scale=Scale("large-shift", -1e4, 1.0)),
    # constant rows (bf16 rounds 1000 +- 0.01 to 1000): x_hat = 0 exactly in float64, while an fp32
    # mean's rounding leaves 2^-24 kappa (kappa = 3e5 at eps 1e-5) in each element; dweight is then
    # judged against ||dy||, not against its exact value 0 (found on the H100: cuda, 65 x 64)
    _explicit(lead=(1, 1, 65), norm_shape=(64,), x_dtype=BF16, x_layout="column-major", weight_dtype=BF16,
              bias_dtype=None, param_layout="strided", x_scale=Scale("large-shift", 1000.0, 0.01), grad_wrt=("x", "weight"),
              calls=("grad",), seed=2),
]


# ---------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("case", EXPLICIT, ids=lambda c: f"{c.op}-{c.x_layout}-{c.bad or c.x_scale.kind}".replace(":", "-"))
def test_hard_cases(level, case):
    """The explicit cases above, at every level, apart from the fuzzing (a failure here does not
    stop the fuzzing of the level)."""
    backend, device = level
    _check_example(case, backend, device, Counter())


_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example, HealthCheck.filter_too_much]


def _failure_key(e: BaseException) -> str:
    """A failure's kind: its message with the numbers taken out."""
    first = str(e).strip().split("\n")[0]
    return type(e).__name__ + ": " + re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", first)[:200]


class _OutOfTime(Exception):
    """KP_FUZZ_SECONDS ran out: not a failure of the code under test."""


def test_fuzz_against_float64_oracle(level, request, record_property):
    """KP_FUZZ_EXAMPLES hypothesis examples at this level (see the module docstring).

    KP_FUZZ_KEEP_GOING=1: a failing example does not stop the run; the test fails at the end with
    every kind of failure seen, its count and its smallest example (unshrunk): one long run (a GPU
    campaign) then reports all it found, not the first bug alone."""
    backend, device = level
    budget = _budget(backend, device)
    n = _requested_examples(budget)
    seed = kt.seed_from(f"{request.node.name}:{os.environ.get('KP_FUZZ_SEED', '')}")
    keep_going = os.environ.get("KP_FUZZ_KEEP_GOING", "0") not in ("", "0")
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("KP_FUZZ_SHRINK", "1") != "0" and not keep_going:
        phases.append(Phase.shrink)
    stats: Counter = Counter()
    failures: dict = {}
    seconds = float(os.environ.get("KP_FUZZ_SECONDS", "inf"))
    start = time.perf_counter()

    @hypothesis.seed(seed)
    @settings(
        max_examples=n, deadline=None, database=None, derandomize=False, suppress_health_check=_HEALTH,
        phases=phases, print_blob=True, report_multiple_bugs=True,
    )  # fmt: skip
    @given(case=cases(budget))
    def fuzz(case):
        if time.perf_counter() - start > seconds:
            raise _OutOfTime  # ends the run: skipped draws would still cost ~5 ms each
        stats["examples"] += 1
        if not keep_going:
            _check_example(case, backend, device, stats)
            return
        try:
            _check_example(case, backend, device, stats)
        except Exception as e:  # noqa: BLE001 - every failure is collected and reported below
            stats["failed"] += 1
            failures.setdefault(_failure_key(e), []).append((case.rows * case.cols, repr(case), str(e).strip()[:2000]))

    completed = False
    try:
        fuzz()
        completed = True
    except _OutOfTime:
        completed = True
    finally:
        elapsed = time.perf_counter() - start
        ran = stats.pop("examples", 0)
        failed = stats.pop("failed", 0)
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(stats.items()))
        outcome = f"{failed} failed" if completed else "stopped by the failure below (shrinking included)"
        line = (
            f"kp-norm fuzz [{backend}-{device}]: {ran} examples ran, {outcome}, of {n} requested, "
            f"in {elapsed:.1f} s ({detail})"
        )
        print(line)
        record_property("fuzz_examples", ran)
        record_property("fuzz_failed", failed)
        report = os.environ.get("KP_FUZZ_REPORT")
        if report:
            with open(report, "a") as f:
                row = {"level": f"{backend}-{device}", "examples": ran, "failed": failed, "requested": n, "seconds": round(elapsed, 1)}
                f.write(json.dumps({**row, **stats, "failures": {k: len(v) for k, v in failures.items()}}) + "\n")
    if failures:
        parts = [line, f"{len(failures)} kinds of failure:"]
        for key, seen in sorted(failures.items(), key=lambda kv: -len(kv[1])):
            size, case, message = min(seen, key=lambda t: (t[0], len(t[1])))
            parts.append(f"\n[{len(seen)}x] {key}\n  smallest: {case}\n  {message}")
        raise AssertionError("\n".join(parts))
    if os.environ.get("KP_FUZZ_EXAMPLES"):
        assert ran >= n, line
