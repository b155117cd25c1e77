"""The decode kernels (csrc/decode_gemv.cu): linear_act and gated_linear at 1-32 tokens on the cuda
level, against the float64 oracle: M = 1, 2, 7, 16, 31, 32 (every row of csrc/decode_table.h by
M), every row forced at M = 1, 2, 3, 5 (K = 8, N tails, splits, every epilogue, gated),
K and N odd multiples of 8 and Llama's sizes, every epilogue, every K split forced, strided x,
NaN-poisoned outputs, M = 0, determinism, CUDA graphs, torch.compile, GatedMLP's down projection.
The plan, the supports() answers and the native argument checks also run on CPU."""
import math

import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, load_native
from kp_core import testing as kt

import kp_fused_mlp
from kp_fused_mlp import _cuda, gated, linear, modules, reference

NATIVE = load_native("kp_fused_mlp")
needs_native = pytest.mark.skipif(not NATIVE.loaded, reason="built without its CUDA level")

TOKENS = [1, 2, 7, 16, 31, 32]  # each decode row (1, 2, <= 8, <= 16, <= 32), with tails of its tiles
ROWS = ["decode_fma_m1", "decode_fma_m2", "decode_tma_m8", "decode_tma_m16", "decode_tma_m32", "decode_m8", "decode_m16",
        "decode_m32"]  # fmt: skip
TMA_ROWS = ["decode_tma_m8", "decode_tma_m16", "decode_tma_m32"]  # sm90 only
# (K, N): odd multiples of 8 (no tile divides them), and Llama-3-8B's up and down projections.
SMALL = [(24, 40), (1032, 264)]
LLAMA = [(4096, 14336), (14336, 4096)]
DTYPES = [torch.bfloat16, torch.float16]
_SIZE_ID = lambda s: f"{s[0]}to{s[1]}"


def _gpu():
    """Skip unless the cuda level's decode kernel can run here."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    why = _cuda.linear_act_supports(True, "cuda", torch.cuda.current_device(), torch.bfloat16, False, 64, 64, True)
    if why:
        pytest.skip(f"the decode kernel cannot run here: {why}")


def _linear_inputs(m, k, n, dtype, seed, with_bias, device="cuda"):
    x = kt.randn((m, k), dtype=dtype, device=device, seed=seed)
    w = kt.randn((n, k), dtype=dtype, device=device, seed=seed + 1, scale=k**-0.5)
    b = kt.randn((n,), dtype=dtype, device=device, seed=seed + 2) if with_bias else None
    return x, w, b


def _linear_oracle(x, w, b, act):
    want = reference.linear_act_fwd(x, w, b, act, acc=torch.float64, out_dtype=torch.float64)
    return want, reference.ACTIVATIONS[act](F.linear(x, w, b))


def _gated_inputs(m, hidden, inter, dtype, seed, with_bias):
    x = kt.randn((m, hidden), dtype=dtype, device="cuda", seed=seed)
    w = kt.randn((2 * inter, hidden), dtype=dtype, device="cuda", seed=seed + 1, scale=hidden**-0.5)
    b = kt.randn((2 * inter,), dtype=dtype, device="cuda", seed=seed + 2, scale=0.5) if with_bias else None
    return x, w, b


def _gated_oracle(x, w, b, act):
    inter = w.shape[0] // 2
    want = reference.gated_linear(x, w, b, act, acc=torch.float64, out_dtype=torch.float64)
    bg, bu = (None, None) if b is None else (b[:inter], b[inter:])
    return want, reference.GATES[act](F.linear(x, w[:inter], bg)) * F.linear(x, w[inter:], bu)


def _fma(plan):
    """Whether a plan runs an fma row (16 weight rows a CTA, 256-column steps) or an mma or tma row
    (128 rows; 32 x packets columns a step, tma 128)."""
    return plan["row"].startswith("decode_fma")


def _tma(plan):
    return plan["row"].startswith("decode_tma")


def _step_k(plan):
    assert plan["step_k"] in ((256,) if _fma(plan) else (128,) if _tma(plan) else (32, 64)), plan
    return plan["step_k"]


def _row_runs_here(row):
    """Skip a forced tma row below sm90 (it raises there: test_tma_row_below_sm90_is_an_error)."""
    if row in TMA_ROWS and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip(f"{row} needs sm90")


def _poison(*shapes):
    kt.poison_allocator("cuda", [4 * s[0] * s[1] for s in shapes] * 2)


def _check(call, want, torch_out, *, name):
    """call() into NaN-poisoned outputs, against the float64 oracle and torch's own error."""
    _poison(tuple(want.shape))
    out = call()
    assert out.shape == want.shape and out.dtype == torch_out.dtype, (out.shape, out.dtype)
    kt.assert_matches_oracle(out, want, torch_out=torch_out, name=name)


