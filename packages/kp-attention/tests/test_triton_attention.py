"""kp-attention's Triton level against the float64 reference (kp_attention.reference.attention run in
float64 on the same inputs, its gradients by autograd): out, lse and dq, dk, dv for causal, windows,
softcap, GQA / MQA, seqlen_q != seqlen_k both ways, explicit diagonals, strided inputs and empty
sequences. Without a GPU the kernels run under Triton's interpreter (shapes kept tiny, and the
block table shrunk to 16 x 16 so that several blocks, and the loop bounds between them, are hit;
the tests of the masked / mask-free split of the loops also use 32 x 16 and 16 x 32 blocks)."""
import pytest
import torch
from kp_core import testing as kt
from kp_core.testing.levels import interpret_triton_without_gpu, interpreter_problem

interpret_triton_without_gpu()  # before kp_attention.triton.attention is imported

pytest.importorskip("triton")
if not torch.cuda.is_available() and interpreter_problem():
    pytest.skip(interpreter_problem(), allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from kp_attention import reference  # noqa: E402
from kp_attention.triton import attention as ta  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64 = torch.float64
ON_GPU = torch.cuda.is_available()
# The interpreter's bf16 tl.dot is wrong (it is not the kernels): bf16 runs on a GPU only.
BF16 = pytest.param(
    torch.bfloat16, marks=pytest.mark.skipif(not ON_GPU, reason="Triton's interpreter gets bf16 dots wrong")
)
DTYPES = [torch.float32, torch.float16, BF16]
TABLES_16BIT = (ta.FWD_BLOCKS, ta.DKDV_BLOCKS, ta.DQ_BLOCKS)
TABLES_FP32 = (ta.FWD_BLOCKS_FP32, ta.DKDV_BLOCKS_FP32, ta.DQ_BLOCKS_FP32)


@pytest.fixture
def small_blocks(monkeypatch):
    """16 x 16 blocks for every head dim and dtype: tiny sequences span several blocks."""
    for table in (*TABLES_16BIT, *TABLES_FP32):
        for key in list(table):
            monkeypatch.setitem(table, key, ta.Blocks(16, 16))


def _qkv(b, sq, sk, hq, hkv, d, dtype, seed):
    q = kt.randn((b, sq, hq, d), dtype=dtype, device=DEVICE, seed=seed)
    k = kt.randn((b, sk, hkv, d), dtype=dtype, device=DEVICE, seed=seed + 1)
    v = kt.randn((b, sk, hkv, d), dtype=dtype, device=DEVICE, seed=seed + 2)
    return q, k, v


def _reference(q, k, v, do, scale, causal, window, softcap, diagonal):
    """(out, lse, (dq, dk, dv)) of the reference in float64."""
    q64, k64, v64 = (t.detach().to(F64).requires_grad_(True) for t in (q, k, v))
    out, lse = reference.attention(q64, k64, v64, scale=scale, causal=causal, window=window, softcap=softcap,
                                   diagonal=diagonal)  # fmt: skip
    grads = torch.autograd.grad(out, (q64, k64, v64), do.to(F64)) if out.numel() else (q64 * 0, k64 * 0, v64 * 0)
    return out.detach(), lse.detach(), grads


def _check(q, k, v, do, *, scale, causal=False, window=(-1, -1), softcap=0.0, diagonal=None, tag=""):
    """Run the Triton forward and backward and check all five results against the float64 reference."""
    sq, sk = q.shape[1], k.shape[1]
    diagonal = sk - sq if diagonal is None else diagonal
    left, right = window
    out, lse = ta.attention_fwd(q, k, v, scale, causal, left, right, softcap, diagonal)
    grads = ta.attention_bwd(do, q, k, v, out, lse, scale, causal, left, right, softcap, diagonal)
    want_out, want_lse, want_grads = _reference(q, k, v, do, scale, causal, window, softcap, diagonal)

    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (q.shape[0], q.shape[2], sq) and lse.dtype == torch.float32 and lse.is_contiguous()
    # The dtype's own bound: fp32 errors come out ~2e-7 (the fp32 dots run in IEEE precision, not
    # TF32); 16-bit ones ~15% of the bound (p is rounded to the dtype for the p @ v dot, as in every
    # flash attention, and the output once).
    kt.assert_matches_oracle(out, want_out, name=f"out {tag}")
    # lse: -inf exactly where the reference's is (rows that see no key), fp32-accurate elsewhere (the
    # scores are fp32 dots of the same inputs in every dtype).
    seen = torch.isfinite(want_lse)
    assert not torch.isnan(lse).any() and not torch.isposinf(lse).any()
    assert torch.equal(torch.isneginf(lse), ~seen), f"lse -inf pattern {tag}"
    kt.assert_matches_oracle(lse[seen], want_lse[seen].to(lse.device), dtype=torch.float32, name=f"lse {tag}")
    assert (out.permute(0, 2, 1, 3)[~seen] == 0).all(), f"rows that see nothing are not zero {tag}"

    check_grads(grads, want_grads, (q, k, v), do, tag)
    return out, lse, grads


def check_grads(grads, want_grads, inputs, do, tag):
    """dq, dk, dv: shape, dtype and layout, finite, and within the oracle's bound. dq vanishes where a
    row sees one key (window (0, 0)), so errors are measured against |do|."""
    scale_do = do.double().norm().item()
    for name, g, w, t in zip(("dq", "dk", "dv"), grads, want_grads, inputs):
        assert g.shape == t.shape and g.dtype == t.dtype and g.is_contiguous(), name
        assert torch.isfinite(g).all(), f"{name} not finite {tag}"
        kt.assert_matches_oracle(g, w, scale=scale_do, name=f"{name} {tag}")


SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim
    (2, 17, 17, 2, 2, 16),
    (1, 9, 23, 4, 2, 32),  # seqlen_q < seqlen_k, GQA 4:2
    (2, 23, 9, 4, 1, 64),  # seqlen_q > seqlen_k (causal: the first rows see nothing), MQA 4:1
    (1, 33, 40, 4, 2, 72),  # head dim not a power of two (padded to 128), three blocks each way
]
OPTIONS = [  # causal, window, softcap
    (False, (-1, -1), 0.0),
    (True, (-1, -1), 0.0),
    (False, (2, 1), 0.0),
    (True, (3, 0), 0.0),
    (False, (0, 0), 0.0),
    (False, (-1, 2), 0.0),
    (True, (-1, -1), 1.5),
    (False, (2, 1), 0.7),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal, window, softcap", OPTIONS, ids=lambda o: str(o))
def test_matches_float64_reference(shape, causal, window, softcap, dtype, seed, small_blocks):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = _qkv(b, sq, sk, hq, hkv, d, dtype, seed)
    do = kt.randn((b, sq, hq, d), dtype=dtype, device=DEVICE, seed=seed + 3)
    _check(q, k, v, do, scale=d**-0.5, causal=causal, window=window, softcap=softcap, tag=f"{shape} {dtype}")


@pytest.mark.parametrize("diagonal", [0, -3, 4, 30, -30])
@pytest.mark.parametrize("causal, window", [(True, (-1, -1)), (False, (3, 2)), (True, (5, 0)), (False, (-1, 0))])
def test_explicit_diagonals(diagonal, causal, window, seed, small_blocks):
    """Top-left (0, torch's SDPA), shifted either way, and far enough that no row, or every row, sees all."""
    q, k, v = _qkv(2, 19, 21, 2, 1, 16, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    _check(q, k, v, do, scale=0.4, causal=causal, window=window, diagonal=diagonal, tag=f"d={diagonal}")


def test_default_block_table_matches(seed):
    """The shipped tables (one block covers these sequences) give what the 16 x 16 blocks give, in
    fp32 too: its tiles take twice the smem (d72 pads to 128, whose 16-bit forward row would ask
    384 KB in fp32)."""
    for d in (16, 72, 256):
        q, k, v = _qkv(2, 21, 30, 4, 2, d, torch.float32, seed)
        do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
        _check(q, k, v, do, scale=d**-0.5, causal=True, window=(7, 0), softcap=2.0, tag=f"default blocks d={d}")


@pytest.mark.parametrize("d", [1, 3, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_head_dim_extremes(d, dtype, seed, small_blocks):
    """The smallest head dims (padded to 16) and the largest (256)."""
    q, k, v = _qkv(1, 18, 17, 2, 1, d, dtype, seed)
    do = kt.randn(q.shape, dtype=dtype, device=DEVICE, seed=seed + 3)
    _check(q, k, v, do, scale=d**-0.5, causal=True, window=(6, 0), softcap=1.0, tag=f"d={d} {dtype}")
    _check(q, k, v, do, scale=d**-0.5, window=(2, 4), tag=f"d={d} {dtype}")


def test_rows_that_see_nothing_give_zeros_and_finite_gradients(seed, small_blocks):
    # seqlen_q > seqlen_k, causal and bottom-right: the first 21 rows sit above the diagonal
    q, k, v = _qkv(1, 24, 3, 2, 2, 16, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    out, lse, (dq, dk, dv) = _check(q, k, v, do, scale=0.25, causal=True)
    assert (out[:, :21] == 0).all() and torch.isneginf(lse[..., :21]).all() and torch.isfinite(lse[..., 21:]).all()
    assert (dq[:, :21] == 0).all()
    # a window that excludes every key for every row
    out, lse, (dq, dk, dv) = _check(q, k, v, do, scale=0.25, window=(0, 0), diagonal=10)
    assert (out == 0).all() and torch.isneginf(lse).all()
    assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()


@pytest.mark.parametrize("b, sq, sk", [(2, 0, 5), (2, 5, 0), (0, 5, 5), (2, 0, 0)])
def test_empty_sequences(b, sq, sk, seed):
    q, k, v = _qkv(b, sq, sk, 4, 2, 16, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    out, lse, (dq, dk, dv) = _check(q, k, v, do, scale=0.25, causal=True)
    assert out.shape == (b, sq, 4, 16) and lse.shape == (b, 4, sq)
    assert (out == 0).all()
    if sk == 0:
        assert torch.isneginf(lse).all()
    assert dk.shape == k.shape and (dk == 0).all() and (dv == 0).all() and (dq == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16], ids=str)
def test_packed_qkv_and_strided_do(dtype, seed, small_blocks):
    """q, k, v as strided views of one packed [B, S, 3, H, D] tensor, read in place; do a transposed
    view; the inputs are left untouched."""
    qkv = kt.randn((2, 19, 3, 4, 32), dtype=dtype, device=DEVICE, seed=seed)
    before = qkv.clone()
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    do = kt.randn((2, 4, 19, 32), dtype=dtype, device=DEVICE, seed=seed + 3).transpose(1, 2)
    assert not do.is_contiguous() and do.stride(-1) == 1
    _check(q, k, v, do, scale=0.2, causal=True, window=(5, 0), tag=f"packed {dtype}")
    assert torch.equal(qkv, before)
    # a head-dim slice that is not the whole row either (row stride 3 * 4 * 32, head dim 24)
    q2, k2, v2 = (t[..., :24] for t in (q, k, v))
    _check(q2, k2, v2, do[..., :24], scale=0.2, softcap=3.0, tag=f"sliced {dtype}")


def test_gqa_gradients_sum_over_the_group(seed, small_blocks):
    """dk, dv of an MQA call equal the sum of those of the same call with k, v repeated per query head."""
    q, k, v = _qkv(1, 18, 20, 4, 1, 16, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    args = (0.25, True, 6, -1, 0.0, 2)
    out, lse = ta.attention_fwd(q, k, v, *args)
    _, dk, dv = ta.attention_bwd(do, q, k, v, out, lse, *args)
    kr, vr = (t.repeat_interleave(4, 2) for t in (k, v))
    out_r, lse_r = ta.attention_fwd(q, kr, vr, *args)
    _, dkr, dvr = ta.attention_bwd(do, q, kr, vr, out_r, lse_r, *args)
    torch.testing.assert_close(out, out_r, rtol=0, atol=0)
    torch.testing.assert_close(dk, dkr.sum(2, keepdim=True), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dv, dvr.sum(2, keepdim=True), rtol=1e-6, atol=1e-6)


def test_backward_is_deterministic(seed, small_blocks):
    q, k, v = _qkv(2, 20, 18, 4, 2, 32, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    args = (0.2, False, 4, 3, 1.0, -2)
    out, lse = ta.attention_fwd(q, k, v, *args)
    first = ta.attention_bwd(do, q, k, v, out, lse, *args)
    second = ta.attention_bwd(do, q, k, v, out, lse, *args)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.gpu
@pytest.mark.large
def test_offsets_past_2_31_elements(seed):
    """A query tensor of more than 2^31 elements: batch 1's rows start past int32 offsets."""
    rows = 2**31 // 64 + 64
    q = torch.empty((2, rows, 1, 64), dtype=torch.float16, device="cuda").normal_(generator=kt.generator(seed, "cuda"))
    k, v = (kt.randn((2, 16, 1, 64), dtype=torch.float16, device="cuda", seed=seed + i) for i in (1, 2))
    out, lse = ta.attention_fwd(q, k, v, 0.125, False, -1, -1, 0.0, 0)
    tail = slice(rows - 40, rows)
    want, want_lse = reference.attention(q[:, tail].double(), k.double(), v.double(), scale=0.125, diagonal=0)
    kt.assert_matches_oracle(out[:, tail], want, name="out past 2^31")
    kt.assert_matches_oracle(lse[..., tail], want_lse, dtype=torch.float32, name="lse past 2^31")



@pytest.mark.gpu
@pytest.mark.large
def test_backward_tiles_spanning_2_31_elements(seed):
    """k and v with a row stride of 2^25 + 2^20 elements: a 64-key tile of them spans more than 2^31
    (63 rows past its first: 2.24e9), so the dq loop takes its tile offsets in int64 (_wide); the
    gradients equal those of contiguous copies exactly (same tiles, same sums)."""
    keys, stride = 70, 2**25 + 2**20
    gen = kt.generator(seed, "cuda")
    k, v = (torch.empty((keys, stride), dtype=torch.float16, device="cuda")[:, :64].normal_(generator=gen)[None, :, None]
            for _ in range(2))  # fmt: skip
    assert k.stride(1) == stride and ta._wide(64, (stride,))
    q, do = (kt.randn((1, 50, 2, 64), dtype=torch.float16, device="cuda", seed=seed + i) for i in (1, 2))
    args = (0.125, True, -1, -1, 0.0, 30)
    out, lse = ta.attention_fwd(q, k, v, *args)
    got = ta.attention_bwd(do, q, k, v, out, lse, *args)
    want = ta.attention_bwd(do, q, k.contiguous(), v.contiguous(), out, lse, *args)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


# The loops' split into masked and mask-free tiles (_key_tiles for the forward and dq kernels,
# _query_tiles for the dk/dv kernel) against brute force over the visibility matrix: the three
# ranges cover exactly the tiles of [lo, hi), in order, and the middle one is exactly the tiles
# that need no mask. The end-to-end tests would not notice a middle range that is too small (only
# slower), and one that is too large only where a tile's edge meets a window's.
@triton.jit
def _tiles_kernel(OUT, CASES, n, CAUSAL: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS: tl.constexpr, SIZE: tl.constexpr):  # fmt: skip
    """(lo, mid_lo, mid_hi, hi) of n (case, program id) lanes, SIZE a program (the helpers are
    elementwise): CASES rows (seqlen_q, seqlen_k, diagonal, left, right, program id)."""
    lane = tl.program_id(0) * SIZE + tl.arange(0, SIZE)
    ok = lane < n
    seqlen_q = tl.load(CASES + lane * 6, mask=ok, other=1)
    seqlen_k = tl.load(CASES + lane * 6 + 1, mask=ok, other=1)
    diagonal = tl.load(CASES + lane * 6 + 2, mask=ok, other=0)
    left = tl.load(CASES + lane * 6 + 3, mask=ok, other=0)
    right = tl.load(CASES + lane * 6 + 4, mask=ok, other=0)
    pid = tl.load(CASES + lane * 6 + 5, mask=ok, other=0)
    if KEYS:
        lo, mid_lo, mid_hi, hi = ta._key_tiles(pid, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT,
                                               HAS_RIGHT, BLOCK_M, BLOCK_N)  # fmt: skip
    else:
        lo, mid_lo, mid_hi, hi = ta._query_tiles(pid, seqlen_q, seqlen_k, diagonal, left, right, CAUSAL, HAS_LEFT,
                                                 HAS_RIGHT, BLOCK_M, BLOCK_N)  # fmt: skip
    tl.store(OUT + lane * 4, lo, mask=ok)
    tl.store(OUT + lane * 4 + 1, mid_lo, mask=ok)
    tl.store(OUT + lane * 4 + 2, mid_hi, mask=ok)
    tl.store(OUT + lane * 4 + 3, hi, mask=ok)


def _tile_cases(seed):
    """(seqlen_q, seqlen_k, diagonal, left, right): lengths at and around block multiples, diagonals
    from far below to far above, windows from 0 to wider than several blocks."""
    import random

    rng = random.Random(seed)
    lengths = [1, 5, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100]
    cases = [(16, 16, 0, 0, 0), (40, 17, 23, 3, 0), (17, 40, -23, 0, 2), (33, 33, -40, 5, 5), (33, 33, 40, 5, 5)]
    for _ in range(300):
        cases.append((rng.choice(lengths), rng.choice(lengths), rng.randint(-70, 70),
                      rng.choice([0, 1, 2, 7, 15, 16, 17, 20, 31, 33, 40, 64, 80]),
                      rng.choice([0, 1, 3, 15, 16, 33, 47, 64])))  # fmt: skip
    return cases


def _expected_ranges(keys, pid, vis, d, left, right, causal, has_left, has_right, bm, bn):
    """The loop's [lo, hi) (as the kernels had it before the split), its step and the set of tiles
    in it that need no mask, from the visibility matrix vis [seqlen_q, seqlen_k]."""
    sq, sk = vis.shape
    if keys:  # the rows of query block pid against key tiles of bn; rows >= sq are never stored
        first, last = pid * bm, min(pid * bm + bm, sq) - 1
        lo, hi = (max(first + d - left, 0) if has_left else 0), sk
        if causal:
            hi = min(hi, last + d + 1)
        if has_right:
            hi = min(hi, last + d + right + 1)
        lo, step = lo // bn * bn, bn
        block = vis[first:last + 1]
        whole = {t for t in range(lo, hi, bn) if t + bn <= sk and bool(block[:, t:t + bn].all())}
        seen = block.any(0).nonzero().flatten().tolist()
    else:  # the keys of key block pid against row tiles of bm; rows >= sq add exactly 0 (whole tiles have none)
        first, last = pid * bn, min(pid * bn + bn, sk) - 1
        lo, hi = (max(first - d, 0) if causal else 0), sq
        if has_right:
            lo = max(lo, first - d - right)
        if has_left:
            hi = min(hi, last - d + left + 1)
        lo, step = lo // bm * bm, bm
        block = vis[:, first:last + 1]
        whole = {t for t in range(lo, hi, bm) if first + bn <= sk and t + bm <= sq and bool(block[t:t + bm].all())}
        seen = block.any(1).nonzero().flatten().tolist()
    assert all(lo <= x < hi for x in seen)  # every visible pair is inside the loop
    return lo, hi, step, whole


@pytest.mark.parametrize("bm, bn", [(16, 16), (32, 16), (16, 32), (64, 16)])
@pytest.mark.parametrize("causal, has_left, has_right", [(c, l, r) for c in (0, 1) for l in (0, 1) for r in (0, 1)])
def test_mask_free_tiles_are_exact(causal, has_left, has_right, bm, bn, seed):
    cases = _tile_cases(seed)
    window = lambda left, right: (left if has_left else -1, right if has_right else -1)  # noqa: E731
    vis = [reference.visible(sq, sk, causal=bool(causal), window=window(left, right), diagonal=d, device="cpu")
           for sq, sk, d, left, right in cases]  # fmt: skip
    vis = [torch.ones(c[0], c[1], dtype=torch.bool) if v is None else v for v, c in zip(vis, cases)]
    for keys in (True, False):
        lanes = [(c, pid) for c, (sq, sk, *_) in enumerate(cases)
                 for pid in range(-(-sq // bm) if keys else -(-sk // bn))]  # fmt: skip
        table = torch.tensor([(*cases[c], pid) for c, pid in lanes], dtype=torch.int32, device=DEVICE)
        out = torch.full((len(lanes), 4), -12345, dtype=torch.int32, device=DEVICE)
        size = 1024
        _tiles_kernel[(-(-len(lanes) // size),)](out, table, len(lanes), bool(causal), bool(has_left),
                                                 bool(has_right), bm, bn, keys, size)  # fmt: skip
        for (c, pid), (lo, mid_lo, mid_hi, hi) in zip(lanes, out.cpu().tolist()):
            _, _, d, left, right = cases[c]
            tag = f"{'keys' if keys else 'rows'} of program {pid}, case {cases[c]}: {(lo, mid_lo, mid_hi, hi)}"
            want_lo, want_hi, step, whole = _expected_ranges(keys, pid, vis[c], d, left, right, causal, has_left,
                                                             has_right, bm, bn)  # fmt: skip
            assert (lo, hi) == (want_lo, want_hi), tag
            parts = [list(range(a, b, step)) for a, b in ((lo, mid_lo), (mid_lo, mid_hi), (mid_hi, hi))]
            assert parts[0] + parts[1] + parts[2] == list(range(lo, hi, step)), tag
            assert set(parts[1]) == whole, f"{tag}; whole tiles {sorted(whole)}"


BLOCK_SHAPES = [  # (forward, dk/dv, dq) tables
    ((16, 16),) * 3,
    ((32, 16),) * 3,
    ((16, 32),) * 3,
    ((16, 16), (16, 32), (32, 16)),  # the backward's kernels on different tiles (and delta on dq's BLOCK_M)
    ((16, 16), (16, 32, 4, 2, True), (32, 16)),  # both in one launch (Blocks.fused), on different tiles
    ((16, 16), (32, 16, 4, 2, True), (16, 32)),
]


def _blocks_id(shapes):
    return "blocks" + "-".join(f"{b[0]}x{b[1]}" + ("f" if len(b) > 4 and b[4] else "") for b in shapes)


@pytest.fixture(params=BLOCK_SHAPES, ids=_blocks_id)
def block_shapes(request, monkeypatch):
    """BLOCK_M = BLOCK_N and BLOCK_M != BLOCK_N both ways, and the backward's two kernels on
    different tiles, in two launches and in one (fused)."""
    for tables in (TABLES_16BIT, TABLES_FP32):
        for table, blocks in zip(tables, request.param):
            for key in list(table):
                monkeypatch.setitem(table, key, ta.Blocks(*blocks))


# Windows wide enough for whole tiles between masked ones in the same program (the narrow windows
# above leave none). These meet only a few of a window edge's offsets within a tile: every offset
# is test_mask_free_tiles_are_exact's.
WIDE = [  # seqlen_q, seqlen_k, causal, window, softcap, diagonal
    (90, 70, False, (40, 35), 0.0, -13),
    (70, 90, False, (37, 37), 0.0, 20),
    (90, 70, True, (60, 0), 0.0, 3),
    (70, 90, True, (60, 0), 1.5, 9),
    (70, 90, True, (-1, -1), 0.0, -5),
    (90, 70, False, (50, -1), 0.0, -12),
    (70, 90, False, (-1, 40), 0.0, -10),
]


@pytest.mark.parametrize("sq, sk, causal, window, softcap, diagonal", WIDE, ids=str)
def test_wide_windows_and_block_shapes(sq, sk, causal, window, softcap, diagonal, seed, block_shapes):
    q, k, v = _qkv(1, sq, sk, 2, 1, 16, torch.float32, seed)
    do = kt.randn(q.shape, device=DEVICE, seed=seed + 3)
    _check(q, k, v, do, scale=0.3, causal=causal, window=window, softcap=softcap, diagonal=diagonal,
           tag=f"{sq}x{sk} {causal} {window} {softcap} d={diagonal}")  # fmt: skip
