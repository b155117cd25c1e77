"""The API around the kernels: errors before launch, dispatch, modules, torch.library, compile, graphs."""
import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, testing as kt, use_backend

import kp_norm
from kp_norm import norm as norm_mod
from kp_norm import ops


def _x(seed, shape=(4, 8), dtype=torch.float32, device="cpu"):
    return kt.randn(shape, dtype=dtype, device=device, seed=seed)


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x, w: kp_norm.rms_norm(x.int(), None), TypeError, "float32, float16 or bfloat16"),
        (lambda x, w: kp_norm.rms_norm(x, w[:5]), ValueError, r"weight has shape \(5,\)"),
        (lambda x, w: kp_norm.rms_norm(x, w.int()), TypeError, "weight must be float"),
        (lambda x, w: kp_norm.rms_norm(x, w.to("meta")), ValueError, "x is on cpu but weight is on meta"),
        (lambda x, w: kp_norm.layer_norm(x, w, w.half()), TypeError, "give them one dtype"),
        (lambda x, w: kp_norm.rms_norm(x, w, -1.0), ValueError, "eps must be >= 0"),
        (lambda x, w: kp_norm.rms_norm(x[:, :0], None), ValueError, "zero elements"),
        (lambda x, w: kp_norm.rms_norm(x, "w"), TypeError, "weight must be a tensor"),
        (lambda x, w: kp_norm.rms_norm([1.0], None), TypeError, "x must be a tensor"),
        (lambda x, w: kp_norm.fused_add_rms_norm(x, x[:2], w), ValueError, "residual has shape"),
        (lambda x, w: kp_norm.fused_add_rms_norm(x, x.to("meta"), w), ValueError, "residual is on meta"),
        (lambda x, w: kp_norm.fused_add_rms_norm(x, x.long(), w), TypeError, "residual must be float"),
        (lambda x, w: kp_norm.rms_norm(x, w, backend="cudnn"), ValueError, "unknown kp backend"),
    ],
)
def test_bad_input_raises_clearly(call, error, match, seed):
    x, w = _x(seed), _x(seed + 1, (8,))
    with pytest.raises(error, match=match):
        call(x, w)


@pytest.mark.gpu
def test_device_mismatch_on_gpu_raises(seed):
    x = _x(seed, device="cuda")
    with pytest.raises(ValueError, match="x is on cuda:0 but weight is on cpu"):
        kp_norm.rms_norm(x, _x(seed, (8,)))


def test_forced_backend_that_cannot_serve_raises(seed):
    x = _x(seed)  # CPU tensors: the cuda level can never serve them
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot serve"):
        kp_norm.rms_norm(x, None, backend="cuda")


# --- dispatch precedence ---------------------------------------------------------------------


def test_backend_precedence(monkeypatch, seed):
    seen = []
    real = norm_mod.LEVELS.impl

    def spy(name, function):
        seen.append(name)
        return real(name, function)

    monkeypatch.setattr(norm_mod.LEVELS, "impl", spy)
    x = _x(seed)
    with torch.no_grad():
        kp_norm.rms_norm(x)
        monkeypatch.setenv("KP_BACKEND", "reference")
        kp_norm.rms_norm(x)
        with pytest.raises(BackendUnavailable):
            with use_backend("cuda"):  # the context beats the environment
                kp_norm.rms_norm(x)
        with use_backend("cuda"):
            kp_norm.rms_norm(x, backend="reference")  # the argument beats the context
    expected_auto = "cuda" if torch.cuda.is_available() and x.is_cuda else "reference"
    assert seen == [expected_auto, "reference", "reference"]


# --- torch.library, torch.compile, CUDA graphs ----------------------------------------------


def _op_args(level, seed, residual):
    backend, device = level
    x = _x(seed, (5, 33), device=device).requires_grad_(True)
    r = _x(seed + 1, (5, 33), device=device).requires_grad_(True) if residual else None
    w = _x(seed + 2, (33,), device=device).requires_grad_(True)
    b = _x(seed + 3, (33,), device=device).requires_grad_(True)
    return x, r, w, b, backend


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("is_rms", [True, False])
def test_opcheck(level, is_rms, residual, seed):
    x, r, w, b, backend = _op_args(level, seed, residual)
    fwd_args = (x, r, w, None if is_rms else b, 1e-5, is_rms, 0.0, torch.float32 if residual else None, True, backend)
    kt.opcheck(ops.NORM_FWD, fwd_args)
    with torch.no_grad():  # norm_bwd has no derivative of its own (no double backward)
        _, _, mean, rstd = ops.NORM_FWD(*fwd_args)
    dy = torch.randn_like(x)
    bwd_args = (dy, x.detach(), dy if residual else None, w.detach(), None if is_rms else mean, rstd, is_rms, 0.0, True, not is_rms, backend)
    kt.opcheck(ops.NORM_BWD, bwd_args)


