"""The cuda level: the native kernels of `kp_fused_mlp._C`, called with raw pointers (no libtorch)."""
from __future__ import annotations

import functools
from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.op import triton_importable
from kp_core.registry import current_stream
from torch.utils.weak import WeakIdKeyDictionary

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


def tma_rows_problem(sizes: tuple, itemsize: int) -> Optional[str]:
    """Why TMA cannot take rows of these sizes ((name, elements) pairs), naming the size to pad to."""
    mult = _TMA_ALIGN // itemsize
    for what, v in sizes:
        if v % mult:
            return (f"{what}={v} is not a multiple of {mult}: TMA needs rows of a multiple of 16 bytes "
                    f"({mult} {8 * itemsize}-bit elements); pad it to {-(-v // mult) * mult}")  # fmt: skip
    return None


def tma_size_problem(n: int, k: int, itemsize: int) -> Optional[str]:
    """Why TMA cannot take rows of K (x, weight) and N (y) elements, naming the size to pad to."""
    return tma_rows_problem((("in_features K", k), ("out_features N", n)), itemsize)


def _gemm_call_problem(device_type: str, dtype, what: str) -> Optional[str]:
    """The first answers of a GEMM op's cuda level: a CUDA device, a 16-bit dtype."""
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if dtype not in _GEMM_DTYPES:
        return f"{what} takes float16 and bfloat16, not {dtype}"
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
    """`decode`: the decode kernel serves the call (linear.linear_decodes: decode_serves_linear's cut; sm80+);
    else, and for every call that needs gradients, kp's sm90a GEMM: its training kernels' needs are
    the forward's (the backward GEMMs read W, dP and x in place, rows of K and N elements)."""
    why = _gemm_call_problem(device_type, dtype, "the cuda GEMM")
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
                   decode_splits: Optional[int] = None, decode_row: Optional[str] = None) -> torch.Tensor:  # fmt: skip
    """x [M, K] (unit column stride), weight [N, K], bias [N] or None, all one 16-bit dtype;
    M, N, K > 0. Returns y [M, N], contiguous.

    `config`: -1 gemm_plan's pick (the decode kernels where decode_serves_linear says so), else the
    index of a gemm_configs() name ("decode_gemv": the decode kernels at any M). `decode_splits`:
    the decode kernels' K splits (None: its table's); `decode_row`: a decode_configs() name (None:
    the table's by M; forcing one implies the decode config), for sweeps and tests."""
    (m, k), n = x.shape, weight.shape[0]
    x, weight, bias = _operands(x, weight, bias)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = x.device.index
    if decode_row is not None and config == -1:
        config = decode_config()
    decode = config == decode_config() or (config == -1 and decode_serves_linear(m, n, k))
    row = _decode_row_index(decode_row)
    ws, splits = _decode_workspace(m, n, k, False, x, decode_splits, row) if decode else (None, 0)
    NATIVE.module.linear_act(
        x.data_ptr(), _ld(x), weight.data_ptr(), _ld(weight), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
        m, n, k, dtypes.code(x.dtype), ACT_CODES[activation], config, index, current_stream(index),
        0 if ws is None else ws.data_ptr(), splits, row,
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
    "decode_gemv" (csrc/decode_table.h) where decode_serves_linear(m, n, k)."""
    return NATIVE.module.gemm_configs()[NATIVE.module.gemm_plan(m, n, k)]


TRAIN_JOBS = ("save", "dx", "dw")  # gemm_bwd_table.h's TrainJob codes, in order


def gemm_bwd_plan(m: int, n: int = 0, k: int = 0, job: str = "save") -> str:
    """The training row (csrc/gemm_bwd_table.h) of a GEMM with an m x n output reducing over k: the
    saving forward (tokens x out_features, k = in_features), "dx" (tokens x in_features, k =
    out_features) or "dw" (out_features x in_features, k = tokens; its own rule, by m). n or k 0:
    unknown, among the rows for any width or depth."""
    if job not in TRAIN_JOBS:
        raise ValueError(f"job must be one of {', '.join(TRAIN_JOBS)}, got {job!r}")
    return NATIVE.module.gemm_configs()[NATIVE.module.gemm_bwd_plan(m, n, k, TRAIN_JOBS.index(job))]


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
"""The most rows (tokens) a decode table row serves (decode_row forced past it runs x in chunks);
the cuts of auto are decode_serves_linear (linear_act, by shape) and DECODE_GATED_MAX_M."""

DECODE_GATED_MAX_M = NATIVE.module.decode_gated_max_m() if NATIVE.loaded else 0
"""gated_linear's decode cut (csrc/decode_table.h): its cuda level runs the decode kernels up to
this many rows, the gated GEMM above (on every shape: the gated GEMM lost 20% at 9-16 tokens)."""


_DECODE_CUTS = tuple(NATIVE.module.decode_cuts()) if NATIVE.loaded else ()


def decode_serves_linear(m: int, n: int, k: int) -> bool:
    """Whether linear_act's cuda level runs [m, k] x [n, k]^T on the decode kernels rather than the
    GEMM (csrc/decode_table.h's DecodeCut: up to 16 tokens where N <= K, 8 where N > K). The native
    rule (gemm_plan's) in plain Python, so that torch.compile traces it; tests/test_decode.py checks
    that both agree."""
    for max_n_per_k_pct, max_m in _DECODE_CUTS:
        if n * 100 <= max_n_per_k_pct * k:
            return m <= max_m
    return False


@functools.lru_cache(maxsize=None)
def decode_configs() -> tuple:
    """The decode table's row names (csrc/decode_table.h), in table order."""
    return tuple(NATIVE.module.decode_configs())


def _decode_row_index(name: Optional[str]) -> int:
    """-1 for None (the table's row by M), else the index of decode_configs() name `name`."""
    if name is None:
        return -1
    if name not in decode_configs():
        raise ValueError(f"decode_row must be one of {', '.join(decode_configs())} or None, got {name!r}")
    return decode_configs().index(name)


@functools.lru_cache(maxsize=None)
def decode_config() -> int:
    """linear_act's `config` index of the decode kernel."""
    return NATIVE.module.gemm_configs().index("decode_gemv")


@functools.lru_cache(maxsize=4096)
def _plan(m: int, n_out: int, k: int, gated: bool, dtype_code: int, splits: int, index: int, row: int = -1) -> dict:
    return NATIVE.module.decode_plan(m, n_out, k, gated, dtype_code, splits, index, row)


def decode_plan(m: int, n_out: int, k: int, *, gated: bool = False, dtype=torch.bfloat16, splits: int = 0,
                row: Optional[str] = None, device=None) -> dict:  # fmt: skip
    """The decode kernels' plan of a call (row, splits, split_steps, step_k: the columns of a
    split's k-steps, cluster: > 1 where the splits sum over a thread-block cluster (sm90, at most 8
    splits; no workspace), grid, ctas_per_sm, workspace_bytes). n_out: N (gated: I); splits > 0:
    forced, as `decode_splits` does; row: a decode_configs() name, forced, as `decode_row` does.
    The tma rows (sm90; the default where a call has 4 16-row tiles a CTA, csrc/decode_table.h) need
    no workspace: a persistent grid (grid[0] CTAs) shares the weight's tiles; forced on fewer tiles
    they split K over a cluster of `splits` CTAs (`cluster` == `splits`)."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    return dict(_plan(int(m), int(n_out), int(k), bool(gated), dtypes.code(dtype), int(splits), index,
                      _decode_row_index(row)))  # fmt: skip


def _check_decode_splits(splits) -> None:
    if splits is not None and (not isinstance(splits, int) or isinstance(splits, bool) or splits < 1):
        raise ValueError(f"decode_splits must be a positive int or None, got {splits!r}")


def _decode_workspace(m: int, n_out: int, k: int, gated: bool, x: torch.Tensor, splits: Optional[int],
                      row: int = -1):  # fmt: skip
    """(fp32 workspace or None, K splits) of a decode call: the plan's, or `splits` forced."""
    _check_decode_splits(splits)
    plan = _plan(m, n_out, k, gated, dtypes.code(x.dtype), splits or 0, x.device.index, row)
    if plan["workspace_bytes"] == 0:  # one split, or the splits sum over a cluster (sm90)
        return None, plan["splits"]
    return torch.empty(plan["workspace_bytes"] // 4, dtype=torch.float32, device=x.device), plan["splits"]


# ---------------------------------------------------------------------------------------------
# gated_linear: the sm90a GEMM against an interleaved copy of [Wg; Wu], the gated activation in its
# epilogue (csrc/gated.cu; the layout and why: shared_cuda/include/kp/gemm/sm90_gated.h)

GATED_BLOCK = 8  # kp::gemm::kGatedBlock: rows of Wg, then of Wu, in each 16-row block of the copy


def interleave_gate_up(w: torch.Tensor) -> torch.Tensor:
    """[Wg; Wu] [2I, K] -> Wi [2I, K] contiguous: Wi[16b + r] = Wg[8b + r], Wi[16b + 8 + r] = Wu[8b + r]
    (r < 8). A 64 x N wgmma then leaves gate column c and up column c in one thread's registers."""
    two_i, k = w.shape
    blocks = two_i // (2 * GATED_BLOCK)
    gate, up = w[: two_i // 2].reshape(blocks, GATED_BLOCK, k), w[two_i // 2 :].reshape(blocks, GATED_BLOCK, k)
    return torch.stack((gate, up), dim=1).reshape(two_i, k)


# The interleaved copy of each weight, built on first use and kept while the weight lives: one extra
# weight-sized allocation per gate/up weight (Llama-3-8B: 235 MB a layer in bf16). Keyed by the
# tensor object (weakly: the copy goes with the weight) and validated by everything that changes
# what the copy must hold: the address, the version counter (any in-place update through the tensor
# or a view or detach() of it: optimizer steps, load_state_dict, copy_), shape, strides, dtype,
# device. Not seen: writes that bypass the version counter (through `.data`, or through another
# tensor on the same memory, e.g. from DLPack or C++), and, inside a replayed CUDA graph, any update
# (the graph reads the copy it captured); clear_gated_weight_cache() drops every copy after such writes.
_interleaved = WeakIdKeyDictionary()
_interleave_builds = 0


def gated_weight_builds() -> int:
    """How many interleaved copies were built (tests: a cache hit builds none)."""
    return _interleave_builds


def clear_gated_weight_cache() -> None:
    _interleaved.clear()


def interleaved_weight(w: torch.Tensor) -> torch.Tensor:
    global _interleave_builds
    # An inference tensor has no version counter: its in-place updates cannot be seen, so it is not cached.
    key = None if w.is_inference() else (w.data_ptr(), w._version, w.shape, w.stride(), w.dtype, w.device)
    hit = _interleaved.get(w) if key is not None else None
    if hit is not None and hit[0] == key:
        return hit[1]
    with torch.no_grad():
        wi = interleave_gate_up(w.detach())
    _interleave_builds += 1
    # Built during CUDA graph capture, the copy holds data only once the graph replays: not cached.
    if key is not None and not torch.cuda.is_current_stream_capturing():
        _interleaved[w] = (key, wi)
    return wi


def gated_linear_supports(forced: bool, device_type: str, device_index, dtype, grad: bool, inter: int, hidden: int,
                          decode: bool = False):  # fmt: skip
    """gated_linear's cuda level: the decode kernel for inference calls of at most DECODE_GATED_MAX_M
    rows (`decode`; sm80+, any I), else the gated GEMM (sm90a, I and H multiples of 8, with a gradient
    too: the forward saves the pre-activations; the backward is the Triton level's dP kernel and
    linear_act's CUDA backward GEMMs)."""
    why = _gemm_call_problem(device_type, dtype, "the cuda level of gated_linear")
    if why:
        return why
    if decode and not grad:
        why = decode_k_problem(hidden, dtype.itemsize)
        if why:
            return why.replace("in_features K", "hidden")
        if not NATIVE.loaded:
            return NATIVE.error
        return NATIVE.device_problem(device_index) or _decode_device_problem(device_index)
    why = gated_size_problem(inter, hidden, dtype.itemsize)
    if why:
        return why
    if grad and not triton_importable():
        return ("the cuda level's backward computes dP with the Triton level's elementwise kernel, and triton "
                "is not installed")  # fmt: skip
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index) or _gemm_device_problem(device_index)


def gated_size_problem(inter: int, hidden: int, itemsize: int) -> Optional[str]:
    """Why the gated GEMM cannot take these sizes (TMA's 16-byte rows; whole 8-row blocks of Wg and
    Wu), naming the size to pad to; kp::gemm::gated_size_problem in C++."""
    return tma_rows_problem((("hidden K", hidden), ("intermediate I", inter)), itemsize)


def gated_linear_fwd(x: torch.Tensor, w: torch.Tensor, bias, activation: str, save_pre: bool, config: int = -1,
                     swizzle: int = 0, raster: int = -1, decode_splits: Optional[int] = None,
                     decode_row: Optional[str] = None):  # fmt: skip
    """x [M, K] (unit column stride), w = [Wg; Wu] [2I, K], bias [2I] or None, one 16-bit dtype.
    Returns (h [M, I] contiguous, P = [gate_pre | up_pre] [M, 2I] contiguous when save_pre, else None).

    Inference calls of at most DECODE_GATED_MAX_M rows (csrc/decode_table.h) run the decode
    kernels (gated_decode_fwd), as do calls
    that name `decode_splits` or `decode_row` (for sweeps and tests); the others the gated GEMM. config, swizzle, raster: the GEMM's table row, the scheduler's swizzle group and raster
    order, for sweeps (tools/gpu_check_gated.sh); the defaults are the table's."""
    (m, k), inter = x.shape, w.shape[0] // 2
    forced_decode = decode_splits is not None or decode_row is not None
    if not save_pre and config == -1 and (forced_decode or m <= DECODE_GATED_MAX_M):
        return gated_decode_fwd(x, w, bias, activation, decode_splits, decode_row)
    if forced_decode:
        raise ValueError("kp_fused_mlp: decode_splits / decode_row are the decode kernels', which save no "
                         "pre-activations and take no GEMM config")  # fmt: skip
    h = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    pre = torch.empty((m, 2 * inter), dtype=x.dtype, device=x.device) if save_pre else None
    if m == 0 or inter == 0:
        return h, pre
    x, wi = _tma_ready(x), interleaved_weight(w)
    if bias is not None:
        bias = _tma_ready(bias.view(1, 2 * inter)).view(2 * inter)
    index = x.device.index
    NATIVE.module.gated_linear_fwd(
        x.data_ptr(), x.stride(0) if m > 1 else k, wi.data_ptr(), k, 0 if bias is None else bias.data_ptr(),
        h.data_ptr(), inter, 0 if pre is None else pre.data_ptr(), 2 * inter, m, inter, k, dtypes.code(x.dtype),
        ACT_CODES[activation], config, index, current_stream(index), swizzle, raster,
    )  # fmt: skip
    return h, pre


def gated_linear_bwd(dh, x, w, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool):
    """dP = [dh up act'(gate) | dh act(gate)] [M, 2I] by the Triton level's elementwise kernel (from
    the P the cuda forward saved, in the same layout), then linear_act's CUDA backward on it with
    activation none: dx = dP W and dW = dP^T x as sm90 GEMMs reading W (the caller's [Wg; Wu], not
    the interleaved copy), dP and x in place; dbias as deterministic fp32 column sums of dP."""
    from .triton.gated import gated_pre_grad

    return linear_act_bwd(gated_pre_grad(dh, pre, activation), x, w, None, "none", need_dx, need_dw, need_db)


def _check_dgated_operands(dy, wd, pre) -> None:
    if dy.dim() != 2 or wd.dim() != 2 or pre.dim() != 2:
        raise ValueError(f"gated_down_grad: dy, wd and pre must be 2-D, got {dy.dim()}, {wd.dim()} and {pre.dim()} dims")
    (m, k), (k_w, inter) = dy.shape, wd.shape
    if k_w != k or tuple(pre.shape) != (m, 2 * inter):
        raise ValueError(
            f"gated_down_grad: dy [M, H] = {tuple(dy.shape)}, wd must be [H, I] and pre [M, 2 * I]; got wd "
            f"{tuple(wd.shape)}, pre {tuple(pre.shape)}"
        )
    if not (dy.dtype == wd.dtype == pre.dtype) or not (dy.device == wd.device == pre.device):
        raise ValueError(
            f"gated_down_grad: dy, wd and pre must share a dtype and device, got {dy.dtype} / {wd.dtype} / "
            f"{pre.dtype} on {dy.device} / {wd.device} / {pre.device}"
        )


def gated_down_grad(dy, wd, pre, activation: str, config: int = -1, swizzle: int = 0, raster: int = -1):
    """dP = [dh up act'(gate) | dh act(gate)] [M, 2I] (contiguous, P's dtype) with dh = dy [M, H] @
    wd [H, I] (the down projection's weight) and [gate | up] = P [M, 2I] as gated_linear_fwd saved
    it, in one sm90 GEMM whose epilogue never writes dh (kp/gemm/sm90_dgated.h). config, swizzle,
    raster: a row of gated_table.h's DGatedRows and the scheduler's knobs, for sweeps. The shapes are
    checked here (the native side sees pointers and sizes: a mismatch would be read out of bounds)."""
    _check_dgated_operands(dy, wd, pre)
    (m, k), inter = dy.shape, wd.shape[1]
    dpre = torch.empty((m, 2 * inter), dtype=pre.dtype, device=pre.device)
    if m == 0 or inter == 0:
        return dpre
    if k == 0:  # dh = 0
        return dpre.zero_()
    dy, wd, pre = _tma_ready(dy), _tma_ready(wd), _tma_ready(pre)
    index = dy.device.index
    NATIVE.module.gated_down_grad(
        dy.data_ptr(), _ld(dy), wd.data_ptr(), _ld(wd), pre.data_ptr(), _ld(pre), dpre.data_ptr(), 2 * inter, m,
        inter, k, dtypes.code(dy.dtype), ACT_CODES[activation], config, index, current_stream(index), swizzle, raster,
    )  # fmt: skip
    return dpre


def gated_mlp_bwd(dy, x, w, wd, h, pre, activation: str, need_dx: bool, need_dw: bool, need_db: bool,
                  need_dwd: bool, need_dbd: bool):  # fmt: skip
    """GatedMLP's backward (kp_fused_mlp.gated_mlp): (dx, dw, db, dwd, dbd), each None unless asked
    for. dP from gated_down_grad (dh never written), then linear_act's backward GEMMs on it as
    gated_linear_bwd runs them; the down projection's own gradients by torch (cuBLAS), as the
    unfused module gets them."""
    dpre = gated_down_grad(dy, wd, pre, activation) if need_dx or need_dw or need_db else None
    dx, dw, db = (linear_act_bwd(dpre, x, w, None, "none", need_dx, need_dw, need_db) if dpre is not None
                  else (None, None, None))  # fmt: skip
    dwd = torch.mm(dy.t(), h) if need_dwd else None
    dbd = dy.sum(0) if need_dbd else None
    return dx, dw, db, dwd, dbd


def gated_plan(m: int, inter: int = 0, hidden: int = 0) -> str:
    """The name of the gated table row a call of M rows, `inter` output columns and K = `hidden`
    gets (csrc/gated_table.h; inter, hidden 0: among the rows for any width or depth)."""
    return NATIVE.module.gated_configs()[NATIVE.module.gated_plan(m, inter, hidden)]


def fuses_backward(hidden: int) -> bool:
    """Whether GatedMLP's backward at this hidden size is fused (dgated_plan names a row): one native
    call, no string list (it runs once a training forward)."""
    return NATIVE.module.dgated_plan(0, hidden) >= 0


def dgated_plan(m: int, hidden: int) -> str:
    """The gated table row GatedMLP's fused backward of M tokens at this hidden size runs its
    gated-gradient GEMM on, or "" where it is not fused (csrc/gated_table.h's kDGatedMaxHidden)."""
    row = NATIVE.module.dgated_plan(m, hidden)
    return NATIVE.module.gated_configs()[row] if row >= 0 else ""


def gated_decode_fwd(x: torch.Tensor, w: torch.Tensor, bias, activation: str, decode_splits: Optional[int] = None,
                     decode_row: Optional[str] = None):  # fmt: skip
    """The decode kernel: x [M, H] (unit column stride), w [2I, H], bias [2I] or None, one 16-bit
    dtype; M, I, H > 0. Returns (h [M, I] contiguous, None). Any M runs (32-token chunks past
    DECODE_MAX_M, each streaming the weight again: supports() keeps auto's calls at the cut)."""
    (m, k), inter = x.shape, w.shape[0] // 2
    x, w = _tma_ready(x), _tma_ready(w)
    if bias is not None:
        bias = bias.contiguous()
    h = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    row = _decode_row_index(decode_row)
    ws, splits = _decode_workspace(m, inter, k, True, x, decode_splits, row)
    index = x.device.index
    NATIVE.module.gated_decode(
        x.data_ptr(), x.stride(0) if m > 1 else k, w.data_ptr(), w.stride(0), 0 if bias is None else bias.data_ptr(),
        h.data_ptr(), m, inter, k, dtypes.code(x.dtype), ACT_CODES[activation], 0 if ws is None else ws.data_ptr(),
        splits, index, current_stream(index), row,
    )  # fmt: skip
    return h, None


# ---------------------------------------------------------------------------------------------
# GatedMLP's decode forward in one persistent kernel (csrc/decode_mlp.cu): the gated tma rows, a
# grid barrier, the down projection in 128-row blocks x K splits, a second barrier, the split sums.

_BARRIER_COUNTERS: dict = {}  # (device index, stream) -> the grid barrier's 8-byte counter


def _barrier_counter(device: torch.device) -> torch.Tensor:
    """The stream's grid-barrier counter (csrc/decode_mlp.cu: never reset, so one a stream: calls on
    one stream never overlap). Under CUDA graph capture a fresh zeroed one that the graph owns (its
    memset replays with it), so a graph replayed on another stream shares nothing with eager calls."""
    if torch.cuda.is_current_stream_capturing():
        return torch.zeros(1, dtype=torch.int64, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    counter = _BARRIER_COUNTERS.get(key)
    if counter is None:
        counter = _BARRIER_COUNTERS[key] = torch.zeros(1, dtype=torch.int64, device=device)
    return counter


def gated_mlp_decode_plan(m: int, hidden: int, inter: int, dtype=torch.bfloat16, device=None,
                          decode_row: Optional[str] = None, decode_splits: Optional[int] = None) -> dict:  # fmt: skip
    """The fused GatedMLP decode kernel's plan of M tokens: row (the decode table's tma row, "" where
    the kernel does not serve the call, `why` then says why), grid (CTAs), blocks and splits (the down
    projection's 128-row blocks and K splits), h_bytes and partial_bytes (its workspaces).
    `decode_row`: a tma row of decode_configs(), forced at any size its tokens cover; `decode_splits`:
    the down projection's K splits, forced (clamped to its 128-column k-steps and 64): for tests
    and sweeps."""
    index = torch.device("cuda" if device is None else device).index
    index = torch.cuda.current_device() if index is None else index
    row = _decode_row_index(decode_row)
    _check_decode_splits(decode_splits)
    return dict(NATIVE.module.gated_mlp_decode_plan(int(m), int(hidden), int(inter), dtypes.code(dtype), index, row,
                                                    decode_splits or 0))  # fmt: skip


def gated_mlp_operands_problem(x: torch.Tensor, w_gate_up: torch.Tensor, b_gate_up, w_down: torch.Tensor,
                               b_down) -> Optional[str]:  # fmt: skip
    """Why x [M, H], w_gate_up [2I, H], b_gate_up [2I] or None, w_down [H, I], b_down [H] or None are
    not one MLP's operands on one device in one dtype (None: they are). The fused kernel reads every
    size from them, so a mismatch would read out of bounds."""
    if x.dim() != 2 or w_gate_up.dim() != 2 or w_down.dim() != 2:
        return "x, w_gate_up and w_down must be 2-D"
    (m, hidden), (two_i, k) = x.shape, w_gate_up.shape
    if two_i % 2 or k != hidden or tuple(w_down.shape) != (hidden, two_i // 2):
        return (f"shapes do not chain: x {tuple(x.shape)}, w_gate_up {tuple(w_gate_up.shape)} (want [2I, {hidden}]), "
                f"w_down {tuple(w_down.shape)} (want [{hidden}, {two_i // 2}])")  # fmt: skip
    for name, b, n in (("b_gate_up", b_gate_up, two_i), ("b_down", b_down, hidden)):
        if b is not None and (b.dim() != 1 or b.shape[0] != n or b.dtype != x.dtype or b.device != x.device):
            return f"{name} must be [{n}] of x's dtype and device"
    if not (x.dtype == w_gate_up.dtype == w_down.dtype) or not (x.device == w_gate_up.device == w_down.device):
        return "x and the weights must share a dtype and a device"
    return None


def _fused_plan(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, b_gate_up,
                b_down) -> tuple[Optional[dict], Optional[str]]:  # fmt: skip
    """(the fused decode kernel's plan, None) where it takes GatedMLP's call on x [M, H], else
    (None, why not)."""
    if not NATIVE.loaded:
        return None, "kp_fused_mlp was built without its CUDA level"
    if x.device.type != "cuda" or x.dtype not in (torch.float16, torch.bfloat16):
        return None, "the fused decode kernel takes float16/bfloat16 CUDA tensors"
    why = gated_mlp_operands_problem(x, w_gate_up, b_gate_up, w_down, b_down)
    if why:
        return None, why
    (m, hidden), inter = x.shape, w_down.shape[1]
    plan = gated_mlp_decode_plan(m, hidden, inter, x.dtype, x.device)
    return (None, plan["why"]) if plan["why"] else (plan, None)


def gated_mlp_decode_problem(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, b_gate_up=None,
                             b_down=None) -> Optional[str]:  # fmt: skip
    """Why the fused decode kernel does not take GatedMLP's call on x [M, H] (None: it does)."""
    return _fused_plan(x, w_gate_up, w_down, b_gate_up, b_down)[1]


def gated_mlp_decode(x: torch.Tensor, w_gate_up: torch.Tensor, b_gate_up, w_down: torch.Tensor, b_down,
                     activation: str, decode_row: Optional[str] = None,
                     decode_splits: Optional[int] = None) -> torch.Tensor:  # fmt: skip
    """down(act(x Wg^T + bg) * (x Wu^T + bu)) for x [M, H] (M a few tokens; gated_mlp_decode_problem
    says which), w_gate_up [2I, H], b_gate_up [2I] or None, w_down [H, I], b_down [H] or None, one
    16-bit dtype. h is rounded to the dtype before the down projection, as the two-kernel path
    does. Returns y [M, H] contiguous. `decode_row`, `decode_splits` as for gated_mlp_decode_plan."""
    why = gated_mlp_operands_problem(x, w_gate_up, b_gate_up, w_down, b_down)
    if why:
        raise ValueError(f"kp_fused_mlp.gated_mlp_decode: {why}")
    (m, hidden), inter = x.shape, w_down.shape[1]
    plan = gated_mlp_decode_plan(m, hidden, inter, x.dtype, x.device, decode_row, decode_splits)
    if not plan["row"]:
        raise ValueError(f"kp_fused_mlp: the fused decode kernel does not take this call: {plan['why']}")
    return _launch_gated_mlp_decode(x, w_gate_up, b_gate_up, w_down, b_down, activation, plan, decode_row,
                                    decode_splits)  # fmt: skip


def try_gated_mlp_decode(x: torch.Tensor, w_gate_up: torch.Tensor, b_gate_up, w_down: torch.Tensor, b_down,
                         activation: str) -> Optional[torch.Tensor]:  # fmt: skip
    """gated_mlp_decode's y where the fused kernel takes the call, else None (gated_mlp_decode_problem
    says why): one check of the operands and one plan lookup a call (GatedMLP's eager path)."""
    plan, why = _fused_plan(x, w_gate_up, w_down, b_gate_up, b_down)
    return None if why else _launch_gated_mlp_decode(x, w_gate_up, b_gate_up, w_down, b_down, activation, plan)


def _launch_gated_mlp_decode(x, w_gate_up, b_gate_up, w_down, b_down, activation: str, plan: dict,
                             decode_row: Optional[str] = None, decode_splits: Optional[int] = None) -> torch.Tensor:  # fmt: skip
    (m, hidden), inter = x.shape, w_down.shape[1]
    x, w_gate_up, w_down = _tma_ready(x), _tma_ready(w_gate_up), _tma_ready(w_down)
    b_gate_up = None if b_gate_up is None else b_gate_up.contiguous()
    b_down = None if b_down is None else b_down.contiguous()
    y = torch.empty((m, hidden), dtype=x.dtype, device=x.device)
    h = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    partials = torch.empty(plan["partial_bytes"] // 4, dtype=torch.float32, device=x.device)
    counter = _barrier_counter(x.device)
    index = x.device.index
    NATIVE.module.gated_mlp_decode(
        x.data_ptr(), _ld(x), w_gate_up.data_ptr(), _ld(w_gate_up), 0 if b_gate_up is None else b_gate_up.data_ptr(),
        w_down.data_ptr(), _ld(w_down), 0 if b_down is None else b_down.data_ptr(), y.data_ptr(), h.data_ptr(),
        partials.data_ptr(), counter.data_ptr(), m, hidden, inter, dtypes.code(x.dtype), ACT_CODES[activation], index,
        current_stream(index), _decode_row_index(decode_row), decode_splits or 0,
    )  # fmt: skip
    return y
