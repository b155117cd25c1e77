"""GatedMLP: down(act(gate(x)) * up(x)), the MLP of Llama, Mistral and Qwen2, on gated_linear.

It holds the gate and up projections as ONE packed Parameter `gate_up_weight` [2I, H] (gate rows,
then up rows) and the down projection as an nn.Linear `down_proj` [H, I]. Its state dict uses
Hugging Face's keys (`gate_proj.weight`, `up_proj.weight`, `down_proj.weight`, and `.bias` where
present), so it loads a LlamaMLP's state dict and a model holding it saves what the original did.
"""
from __future__ import annotations

import math

import torch
from kp_core import registry
from kp_core.op import as_rows
from torch import nn
from torch.nn.modules import module as _nn_module

from . import gated, linear
from .gated import GATED_ACTIVATIONS, gated_linear
from .gated_mlp import gated_mlp
from .linear import linear_act

def _cuda_level():
    return gated.LEVELS.module("cuda")


# The fused decode kernel as a registered op, so that a compiled GatedMLP runs it too (inference
# only: no autograd; its workspaces and barrier counter are the impl's, allocated at run time).
def _decode_op_impl(x, w_gate_up, b_gate_up, w_down, b_down, activation):
    return _cuda_level().gated_mlp_decode(x, w_gate_up, b_gate_up, w_down, b_down, activation)


def _decode_op_fake(x, w_gate_up, b_gate_up, w_down, b_down, activation):
    return x.new_empty((x.shape[0], w_down.shape[0]))


GATED_MLP_DECODE = registry.define(
    "kp_fused_mlp",
    "gated_mlp_decode(Tensor x, Tensor w_gate_up, Tensor? b_gate_up, Tensor w_down, Tensor? b_down, str activation) "
    "-> Tensor",
    _decode_op_impl,
    _decode_op_fake,
    dispatch_keys=("CUDA",),
)


@registry.constant_result
def _fused_decode_serves(m: int, hidden: int, inter: int, dtype: torch.dtype, index: int) -> bool:
    """Whether the fused kernel's plan takes M tokens at these sizes (under torch.compile: evaluated
    once at trace time, not traced)."""
    return not _cuda_level().gated_mlp_decode_plan(m, hidden, inter, dtype, index)["why"]


@registry.constant_result
def _backward_fuses(hidden: int) -> bool:
    """Whether GatedMLP's backward at this hidden size fuses the down projection's input gradient
    and the gated activation's backward (the cuda level's plan; at trace time under torch.compile)."""
    return _cuda_level().fuses_backward(hidden)


_DECODE_DTYPES = (torch.float16, torch.bfloat16)
_PACKED = {"gate_up_weight": "weight", "gate_up_bias": "bias"}  # packed Parameter -> Hugging Face key suffix


