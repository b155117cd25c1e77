"""What a hostile or careless user does: odd layouts, cached fast paths, higher-order and
forward-mode autograd, narrow residual dtypes, ill-conditioned rows, inference tensors, backends
per task, and the registered ops called directly."""
import asyncio
import re
import threading

import pytest
import torch
import torch.nn.functional as F
from kp_core import BackendUnavailable, testing as kt, use_backend
from kp_core.dispatch import requested_backend

import kp_norm
from kp_norm import norm as norm_mod
from kp_norm import ops
from kp_norm import reference


def _x(seed, shape=(4, 8), dtype=torch.float32, device="cpu", **kw):
    return kt.randn(shape, dtype=dtype, device=device, seed=seed, **kw)


def _oracle(x, w, b, kind, eps=1e-5):
    n = (x.shape[-1],)
    if kind == "rms":
        return F.rms_norm(x.double(), n, None if w is None else w.double(), eps)
    return F.layer_norm(x.double(), n, None if w is None else w.double(), None if b is None else b.double(), eps)


def _call(kind, x, w, b, backend, eps=1e-5):
    if kind == "rms":
        return kp_norm.rms_norm(x, w, eps, backend=backend)
    return kp_norm.layer_norm(x, w, b, eps, backend=backend)


# --- the eager fast path's cache key --------------------------------------------------------


@pytest.mark.parametrize("bad_shape", [(1,), (1, 8), (16,)])
def test_fast_path_checks_a_bias_of_another_shape(level, bad_shape, seed):
    """A good call caches a plan; a later bias of another shape must still be refused (it once hit
    the cache and was read out of bounds)."""
    backend, device = level
    norm_mod._FAST.clear()
    x, w, b = _x(seed, device=device), _x(seed + 1, (8,), device=device), _x(seed + 2, (8,), device=device)
    with torch.no_grad():
        kp_norm.layer_norm(x, w, b, backend=backend)
        with pytest.raises(ValueError, match="bias has shape"):
            kp_norm.layer_norm(x, w, _x(seed + 3, bad_shape, device=device), backend=backend)


@pytest.mark.gpu
def test_fast_path_checks_a_bias_on_another_device(seed):
    norm_mod._FAST.clear()
    x, w, b = _x(seed, device="cuda"), _x(seed + 1, (8,), device="cuda"), _x(seed + 2, (8,), device="cuda")
    with torch.no_grad():
        kp_norm.layer_norm(x, w, b)
        with pytest.raises(ValueError, match="bias is on cpu"):
            kp_norm.layer_norm(x, w, b.cpu())


# --- layouts every level must serve (torch does) --------------------------------------------


def _layouts(x, w):
    rows, cols = x.shape
    base = x.contiguous().view(-1)
    return {
        "expanded-rows": x[:1].expand(rows, cols),
        "overlapping-rows": base.as_strided((rows - 1, cols), (1, 1)) if base.numel() >= rows - 1 + cols else x,
        "aliases-weight": w.view(1, cols).expand(rows, cols),
        "transposed-3d": x.view(rows, 1, cols).transpose(0, 1),
    }


@pytest.mark.parametrize("layout", ["expanded-rows", "overlapping-rows", "aliases-weight", "transposed-3d"])
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("cols", [8, 128])
def test_stride_zero_and_overlapping_rows(level, kind, layout, cols, seed):
    backend, device = level
    x = _x(seed, (6, cols), device=device)
    w = _x(seed + 1, (cols,), device=device, shift=1.0)
    xv = _layouts(x, w)[layout]
    for grad in (False, True):
        xg = xv.detach().requires_grad_(grad) if grad else xv
        y = _call(kind, xg, w, None, backend)
        want = _oracle(xv, w, None, kind)
        kt.assert_matches_oracle(y, want, dtype=torch.float32, name=f"{layout} y")
        if grad:
            dy = _x(seed + 2, tuple(y.shape), device=device)
            (dx,) = torch.autograd.grad(y, xg, dy)
            xd = xv.detach().double().requires_grad_(True)
            (dx64,) = torch.autograd.grad(_oracle(xd, w, None, kind), xd, dy.double())
            kt.assert_matches_oracle(dx, dx64, dtype=torch.float32, scale=dy.norm().item(), name=f"{layout} dx")


