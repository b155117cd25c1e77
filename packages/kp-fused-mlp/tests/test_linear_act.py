"""linear_act at every level against the float64 oracle: odd and real-model shapes, M = 0 and 1,
every activation with and without bias, strided inputs, NaN-poisoned outputs, gradients (the
reference level's autograd; the cuda level's backward and the reference level's registered one),
bad input and TMA's alignment message, the GEMM tables (cuda, its training rows, and Triton), the
scheduler override, torch integration. The Triton level runs on CPU under Triton's interpreter
(no bf16 there)."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, load_native, testing as kt

import kp_fused_mlp
from kp_fused_mlp import _cuda, linear, reference
from kp_fused_mlp.triton import linear as triton_linear
from mlp_helpers import kernel_dtype as _kernel_dtype
from mlp_helpers import poisoned_outputs, skip_interpreted_bf16

ACTS = list(kp_fused_mlp.ACTIVATIONS)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (x shape, out_features): odd and prime sizes (the reference and triton levels take any; the cuda
# level needs multiples of 8 for K and N), one row, leading batch dims; M = 64 and 130 sit on
# either side of the Triton level's decode/large cut, with tails in M, N and K.
SHAPES = [((1, 8), 8), ((3, 5), 7), ((17, 31), 13), ((2, 3, 40), 24), ((64, 128), 72), ((130, 67), 131)]
# The cuda level's: K and N multiples of 8; M = 1, under a tile, odd, over a tile; real MLP sizes.
GPU_SHAPES = [((1, 4096), 11008), ((7, 256), 264), ((64, 1024), 4096), ((129, 520), 136), ((1031, 4096), 14336)]


def _skip_if_unsupported(level, dtype, shape):
    backend, device = level
    skip_interpreted_bf16(level, dtype)
    if device == "cpu" and shape in GPU_SHAPES:
        pytest.skip("GPU-sized shape")
    if backend == "cuda" and (dtype == torch.float32 or shape not in GPU_SHAPES):
        pytest.skip("the cuda level takes 16-bit dtypes and sizes TMA can move (GPU_SHAPES)")


def _inputs(x_shape, n, dtype, device, seed, with_bias):
    k = x_shape[-1]
    x = kt.randn(x_shape, dtype=dtype, device=device, seed=seed)
    w = kt.randn((n, k), dtype=dtype, device=device, seed=seed + 1, scale=k**-0.5)
    b = kt.randn((n,), dtype=dtype, device=device, seed=seed + 2) if with_bias else None
    return x, w, b


def _oracle(x, w, b, act):
    """(float64 result, torch's own op in x's dtype: F.linear rounded, then the activation rounded)."""
    want = reference.linear_act_fwd(x, w, b, act, acc=torch.float64, out_dtype=torch.float64)
    return want, reference.ACTIVATIONS[act](F.linear(x, w, b))


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES + GPU_SHAPES, ids=lambda s: f"{'x'.join(map(str, s[0]))}-{s[1]}")
def test_matches_oracle(level, shape, dtype, act, with_bias, seed):
    backend, device = level
    _skip_if_unsupported(level, dtype, shape)
    x, w, b = _inputs(*shape, dtype, device, seed, with_bias)
    before = [t.clone() for t in (x, w, b) if t is not None]
    want, torch_y = _oracle(x, w, b, act)
    kt.poison_allocator(device, [want.numel() * 4] * 3)
    y = kp_fused_mlp.linear_act(x, w, b, act, backend=backend)
    assert y.shape == want.shape and y.dtype == dtype and y.device == x.device
    kt.assert_matches_oracle(y, want, torch_out=torch_y, name="y")
    for t, t0 in zip([t for t in (x, w, b) if t is not None], before):
        torch.testing.assert_close(t, t0, rtol=0, atol=0, msg="an input was written")


@pytest.mark.parametrize(
    "layout", ["row-strided", "aligned-row-strided", "column-major", "transposed-weight", "offset", "strided-bias"]
)
def test_layouts(level, layout, seed):
    """Strided x rows, a column-major x, a weight that is a transposed view, a misaligned start, a
    strided bias: the kernel levels copy what TMA cannot read in place. Rows 16-byte aligned but
    longer than K (x and weight, NaN in the gap) are read in place: the cuda level's row strides."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    x, w, b = _inputs((33, 64), 48, dtype, device, seed, True)
    if layout == "row-strided":
        x = kt.row_strided(x, pad=3)  # a row stride of 67: not 16-byte aligned
    elif layout == "aligned-row-strided":
        x, w = kt.row_strided(x, pad=8), kt.row_strided(w, pad=24)  # row strides 72 and 88: in place
    elif layout == "strided-bias":
        b = torch.stack([b, torch.full_like(b, float("nan"))], dim=1)[:, 0]  # stride 2, NaN between
    elif layout == "column-major":
        x = kt.column_major(x)
    elif layout == "transposed-weight":
        w = w.t().contiguous().t()
    else:  # a view starting 2 bytes into its storage
        buf = torch.empty(x.numel() + 1, dtype=dtype, device=device)
        buf[1:].copy_(x.flatten())
        x = buf[1:].view(x.shape)
    want, torch_y = _oracle(x, w, b, "gelu")
    y = kp_fused_mlp.linear_act(x, w, b, "gelu", backend=backend)
    kt.assert_matches_oracle(y, want, torch_out=torch_y)


