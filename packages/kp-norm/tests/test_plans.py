"""The CUDA level's plan table (csrc/plan_table.h): every row runs and is right, on both GPU classes.

Each case below is a call that lands on one row of the table; `kp_norm.cuda_plan` says which. The
GPU class (fast or slow DRAM an SM) is forced with a plan override, so one GPU runs both columns
of the table. The coverage tests fail when a row of the table is reached by no case (a row that
no test runs), the case tests when a row computes a wrong answer.
"""
import pytest
import torch

import kp_norm
from kp_norm import _cuda

import test_norm  # (a module: importing its test function by name would collect it here again)

FWD_ROWS = {"direct.rows", "direct", "direct.wide", "ring.wreg.rows", "ring.wreg", "ring.wsmem", "ring.wl2",
            "direct.scalar", "multipass", "direct.cluster"}  # fmt: skip
BWD_ROWS = {"tile", "ring.warp_teams", "ring.cta", "ring.cluster", "ring.wrp", "ring.wrp_smem", "direct.scalar",
            "multipass"}  # fmt: skip
# Rows measured on the slow class only (plan_table.h: 0 in the fast column).
SLOW_ONLY = {"direct.wide", "ring.wreg.rows"}
# And on the fast class only (0 in the slow column): LayerNorm with fp32 weights over a cluster.
FAST_ONLY = {"direct.cluster"}
# fastdram_gbpsm: the DRAM GB/s an SM from which a GPU is in the fast class (30 by default).
CLASSES = {"slow": dict(fastdram_gbpsm=100000), "fast": dict(fastdram_gbpsm=1)}

# (kind, variant, dtype, (rows, cols)): small row counts, widths at the table's rows and edges.
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
CASES = [
    ("rms", "plain", BF16, (37, 256)),  # direct.rows / ring.warp_teams
    ("layer", "residual", F16, (9, 1024)),
    ("rms", "plain", BF16, (5, 2048)),  # direct (E = 16) / tile
    ("layer", "plain", BF16, (5, 2048)),
    ("layer", "plain", F16, (3, 4096)),  # the capped twins (slow class)
    ("rms", "plain", BF16, (3, 8192)),  # ring.cta
    ("rms", "plain", BF16, (3, 16384)),
    ("layer", "plain", BF16, (3, 16384)),  # ring.cluster (db, 2 CTAs)
    ("rms", "plain", F32, (3, 12288)),
    ("rms", "plain", BF16, (2, 65536)),  # direct.wide / ring.wreg; ring.wrp
    ("layer", "plain", BF16, (2, 65536)),  # ring.wreg; ring.wrp (db, slow) or ring.cluster
    ("rms", "residual", BF16, (3, 20000)),  # ring.wsmem (weights + 2 stages within 200 KB)
    ("rms", "fp32-weight", BF16, (3, 40000)),  # ring.wl2 (fp32 weights of a 16-bit x: from L2)
    ("layer", "residual", BF16, (2, 65536)),  # ring.wl2
    ("rms", "plain", F16, (2, 131072)),
    ("layer", "plain", BF16, (2, 262144)),  # ring.wreg.rows (slow); ring.wrp_smem (slow)
    ("rms", "plain", BF16, (2, 262144)),
    ("rms", "plain", F16, (3, 200000)),  # the ring without a compile-time-geometry twin (13 CTAs)
    ("rms", "gemma-offset", BF16, (2, 147456)),
    ("rms", "no-weight", BF16, (2, 262144)),
    ("layer", "bf16-weight", F16, (3, 2048)),  # bf16 weights of fp16 x: widened to fp32 once
    ("rms", "fp32-weight", BF16, (37, 1024)),  # fp32 weights in the backward's warp teams and CTA rings
    ("layer", "fp32-weight", F16, (3, 8192)),
    ("rms", "fp32-weight", BF16, (3, 16384)),  # direct; direct.cluster with fwd_w32split=8192
    ("layer", "fp32-weight", F16, (5, 12000)),  # direct.cluster on the fast class (H200)
    ("layer", "fp32-weight", BF16, (3, 16384)),  # direct.cluster on the fast class (H200)
    ("rms", "plain", BF16, (3, 1027)),  # direct.scalar (odd width)
    ("layer", "residual", BF16, (6, 1027)),  # direct.scalar with a residual (one kernel, run-time variants)
    ("layer", "residual-fp32", F16, (5, 3000)),  # direct.scalar: fp32 residual and weights, strided rows
    # The smaller kernel sets (plan_table.h): E = 32 warp teams at 257-512 columns for fp32
    # weights or a residual; fp32 h in the backward without tile, WRP or twins.
    ("rms", "fp32-weight", BF16, (37, 384)),
    ("layer", "residual", F16, (37, 480)),
    ("layer", "plain", F32, (37, 384)),
    ("rms", "plain", F32, (5, 2048)),  # backward ring.cta where 16-bit h takes the tile
    ("layer", "residual-fp32", BF16, (5, 4096)),
    ("layer", "plain", F32, (2, 65536)),  # backward ring.cluster where 16-bit h takes ring.wrp
    ("rms", "residual-fp32", BF16, (2, 262144)),
    ("layer", "plain", F32, (2, 70001)),  # scalar too wide for one cluster: multipass
    ("rms", "plain", BF16, (1, 300000)),  # backward multipass (> 262144)
    ("rms", "plain", BF16, (1, 1 << 20)),  # forward multipass (> 16 x 512 x 64)
]


