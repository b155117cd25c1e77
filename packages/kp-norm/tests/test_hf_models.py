"""kp_core.patch on real Hugging Face models: tiny random-init configs, bf16, CPU (one GPU variant)."""
import copy
import importlib
import importlib.metadata as md
import pathlib
import re

import pytest
import torch

import kp_core
from kp_core import testing as kt

import kp_norm
from kp_norm import hf

transformers = pytest.importorskip("transformers")

# name -> (config class, model class, norm class, extra config)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaRMSNorm", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", "MistralRMSNorm", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2RMSNorm", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "Qwen3RMSNorm", {"head_dim": 16}),  # + q_norm/k_norm
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "GemmaRMSNorm", {"head_dim": 16}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", "Olmo2RMSNorm", {"eos_token_id": 1, "pad_token_id": 0}),
}


def tiny(family: str, device="cpu", dtype=torch.bfloat16, seed=0):
    """A 2-layer, 64-wide model with random weights, norm weights included (HF starts them at 1 or
    0, where every rounding agrees)."""
    config_cls, model_cls, _, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, attn_implementation="eager", **extra,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).to(device=device, dtype=dtype)
    with torch.no_grad():
        for m in norms(model, family):
            m.weight.normal_(0.0 if family == "gemma" else 1.0, 0.3)
    return model.eval()


def norms(model, family):
    cls = FAMILIES[family][2]
    return [m for m in model.modules() if type(m).__name__ == cls]


def patch(model, **options):
    # Explicit patcher: the tests run from the working tree, whose entry points may not be installed.
    return kp_core.patch(model, patchers=[kp_norm.patch_norms], **options)


def ids(device="cpu", batch=2, seq=12):
    return torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(7)).to(device)


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_rounding_swaps_every_norm_and_gives_hf_logits_bit_for_bit(family):
    model = tiny(family)
    n_norms = len(norms(model, family))
    keys = list(model.state_dict())
    x = ids()
    with torch.no_grad():
        want = model(x).logits
    report = patch(model, hf_rounding=True, backend="reference")
    assert report.swapped == {FAMILIES[family][2]: n_norms} and not report.skips
    assert norms(model, family) == []
    assert sum(isinstance(m, kp_norm.RMSNorm) for m in model.modules()) == n_norms
    assert list(model.state_dict()) == keys
    assert all(not m.training for m in model.modules())
    with torch.no_grad():
        got = model(x).logits
    assert torch.equal(got, want)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma"])
def test_default_rounding_is_close_to_hf(family):
    model = tiny(family)
    x = ids()
    with torch.no_grad():
        want = model(x).logits.float()
    patch(model, backend="reference")
    assert all(m.rounding == "once" for m in model.modules() if isinstance(m, kp_norm.RMSNorm))
    with torch.no_grad():
        got = model(x).logits.float()
    assert kt.rel_error(got, want) < 2e-2


def test_gemma_norms_get_the_offset_and_olmo2_none():
    gemma, olmo = tiny("gemma"), tiny("olmo2")
    patch(gemma, hf_rounding=True)
    patch(olmo, hf_rounding=True)
    assert {(m.weight_offset, m.rounding) for m in gemma.modules() if isinstance(m, kp_norm.RMSNorm)} == {(1.0, "once")}
    assert {(m.weight_offset, m.rounding) for m in olmo.modules() if isinstance(m, kp_norm.RMSNorm)} == {(0.0, "once")}


LR = 0.5


def _train_step(family, device="cpu", backend="reference", dtype=torch.bfloat16):
    """HF and patched copies take one training step on the same batch: returns both, the frozen
    norm, and the patched model's parameters before the step."""
    model = tiny(family, device=device, dtype=dtype).train()
    frozen = model.model.layers[0].input_layernorm.requires_grad_(False)  # as LoRA/PEFT freeze them
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)  # built before the swap
    patch(model, hf_rounding=True, backend=backend)
    assert all(m.training for m in model.modules())
    x = ids(device)
    for m in (ref, model):
        m(x, labels=x).loss.backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return ref, model, frozen, before


