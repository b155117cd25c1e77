"""GatedMLP's fused backward (kp_fused_mlp.gated_mlp; the cuda level's gated-gradient GEMM,
kp/gemm/sm90_dgated.h): dP = [dh up act'(gate) | dh act(gate)] with dh = dy Wd in one GEMM, every
row forced, on M / H / I tails, against float64 with NaN-poisoned outputs; GatedMLP's gradients
through it against float64 at odd and real sizes; that the module takes it (and when it does
not); torch.compile, opcheck, a CUDA graph, bad input. GPU only (sm90), but the plan test."""
import copy
import threading

import pytest
import torch
import torch.nn.functional as F
from kp_core import testing as kt
from mlp_helpers import poisoned_outputs

import kp_fused_mlp
from kp_fused_mlp import _cuda, reference

ACTS = list(kp_fused_mlp.GATED_ACTIVATIONS)
DGATED_ROWS = ["pingpong_128x128_c2x1"]  # gated_table.h's DGatedRows
# (M, H, I): M 1, 7, 130, 1031 and past 8K; H and I multiples of 8 but of no tile, I off the
# epilogue's 32-column groups (136, 520, 1048, 40).
SHAPES = [(1, 72, 136), (7, 1000, 520), (130, 72, 136), (1031, 1000, 520), (8200, 1032, 1048), (300, 64, 40)]


def _sm90():
    why = _cuda.gated_linear_supports(True, "cuda", 0, torch.bfloat16, True, 8, 8)
    if why:
        pytest.skip(why)


def _dgated_oracle(dy, wd, pre, act):
    """dP in float64 from the same (rounded) inputs."""
    inter = wd.shape[1]
    dh = dy.double() @ wd.double()
    g, u = pre.double()[:, :inter], pre.double()[:, inter:]
    a = reference.GATES[act](g)
    da = torch.func.grad(lambda t: reference.GATES[act](t).sum())(g)
    return torch.cat([dh * u * da, dh * a], dim=1)


def _dgated_torch(dy, wd, pre, act):
    """What the unfused backward computes in dy's dtype: dh rounded, then the elementwise pass."""
    inter = wd.shape[1]
    dh = (dy @ wd).float()
    g, u = pre.float()[:, :inter].requires_grad_(True), pre.float()[:, inter:]
    a = reference.GATES[act](g)
    (da,) = torch.autograd.grad(a, g, torch.ones_like(a))
    return torch.cat([dh * u * da, dh * a.detach()], dim=1).to(dy.dtype)


def _dgated_inputs(m, hidden, inter, dtype, seed):
    dy = kt.randn((m, hidden), dtype=dtype, device="cuda", seed=seed)
    wd = kt.randn((hidden, inter), dtype=dtype, device="cuda", seed=seed + 1, scale=hidden**-0.5)
    pre = kt.randn((m, 2 * inter), dtype=dtype, device="cuda", seed=seed + 2, scale=1.5)
    return dy, wd, pre


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("row", DGATED_ROWS)
def test_dgated_every_row_matches_oracle(row, act, dtype, seed):
    _sm90()
    config = _cuda.NATIVE.module.gated_configs().index(row)
    for i, (m, hidden, inter) in enumerate(SHAPES):
        dy, wd, pre = _dgated_inputs(m, hidden, inter, dtype, seed + i)
        want = _dgated_oracle(dy, wd, pre, act)
        with poisoned_outputs("cuda", [want.numel() * 2, want.numel() * 8]):
            got = _cuda.gated_down_grad(dy, wd, pre, act, config=config)
        kt.assert_matches_oracle(got, want, torch_out=_dgated_torch(dy, wd, pre, act), name=f"{row} {m}x{hidden}->{inter}")
    assert _cuda.gated_down_grad(dy[:0], wd, pre[:0], act, config=config).shape == (0, 2 * inter)


