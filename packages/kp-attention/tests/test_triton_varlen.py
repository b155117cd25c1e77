"""kp-attention's Triton level over packed sequences (attention_varlen_fwd / _bwd) against the float64
reference run sequence by sequence (kp_attention.reference.attention, diagonal = len_k - len_q, its
gradients by autograd): out, lse and dq, dk, dv for empty q and k sequences, len_q above and below
len_k, one sequence, GQA / MQA, causal, windows, softcap and strided (packed qkv) inputs. Without a
GPU the kernels run under Triton's interpreter, with the block table shrunk to 16 x 16 so that
sequences cross blocks."""
import pytest
import torch
from kp_core import testing as kt

# The batched kernels' test module: the interpreter set-up, DEVICE, BF16 and the small_blocks fixture.
from test_triton_attention import (BF16, DEVICE, F64, ON_GPU, block_shapes, check_grads, reference,  # noqa: F401
                                   small_blocks, ta)


def _cu(lengths):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return cu.to(DEVICE)


def _packed(lens_q, lens_k, hq, hkv, d, dtype, seed):
    tq, tk = sum(lens_q), sum(lens_k)
    q = kt.randn((tq, hq, d), dtype=dtype, device=DEVICE, seed=seed)
    k = kt.randn((tk, hkv, d), dtype=dtype, device=DEVICE, seed=seed + 1)
    v = kt.randn((tk, hkv, d), dtype=dtype, device=DEVICE, seed=seed + 2)
    do = kt.randn((tq, hq, d), dtype=dtype, device=DEVICE, seed=seed + 3)
    return q, k, v, do


def _reference(q, k, v, do, lens_q, lens_k, scale, causal, window, softcap):
    """(out, lse [Hq, total_q], (dq, dk, dv)) in float64, each sequence on its own."""
    q64, k64, v64 = (t.detach().to(F64).requires_grad_(True) for t in (q, k, v))
    outs, lses = [], []
    q0 = k0 = 0
    for lq, lk in zip(lens_q, lens_k):
        o, lse = reference.attention(q64[None, q0:q0 + lq], k64[None, k0:k0 + lk], v64[None, k0:k0 + lk],
                                     scale=scale, causal=causal, window=window, softcap=softcap,
                                     diagonal=lk - lq)  # fmt: skip
        outs.append(o[0])
        lses.append(lse[0])
        q0, k0 = q0 + lq, k0 + lk
    out = torch.cat(outs)
    lse = torch.cat(lses, dim=-1)
    grads = torch.autograd.grad(out, (q64, k64, v64), do.to(F64), allow_unused=True) if out.numel() else (None,) * 3
    grads = tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, (q64, k64, v64)))
    return out.detach(), lse.detach(), grads


def _run(q, k, v, do, lens_q, lens_k, scale, causal, window, softcap, max_extra=0):
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    mq, mk = max(lens_q) + max_extra, max(lens_k) + max_extra
    left, right = window
    out, lse = ta.attention_varlen_fwd(q, k, v, cu_q, cu_k, mq, mk, scale, causal, left, right, softcap)
    grads = ta.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, mq, mk, scale, causal, left, right, softcap)
    return out, lse, grads


def _check(q, k, v, do, lens_q, lens_k, *, scale, causal=False, window=(-1, -1), softcap=0.0, tag="", max_extra=0):
    out, lse, grads = _run(q, k, v, do, lens_q, lens_k, scale, causal, window, softcap, max_extra)
    want_out, want_lse, want_grads = _reference(q, k, v, do, lens_q, lens_k, scale, causal, window, softcap)

    assert out.shape == q.shape and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == torch.float32 and lse.is_contiguous()
    kt.assert_matches_oracle(out, want_out, name=f"out {tag}")
    seen = torch.isfinite(want_lse)
    assert not torch.isnan(lse).any() and not torch.isposinf(lse).any()
    assert torch.equal(torch.isneginf(lse), ~seen.to(lse.device)), f"lse -inf pattern {tag}"
    kt.assert_matches_oracle(lse[seen], want_lse[seen].to(lse.device), dtype=torch.float32, name=f"lse {tag}")
    assert (out.transpose(0, 1)[~seen] == 0).all(), f"rows that see nothing are not zero {tag}"

    check_grads(grads, want_grads, (q, k, v), do, tag)
    return out, lse, grads