@pytest.mark.parametrize("x_shape, n", [((0, 16), 8), ((4, 0), 8), ((4, 16), 0), ((2, 0, 16), 8)], ids=str)
def test_empty(level, x_shape, n, seed):
    """M = 0, K = 0 (y = act(bias)), N = 0: the right shape and values, no launch."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    x = torch.empty(x_shape, dtype=dtype, device=device)
    w = kt.randn((n, x_shape[-1]), dtype=dtype, device=device, seed=seed)
    b = kt.randn((n,), dtype=dtype, device=device, seed=seed + 1)
    y = kp_fused_mlp.linear_act(x, w, b, "silu", backend=backend)
    assert y.shape == (*x_shape[:-1], n) and y.dtype == dtype
    torch.testing.assert_close(y, F.silu(F.linear(x, w, b)))


def test_reference_gradients(seed):
    """The reference level is plain autograd: gradients of x, weight and bias against float64."""
    x, w, b = (t.requires_grad_(True) for t in _inputs((5, 3, 24), 16, torch.float32, "cpu", seed, True))
    dy = kt.randn((5, 3, 16), seed=seed + 3)
    got = torch.autograd.grad(kp_fused_mlp.linear_act(x, w, b, "gelu_tanh"), (x, w, b), dy)
    leaves = [t.detach().double().requires_grad_(True) for t in (x, w, b)]
    want = torch.autograd.grad(F.gelu(F.linear(*leaves), approximate="tanh"), leaves, dy.double())
    for name, g, e in zip(("dx", "dweight", "dbias"), got, want):
        kt.assert_matches_oracle(g, e, name=name)


def test_grad_calls_have_the_forward_needs_at_the_cuda_level(seed):
    """A call that needs gradients gets the cuda level where the forward would (same TMA needs);
    on CPU auto takes the reference."""
    for n, k in ((8, 16), (4096, 4095), (11007, 4096)):
        for dtype in (torch.bfloat16, torch.float32):
            assert _cuda.linear_act_supports(True, "cuda", 0, dtype, True, n, k) == _cuda.linear_act_supports(
                True, "cuda", 0, dtype, False, n, k)  # fmt: skip
    assert "backward" not in (_cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, True, 8, 16) or "")
    x, w, _ = _inputs((4, 16), 8, torch.bfloat16, "cpu", seed, False)
    w.requires_grad_(True)
    kp_fused_mlp.linear_act(x, w, None, "relu").float().sum().backward()  # auto: reference
    assert w.grad is not None and w.grad.shape == w.shape


def test_triton_level_refuses_gradients_and_auto_keeps_it_off_the_cpu(seed):
    x, w, b = _inputs((4, 16), 8, torch.float32, "cpu", seed, True)
    assert "no backward yet" in linear._triton_supports(True, "cuda", 0, torch.float32, True, 8, 16)
    assert linear._triton_supports(False, "cpu", None, torch.float32, False, 8, 16).startswith("the tensors are on cpu")
    w.requires_grad_(True)
    with pytest.raises(BackendUnavailable, match="'triton' cannot serve this call: the triton level of linear_act "
                                                 "has no backward yet"):  # fmt: skip
        kp_fused_mlp.linear_act(x, w, b, backend="triton")
    assert linear.LEVELS.resolve("auto", x.device, x.dtype, False, *w.shape) == "reference"  # CPU: never the interpreter


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("config", list(triton_linear.CONFIGS))
def test_every_triton_config_row(level, config, dtype, seed):
    """Each CONFIGS row, forced, with tails in M, N and K (none a multiple of its block), a
    column-major x, a weight that is a transposed view, and M = 1."""
    backend, device = level
    if backend != "triton" or (device == "cpu" and dtype == torch.bfloat16):
        pytest.skip("the Triton level (its interpreter has no reliable bf16)")
    for x_shape, n, layout in [((1, 33), 17, "contiguous"), ((45, 70), 37, "column-major"),
                               ((131, 130), 129, "transposed-weight")]:  # fmt: skip
        x, w, b = _inputs(x_shape, n, dtype, device, seed, True)
        if layout == "column-major":
            x = kt.column_major(x)
        elif layout == "transposed-weight":
            w = w.t().contiguous().t()
        want, torch_y = _oracle(x, w, b, "gelu_tanh")
        kt.poison_allocator(device, [want.numel() * 4] * 3)
        y = triton_linear.linear_act_fwd(x, w, b, "gelu_tanh", config=config)
        assert y.is_contiguous()
        kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"{config} {x_shape}x{n} {layout}")


def test_triton_size_classes():
    assert [triton_linear.size_class(m) for m in (1, 64, 65, 8192)] == ["decode", "decode", "large", "large"]


def test_bad_input_raises_clearly(seed):
    x, w, b = _inputs((4, 16), 8, torch.float32, "cpu", seed, True)
    with pytest.raises(TypeError, match="linear_act: x must be float32, float16 or bfloat16, got torch.int64"):
        kp_fused_mlp.linear_act(x.long(), w)
    with pytest.raises(TypeError, match="x is torch.float32 but weight is torch.float16"):
        kp_fused_mlp.linear_act(x, w.half())
    with pytest.raises(TypeError, match="x is torch.float32 but bias is torch.bfloat16"):
        kp_fused_mlp.linear_act(x, w, b.bfloat16())
    with pytest.raises(ValueError, match=r"weight must be \[out_features, in_features=16\].*got shape \(8, 15\)"):
        kp_fused_mlp.linear_act(x, w[:, :15])
    with pytest.raises(ValueError, match=r"bias has shape \(7,\), expected \(8,\) \(out_features\)"):
        kp_fused_mlp.linear_act(x, w, b[:7])
    with pytest.raises(ValueError, match="unknown activation 'tanh'; choose one of none, relu, gelu, gelu_tanh, silu"):
        kp_fused_mlp.linear_act(x, w, b, "tanh")
    with pytest.raises(ValueError, match="x is on cpu but weight is on meta"):
        kp_fused_mlp.linear_act(x, torch.empty(8, 16, device="meta"))
    with pytest.raises(ValueError, match="at least one dimension"):
        kp_fused_mlp.linear_act(torch.tensor(1.0), w)
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot serve this call: the tensors are on cpu"):
        kp_fused_mlp.linear_act(x, w, b, backend="cuda")


@pytest.mark.parametrize("n, k, what", [(4096, 4095, "in_features K=4095 is not a multiple of 8.*pad it to 4096"),
                                        (11007, 4096, "out_features N=11007 is not a multiple of 8.*pad it to 11008")])
def test_tma_alignment_names_the_size_to_pad_to(n, k, what):
    """The cuda level's answer for sizes TMA cannot move (a named backend='cuda' raises it)."""
    assert _cuda.tma_size_problem(n, k, 2) is not None
    import re

    assert re.search(what, _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, False, n, k))
    assert _cuda.linear_act_supports(True, "cuda", 0, torch.float32, False, 8, 8).startswith(
        "the cuda GEMM takes float16 and bfloat16"
    )


