"""kp-attention's CUDA backward (csrc/bwd*.cu) on a GPU: dq, dk, dv against float64 autograd of the
reference for every head dim and both 16-bit dtypes, over the forward's cases (causal bottom-right
with rows that see no key, sliding windows, softcap, GQA, lengths that are not multiples of any
tile, a single query row or key), both dq paths (fp32 atomics; the deterministic dq kernel, bit-
identical run to run), varlen with empty sequences, non-contiguous grad_output, negative / zero
scales; within 2x torch's own error in the same dtype; outputs poisoned with NaN first."""
import math

import pytest
import torch
from kp_core import testing as kt

import kp_attention
from kp_attention import _cuda, reference

# The forward's CASES (name, seqlen_q, seqlen_k, heads_q, heads_kv, causal, window, softcap): their
# lengths cross the backward's tiles too (block_m 64, block_n 64 / 128, dq block_n 32 / 64).
from test_cuda_attention import CASES, DTYPES, HEAD_DIMS

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _native():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not _cuda.NATIVE.loaded:
        pytest.fail(f"kp_attention._C did not load: {_cuda.NATIVE.error}")
    problem = _cuda._bwd_problem(torch.empty(1, 1, 1, 256, device="cuda"))
    if problem is not None and "shared memory" in problem:
        pytest.skip(problem)  # sm_86 / sm_89: the backward passes to Triton at large head dims


def _qkv(b, sq, sk, hq, hkv, d, dtype, seed):
    q = kt.randn((b, sq, hq, d), dtype=dtype, device="cuda", seed=seed)
    k = kt.randn((b, sk, hkv, d), dtype=dtype, device="cuda", seed=seed + 1)
    v = kt.randn((b, sk, hkv, d), dtype=dtype, device="cuda", seed=seed + 2)
    do = kt.randn((b, sq, hq, d), dtype=dtype, device="cuda", seed=seed + 3)
    return q, k, v, do


def _oracle(q, k, v, do, *, scale, causal, window, softcap, diagonal):
    """float64 autograd of the reference formula: (dq, dk, dv)."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    out, _ = reference.attention(q64, k64, v64, scale=scale, causal=causal, window=window, softcap=softcap,
                                 diagonal=diagonal)  # fmt: skip
    return torch.autograd.grad(out, (q64, k64, v64), do.double())


def _torch_grads(q, k, v, do, *, scale, causal, window, softcap, diagonal):
    """torch's own attention backward in q's dtype (eager: scores from a 16-bit matmul, softcap and
    softmax in fp32, P rounded to q's dtype; GQA through repeat_interleave, whose backward sums the
    group). Rows that see no key get zero output (and so zero gradients), as kp's contract says."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    qt = q.transpose(1, 2)
    kt_, vt = (t.transpose(1, 2).repeat_interleave(group, 1) for t in (k, v))
    s = (qt @ kt_.transpose(-1, -2)).float() * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    mask = reference.visible(q.shape[1], k.shape[1], causal=causal, window=window, diagonal=diagonal, device=q.device)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(torch.float32).min)
    p = torch.softmax(s, dim=-1)
    if mask is not None:
        p = p * mask.any(-1, keepdim=True)
    out = (p.to(q.dtype) @ vt).transpose(1, 2)
    return torch.autograd.grad(out, (q, k, v), do)


def _varlen_oracle(q, k, v, do, cu_q, cu_k, scale, causal, window, softcap):
    """A packed call's (want, theirs) for _check: _oracle's and _torch_grads' (dq, dk, dv) of each
    sequence on its own (its own bottom-right diagonal), in place in [total, heads, d] buffers; a
    sequence without query rows or keys adds nothing (zeros)."""
    want = [torch.zeros(t.shape, dtype=torch.float64, device=q.device) for t in (q, k, v)]
    theirs = [torch.zeros(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v)]
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 == q0 or k1 == k0:
            continue
        opts = dict(scale=scale, causal=causal, window=window, softcap=softcap, diagonal=(k1 - k0) - (q1 - q0))
        sl = (q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], do[None, q0:q1])
        for acc, got in ((want, _oracle(*sl, **opts)), (theirs, _torch_grads(*sl, **opts))):
            acc[0][q0:q1] += got[0][0]
            acc[1][k0:k1] += got[1][0]
            acc[2][k0:k1] += got[2][0]
    return want, theirs


def _poison(*shapes_and_dtypes):
    kt.poison_allocator("cuda", [math.prod(s) * torch.tensor([], dtype=d).element_size() for s, d in shapes_and_dtypes])


def _check(grads, want, theirs, dtype, what=""):
    for name, g, w, t in zip(("dq", "dk", "dv"), grads, want, theirs):
        assert g.dtype == dtype and g.shape == w.shape and g.is_contiguous(), name
        assert torch.isfinite(g).all(), f"{what}{name}: NaN / inf"
        kt.assert_matches_oracle(g, w, torch_out=t, name=f"{what}{name}")