LENGTHS = [  # (lens_q, lens_k, heads_q, heads_kv, head_dim)
    ([17, 0, 33, 5], [20, 9, 0, 31], 2, 2, 16),  # empty q, empty k, len_q > and < len_k
    ([40], [23], 4, 1, 32),  # one sequence, len_q > len_k, MQA
    ([3, 21, 0], [35, 8, 4], 4, 2, 24),  # GQA 4:2, head dim padded
]
OPTIONS = [  # causal, window, softcap
    (False, (-1, -1), 0.0),
    (True, (-1, -1), 0.0),
    (True, (5, 0), 1.5),
    (False, (3, 2), 0.0),
    (False, (-1, 1), 0.8),
]


@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda s: f"{s[0]}-{s[1]}-{s[2]}:{s[3]}")
@pytest.mark.parametrize("causal, window, softcap", OPTIONS, ids=str)
def test_matches_float64_reference(lengths, causal, window, softcap, seed, small_blocks):
    lens_q, lens_k, hq, hkv, d = lengths
    q, k, v, do = _packed(lens_q, lens_k, hq, hkv, d, torch.float32, seed)
    _check(q, k, v, do, lens_q, lens_k, scale=d**-0.5, causal=causal, window=window, softcap=softcap,
           tag=f"{lengths} {causal} {window} {softcap}")  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, BF16], ids=str)
def test_16_bit(dtype, seed, small_blocks):
    lens_q, lens_k = [17, 0, 33, 5], [20, 9, 0, 31]
    q, k, v, do = _packed(lens_q, lens_k, 4, 2, 32, dtype, seed)
    _check(q, k, v, do, lens_q, lens_k, scale=32**-0.5, causal=True, window=(9, 0), softcap=2.0, tag=f"{dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16], ids=str)
def test_packed_qkv_strided(dtype, seed, small_blocks):
    """q, k, v as strided views of one packed [total, 3, H, D] tensor (self-attention lengths), do a
    head-major view; max_seqlen above the longest sequence; the inputs are left untouched."""
    lens = [19, 1, 0, 26]
    qkv = kt.randn((sum(lens), 3, 2, 32), dtype=dtype, device=DEVICE, seed=seed)
    before = qkv.clone()
    q, k, v = qkv.unbind(1)
    assert not q.is_contiguous()
    do = kt.randn((2, sum(lens), 32), dtype=dtype, device=DEVICE, seed=seed + 3).transpose(0, 1)
    assert not do.is_contiguous() and do.stride(-1) == 1
    _check(q, k, v, do, lens, lens, scale=0.2, causal=True, window=(6, -1), tag=f"packed {dtype}", max_extra=20)
    assert torch.equal(qkv, before)
    q2, k2, v2 = (t[..., :24] for t in (q, k, v))  # head-dim slices: the row is wider than the head dim
    _check(q2, k2, v2, do[..., :24], lens, lens, scale=0.2, softcap=3.0, tag=f"sliced {dtype}")


def test_matches_batched_kernels(seed, small_blocks):
    """Equal lengths: the packed call gives what the batched kernels give on the same data."""
    b, sq, sk, hq, hkv, d = 3, 18, 21, 4, 2, 16
    q, k, v, do = _packed([sq] * b, [sk] * b, hq, hkv, d, torch.float32, seed)
    args = (0.25, True, 7, -1, 1.0)
    cu_q, cu_k = _cu([sq] * b), _cu([sk] * b)
    out, lse = ta.attention_varlen_fwd(q, k, v, cu_q, cu_k, sq, sk, *args)
    grads = ta.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, sq, sk, *args)
    qb, kb, vb, dob = (t.view(b, -1, *t.shape[1:]) for t in (q, k, v, do))
    out_b, lse_b = ta.attention_fwd(qb, kb, vb, *args, sk - sq)
    grads_b = ta.attention_bwd(dob, qb, kb, vb, out_b, lse_b, *args, sk - sq)
    torch.testing.assert_close(out, out_b.view_as(out), rtol=0, atol=0)
    torch.testing.assert_close(lse, lse_b.permute(1, 0, 2).reshape(hq, -1), rtol=0, atol=0)
    for g, gb in zip(grads, grads_b):
        torch.testing.assert_close(g, gb.view_as(g), rtol=0, atol=0)