def _native():
    status = load_native("kp_fused_mlp")
    if not status.loaded:
        pytest.skip("built without its CUDA level")
    return status.module


def test_native_checks_its_arguments_before_any_cuda_call():
    """C++ checks again (ValueError, never an abort), before touching the device: runs on CPU."""
    mod = _native()
    args = dict(x=16, x_stride=64, w=16, w_stride=64, bias=0, y=16, m=4, n=64, k=64, dtype=2, act=0, config=-1,
                device=0, stream=0)
    with pytest.raises(ValueError, match="K=60 is not a multiple of 8.*pad it to 64"):
        mod.linear_act(**{**args, "k": 60, "x_stride": 60, "w_stride": 60})
    with pytest.raises(ValueError, match="N=60 is not a multiple of 8.*pad it to 64"):
        mod.linear_act(**{**args, "n": 60, "config": 0})  # a GEMM row: the decode config takes any N
    with pytest.raises(ValueError, match="16-byte aligned"):
        mod.linear_act(**{**args, "x": 18})
    with pytest.raises(ValueError, match="row strides must be multiples of 8"):
        mod.linear_act(**{**args, "x_stride": 68})
    with pytest.raises(ValueError, match="float16 or bfloat16, got float32"):
        mod.linear_act(**{**args, "dtype": 0})
    with pytest.raises(ValueError, match="unknown activation code 9"):
        mod.linear_act(**{**args, "act": 9})
    with pytest.raises(ValueError, match="no GEMM config 7"):
        mod.linear_act(**{**args, "config": 7})
    with pytest.raises(ValueError, match="K=60 is not a multiple of 8.*pad it to 64"):  # the sm80 GEMM: the same rules
        mod.linear_act(**{**args, "k": 60, "x_stride": 60, "w_stride": 60, "config": 6})
    mod.linear_act(**{**args, "m": 0})  # nothing to do: returns without a device


def test_gemm_table_and_plan():
    mod = _native()
    names = mod.gemm_configs()
    assert names == ["pingpong_64x128", "pingpong_128x128_c1x2", "pingpong_128x128_c2x1", "coop_256x192_c1x2",
                     "coop_128x256_c2x1", "decode_gemv", "sm80_128x128x64"]  # fmt: skip
    assert _cuda.gemm_plan(1, 4096, 4096) == "decode_gemv"  # tests/test_decode.py: the cut by shape
    assert _cuda.gemm_plan(16, 4096, 4096) == "decode_gemv"
    assert _cuda.gemm_plan(17, 4096, 4096) == "pingpong_64x128"
    assert _cuda.gemm_plan(32, 4096, 4096) == "pingpong_64x128"
    assert _cuda.gemm_plan(33, 4096, 4096) == "pingpong_64x128"
    assert _cuda.gemm_plan(64, 4096, 4096) == "pingpong_64x128"
    assert _cuda.gemm_plan(65, 4096, 4096) == "pingpong_128x128_c1x2"
    assert _cuda.gemm_plan(128, 4096, 4096) == "pingpong_128x128_c1x2"
    assert _cuda.gemm_plan(129, 4096, 4096) == "pingpong_128x128_c2x1"
    assert _cuda.gemm_plan(4096, 4096, 4096) == "pingpong_128x128_c2x1"
    assert _cuda.gemm_plan(4097, 8192, 8192) == "coop_128x256_c2x1"
    # The 256 x 192 tile only on wide outputs (gemm_table.h: min_n), whatever K.
    assert _cuda.gemm_plan(8192, 14336, 4096) == "coop_256x192_c1x2"
    assert _cuda.gemm_plan(4097, 12288, 64) == "coop_256x192_c1x2"
    assert _cuda.gemm_plan(8192, 12287, 4096) == "coop_128x256_c2x1"
    assert _cuda.gemm_plan(8192, 4096, 14336) == "coop_128x256_c2x1"
    assert _cuda.gemm_plan(4096, 28672, 4096) == "pingpong_128x128_c2x1"
    if not torch.cuda.is_available():
        assert mod.gemm_device_problem(0)  # no device: a reason, not a crash


def test_opcheck(level, seed):
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    x, w, b = _inputs((5, 32), 16, dtype, device, seed, True)
    kt.opcheck(linear.LINEAR_ACT, (x, w, b, "silu", backend))
    kt.opcheck(linear.LINEAR_ACT, (x, w, None, "none", backend))


def test_compile_fullgraph(level, seed):
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    x, w, b = _inputs((6, 40), 24, dtype, device, seed, True)
    fn = kt.compiled(lambda a, c, d: kp_fused_mlp.linear_act(a, c, d, "gelu", backend=backend), device_type=device)
    want, torch_y = _oracle(x, w, b, "gelu")
    kt.assert_matches_oracle(fn(x, w, b), want, torch_out=torch_y)