@pytest.mark.parametrize("residual", [False, True])
def test_compile_fullgraph_forward_and_backward(level, residual, seed):
    x, r, w, b, backend = _op_args(level, seed, residual)

    def f(x, r, w, b):
        if r is None:
            return kp_norm.layer_norm(x, w, b, backend=backend).sin().sum()
        y, h = kp_norm.fused_add_rms_norm(x, r, w, backend=backend)
        return (y.sin() + h.cos()).sum()

    inputs = [x, w, b] if r is None else [x, r, w]
    eager = f(x, r, w, b)
    eager_grads = torch.autograd.grad(eager, inputs)
    compiled = kt.compiled(f, device_type=x.device.type)
    out = compiled(x, r, w, b)
    grads = torch.autograd.grad(out, inputs)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_cuda_graph_capture(backend, seed):
    x = _x(seed, (64, 4096), torch.bfloat16, "cuda")
    w = _x(seed + 1, (4096,), torch.bfloat16, "cuda")
    r = _x(seed + 2, (64, 4096), torch.bfloat16, "cuda")
    out = kt.graph_captured(lambda: kp_norm.fused_add_rms_norm(x, r, w, backend=backend), )
    want = kp_norm.fused_add_rms_norm(x, r, w, backend="reference")
    torch.testing.assert_close(out[0], want[0], rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out[1], want[1], rtol=0, atol=0)


def test_bwd_op_without_weight_gives_db_in_dy_dtype(level, seed):
    backend, device = level
    x = _x(seed, (6, 40), device=device)
    with torch.no_grad():
        _, _, mean, rstd = ops.NORM_FWD(x, None, None, None, 1e-5, False, 0.0, None, True, backend)
    dy = _x(seed + 1, (6, 40), device=device)
    dx, dw, db = ops.NORM_BWD(dy, x, None, None, mean, rstd, False, 0.0, True, True, backend)
    assert dw.numel() == 0 and db.dtype == dy.dtype
    kt.assert_matches_oracle(db, dy.double().sum(0), name="db")


def test_inference_fast_path_matches_general_path(level, seed):
    backend, device = level
    norm_mod._FAST.clear()
    x = _x(seed, (3, 5, 64), device=device)
    w = _x(seed + 1, (64,), device=device)
    b = _x(seed + 2, (64,), device=device)
    with torch.no_grad():
        fast = kp_norm.layer_norm(x, w, b, backend=backend)
    assert norm_mod._FAST, "a contiguous no-grad call with a weight takes the cached fast path"
    general = kp_norm.layer_norm(x.requires_grad_(True), w, b, backend=backend)  # grad: general path
    torch.testing.assert_close(fast, general.detach(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="weight has shape"):  # a cached plan never skips the checks
        kp_norm.layer_norm(x.detach(), w[:32], b[:32], backend=backend)


@pytest.mark.parametrize("use", ["y", "h"])
def test_compiled_fused_op_with_one_output_used(level, use, seed):
    x, r, w, _, backend = _op_args(level, seed, True)

    def f(x, r, w):
        y, h = kp_norm.fused_add_rms_norm(x, r, w, backend=backend)
        return (y if use == "y" else h).float().square().sum()

    want = torch.autograd.grad(f(x, r, w), (x, r, w), allow_unused=True)
    got = torch.autograd.grad(kt.compiled(f, device_type=x.device.type)(x, r, w), (x, r, w), allow_unused=True)
    for g, e in zip(got, want):
        if e is None or g is None:
            assert g is None or not g.abs().sum()
        else:
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


# --- the cuda level's host side, with a recording stand-in for the native module -------------------


@pytest.mark.parametrize("need_dw, need_db", [(True, True), (True, False), (False, True)])
def test_cuda_backward_passes_each_partial_to_its_gradient(monkeypatch, need_dw, need_db, seed):
    """dw and db share one partial buffer and one col_sum launch: each gradient must get its own
    rows of that buffer (checked on pointers; the kernels are tested on the GPU)."""
    from types import SimpleNamespace

    from kp_norm import _cuda

    calls = []
    fake = SimpleNamespace(
        norm_bwd_partials=lambda rows, cols, act, xd, with_db, dev: 3,
        norm_bwd=lambda *a: calls.append(("norm_bwd", a)),
        col_sum=lambda *a: calls.append(("col_sum", a)),
    )
    monkeypatch.setattr(_cuda, "NATIVE", SimpleNamespace(module=fake))
    monkeypatch.setattr(_cuda, "current_stream", lambda index: 0)
    x = _x(seed, (5, 8))
    w = _x(seed + 1, (8,))
    rstd = torch.ones(5)
    dx, dw, db = _cuda.norm_bwd(x, x, None, w, torch.zeros(5), rstd, False, 0.0, need_dw, need_db)
    assert (dw is not None) == need_dw and (db is not None) == need_db
    assert [c[0] for c in calls] == ["norm_bwd", "col_sum"]
    bwd, cs = calls[0][1], calls[1][1]
    dw_part, db_part = bwd[11], bwd[12]  # pointers as the native call received them
    partial, out, partial2, out2 = cs[0], cs[3], cs[7], cs[8]
    row_bytes = 3 * 8 * 4  # one [parts, cols] fp32 block
    if need_dw and need_db:
        assert db_part == dw_part + row_bytes
        assert (partial, out, partial2, out2) == (dw_part, dw.data_ptr(), db_part, db.data_ptr())
    elif need_dw:
        assert db_part == 0 and (partial, out, partial2, out2) == (dw_part, dw.data_ptr(), 0, 0)
    else:
        assert dw_part == 0 and (partial, out, partial2, out2) == (db_part, db.data_ptr(), 0, 0)
