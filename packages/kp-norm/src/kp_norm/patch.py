"""kp_norm's part of `kp_core.patch(model)`: swap a model's norms for kp modules, in place.

What a swap keeps, and why it matters:
  * the Parameter objects themselves (reused, never copied): `requires_grad=False` weights (LoRA,
    PEFT) stay frozen, an optimizer built before the swap still steps the live weights, state-dict
    keys and tied weights are unchanged;
  * one replacement per original object: a norm shared by two parents stays shared;
  * train/eval mode, and the hook dictionaries themselves (forward, pre-forward, backward,
    state-dict hooks), so handles the user holds still remove them.
"""
from __future__ import annotations

import logging
from typing import Optional, Union

from kp_core import PatchReport, Skip, Swap
from torch import nn

from . import hf
from .modules import LayerNorm, RMSNorm, _plain

log = logging.getLogger("kp_norm")

# Every hook registry of an nn.Module, moved (not copied) to the replacement.
_CARRIED = (
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks",
    "_is_full_backward_hook", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_is_hf_initialized",  # transformers' flag: a later init_weights() must not re-initialize the weight
)  # fmt: skip


def _replacement(m: nn.Module, hf_rounding: bool, backend: Optional[str]) -> Union[None, str, tuple]:
    """None: not a norm kp serves (look inside it); str: a norm left alone, and why;
    (new module, detail): its kp twin."""
    if isinstance(m, (RMSNorm, LayerNorm)):
        return None  # patched already: patching twice is a no-op
    if not (isinstance(m, nn.LayerNorm) or hf.is_candidate(m)):
        return None
    if "forward" in vars(m) or hasattr(m, "_hf_hook"):
        return "its forward is wrapped on the instance (e.g. accelerate's offloading hooks); a swap would drop it"
    if _plain(m, nn.RMSNorm):
        return RMSNorm.from_torch(m, backend=backend), ""
    if _plain(m, nn.LayerNorm):
        return LayerNorm.from_torch(m, backend=backend), ""
    if isinstance(m, nn.LayerNorm):
        return "it subclasses torch.nn.LayerNorm and overrides forward"
    found = hf.match(m, find_rounding=hf_rounding)
    if isinstance(found, str):
        return found
    rounding = found.rounding if hf_rounding else "once"
    new = RMSNorm._sharing(found.normalized_shape, found.eps, found.weight, None, training=m.training,
                           weight_offset=found.weight_offset, rounding=rounding, backend=backend)  # fmt: skip
    detail = [f"weight_offset={found.weight_offset:g}"] if found.weight_offset else []
    detail += [f"rounding={rounding!r}"] if rounding != "once" else []
    detail += [found.how] if found.how != "known class" else []
    return new, ", ".join(detail)


def _move_hooks(old: nn.Module, new: nn.Module) -> None:
    for attr in _CARRIED:
        if attr in old.__dict__:
            new.__dict__[attr] = old.__dict__[attr]


def patch_norms(model: nn.Module, *, hf_rounding: bool = False, backend: Optional[str] = None) -> PatchReport:
    """Swap every norm of `model` kp_norm can serve for a kp module, in place; the kp_norm patcher
    of `kp_core.patch`.

    Served: torch.nn.RMSNorm and torch.nn.LayerNorm, Hugging Face RMSNorm classes in the table of
    kp_norm.hf (LlamaRMSNorm, Qwen3RMSNorm, GemmaRMSNorm with its 1 + w, Olmo2RMSNorm, ...), and
    other classes named *RMSNorm holding only a 1-D weight and an eps, once a probe shows kp
    computes their function. `hf_rounding=True` reproduces each known class's rounding bit for bit
    (Llama-style classes round x̂ before the weight); the default rounds once, in fp32. `backend`
    is passed to the new modules. `report.model` is the patched model (the replacement when
    `model` itself is a norm).
    """
    report = PatchReport(model=model, patchers=["kp_norm"])
    # Every (parent, attribute, child) edge: a shared norm is reached through each of its parents.
    edges = [(None, "", model, "")]
    for pname, parent in model.named_modules():
        for cname, child in parent._modules.items():
            if child is not None:
                edges.append((parent, cname, child, f"{pname}.{cname}" if pname else cname))
    # Decide everything before changing anything: a failure leaves the model as it was.
    plans, names = {}, {}
    for _, _, child, qname in edges:
        if id(child) not in plans:
            plans[id(child)] = _replacement(child, hf_rounding, backend)
        names.setdefault(id(child), []).append(qname)
    for parent, cname, child, qname in edges:
        plan = plans[id(child)]
        if isinstance(plan, tuple):
            if parent is None:
                report.model = plan[0]
            else:
                setattr(parent, cname, plan[0])
    seen = set()
    for _, _, child, qname in edges:
        plan = plans[id(child)]
        if plan is None or id(child) in seen:
            continue
        seen.add(id(child))
        if isinstance(plan, str):
            report.skips.append(Skip(qname, type(child).__name__, plan, "kp_norm"))
        else:
            new, detail = plan
            _move_hooks(child, new)
            aliases = tuple(names[id(child)][1:])
            old = type(child).__name__
            old = f"torch.nn.{old}" if type(child).__module__.startswith("torch.nn") else old
            report.swaps.append(Swap(qname, old, f"kp_norm.{type(new).__name__}", detail, aliases, "kp_norm"))
    return report


def replace_norms(model: nn.Module, *, hf_rounding: bool = False, backend: Optional[str] = None,
                  verbose: bool = False) -> nn.Module:  # fmt: skip
    """Swap every norm of `model` kp_norm can serve, in place (see `patch_norms`); returns the
    patched model, which is the replacement itself when `model` is a bare norm.

    The report goes to the `kp_norm` logger (INFO; what was skipped, at WARNING); `verbose=True`
    prints it. `kp_norm.patch_norms` returns it instead.
    """
    report = patch_norms(model, hf_rounding=hf_rounding, backend=backend)
    if verbose:
        print(report)
    log.info("replace_norms: %s", report)
    for line in report.skip_lines():
        log.warning("replace_norms: %s", line)
    if not report.swaps and not report.skips:
        log.warning("replace_norms: %s holds no norm kp_norm can serve", type(model).__name__)
    return report.model
