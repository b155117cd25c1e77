"""swiglu at every level against the float64 oracle: odd and real-model shapes, empty tensors,
packed and strided layouts, NaN-poisoned outputs, gradients, bad input, torch integration."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, testing as kt

import kp_fused_mlp
from kp_fused_mlp import glu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rows..., hidden): odd sizes, a single row, real intermediate sizes (Llama-3-8B 14336, Qwen 11008).
SHAPES = [(1, 1), (3, 5), (7, 130), (2, 3, 257), (16, 1024)]
GPU_SHAPES = [(1, 14336), (64, 11008), (257, 4096), (1031, 8192)]
LAYOUTS = ["contiguous", "packed", "row-strided", "column-major", "expanded"]


def _skip_if_unsupported(level, dtype, shape):
    backend, device = level
    if device == "cpu" and shape in GPU_SHAPES:
        pytest.skip("GPU-sized shape")
    if backend == "triton" and device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("the Triton interpreter's bf16 is unreliable")


def _inputs(shape, dtype, device, layout, seed):
    """(gate, up, leaves): gate and up as the layout gives them, the leaves that get gradients."""
    hidden = shape[-1]
    if layout == "packed":
        gate_up = kt.randn((*shape[:-1], 2 * hidden), dtype=dtype, device=device, seed=seed, scale=2.0)
        return gate_up, None, [gate_up]
    gate = kt.randn(shape, dtype=dtype, device=device, seed=seed, scale=2.0)
    up = kt.randn(shape, dtype=dtype, device=device, seed=seed + 1)
    if layout == "row-strided":
        gate, up = kt.row_strided(gate), kt.row_strided(up, pad=3)
    elif layout == "column-major" and len(shape) == 2:
        gate, up = kt.column_major(gate), kt.column_major(up)
    elif layout == "expanded":
        gate = gate[..., :1, :].expand(shape) if len(shape) > 1 else gate
    return gate, up, [gate, up]


def _oracle(gate, up):
    if up is None:
        h = gate.shape[-1] // 2
        gate, up = gate[..., :h], gate[..., h:]
    return F.silu(gate.double()) * up.double(), F.silu(gate) * up  # torch's own rounds twice


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES + GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_backward_match_oracle(level, shape, dtype, layout, seed):
    backend, device = level
    _skip_if_unsupported(level, dtype, shape)
    gate, up, leaves = _inputs(shape, dtype, device, layout, seed)
    before = [t.clone() for t in leaves]
    want, torch_y = _oracle(gate, up)
    kt.poison_allocator(device, [want.numel() * 4] * 3)
    y = kp_fused_mlp.swiglu(gate, up, backend=backend)
    assert y.shape == want.shape and y.dtype == dtype and y.device == gate.device
    kt.assert_matches_oracle(y, want, torch_out=torch_y, name="y")

    leaves = [t.detach().requires_grad_(True) for t in leaves]
    g_in = leaves[0] if up is None else leaves[0].expand(gate.shape) if layout == "expanded" else leaves[0]
    dy = kt.randn(want.shape, dtype=dtype, device=device, seed=seed + 2)
    kt.poison_allocator(device, [want.numel() * 4] * 3)
    out = kp_fused_mlp.swiglu(g_in, None if up is None else leaves[1], backend=backend)
    got = torch.autograd.grad(out, leaves, dy)
    leaves64 = [t.detach().double().requires_grad_(True) for t in leaves]
    g64 = leaves64[0].expand(gate.shape) if layout == "expanded" else leaves64[0]
    ref = _oracle(g64, None if up is None else leaves64[1])[0]
    want_grads = torch.autograd.grad(ref, leaves64, dy.double())
    for name, g, w in zip(("d" + ("gate_up" if up is None else "gate"), "dup"), got, want_grads):
        assert g.dtype == dtype and g.shape == w.shape
        kt.assert_matches_oracle(g, w, name=name)
    for t, b in zip(leaves, before):
        torch.testing.assert_close(t.detach(), b, rtol=0, atol=0, msg="an input was written")


@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0,), (2, 0, 6)], ids=str)
def test_empty(level, shape, seed):
    backend, device = level
    gate = torch.empty(shape, device=device, requires_grad=True)
    up = torch.empty(shape, device=device, requires_grad=True)
    y = kp_fused_mlp.swiglu(gate, up, backend=backend)
    assert y.shape == shape
    y.sum().backward()
    assert gate.grad.shape == shape and up.grad.shape == shape


def test_bad_input_raises_clearly():
    g = torch.randn(4, 8)
    with pytest.raises(TypeError, match="swiglu: gate must be float32, float16 or bfloat16, got torch.int64"):
        kp_fused_mlp.swiglu(torch.ones(4, 8, dtype=torch.int64), g)
    with pytest.raises(TypeError, match="gate is torch.float32 but up is torch.float16"):
        kp_fused_mlp.swiglu(g, g.half())
    with pytest.raises(ValueError, match=r"up has shape \(4, 7\), expected \(4, 8\)"):
        kp_fused_mlp.swiglu(g, g[:, :7])
    with pytest.raises(ValueError, match="x is on cpu but up is on meta"):
        kp_fused_mlp.swiglu(g, torch.empty(4, 8, device="meta"))
    with pytest.raises(ValueError, match="even last dimension"):
        kp_fused_mlp.swiglu(torch.randn(4, 7))
    with pytest.raises(TypeError, match="gate_up must be a tensor"):
        kp_fused_mlp.swiglu([1.0, 2.0])
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot serve"):
        kp_fused_mlp.swiglu(g, g, backend="cuda")


def test_packed_gradient_lands_in_the_packed_tensor(level, seed):
    backend, device = level
    gate_up = kt.randn((5, 2 * 33), device=device, seed=seed).requires_grad_(True)
    kp_fused_mlp.swiglu(gate_up, backend=backend).sum().backward()
    g, u = gate_up.detach()[:, :33].double(), gate_up.detach()[:, 33:].double()
    s = torch.sigmoid(g)
    want = torch.cat([u * s * (1 + g * (1 - s)), g * s], dim=1)
    kt.assert_matches_oracle(gate_up.grad, want, name="dgate_up")


def test_opcheck(level, seed):
    backend, device = level
    g = kt.randn((5, 33), device=device, seed=seed).requires_grad_(True)
    u = kt.randn((5, 33), device=device, seed=seed + 1).requires_grad_(True)
    kt.opcheck(glu.SWIGLU.fwd_op, (g, u, backend))
    kt.opcheck(glu.SWIGLU.bwd_op, (g.detach(), g.detach(), u.detach(), backend))


def test_compile_fullgraph_forward_and_backward(level, seed):
    backend, device = level
    g = kt.randn((6, 40), device=device, seed=seed).requires_grad_(True)
    u = kt.randn((6, 40), device=device, seed=seed + 1).requires_grad_(True)
    fn = kt.compiled(lambda a, b: kp_fused_mlp.swiglu(a, b, backend=backend), device_type=g.device.type)
    y = fn(g, u)
    y.sum().backward()
    kt.assert_matches_oracle(y, F.silu(g.double()) * u.double())
    g64, u64 = g.detach().double(), u.detach().double()
    s = torch.sigmoid(g64)
    kt.assert_matches_oracle(g.grad, u64 * s * (1 + g64 * (1 - s)), name="dgate")  # the registered backward op
    kt.assert_matches_oracle(u.grad, g64 * s, name="dup")


def _penalty(gate, up, fn):
    """A gradient penalty: y.sum() + ||dy/dgate||^2, which needs second derivatives."""
    y = fn(gate, up)
    (dg,) = torch.autograd.grad(y.sum(), gate, create_graph=True)
    return y.sum() + (dg**2).sum()


def test_double_backward(level, seed):
    """The reference level is plain autograd (second derivatives right); the others must refuse,
    never drop the penalty's terms."""
    backend, device = level
    g = kt.randn((3, 16), device=device, seed=seed).requires_grad_(True)
    u = kt.randn((3, 16), device=device, seed=seed + 1).requires_grad_(True)
    kp = lambda a, b: kp_fused_mlp.swiglu(a, b, backend=backend)  # noqa: E731
    if backend != "reference":
        with pytest.raises(RuntimeError, match="double backward"):
            _penalty(g, u, kp).backward()
        return
    got = torch.autograd.grad(_penalty(g, u, kp), (g, u))
    d = [t.detach().double().requires_grad_(True) for t in (g, u)]
    want = torch.autograd.grad(_penalty(d[0], d[1], lambda a, b: F.silu(a) * b), d)
    for name, x, e in zip(("dgate", "dup"), got, want):
        kt.assert_matches_oracle(x, e, dtype=torch.float32, bound=1e-4, name=name)


