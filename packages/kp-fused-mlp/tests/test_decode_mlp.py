"""GatedMLP's fused decode kernel (csrc/decode_mlp.cu: both projections in one persistent kernel
with two grid barriers), against the float64 MLP: both tma rows forced at 1-16 tokens on odd sizes
(partial gated and down tiles, K tails, one 128-row block, more blocks than CTAs can split), Llama
sizes by the plan, both activations, biases, both dtypes, NaN-poisoned outputs and workspaces;
determinism and the barrier counter over many calls, two rows and two streams; CUDA graphs replayed
on new inputs; GatedMLP taking it (and not, where it must not); the plan and its refusals."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import load_native
from kp_core import testing as kt

import kp_fused_mlp
from kp_fused_mlp import _cuda, modules, reference

NATIVE = load_native("kp_fused_mlp")
TMA_ROWS = ["decode_tma_m8", "decode_tma_m16", "decode_tma_m32"]
DTYPES = [torch.bfloat16, torch.float16]


def _sm90():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not NATIVE.loaded:
        pytest.skip("built without its CUDA level")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the fused decode kernel needs sm90")


def _inputs(m, hidden, inter, dtype, seed, bias):
    x = kt.randn((m, hidden), dtype=dtype, device="cuda", seed=seed)
    w_gu = kt.randn((2 * inter, hidden), dtype=dtype, device="cuda", seed=seed + 1, scale=hidden**-0.5)
    w_d = kt.randn((hidden, inter), dtype=dtype, device="cuda", seed=seed + 2, scale=inter**-0.5)
    b_gu = kt.randn((2 * inter,), dtype=dtype, device="cuda", seed=seed + 3, scale=0.5) if bias else None
    b_d = kt.randn((hidden,), dtype=dtype, device="cuda", seed=seed + 4, scale=0.5) if bias else None
    return x, w_gu, b_gu, w_d, b_d


def _oracle(x, w_gu, b_gu, w_d, b_d, act):
    """(the float64 MLP, torch's own in the dtype: h rounded, then the down projection)."""
    d = lambda t: None if t is None else t.double()
    want = F.linear(reference.gated_linear(d(x), d(w_gu), d(b_gu), act, acc=torch.float64), d(w_d), d(b_d))
    inter = w_gu.shape[0] // 2
    bg, bu = (None, None) if b_gu is None else (b_gu[:inter], b_gu[inter:])
    h = reference.GATES[act](F.linear(x, w_gu[:inter], bg)) * F.linear(x, w_gu[inter:], bu)
    return want, F.linear(h, w_d, b_d)


def _poison(m, hidden, inter, plan):
    kt.poison_allocator("cuda", [4 * m * hidden, 2 * m * inter, plan["partial_bytes"]] * 2)


def _run(x, w_gu, b_gu, w_d, b_d, act, row=None):
    return _cuda.gated_mlp_decode(x, w_gu, b_gu, w_d, b_d, act, decode_row=row)


@pytest.mark.gpu
@pytest.mark.parametrize("row", TMA_ROWS)
@pytest.mark.parametrize("hidden, inter", [(8, 8), (136, 264), (1032, 200), (4104, 136), (264, 20008)], ids=str)
def test_forced_rows_match_oracle(row, hidden, inter, seed):
    """Forced at any size: one gated tile and one down tile (8, 8); partial last down tiles (hidden
    % 16 = 8) and a block of one tile (4104: 257 tiles); K tails inside a 64-column box (200, 136);
    more gated tiles than a pass (20008: 2501 tiles); the row's token counts with tails; both
    activations, with and without biases, both dtypes."""
    _sm90()
    tokens = {"decode_tma_m8": [1, 3, 8], "decode_tma_m16": [9, 16], "decode_tma_m32": [17, 32]}[row]
    for i, m in enumerate(tokens):
        dtype = DTYPES[i % 2]
        plan = _cuda.gated_mlp_decode_plan(m, hidden, inter, dtype, decode_row=row)
        assert plan["row"] == row and plan["splits"] >= 1, plan
        for act in kp_fused_mlp.GATED_ACTIVATIONS:
            for bias in (True, False):
                args = _inputs(m, hidden, inter, dtype, seed + m + hidden, bias)
                want, torch_y = _oracle(*args, act)
                _poison(m, hidden, inter, plan)
                y = _run(*args, act, row)
                assert y.shape == (m, hidden) and y.dtype == dtype
                kt.assert_matches_oracle(y, want, torch_out=torch_y,
                                         name=f"{row} m={m} {hidden}/{inter} {act} bias={bias} {dtype} {plan}")  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("hidden, inter", [(4096, 14336), (8192, 28672), (256, 9216)], ids=str)
def test_llama_sizes_by_the_plan(hidden, inter, seed):
    """The plan serves Llama-3-8B's and the larger shape at 3-32 tokens (the gated projection's tma
    rows) and not at 1-2 (its fma rows) or 33; the fused output against the float64 MLP and within the
    bound of the two-kernel path."""
    _sm90()
    for m in (1, 2):
        assert _cuda.gated_mlp_decode_plan(m, hidden, inter)["row"] == "", m
    for m in (3, 8, 16, 32):
        plan = _cuda.gated_mlp_decode_plan(m, hidden, inter)
        assert plan["row"] == ("decode_tma_m8" if m <= 8 else "decode_tma_m16" if m <= 16 else "decode_tma_m32"), (m, plan)
        assert plan["blocks"] == -(-hidden // 128) and 1 <= plan["splits"] <= 64, plan
        args = _inputs(m, hidden, inter, torch.bfloat16, seed + m, True)
        want, torch_y = _oracle(*args, "silu")
        _poison(m, hidden, inter, plan)
        kt.assert_matches_oracle(_run(*args, "silu"), want, torch_out=torch_y, name=f"m={m} {hidden}/{inter} {plan}")
    assert _cuda.gated_mlp_decode_plan(33, hidden, inter)["row"] == ""


@pytest.mark.gpu
def test_deterministic_over_many_calls_rows_and_streams(seed):
    """The barrier counter is never reset: 40 calls in a row alternating the two rows (8 and 16
    tokens), then calls on a second stream (its own counter), are each bit-identical to the first."""
    _sm90()
    args16 = _inputs(16, 1032, 2056, torch.bfloat16, seed, True)
    args8 = tuple(t if t is None or t.dim() != 2 or t.shape[0] != 16 else t[:8] for t in args16)
    first = {m: _run(*a, "silu", r) for m, a, r in ((16, args16, "decode_tma_m16"), (8, args8, "decode_tma_m8"))}
    for i in range(40):
        m, a, r = (16, args16, "decode_tma_m16") if i % 2 else (8, args8, "decode_tma_m8")
        assert torch.equal(_run(*a, "silu", r), first[m]), f"call {i} (m={m}) differs"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ys = [_run(*args16, "silu", "decode_tma_m16") for _ in range(5)]
    torch.cuda.current_stream().wait_stream(side)
    assert all(torch.equal(y, first[16]) for y in ys)
    kt.assert_matches_oracle(first[16], _oracle(*args16, "silu")[0])


@pytest.mark.gpu
def test_graph_replays_on_new_inputs(seed):
    """Captured (the workspaces and a counter allocated inside the capture), replayed three times on
    new inputs copied into the captured ones, each against the oracle."""
    _sm90()
    args = _inputs(16, 4096, 14336, torch.bfloat16, seed, True)
    static = [t.clone() if t is not None else None for t in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _run(*static, "gelu_tanh")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _run(*static, "gelu_tanh")
    for r in range(3):
        fresh = _inputs(16, 4096, 14336, torch.bfloat16, seed + 10 * (r + 1), True)
        for dst, src in zip(static, fresh):
            if dst is not None:
                dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        kt.assert_matches_oracle(out, _oracle(*fresh, "gelu_tanh")[0], name=f"replay {r}")


@pytest.mark.gpu
def test_gated_mlp_takes_it_for_inference_only(seed, monkeypatch):
    """GatedMLP at 16 tokens (Llama-3-8B, no grad) runs the fused kernel once; with a gradient, with
    fused_decode off, or at 1 token it does not; both answers within the MLP's bound."""
    _sm90()
    mlp = kp_fused_mlp.GatedMLP(4096, 14336, "silu", bias=True, device="cuda", dtype=torch.bfloat16)
    calls = []
    real = _cuda._launch_gated_mlp_decode  # what the eager path and gated_mlp_decode launch through
    monkeypatch.setattr(_cuda, "_launch_gated_mlp_decode", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    x = kt.randn((2, 8, 4096), dtype=torch.bfloat16, device="cuda", seed=seed)  # 16 tokens in a batch
    b_gu, b_d = mlp.gate_up_bias, mlp.down_proj.bias
    want = _oracle(x.reshape(16, 4096), mlp.gate_up_weight, b_gu, mlp.down_proj.weight, b_d, "silu")[0]
    with torch.no_grad():
        y = mlp(x)
        assert calls == [16], calls
        kt.assert_matches_oracle(y.reshape(16, 4096), want, name="fused")
        mlp.fused_decode = False
        y2 = mlp(x)
        mlp.fused_decode = True
        kt.assert_matches_oracle(y2.reshape(16, 4096), want, name="two kernels")
        mlp(x[:1, :1])
    assert calls == [16], calls
    mlp(x).float().sum().backward()
    assert calls == [16] and mlp.gate_up_weight.grad is not None


def test_operands_must_chain():
    """The fused kernel reads every size from its operands: shapes that do not chain, biases of the
    wrong length, dtype or device are refused before any launch (CPU tensors: the check alone)."""
    x, w_gu, w_d = torch.empty(4, 64), torch.empty(48, 64), torch.empty(64, 24)
    b_gu, b_d = torch.empty(48), torch.empty(64)
    assert _cuda.gated_mlp_operands_problem(x, w_gu, b_gu, w_d, b_d) is None
    assert _cuda.gated_mlp_operands_problem(x, w_gu, None, w_d, None) is None
    bad = [
        ((torch.empty(4, 56), w_gu, None, w_d, None), "shapes do not chain"),
        ((x, torch.empty(47, 64), None, w_d, None), "shapes do not chain"),
        ((x, w_gu, None, torch.empty(72, 24), None), "shapes do not chain"),
        ((x, w_gu, None, torch.empty(64, 23), None), "shapes do not chain"),
        ((x, w_gu, torch.empty(24), w_d, None), "b_gate_up must be"),
        ((x, w_gu, None, w_d, torch.empty(64, dtype=torch.float16)), "b_down must be"),
        ((x, w_gu.half(), None, w_d, None), "share a dtype"),
        ((torch.empty(2, 4, 64), w_gu, None, w_d, None), "must be 2-D"),
    ]
    for args, what in bad:
        assert what in (_cuda.gated_mlp_operands_problem(*args) or ""), (what, [tuple(a.shape) for a in args if a is not None])


@pytest.mark.gpu
def test_refusals_are_clear(seed):
    _sm90()
    args = _inputs(16, 1032, 264, torch.bfloat16, seed, False)
    with pytest.raises(ValueError, match="does not take this call: the gated projection of this call runs the fma or mma"):
        _run(*args, "silu")
    with pytest.raises(ValueError, match="must be a tma row"):
        _run(*args, "silu", "decode_m16")
    with pytest.raises(ValueError, match="more tokens than the forced row's tile"):
        _run(*args, "silu", "decode_tma_m8")
    x, w_gu, b_gu, w_d, b_d = args
    with pytest.raises(ValueError, match="shapes do not chain"):
        _cuda.gated_mlp_decode(x[:, :1024], w_gu, None, w_d, None, "silu")  # before any launch
    with pytest.raises(ValueError, match="hidden and intermediate must be multiples of 8"):
        _cuda.gated_mlp_decode(x[:, :1028], w_gu[:, :1028], None, w_d[:1028], None, "silu", decode_row="decode_tma_m16")


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 3, 7, 1000])
def test_forced_down_splits(splits, seed):
    """The down projection's K splits forced (sweeps): one (no sum), odd counts that do not divide
    the k-steps, more than the k-steps (clamped to them and to 64); more (block, split) items than
    CTAs where the blocks are many (hidden 40968: 321 blocks)."""
    _sm90()
    for m, hidden, inter in ((16, 1032, 2056), (3, 136, 200), (5, 40968, 264)):
        plan = _cuda.gated_mlp_decode_plan(m, hidden, inter, decode_row="decode_tma_m8" if m <= 8 else "decode_tma_m16",
                                           decode_splits=splits)  # fmt: skip
        assert plan["splits"] == min(splits, -(-inter // 128), 64), plan
        args = _inputs(m, hidden, inter, torch.float16, seed + splits, True)
        want, torch_y = _oracle(*args, "gelu_tanh")
        _poison(m, hidden, inter, plan)
        y = _cuda.gated_mlp_decode(*args, "gelu_tanh", decode_row=plan["row"], decode_splits=splits)
        kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"splits={splits} m={m} {hidden}/{inter} {plan}")
    with pytest.raises(ValueError, match="decode_splits must be a positive int"):
        _cuda.gated_mlp_decode_plan(16, 1032, 2056, decode_splits=0)


@pytest.mark.gpu
def test_barrier_counter_wraps(seed):
    """The grid barrier's counter advances 2^24 a call and wraps after 2^40 calls: started two calls
    before the wrap, every call across it is still bit-identical to the first (the barrier compares
    the signed distance to its target)."""
    _sm90()
    args = _inputs(16, 1032, 2056, torch.bfloat16, seed, True)
    first = _run(*args, "silu", "decode_tma_m16")
    counter = _cuda._barrier_counter(args[0].device)
    counter.fill_(-2 * (1 << 24))  # 2^64 - 2 x 2^24 as an unsigned 64-bit count
    for i in range(4):
        assert torch.equal(_run(*args, "silu", "decode_tma_m16"), first), f"call {i} across the wrap differs"
    torch.cuda.synchronize()
    assert counter.item() == 2 * (1 << 24), counter.item()


@pytest.mark.gpu
def test_compiled_gated_mlp_runs_it(seed, monkeypatch):
    """torch.compile(GatedMLP, fullgraph=True) at 16 tokens (inference) runs the fused kernel through
    its registered op, no graph break; opcheck of the op; against the float64 MLP."""
    _sm90()
    mlp = kp_fused_mlp.GatedMLP(4096, 14336, "silu", bias=True, device="cuda", dtype=torch.bfloat16)
    args = _inputs(16, 4096, 14336, torch.bfloat16, seed, True)
    kt.opcheck(modules.GATED_MLP_DECODE, (*args, "silu"))
    calls = []
    real = _cuda._launch_gated_mlp_decode  # what the eager path and gated_mlp_decode launch through
    monkeypatch.setattr(_cuda, "_launch_gated_mlp_decode", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    x = kt.randn((16, 4096), dtype=torch.bfloat16, device="cuda", seed=seed)
    compiled = torch.compile(mlp, fullgraph=True, dynamic=False)
    with torch.no_grad():
        y = compiled(x)
    assert calls and set(calls) == {16}, calls
    want = _oracle(x, mlp.gate_up_weight, mlp.gate_up_bias, mlp.down_proj.weight, mlp.down_proj.bias, "silu")[0]
    kt.assert_matches_oracle(y, want, name="compiled")
