"""What compute-sanitizer (memcheck, racecheck) runs over kp-fused-mlp's CUDA kernels: every dtype
and gated activation (swiglu, geglu exact and tanh), odd and real sizes, strided rows and packed
halves, forward and backward, each checked against float64; linear_act's sm90 GEMM, every row
of its table with each epilogue, on shapes with M, N and K tails; its training path (the Z-saving
forward, dP with the bias gradient, the dX and dW GEMMs) on each training row; gated_linear's sm90 GEMM
(the interleaved weight, the gated epilogue's direct stores of h and of the pre-activations), every
row of its table, both dtypes and activations, on M/H/I tails; GatedMLP's gated-gradient GEMM
(every row, tails) and its fused training step; the decode kernels of linear_act
and gated_linear (every decode row, K splits); GatedMLP's fused decode kernel (tools/gpu_check.sh
sanitize).

    python sanitize_fused-mlp.py [glu] [gemm] [train] [gated] [dgated] [decode] [decode_mlp]    (default: all)
"""
import sys

import torch
import torch.nn.functional as F
from kp_core import testing as kt

import kp_fused_mlp
from kp_fused_mlp import _cuda, reference

SHAPES = [(1, 1), (3, 5), (7, 130), (1, 4096), (65, 11008), (3, 14336)]
OPS = {
    "swiglu": (kp_fused_mlp.swiglu, F.silu),
    "geglu": (kp_fused_mlp.geglu, F.gelu),
    "geglu_tanh": (lambda *a, **k: kp_fused_mlp.geglu(*a, approximate="tanh", **k),
                   lambda t: F.gelu(t, approximate="tanh")),
}  # fmt: skip


def glu():
    for name, (fn, act) in OPS.items():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for rows, cols in SHAPES:
                for packed in (False, True):
                    base = kt.randn((rows, 2 * cols + 3), dtype=dtype, device="cuda", seed=rows * cols)
                    gate_up = base[:, : 2 * cols].detach().requires_grad_(True)  # row stride 2 * cols + 3
                    gate, up = gate_up[:, :cols], gate_up[:, cols:]
                    y = fn(gate_up, backend="cuda") if packed else fn(gate, up, backend="cuda")
                    dy = kt.randn((rows, cols), dtype=dtype, device="cuda", seed=7)
                    y.backward(dy)
                    x64 = gate_up.detach().double().requires_grad_(True)
                    y64 = act(x64[:, :cols]) * x64[:, cols:]
                    (want,) = torch.autograd.grad(y64, x64, dy.double())
                    # gelu's (1 + erf) / 2 has an absolute error: floor the denominators (kt.rel_error's
                    # scale) by the terms |gate| |up|, |dy| |up| and |dy| |gate| (tests/test_glu.py's _floors).
                    a, d = x64.detach().abs(), dy.double().abs()
                    floors = (a[:, :cols] * a[:, cols:], torch.cat([d * a[:, cols:], d * a[:, :cols]], dim=1))
                    y_floor, d_floor = (0.0, 0.0) if name == "swiglu" else (f.norm().item() for f in floors)
                    kt.assert_matches_oracle(y, y64, scale=y_floor, name=f"{name} y")
                    kt.assert_matches_oracle(gate_up.grad, want, scale=d_floor, name=f"{name} dgate_up")


def gemm():  # linear_act's sm90 GEMM
    why = _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, False, 64, 64)
    if why:  # not an sm_90 GPU
        return print("gemm: skipped,", why)
    for config, row in enumerate(_cuda.NATIVE.module.gemm_configs()):
        for dtype in (torch.float16, torch.bfloat16):
            for m, k, n in [(1, 64, 128), (77, 200, 264), (130, 1032, 520)]:  # tails of every tile
                x = kt.randn((m, k), dtype=dtype, device="cuda", seed=m)
                w = kt.randn((n, k), dtype=dtype, device="cuda", seed=n) / k**0.5
                b = kt.randn((n,), dtype=dtype, device="cuda", seed=k)
                for bias, act in ((None, "none"), (b, "silu"), (None, "gelu_tanh"), (b, "gelu")):
                    y = _cuda.linear_act_fwd(x, w, bias, act, config=config)
                    z = x.double() @ w.double().t() + (0 if bias is None else bias.double())
                    want = reference.ACTIVATIONS[act](z)
                    kt.assert_matches_oracle(y, want, name=f"linear_act {row} {act} {m}x{k}x{n}")


