"""The cuda level: the native kernels of `kp_fused_mlp._C`, called with raw pointers (no libtorch)."""
from __future__ import annotations

import functools
from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.registry import current_stream

from .glu import grad_outputs

NATIVE = load_native("kp_fused_mlp")


def supports(forced: bool, device_type: str, device_index, dtype) -> Optional[str]:
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index)


def glu_fwd(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    rows, cols = gate.shape
    y = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.glu_fwd(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), y.data_ptr(), rows, cols,
                              ACT_CODES[activation], dtypes.code(gate.dtype), index, current_stream(index))  # fmt: skip
    return y


def glu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", packed: bool = False):
    """(dgate, dup); packed: (dgate_up, None), both halves written into one [rows, 2 * cols] tensor."""
    rows, cols = gate.shape
    dgate, dup, grads = grad_outputs(gate, up, packed)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.glu_bwd(dy.data_ptr(), dy.stride(0), gate.data_ptr(), gate.stride(0), up.data_ptr(),
                              up.stride(0), dgate.data_ptr(), dup.data_ptr(), dgate.stride(0), rows, cols,
                              ACT_CODES[activation], dtypes.code(gate.dtype), index, current_stream(index))  # fmt: skip
    return grads


# ---------------------------------------------------------------------------------------------
# linear_act: the sm90a GEMM with a bias + activation epilogue (csrc/linear_act.cu)

_GEMM_DTYPES = (torch.float16, torch.bfloat16)
# TMA (the GEMM's loads and stores) needs 16-byte aligned addresses and row strides.
_TMA_ALIGN = 16


def tma_size_problem(n: int, k: int, itemsize: int) -> Optional[str]:
    """Why TMA cannot take rows of K (x, weight) and N (y) elements, naming the size to pad to."""
    mult = _TMA_ALIGN // itemsize
    for what, v in (("in_features K", k), ("out_features N", n)):
        if v % mult:
            return (f"{what}={v} is not a multiple of {mult}: TMA needs rows of a multiple of 16 bytes "
                    f"({mult} {8 * itemsize}-bit elements); pad it to {-(-v // mult) * mult}")  # fmt: skip
    return None


def _gemm_call_problem(device_type: str, dtype, grad: bool, what: str, op: str, grad_hint: str) -> Optional[str]:
    """The first answers of a GEMM op's cuda level: a CUDA device, a 16-bit dtype, no gradient."""
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if dtype not in _GEMM_DTYPES:
        return f"{what} takes float16 and bfloat16, not {dtype}"
    if grad:
        return f"the cuda level of {op} has no backward yet (inference only); {grad_hint}"
    return None


def decode_k_problem(k: int, itemsize: int) -> Optional[str]:
    """Why the decode kernel cannot take rows of K elements (it reads 16-byte packets), naming the
    size to pad to. It takes any N."""
    mult = 16 // itemsize
    if k % mult:
        return (f"in_features K={k} is not a multiple of {mult}: the decode kernel reads rows in 16-byte packets "
                f"({mult} {8 * itemsize}-bit elements); pad it to {-(-k // mult) * mult}")  # fmt: skip
    return None


def linear_act_supports(forced: bool, device_type: str, device_index, dtype, grad: bool, n: int, k: int,
                        decode: bool = False):  # fmt: skip
    """`decode`: the call has at most DECODE_MAX_M rows (the decode kernel serves it, sm80+);
    else, and for every call that needs gradients, kp's sm90a GEMM: its training kernels' needs are
    the forward's (the backward GEMMs read W, dP and x in place, rows of K and N elements)."""
    why = _gemm_call_problem(device_type, dtype, False, "the cuda GEMM", "linear_act", "")
    if why:
        return why
    decode = decode and not grad  # the decode kernel has no backward
    why = decode_k_problem(k, dtype.itemsize) if decode else tma_size_problem(n, k, dtype.itemsize)
    if why:
        return why
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index) or (_decode_device_problem if decode else _gemm_device_problem)(
        device_index
    )


_gemm_problems: dict = {}
_decode_problems: dict = {}


def _gemm_device_problem(index: int) -> Optional[str]:
    if index not in _gemm_problems:
        _gemm_problems[index] = NATIVE.module.gemm_device_problem(int(index)) or None
    return _gemm_problems[index]


