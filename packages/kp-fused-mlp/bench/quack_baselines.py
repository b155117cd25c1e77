"""QuACK (quack-kernels 0.6.5, CuTe-DSL kernels by Tri Dao et al.) as optional baselines for
kp-fused-mlp's benchmarks. Importing this never fails: without QuACK (a CPU machine, or a device
where the carry of ../shared/tools/fa4-quack-carry.sh was not staged) `QUACK_MISSING` holds the
reason and every adapter raises it, so the bench skips QuACK's rows with that reason.

    gemm(x, w)                        y = x @ w.T                      quack.gemm_interface.gemm
    linear_act(x, w, bias, act)       act(x @ w.T + bias), inference   gemm_act (bias+act epilogue)
    gated_mlp(H, I, act, ...)         down(act(x Wg^T) * (x Wu^T))     quack.linear: linear_gated_func,
                                      forward and backward                       gated_linear_func
    check(device="cuda")              each adapter against fp32 torch; run it before timing

Layouts: QuACK's GEMMs take A (M, K) and B (K, N); a weight w [N, K] (nn.Linear's) goes in as the
view w.T (strides (1, K), K-major B): no copy, exactly what quack.linear.LinearFunc passes.

Tuning: QuACK's default, autotuned (`tuned=True`: on the first call of each shape every candidate
config is compiled, ~44 for an sm90 GEMM on a pool of 8 compile processes, and timed; results are
cached on disk under QUACK_CACHE_DIR, default ~/.quack/cache). KP_QUACK_TUNED=0 takes QuACK's
untuned default configs instead (nvMatmulHeuristics, its pure-GEMM heuristic, is not carried), faster to
start but a weaker baseline: say which one a report used. QUACK_PRINT_AUTOTUNING=1 shows progress.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from kp_core import bench

# quack.mlp (MLP, mlp_func) imports einops, which the carry does not include; quack.linear does not,
# so gated_mlp composes the same two autograd functions that mlp_func's default path calls.
(_gemm, _gemm_act, _linear_gated_func, _gated_linear_func), QUACK_MISSING = bench.optional(
    "QuACK", "quack.gemm_interface:gemm", "quack.gemm_interface:gemm_act",
    "quack.linear:linear_gated_func", "quack.linear:gated_linear_func", site_dir="/root/kp-baselines")

TUNED = os.environ.get("KP_QUACK_TUNED", "1") != "0"
# kp's names -> QuACK's. "gelu" (exact, erf) is QuACK's gelu_erf: in its epilogue table
# (quack.activation.act_fn_map, fast-math erf) but not in gemm_act's documented Literal: check()
# tries it and, if QuACK refuses it, records why here so linear_act(..., "gelu") raises that.
ACTS = {"none": None, "relu": "relu", "gelu_tanh": "gelu_tanh_approx", "silu": "silu", "gelu": "gelu_erf"}
GATED = {"silu": "swiglu", "gelu_tanh": "geglu", "relu": "reglu"}  # act(gate) * up, tanh GELU
UNSUPPORTED: dict[str, str] = {}


def _need():
    if QUACK_MISSING:
        raise RuntimeError(QUACK_MISSING)


def _name(table, activation, what):
    if activation not in table:
        raise ValueError(f"QuACK has no {what} activation for kp's {activation!r} (has: {', '.join(table)})")
    return table[activation]


def gemm(x, w, tuned=None):
    """y = x @ w.T, x [M, K], w [N, K]: QuACK's public GEMM, B the K-major view w.T (no copy)."""
    _need()
    return _gemm(x, w.T, tuned=TUNED if tuned is None else tuned)