def test_no_keys_anywhere_and_no_rows_that_see(seed, small_blocks):
    """Every row of a len_k = 0 sequence, and rows a window shuts out, give 0 / -inf and no gradient."""
    lens_q, lens_k = [20, 6], [0, 3]
    q, k, v, do = _packed(lens_q, lens_k, 2, 1, 16, torch.float32, seed)
    out, lse, (dq, dk, dv) = _check(q, k, v, do, lens_q, lens_k, scale=0.3, causal=True)
    assert (out[:20] == 0).all() and torch.isneginf(lse[:, :20]).all() and (dq[:20] == 0).all()
    assert (out[20:23] == 0).all() and torch.isneginf(lse[:, 20:23]).all()  # above the diagonal
    # every k sequence empty: total_k = 0
    q, _, _, do = _packed([5, 7], [0, 0], 2, 1, 16, torch.float32, seed)
    k = v = torch.empty((0, 1, 16), device=DEVICE)
    out, lse, (dq, dk, dv) = _run(q, k, v, do, [5, 7], [0, 0], 0.3, False, (-1, -1), 0.0)
    assert (out == 0).all() and torch.isneginf(lse).all() and (dq == 0).all() and dk.shape == (0, 1, 16)
    # every q sequence empty: total_q = 0, keys get zero gradients
    q, k, v, do = _packed([0, 0], [4, 9], 2, 1, 16, torch.float32, seed)
    out, lse, (dq, dk, dv) = _run(q, k, v, do, [0, 0], [4, 9], 0.3, True, (-1, -1), 0.0)
    assert out.shape == (0, 2, 16) and lse.shape == (2, 0) and (dk == 0).all() and (dv == 0).all()


def test_backward_is_deterministic(seed, small_blocks):
    lens_q, lens_k = [17, 0, 30], [12, 5, 33]
    q, k, v, do = _packed(lens_q, lens_k, 4, 2, 32, torch.float32, seed)
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    args = (0.2, False, 4, 3, 1.0)
    out, lse = ta.attention_varlen_fwd(q, k, v, cu_q, cu_k, 30, 33, *args)
    first = ta.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, 30, 33, *args)
    second = ta.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, 30, 33, *args)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_default_block_table(seed):
    """The shipped table (64-row blocks): a sequence longer than a block beside short and empty ones."""
    lens_q, lens_k = [70, 5, 0, 9], [66, 0, 4, 80]
    q, k, v, do = _packed(lens_q, lens_k, 2, 1, 16, torch.float32, seed)
    _check(q, k, v, do, lens_q, lens_k, scale=0.25, causal=True, window=(40, 0), softcap=2.0, tag="default blocks")


@pytest.mark.parametrize("causal, window, softcap",
                         [(False, (40, 35), 0.0), (True, (60, 0), 1.5), (True, (-1, -1), 0.0), (False, (-1, 37), 0.0)],
                         ids=str)  # fmt: skip
def test_wide_windows_and_block_shapes(causal, window, softcap, seed, block_shapes):
    """Windows wide enough for whole tiles between masked ones, each sequence with its own diagonal,
    BLOCK_M = BLOCK_N and != both ways."""
    lens_q, lens_k = [70, 0, 45, 90, 20], [90, 9, 61, 70, 0]
    q, k, v, do = _packed(lens_q, lens_k, 2, 1, 16, torch.float32, seed)
    _check(q, k, v, do, lens_q, lens_k, scale=0.3, causal=causal, window=window, softcap=softcap,
           tag=f"{causal} {window} {softcap}")  # fmt: skip