def _decode_device_problem(index: int) -> Optional[str]:
    if index not in _decode_problems:
        _decode_problems[index] = NATIVE.module.decode_device_problem(int(index)) or None
    return _decode_problems[index]


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t ([rows, cols], unit column stride) as TMA takes it: 16-byte aligned start and row stride;
    else a contiguous copy (a fresh allocation is aligned)."""
    mult = _TMA_ALIGN // t.element_size()
    rows, cols = t.shape
    if t.data_ptr() % _TMA_ALIGN or t.stride(-1) != 1 or (rows > 1 and (t.stride(0) % mult or t.stride(0) < cols)):
        return t.clone(memory_format=torch.contiguous_format)
    return t


ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}  # kp::gemm::Act


def _ld(t: torch.Tensor) -> int:
    """The row stride the native side reads: a single row passes its length."""
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def _operands(x, weight, bias):
    n = weight.shape[0]
    if bias is not None:
        bias = _tma_ready(bias.view(1, n)).view(n)
    return _tma_ready(x), _tma_ready(weight), bias


def linear_act_fwd(x: torch.Tensor, weight: torch.Tensor, bias, activation: str, config: int = -1,
                   decode_splits: Optional[int] = None) -> torch.Tensor:  # fmt: skip
    """x [M, K] (unit column stride), weight [N, K], bias [N] or None, all one 16-bit dtype;
    M, N, K > 0. Returns y [M, N], contiguous.

    `config`: -1 gemm_plan's pick (the decode kernel for M <= DECODE_MAX_M), else the index of a
    gemm_configs() name ("decode_gemv": the decode kernel at any M). `decode_splits`: the decode
    kernel's K splits (None: its table's), for sweeps and tests."""
    (m, k), n = x.shape, weight.shape[0]
    x, weight, bias = _operands(x, weight, bias)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = x.device.index
    decode = config == decode_config() or (config == -1 and m <= DECODE_MAX_M)
    ws, splits = _decode_workspace(m, n, k, False, x, decode_splits) if decode else (None, 0)
    NATIVE.module.linear_act(
        x.data_ptr(), _ld(x), weight.data_ptr(), _ld(weight), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
        m, n, k, dtypes.code(x.dtype), ACT_CODES[activation], config, index, current_stream(index),
        0 if ws is None else ws.data_ptr(), splits,
    )  # fmt: skip
    return y


# The activations whose backward reads Z = x W^T + b (saved by the training forward's epilogue);
# relu's reads y (relu'(z) = [y > 0]) and none's nothing: those run the inference kernels.
SAVES_PRE = ("gelu", "gelu_tanh", "silu")


def linear_act_train(x: torch.Tensor, weight: torch.Tensor, bias, activation: str, config: int = -1):
    """The forward of a call that needs gradients: (y, Z [M, N] contiguous, or None where the
    backward does not read it). config: a training row (gemm_bwd_configs()) or -1."""
    if activation not in SAVES_PRE:
        return linear_act_fwd(x, weight, bias, activation, config), None
    (m, k), n = x.shape, weight.shape[0]
    x, weight, bias = _operands(x, weight, bias)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    z = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = x.device.index
    NATIVE.module.linear_act_save(
        x.data_ptr(), _ld(x), weight.data_ptr(), _ld(weight), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
        z.data_ptr(), m, n, k, dtypes.code(x.dtype), ACT_CODES[activation], config, index, current_stream(index),
    )  # fmt: skip
    return y, z


def linear_act_bwd(dy, x, weight, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool, config: int = -1):
    """(dx [M, K], dweight [N, K], dbias [N]), each None where not needed. dy [M, N] rows; x [M, K]
    (read when need_dw), weight [N, K] (read when need_dx); pre: Z, or y for relu, or nothing for
    none. dP = dy act'(pre) (one elementwise pass; dy itself for none), then two GEMMs that read
    dP, W and x in place: dx = dP W, dweight = dP^T x (fp32 accumulation over M, one rounding)."""
    m, n = dy.shape
    k = weight.shape[1] if need_dx else x.shape[1] if need_dw else 0  # only dx and dw have K columns
    opts = dict(dtype=dy.dtype, device=dy.device)
    if m == 0 or n == 0 or (k == 0 and not need_db):  # nothing to accumulate
        return (dy.new_zeros((m, k)) if need_dx else None, dy.new_zeros((n, k)) if need_dw else None,
                dy.new_zeros((n,)) if need_db else None)  # fmt: skip
    mod, index, code = NATIVE.module, dy.device.index, dtypes.code(dy.dtype)
    stream = current_stream(index)
    dy = _tma_ready(dy)
    db = torch.empty((n,), **opts) if need_db else None
    partial = torch.empty((mod.dpre_partial_rows(m, n, index), n), dtype=torch.float32, device=dy.device) if need_db else None
    if activation == "none":
        dp = dy
        if need_db:
            mod.linear_act_dpre(dy.data_ptr(), _ld(dy), 0, 0, 0, partial.data_ptr(), db.data_ptr(), m, n, code,
                                ACT_CODES[activation], index, stream)  # fmt: skip
    else:
        pre = _tma_ready(pre)
        dp = torch.empty((m, n), **opts) if need_dx or need_dw else None  # the bias gradient alone: no dP
        mod.linear_act_dpre(dy.data_ptr(), _ld(dy), pre.data_ptr(), _ld(pre), 0 if dp is None else dp.data_ptr(),
                            0 if partial is None else partial.data_ptr(), 0 if db is None else db.data_ptr(), m, n,
                            code, ACT_CODES[activation], index, stream)  # fmt: skip
    dx = dw = None
    if k == 0:  # x [M, 0]: the bias gradient alone is nonzero
        return dy.new_zeros((m, 0)) if need_dx else None, dy.new_zeros((n, 0)) if need_dw else None, db
    if need_dx:
        weight = _tma_ready(weight)
        dx = torch.empty((m, k), **opts)
        mod.linear_act_dgrad(dp.data_ptr(), _ld(dp), weight.data_ptr(), _ld(weight), dx.data_ptr(), m, n, k, code,
                             config, index, stream)  # fmt: skip
    if need_dw:
        x = _tma_ready(x)
        dw = torch.empty((n, k), **opts)
        mod.linear_act_wgrad(dp.data_ptr(), _ld(dp), x.data_ptr(), _ld(x), dw.data_ptr(), m, n, k, code, config,
                             index, stream)  # fmt: skip
    return dx, dw, db


def gemm_plan(m: int, n: int, k: int) -> str:
    """The name of the config a call of this shape gets: a GEMM table row (csrc/gemm_table.h), or
    "decode_gemv" (csrc/decode_table.h) for M <= DECODE_MAX_M."""
    return NATIVE.module.gemm_configs()[NATIVE.module.gemm_plan(m, n, k)]


def gemm_bwd_plan(m: int) -> str:
    """The training row (csrc/gemm_bwd_table.h) of a GEMM with m output rows: the training forward
    and dx at m = tokens, dweight at m = out_features."""
    return NATIVE.module.gemm_configs()[NATIVE.module.gemm_bwd_plan(m)]


RASTERS = {"row": -1, "heuristic": 0, "along_m": 1, "along_n": 2}  # kp::gemm::Sm90Raster codes; "row": the table's


class scheduler_override:
    """Every GEMM of this module, from now on: the persistent tile scheduler's max_swizzle (1, 2, 4
    or 8 tiles walked together; 0: each table row's own) and raster order ("along_m", "along_n",
    "heuristic"; "row": each row's own). Run-time arguments of the kernels, not new kernels: for
    sweeps (tools/gemm_scheduler_sweep.py). As a context manager it restores the previous setting
    on exit:

        with _cuda.scheduler_override(4, "along_m"):
            ...
    """

    def __init__(self, max_swizzle: int = 0, raster: str = "row"):
        if raster not in RASTERS:
            raise ValueError(f"scheduler_override: raster must be one of {', '.join(RASTERS)}, got {raster!r}")
        if not NATIVE.loaded:
            raise RuntimeError(f"scheduler_override: kp_fused_mlp's CUDA level is not loaded ({NATIVE.error})")
        self.previous = tuple(NATIVE.module.gemm_scheduler())
        NATIVE.module.gemm_scheduler_override(int(max_swizzle), RASTERS[raster])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        NATIVE.module.gemm_scheduler_override(*self.previous)
        return False


def scheduler() -> tuple:
    """(max_swizzle, raster) as overridden now: (0, "row") when each table row's own apply."""
    swizzle, raster = NATIVE.module.gemm_scheduler()
    return swizzle, {v: k for k, v in RASTERS.items()}[raster]