def test_compile_fullgraph_with_grad_runs_the_reference(seed):
    x, w, b = (t.requires_grad_(True) for t in _inputs((6, 40), 24, torch.float32, "cpu", seed, True))
    fn = kt.compiled(lambda a, c, d: kp_fused_mlp.linear_act(a, c, d, "relu"))
    fn(x, w, b).sum().backward()
    assert x.grad is not None and w.grad is not None and b.grad is not None


# ---- gradients: the cuda level's backward, the reference level's registered one -----------------

# (M, N, K): M odd and under/over a tile (the dW GEMM reduces over M: its K tail); N and K multiples
# of 8 but of no tile (TMA's need).
GRAD_SHAPES = [(1, 24, 40), (7, 136, 264), (130, 24, 40), (1031, 136, 264)]


def _grad_level(level, dtype):
    """The cuda level on 16-bit dtypes; the reference level's registered ops in float32 (its
    public path is plain autograd, test_reference_gradients)."""
    backend, device = level
    if backend == "triton":
        pytest.skip("the Triton level has no backward (test_triton_level_refuses_gradients)")
    if backend == "cuda" and dtype == torch.float32 or backend == "reference" and dtype != torch.float32:
        pytest.skip("the cuda level takes 16-bit dtypes; the reference level's math is dtype-independent")


def _run_with_grad(backend, x, w, b, act, dy):
    """(y, dx, dw, db or None) through the public function (cuda) or the registered AutogradOp."""
    leaves = [t.detach().requires_grad_(True) for t in (x, w, b) if t is not None]
    xx, ww, bb = leaves[0], leaves[1], (leaves[2] if b is not None else None)
    if backend == "reference":
        rows = xx.reshape(-1, xx.shape[-1])
        y = linear.LINEAR_ACT_GRAD.apply(rows, ww, bb, act, "reference")[0].view(*xx.shape[:-1], -1)
    else:
        y = kp_fused_mlp.linear_act(xx, ww, bb, act, backend=backend)
    with poisoned_outputs(x.device, [dy.numel() * 8, x.numel() * 4, w.numel() * 4]):
        grads = torch.autograd.grad(y, leaves, dy)
    return (y, *grads) if b is not None else (y, *grads, None)


def _grad_oracle(x, w, b, act, dy, y=None):
    """(float64 gradients, torch's own in the dtype: autograd of F.linear + act). y: the kernel's
    relu output, for relu's float64 gradients (_relu_grads64)."""
    def grads(dtype):
        leaves = [t.detach().to(dtype).requires_grad_(True) for t in (x, w, b) if t is not None]
        bb = leaves[2] if b is not None else None
        y = reference.ACTIVATIONS[act](F.linear(leaves[0], leaves[1], bb))
        return torch.autograd.grad(y, leaves, dy.to(dtype))

    exact = _relu_grads64(x, w, b, dy, y) if act == "relu" and y is not None else grads(torch.float64)
    return exact, grads(x.dtype)


def _relu_grads64(x, w, b, dy, y):
    """float64 gradients of relu(x W^T + b) with relu'(z) = [z > 0] from float64 z, except where the
    sign of z is beyond what a correct low-precision forward resolves: |z| within fp32 accumulation
    error (2 (K + 1) u sum |x||w|) or under the dtype's smallest normal. There either side is a correct
    rounding, and the kernel's own [y > 0] is taken: in a CPU model of the kernel's rounding (fp16,
    1031 x 136 x 264, 300 seeds) one seed had such an element, which alone moved dx by 2.9e-3, over
    fp16's bound 2e-3. (An H200 run, 2026-11-29, failed this test's cuda fp16 case at 8.2e-3 with the
    float64 mask; not yet rerun with this one.)"""
    x64, w64, b64 = x.double(), w.double(), None if b is None else b.double()
    z = F.linear(x64, w64, b64)
    doubt = 2 * (x.shape[-1] + 1) * 2.0**-24 * F.linear(x64.abs(), w64.abs(), None if b64 is None else b64.abs())
    doubt = doubt + torch.finfo(y.dtype).tiny
    dp = dy.double() * torch.where(z.abs() <= doubt, y.detach().double() > 0, z > 0).double()
    return [dp @ w64, dp.t() @ x64] + ([dp.sum(0)] if b is not None else [])


def _check_grads(got, x, w, b, act, dy, name, y=None):
    want, torch_g = _grad_oracle(x, w, b, act, dy, y)
    for what, g, e, t in zip(("dx", "dweight", "dbias"), got, want, torch_g):
        kt.assert_matches_oracle(g, e, torch_out=t, name=f"{name} {what}")


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", GRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gradients_match_oracle(level, shape, dtype, act, with_bias, seed):
    """dx, dweight, dbias against float64 autograd of the reference and within 2x torch's own error,
    with NaN-poisoned output buffers; the forward of the training call too."""
    _grad_level(level, dtype)
    backend, device = level
    m, n, k = shape
    x, w, b = _inputs((m, k), n, dtype, device, seed, with_bias)
    dy = kt.randn((m, n), dtype=dtype, device=device, seed=seed + 3)
    y, *grads = _run_with_grad(backend, x, w, b, act, dy)
    want, torch_y = _oracle(x, w, b, act)
    kt.assert_matches_oracle(y, want, torch_out=torch_y, name="y")
    _check_grads([g for g in grads if g is not None], x, w, b, act, dy, f"{backend} {act}", y)


# Past 4096 tokens the training rows depend on N and K (csrc/gemm_bwd_table.h's pingpong cuts): one
# shape on which every job takes the pingpong row, one on which none does.
ROWS_PAST_4096 = {(4104, 264, 136): ("pingpong_128x128_c2x1", "coop_128x256_c2x1", "pingpong_128x128_c2x1"),
                  (4104, 4112, 4104): ("coop_128x256_c2x1",) * 3}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(ROWS_PAST_4096), ids=lambda s: "x".join(map(str, s)))