@pytest.mark.gpu
def test_dgated_strided_operands_and_refusals(seed):
    """dy and P as strided row views, wd a transposed view (copied to TMA's layout); a row without
    gated-gradient kernels and a bad activation code refused by the native side."""
    _sm90()
    m, hidden, inter = 260, 136, 264
    dy, wd, pre = _dgated_inputs(m, hidden, inter, torch.bfloat16, seed)
    dy_s = torch.zeros((m, hidden + 8), dtype=dy.dtype, device="cuda")[:, :hidden].copy_(dy)
    pre_s = torch.zeros((m, 2 * inter + 8), dtype=dy.dtype, device="cuda")[:, : 2 * inter].copy_(pre)
    wd_t = wd.t().contiguous().t()
    got = _cuda.gated_down_grad(dy_s, wd_t, pre_s, "silu")
    kt.assert_matches_oracle(got, _dgated_oracle(dy, wd, pre, "silu"), name="strided")
    with pytest.raises(ValueError, match="no gated-gradient kernel"):
        _cuda.gated_down_grad(dy, wd, pre, "silu", config=_cuda.NATIVE.module.gated_configs().index("pingpong_128x128_c1x2"))
    with pytest.raises(ValueError, match="multiple of 8"):
        _cuda.gated_down_grad(dy[:, :130], wd[:130], pre, "silu")


@pytest.mark.gpu
def test_dgated_as_a_threads_first_cuda_work(seed):
    """A thread whose first CUDA work is kp's GEMM (as an autograd worker's is when GatedMLP's fused
    backward is the first backward of a process): the TMA descriptors need the device's context
    bound to that thread (kp::bind_context). Before, they failed and the kernel hit an illegal
    instruction."""
    _sm90()
    dy, wd, pre = _dgated_inputs(256, 136, 264, torch.bfloat16, seed)
    want = _cuda.gated_down_grad(dy, wd, pre, "silu")
    spare = torch.empty_like(want)  # a cached block for the thread's output: no cudaMalloc there
    del spare
    torch.cuda.synchronize()
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("dpre", _cuda.gated_down_grad(dy, wd, pre, "silu")))
    worker.start()
    worker.join()
    torch.cuda.synchronize()
    assert torch.equal(out["dpre"], want)


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_dgated_operand_shapes_refused_before_any_launch(device):
    """The native side sees pointers and sizes: a down weight or P that does not match dy would be
    read out of bounds, so the Python entry refuses it first (no GPU needed for the refusals)."""
    dy = torch.zeros((256, 136), dtype=torch.bfloat16, device=device)
    wd, pre = torch.zeros((136, 264), dtype=torch.bfloat16, device=device), torch.zeros((256, 528), dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match=r"wd must be \[H, I\] and pre \[M, 2 \* I\]"):
        _cuda.gated_down_grad(dy, wd[:128], pre, "silu")
    with pytest.raises(ValueError, match="pre"):
        _cuda.gated_down_grad(dy, wd, pre[:255], "silu")
    with pytest.raises(ValueError, match="share a dtype"):
        _cuda.gated_down_grad(dy, wd.half(), pre, "silu")
    with pytest.raises(ValueError, match="2-D"):
        _cuda.gated_down_grad(dy[None], wd, pre, "silu")


def test_dgated_plan():
    """The row, and where GatedMLP fuses its backward (hidden <= 4096, gated_table.h's
    pick_dgated_row); the native module only, no GPU."""
    if _cuda.NATIVE.module is None:
        pytest.skip("no native module in this build")
    assert [_cuda.dgated_plan(m, 4096) for m in (1, 4096, 8192)] == [DGATED_ROWS[0]] * 3
    assert _cuda.dgated_plan(8192, 4104) == "" == _cuda.dgated_plan(1, 8192)
    assert _cuda.fuses_backward(4096) and not _cuda.fuses_backward(4104)


def _mlp_oracle_grads(mlp, x, dy, act):
    """Float64 gradients of x and every parameter of GatedMLP `mlp`, from the same rounded values."""
    leaves = [t.detach().double().requires_grad_(True) for t in (x, *mlp.parameters())]
    x64, w, *rest = leaves
    b = rest[0] if mlp.gate_up_bias is not None else None
    wd, bd = rest[-2:] if mlp.down_proj.bias is not None else (rest[-1], None)
    h = reference.gated_linear(x64, w, b, act, acc=torch.float64, out_dtype=torch.float64)
    y = F.linear(h, wd, bd)
    return torch.autograd.grad(y, leaves, dy.double())