# ---------------------------------------------------------------------------------------------
# The decode kernels (csrc/decode_gemv.cu): linear_act and gated_linear at a few tokens, streaming
# the weight once (mma.sync over weight rows; sm80+), K split where the row blocks leave SMs idle.

DECODE_MAX_M = NATIVE.module.decode_max_m() if NATIVE.loaded else 0
"""The most rows (tokens) the decode kernel serves by default (the cut in csrc/decode_table.h)."""


@functools.lru_cache(maxsize=None)
def decode_config() -> int:
    """linear_act's `config` index of the decode kernel."""
    return NATIVE.module.gemm_configs().index("decode_gemv")


@functools.lru_cache(maxsize=4096)
def _plan(m: int, n_out: int, k: int, gated: bool, dtype_code: int, splits: int, index: int) -> dict:
    return NATIVE.module.decode_plan(m, n_out, k, gated, dtype_code, splits, index)


def decode_plan(m: int, n_out: int, k: int, *, gated: bool = False, dtype=torch.bfloat16, splits: int = 0,
                device=None) -> dict:  # fmt: skip
    """The decode kernel's plan of a call (row, splits, split_steps, grid, ctas_per_sm,
    workspace_bytes). n_out: N (gated: I); splits > 0: forced, as `decode_splits` does."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    return dict(_plan(int(m), int(n_out), int(k), bool(gated), dtypes.code(dtype), int(splits), index))


def _decode_workspace(m: int, n_out: int, k: int, gated: bool, x: torch.Tensor, splits: Optional[int]):
    """(fp32 workspace or None, K splits) of a decode call: the plan's, or `splits` forced."""
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool) or splits < 1):
        raise ValueError(f"decode_splits must be a positive int or None, got {splits!r}")
    plan = _plan(m, n_out, k, gated, dtypes.code(x.dtype), splits or 0, x.device.index)
    if plan["splits"] == 1:
        return None, 1
    return torch.empty(plan["workspace_bytes"] // 4, dtype=torch.float32, device=x.device), plan["splits"]


def gated_linear_supports(forced: bool, device_type: str, device_index, dtype, grad: bool, inter: int, hidden: int,
                          decode: bool = False):  # fmt: skip
    """gated_linear's cuda level: the decode kernel, for inference calls of at most DECODE_MAX_M
    rows (the CUDA gated GEMM for more rows is not written yet)."""
    why = _gemm_call_problem(device_type, dtype, grad, "the cuda level of gated_linear", "gated_linear",
                             "backend='auto' runs the triton level on a GPU, 'reference' anywhere")  # fmt: skip
    if why:
        return why
    if not NATIVE.loaded:
        return NATIVE.error
    if not decode:
        return (f"M > {DECODE_MAX_M} tokens: the CUDA gated GEMM is not written yet (the cuda level of "
                f"gated_linear serves inference calls of at most {DECODE_MAX_M} tokens, its decode kernel)")  # fmt: skip
    why = decode_k_problem(hidden, dtype.itemsize)
    if why:
        return why.replace("in_features K", "hidden")
    return NATIVE.device_problem(device_index) or _decode_device_problem(device_index)


def gated_linear_fwd(x: torch.Tensor, w: torch.Tensor, bias, activation: str, save_pre: bool,
                     decode_splits: Optional[int] = None):  # fmt: skip
    """The decode kernel: x [M, H] (unit column stride), w [2I, H], bias [2I] or None, one 16-bit
    dtype; M, I, H > 0. Returns (h [M, I] contiguous, None). Any M runs (32-token chunks past
    DECODE_MAX_M, each streaming the weight again: supports() keeps auto's calls at the cut)."""
    if save_pre:
        raise ValueError("kp_fused_mlp: the cuda level of gated_linear has no backward (save_pre=True)")
    (m, k), inter = x.shape, w.shape[0] // 2
    x, w = _tma_ready(x), _tma_ready(w)
    if bias is not None:
        bias = bias.contiguous()
    h = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    ws, splits = _decode_workspace(m, inter, k, True, x, decode_splits)
    index = x.device.index
    NATIVE.module.gated_decode(
        x.data_ptr(), x.stride(0) if m > 1 else k, w.data_ptr(), w.stride(0), 0 if bias is None else bias.data_ptr(),
        h.data_ptr(), m, inter, k, dtypes.code(x.dtype), ACT_CODES[activation], 0 if ws is None else ws.data_ptr(),
        splits, index, current_stream(index),
    )  # fmt: skip
    return h, None