def train():  # linear_act's training path (csrc/linear_act_bwd.cu, dpre.cu) on each training row
    why = _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, True, 64, 64)
    if why:  # not an sm_90 GPU
        return print("train: skipped,", why)
    for config in _cuda.NATIVE.module.gemm_bwd_configs():
        for dtype in (torch.float16, torch.bfloat16):
            for m, k, n in [(1, 40, 24), (77, 200, 264), (130, 1032, 136)]:  # tails of every tile, M odd
                x = kt.randn((m, k), dtype=dtype, device="cuda", seed=m)
                w = kt.randn((n, k), dtype=dtype, device="cuda", seed=n) / k**0.5
                b = kt.randn((n,), dtype=dtype, device="cuda", seed=k)
                dy = kt.randn((m, n), dtype=dtype, device="cuda", seed=m + n)
                for bias, act in ((b, "gelu_tanh"), (None, "silu"), (b, "relu"), (b, "none")):
                    y, z = _cuda.linear_act_train(x, w, bias, act, config=config)
                    pre = y if act == "relu" else z
                    dx, dw, db = _cuda.linear_act_bwd(dy, x, w, pre, act, True, True, bias is not None, config=config)
                    leaves = [t.double().requires_grad_(True) for t in (x, w, b)]
                    y64 = reference.ACTIVATIONS[act](leaves[0] @ leaves[1].t() + (leaves[2] if bias is not None else 0))
                    want = torch.autograd.grad(y64, leaves[: 3 if bias is not None else 2], dy.double())
                    name = f"linear_act train {config} {act} {m}x{k}x{n}"
                    kt.assert_matches_oracle(y, y64.detach(), name=f"{name} y")
                    for got, w64, what in zip((dx, dw, db), want, ("dx", "dw", "db")):
                        kt.assert_matches_oracle(got, w64, name=f"{name} {what}")


def gated():
    why = _cuda.gated_linear_supports(True, "cuda", 0, torch.bfloat16, False, 64, 64)
    if why:  # not an sm_90 GPU
        return print("gated: skipped,", why)
    for config, row in enumerate(_cuda.NATIVE.module.gated_configs()):
        for dtype in (torch.float16, torch.bfloat16):
            for m, k, inter in [(1, 64, 8), (77, 200, 136), (130, 1032, 264), (257, 72, 1048)]:  # every tile's tails
                x = kt.randn((m, k), dtype=dtype, device="cuda", seed=m)
                w = kt.randn((2 * inter, k), dtype=dtype, device="cuda", seed=inter) / k**0.5
                b = kt.randn((2 * inter,), dtype=dtype, device="cuda", seed=k)
                for bias, act, save_pre in ((None, "silu", False), (b, "gelu_tanh", True)):
                    h, pre = _cuda.gated_linear_fwd(x, w, bias, act, save_pre, config=config)
                    want = reference.gated_linear(x, w, bias, act, acc=torch.float64, out_dtype=torch.float64)
                    name = f"gated_linear {row} {act} {m}x{k}->{inter}"
                    kt.assert_matches_oracle(h, want, name=name)
                    if save_pre:
                        z = x.double() @ w.double().t() + bias.double()
                        kt.assert_matches_oracle(pre, z, name=f"{name} pre")


def dgated():
    # GatedMLP's gated-gradient GEMM (kp/gemm/sm90_dgated.h): every row, both dtypes and
    # activations, M / H / I tails (I = 40, 136: epilogue groups at the right edge), then the
    # module's fused training step once.
    why = _cuda.gated_linear_supports(True, "cuda", 0, torch.bfloat16, True, 64, 64)
    if why:
        return print("dgated: skipped,", why)
    names = _cuda.NATIVE.module.gated_configs()
    for row in ("pingpong_128x128_c2x1",):
        for dtype in (torch.float16, torch.bfloat16):
            for m, k, inter in [(1, 64, 8), (77, 200, 136), (130, 1032, 264), (257, 72, 40)]:
                dy = kt.randn((m, k), dtype=dtype, device="cuda", seed=m)
                wd = kt.randn((k, inter), dtype=dtype, device="cuda", seed=inter) / k**0.5
                pre = kt.randn((m, 2 * inter), dtype=dtype, device="cuda", seed=k)
                for act in ("silu", "gelu_tanh"):
                    got = _cuda.gated_down_grad(dy, wd, pre, act, config=names.index(row))
                    dh, g, u = dy.double() @ wd.double(), pre.double()[:, :inter], pre.double()[:, inter:]
                    da = torch.func.grad(lambda t: reference.GATES[act](t).sum())(g)
                    want = torch.cat([dh * u * da, dh * reference.GATES[act](g)], dim=1)
                    kt.assert_matches_oracle(got, want, name=f"dgated {row} {act} {m}x{k}->{inter}")
    mlp = kp_fused_mlp.GatedMLP(136, 264, "silu", bias=True, device="cuda", dtype=torch.bfloat16)
    x = kt.randn((70, 136), dtype=torch.bfloat16, device="cuda", seed=3).requires_grad_(True)
    mlp(x).sum().backward()
    torch.cuda.synchronize()