def test_training_rows_past_4096_tokens_match_oracle(shape, seed):
    """The public training call where the table's rules pick by N and K: y, dx, dweight, dbias
    against float64, NaN-poisoned outputs."""
    why = _cuda.linear_act_supports(True, "cuda", 0, torch.bfloat16, True, 64, 64)
    if why:
        pytest.skip(why)
    m, n, k = shape
    assert (_cuda.gemm_bwd_plan(m, n, k), _cuda.gemm_bwd_plan(m, k, n, "dx"),
            _cuda.gemm_bwd_plan(n, k, m, "dw")) == ROWS_PAST_4096[shape]  # fmt: skip
    x, w, b = _inputs((m, k), n, torch.bfloat16, "cuda", seed, True)
    dy = kt.randn((m, n), dtype=torch.bfloat16, device="cuda", seed=seed + 3)
    y, *grads = _run_with_grad("cuda", x, w, b, "silu", dy)
    want, torch_y = _oracle(x, w, b, "silu")
    kt.assert_matches_oracle(y, want, torch_out=torch_y, name="y")
    _check_grads(grads, x, w, b, "silu", dy, f"cuda {shape}")


@pytest.mark.parametrize("layout", ["strided-dy", "column-major-dy", "expanded-dy", "batched", "column-major-x",
                                    "transposed-weight", "aligned-row-strided"])  # fmt: skip
def test_gradient_layouts(level, layout, seed):
    """Non-contiguous grad_output (misaligned rows, column-major, expanded from a broadcast), a
    batched x, a column-major x, a transposed-view weight, aligned row strides read in place."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    _grad_level(level, dtype)
    x, w, b = _inputs((2, 33, 64) if layout == "batched" else (66, 64), 48, dtype, device, seed, True)
    dy = kt.randn((*x.shape[:-1], 48), dtype=dtype, device=device, seed=seed + 3)
    if layout == "strided-dy":
        dy = kt.row_strided(dy, pad=3)
    elif layout == "column-major-dy":
        dy = kt.column_major(dy)
    elif layout == "expanded-dy":
        dy = dy[:1].expand_as(dy)
    elif layout == "column-major-x":
        x = kt.column_major(x)
    elif layout == "transposed-weight":
        w = w.t().contiguous().t()
    elif layout == "aligned-row-strided":
        x, w, dy = kt.row_strided(x, pad=8), kt.row_strided(w, pad=24), kt.row_strided(dy, pad=16)
    _, *grads = _run_with_grad(backend, x, w, b, "gelu_tanh", dy)
    _check_grads(grads, x, w, b, "gelu_tanh", dy, layout)


@pytest.mark.parametrize("needs", ["x", "weight", "bias", "weight+bias"])
def test_gradients_of_some_inputs(level, needs, seed):
    """Only the gradients asked for are computed (and only what they read is saved)."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    _grad_level(level, dtype)
    x, w, b = _inputs((37, 40), 24, dtype, device, seed, True)
    dy = kt.randn((37, 24), dtype=dtype, device=device, seed=seed + 3)
    leaves = {"x": x, "weight": w, "bias": b}
    for name in needs.split("+"):
        leaves[name].requires_grad_(True)
    if backend == "reference":
        y = linear.LINEAR_ACT_GRAD.apply(x, w, b, "silu", "reference")[0]
    else:
        y = kp_fused_mlp.linear_act(x, w, b, "silu", backend=backend)
    got = torch.autograd.grad(y, [leaves[n] for n in needs.split("+")], dy)
    want, torch_g = _grad_oracle(x, w, b, "silu", dy)
    index = {"x": 0, "weight": 1, "bias": 2}
    for name, g in zip(needs.split("+"), got):
        kt.assert_matches_oracle(g, want[index[name]], torch_out=torch_g[index[name]], name=name)


def test_empty_gradients(level, seed):
    """M = 0 with gradients: dx empty, dweight and dbias zeros (nothing launched)."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    x = torch.empty((0, 16), dtype=dtype, device=device, requires_grad=True)
    w = kt.randn((8, 16), dtype=dtype, device=device, seed=seed).requires_grad_(True)
    b = kt.randn((8,), dtype=dtype, device=device, seed=seed + 1).requires_grad_(True)
    y = kp_fused_mlp.linear_act(x, w, b, "silu", backend=None if backend == "triton" else backend)
    y.sum().backward()
    assert x.grad.shape == (0, 16) and torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


def test_cuda_backward_with_nothing_to_accumulate_launches_nothing():
    """The cuda level's backward impl at M = 0 or N = 0 returns zeros before any native call, and
    reads K from whichever of x and weight was saved (runs on CPU)."""
    none = torch.empty((0,))
    dy, x, w = torch.empty((0, 8)), torch.empty((0, 16)), torch.ones((8, 16))
    dx, dw, db = _cuda.linear_act_bwd(dy, x, w, none, "silu", True, True, True)
    assert dx.shape == (0, 16) and torch.equal(dw, torch.zeros(8, 16)) and torch.equal(db, torch.zeros(8))
    assert _cuda.linear_act_bwd(dy, x, none, none, "silu", False, True, False)[1].shape == (8, 16)  # no weight saved
    assert _cuda.linear_act_bwd(dy, none, w, none, "silu", True, False, False)[0].shape == (0, 16)  # no x saved
    assert _cuda.linear_act_bwd(dy, none, none, none, "silu", False, False, True)[2].shape == (8,)  # bias only
    dx, dw, db = _cuda.linear_act_bwd(torch.empty((5, 0)), torch.ones(5, 16), torch.ones(0, 16), none, "relu",
                                      True, True, True)  # fmt: skip
    assert torch.equal(dx, torch.zeros(5, 16)) and dw.shape == (0, 16) and db.shape == (0,)


def test_reference_registered_backward_matches_autograd(seed):
    """reference.linear_act_bwd (what the registered backward runs there) against autograd of
    reference.linear_act_fwd, for every activation; relu reads y as its saved tensor."""
    x, w, b = _inputs((9, 24), 16, torch.float32, "cpu", seed, True)
    dy = kt.randn((9, 16), seed=seed + 3)
    for act in ACTS:
        y, z = reference.linear_act_train(x, w, b, act)
        assert (z is not None) == (act in reference.SAVES_PRE)
        pre = y if act == "relu" else z
        got = reference.linear_act_bwd(dy, x, w, pre, act, True, True, True)
        want, _ = _grad_oracle(x, w, b, act, dy, y)
        for g, e in zip(got, want):
            kt.assert_matches_oracle(g, e, name=act)


def test_double_backward(level, seed):
    """The reference level is plain autograd; the cuda level refuses a second derivative."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    _grad_level(level, dtype)
    x, w, _ = _inputs((3, 16), 8, dtype, device, seed, False)
    x, w = x.requires_grad_(True), w.requires_grad_(True)
    y = kp_fused_mlp.linear_act(x, w, None, "silu", backend=backend)
    (dx,) = torch.autograd.grad(y.float().sum(), x, create_graph=True)
    if backend == "reference":
        (dw,) = torch.autograd.grad((dx**2).sum(), w)
        assert dw.shape == w.shape
    else:
        with pytest.raises(RuntimeError, match="double backward"):
            (dx.float() ** 2).sum().backward()