def linear_act(x, w, bias=None, activation="none", tuned=None):
    """act(x @ w.T + bias), x [..., K], w [N, K], bias [N] or None; forward only.

    gemm_act puts the bias and activation in the epilogue (fp32, one rounding); store_preact=False
    so it writes the activation alone, as kp's inference call does. "none" is a plain gemm with
    its bias epilogue (gemm_act would write the same result twice). QuACK has no standalone
    differentiable linear+act: its LinearActFunc returns (preact, postact) with only preact
    differentiable, and act' is fused into the *next* layer's dgrad GEMM (gemm_dact: dpreact =
    act'(preact) * (dout @ W2)), which needs W2. Training is therefore compared through gated_mlp.
    """
    _need()
    if activation in UNSUPPORTED:
        raise ValueError(f"QuACK linear_act {activation!r}: {UNSUPPORTED[activation]}")
    act = _name(ACTS, activation, "linear_act")
    tuned = TUNED if tuned is None else tuned
    x2 = x.reshape(-1, x.shape[-1])
    if act is None:
        y = _gemm(x2, w.T, bias=bias, tuned=tuned)
    else:
        y = _gemm_act(x2, w.T, bias=bias, activation=act, store_preact=False, tuned=tuned)[1]
    return y.reshape(*x.shape[:-1], w.shape[0])