def _torch_grads(mlp, x, dy, act):
    """torch's own gradients in the module's dtype (the unfused module, as Hugging Face writes it)."""
    inter = mlp.intermediate
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, *mlp.parameters())]
    x_, w, *rest = leaves
    b = rest[0] if mlp.gate_up_bias is not None else None
    wd, bd = rest[-2:] if mlp.down_proj.bias is not None else (rest[-1], None)
    bg, bu = (None, None) if b is None else (b[:inter], b[inter:])
    y = F.linear(reference.GATES[act](F.linear(x_, w[:inter], bg)) * F.linear(x_, w[inter:], bu), wd, bd)
    return torch.autograd.grad(y, leaves, dy)


def _count_fused(monkeypatch):
    calls = []
    real = _cuda.gated_down_grad
    monkeypatch.setattr(_cuda, "gated_down_grad", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


MLP_SHAPES = [((1, 72), 136), ((7, 1000), 520), ((2, 65, 128), 96), ((1031, 4096), 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("shape", MLP_SHAPES, ids=lambda s: f"{'x'.join(map(str, s[0]))}-{s[1]}")
def test_gated_mlp_fused_backward_matches_oracle(shape, act, with_bias, seed, monkeypatch):
    """GatedMLP's training call through gated_mlp: y and the gradients of x and of all five
    parameters against float64 (and within 2x torch's own error in bf16); the fused GEMM ran once."""
    _sm90()
    x_shape, inter = shape
    hidden = x_shape[-1]
    torch.manual_seed(seed)
    mlp = kp_fused_mlp.GatedMLP(hidden, inter, act, bias=with_bias, device="cuda", dtype=torch.bfloat16)
    x = kt.randn(x_shape, dtype=torch.bfloat16, device="cuda", seed=seed).requires_grad_(True)
    dy = kt.randn(x_shape, dtype=torch.bfloat16, device="cuda", seed=seed + 1)
    calls = _count_fused(monkeypatch)
    y = mlp(x)
    grads = torch.autograd.grad(y, [x, *mlp.parameters()], dy)
    assert len(calls) == 1
    want = _mlp_oracle_grads(mlp, x.reshape(-1, hidden), dy.reshape(-1, hidden), act)
    mine = _torch_grads(mlp, x.reshape(-1, hidden), dy.reshape(-1, hidden), act)
    names = ["x", "gate_up_weight"] + (["gate_up_bias"] if with_bias else []) + ["down.weight"] + (
        ["down.bias"] if with_bias else [])  # fmt: skip
    for name, g, w64, t in zip(names, grads, want, mine):
        kt.assert_matches_oracle(g.reshape(w64.shape), w64, torch_out=t, name=f"d{name} {shape}")


@pytest.mark.gpu
def test_gated_mlp_takes_the_fused_op_only_where_it_serves(seed, monkeypatch):
    """Not without a gradient, not with fused_backward False, not with a down projection of
    another dtype or a hooked one; the results agree with the unfused path."""
    _sm90()
    mlp = kp_fused_mlp.GatedMLP(264, 136, "silu", device="cuda", dtype=torch.bfloat16)
    x = kt.randn((40, 264), dtype=torch.bfloat16, device="cuda", seed=seed).requires_grad_(True)
    calls = _count_fused(monkeypatch)
    with torch.no_grad():
        mlp(x)
    y = mlp(x)
    y.sum().backward()
    fused = (x.grad.clone(), mlp.gate_up_weight.grad.clone(), mlp.down_proj.weight.grad.clone())
    assert len(calls) == 1
    x.grad = None
    mlp.zero_grad()
    unfused = copy.deepcopy(mlp)
    unfused.fused_backward = False
    y2 = unfused(x)
    y2.sum().backward()
    assert len(calls) == 1 and torch.equal(y, y2)
    for a, b in zip(fused, (x.grad, unfused.gate_up_weight.grad, unfused.down_proj.weight.grad)):
        kt.assert_matches_oracle(a, b.double(), bound=2e-2)  # two bf16 paths: dh rounded once or not
    handle = mlp.down_proj.register_forward_hook(lambda *a: None)
    mlp(x).sum().backward()
    handle.remove()
    assert len(calls) == 1
    wide = kp_fused_mlp.GatedMLP(4104, 64, "silu", device="cuda", dtype=torch.bfloat16)  # hidden past the cut
    wide(kt.randn((8, 4104), dtype=torch.bfloat16, device="cuda", seed=seed).requires_grad_(True)).sum().backward()
    assert len(calls) == 1


@pytest.mark.gpu
def test_gated_mlp_fused_backward_compiles_opcheck_and_graphs(seed):
    _sm90()
    mlp = kp_fused_mlp.GatedMLP(136, 264, "gelu_tanh", bias=True, device="cuda", dtype=torch.bfloat16)
    x = kt.randn((70, 136), dtype=torch.bfloat16, device="cuda", seed=seed).requires_grad_(True)
    eager = copy.deepcopy(mlp)
    y = kt.compiled(mlp, device_type="cuda")(x)
    y.sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    eager(x2).sum().backward()
    torch.testing.assert_close(y, eager(x2.detach()))
    for a, b in ((x.grad, x2.grad), (mlp.gate_up_weight.grad, eager.gate_up_weight.grad),
                 (mlp.down_proj.weight.grad, eager.down_proj.weight.grad), (mlp.gate_up_bias.grad, eager.gate_up_bias.grad)):
        torch.testing.assert_close(a, b)  # fmt: skip
    args = (x.detach().requires_grad_(True), mlp.gate_up_weight.detach().requires_grad_(True),
            mlp.gate_up_bias.detach().requires_grad_(True), mlp.down_proj.weight.detach().requires_grad_(True),
            mlp.down_proj.bias.detach().requires_grad_(True), "gelu_tanh", "cuda")  # fmt: skip
    kt.opcheck(torch.ops.kp_fused_mlp.gated_mlp_fwd, args)

    def step(a):
        a = a.detach().requires_grad_(True)
        eager(a).sum().backward()
        return a.grad

    got = kt.graph_captured(step, x.detach())
    torch.testing.assert_close(got, x2.grad)


@pytest.mark.gpu
def test_replace_mlps_trains_a_bf16_llama_through_the_fused_backward(seed, monkeypatch):
    """A tiny bf16 Llama (hidden 64, intermediate 128, as real QK-sized models go small) after
    replace_mlps at the cuda level: one training step runs every MLP's backward through the fused
    GEMM; the MLP weights' gradients against the float64 unswapped model within bf16's bound and
    within 2x the unswapped bf16 model's own error."""
    _sm90()
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=101, max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(seed)
    original = transformers.LlamaForCausalLM(config)
    oracle = copy.deepcopy(original).double().cuda().train()
    original = original.to("cuda", torch.bfloat16).train()
    model = copy.deepcopy(original)
    assert len(kp_fused_mlp.replace_mlps(model, backend="cuda")) == 2
    calls = _count_fused(monkeypatch)
    ids = torch.randint(0, 101, (3, 40), generator=kt.generator(seed)).cuda()
    for m in (model, original, oracle):
        m(ids, labels=ids).loss.backward()
    assert len(calls) == 2  # one fused GEMM a layer
    for i, (mine, theirs, want) in enumerate(zip(model.model.layers, original.model.layers, oracle.model.layers)):
        gu = lambda mlp: torch.cat([mlp.gate_proj.weight.grad, mlp.up_proj.weight.grad])  # noqa: E731
        kt.assert_matches_oracle(mine.mlp.gate_up_weight.grad, gu(want.mlp), torch_out=gu(theirs.mlp),
                                 name=f"layer {i} gate/up")  # fmt: skip
        kt.assert_matches_oracle(mine.mlp.down_proj.weight.grad, want.mlp.down_proj.weight.grad,
                                 torch_out=theirs.mlp.down_proj.weight.grad, name=f"layer {i} down")  # fmt: skip
    torch.optim.SGD(model.parameters(), lr=0.1).step()