class GatedMLP(nn.Module):
    """down_proj(act(x Wg^T + bg) * (x Wu^T + bu)), the gate/up half fused in one kernel.

    `activation`: "silu" (Llama, Mistral, Qwen2) or "gelu_tanh" (Gemma's gelu_pytorch_tanh).
    `bias`: biases on all three projections (Llama's mlp_bias). `backend` goes to gated_linear;
    the down projection is torch's (cuBLAS), or linear_act's cuda level at decode sizes (at most
    32 tokens) where gated_linear runs at the cuda level and linear_act's cuda level can serve the
    down projection too (a plain nn.Linear without hooks, of h's dtype, outside autocast, no
    gradient). `GatedMLP.from_hf(m)`
    builds one from a Hugging Face MLP; `kp_fused_mlp.replace_mlps(model)` swaps every one of a
    model's.
    """

    fused_backward = True
    """Training calls where gated_linear runs at the cuda level and the down projection is a plain
    nn.Linear of x's dtype run as one op (gated_mlp.py) whose backward computes the down
    projection's input gradient and the gated activation's backward in one GEMM; False keeps
    gated_linear then down_proj (for A/B benchmarks)."""

    fused_decode = True
    """Inference calls at the decode table's tma sizes (sm90; 3-32 tokens where the gated projection
    takes a tma row) run both projections in one kernel (csrc/decode_mlp.cu); False keeps the two
    kernels (for A/B benchmarks)."""

    def __init__(self, hidden: int, intermediate: int, activation: str = "silu", bias: bool = False,
                 device=None, dtype=None, backend: str | None = None):  # fmt: skip
        super().__init__()
        if activation not in GATED_ACTIVATIONS:
            raise ValueError(f"GatedMLP: activation must be one of {', '.join(GATED_ACTIVATIONS)}, got {activation!r}")
        self.hidden, self.intermediate, self.activation, self.backend = hidden, intermediate, activation, backend
        kw = {"device": device, "dtype": dtype}
        self.gate_up_weight = nn.Parameter(torch.empty((2 * intermediate, hidden), **kw))
        self.gate_up_bias = nn.Parameter(torch.empty((2 * intermediate,), **kw)) if bias else None
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias, **kw)
        self.reset_parameters()
        self._register_state_dict_hook(_save_hf_keys)
        self._register_load_state_dict_pre_hook(_load_hf_keys, with_module=True)

    def reset_parameters(self) -> None:
        """nn.Linear's initialization for each projection (fan-in H for gate and up)."""
        nn.init.kaiming_uniform_(self.gate_up_weight, a=math.sqrt(5))
        if self.gate_up_bias is not None:
            bound = 1 / math.sqrt(self.hidden) if self.hidden else 0.0
            nn.init.uniform_(self.gate_up_bias, -bound, bound)
        self.down_proj.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.gate_up_weight, self.gate_up_bias
        autocast = torch.is_autocast_enabled(x.device.type)
        if autocast:
            # Autocast casts F.linear's operands; gated_linear takes one dtype, so cast as it would.
            dtype = torch.get_autocast_dtype(x.device.type)
            x, w, b = x.to(dtype), w.to(dtype), None if b is None else b.to(dtype)
        name, grad, compiling = gated.level(x, w, b, self.backend)
        down = self.down_proj
        if name == "cuda" and self.fused_decode and not (autocast or grad):
            y = self._fused_decode(x, w, b, down, compiling)
            if y is not None:
                return y
        if name == "cuda" and grad and self.fused_backward and not autocast and self._fuses_backward(x, w, down):
            gated.check(x, w, self.activation, b)
            y = gated_mlp(as_rows(x, x.shape[-1]), w, b, down.weight, down.bias, self.activation, name, compiling)
            return y.view(*x.shape[:-1], down.out_features)
        h = gated_linear(x, w, self.activation, b, backend=name)
        decode = linear.linear_decodes(h, down.out_features, h.shape[-1])
        if name == "cuda" and decode and not autocast and _plain_linear(down) and down.weight.dtype == h.dtype:
            # At a few tokens the cuda level streams the down weight through linear_act too (its
            # decode kernel reads it at copy speed, where cuBLAS's GEMV does not); the module
            # stays an nn.Linear (state dict, Parameters), only its call is replaced. Past
            # linear_act's decode cut for the down shape, kp's GEMM is no faster than cuBLAS at a
            # few tokens (H200: 32 x 14336 -> 4096, 52.8 us against 42.5): the module runs; so does
            # it for calls that need gradients (linear_act's cuda level would run its GEMM then).
            down_level, grad, _ = linear.level(h, down.weight, down.bias, "auto")
            if down_level == "cuda" and not grad:
                return linear_act(h, down.weight, down.bias, backend="cuda")
        return down(h)

    @staticmethod
    def _fuses_backward(x, w, down) -> bool:
        """Whether gated_mlp takes a training call: a plain nn.Linear down projection of x's dtype
        and device whose weight is [H, I] with H a multiple of 8 (TMA rows of dy) where the fused
        backward is the faster one (csrc/gated_table.h: H <= 4096), and tokens."""
        if not _plain_linear(down) or x.dim() == 0 or x.numel() == 0 or torch.jit.is_tracing():
            return False
        wd = down.weight
        return (wd.dtype == x.dtype and wd.device == x.device and wd.dim() == 2 and wd.shape[1] == w.shape[0] // 2
                and wd.shape[0] % 8 == 0 and _backward_fuses(wd.shape[0]))  # fmt: skip

    def _fused_decode(self, x, w, b, down, compiling=False):
        """The fused decode kernel's y (csrc/decode_mlp.cu: both projections in one launch), or None
        where it does not take the call (not sm90, too many or too few tokens, a down projection
        that is not a plain nn.Linear of x's dtype or that needs a gradient, operands that do not
        chain: the two-kernel path then says what is wrong; under torch.jit tracing, which records
        only torch's ops). Compiled: the registered op, where the token count is static."""
        if not _plain_linear(down) or down.weight.dtype != x.dtype or x.dim() == 0 or torch.jit.is_tracing():
            return None
        if torch.is_grad_enabled() and (down.weight.requires_grad or (down.bias is not None and down.bias.requires_grad)):
            return None
        rows = x.reshape(-1, x.shape[-1])
        m = rows.shape[0]
        if compiling:
            if not isinstance(m, int) or m == 0 or x.device.type != "cuda" or x.dtype not in _DECODE_DTYPES:
                return None  # a dynamic token count: the two ops
            if _cuda_level().gated_mlp_operands_problem(rows, w, b, down.weight, down.bias):
                return None
            if not _fused_decode_serves(m, x.shape[-1], down.weight.shape[1], x.dtype, x.device.index):
                return None
            y = GATED_MLP_DECODE(rows, w, b, down.weight, down.bias, self.activation)
        else:
            y = None if m == 0 else _cuda_level().try_gated_mlp_decode(rows, w, b, down.weight, down.bias, self.activation)
            if y is None:
                return None
        return y.view(*x.shape[:-1], down.out_features)

    def extra_repr(self) -> str:
        s = f"hidden={self.hidden}, intermediate={self.intermediate}, activation={self.activation!r}"
        s += f", bias={self.gate_up_bias is not None}"
        return s + (f", backend={self.backend!r}" if self.backend else "")

    @classmethod
    def from_hf(cls, m: nn.Module, activation: str, *, backend: str | None = None) -> GatedMLP:
        """The GatedMLP computing m's function: m holds nn.Linear gate_proj, up_proj and down_proj
        (a Hugging Face LlamaMLP, MistralMLP, Qwen2MLP, ...); `activation` is its act_fn's
        (kp_fused_mlp.patch.hf_activation maps a config's hidden_act).

        Gate and up are copied into the packed weight (requires_grad kept; an optimizer built
        before must be rebuilt for it); `down_proj` is m's own module, shared, not copied. The
        new module is on m's device and dtype, in m's train/eval mode.
        """
        gate, up, down = m.gate_proj, m.up_proj, m.down_proj
        bias = gate.bias is not None
        new = cls(gate.in_features, gate.out_features, activation, bias, device="meta", backend=backend)
        with torch.no_grad():
            new.gate_up_weight = nn.Parameter(torch.cat([gate.weight, up.weight]), gate.weight.requires_grad)
            if bias:
                new.gate_up_bias = nn.Parameter(torch.cat([gate.bias, up.bias]), gate.bias.requires_grad)
        new.down_proj = down
        return new.train(m.training)