def _plan_kwargs(kind, variant, dtype, cols):
    res_kind, w_kind, _offset, has_bias, _layout = test_norm.VARIANTS[variant]
    vec = 16 // torch.tensor([], dtype=dtype).element_size()
    return dict(
        weight=w_kind is not None,
        weight_dtype=None if w_kind in (None, "same") else w_kind,
        bias=has_bias and w_kind is not None and kind == "layer",
        residual_dtype=None if res_kind is None else (dtype if res_kind == "same" else res_kind),
        aligned=cols % vec == 0,
    )


def _rows_of(kind, variant, dtype, shape):
    rows, cols = shape
    op = "rms_norm" if kind == "rms" else "layer_norm"
    kw = _plan_kwargs(kind, variant, dtype, cols)
    fwd = kp_norm.cuda_plan(op, cols, dtype, rows=rows, **kw)
    bwd = kp_norm.cuda_plan(op, cols, dtype, rows=rows, backward=True, **kw)
    return fwd, bwd


def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if not _cuda.NATIVE.loaded:
        pytest.skip(f"the CUDA level is not built: {_cuda.NATIVE.error}")


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_class", list(CLASSES))
def test_every_row_is_reached(gpu_class):
    _need_cuda()
    seen_fwd, seen_bwd = {}, {}
    with kp_norm.plan_override(**CLASSES[gpu_class]):
        for case in CASES:
            fwd, bwd = _rows_of(*case)
            seen_fwd.setdefault(fwd["row"], case)
            seen_bwd.setdefault(bwd["row"], case)
            assert fwd["kernel"] != "?" and bwd["kernel"] != "?", (case, fwd, bwd)
    want = lambda rows: rows - SLOW_ONLY if gpu_class == "fast" else rows - FAST_ONLY  # noqa: E731
    assert set(seen_fwd) <= FWD_ROWS and set(seen_bwd) <= BWD_ROWS, (seen_fwd, seen_bwd)
    assert set(seen_fwd) >= want(FWD_ROWS), f"forward rows no case reaches: {want(FWD_ROWS) - set(seen_fwd)}"
    assert set(seen_bwd) >= want(BWD_ROWS), f"backward rows no case reaches: {want(BWD_ROWS) - set(seen_bwd)}"


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_class", list(CLASSES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{str(c[2])[6:]}-{c[3][0]}x{c[3][1]}")
def test_each_row_matches_the_oracle(gpu_class, case, seed):
    _need_cuda()
    kind, variant, dtype, shape = case
    with kp_norm.plan_override(**CLASSES[gpu_class]):
        test_norm.test_forward_backward_match_oracle(("cuda", "cuda"), kind, variant, dtype, shape, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_class", list(CLASSES))
def test_smaller_kernel_sets_are_respected(gpu_class):
    """The signatures outside the full kernel set never plan a kernel the build leaves out."""
    _need_cuda()
    with kp_norm.plan_override(**CLASSES[gpu_class]):
        for kind, variant, dtype, shape in CASES:
            fwd, bwd = _rows_of(kind, variant, dtype, shape)
            res_kind, w_kind = test_norm.VARIANTS[variant][:2]
            fp32_w = w_kind is torch.float32 and dtype != F32
            if fp32_w or res_kind is not None or dtype == F32:
                assert fwd["e"] != 16, (kind, variant, dtype, shape, fwd)
            if fp32_w:
                assert fwd["row"] != "ring.wsmem", (kind, variant, dtype, shape, fwd)
            if dtype == F32 or res_kind is torch.float32:  # fp32 h in the backward
                assert bwd["row"] not in {"tile", "ring.wrp", "ring.wrp_smem"}, (kind, variant, dtype, shape, bwd)


@pytest.mark.gpu
def test_plans_are_cached_per_override():
    """Entering and leaving an override re-plans: the key holds the override's generation."""
    _need_cuda()
    base = kp_norm.cuda_plan("layer_norm", 65536, torch.bfloat16, rows=64, bias=True)
    with kp_norm.plan_override(fwd_stages=2, fwd_wreg=0):
        changed = kp_norm.cuda_plan("layer_norm", 65536, torch.bfloat16, rows=64, bias=True)
    assert changed["row"] != base["row"] or changed["stages"] != base["stages"], (base, changed)
    assert kp_norm.cuda_plan("layer_norm", 65536, torch.bfloat16, rows=64, bias=True) == base


def test_override_names_are_checked():
    if not _cuda.NATIVE.loaded:
        pytest.skip(f"the CUDA level is not built: {_cuda.NATIVE.error}")
    assert "fwd_stages" in kp_norm.plan_override_names()
    with pytest.raises(ValueError, match="unknown name"):
        with kp_norm.plan_override(fwd_stagez=2):
            pass
    with pytest.raises(TypeError, match="must be an int"):
        with kp_norm.plan_override(fwd_stages=2.5):
            pass
    with pytest.raises(ValueError, match="unknown name"):  # the native check, for direct callers
        _cuda.NATIVE.module.set_plan_override([("nope", 1)])


def test_cuda_plan_rejects_bad_arguments():
    with pytest.raises(ValueError, match="op must be"):
        kp_norm.cuda_plan("batch_norm", 1024)
    with pytest.raises(ValueError, match="hidden"):
        kp_norm.cuda_plan("rms_norm", 0)
    with pytest.raises(ValueError, match="rows"):
        kp_norm.cuda_plan("rms_norm", 1024, rows=0)


# direct.wide.staged (plan_table.h): off in the table (it lost to the ring on the H100), built in
# tuning builds only. Its edges: a last CTA partly past the row, the weight offset, no weight.
WIDE_STAGED = [("plain", F16, (3, 200000)), ("gemma-offset", BF16, (2, 147456)), ("no-weight", BF16, (2, 262144)),
               ("plain", BF16, (2, 262144))]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("case", WIDE_STAGED, ids=lambda c: f"{c[0]}-{str(c[1])[6:]}-{c[2][0]}x{c[2][1]}")
def test_wide_staged_row_through_the_override(case, seed):
    """A tuning build runs the row right; a release build refuses the override with a clear error."""
    _need_cuda()
    variant, dtype, shape = case
    with kp_norm.plan_override(fwd_widestaged=262144, **CLASSES["slow"]):
        plan = kp_norm.cuda_plan("rms_norm", shape[1], dtype, rows=shape[0], **_plan_kwargs("rms", variant, dtype, shape[1]))
        assert plan["row"] == "direct.wide.staged", plan
        if plan["kernel"] != "?":
            test_norm.test_forward_backward_match_oracle(("cuda", "cuda"), "rms", variant, dtype, shape, seed)
            return
        x = torch.randn(shape, device="cuda", dtype=dtype)
        with pytest.raises(ValueError, match="does not hold"):
            kp_norm.rms_norm(x, torch.ones(shape[1], device="cuda", dtype=dtype), backend="cuda")