def test_opcheck_training_ops(level, seed):
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    _grad_level(level, dtype)
    x, w, b = _inputs((5, 32), 16, dtype, device, seed, True)
    op = linear.LINEAR_ACT_GRAD
    xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))
    kt.opcheck(op.fwd_op, (xg, wg, bg, "silu", backend))
    kt.opcheck(op.fwd_op, (xg, wg, None, "relu", backend))
    kt.opcheck(op.fwd_op, (xg, wg, bg, "none", backend))
    y, z = op.fwd_op(x, w, b, "gelu", backend)
    dy = kt.randn((5, 16), dtype=dtype, device=device, seed=seed + 3)
    kt.opcheck(op.bwd_op, (dy, x, w, z, "gelu", True, True, True, backend))
    kt.opcheck(op.bwd_op, (dy, x, w, y, "relu", False, True, False, backend))
    kt.opcheck(op.bwd_op, (dy, x, w, torch.empty(0, dtype=dtype, device=device), "none", True, False, True, backend))


def test_compile_fullgraph_forward_and_backward(level, seed):
    """Traced through the registered training ops (cuda) or as plain torch (reference), forward and
    the registered backward op, without a graph break."""
    backend, device = level
    dtype = _kernel_dtype(backend, device)
    _grad_level(level, dtype)
    x, w, b = (t.requires_grad_(True) for t in _inputs((6, 40), 24, dtype, device, seed, True))
    fn = kt.compiled(lambda a, c, d: kp_fused_mlp.linear_act(a, c, d, "gelu_tanh", backend=backend),
                     device_type=device)  # fmt: skip
    y = fn(x, w, b)
    dy = kt.randn(y.shape, dtype=dtype, device=device, seed=seed + 3)
    y.backward(dy)
    want, torch_y = _oracle(x.detach(), w.detach(), b.detach(), "gelu_tanh")
    kt.assert_matches_oracle(y, want, torch_out=torch_y)
    _check_grads((x.grad, w.grad, b.grad), x.detach(), w.detach(), b.detach(), "gelu_tanh", dy, "compiled")


def test_native_training_functions_check_their_arguments():
    """The C++ side of the training path raises ValueError before touching a device (runs on CPU)."""
    mod = _native()
    g = dict(dp=16, dp_stride=64, dx=16, m=4, n=64, k=64, dtype=2, config=-1, device=0, stream=0)
    dgrad = dict(g, w=16, w_stride=64)
    with pytest.raises(ValueError, match="multiples of 8 elements"):
        mod.linear_act_dgrad(**{**dgrad, "k": 60, "w_stride": 60})
    with pytest.raises(ValueError, match="GEMM config 0 has no training kernels"):
        mod.linear_act_dgrad(**{**dgrad, "config": 0})
    with pytest.raises(ValueError, match="float16 or bfloat16, got float32"):
        mod.linear_act_dgrad(**{**dgrad, "dtype": 0})
    with pytest.raises(ValueError, match="16-byte aligned"):
        mod.linear_act_dgrad(**{**dgrad, "dp": 18})
    wgrad = {k: v for k, v in g.items() if k != "dx"} | dict(x=16, x_stride=64, dw=16)
    with pytest.raises(ValueError, match="row stride is shorter than its row"):
        mod.linear_act_wgrad(**{**wgrad, "x_stride": 56})
    mod.linear_act_wgrad(**{**wgrad, "m": 0, "k": 0})  # N' = k = 0: nothing to do, no device
    save = dict(x=16, x_stride=64, w=16, w_stride=64, bias=0, y=16, z=18, m=4, n=64, k=64, dtype=2, act=4, config=-1,
                device=0, stream=0)  # fmt: skip
    with pytest.raises(ValueError, match="saved pre-activation z must be a 16-byte aligned"):
        mod.linear_act_save(**save)
    dpre = dict(dy=16, dy_stride=64, pre=16, pre_stride=64, dp=16, partial=16, db=16, m=4, n=64, dtype=2, act=4,
                device=0, stream=0)  # fmt: skip
    with pytest.raises(ValueError, match="n=60 must be a multiple of 8"):
        mod.linear_act_dpre(**{**dpre, "n": 60})
    with pytest.raises(ValueError, match="unknown activation code 9"):
        mod.linear_act_dpre(**{**dpre, "act": 9})
    with pytest.raises(ValueError, match="dy rows must be 16-byte aligned"):
        mod.linear_act_dpre(**{**dpre, "dy_stride": 68})
    with pytest.raises(ValueError, match="nothing to compute"):
        mod.linear_act_dpre(**{**dpre, "dp": 0, "db": 0})
    with pytest.raises(ValueError, match="db needs the fp32 partial buffer"):
        mod.linear_act_dpre(**{**dpre, "partial": 0})
    mod.linear_act_dpre(**{**dpre, "m": 0})  # nothing to do
    assert mod.dpre_partial_rows(0, 64, 0) == 0