# ---- CPU: the table, the plan's names, supports() and the native checks ----------------------------


@needs_native
def test_configs_and_cut():
    mod = NATIVE.module
    assert mod.gemm_configs()[-2:] == ["decode_gemv", "sm80_128x128x64"]
    assert mod.decode_configs() == ROWS and _cuda.decode_configs() == tuple(ROWS)
    assert _cuda.DECODE_MAX_M == mod.decode_max_m() == 32
    # linear_act's cut (decode_table.h's DecodeCut): N <= K decode up to 16 tokens, N > K up to 8.
    for m, n, k, want in [(1, 14336, 4096, True), (8, 14336, 4096, True), (9, 14336, 4096, False),
                          (16, 4096, 14336, True), (16, 4096, 4096, True), (17, 4096, 14336, False),
                          (32, 4096, 14336, False), (1, 28672, 8192, True), (16, 28672, 8192, False)]:  # fmt: skip
        assert _cuda.decode_serves_linear(m, n, k) is want is mod.decode_serves_linear(m, n, k), (m, n, k)
        assert _cuda.gemm_plan(m, n, k) == ("decode_gemv" if want else "pingpong_64x128"), (m, n, k)
    assert _cuda.gemm_plan(33, 4096, 4096) == "pingpong_64x128"
    for m in (0, 1, 8, 9, 16, 17):  # the Python mirror of the rule (traceable) agrees with the native one
        for n, k in [(8, 8), (8, 16), (16, 8), (4096, 14336), (14336, 4096), (1000, 1000), (1001, 1000)]:
            assert _cuda.decode_serves_linear(m, n, k) == mod.decode_serves_linear(m, n, k), (m, n, k)
    x = torch.empty(32, 64)
    assert linear.is_decode(x, 64) and not linear.is_decode(torch.empty(33, 64), 64)
    assert linear.is_decode(torch.empty(2, 16, 64), 64) and not linear.is_decode(torch.empty(3, 11, 64), 64)
    assert linear.linear_decodes(torch.empty(2, 8, 64), 64, 64) and not linear.linear_decodes(x, 64, 64)
    assert linear.linear_decodes(torch.empty(9, 128), 64, 128) and not linear.linear_decodes(torch.empty(9, 64), 128, 64)
    # gated_linear's own cut: 16 tokens on every shape (its gated GEMM loses at 9-16).
    assert _cuda.DECODE_GATED_MAX_M == mod.decode_gated_max_m() == 16
    assert linear.gated_decodes(torch.empty(2, 8, 64), 64) and not linear.gated_decodes(torch.empty(17, 64), 64)
    with pytest.raises(ValueError, match="decode_row must be one of decode_fma_m1"):
        _cuda._decode_row_index("decode_m64")


@needs_native
def test_supports_answers():
    s = _cuda.linear_act_supports
    why = s(True, "cuda", 0, torch.bfloat16, False, 64, 4095, True)
    assert "in_features K=4095 is not a multiple of 8" in why and "pad it to 4096" in why
    # The decode kernel takes any N; the GEMM (decode False) needs multiples of 8.
    assert "N=13" not in (s(True, "cuda", 0, torch.bfloat16, False, 13, 64, True) or "")
    assert "out_features N=13 is not a multiple of 8" in s(True, "cuda", 0, torch.bfloat16, False, 13, 64, False)
    # A call that needs gradients runs the GEMM's training kernels at any M: the GEMM's answers.
    assert s(True, "cuda", 0, torch.bfloat16, True, 64, 64, True) == s(True, "cuda", 0, torch.bfloat16, True, 64, 64)
    assert "out_features N=13 is not a multiple of 8" in s(True, "cuda", 0, torch.bfloat16, True, 13, 64, True)
    g = _cuda.gated_linear_supports
    assert g(True, "cuda", 0, torch.float32, False, 64, 64, True).startswith("the cuda level of gated_linear takes")
    # Past the cut, or with a gradient, the gated GEMM serves the call: it needs I a multiple of 8.
    assert g(True, "cuda", 0, torch.bfloat16, False, 14340, 4096, False).startswith("intermediate I=14340 is not")
    assert g(True, "cuda", 0, torch.bfloat16, True, 14340, 4096, True).startswith("intermediate I=14340 is not")
    assert "intermediate" not in (g(True, "cuda", 0, torch.bfloat16, False, 14340, 4096, True) or "")
    assert "hidden=4100 is not a multiple of 8" in g(True, "cuda", 0, torch.bfloat16, False, 64, 4100, True)
    assert g(False, "cpu", None, torch.bfloat16, False, 64, 64, True).startswith("the tensors are on cpu")