def decode():
    # The decode kernels (csrc/decode_gemv.cu): every table row by M (1 | 2 | 7 | 16 | 31, and 40
    # forced: two 32-token chunks) and every row forced at M = 3 (fma rows: 3 and 2 chunks of x), K
    # and N tails of every tile (N = 13, 264; K = 1032: a partial step of both kinds; K = 8: one
    # packet), one split and several (the fp32 workspace and the programmatic-dependent reduce),
    # linear and gated.
    why = _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, False, 64, 64, True)
    if why:
        return print("decode: skipped,", why)
    config = _cuda.decode_config()
    sm90 = torch.cuda.get_device_capability()[0] >= 9  # the tma rows (forced) need it
    rows = [row for row in _cuda.decode_configs() if sm90 or not row.startswith("decode_tma")]
    cases = [(m, None) for m in (1, 2, 7, 16, 31, 40)] + [(3, row) for row in rows]
    for dtype in (torch.float16, torch.bfloat16):
        for m, row in cases:
            for k, n in ((64, 13), (1032, 264), (8, 40)):
                x = kt.randn((m, k), dtype=dtype, device="cuda", seed=m)
                w = kt.randn((2 * n, k), dtype=dtype, device="cuda", seed=n) / k**0.5
                b = kt.randn((2 * n,), dtype=dtype, device="cuda", seed=k)
                for splits in (None, 1, 3):
                    for bias, act in ((None, "none"), (b[:n], "silu"), (b[:n], "gelu")):
                        y = _cuda.linear_act_fwd(x, w[:n], bias, act, config=config, decode_splits=splits,
                                                 decode_row=row)  # fmt: skip
                        z = x.double() @ w[:n].double().t() + (0 if bias is None else bias.double())
                        kt.assert_matches_oracle(y, reference.ACTIVATIONS[act](z),
                                                 name=f"decode {row} {act} {m}x{k}x{n}")  # fmt: skip
                    for bias, act in ((None, "silu"), (b, "gelu_tanh")):
                        h, _ = _cuda.gated_decode_fwd(x, w, bias, act, splits, row)
                        want = reference.gated_linear(x.double(), w.double(), None if bias is None else bias.double(),
                                                      act, acc=torch.float64)  # fmt: skip
                        kt.assert_matches_oracle(h, want, name=f"gated decode {row} {act} {m}x{k}x{n}")


def decode_mlp():
    # GatedMLP's fused decode kernel (csrc/decode_mlp.cu, sm90): both tma rows forced, a partial
    # down tile and a block of one tile (H = 136, 4104), K tails (I = 200), one gated and one down
    # tile (8 / 8), more gated tiles than a pass (I = 20008), with and without biases; and a size
    # the plan serves by default at 16 tokens (I = 9216; Llama-3-8B's ran past 100 s under racecheck). The grid barriers' counter is read and written by
    # every CTA: racecheck sees only shared memory, memcheck the rest.
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        return print("decode_mlp: skipped, needs sm90")
    sizes = [(8, 8), (136, 200), (4104, 136), (264, 20008)]
    for row, m in (("decode_tma_m8", 3), ("decode_tma_m16", 16), (None, 16)):
        for hidden, inter in sizes if row else [(256, 9216)]:
            dtype = torch.bfloat16 if m % 2 == 0 else torch.float16
            x = kt.randn((m, hidden), dtype=dtype, device="cuda", seed=m)
            wgu = kt.randn((2 * inter, hidden), dtype=dtype, device="cuda", seed=inter) / hidden**0.5
            wd = kt.randn((hidden, inter), dtype=dtype, device="cuda", seed=hidden) / inter**0.5
            bgu = kt.randn((2 * inter,), dtype=dtype, device="cuda", seed=1)
            bd = kt.randn((hidden,), dtype=dtype, device="cuda", seed=2)
            for b1, b2, act in ((None, None, "silu"), (bgu, bd, "gelu_tanh")):
                y = _cuda.gated_mlp_decode(x, wgu, b1, wd, b2, act, decode_row=row)
                d = lambda t: None if t is None else t.double()
                h = reference.gated_linear(d(x), d(wgu), d(b1), act, acc=torch.float64)
                kt.assert_matches_oracle(y, F.linear(h, d(wd), d(b2)), name=f"decode_mlp {row} {m} {hidden}/{inter}")


PARTS = {"glu": glu, "gemm": gemm, "train": train, "gated": gated, "dgated": dgated, "decode": decode, "decode_mlp": decode_mlp}
for part in sys.argv[1:] or PARTS:
    PARTS[part]()
torch.cuda.synchronize()
print(f"sanitize_fused-mlp: all paths ran ({', '.join(sys.argv[1:] or PARTS)})")
