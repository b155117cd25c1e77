"""kp-attention's CUDA level: the kernels of `kp_attention._C`, called with raw pointers (no
libtorch). Forward: on sm_90 at head dims 64 and 128 the Hopper kernel (csrc/hopper_fwd*: TMA,
wgmma, warp specialization), elsewhere the FlashAttention-2 style kernel on mma.sync, cp.async and
ldmatrix (csrc/fwd*.cu; sm_80 and newer). Backward likewise: the Hopper backward (csrc/hopper_bwd*)
on sm_90 at head dims 64 and 128 with atomic dQ, the sm80-class one otherwise. `force_sm80()` sends
both directions to the sm80-class kernels (tests, benchmarks).

The level serves float16 and bfloat16 at head dims 64, 96, 128, 192 and 256; `supports` names
anything else (fp32, other head dims: the Triton level pads those), so `auto` passes to Triton. Its
backward is native too: attention_bwd / attention_varlen_bwd run the sm80-class FlashAttention-2
style backward (csrc/bwd*.cu: mma.sync, cp.async, ldmatrix; after either forward) on the saved out
and lse (the Triton level's contract): dK, dV a key block per CTA with dQ by fp32 atomics, or the
deterministic dq kernel (no atomics). `_bwd_problem` passes a call to the Triton level's backward
(the reference formula where triton is not installed) where the module has no `attention_bwd` or
the device lacks the shared memory a head dim's kernels need (d192, d256 on sm_86 / sm_89).
Inputs whose start or strides break cp.async's 16-byte rule are copied (contiguous) first.
"""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.op import triton_importable
from kp_core.registry import current_stream

NATIVE = load_native("kp_attention")

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 96, 128, 192, 256)  # csrc/fwd_tiles.h: one kernel row each
_ALIGN = 16  # bytes: cp.async moves 16-byte packets
_HOPPER_BWD_BLOCK_N = 128  # keys a CTA of the Hopper backward (csrc/hopper_bwd_traits.cuh kBlockN)


def supports(forced: bool, device_type: str, device_index, dtype, head_dim) -> Optional[str]:
    """None when the CUDA forward serves q/k/v of this device, dtype and head dim, else why not."""
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if dtype not in DTYPES:
        return f"the CUDA forward takes float16 and bfloat16, not {dtype} (the Triton level serves it)"
    if head_dim not in HEAD_DIMS:
        return (f"the CUDA forward has kernels for head_dim {', '.join(map(str, HEAD_DIMS))}, not {head_dim} "
                "(the Triton level pads it)")  # fmt: skip
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index) or _device_problem(device_index, forced, head_dim)


# Where `auto` passes over this level although it could run: on sm_90 at the head dims the Hopper
# kernel (csrc/hopper_fwd.h: 64, 128) lacks, the sm80-class forward (mma.sync) runs, and the Triton
# level's forward (wgmma) is faster than it: H200, 2026-11-28, bf16, 16K tokens a batch, seqlen
# 1K-16K, causal and not: Triton x1.05-1.42 of it (docs/benchmarks/h200/kp-attention-cuda-fwd-2026-11-28.md).
# So auto takes Triton there; backend="cuda" still runs it. Keyed by compute capability major.
_AUTO_PASSES = {9: "on sm_90 at this head dim the CUDA forward is the sm80-class kernel (the Hopper kernel has "
                   "head dims 64 and 128), slower than the Triton level's (wgmma): auto takes Triton; "
                   "backend='cuda' forces it"}  # fmt: skip

_problems: dict = {}


class force_sm80:
    """Context manager: every CUDA-level call inside takes the sm80-class kernels (forward and
    backward), as on a GPU without the Hopper kernels; the dispatch caches that depend on it are
    cleared on the way in and out."""

    def __enter__(self):
        NATIVE.module.set_force_sm80_fwd(True)
        _problems.clear()
        return self

    def __exit__(self, *exc):
        NATIVE.module.set_force_sm80_fwd(False)
        _problems.clear()
        return False


def _device_problem(index: int, forced: bool, head_dim: int) -> Optional[str]:
    key = (index, forced, head_dim)
    if key not in _problems:
        why = NATIVE.module.fwd_device_problem(int(index)) or None
        if why is None and not forced and fwd_kernel(index, head_dim) != "sm90":
            why = _AUTO_PASSES.get(torch.cuda.get_device_capability(index)[0])
        _problems[key] = why
    return _problems[key]


def fwd_kernel(index: int, head_dim: int) -> str:
    """Which forward kernel a call at this head dim takes on device `index`: "sm90" (the Hopper
    kernel: TMA, wgmma, warp specialization) or "sm80" (mma.sync); calls whose strides break TMA's
    rules take "sm80" too."""
    return NATIVE.module.fwd_kernel(int(index), int(head_dim))


def fwd_tiles() -> dict:
    """The forward's tile of each head dim (csrc/fwd_tiles.h): {head_dim: {block_m, block_n, warps,
    smem_bytes}}."""
    return dict(NATIVE.module.fwd_tiles())