def _plain_linear(m: nn.Module) -> bool:
    """An nn.Linear whose call is F.linear: exactly that class (not a quantized or adapter
    subclass), with no hooks of its own or global ones that its __call__ would run."""
    return (type(m) is nn.Linear and not (m._forward_hooks or m._forward_pre_hooks)
            and not (_nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks))  # fmt: skip


def _save_hf_keys(module: GatedMLP, state_dict, prefix: str, local_metadata) -> None:
    """state_dict: the packed Parameters as gate_proj.* and up_proj.* (views of their halves), in
    Hugging Face's key order (gate, up, down; each weight before its bias)."""
    ours = {k[len(prefix) :]: state_dict.pop(k) for k in list(state_dict) if k.startswith(prefix)}
    w, b = ours.pop("gate_up_weight", None), ours.pop("gate_up_bias", None)
    inter = module.intermediate
    for proj, half in (("gate_proj", slice(0, inter)), ("up_proj", slice(inter, None))):
        for name, t in (("weight", w), ("bias", b)):
            if t is not None:
                state_dict[f"{prefix}{proj}.{name}"] = t[half]
    for k, v in ours.items():  # down_proj.*, and whatever a subclass added
        state_dict[prefix + k] = v


def _load_hf_keys(module: GatedMLP, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
    """load_state_dict: gate_proj.* and up_proj.* concatenated into the packed Parameters."""
    for packed, suffix in _PACKED.items():
        g, u = f"{prefix}gate_proj.{suffix}", f"{prefix}up_proj.{suffix}"
        if g in state_dict and u in state_dict:
            if state_dict[g].shape != state_dict[u].shape:
                errors.append(
                    f"GatedMLP: {g} has shape {tuple(state_dict[g].shape)} but {u} has shape "
                    f"{tuple(state_dict[u].shape)}; a gated MLP's gate and up projections have one shape"
                )
                continue
            state_dict[prefix + packed] = torch.cat([state_dict.pop(g), state_dict.pop(u)])
