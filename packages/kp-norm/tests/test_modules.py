"""The nn.Module wrappers, replace_norms and patch_norms (without transformers: see test_hf_models.py)."""
import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from kp_core import testing as kt
from torch import nn

import kp_norm


def _x(seed, shape=(4, 8), dtype=torch.float32, device="cpu"):
    return kt.randn(shape, dtype=dtype, device=device, seed=seed)


def _llama_order(x, w, eps):
    """Hugging Face's LlamaRMSNorm.forward, written out."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


class MyRMSNorm(nn.Module):
    """Unknown to kp (not in transformers): recognised by its shape, verified on a probe."""

    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, x):
        return _llama_order(x, self.weight, self.variance_epsilon)


class CenteredRMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return (F.rms_norm(x.float(), x.shape[-1:], eps=self.eps) * (1.0 + self.weight.float())).type_as(x)


class SquaredRMSNorm(MyRMSNorm):
    def forward(self, x):  # with ones as weights this matches x̂ * w: the probe must not be fooled
        return _llama_order(x, self.weight * self.weight, self.variance_epsilon)


class GatedRMSNorm(MyRMSNorm):
    def forward(self, x, gate=None):
        y = super().forward(x)
        return y if gate is None else y * F.silu(gate)


# --- the modules -----------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm_module_loads_torch_state_dict(affine, seed):
    ref = torch.nn.RMSNorm((3, 8), eps=1e-6, elementwise_affine=affine)
    if affine:
        ref.weight.data = _x(seed, (3, 8))
    ours = kp_norm.RMSNorm((3, 8), eps=1e-6, elementwise_affine=affine)
    ours.load_state_dict(ref.state_dict())
    x = _x(seed + 1, (5, 3, 8))
    kt.assert_matches_oracle(ours(x), ref.double()(x.double()), dtype=torch.float32)


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_module_loads_torch_state_dict(bias, seed):
    ref = torch.nn.LayerNorm(8, bias=bias)
    ref.weight.data = _x(seed, (8,))
    if bias:
        ref.bias.data = _x(seed + 2, (8,))
    ours = kp_norm.LayerNorm.from_torch(ref)
    assert set(ours.state_dict()) == set(ref.state_dict())
    x = _x(seed + 1, (5, 8))
    # from_torch shares ref's Parameters: the float64 oracle runs on a copy.
    kt.assert_matches_oracle(ours(x), copy.deepcopy(ref).double()(x.double()), dtype=torch.float32)
    y, h = ours(x, x)  # the fused form
    kt.assert_matches_oracle(h, 2 * x.double(), dtype=torch.float32)


def test_gemma_offset_module_starts_as_identity_transform(seed):
    m = kp_norm.RMSNorm(8, weight_offset=1.0)
    assert torch.all(m.weight == 0)
    x = _x(seed, (3, 8))
    kt.assert_matches_oracle(m(x), F.rms_norm(x.double(), (8,)), dtype=torch.float32)


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: kp_norm.LayerNorm(16, elementwise_affine=False), (4, 8)),
        (lambda: kp_norm.LayerNorm(16), (4, 8)),
        (lambda: kp_norm.RMSNorm((3, 8), elementwise_affine=False), (5, 8)),
        (lambda: kp_norm.RMSNorm((3, 8), elementwise_affine=False), (4, 8)),
        (lambda: kp_norm.RMSNorm(8, elementwise_affine=False), (2, 16)),
        (lambda: kp_norm.RMSNorm((2, 8)), (8,)),
    ],
)
def test_module_checks_normalized_shape_like_torch(make, shape, seed):
    with pytest.raises(ValueError, match=r"normalized_shape is \[.*\], so x must have shape \[\*, .*\]; got x of"):
        make()(_x(seed, shape))


def test_module_rejects_wrong_shape_in_fused_form_too(seed):
    x = _x(seed, (4, 8))
    with pytest.raises(ValueError, match="normalized_shape"):
        kp_norm.RMSNorm(16, elementwise_affine=False)(x, x)


@pytest.mark.parametrize("wdtype", [torch.bfloat16, torch.float32])
def test_llama_rounding_matches_hf_order_bit_for_bit(wdtype, seed):
    x = _x(seed, (6, 64), torch.bfloat16)
    m = kp_norm.RMSNorm(64, eps=1e-6, rounding="llama", backend="reference", dtype=wdtype)
    with torch.no_grad():
        m.weight.copy_(_x(seed + 1, (64,)).mul(0.3).add(1))
    want = _llama_order(x, m.weight, 1e-6)
    got = m(x)
    assert got.dtype == want.dtype == torch.promote_types(wdtype, torch.bfloat16)
    assert torch.equal(got, want)
    # The fused form: the residual sum is the same, and y is the Llama-order norm of it.
    r = _x(seed + 2, (6, 64), torch.bfloat16)
    y, h = m(x, r)
    assert torch.equal(h, x + r) and torch.equal(y, _llama_order(x + r, m.weight, 1e-6))


def test_once_rounding_differs_from_llama_order_in_bf16(seed):
    x = _x(seed, (64, 64), torch.bfloat16)
    w = _x(seed + 1, (64,)).mul(0.3).add(1).to(torch.bfloat16)
    once = kp_norm.RMSNorm(64, eps=1e-6, backend="reference", dtype=torch.bfloat16)
    llama = kp_norm.RMSNorm(64, eps=1e-6, rounding="llama", backend="reference", dtype=torch.bfloat16)
    for m in (once, llama):
        m.weight.data.copy_(w)
    assert not torch.equal(once(x), llama(x))  # otherwise the option would be pointless
    torch.testing.assert_close(once(x), llama(x))


def test_llama_rounding_gradients_match_once_rounding(seed):
    x1 = _x(seed, (5, 32)).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    a = kp_norm.RMSNorm(32, rounding="llama", backend="reference")
    b = kp_norm.RMSNorm(32, backend="reference")
    for m in (a, b):
        m.weight.data.copy_(_x(seed + 1, (32,)))
    dy = _x(seed + 2, (5, 32))
    (a(x1) * dy).sum().backward()
    (b(x2) * dy).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(a.weight.grad, b.weight.grad)


def test_rounding_option_is_checked():
    with pytest.raises(ValueError, match="rounding must be one of"):
        kp_norm.RMSNorm(8, rounding="twice")
    with pytest.raises(ValueError, match="rounding='llama' takes no weight_offset"):
        kp_norm.RMSNorm(8, rounding="llama", weight_offset=1.0)


def test_from_torch_keeps_the_function_and_rejects_a_contradicting_offset(seed):
    ref = nn.RMSNorm(8, eps=1e-6)
    ref.weight.data = _x(seed, (8,))
    with pytest.raises(ValueError, match="weight_offset=0; got weight_offset=1.0"):
        kp_norm.RMSNorm.from_torch(ref, weight_offset=1.0)
    ours = kp_norm.RMSNorm.from_torch(ref, weight_offset=0.0)
    assert ours.weight is ref.weight  # shared, not copied
    x = _x(seed + 1, (3, 8))
    torch.testing.assert_close(ours(x), ref(x))
    with pytest.raises(TypeError, match="expected a torch.nn.LayerNorm"):
        kp_norm.LayerNorm.from_torch(ref)


def test_from_torch_derives_the_offset_of_a_gemma_style_norm(seed):
    m = CenteredRMSNorm(8)
    m.weight.data = _x(seed, (8,))
    ours = kp_norm.RMSNorm.from_torch(m)
    assert ours.weight_offset == 1.0 and ours.weight is m.weight
    x = _x(seed + 1, (3, 8))
    torch.testing.assert_close(ours(x), m(x))
    with pytest.raises(ValueError, match="weight_offset=1"):
        kp_norm.RMSNorm.from_torch(m, weight_offset=0.0)
    with pytest.raises(TypeError, match="cannot stand in for SquaredRMSNorm"):
        kp_norm.RMSNorm.from_torch(SquaredRMSNorm(8))


# --- replace_norms / patch_norms -------------------------------------------------------------


def test_replace_norms_swaps_every_norm(seed):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Sequential(torch.nn.RMSNorm(8)))
    x = _x(seed, (2, 8))
    want = model(x)
    kp_norm.replace_norms(model)
    assert isinstance(model[1], kp_norm.LayerNorm) and isinstance(model[2][0], kp_norm.RMSNorm)
    torch.testing.assert_close(model(x), want)


@pytest.mark.parametrize("make", [lambda: nn.RMSNorm(8), lambda: nn.LayerNorm(8), lambda: MyRMSNorm(8)])
def test_replace_norms_of_a_bare_norm_returns_the_replacement(make, seed):
    m = make()
    new = kp_norm.replace_norms(m)
    assert isinstance(new, (kp_norm.RMSNorm, kp_norm.LayerNorm)) and new.weight is m.weight
    x = _x(seed, (3, 8))
    torch.testing.assert_close(new(x), m(x))


def test_structural_norms_are_verified_on_a_probe(seed):
    model = nn.ModuleDict(
        {"plain": MyRMSNorm(8), "centered": CenteredRMSNorm(8), "squared": SquaredRMSNorm(8), "gated": GatedRMSNorm(8)}
    )
    for p in model.parameters():
        p.data = _x(seed, (8,)).abs() + 0.5
    x = _x(seed + 1, (3, 8))
    want = {k: m(x) for k, m in model.items()}
    report = kp_norm.patch_norms(model)
    assert isinstance(model["plain"], kp_norm.RMSNorm) and model["plain"].weight_offset == 0
    assert isinstance(model["centered"], kp_norm.RMSNorm) and model["centered"].weight_offset == 1
    assert type(model["squared"]) is SquaredRMSNorm and type(model["gated"]) is GatedRMSNorm
    for k in ("plain", "centered"):
        torch.testing.assert_close(model[k](x), want[k])
    assert report.swapped == {"MyRMSNorm": 1, "CenteredRMSNorm": 1}
    reasons = dict((name, reason) for name, _, reason in report.skipped)
    assert "does not compute its function" in reasons["squared"]
    assert "forward takes (x, gate)" in reasons["gated"]
    text = str(report)
    assert "2 module(s) swapped, 2 skipped" in text and "skipped gated (GatedRMSNorm)" in text
    assert "verified on a probe" in text


def test_hf_rounding_finds_an_unknown_class_rounding_by_probe(seed):
    m = MyRMSNorm(64).to(torch.bfloat16)
    m.weight.data = _x(seed, (64,), torch.bfloat16) * 0.3 + 1
    x = _x(seed + 1, (16, 64), torch.bfloat16)
    want = m(x)
    new = kp_norm.replace_norms(m, hf_rounding=True, backend="reference")
    assert new.rounding == "llama" and torch.equal(new(x), want)
    assert kp_norm.replace_norms(MyRMSNorm(64)).rounding == "once"


def test_replace_norms_says_what_it_skipped(caplog):
    with caplog.at_level(logging.INFO, logger="kp_norm"):
        kp_norm.replace_norms(nn.Sequential(GatedRMSNorm(8), nn.RMSNorm(8)))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("skipped 0 (GatedRMSNorm): its forward takes (x, gate)" in w for w in warnings)
    assert any("1 x torch.nn.RMSNorm -> kp_norm.RMSNorm" in r.getMessage() for r in caplog.records)
    caplog.clear()
    kp_norm.replace_norms(nn.Linear(2, 2))
    assert "holds no norm" in caplog.text


def test_swap_keeps_sharing_parameters_grad_flags_mode_and_hooks(seed):
    shared = nn.RMSNorm(8)
    frozen = MyRMSNorm(8).requires_grad_(False)
    model = nn.ModuleDict({"a": nn.Sequential(shared), "b": nn.Sequential(shared), "f": frozen, "ln": nn.LayerNorm(8)})
    model.eval()
    params = {n: p for n, p in model.named_parameters(remove_duplicate=False)}
    keys = list(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built before the swap
    calls = []
    handle = shared.register_forward_hook(lambda mod, args, out: calls.append("post"))
    shared.register_forward_pre_hook(lambda mod, args: calls.append("pre"))

    report = kp_norm.patch_norms(model)

    assert model["a"][0] is model["b"][0] and isinstance(model["a"][0], kp_norm.RMSNorm)
    assert len(report) == 3
    assert [s.aliases for s in report.swaps if s.old == "torch.nn.RMSNorm"] == [("b.0",)]
    assert {n: p for n, p in model.named_parameters(remove_duplicate=False)} == params  # same objects
    assert list(model.state_dict()) == keys
    assert all(not m.training for m in model.modules())
    assert not model["f"].weight.requires_grad
    x = _x(seed, (3, 8))
    model["a"](x)
    assert calls == ["pre", "post"]
    handle.remove()  # the user's handle still reaches the hook on the replacement
    model["a"](x)
    assert calls == ["pre", "post", "pre"]
    before = model["a"][0].weight.detach().clone()
    model.train()
    (model["a"](x) + model["f"](x) + model["ln"](x)).square().sum().backward()
    opt.step()
    assert not torch.equal(model["a"][0].weight, before)  # the optimizer steps the live weight
    assert model["f"].weight.grad is None


def test_train_mode_is_kept():
    model = nn.Sequential(nn.RMSNorm(4), MyRMSNorm(4)).train()
    kp_norm.replace_norms(model)
    assert all(isinstance(m, kp_norm.RMSNorm) and m.training for m in model)


def test_patching_twice_changes_nothing():
    model = nn.Sequential(nn.RMSNorm(4))
    kp_norm.replace_norms(model)
    first = model[0]
    report = kp_norm.patch_norms(model)
    assert model[0] is first and len(report) == 0 and not report.skips


def test_a_norm_with_a_wrapped_forward_is_skipped():
    m = nn.RMSNorm(4)
    m.forward = lambda x: x  # e.g. accelerate's offloading wrapper
    report = kp_norm.patch_norms(nn.Sequential(m))
    assert "forward is wrapped on the instance" in report.skipped[0][2]


@pytest.mark.parametrize("rounding", ["once", "llama"])
def test_module_compiles_without_graph_breaks(rounding, seed):
    m = kp_norm.RMSNorm(16, rounding=rounding, backend="reference", dtype=torch.bfloat16)
    x = _x(seed, (4, 16), torch.bfloat16).requires_grad_()
    r = _x(seed + 1, (4, 16), torch.bfloat16)
    y, h = torch.compile(m, fullgraph=True, backend="aot_eager")(x, r)
    y.float().sum().backward()
    want_y, want_h = m(x, r)
    assert torch.equal(y, want_y) and torch.equal(h, want_h) and x.grad is not None


def test_llama_rounding_on_every_level(level, seed):
    backend, device = level
    x = _x(seed, (4, 32), torch.float16, device)
    m = kp_norm.RMSNorm(32, eps=1e-6, rounding="llama", backend=backend, device=device, dtype=torch.float16)
    with torch.no_grad():
        m.weight.copy_(_x(seed + 1, (32,), device=device).mul(0.3).add(1))
    want = _llama_order(x, m.weight, 1e-6)
    # Exact on the reference level; the kernels sum squares in another order (one fp16 rounding apart).
    tol = 0 if backend == "reference" else 2e-3
    torch.testing.assert_close(m(x), want, rtol=tol, atol=tol)
    y, h = m(x, x)
    torch.testing.assert_close(y, _llama_order(x + x, m.weight, 1e-6), rtol=2e-3, atol=2e-3)