def test_training_table():
    mod = _native()
    assert mod.gemm_bwd_configs() == [2, 3, 4]
    names = mod.gemm_configs()
    assert _cuda.gemm_bwd_plan(1) == names[2] and _cuda.gemm_bwd_plan(4096) == names[2]
    assert _cuda.gemm_bwd_plan(4097) == names[4] == "coop_128x256_c2x1" and _cuda.gemm_bwd_plan(14336) == names[4]
    # the wide tile where the output is wide: dX of a down projection (8192 x 14336), dW of an up one
    assert _cuda.gemm_bwd_plan(8192, 14336) == names[3] == "coop_256x192_c1x2"
    assert _cuda.gemm_bwd_plan(14336, 4096, job="dx") == names[4] and _cuda.gemm_bwd_plan(16, 14336) == names[2]
    # dW: coop 128 x 256 from 4096 out_features whatever the width or depth, the pingpong row below
    assert _cuda.gemm_bwd_plan(4096, 14336, job="dw") == names[4] == _cuda.gemm_bwd_plan(14336, 4096, 8192, "dw")
    assert _cuda.gemm_bwd_plan(4095, 14336, job="dw") == names[2]
    # the pingpong cut past M = 4096: the saving forward at K <= 4096 or N <= 4096; none for dX
    assert _cuda.gemm_bwd_plan(8192, 14336, 4096) == names[2] == _cuda.gemm_bwd_plan(8192, 4096, 14336)
    assert _cuda.gemm_bwd_plan(8192, 28672, 8192) == names[3] and _cuda.gemm_bwd_plan(8192, 8192, 28672) == names[4]
    assert _cuda.gemm_bwd_plan(8192, 14336, 4096, "dx") == names[3]
    assert _cuda.gemm_bwd_plan(8192, 4096, 14336, "dx") == names[4] == _cuda.gemm_bwd_plan(8192, 4096, 28672, "dx")
    with pytest.raises(ValueError, match="job must be one of save, dx, dw"):
        _cuda.gemm_bwd_plan(8192, 4096, 4096, "dgrad")


def test_scheduler_override():
    """Set for the next calls, restored by the context manager; bad values refused (runs on CPU:
    the override is host state)."""
    _native()
    assert _cuda.scheduler() == (0, "row")
    with _cuda.scheduler_override(4, "along_m"):
        assert _cuda.scheduler() == (4, "along_m")
        with _cuda.scheduler_override(8, "along_n"):
            assert _cuda.scheduler() == (8, "along_n")
        assert _cuda.scheduler() == (4, "along_m")
    assert _cuda.scheduler() == (0, "row")
    with pytest.raises(ValueError, match="max_swizzle must be 0 .* 1, 2, 4 or 8, got 3"):
        _cuda.scheduler_override(3)
    with pytest.raises(ValueError, match="raster must be one of row, heuristic, along_m, along_n"):
        _cuda.scheduler_override(2, "diagonal")
    with pytest.raises(ValueError, match="raster must be -1"):
        _cuda.NATIVE.module.gemm_scheduler_override(1, 7)
    assert _cuda.scheduler() == (0, "row")


# ---- GPU only ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "with_bias, act", [(True, "silu"), (False, "gelu"), (False, "none")], ids=["bias_act", "act-null-bias", "identity"]
)
def test_every_gemm_table_row(dtype, with_bias, act, seed):
    """Each row of csrc/gemm_table.h, forced, on shapes with partial tiles in M and N, with each of
    its kernels: the bias_act epilogue with a bias and with none (null pointer), and identity. After
    the rows: the decode kernel (any M, in 32-token chunks) and the sm80 GEMM (mma.sync: it runs on
    Hopper too)."""
    for config in range(len(_native().gemm_configs())):
        for (x_shape, n) in [((1, 64), 8), ((200, 136), 264), ((1031, 1024), 4104)]:
            x, w, b = _inputs(x_shape, n, dtype, "cuda", seed, with_bias)
            want, torch_y = _oracle(x, w, b, act)
            kt.poison_allocator("cuda", [want.numel() * 4] * 3)
            y = _cuda.linear_act_fwd(x, w, b, act, config=config)
            kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"config {config} {act} {x_shape}x{n}")


@pytest.mark.gpu
def test_cuda_names_the_pad_size_on_a_gpu(seed):
    x, w, _ = _inputs((4, 4095), 64, torch.bfloat16, "cuda", seed, False)
    with pytest.raises(BackendUnavailable, match="in_features K=4095 is not a multiple of 8.*pad it to 4096"):
        kp_fused_mlp.linear_act(x, w, backend="cuda")
    y = kp_fused_mlp.linear_act(x, w)  # auto: the next level (triton, else reference) serves it
    kt.assert_matches_oracle(y, _oracle(x, w, None, "none")[0])