def _level_bwd(q, k, v, do, *, scale, causal, window, softcap, diagonal, deterministic):
    """The CUDA forward, then the CUDA backward called directly (either dq path), outputs poisoned."""
    out, lse = _cuda.attention_fwd(q, k, v, scale, causal, *window, softcap, diagonal)
    _poison((q.shape, q.dtype), (k.shape, q.dtype), (k.shape, q.dtype), (q.shape, torch.float32))
    return _cuda.attention_bwd(do, q, k, v, out, lse, scale, causal, *window, softcap, diagonal,
                               deterministic=deterministic)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_gradients_match_the_oracle(head_dim, dtype, case, seed):
    """Through the public function and autograd (the atomic dq path), and the deterministic path at
    the level: both within 2x torch's own error."""
    _, sq, sk, hq, hkv, causal, window, softcap = case
    q, k, v, do = _qkv(2, sq, sk, hq, hkv, head_dim, dtype, seed)
    scale, diagonal = head_dim**-0.5, sk - sq
    opts = dict(scale=scale, causal=causal, window=window, softcap=softcap, diagonal=diagonal)
    want = _oracle(q, k, v, do, **opts)
    theirs = _torch_grads(q, k, v, do, **opts)

    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = kp_attention.flash_attn(qg, kg, vg, causal=causal, window=window, softcap=softcap, backend="cuda")
    _poison((q.shape, dtype), (k.shape, dtype), (k.shape, dtype), (q.shape, torch.float32))
    grads = torch.autograd.grad(out, (qg, kg, vg), do)
    _check(grads, want, theirs, dtype, "atomic ")

    det = _level_bwd(q, k, v, do, deterministic=True, **opts)
    _check(det, want, theirs, dtype, "deterministic ")


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_deterministic_is_bit_identical_run_to_run(head_dim, dtype, seed):
    q, k, v, do = _qkv(2, 517, 517, 8, 2, head_dim, dtype, seed)
    opts = dict(scale=head_dim**-0.5, causal=True, window=(-1, -1), softcap=0.0, diagonal=0)
    first = _level_bwd(q, k, v, do, deterministic=True, **opts)
    for _ in range(3):
        again = _level_bwd(q, k, v, do, deterministic=True, **opts)
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), f"{name} differs between runs"


def test_rows_without_keys_give_zero_gradients(seed):
    """Causal with seqlen_q > seqlen_k: the first rows see no key (lse = -inf); their dq is exactly 0
    and they add nothing to dk, dv (no NaN from exp(-inf - -inf))."""
    q, k, v, do = _qkv(1, 200, 40, 2, 1, 128, torch.bfloat16, seed)
    for det in (False, True):
        dq, dk, dv = _level_bwd(q, k, v, do, scale=0.125, causal=True, window=(-1, -1), softcap=0.0, diagonal=-160,
                                deterministic=det)  # fmt: skip
        assert (dq[:, :160] == 0).all()
        assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    # a window that leaves keys no row sees: their dk, dv are 0
    q, k, v, do = _qkv(1, 64, 300, 2, 2, 64, torch.float16, seed)
    dq, dk, dv = _level_bwd(q, k, v, do, scale=0.125, causal=False, window=(3, 3), softcap=0.0, diagonal=0,
                            deterministic=False)  # fmt: skip
    assert (dk[:, 70:] == 0).all() and (dv[:, 70:] == 0).all()


@pytest.mark.parametrize("scale", [-0.2, 0.0, 2.0])
@pytest.mark.parametrize("softcap", [0.0, 10.0])
def test_negative_zero_and_large_scales(scale, softcap, seed):
    q, k, v, do = _qkv(1, 77, 150, 2, 2, 64, torch.float16, seed)
    opts = dict(scale=scale, causal=True, window=(-1, -1), softcap=softcap, diagonal=150 - 77)
    want, theirs = _oracle(q, k, v, do, **opts), _torch_grads(q, k, v, do, **opts)
    for det in (False, True):
        grads = _level_bwd(q, k, v, do, deterministic=det, **opts)
        if scale == 0.0:  # uniform attention: dq = dk = 0 exactly
            assert (grads[0] == 0).all() and (grads[1] == 0).all()
            kt.assert_matches_oracle(grads[2], want[2], torch_out=theirs[2], name="dv")
        else:
            _check(grads, want, theirs, torch.float16, f"det={det} ")


def test_non_contiguous_grad_output(seed):
    """grad_output as a strided view (a slice of a wider tensor, and a transposed one): read in place or
    copied, the same bits as contiguous."""
    q, k, v, do = _qkv(2, 203, 203, 8, 2, 128, torch.bfloat16, seed)
    wide = kt.randn((2, 203, 8, 256), dtype=torch.bfloat16, device="cuda", seed=seed + 7)
    do_view = wide[..., 64:192]  # strides (203 * 2048, 2048, 256, 1)
    assert not do_view.is_contiguous()
    opts = dict(scale=128**-0.5, causal=True, window=(-1, -1), softcap=0.0, diagonal=0)
    strided = _level_bwd(q, k, v, do_view, deterministic=True, **opts)
    dense = _level_bwd(q, k, v, do_view.contiguous(), deterministic=True, **opts)
    for a, b in zip(strided, dense):
        assert torch.equal(a, b)
    # through autograd, a grad_output laid out heads-outermost (stride(-1) == 1, not contiguous)
    do_perm = do.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert not do_perm.is_contiguous() and torch.equal(do_perm, do)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = kp_attention.flash_attn(qg, kg, vg, causal=True, backend="cuda")
    grads = torch.autograd.grad(out, (qg, kg, vg), do_perm)
    want = _oracle(q, k, v, do, **opts)
    for name, g, w in zip(("dq", "dk", "dv"), grads, want):
        kt.assert_matches_oracle(g, w, dtype=torch.bfloat16, name=name)