def test_expanded_incoming_gradient(level, seed):
    """The backward of `(y * row).sum()` hands the norm a gradient with rows of stride 0."""
    backend, device = level
    x = _x(seed, (5, 16), device=device).requires_grad_(True)
    w = _x(seed + 1, (16,), device=device, shift=1.0)
    row = _x(seed + 2, (16,), device=device)
    (dx,) = torch.autograd.grad((kp_norm.rms_norm(x, w, backend=backend) * row).sum(), x)
    xd = x.detach().double().requires_grad_(True)
    (want,) = torch.autograd.grad((_oracle(xd, w, None, "rms", None) * row.double()).sum(), xd)
    kt.assert_matches_oracle(dx, want, dtype=torch.float32, scale=row.norm().item() * 3)


# --- higher-order and forward-mode autograd --------------------------------------------------


def _penalty(kind, x, w, b, fn):
    y = fn(x, w, b)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    return y.sum() + g.square().sum()


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_double_backward(level, kind, seed):
    """A gradient penalty: the reference level is plain autograd and gets it right; the kernels
    define a first derivative only and must refuse, never drop the penalty's terms."""
    backend, device = level
    x = _x(seed, (3, 16), device=device).requires_grad_(True)
    w = _x(seed + 1, (16,), device=device, shift=1.0).requires_grad_(True)
    b = _x(seed + 2, (16,), device=device).requires_grad_(True) if kind == "layer" else None
    kp = lambda x, w, b: _call(kind, x, w, b, backend)  # noqa: E731
    if backend != "reference":
        with pytest.raises(RuntimeError, match="double backward"):
            _penalty(kind, x, w, b, kp).backward()
        return
    loss = _penalty(kind, x, w, b, kp)
    leaves = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad(loss, leaves)
    d = [t.detach().double().requires_grad_(True) for t in leaves]
    want = torch.autograd.grad(_penalty(kind, d[0], d[1], d[2] if b is not None else None,
                                        lambda x, w, b: _oracle(x, w, b, kind)), d)  # fmt: skip
    for name, g, e in zip("xwb", got, want):
        kt.assert_matches_oracle(g, e, dtype=torch.float32, bound=1e-4, name=f"d{name}")


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_forward_mode_ad(level, kind, seed):
    backend, device = level
    x, t = _x(seed, (3, 16), device=device), _x(seed + 1, (3, 16), device=device)
    w = _x(seed + 2, (16,), device=device, shift=1.0)
    fn = lambda x: _call(kind, x, w, None, backend)  # noqa: E731
    if backend != "reference":
        with pytest.raises(BackendUnavailable, match="forward-mode AD"):
            torch.func.jvp(fn, (x,), (t,))
        with pytest.raises(BackendUnavailable, match="forward-mode AD"):
            with torch.autograd.forward_ad.dual_level():
                fn(torch.autograd.forward_ad.make_dual(x, t))
        return
    _, tangent = torch.func.jvp(fn, (x,), (t,))
    _, want = torch.func.jvp(lambda x: _oracle(x, w, None, kind), (x.double(),), (t.double(),))
    kt.assert_matches_oracle(tangent, want, dtype=torch.float32)


def test_auto_serves_forward_mode_ad_with_the_reference(seed):
    x, t, w = _x(seed), _x(seed + 1), _x(seed + 2, (8,))
    _, tangent = torch.func.jvp(lambda x: kp_norm.rms_norm(x, w), (x,), (t,))
    _, want = torch.func.jvp(lambda x: F.rms_norm(x.double(), (8,), w.double()), (x.double(),), (t.double(),))
    kt.assert_matches_oracle(tangent, want, dtype=torch.float32)


# --- residual dtypes -------------------------------------------------------------------------


def test_narrow_residual_dtype_rounds_once(level, seed):
    """bf16 x + fp32 residual kept in bf16: the sum is rounded once, as `(x + r).to(bf16)`."""
    backend, device = level
    if backend == "triton" and device == "cpu":
        pytest.skip("the Triton interpreter's bf16 is unreliable")
    x = torch.ones(4, 64, dtype=torch.bfloat16, device=device)
    r = torch.full((4, 64), 2.0**-8 + 2.0**-20, dtype=torch.float32, device=device)
    r[:, 1::2] = _x(seed, (4, 32), device=device) * 0.01
    w = _x(seed + 1, (64,), dtype=torch.bfloat16, device=device, shift=1.0)
    y, h = kp_norm.fused_add_rms_norm(x, r, w, residual_dtype=torch.bfloat16, backend=backend)
    want_h = (x + r).to(torch.bfloat16)
    assert h.dtype == torch.bfloat16 and y.dtype == torch.bfloat16
    assert torch.equal(h, want_h)
    assert h[0, 0].item() == 1.0078125
    kt.assert_matches_oracle(y, _oracle(want_h, w, None, "rms", None), dtype=torch.bfloat16)
    xg, rg = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    y, h = kp_norm.fused_add_rms_norm(xg, rg, w, residual_dtype=torch.bfloat16, backend=backend)
    dx, dr = torch.autograd.grad((y.float() * 2).sum() + h.float().sum(), (xg, rg))
    assert dx.dtype == torch.bfloat16 and dr.dtype == torch.float32


