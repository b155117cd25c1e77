"""Which foreign RMSNorm classes kp_norm can stand in for, and how.

Hugging Face models do not use torch.nn.RMSNorm: each model file defines its own class (LlamaRMSNorm,
GemmaRMSNorm, ...), and they differ in two ways that matter:
  * the offset: Gemma-style classes compute x̂ * (1 + w) (their weight starts at 0);
  * the rounding: Llama-style classes round x̂ to the input dtype before multiplying by w
    (`w * x̂.to(dtype)`), others multiply in fp32 and round once (kp's default).

Known classes are matched by name and by living in `transformers.models` (so transformers is never
imported here). Any other class with "RMSNorm" in its name and a norm's shape is verified on a small
random probe before it is swapped: kp must compute the same function, or the module is skipped.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import nn

from .norm import rms_norm

LLAMA = (0.0, "llama")  # return self.weight * hidden_states.to(input_dtype)
GEMMA = (1.0, "once")  # return (x̂ * (1.0 + self.weight.float())).type_as(x)
FP32 = (0.0, "once")  # return (self.weight * hidden_states).to(input_dtype)



def _classes(prefixes: str, style: tuple) -> dict:
    return {f"{p}RMSNorm": style for p in prefixes.split()}


# Read from each class's forward() in transformers 5.23; tests/test_hf_models.py checks every entry
# the installed transformers defines against kp, bit for bit. Classes not listed still get the probe.
KNOWN = {
    **_classes(
        "Llama Llama4Text Mistral Mistral3 Ministral Mixtral Qwen2 Qwen2Moe Qwen2VL Qwen2_5_VL Qwen3 Qwen3Moe "
        "Qwen3VLText Phi3 Granite GraniteMoe DeepseekV2 DeepseekV3 SmolLM3 Glm4 Ernie4_5 Olmoe Exaone4 "
        "Apertus Arcee Dots1",
        LLAMA,
    ),
    **_classes("Gemma Gemma2 Gemma3 T5Gemma VaultGemma RecurrentGemma Qwen3Next Qwen3_5", GEMMA),
    **_classes("Olmo2 Olmo3 FlexOlmo GptOss Helium Moshi Gemma3n", FP32),
}

EPS_NAMES = ("variance_epsilon", "eps", "epsilon")


@dataclass(frozen=True)
class Match:
    """How to build m's kp twin."""

    normalized_shape: tuple
    eps: float
    weight: nn.Parameter  # m's own Parameter, reused as is
    weight_offset: float
    rounding: str  # the rounding m itself does: what hf_rounding=True picks
    how: str  # "known class" or "verified on a probe"


def _known(m: nn.Module) -> Optional[tuple]:
    cls = type(m)
    if cls.__module__.startswith("transformers.models."):
        return KNOWN.get(cls.__name__)
    return None


def is_candidate(m: nn.Module) -> bool:
    """Worth a look: a known class, or one whose name or base says it is an RMSNorm."""
    return _known(m) is not None or "RMSNorm" in type(m).__name__ or isinstance(m, nn.RMSNorm)


def _layout(m: nn.Module) -> Union[str, tuple]:
    """(eps, weight) when m holds exactly what kp's RMSNorm holds, else why not."""
    eps = next((getattr(m, n) for n in EPS_NAMES if isinstance(getattr(m, n, None), (float, int))), None)
    if eps is None or isinstance(eps, bool) or not eps >= 0:
        return f"no eps attribute ({' / '.join(EPS_NAMES)}) holding a number >= 0"
    params = dict(m.named_parameters(recurse=False))
    weight = params.pop("weight", None)
    if params:
        return f"it has parameters besides weight ({', '.join(params)})"
    if any(True for _ in m.buffers(recurse=False)) or any(True for _ in m.children()):
        return "it has buffers or submodules; kp's RMSNorm holds only a weight"
    # Without a weight the normalized size is nowhere to be read (Gemma3n's with_scale=False).
    if weight is None or weight.dim() != 1 or weight.numel() == 0:
        return "its weight is not a non-empty 1-D nn.Parameter"
    # Extra arguments (a gate, a residual) would be misread as kp's residual argument.
    params = list(inspect.signature(type(m).forward).parameters.values())[1:]
    if len(params) != 1 or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return f"its forward takes ({', '.join(p.name for p in params)}), not one tensor"
    return float(eps), weight