@pytest.mark.gpu
def test_auto_order_on_a_gpu():
    """auto: the cuda level for what its supports() accepts, else triton, else the reference."""
    dev = torch.device("cuda", 0)
    mod = _native()
    cuda_ok = not _cuda.linear_act_supports(False, "cuda", 0, torch.bfloat16, False, 64, 64)
    assert linear.LEVELS.resolve("auto", dev, torch.bfloat16, False, 64, 64) == ("cuda" if cuda_ok else "triton")
    assert linear.LEVELS.resolve("auto", dev, torch.float32, False, 64, 64) == "triton"
    assert linear.LEVELS.resolve("auto", dev, torch.bfloat16, False, 64, 63) == "triton"
    assert linear.LEVELS.resolve("auto", dev, torch.bfloat16, True, 64, 64) == ("cuda" if cuda_ok else "reference")
    if torch.cuda.get_device_capability(0) == (9, 0) and "90a" in mod.compiled_arch_names():
        assert cuda_ok, "an sm_90 GPU with an sm_90a build must run the cuda level"


@pytest.mark.gpu
def test_cuda_graph_capture(seed):
    x, w, b = _inputs((64, 4096), 4096, torch.bfloat16, "cuda", seed, True)
    y = kt.graph_captured(lambda a, c, d: kp_fused_mlp.linear_act(a, c, d, "gelu", backend="cuda"), x, w, b)
    kt.assert_matches_oracle(y, _oracle(x, w, b, "gelu")[0])


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_other_cuda_devices(backend, seed):
    """cuda:1 when present, cuda:0 current: the launch goes to the tensors' device and stream."""
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    if backend == "triton":
        pytest.importorskip("triton")
    x, w, b = _inputs((100, 512), 256, torch.bfloat16, "cuda:1", seed, True)
    with torch.cuda.device(0):
        y = kp_fused_mlp.linear_act(x, w, b, "relu", backend=backend)
    assert y.device == x.device
    kt.assert_matches_oracle(y, _oracle(x, w, b, "relu")[0])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("act", ["silu", "relu", "none"])
def test_every_training_row(dtype, act, seed):
    """Each training row (gemm_bwd_table.h), forced for the training forward, dx and dweight, on
    shapes with tails in every GEMM dimension (M odd; N, K multiples of 8 but of no tile)."""
    for config in _native().gemm_bwd_configs():
        for m, n, k in [(1, 24, 40), (200, 264, 136), (1031, 136, 1032)]:
            x, w, b = _inputs((m, k), n, dtype, "cuda", seed, True)
            dy = kt.randn((m, n), dtype=dtype, device="cuda", seed=seed + 3)
            kt.poison_allocator("cuda", [m * n * 4] * 4)
            y, z = _cuda.linear_act_train(x, w, b, act, config=config)
            want, torch_y = _oracle(x, w, b, act)
            kt.assert_matches_oracle(y, want, torch_out=torch_y, name=f"config {config} y {m}x{n}x{k}")
            if act in _cuda.SAVES_PRE:
                z_want = x.double() @ w.double().t() + b.double()
                kt.assert_matches_oracle(z, z_want, name=f"config {config} z")
            pre = y if act == "relu" else z
            kt.poison_allocator("cuda", [m * n * 4] * 4)
            got = _cuda.linear_act_bwd(dy, x, w, pre, act, True, True, True, config=config)
            _check_grads(got, x, w, b, act, dy, f"config {config} {act} {m}x{n}x{k}", y)


@pytest.mark.gpu
def test_backward_is_deterministic(seed):
    """dweight (one fp32 accumulation over M) and dbias (fixed partial rows) give the same bits twice."""
    x, w, b = (t.requires_grad_(True) for t in _inputs((3001, 1024), 2048, torch.bfloat16, "cuda", seed, True))
    dy = kt.randn((3001, 2048), dtype=torch.bfloat16, device="cuda", seed=seed + 3)
    runs = []
    for _ in range(2):
        y = kp_fused_mlp.linear_act(x, w, b, "gelu", backend="cuda")
        runs.append(torch.autograd.grad(y, (x, w, b), dy))
    for a, c in zip(*runs):
        assert torch.equal(a, c)


@pytest.mark.gpu
def test_scheduler_override_changes_no_result(seed):
    """Every swizzle and raster computes the same product (the order of tiles, not of sums)."""
    x, w, _ = _inputs((1031, 1024), 4104, torch.bfloat16, "cuda", seed, False)
    base = kp_fused_mlp.linear_act(x, w, backend="cuda")
    for swizzle in (1, 2, 4, 8):
        for raster in ("along_m", "along_n", "heuristic"):
            with _cuda.scheduler_override(swizzle, raster):
                assert torch.equal(kp_fused_mlp.linear_act(x, w, backend="cuda"), base), (swizzle, raster)


@pytest.mark.gpu
def test_cuda_training_graph_capture(seed):
    x, w, b = (t.requires_grad_(True) for t in _inputs((256, 1024), 512, torch.bfloat16, "cuda", seed, True))
    dy = kt.randn((256, 512), dtype=torch.bfloat16, device="cuda", seed=seed + 3)

    def step(a, c, d):
        return torch.autograd.grad(kp_fused_mlp.linear_act(a, c, d, "silu", backend="cuda"), (a, c, d), dy)

    got = kt.graph_captured(step, x, w, b)
    _check_grads(got, x.detach(), w.detach(), b.detach(), "silu", dy, "graph")


@pytest.mark.gpu
def test_training_on_another_cuda_device(seed):
    """cuda:1 when present, cuda:0 current: the training kernels (forward, dP, both GEMMs, the
    column sum) run on the tensors' device and its current stream."""
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    x, w, b = (t.requires_grad_(True) for t in _inputs((100, 512), 256, torch.bfloat16, "cuda:1", seed, True))
    dy = kt.randn((100, 256), dtype=torch.bfloat16, device="cuda:1", seed=seed + 3)
    with torch.cuda.device(0):
        got = torch.autograd.grad(kp_fused_mlp.linear_act(x, w, b, "gelu", backend="cuda"), (x, w, b), dy)
    assert all(g.device == x.device for g in got)
    _check_grads(got, x.detach(), w.detach(), b.detach(), "gelu", dy, "cuda:1")