def _check_step(ref, model, frozen, before, changed: bool, tol=None):
    assert model.model.layers[0].input_layernorm.weight is frozen.weight  # the same Parameter
    assert frozen.weight.grad is None and torch.equal(frozen.weight, before["model.layers.0.input_layernorm.weight"])
    ref_params = dict(ref.named_parameters())
    norm_params = {n: p for n, p in model.named_parameters() if "norm" in n and p.requires_grad}
    assert len(norm_params) >= 4
    for n, p in norm_params.items():
        assert p.grad is not None, n
        # The optimizer built before the swap stepped the model's live weight (on a GPU its
        # foreach kernel may fuse the multiply-add differently: equal up to one rounding).
        stepped = before[n].add(p.grad, alpha=-LR)
        assert torch.equal(p, stepped) if p.device.type == "cpu" else torch.allclose(p, stepped), n
        if changed:  # (a bf16 weight near 1 may not move for a gradient of 1e-4)
            assert not torch.equal(p, before[n]), n
    # Every gradient (the norms' dx reaches all of them) is HF's, up to rounding.
    tol = tol or (1e-5 if frozen.weight.dtype == torch.float32 else 2e-2)
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert kt.rel_error(p.grad.float(), ref_params[n].grad.float()) < tol, n


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma"])
def test_training_step_updates_trainable_norms_and_leaves_frozen_ones(family, dtype):
    _check_step(*_train_step(family, dtype=dtype), changed=dtype == torch.float32)


def test_shared_norm_stays_one_object():
    model = tiny("llama")
    layers = model.model.layers
    layers[1].input_layernorm = layers[0].input_layernorm  # tie before patching
    report = patch(model)
    assert layers[1].input_layernorm is layers[0].input_layernorm
    assert isinstance(layers[0].input_layernorm, kp_norm.RMSNorm)
    assert len(report) == len({id(m) for m in model.modules() if isinstance(m, kp_norm.RMSNorm)}) == 4
    shared = [s for s in report.swaps if s.aliases]
    names = [(s.name, s.aliases) for s in shared]
    assert names == [("model.layers.0.input_layernorm", ("model.layers.1.input_layernorm",))]


def test_report_reads_well():
    report = patch(tiny("qwen3"), hf_rounding=True)
    text = str(report)
    assert "kp patch (kp_norm): 9 module(s) swapped, 0 skipped" in text
    assert "9 x Qwen3RMSNorm -> kp_norm.RMSNorm (rounding='llama')" in text


def test_known_table_matches_installed_transformers_bit_for_bit():
    """Every class of kp_norm.hf.KNOWN that this transformers defines computes exactly what its kp
    twin computes with hf_rounding (bf16, random weights): the table is read from their code."""
    root = pathlib.Path(transformers.__file__).parent / "models"
    where = {}
    for f in root.glob("*/modeling_*.py"):
        for name in re.findall(r"\nclass (\w+RMSNorm)\(", f.read_text()):
            if name in hf.KNOWN:
                where[name] = f"transformers.models.{f.parent.name}.{f.stem}"
    assert {"LlamaRMSNorm", "Qwen3RMSNorm", "GemmaRMSNorm", "Olmo2RMSNorm"} <= set(where)
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    for name, module in sorted(where.items()):
        m = getattr(importlib.import_module(module), name)(64, 1e-6).to(torch.bfloat16)
        with torch.no_grad():
            m.weight.normal_(0.5, 0.3)
        want = m(x)
        new = kp_norm.replace_norms(m, hf_rounding=True, backend="reference")
        assert isinstance(new, kp_norm.RMSNorm), name
        assert torch.equal(new(x), want), name


def test_options_are_checked():
    with pytest.raises(TypeError, match="unknown option.*'hf_round'.*accept: backend, hf_rounding"):
        patch(tiny("llama"), hf_round=True)


def test_entry_point_discovery_when_installed():
    eps = {ep.name: ep.value for ep in md.entry_points(group="kp_core.patches")}
    if "kp_norm" not in eps:
        pytest.skip("the installed kp-norm predates its kp_core.patches entry point (reinstall to test)")
    assert eps["kp_norm"] == "kp_norm.patch:patch_norms"
    model = tiny("llama")
    report = kp_core.patch(model)
    assert "kp_norm" in report.patchers and report.swapped == {"LlamaRMSNorm": 5}


def test_pyproject_registers_the_patcher():
    tomllib = pytest.importorskip("tomllib")
    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    eps = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["kp_core.patches"]
    assert eps == {"kp_norm": "kp_norm.patch:patch_norms"}


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_patched_model_on_gpu_with_auto_backend(family):
    model = tiny(family, device="cuda")
    x = ids("cuda")
    with torch.no_grad():
        want = model(x).logits.float()
    report = patch(model, hf_rounding=True)  # backend auto: the CUDA kernels when the extension loaded
    assert report.swapped == {FAMILIES[family][2]: sum(isinstance(m, kp_norm.RMSNorm) for m in model.modules())}
    with torch.no_grad():
        got = model(x).logits.float()
    # Not bit for bit: the kernels reduce in another order than torch's mean.
    assert kt.rel_error(got, want) < 1e-2
    _check_step(*_train_step(family, device="cuda", backend=None, dtype=torch.float32), changed=True, tol=1e-4)
    _check_step(*_train_step(family, device="cuda", backend=None), changed=False, tol=5e-2)