def test_registered_op_defaults_residual_dtype_to_promotion(level, seed):
    backend, device = level
    x = _x(seed, (5, 33), dtype=torch.float16 if device == "cuda" else torch.float32, device=device)
    r = _x(seed + 1, (5, 33), device=device)  # fp32
    w = _x(seed + 2, (33,), device=device)
    args = (x, r, w, None, 1e-5, True, 0.0, None, False, backend)
    _, h, _, _ = ops.NORM_FWD(*args)
    assert h.dtype == torch.promote_types(x.dtype, r.dtype)
    kt.opcheck(ops.NORM_FWD, args)


# --- accuracy and speed of the reference on CPU ------------------------------------------------


def test_reference_layer_norm_of_a_row_with_a_large_mean(seed):
    """300K wide, mean 1e4, std 1e-3: every digit of the centered values hangs on the mean."""
    x = _x(seed, (2, 300_000), scale=1e-3, shift=1e4)
    want = F.layer_norm(x.double(), (300_000,))
    torch_err = kt.rel_error(F.layer_norm(x, (300_000,)), want)
    y = kp_norm.layer_norm(x, None, backend="reference")
    assert kt.rel_error(y, want) <= 2 * torch_err + 1e-3
    # The formula itself (what the registered op and the statistics path run).
    y2, _, mean, rstd = reference.norm_fwd(x, None, None, None, 1e-5, False, 0.0, None, True)
    assert kt.rel_error(y2, want) < 1e-2, kt.rel_error(y2, want)


def test_reference_level_runs_torchs_op_where_it_computes_the_same_function(monkeypatch, seed):
    calls = []
    real = F.rms_norm
    monkeypatch.setattr(reference.F, "rms_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, w = _x(seed), _x(seed + 1, (8,))
    kp_norm.rms_norm(x, w, backend="reference")
    assert calls, "same dtypes, no offset: torch's own op"
    calls.clear()
    kp_norm.rms_norm(x, w, weight_offset=1.0, backend="reference")
    assert not calls, "an offset is not torch's function: the formula"


# --- inference tensors -----------------------------------------------------------------------


def test_inference_mode_input_with_a_trainable_weight(level, seed):
    backend, device = level
    with torch.inference_mode():
        x = _x(seed, device=device)
    w = _x(seed + 1, (8,), device=device, shift=1.0).requires_grad_(True)
    y = kp_norm.rms_norm(x, w, backend=backend)
    (dw,) = torch.autograd.grad(y.sum(), w)
    wd = w.detach().double().requires_grad_(True)
    (want,) = torch.autograd.grad(F.rms_norm(x.double(), (8,), wd).sum(), wd)
    kt.assert_matches_oracle(dw, want, dtype=torch.float32)


# --- the backend request: per task, per thread, under torch.compile ---------------------------


def test_use_backend_is_per_asyncio_task():
    async def task(name, seen):
        with use_backend(name):
            await asyncio.sleep(0)
            seen.append((name, requested_backend()))
            await asyncio.sleep(0)
            seen.append((name, requested_backend()))

    async def main():
        seen = []
        await asyncio.gather(task("reference", seen), task("triton", seen))
        return seen

    seen = asyncio.run(main())
    assert all(a == b for a, b in seen) and len(seen) == 4


def test_use_backend_is_per_thread():
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["other"] = requested_backend()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with use_backend("reference"):
        inside.set()
        done.wait()
    t.join()
    assert seen["other"] == "auto"


def test_backend_unavailable_under_compile_reaches_the_user(seed):
    x = _x(seed)

    def f(x):
        return kp_norm.rms_norm(x, None, backend="cuda")  # CPU tensors: cuda can never serve

    torch._dynamo.reset()
    with pytest.raises(BackendUnavailable, match="cannot serve"):
        torch.compile(f, backend="aot_eager")(x)
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert "InternalTorchDynamoError" not in type(info.value).__name__
    # torch 2.7 and 2.8 name an exception raised under fullgraph by its class alone, without its text.
    assert re.search(r"cannot serve|UserDefinedExceptionObjectVariable\(BackendUnavailable\)", str(info.value))


def test_kp_core_registers_no_global_pytest_plugin():
    """Installing kp must not change another project's pytest run: the plugin is opt-in."""
    import importlib.metadata as md

    names = [ep.value for ep in md.entry_points(group="pytest11")]
    assert not any(v.startswith("kp_core") for v in names), names
