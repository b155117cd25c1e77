"""Swap a model's gated MLPs for GatedMLP, in place: `replace_mlps`, and `patch_mlps`, a patcher for
`kp_core.patch(model, patchers=[patch_mlps])`. Not registered under the `kp_core.patches` entry
points: those swaps keep the original Parameter objects (an optimizer built before stays valid),
and the packed gate/up weight is a new Parameter.

A module is swapped when it computes down_proj(act_fn(gate_proj(x)) * up_proj(x)): its class's
forward is that expression (compared by bytecode, so LlamaMLP, MistralMLP, Qwen2MLP and the
hundred-odd Hugging Face classes that copy it are found without a list of names, and without
importing transformers), its three projections are plain nn.Linear, and its act_fn is a SiLU or a
tanh-approximated GELU (HF_ACTIVATIONS; any other activation, e.g. "gelu" with erf or "relu2", is
skipped with that reason in the report). The model's state-dict keys and values are unchanged
(GatedMLP saves and loads Hugging Face's keys); the gate and up weights are copied into one packed
Parameter, so an optimizer built before the swap must be rebuilt.
"""
from __future__ import annotations

import logging

from kp_core import PatchReport, Skip, Swap
from torch import nn

from .modules import GatedMLP

log = logging.getLogger("kp_fused_mlp")

# Hugging Face's hidden_act names (transformers.activations.ACT2FN) of the activations GatedMLP
# computes: SiLU, and GELU's tanh approximation (gelu_fast writes sqrt(2/pi) with 10 digits).
HF_ACTIVATIONS = {
    "silu": "silu", "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh", "gelu_python_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}  # fmt: skip
# The classes ACT2FN builds for those names (what a module's act_fn is).
_ACT_CLASSES = {"SiLUActivation": "silu", "SiLU": "silu", "GELUTanh": "gelu_tanh",
                "NewGELUActivation": "gelu_tanh", "FastGELUActivation": "gelu_tanh"}  # fmt: skip


def hf_activation(hidden_act: str) -> str:
    """GatedMLP's activation for a Hugging Face config's `hidden_act`; ValueError for the others."""
    if hidden_act not in HF_ACTIVATIONS:
        raise ValueError(
            f"GatedMLP computes silu and gelu_tanh; hidden_act={hidden_act!r} is neither (served: "
            f"{', '.join(HF_ACTIVATIONS)})"
        )
    return HF_ACTIVATIONS[hidden_act]


# The forward every served class has, in the two ways Hugging Face writes it.
class _Forms:
    def named(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj

    def direct(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


_FORMS = [(f.__code__.co_code, f.__code__.co_names) for f in (_Forms.named, _Forms.direct)]


def _computes_gated_mlp(cls: type) -> bool:
    code = getattr(getattr(cls, "forward", None), "__code__", None)
    return code is not None and (code.co_code, code.co_names) in _FORMS


def _replacement(m: nn.Module, backend: str | None):
    """None: not a gated MLP (look inside it); str: one left alone, and why; GatedMLP: its twin."""
    if isinstance(m, GatedMLP) or not _computes_gated_mlp(type(m)):
        return None
    if "forward" in vars(m) or hasattr(m, "_hf_hook"):
        return "its forward is wrapped on the instance (e.g. accelerate's offloading hooks); a swap would drop it"
    if any(getattr(m, h, None) for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                          "_backward_pre_hooks")):  # fmt: skip
        return "it has forward or backward hooks; a swap would drop them"
    projs = [getattr(m, p, None) for p in ("gate_proj", "up_proj", "down_proj")]
    if any(type(p) is not nn.Linear for p in projs):
        kinds = ", ".join(type(p).__name__ for p in projs)
        return f"its projections are not all plain torch.nn.Linear ({kinds}): quantized or adapter layers"
    gate, up, _ = projs
    if gate.weight.shape != up.weight.shape or (gate.bias is None) != (up.bias is None):
        return "its gate_proj and up_proj differ in shape or bias"
    if gate.weight.dtype != up.weight.dtype or gate.weight.device != up.weight.device:
        return "its gate_proj and up_proj differ in dtype or device"
    act = _ACT_CLASSES.get(type(getattr(m, "act_fn", None)).__name__)
    if act is None:
        config = getattr(m, "config", None)
        name = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None)
        what = f"hidden_act={name!r}" if name else f"act_fn {type(getattr(m, 'act_fn', None)).__name__}"
        return f"its activation ({what}) is not one GatedMLP computes (silu, gelu_tanh: {', '.join(HF_ACTIVATIONS)})"
    new = GatedMLP.from_hf(m, act, backend=backend)
    if hasattr(m, "_is_hf_initialized"):  # transformers' flag: a later init_weights() must not re-initialize
        new._is_hf_initialized = m._is_hf_initialized
    return new


def patch_mlps(model: nn.Module, *, backend: str | None = None) -> PatchReport:
    """Swap every gated MLP of `model` for a GatedMLP, in place; a patcher for `kp_core.patch`
    (`patchers=[patch_mlps]`). `backend` is passed to the new modules. `report.model` is the patched model
    (the replacement when `model` itself is an MLP). Everything is decided before anything is
    changed: an error leaves the model as it was. A module shared by several parents gets one
    replacement, set in each of them."""
    report = PatchReport(model=model, patchers=["kp_fused_mlp"])
    plans, where, sets = {}, {}, []  # id -> (plan, class name); id -> its names; (parent, attribute, new)

    def visit(parent: nn.Module | None, attr: str, m: nn.Module, name: str) -> None:
        first = id(m) not in plans
        if first:
            plans[id(m)], where[id(m)] = (_replacement(m, backend), type(m).__name__), []
        plan = plans[id(m)][0]
        where[id(m)].append(name)
        if isinstance(plan, GatedMLP):
            sets.append((parent, attr, plan))
        elif plan is None and first:  # not an MLP: look inside it (once)
            for cname, child in m._modules.items():
                if child is not None:
                    visit(m, cname, child, f"{name}.{cname}" if name else cname)

    visit(None, "", model, "")
    for parent, attr, new in sets:
        if parent is None:
            report.model = new
        else:
            setattr(parent, attr, new)
    for key, (plan, cls) in plans.items():
        name, *aliases = where[key]
        if isinstance(plan, str):
            report.skips.append(Skip(name, cls, plan, "kp_fused_mlp"))
        elif plan is not None:
            detail = f"activation={plan.activation!r}" + (", bias" if plan.gate_up_bias is not None else "")
            report.swaps.append(Swap(name, cls, "kp_fused_mlp.GatedMLP", detail, tuple(aliases), "kp_fused_mlp"))
    return report


def replace_mlps(model: nn.Module, *, backend: str | None = None, verbose: bool = False) -> list:
    """Swap every gated MLP of `model` (LlamaMLP, MistralMLP, Qwen2MLP, ...) for a GatedMLP, in
    place; returns the names of the swapped modules (`patch_mlps` returns the full report, skips
    and their reasons included). The model's state-dict keys and values are kept; modules with an
    activation GatedMLP does not compute are left alone, with the reason logged at WARNING on the
    `kp_fused_mlp` logger (printed with `verbose=True`). A bare MLP cannot be swapped in place:
    use GatedMLP.from_hf for it.
    """
    report = patch_mlps(model, backend=backend)
    if report.model is not model:
        raise TypeError("replace_mlps: model is itself a gated MLP; use GatedMLP.from_hf(model, activation)")
    if verbose:
        print(report)
    log.info("replace_mlps: %s", report)
    for line in report.skip_lines():
        log.warning("replace_mlps: %s", line)
    return [s.name for s in report.swaps]