@needs_native
def test_native_checks_before_any_cuda_call():
    """gated_decode's and linear_act's decode config's checks (ValueError) run before the device."""
    mod = NATIVE.module
    args = dict(x=16, x_stride=64, w=16, w_stride=64, bias=0, y=16, m=4, inter=40, k=64, dtype=2, act=4, ws=0,
                splits=0, device=0, stream=0)  # fmt: skip
    with pytest.raises(ValueError, match="K=60 is not a multiple of 8.*pad it to 64"):
        mod.gated_decode(**{**args, "k": 60, "x_stride": 60, "w_stride": 60})
    with pytest.raises(ValueError, match="the gated activation is silu or gelu_tanh"):
        mod.gated_decode(**{**args, "act": 1})
    with pytest.raises(ValueError, match="16-byte aligned"):
        mod.gated_decode(**{**args, "w": 18})
    with pytest.raises(ValueError, match="row strides must be multiples of 8"):
        mod.gated_decode(**{**args, "x_stride": 68})
    with pytest.raises(ValueError, match="splits must be >= 0"):
        mod.gated_decode(**{**args, "splits": -1})
    with pytest.raises(ValueError, match="float16 or bfloat16, got float32"):
        mod.gated_decode(**{**args, "dtype": 0})
    with pytest.raises(ValueError, match=f"no decode row {len(ROWS)}"):
        mod.gated_decode(**{**args, "decode_row": len(ROWS)})
    mod.gated_decode(**{**args, "m": 0})  # nothing to do: returns without a device
    decode = mod.gemm_configs().index("decode_gemv")
    la = dict(x=16, x_stride=64, w=16, w_stride=64, bias=0, y=16, m=4, n=13, k=60, dtype=2, act=0, config=decode,
              device=0, stream=0)  # fmt: skip
    with pytest.raises(ValueError, match="in_features K=60 is not a multiple of 8"):
        mod.linear_act(**la)


def test_decode_splits_must_be_a_positive_int():
    x = torch.empty(1, 8)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="decode_splits must be a positive int or None"):
            _cuda._decode_workspace(1, 8, 8, False, x, bad)


# ---- GPU: linear_act ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SMALL + LLAMA, ids=_SIZE_ID)
@pytest.mark.parametrize("m", TOKENS)
def test_linear_act_matches_oracle(m, size, dtype, seed):
    """The plan at every token class (the decode rows, and the GEMM past the cut by shape); every
    activation with and without bias on the small sizes, two epilogues on Llama's (their oracles
    dominate the time)."""
    _gpu()
    k, n = size
    cases = [(a, b) for a in kp_fused_mlp.ACTIVATIONS for b in (True, False)] if size in SMALL else [
        ("silu", True), ("none", False)]  # fmt: skip
    for act, with_bias in cases:
        x, w, b = _linear_inputs(m, k, n, dtype, seed, with_bias)
        _check(lambda: kp_fused_mlp.linear_act(x, w, b, act, backend="cuda"), *_linear_oracle(x, w, b, act),
               name=f"{m}x{k}->{n} {act} bias={with_bias}")  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 2, 3, 7, 33, 1000])