def _randn(n: int, device, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed)  # never the global RNG: no side effects
    return torch.randn((4, n), generator=g, device=device).to(dtype)


def _run(m: nn.Module, x: torch.Tensor, w: torch.Tensor):
    """m's forward on x with w standing in for its weight (restored after).

    A random weight, not m's own: a freshly initialised norm holds ones or zeros, on which
    x̂ * w, x̂ * w², x̂ * (1 + w)... cannot be told apart. forward, not __call__: the probe must not
    fire the user's hooks."""
    saved = m._parameters["weight"]
    m._parameters["weight"] = w
    try:
        with torch.no_grad():
            return m.forward(x)
    finally:
        m._parameters["weight"] = saved


def _probe_inputs(weight: nn.Parameter, dtype: torch.dtype):
    n, dev = weight.shape[0], weight.device
    x = _randn(n, dev, torch.float32, 0x6B70).mul_(3).to(dtype)
    w = (_randn(n, dev, torch.float32, 0x6B71)[0] * 0.5 + 1.0).to(weight.dtype)
    return x, w


def _same(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def _probe(m: nn.Module, eps: float, weight: nn.Parameter) -> Union[str, float]:
    """The offset (0 or 1) with which kp computes m's function on an fp32 probe, else why none does."""
    if weight.device.type == "meta":
        return "its weight is on the meta device, so kp cannot verify it computes the same function"
    x, w = _probe_inputs(weight, torch.float32)
    try:
        want = _run(m, x, w)
    except Exception as e:
        return f"its forward failed on a probe input ({type(e).__name__}: {e})"
    for offset in (0.0, 1.0):
        got = rms_norm(x, w, eps, weight_offset=offset, backend="reference")
        if isinstance(want, torch.Tensor) and want.shape == got.shape and want.dtype == got.dtype:
            if torch.allclose(want, got, rtol=1e-5, atol=1e-5):
                return offset
    return "kp's RMSNorm (weight offset 0 or 1) does not compute its function on a probe input"


def _probe_rounding(m: nn.Module, eps: float, weight: nn.Parameter) -> str:
    """"llama" if m rounds x̂ before the weight (seen bit for bit on a bf16 probe), else "once"."""
    x, w = _probe_inputs(weight, torch.bfloat16)
    try:
        want = _run(m, x, w)
    except Exception:  # it ran in fp32; a bf16 failure says nothing about its rounding
        return "once"
    once = rms_norm(x, w, eps, backend="reference")
    llama = w * rms_norm(x, None, eps, backend="reference")
    return "llama" if _same(want, llama) and not _same(want, once) else "once"


def match(m: nn.Module, *, find_rounding: bool = False) -> Union[Match, str]:
    """How kp stands in for m, or a sentence saying why it cannot. torch.nn.RMSNorm itself is
    served by RMSNorm.from_torch; a subclass overriding its forward comes here and is probed.
    `find_rounding` probes an unknown class's rounding (otherwise reported "once")."""
    known = _known(m)
    if known is None and not is_candidate(m):
        return "not an RMSNorm class kp_norm knows"
    found = _layout(m)
    if isinstance(found, str):
        return found
    eps, weight = found
    if known is not None:
        offset, rounding = known
        return Match(tuple(weight.shape), eps, weight, offset, rounding, "known class")
    offset = _probe(m, eps, weight)
    if isinstance(offset, str):
        return offset
    rounding = _probe_rounding(m, eps, weight) if find_rounding and offset == 0.0 else "once"
    return Match(tuple(weight.shape), eps, weight, offset, rounding, "verified on a probe")
