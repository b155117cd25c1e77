"""The gated units (swiglu; geglu, exact and tanh) at every level against the float64 oracle: odd
and real-model shapes, empty tensors, packed and strided layouts, NaN-poisoned outputs, gradients,
untouched inputs, bad input, torch integration. Every test taking `op` runs once per entry of OPS."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, load_native, testing as kt

import kp_fused_mlp
from kp_fused_mlp import glu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (rows..., hidden): odd sizes, a single row, real intermediate sizes (Llama-3-8B 14336, Qwen 11008).
SHAPES = [(1, 1), (3, 5), (7, 130), (2, 3, 257), (16, 1024)]
GPU_SHAPES = [(1, 14336), (64, 11008), (257, 4096), (1031, 8192)]
LAYOUTS = ["contiguous", "packed", "row-strided", "column-major", "expanded"]


def _geglu_tanh(*args, **kwargs):
    return kp_fused_mlp.geglu(*args, approximate="tanh", **kwargs)


# name: (kp's function, the activation in torch: the oracle's formula, the registered op's activation)
OPS = {
    "swiglu": (kp_fused_mlp.swiglu, F.silu, "silu"),
    "geglu": (kp_fused_mlp.geglu, F.gelu, "gelu"),
    "geglu_tanh": (_geglu_tanh, lambda t: F.gelu(t, approximate="tanh"), "gelu_tanh"),
}


@pytest.fixture(params=list(OPS))
def op(request):
    """(kp's function, torch's activation, the registered op's activation name)."""
    return OPS[request.param]


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


def _oracle(act, gate, up):
    if up is None:
        h = gate.shape[-1] // 2
        gate, up = gate[..., :h], gate[..., h:]
    return act(gate.double()) * up.double(), act(gate) * up  # torch's own rounds twice


def _floors(op, gate, up, leaves, dy, layout):
    """(y's, [each gradient's]) denominators floors (kt.rel_error's `scale`). torch's gelu computes
    Phi = (1 + erf) / 2 (or (1 + tanh) / 2), whose error is absolute, an ulp of 1, not relative: a
    result whose Phi is small (gate << 0, a single element) is only accurate relative to the terms
    |gate| |up| (y), |dy| |up| and |dy| |gate| (gradients), which the floors are. swiglu: none."""
    if op[2] == "silu":
        return 0.0, [0.0, 0.0]
    a64 = [t.detach().double().abs().requires_grad_(True) for t in leaves]
    ga = a64[0].expand(gate.shape) if layout == "expanded" else a64[0]
    terms = _oracle(lambda t: t, ga, None if up is None else a64[1])[0]  # |gate| |up|
    grads = torch.autograd.grad(terms, a64, dy.double().abs())
    return terms.norm().item(), [g.norm().item() for g in grads]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES + GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_backward_match_oracle(level, op, shape, dtype, layout, seed):
    backend, device = level
    fn, act, _ = op
    _skip_if_unsupported(level, dtype, shape)
    gate, up, leaves = _inputs(shape, dtype, device, layout, seed)
    before = [t.clone() for t in leaves]
    want, torch_y = _oracle(act, gate, up)
    kt.poison_allocator(device, [want.numel() * 4] * 3)
    y = fn(gate, up, backend=backend)
    assert y.shape == want.shape and y.dtype == dtype and y.device == gate.device
    dy = kt.randn(want.shape, dtype=dtype, device=device, seed=seed + 2)
    y_floor, grad_floors = _floors(op, gate, up, leaves, dy, layout)
    kt.assert_matches_oracle(y, want, torch_out=torch_y, scale=y_floor, name="y")

    leaves = [t.detach().requires_grad_(True) for t in leaves]
    g_in = leaves[0] if up is None else leaves[0].expand(gate.shape) if layout == "expanded" else leaves[0]
    kt.poison_allocator(device, [want.numel() * 4] * 3)
    out = fn(g_in, None if up is None else leaves[1], backend=backend)
    got = torch.autograd.grad(out, leaves, dy)
    leaves64 = [t.detach().double().requires_grad_(True) for t in leaves]
    g64 = leaves64[0].expand(gate.shape) if layout == "expanded" else leaves64[0]
    ref = _oracle(act, g64, None if up is None else leaves64[1])[0]
    want_grads = torch.autograd.grad(ref, leaves64, dy.double())
    for name, g, w, floor in zip(("d" + ("gate_up" if up is None else "gate"), "dup"), got, want_grads, grad_floors):
        assert g.dtype == dtype and g.shape == w.shape
        kt.assert_matches_oracle(g, w, scale=floor, name=name)
    for t, b in zip(leaves, before):
        torch.testing.assert_close(t.detach(), b, rtol=0, atol=0, msg="an input was written")


@pytest.mark.parametrize("packed", [False, True], ids=["two", "packed"])
@pytest.mark.parametrize("shape", [(0, 8), (4, 0), (0,), (2, 0, 6)], ids=str)
def test_empty(level, op, shape, packed, seed):
    backend, device = level
    fn = op[0]
    if packed:
        leaves = [torch.empty((*shape[:-1], 2 * shape[-1]), device=device, requires_grad=True)]
    else:
        leaves = [torch.empty(shape, device=device, requires_grad=True) for _ in range(2)]
    y = fn(*leaves, backend=backend)
    assert y.shape == shape
    y.sum().backward()
    assert all(t.grad.shape == t.shape for t in leaves)


def test_bad_input_raises_clearly(op):
    fn, name = op[0], "geglu" if op[2] != "silu" else "swiglu"
    g = torch.randn(4, 8)
    with pytest.raises(TypeError, match=f"{name}: gate must be float32, float16 or bfloat16, got torch.int64"):
        fn(torch.ones(4, 8, dtype=torch.int64), g)
    with pytest.raises(TypeError, match=f"{name}: gate_up must be float32, float16 or bfloat16, got torch.int32"):
        fn(torch.ones(4, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match="gate is torch.float32 but up is torch.float16"):
        fn(g, g.half())
    with pytest.raises(ValueError, match=r"up has shape \(4, 7\), expected \(4, 8\)"):
        fn(g, g[:, :7])
    with pytest.raises(ValueError, match="x is on cpu but up is on meta"):
        fn(g, torch.empty(4, 8, device="meta"))
    with pytest.raises(ValueError, match=rf"{name}: a packed gate_up needs an even last dimension .* \(4, 7\)"):
        fn(torch.randn(4, 7))
    with pytest.raises(ValueError, match="even last dimension"):
        fn(torch.randn(()))
    with pytest.raises(TypeError, match="gate_up must be a tensor"):
        fn([1.0, 2.0])
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot serve"):
        fn(g, g, backend="cuda")


def test_geglu_approximate_is_checked():
    g = torch.randn(4, 8)
    for bad in ("erf", "Tanh", None, 1):
        with pytest.raises(ValueError, match="geglu: approximate must be 'none' or 'tanh'"):
            kp_fused_mlp.geglu(g, g, approximate=bad)


def test_packed_gradient_lands_in_the_packed_tensor(level, op, seed):
    backend, device = level
    fn, act, _ = op
    gate_up = kt.randn((5, 2 * 33), device=device, seed=seed).requires_grad_(True)
    fn(gate_up, backend=backend).sum().backward()
    g, u = gate_up.detach()[:, :33], gate_up.detach()[:, 33:]
    kt.assert_matches_oracle(gate_up.grad, torch.cat(_torch_grad(act, g, u), dim=1), name="dgate_up")


def _torch_grad(act, g, u):
    """(dgate, dup) of act(g) * u for dy = 1, in float64 autograd."""
    g, u = g.detach().double().requires_grad_(True), u.detach().double().requires_grad_(True)
    return torch.autograd.grad((act(g) * u).sum(), (g, u))


@pytest.mark.parametrize("packed", [False, True], ids=["two", "packed"])
def test_the_level_backward_writes_one_packed_gradient(level, op, packed, seed):
    """The registered backward of a packed call returns one [rows, 2 * cols] gradient, written by
    the level itself (no autograd accumulation of two halves)."""
    backend, device = level
    x = kt.randn((5, 66 if packed else 33), device=device, seed=seed)
    up = None if packed else kt.randn((5, 33), device=device, seed=seed + 1)
    dy = kt.randn((5, 33), device=device, seed=seed + 2)
    dx, dup = glu.GLU.bwd_op(dy, x, up, op[2], backend)
    g, u = (x[:, :33], x[:, 33:]) if packed else (x, up)
    g64, u64 = g.double().requires_grad_(True), u.double().requires_grad_(True)
    want = torch.autograd.grad(op[1](g64) * u64, (g64, u64), dy.double())
    if packed:
        assert dx.shape == (5, 66) and dup.numel() == 0
        kt.assert_matches_oracle(dx, torch.cat(want, dim=1), name="dgate_up")
    else:
        kt.assert_matches_oracle(dx, want[0], name="dgate")
        kt.assert_matches_oracle(dup, want[1], name="dup")


def test_native_checks_its_arguments_before_any_cuda_call():
    """C++ checks again (ValueError, never an abort), before touching the device: runs on CPU."""
    status = load_native("kp_fused_mlp")
    if not status.loaded:
        pytest.skip("built without its CUDA level")
    mod = status.module
    fwd = dict(gate=16, gate_stride=8, up=32, up_stride=8, y=48, rows=4, cols=8, act=2, dtype=2, device=0, stream=0)
    bwd = dict(dy=16, dy_stride=8, gate=16, gate_stride=16, up=48, up_stride=16, dgate=64, dup=80, out_stride=16,
               rows=4, cols=8, act=3, dtype=1, device=0, stream=0)  # fmt: skip
    with pytest.raises(ValueError, match="unsupported gated activation code 1"):
        mod.glu_fwd(**{**fwd, "act": 1})  # relu: a linear_act activation, not a gated one
    with pytest.raises(ValueError, match="unsupported dtype code 7"):
        mod.glu_fwd(**{**fwd, "dtype": 7})
    with pytest.raises(ValueError, match=r"gate_stride \(4\) must be >= cols \(8\)"):
        mod.glu_fwd(**{**fwd, "gate_stride": 4})
    with pytest.raises(ValueError, match="up must not be null"):
        mod.glu_fwd(**{**fwd, "up": 0})
    with pytest.raises(ValueError, match=r"dgate_stride \(4\) must be >= cols \(8\)"):
        mod.glu_bwd(**{**bwd, "out_stride": 4})
    with pytest.raises(ValueError, match="dup must not be null"):
        mod.glu_bwd(**{**bwd, "dup": 0})


@pytest.mark.parametrize("packed", [False, True], ids=["two", "packed"])
def test_opcheck(level, op, packed, seed):
    backend, device = level
    x = kt.randn((5, 66 if packed else 33), device=device, seed=seed).requires_grad_(True)
    u = None if packed else kt.randn((5, 33), device=device, seed=seed + 1).requires_grad_(True)
    dy = kt.randn((5, 33), device=device, seed=seed + 2)
    kt.opcheck(glu.GLU.fwd_op, (x, u, op[2], backend))
    kt.opcheck(glu.GLU.bwd_op, (dy, x.detach(), None if u is None else u.detach(), op[2], backend))


@pytest.mark.parametrize("packed", [False, True], ids=["two", "packed"])
def test_compile_fullgraph_forward_and_backward(level, op, packed, seed):
    backend, device = level
    fn, act, _ = op
    x = kt.randn((6, 80 if packed else 40), device=device, seed=seed).requires_grad_(True)
    u = None if packed else kt.randn((6, 40), device=device, seed=seed + 1).requires_grad_(True)
    compiled = kt.compiled(lambda a, b: fn(a, b, backend=backend), device_type=x.device.type)
    y = compiled(x, u)
    y.sum().backward()  # the registered backward op
    g, up = (x[:, :40], x[:, 40:]) if packed else (x, u)
    kt.assert_matches_oracle(y, act(g.detach().double()) * up.detach().double())
    dg, du = _torch_grad(act, g, up)
    if packed:
        kt.assert_matches_oracle(x.grad, torch.cat([dg, du], dim=1), name="dgate_up")
    else:
        kt.assert_matches_oracle(x.grad, dg, name="dgate")
        kt.assert_matches_oracle(u.grad, du, name="dup")


def _penalty(gate, up, fn):
    """A gradient penalty: y.sum() + ||dy/dgate||^2, which needs second derivatives."""
    y = fn(gate, up)
    (dg,) = torch.autograd.grad(y.sum(), gate, create_graph=True)
    return y.sum() + (dg**2).sum()


def test_double_backward(level, op, seed):
    """The reference level is plain autograd (second derivatives right); the others must refuse,
    never drop the penalty's terms."""
    backend, device = level
    fn, act, _ = op
    g = kt.randn((3, 16), device=device, seed=seed).requires_grad_(True)
    u = kt.randn((3, 16), device=device, seed=seed + 1).requires_grad_(True)
    kp = lambda a, b: fn(a, b, backend=backend)  # noqa: E731
    if backend != "reference":
        with pytest.raises(RuntimeError, match="double backward"):
            _penalty(g, u, kp).backward()
        return
    got = torch.autograd.grad(_penalty(g, u, kp), (g, u))
    d = [t.detach().double().requires_grad_(True) for t in (g, u)]
    want = torch.autograd.grad(_penalty(d[0], d[1], lambda a, b: act(a) * b), d)
    for name, x, e in zip(("dgate", "dup"), got, want):
        kt.assert_matches_oracle(x, e, dtype=torch.float32, bound=1e-4, name=name)


@pytest.mark.gpu
@pytest.mark.parametrize("packed", [False, True], ids=["two", "packed"])
def test_cuda_graph_capture(op, packed, seed):
    fn, act, _ = op
    x = kt.randn((64, 8192 if packed else 4096), dtype=torch.bfloat16, device="cuda", seed=seed)
    u = None if packed else kt.randn((64, 4096), dtype=torch.bfloat16, device="cuda", seed=seed + 1)
    y = kt.graph_captured(lambda a, b: fn(a, b, backend="cuda"), x, u)
    g, up = (x[:, :4096], x[:, 4096:]) if packed else (x, u)
    kt.assert_matches_oracle(y, act(g.double()) * up.double())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_second_gpu_and_current_stream(backend, op, seed):
    """Kernels launch on the tensors' device (the last GPU, with GPU 0 current) and on torch's current
    stream, forward and backward."""
    fn, act, _ = op
    device = f"cuda:{torch.cuda.device_count() - 1}"
    gate = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed).requires_grad_()
    up = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed + 1).requires_grad_()
    dy = kt.randn((300, 2048), dtype=torch.bfloat16, device=device, seed=seed + 2)
    stream = torch.cuda.Stream(device=device)
    with torch.cuda.device(0), torch.cuda.stream(stream):
        y = fn(gate, up, backend=backend)
        dgate, dup = torch.autograd.grad(y, (gate, up), dy)
    stream.synchronize()
    g, u = gate.detach().double().requires_grad_(), up.detach().double().requires_grad_()
    want = act(g) * u
    want_dg, want_du = torch.autograd.grad(want, (g, u), dy.double())
    kt.assert_matches_oracle(y, want, dtype=torch.bfloat16)
    kt.assert_matches_oracle(dgate, want_dg, dtype=torch.bfloat16)
    kt.assert_matches_oracle(dup, want_du, dtype=torch.bfloat16)