def _strides(t: torch.Tensor) -> tuple:
    """t's strides but the last, 0 where the size is 1 (any stride torch gives there is never used)."""
    return tuple(s if n > 1 else 0 for n, s in zip(t.shape[:-1], t.stride()[:-1]))


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t as cp.async reads it: a 16-byte aligned start and strides; else a contiguous copy (a fresh
    allocation is aligned, and head_dim is a multiple of 32)."""
    mult = _ALIGN // t.element_size()
    if t.data_ptr() % _ALIGN or t.stride(-1) != 1 or any(s % mult for s in _strides(t)):
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _launch(q, k, v, out, lse, cu_q, cu_k, batch, seqlen_q, seqlen_k, total_q, scale, causal, left, right, softcap,
            diagonal, batch_strides: bool) -> None:  # fmt: skip
    q, k, v = (_aligned(t) for t in (q, k, v))
    sq, sk, sv = (_strides(t) if batch_strides else (0, *_strides(t)) for t in (q, k, v))
    index = q.device.index
    NATIVE.module.attention_fwd(
        q.data_ptr(), *sq, k.data_ptr(), *sk, v.data_ptr(), *sv, out.data_ptr(), lse.data_ptr(),
        0 if cu_q is None else cu_q.data_ptr(), 0 if cu_k is None else cu_k.data_ptr(),
        batch, seqlen_q, seqlen_k, total_q, q.shape[-2], k.shape[-2], q.shape[-1],
        float(scale), bool(causal), int(left), int(right), float(softcap), int(diagonal), dtypes.code(q.dtype),
        index, current_stream(index),
    )  # fmt: skip


def attention_fwd(q, k, v, scale: float, causal: bool, left: int, right: int, softcap: float, diagonal: int):
    """The Triton level's contract (triton/attention.py attention_fwd): q [B, Sq, Hq, D], k and v
    [B, Sk, Hkv, D] with stride(-1) == 1 and any other strides, one dtype (fp16, bf16). Returns out
    [B, Sq, Hq, D] contiguous in q's dtype and lse fp32 [B, Hq, Sq], natural log; rows that see no
    key: out 0, lse -inf."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k = k.shape[1]
    out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if seqlen_k == 0:  # no key at all: every row sees nothing
        return out.zero_(), lse.fill_(float("-inf"))
    _launch(q, k, v, out, lse, None, None, batch, seqlen_q, seqlen_k, 0, scale, causal, left, right, softcap, diagonal,
            batch_strides=True)  # fmt: skip
    return out, lse


def attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                         scale: float, causal: bool, left: int, right: int, softcap: float):  # fmt: skip
    """The Triton level's varlen contract: q [total_q, Hq, D], k and v [total_k, Hkv, D], int32
    offsets cu_seqlens_* [batch + 1] on q's device (checked by the caller), each sequence with its
    own bottom-right diagonal len_k - len_q. Returns out [total_q, Hq, D] contiguous and lse fp32
    [Hq, total_q]; a sequence with no key (or rows that see none): out 0, lse -inf."""
    total_q, heads_q, head_dim = q.shape
    batch = cu_seqlens_q.numel() - 1
    out = torch.empty((total_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if k.shape[0] == 0 or max_seqlen_k == 0:  # no key at all: every row sees nothing
        return out.zero_(), lse.fill_(float("-inf"))
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    _launch(q, k, v, out, lse, cu_q, cu_k, batch, max_seqlen_q, max_seqlen_k, total_q, scale, causal, left, right,
            softcap, 0, batch_strides=False)  # fmt: skip
    return out, lse


def _backward_level():
    """The module whose backward serves this level's forward: Triton's kernels, or the reference
    formula without triton (the reference's backward reads the same saved out and lse)."""
    if triton_importable():
        from .triton import attention as level
    else:
        from . import reference as level
    return level


_bwd_problems: dict = {}


def _bwd_problem(q) -> Optional[str]:
    """None when the CUDA backward serves q's device and head dim (csrc/bwd_tiles.h: some rows need
    more shared memory than sm_86 / sm_89 give a CTA), else why not; cached."""
    key = (q.device.index, q.shape[-1])
    if key not in _bwd_problems:
        fn = getattr(NATIVE.module, "bwd_device_problem", None) if NATIVE.loaded else None
        _bwd_problems[key] = ("the native module has no backward" if fn is None else
                              fn(int(key[0]), int(key[1])) or None)  # fmt: skip
    return _bwd_problems[key]


def _deterministic(deterministic: Optional[bool]) -> bool:
    """The dq path: deterministic=True runs the dq kernel (no atomics, bit-identical run to run),
    False the fp32 atomics (faster; the Hopper kernel on sm_90 at head dims 64 / 128). None (a
    direct call without it): torch.use_deterministic_algorithms decides. flash_attn passes its flag."""
    return torch.are_deterministic_algorithms_enabled() if deterministic is None else bool(deterministic)


def _may_split_groups(q, k, batch: int, seqlen_k: int) -> bool:
    """Whether the Hopper backward may split a GQA group's heads over CTAs and so needs its fp32
    scratch (csrc/hopper_bwd_launch.cuh decides, and splits only with the scratch given): on sm_90,
    when a CTA a group (128-key blocks x batch x heads_kv) leaves fewer than 8 CTAs an SM. Without
    the scratch it runs unsplit: a wrong answer here costs memory or speed, never correctness."""
    heads_q, heads_kv = q.shape[-2], k.shape[-2]
    if heads_q == heads_kv or q.shape[-1] not in (64, 128):
        return False
    props = torch.cuda.get_device_properties(q.device)
    if props.major != 9:
        return False
    return -(-seqlen_k // _HOPPER_BWD_BLOCK_N) * batch * heads_kv < 8 * props.multi_processor_count


def _launch_bwd(do, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, batch, seqlen_q, seqlen_k, total_q, total_k, scale,
                causal, left, right, softcap, diagonal, deterministic, batch_strides: bool) -> None:  # fmt: skip
    q, k, v, do = (_aligned(t) for t in (q, k, v, do))
    out, lse = out.contiguous(), lse.contiguous()
    sq, sk, sv, sd = (_strides(t) if batch_strides else (0, *_strides(t)) for t in (q, k, v, do))
    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    dq_accum = None if deterministic else torch.empty(dq.shape, dtype=torch.float32, device=q.device)
    dkv_accum = (torch.empty(2 * dk.numel(), dtype=torch.float32, device=q.device)
                 if not deterministic and _may_split_groups(q, k, batch, seqlen_k) else None)  # fmt: skip
    index = q.device.index
    NATIVE.module.attention_bwd(
        q.data_ptr(), *sq, k.data_ptr(), *sk, v.data_ptr(), *sv, out.data_ptr(), do.data_ptr(), *sd,
        lse.data_ptr(), delta.data_ptr(), 0 if dq_accum is None else dq_accum.data_ptr(),
        0 if dkv_accum is None else dkv_accum.data_ptr(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        0 if cu_q is None else cu_q.data_ptr(), 0 if cu_k is None else cu_k.data_ptr(),
        batch, seqlen_q, seqlen_k, total_q, total_k, q.shape[-2], k.shape[-2], q.shape[-1],
        float(scale), bool(causal), int(left), int(right), float(softcap), int(diagonal), dtypes.code(q.dtype),
        index, current_stream(index),
    )  # fmt: skip


def attention_bwd(do, q, k, v, out, lse, scale, causal, left, right, softcap, diagonal,
                  deterministic: Optional[bool] = None):  # fmt: skip
    """(dq, dk, dv) of the CUDA forward (csrc/bwd*.cu), the Triton level's contract
    (triton/attention.py attention_bwd): dq like q, dk and dv like k, contiguous, in q's dtype; dk,
    dv summed over a GQA group; rows that see no key contribute nothing. Where the device lacks the
    shared memory a head dim's kernels need, the Triton level's backward serves the call."""
    if _bwd_problem(q) is not None:
        return _backward_level().attention_bwd(do, q, k, v, out, lse, scale, causal, left, right, softcap, diagonal)
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    dq = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    dk = torch.empty((batch, seqlen_k, heads_kv, head_dim), dtype=q.dtype, device=q.device)
    dv = torch.empty_like(dk)
    if dq.numel() == 0 or dk.numel() == 0:  # no query row or no key: nothing flows anywhere
        return dq.zero_(), dk.zero_(), dv.zero_()
    _launch_bwd(do, q, k, v, out, lse, dq, dk, dv, None, None, batch, seqlen_q, seqlen_k, 0, 0, scale, causal, left,
                right, softcap, diagonal, _deterministic(deterministic), batch_strides=True)  # fmt: skip
    return dq, dk, dv


def attention_varlen_bwd(do, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                         scale: float, causal: bool, left: int, right: int, softcap: float,
                         deterministic: Optional[bool] = None):  # fmt: skip
    """(dq, dk, dv) of the CUDA varlen forward: dq [total_q, Hq, D], dk, dv [total_k, Hkv, D]
    contiguous; keys no row sees (and sequences without queries) get 0."""
    if _bwd_problem(q) is not None:
        return _backward_level().attention_varlen_bwd(do, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                      max_seqlen_k, scale, causal, left, right, softcap)  # fmt: skip
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv = k.shape[0], k.shape[1]
    batch = cu_seqlens_q.numel() - 1
    dq = torch.empty((total_q, heads_q, head_dim), dtype=q.dtype, device=q.device)
    dk = torch.empty((total_k, heads_kv, head_dim), dtype=q.dtype, device=q.device)
    dv = torch.empty_like(dk)
    if min(batch, total_q, total_k, max_seqlen_q, max_seqlen_k) <= 0:  # no query row or no key
        return dq.zero_(), dk.zero_(), dv.zero_()
    cu_q, cu_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
    _launch_bwd(do, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, batch, max_seqlen_q, max_seqlen_k, total_q, total_k,
                scale, causal, left, right, softcap, 0, _deterministic(deterministic), batch_strides=False)  # fmt: skip
    return dq, dk, dv