@pytest.mark.parametrize("causal, window, softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                     (False, (20, 3), 0.0), (True, (-1, -1), 20.0)])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("deterministic", [False, True])
def test_varlen_with_empty_sequences(head_dim, causal, window, softcap, deterministic, seed):
    """Packed sequences crossing tiles, one without query rows (its keys: dk = dv = 0), one without
    keys (its rows: dq = 0), GQA; each sequence with its own bottom-right diagonal."""
    lens_q, lens_k = [5, 0, 130, 1, 333, 9], [7, 3, 130, 40, 200, 0]
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    hq, hkv, dtype = 4, 2, torch.bfloat16
    q = kt.randn((sum(lens_q), hq, head_dim), dtype=dtype, device="cuda", seed=seed)
    k = kt.randn((sum(lens_k), hkv, head_dim), dtype=dtype, device="cuda", seed=seed + 1)
    v = kt.randn((sum(lens_k), hkv, head_dim), dtype=dtype, device="cuda", seed=seed + 2)
    do = kt.randn((sum(lens_q), hq, head_dim), dtype=dtype, device="cuda", seed=seed + 3)
    scale = head_dim**-0.5
    out, lse = _cuda.attention_varlen_fwd(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), scale, causal, *window,
                                          softcap)  # fmt: skip
    _poison((q.shape, dtype), (k.shape, dtype), (k.shape, dtype), (q.shape, torch.float32))
    grads = _cuda.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, max(lens_q), max(lens_k), scale, causal,
                                       *window, softcap, deterministic=deterministic)  # fmt: skip
    want, theirs = _varlen_oracle(q, k, v, do, cu_q, cu_k, scale, causal, window, softcap)
    _check(grads, want, theirs, dtype)
    empty_q = slice(int(cu_k[1]), int(cu_k[2]))  # sequence 1: keys, no query row
    no_keys = slice(int(cu_q[-2]), int(cu_q[-1]))  # the last sequence: queries, no key
    assert (grads[1][empty_q] == 0).all() and (grads[2][empty_q] == 0).all()
    assert (grads[0][no_keys] == 0).all()


def test_native_backward_checks_raise_before_any_launch(seed):
    q, k, v, do = _qkv(1, 16, 16, 2, 2, 64, torch.float16, seed)
    out, lse = _cuda.attention_fwd(q, k, v, 0.125, False, -1, -1, 0.0, 0)
    dq, dk, dv, delta = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(lse)
    args = dict(k=k.data_ptr(), k_batch=0, k_row=128, k_head=64, v=v.data_ptr(), v_batch=0, v_row=128, v_head=64,
                out=out.data_ptr(), dout=do.data_ptr(), do_batch=0, do_row=128, do_head=64, lse=lse.data_ptr(),
                delta=delta.data_ptr(), dq_accum=0, dkv_accum=0, dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(),
                cu_q=0, cu_k=0, batch=1, seqlen_q=16, seqlen_k=16, total_q=0, total_k=0, heads_q=2, heads_kv=2, head_dim=64,
                scale=0.125, causal=False, left=-1, right=-1, softcap=0.0, diagonal=0, dtype=1, device=0,
                stream=torch.cuda.current_stream().cuda_stream)  # fmt: skip
    mod = _cuda.NATIVE.module
    with pytest.raises(ValueError, match="16-byte aligned"):
        mod.attention_bwd(q=q.data_ptr() + 2, q_batch=0, q_row=128, q_head=64, **args)
    with pytest.raises(ValueError, match="multiples of 8 elements"):
        mod.attention_bwd(q=q.data_ptr(), q_batch=0, q_row=130, q_head=64, **args)
    with pytest.raises(ValueError, match="head_dim 64, 96, 128, 192 and 256"):
        mod.attention_bwd(q=q.data_ptr(), q_batch=0, q_row=128, q_head=64, **{**args, "head_dim": 80})
    with pytest.raises(ValueError, match="float16 and bfloat16"):
        mod.attention_bwd(q=q.data_ptr(), q_batch=0, q_row=128, q_head=64, **{**args, "dtype": 0})


def test_tiles_as_the_module_reports_them():
    tiles = _cuda.NATIVE.module.bwd_tiles()
    assert sorted(tiles) == HEAD_DIMS
    for d, t in tiles.items():
        assert t["smem_bytes"] <= 163 * 1024 and t["dq_smem_bytes"] <= 163 * 1024  # sm_80's opt-in