@pytest.mark.parametrize("m, k, n", [(7, 1032, 264), (1, 14336, 4096), (32, 4096, 136)], ids=str)
def test_every_split_forced(m, k, n, splits, seed):
    """decode_splits forced, with K not a multiple of any split (1032 = 32.25 k-steps), more
    splits than k-steps (clamped), bias + activation applied after the fixed-order reduction."""
    _gpu()
    x, w, b = _linear_inputs(m, k, n, torch.bfloat16, seed, True)
    want, torch_y = _linear_oracle(x, w, b, "gelu_tanh")
    plan = _cuda.decode_plan(m, n, k, splits=splits)
    steps = -(-k // _step_k(plan))
    split_steps = -(-steps // min(splits, steps))
    assert (plan["splits"], plan["split_steps"]) == (-(-steps // split_steps), split_steps), plan
    assert plan["grid"][1] == plan["splits"]
    _poison((m, n), (plan["splits"] * m, n))
    y = _cuda.linear_act_fwd(x, w, b, "gelu_tanh", decode_splits=splits)
    kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"splits={splits} plan={plan}")


@pytest.mark.gpu
def test_plan_of_the_table():
    """The split rule's answers are whole: splits x split_steps cover K, no split is empty,
    at most one wave or a last wave at least 80% full, the workspace only with splits that do not
    sum over a cluster. The tma rows: a persistent grid of at most one CTA a 16-row tile, no splits,
    no workspace; the default on sm90 at 3-16 tokens where the call has 4 tiles for each of its
    2 x SMs CTAs (Llama-3-8B's gated projection), the mma rows where it has fewer."""
    _gpu()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sm90 = torch.cuda.get_device_capability(0)[0] >= 9
    for m, k, n in [(16, 4096, 14336), (8, 14336, 4096), (3, 1032, 40), (16, 8192, 28672), (2, 8, 4096)]:
        for row in TMA_ROWS if sm90 else []:
            for gated in (False, True):
                p = _cuda.decode_plan(m, n, k, row=row, gated=gated)
                steps = -(-k // _step_k(p))
                tiles, tokens = -(-n // (8 if gated else 16)), int(row.rsplit("m", 1)[1])
                chunks = -(-m // tokens)  # decode_tma_m8 at 16 tokens: two chunks of x (grid z)
                slots = p["ctas_per_sm"] * sms
                s = p["splits"]  # K splits: a cluster of s CTAs (csrc/decode_gemv.cu's tma_layout)
                assert 1 <= s <= min(8, steps) and (p["cluster"], p["workspace_bytes"]) == (s, 0), (m, k, n, gated, p)
                assert p["split_steps"] == -(-steps // s) and p["grid"][1:] == (1, chunks), p
                clusters, rest = divmod(p["grid"][0], s)
                assert rest == 0 and 1 <= clusters <= min(slots // s, tiles), p  # resident, at most one a tile
                if s > 1:
                    assert -(-tiles // clusters) <= 8, p  # one pass of at most 8 tiles a cluster
                elif tiles >= 4 * slots:
                    assert clusters == slots, p  # rows only: every slot
    # The default: a tma row on sm90 at 3-32 tokens where its layout gives every CTA 4 tiles with no
    # K split (Llama-3-8B's gated projection; its down projection keeps the mma rows), else mma.
    cases = [(16, 4096, 14336, True), (8, 4096, 14336, True), (3, 4096, 14336, True), (16, 14336, 4096, False),
             (16, 8192, 28672, False), (3, 1032, 40, False), (2, 4096, 14336, True), (17, 4096, 14336, True),
             (1, 4096, 14336, False), (32, 4096, 14336, False), (1, 14336, 4096, False), (32, 14336, 4096, False),
             (12, 28672, 8192, False), (1, 8192, 28672, False), (1, 28672, 8192, False)]  # fmt: skip
    for m, k, n, gated in cases:
        p = _cuda.decode_plan(m, n, k, gated=gated)
        if sm90 and 3 <= m <= 32:
            row = "decode_tma_m8" if m <= 8 else "decode_tma_m16" if m <= 16 else "decode_tma_m32"
            pt = _cuda.decode_plan(m, n, k, gated=gated, row=row)
            tiles = -(-n // (8 if gated else 16))
            fits = pt["splits"] == 1 and -(-tiles // pt["grid"][0]) >= 4
            assert _tma(p) == fits and (not fits or p == pt), (m, k, n, gated, p, pt)
        else:
            assert not _tma(p), p  # sm80, or an fma / m32 row
        if _tma(p):
            continue
        steps = -(-k // _step_k(p))
        assert p["splits"] * p["split_steps"] >= steps > (p["splits"] - 1) * p["split_steps"], p
        assert p["grid"] == (-(-n // ((16 if _fma(p) else 128) // (2 if gated else 1))), p["splits"], 1), p
        # sm90: up to 8 splits sum over a cluster of them (no workspace); more use the workspace.
        assert p["cluster"] == (p["splits"] if sm90 and 1 < p["splits"] <= 8 else 1), p
        rows = 2 * n if gated else n
        assert p["workspace_bytes"] == (4 * p["splits"] * m * rows if p["splits"] > 1 and p["cluster"] == 1 else 0), p
        assert p["ctas_per_sm"] >= 1, p
        waves = p["grid"][0] * p["splits"] / (p["ctas_per_sm"] * sms)
        assert waves <= 1 or waves / math.ceil(waves) >= 0.8, (waves, p)  # no long tail wave
    assert _cuda.decode_plan(40, 64, 64)["grid"][2] == 2  # forced past the cut: 32-token chunks


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 33, 200])
def test_decode_config_forced_at_any_m_and_any_n(m, seed):
    """The decode config at M past the cut (32-token chunks of x) and N not a multiple of 8."""
    _gpu()
    x, w, b = _linear_inputs(m, 264, 13, torch.float16, seed, True)
    want, torch_y = _linear_oracle(x, w, b, "relu")
    _poison((m, 13))
    y = _cuda.linear_act_fwd(x, w, b, "relu", config=_cuda.decode_config())
    kt.assert_matches_oracle(y, want, torch_out=torch_y)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["aligned-row-strided", "row-strided", "column-major", "expanded", "batch-dims"])
def test_layouts(layout, seed):
    """x with rows 16-byte apart in place (NaN between), unaligned rows (copied), column-major,
    an expanded row, leading batch dims; a weight with aligned padded rows."""
    _gpu()
    x, w, b = _linear_inputs(6, 264, 40, torch.bfloat16, seed, True)
    if layout == "aligned-row-strided":
        x, w = kt.row_strided(x, pad=8), kt.row_strided(w, pad=16)
    elif layout == "row-strided":
        x = kt.row_strided(x, pad=3)
    elif layout == "column-major":
        x = kt.column_major(x)
    elif layout == "expanded":
        x = x[:1].expand(6, 264)
    else:
        x = x.view(2, 3, 264)
    want, torch_y = _linear_oracle(x, w, b, "silu")
    y = kp_fused_mlp.linear_act(x, w, b, "silu", backend="cuda")
    kt.assert_matches_oracle(y, want, torch_out=torch_y)


@pytest.mark.gpu
def test_empty_and_determinism(seed):
    _gpu()
    x = torch.empty((0, 64), dtype=torch.bfloat16, device="cuda")
    w = kt.randn((40, 64), dtype=torch.bfloat16, device="cuda", seed=seed)
    assert kp_fused_mlp.linear_act(x, w, None, "silu", backend="cuda").shape == (0, 40)
    assert kp_fused_mlp.gated_linear(x, torch.cat([w, w]), "silu", backend="cuda").shape == (0, 40)
    for splits in (None, 1, 4):
        x, w, b = _linear_inputs(5, 14336, 4096, torch.bfloat16, seed, True)
        y1 = _cuda.linear_act_fwd(x, w, b, "silu", decode_splits=splits)
        y2 = _cuda.linear_act_fwd(x, w, b, "silu", decode_splits=splits)
        assert torch.equal(y1, y2), f"splits={splits}: two calls differ"
        xg, wg, bg = _gated_inputs(3, 4096, 1032, torch.bfloat16, seed, True)
        h1, _ = _cuda.gated_linear_fwd(xg, wg, bg, "silu", False, decode_splits=splits)
        h2, _ = _cuda.gated_linear_fwd(xg, wg, bg, "silu", False, decode_splits=splits)
        assert torch.equal(h1, h2), f"gated splits={splits}: two calls differ"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16])
def test_cuda_graph_capture(m, seed):
    """Captured and replayed, with the workspace of a split plan allocated inside the capture."""
    _gpu()
    x, w, b = _linear_inputs(m, 14336, 4096, torch.bfloat16, seed, True)
    y = kt.graph_captured(lambda a, c, d: kp_fused_mlp.linear_act(a, c, d, "gelu", backend="cuda"), x, w, b)
    kt.assert_matches_oracle(y, _linear_oracle(x, w, b, "gelu")[0])
    x, w, b = _gated_inputs(m, 4096, 1032, torch.bfloat16, seed, True)
    h = kt.graph_captured(lambda a, c, d: kp_fused_mlp.gated_linear(a, c, "silu", d, backend="cuda"), x, w, b)
    kt.assert_matches_oracle(h, _gated_oracle(x, w, b, "silu")[0])


@pytest.mark.gpu
def test_opcheck_and_compile(seed):
    _gpu()
    x, w, b = _linear_inputs(5, 64, 40, torch.bfloat16, seed, True)
    kt.opcheck(linear.LINEAR_ACT, (x, w, b, "silu", "cuda"))
    xg, wg, bg = _gated_inputs(5, 64, 24, torch.bfloat16, seed, True)
    kt.opcheck(gated.GATED_LINEAR.fwd_op, (xg, wg, bg, "silu", False, "cuda"))
    fn = kt.compiled(lambda a, c, d: kp_fused_mlp.gated_linear(a, c, "gelu_tanh", d, backend="cuda"),
                     device_type="cuda")  # fmt: skip
    kt.assert_matches_oracle(fn(xg, wg, bg), _gated_oracle(xg, wg, bg, "gelu_tanh")[0])


@pytest.mark.gpu
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_every_row_forced(m, row, seed):
    """Every table row forced (past its own tokens: grid z chunks), against the float64 oracle:
    K = 8 (one packet), 264 and 1032 (partial steps of both kinds), N = 13 and 40 (tails of every
    row block), splits of the table, 1 and 3 (clamped to the steps), every linear epilogue and
    both gated ones, into NaN-poisoned outputs."""
    _gpu()
    _row_runs_here(row)
    dtype = DTYPES[m % 2]
    for k, n in [(8, 13), (264, 40), (1032, 13)]:
        for splits in (None, 1, 3):
            plan = _cuda.decode_plan(m, n, k, dtype=dtype, splits=splits or 0, row=row)
            assert plan["row"] == row and plan["grid"][2] == -(-m // int(row.rsplit("m", 1)[1])), plan
            x, w, b = _linear_inputs(m, k, n, dtype, seed + k, True)
            for act in kp_fused_mlp.ACTIVATIONS:
                for bias in (b, None):
                    want, torch_y = _linear_oracle(x, w, bias, act)
                    _poison((m, n), (plan["splits"] * m, n))
                    y = _cuda.linear_act_fwd(x, w, bias, act, decode_splits=splits, decode_row=row)
                    kt.assert_matches_oracle(y, want, torch_out=torch_y,
                                             name=f"{row} {m}x{k}->{n} {act} bias={bias is not None} {plan}")  # fmt: skip
            xg, wg, bg = _gated_inputs(m, k, n, dtype, seed + n, True)
            for act in kp_fused_mlp.GATED_ACTIVATIONS:
                for bias in (bg, None):
                    want, torch_h = _gated_oracle(xg, wg, bias, act)
                    _poison((m, n), (plan["splits"] * m, 2 * n))
                    h, _ = _cuda.gated_linear_fwd(xg, wg, bias, act, False, decode_splits=splits, decode_row=row)
                    kt.assert_matches_oracle(h, want, torch_out=torch_h,
                                             name=f"gated {row} {m}x{k}->{n} {act} bias={bias is not None}")  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("row", ROWS)
def test_every_row_deterministic_and_graph_captured(row, seed):
    """Bit-identical repeated calls (the fixed xor tree and the split-order reduce) with and
    without splits, and a captured + replayed call, for every row forced; Llama's down projection
    shape (14336 -> 4096: splits by the table) at 2 tokens."""
    _gpu()
    _row_runs_here(row)
    for splits in (None, 1, 4):
        x, w, b = _linear_inputs(2, 14336, 4096, torch.bfloat16, seed, True)
        y1 = _cuda.linear_act_fwd(x, w, b, "silu", decode_splits=splits, decode_row=row)
        y2 = _cuda.linear_act_fwd(x, w, b, "silu", decode_splits=splits, decode_row=row)
        assert torch.equal(y1, y2), f"{row} splits={splits}: two calls differ"
        xg, wg, bg = _gated_inputs(2, 4096, 1032, torch.bfloat16, seed, True)
        h1, _ = _cuda.gated_linear_fwd(xg, wg, bg, "gelu_tanh", False, decode_splits=splits, decode_row=row)
        h2, _ = _cuda.gated_linear_fwd(xg, wg, bg, "gelu_tanh", False, decode_splits=splits, decode_row=row)
        assert torch.equal(h1, h2), f"gated {row} splits={splits}: two calls differ"
    y = kt.graph_captured(lambda a, c, d: _cuda.linear_act_fwd(a, c, d, "gelu", decode_row=row), x, w, b)
    kt.assert_matches_oracle(y, _linear_oracle(x, w, b, "gelu")[0], name=row)
    h = kt.graph_captured(lambda a, c, d: _cuda.gated_linear_fwd(a, c, d, "silu", False, decode_row=row)[0], xg, wg, bg)
    kt.assert_matches_oracle(h, _gated_oracle(xg, wg, bg, "silu")[0], name=f"gated {row}")


@pytest.mark.gpu
@pytest.mark.parametrize("row", TMA_ROWS)
@pytest.mark.parametrize("m, k, n", [(1, 14336, 40), (16, 8, 13), (5, 1032, 4096), (16, 4096, 14336), (9, 28672, 264),
                                     (3, 72, 40004), (16, 200, 20001)], ids=str)  # fmt: skip
def test_tma_tiles_and_their_tails(row, m, k, n, seed):
    """The tma rows' tiles (csrc/decode_tma.cu): a partial last tile (N % 16, gated I % 8) through
    the 8-row boxes, only a partial tile (N = 13), whole tiles through boxes of 4, 2 and 1 tiles,
    fewer tiles than CTAs (N = 40, 264, 4096: K split over clusters of 2-8), two passes of 8 tiles a
    CTA (N = 40004, 20001 gated: 2501 tiles), K tails inside a 64-column box (72, 200), one k-step
    (K = 8), a 9-token tail of a 16-token tile; linear and gated, into NaN-poisoned outputs."""
    _gpu()
    _row_runs_here(row)
    for dtype in DTYPES:
        plan = _cuda.decode_plan(m, n, k, dtype=dtype, row=row)
        x, w, b = _linear_inputs(m, k, n, dtype, seed, True)
        want, torch_y = _linear_oracle(x, w, b, "gelu_tanh")
        _poison((m, n))
        y = _cuda.linear_act_fwd(x, w, b, "gelu_tanh", decode_row=row)
        kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"{row} {m}x{k}->{n} {dtype} {plan}")
        xg, wg, bg = _gated_inputs(m, k, n, dtype, seed + 1, True)
        want, torch_h = _gated_oracle(xg, wg, bg, "silu")
        _poison((m, n))
        h, _ = _cuda.gated_linear_fwd(xg, wg, bg, "silu", False, decode_row=row)
        kt.assert_matches_oracle(h, want, torch_out=torch_h, name=f"gated {row} {m}x{k}->{n} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("row", TMA_ROWS)
@pytest.mark.parametrize("splits", [2, 3, 5, 8])
def test_tma_k_splits_over_a_cluster(row, splits, seed):
    """The tma rows' K splits forced: the ranks of a cluster sum through distributed shared memory
    in rank order (csrc/decode_tma.cu), with k-step counts that do not divide (1032 = 9 steps),
    clusters without a tile (N = 40), gated pairs; bit-identical on a second call."""
    _gpu()
    _row_runs_here(row)
    for m, k, n in [(9, 1032, 264), (3, 1032, 40), (16, 4096, 1000)]:
        plan = _cuda.decode_plan(m, n, k, row=row, splits=splits)
        assert plan["cluster"] == plan["splits"] == splits and plan["workspace_bytes"] == 0, plan
        x, w, b = _linear_inputs(m, k, n, torch.bfloat16, seed, True)
        want, torch_y = _linear_oracle(x, w, b, "silu")
        _poison((m, n))
        y = _cuda.linear_act_fwd(x, w, b, "silu", decode_row=row, decode_splits=splits)
        kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"{row} splits={splits} {m}x{k}->{n} {plan}")
        assert torch.equal(y, _cuda.linear_act_fwd(x, w, b, "silu", decode_row=row, decode_splits=splits))
        xg, wg, bg = _gated_inputs(m, k, n, torch.float16, seed + 1, True)
        want, torch_h = _gated_oracle(xg, wg, bg, "gelu_tanh")
        _poison((m, n))
        h, _ = _cuda.gated_linear_fwd(xg, wg, bg, "gelu_tanh", False, decode_row=row, decode_splits=splits)
        kt.assert_matches_oracle(h, want, torch_out=torch_h, name=f"gated {row} splits={splits} {m}x{k}->{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("row", TMA_ROWS)
def test_tma_graph_replays_on_new_inputs(row, seed):
    """A captured tma call replayed three times on new inputs, each equal to an eager call (the same
    grid, so the same sums): the tensor maps captured with the call hold the static tensors'
    addresses, and nothing a call leaves behind may change the next."""
    _gpu()
    _row_runs_here(row)
    m = int(row.rsplit("m", 1)[1])
    x, w, b = _linear_inputs(m, 14336, 264, torch.bfloat16, seed, True)  # 17 tiles, the last partial
    static_x = x.clone()
    fn = lambda: _cuda.linear_act_fwd(static_x, w, b, "silu", decode_row=row)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    for i in range(3):
        new_x = kt.randn(x.shape, dtype=x.dtype, device="cuda", seed=seed + 10 + i)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, _cuda.linear_act_fwd(new_x, w, b, "silu", decode_row=row)), f"replay {i}"


@pytest.mark.gpu
def test_tma_row_below_sm90_is_an_error():
    _gpu()
    if torch.cuda.get_device_capability()[0] >= 9:
        pytest.skip("sm90: the tma rows run here")
    x, w, b = _linear_inputs(2, 64, 40, torch.bfloat16, 0, True)
    with pytest.raises(ValueError, match="needs sm90"):
        _cuda.linear_act_fwd(x, w, b, "silu", decode_row="decode_tma_m8")


# ---- GPU: gated_linear and GatedMLP -------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", [(24, 40), (1032, 264), (4096, 14336)], ids=_SIZE_ID)  # (H, I)
@pytest.mark.parametrize("m", TOKENS)
def test_gated_linear_matches_oracle(m, size, dtype, seed):
    _gpu()
    hidden, inter = size
    for act in kp_fused_mlp.GATED_ACTIVATIONS:
        for with_bias in (True, False):
            x, w, b = _gated_inputs(m, hidden, inter, dtype, seed, with_bias)
            _check(lambda: kp_fused_mlp.gated_linear(x, w, act, b, backend="cuda"), *_gated_oracle(x, w, b, act),
                   name=f"{m}x{hidden}->{inter} {act} bias={with_bias}")  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 2, 5, 1000])
def test_gated_every_split_and_odd_inter(splits, seed):
    """Splits forced (the gate and up partials reduced together), I = 13 (no multiple of 8) and a
    strided x."""
    _gpu()
    for m, hidden, inter in [(7, 1032, 264), (1, 14336, 4096), (3, 64, 13)]:
        x, w, b = _gated_inputs(m, hidden, inter, torch.bfloat16, seed, True)
        x = kt.row_strided(x, pad=8)
        want, torch_h = _gated_oracle(x, w, b, "silu")
        _poison((m, inter), (splits * m, 2 * inter))
        h, none = _cuda.gated_linear_fwd(x, w, b, "silu", False, decode_splits=splits)
        assert none is None
        kt.assert_matches_oracle(h, want, torch_out=torch_h, name=f"{m}x{hidden}->{inter} splits={splits}")


@pytest.mark.gpu
def test_gated_auto_order():
    """auto: cuda at the cut (the decode kernel) and past it or with a gradient (the gated GEMM, on an
    sm90 GPU), triton where the GEMM cannot take I (not a multiple of 8) past the cut."""
    _gpu()
    dev = torch.device("cuda", 0)
    sm90 = not _cuda.gated_linear_supports(True, "cuda", 0, torch.bfloat16, False, 14336, 4096, False)
    assert gated.LEVELS.resolve("auto", dev, torch.bfloat16, False, 14336, 4096, True) == "cuda"
    assert gated.LEVELS.resolve("auto", dev, torch.bfloat16, False, 14336, 4096, False) == ("cuda" if sm90 else "triton")
    assert gated.LEVELS.resolve("auto", dev, torch.bfloat16, True, 14336, 4096, True) == ("cuda" if sm90 else "triton")
    assert gated.LEVELS.resolve("auto", dev, torch.bfloat16, False, 13, 64, False) == "triton"
    x, w, _ = _gated_inputs(40, 64, 13, torch.bfloat16, 0, False)
    with pytest.raises(BackendUnavailable, match="intermediate I=13 is not a multiple of 8.*pad it to 16"):
        kp_fused_mlp.gated_linear(x, w, backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 32, 33])
def test_gated_mlp_streams_the_down_projection_through_linear_act(m, seed, monkeypatch):
    """At the cuda level (decode) GatedMLP's down projection runs linear_act's cuda level (its
    module stays an nn.Linear); past the cut, with a gradient, or with a hook on down_proj it runs
    the module."""
    _gpu()
    mlp = kp_fused_mlp.GatedMLP(1032, 264, "silu", bias=True, device="cuda", dtype=torch.bfloat16)
    assert type(mlp.down_proj) is torch.nn.Linear
    calls = []
    real = modules.linear_act
    monkeypatch.setattr(modules, "linear_act", lambda *a, **k: calls.append(k.get("backend")) or real(*a, **k))
    x = kt.randn((m, 1032), dtype=torch.bfloat16, device="cuda", seed=seed)
    with torch.no_grad():
        y = mlp(x)
    w, b = mlp.gate_up_weight.double(), mlp.gate_up_bias.double()
    h = reference.gated_linear(x.double(), w, b, "silu", acc=torch.float64)
    want = F.linear(h, mlp.down_proj.weight.double(), mlp.down_proj.bias.double())
    kt.assert_matches_oracle(y, want)
    assert calls == (["cuda"] if linear.linear_decodes(h, 1032, 264) else []), calls
    calls.clear()
    handle = mlp.down_proj.register_forward_hook(lambda *a: None)
    with torch.no_grad():
        mlp(x)
    handle.remove()
    mlp(x.requires_grad_(True)).float().sum().backward()  # training: triton + the module
    assert calls == []