@pytest.mark.gpu
def test_cuda_graph_capture(seed):
    g = kt.randn((64, 4096), dtype=torch.bfloat16, device="cuda", seed=seed)
    u = kt.randn((64, 4096), dtype=torch.bfloat16, device="cuda", seed=seed + 1)
    y = kt.graph_captured(lambda a, b: kp_fused_mlp.swiglu(a, b, backend="cuda"), g, u)
    kt.assert_matches_oracle(y, F.silu(g.double()) * u.double())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_second_gpu_and_current_stream(backend, seed):
    """Kernels launch on the tensors' device (the last GPU, with GPU 0 current) and on torch's current
    stream, forward and backward."""
    device = f"cuda:{torch.cuda.device_count() - 1}"
    gate = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed).requires_grad_()
    up = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed + 1).requires_grad_()
    dy = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed + 2)
    stream = torch.cuda.Stream(device=device)
    with torch.cuda.device(0), torch.cuda.stream(stream):
        y = kp_fused_mlp.swiglu(gate, up, backend=backend)
        dgate, dup = torch.autograd.grad(y, (gate, up), dy)
    stream.synchronize()
    g, u = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    want = F.silu(g) * u
    want_dg, want_du = torch.autograd.grad(want, (g, u), dy.double())
    kt.assert_matches_oracle(y, want, dtype=torch.bfloat16)
    kt.assert_matches_oracle(dgate, want_dg, dtype=torch.bfloat16)
    kt.assert_matches_oracle(dup, want_du, dtype=torch.bfloat16)