def interleave(gate_up):
    """kp's [gate rows; up rows] [2I, H] -> QuACK's default fc1 rows (g0, u0, g1, u1, ...)."""
    i2, h = gate_up.shape
    return gate_up.reshape(2, i2 // 2, h).transpose(0, 1).reshape(i2, h)


def deinterleave(w1):
    """The inverse of interleave (for gradients of an interleaved fc1 weight)."""
    i2, h = w1.shape
    return w1.reshape(i2 // 2, 2, h).transpose(0, 1).reshape(i2, h)


class QuackGatedMLP(nn.Module):
    """down(act(x Wg^T) * (x Wu^T)), no biases, as quack.mlp.MLP(concat_layout=...) computes it.

    Parameters: w1 [2I, H] (gate and up) and w2 = down [H, I], nn.Linear layout. fc1 is
    linear_gated_func (gemm_gated: one GEMM, gated activation in its epilogue, writes the
    interleaved preact [M, 2I] when a gradient is wanted and postact [M, I]); fc2 is
    gated_linear_func (gemm; its backward is gemm_dgated: dpreact from dout @ W2 and preact).
    layout "interleaved" (QuACK's default): w1 is interleave(kp's gate_up), a copy made once here,
    untimed, and w1's gradient comes back interleaved (deinterleave() to compare with kp's).
    layout "concat": w1 is kp's [gate; up] as is and QuACK is told so (concat_layout, read
    through strides in the kernels), its gradient in the same layout.
    """

    def __init__(self, gate_up_weight, down_weight, activation="silu", layout="interleaved", tuned=None):
        super().__init__()
        _need()
        if layout not in ("interleaved", "concat"):
            raise ValueError(f"layout must be 'interleaved' or 'concat', got {layout!r}")
        (i2, h), (h2, i) = gate_up_weight.shape, down_weight.shape
        if i2 != 2 * i or h2 != h:
            raise ValueError(f"QuACK gated MLP: gate_up {tuple(gate_up_weight.shape)} and down "
                             f"{tuple(down_weight.shape)} are not [2I, H] and [H, I]")
        if h % 8 or i % 8:  # quack.mlp.MLP falls back to torch below these; here they must hold
            raise ValueError(f"QuACK gated MLP needs hidden and intermediate multiples of 8, got {h}, {i}")
        self.activation, self.qact = activation, _name(GATED, activation, "gated MLP")
        self.concat, self.tuned = layout == "concat", TUNED if tuned is None else tuned
        w1 = gate_up_weight.detach()
        self.w1 = nn.Parameter((w1 if self.concat else interleave(w1)).clone().contiguous())
        self.w2 = nn.Parameter(down_weight.detach().clone().contiguous())

    def kp_layout(self, t):
        """A [2I, H] tensor in w1's layout (w1, or its gradient) in kp's [gate; up] layout."""
        return t if self.concat else deinterleave(t)

    def forward(self, x):
        preact, postact = _linear_gated_func(
            x, self.w1, self.qact, store_preact=torch.is_grad_enabled(), tuned=self.tuned,
            **({"concat_layout": True} if self.concat else {}))
        return _gated_linear_func(preact, self.w2, postact, activation=self.qact, tuned=self.tuned)


def gated_mlp(hidden, intermediate, activation="silu", *, gate_up_weight=None, down_weight=None,
              layout="interleaved", device="cuda", dtype=torch.bfloat16, tuned=None):
    """A QuackGatedMLP on kp's weights (GatedMLP's gate_up_weight and down_proj.weight), or on
    random ones of nn.Linear's scale when none are given."""
    _need()
    if gate_up_weight is None:
        gate_up_weight = (torch.rand(2 * intermediate, hidden, device=device) * 2 - 1) / hidden ** 0.5
    if down_weight is None:
        down_weight = (torch.rand(hidden, intermediate, device=device) * 2 - 1) / intermediate ** 0.5
    return QuackGatedMLP(gate_up_weight.to(device, dtype), down_weight.to(device, dtype),
                         activation, layout, tuned)


def _close(results, name, got, ref, tol):
    err = ((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    results[name] = err
    if not err <= tol:  # also catches NaN
        raise AssertionError(f"QuACK adapter {name}: max error {err:.3g} of the output's max > {tol}")


def check(device="cuda", tuned=False):
    """Run every adapter at small shapes against fp32 torch; raise on a wrong result.

    Returns {case: max |error| / max |ref|} (and "unsupported: ..." for an activation QuACK
    refuses, which linear_act then raises for). tuned=False (QuACK's default configs, fast to
    compile) checks the adapters' layouts and names, which no config changes; tuned=True also
    exercises the autotuner's picks at these shapes. M is not a multiple of a tile, on purpose.
    """
    _need()
    torch.manual_seed(0)
    res, bf = {}, torch.bfloat16
    M, K, N = 200, 256, 328
    x = torch.randn(M, K, device=device).to(bf)
    w = (torch.randn(N, K, device=device) / K ** 0.5).to(bf)
    b = (torch.randn(N, device=device) * 0.5).to(bf)
    ref = x.float() @ w.float().T
    _close(res, "gemm", gemm(x, w, tuned=tuned), ref, 1e-2)
    for act, fn in (("none", lambda t: t), ("relu", torch.relu), ("silu", torch.nn.functional.silu),
                    ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
                    ("gelu", torch.nn.functional.gelu)):
        UNSUPPORTED.pop(act, None)
        try:
            got = linear_act(x, w, b, act, tuned=tuned)
        except Exception as e:  # only an activation outside QuACK's documented set may fail
            if act != "gelu":
                raise
            UNSUPPORTED[act] = f"QuACK refused it in check(): {type(e).__name__}: {e}"
            res[f"linear_act {act}"] = f"unsupported: {UNSUPPORTED[act]}"
            continue
        _close(res, f"linear_act {act}", got, fn(ref + b.float()), 1.5e-2)
    H, I = 256, 200
    for act, gfn in (("silu", torch.nn.functional.silu),
                     ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh"))):
        wgu = (torch.randn(2 * I, H, device=device) / H ** 0.5).to(bf)
        wd = (torch.randn(H, I, device=device) / I ** 0.5).to(bf)
        xs = torch.randn(M, H, device=device).to(bf)
        dy = torch.randn(M, H, device=device).to(bf)
        r = [t.float().requires_grad_() for t in (xs, wgu, wd)]
        g, u = (r[0] @ r[1].T).chunk(2, dim=-1)
        y_ref = (gfn(g) * u) @ r[2].T
        grads_ref = torch.autograd.grad(y_ref, r, dy.float())
        for layout in ("interleaved", "concat"):
            mlp = gated_mlp(H, I, act, gate_up_weight=wgu, down_weight=wd, layout=layout,
                            device=device, tuned=tuned)
            tag = f"gated_mlp {act} {layout}"
            with torch.no_grad():
                _close(res, f"{tag} fwd", mlp(xs), y_ref.detach(), 1.5e-2)
                _close(res, f"{tag} fwd M=1", mlp(xs[:1]), y_ref.detach()[:1], 1.5e-2)
            xg = xs.clone().requires_grad_()
            y = mlp(xg)
            dx, dw1, dw2 = torch.autograd.grad(y, (xg, mlp.w1, mlp.w2), dy)
            _close(res, f"{tag} train y", y.detach(), y_ref.detach(), 1.5e-2)
            for name, got, want in (("dx", dx, grads_ref[0]), ("dgate_up", mlp.kp_layout(dw1), grads_ref[1]),
                                    ("ddown", dw2, grads_ref[2])):
                _close(res, f"{tag} {name}", got, want, 3e-2)
    return res
