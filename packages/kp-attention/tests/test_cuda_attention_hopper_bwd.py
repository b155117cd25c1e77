"""kp-attention's Hopper backward (csrc/hopper_bwd*: TMA, wgmma, warp specialization; sm_90a) on an
H100 / H200: the dispatcher takes it at head dims 64 and 128 for the atomic dq path (the
deterministic path and the other head dims keep the sm80-class kernels); dq, dk, dv match float64
autograd of the reference within 2x torch's own error over shapes that run many query blocks
through its shared-memory ring (stage wrap-around, the causal diagonal inside a key block, the GQA
group loop, masked and mask-free blocks), varlen with key ends inside a block (the producer's
cp.async path) and on block boundaries, packed QKV read in place; and the forced sm80-class
backward agrees. The shared cases (test_cuda_attention_bwd.py) run through it too."""
import pytest
import torch
from kp_core import testing as kt

from kp_attention import _cuda

from test_cuda_attention_bwd import _check, _level_bwd, _oracle, _poison, _qkv, _torch_grads, _varlen_oracle

pytestmark = pytest.mark.gpu

HOPPER_HEAD_DIMS = [64, 128]

# (name, seqlen_q, seqlen_k, heads_q, heads_kv, causal, window, softcap): block_m 64 query rows a
# step, block_n 128 keys a CTA; lengths off any tile.
LONG_CASES = [
    ("long_causal_gqa", 1031, 1031, 8, 2, True, (-1, -1), 0.0),
    ("long_plain", 777, 1500, 2, 2, False, (-1, -1), 0.0),
    ("long_bottom_right", 1500, 777, 2, 1, True, (-1, -1), 0.0),  # rows 0..722 see nothing
    ("long_window", 1200, 1200, 2, 2, False, (300, 40), 0.0),
    ("long_window_causal", 1100, 1300, 4, 1, True, (257, 0), 0.0),
    ("long_softcap", 900, 1000, 2, 2, True, (-1, -1), 20.0),
    ("aligned_plain", 1024, 1024, 2, 2, False, (-1, -1), 0.0),  # every block mask-free
    ("aligned_causal", 1024, 2048, 2, 2, True, (-1, -1), 0.0),
]


@pytest.fixture(autouse=True)
def _hopper_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper backward runs on sm_90 (H100, H200)")
    assert _cuda.NATIVE.loaded, _cuda.NATIVE.error


def test_dispatch_takes_the_hopper_backward_on_sm90():
    mod, dev = _cuda.NATIVE.module, torch.cuda.current_device()
    for d in HOPPER_HEAD_DIMS:
        assert mod.bwd_kernel(dev, d) == "sm90"
    for d in (96, 192, 256):
        assert mod.bwd_kernel(dev, d) == "sm80", f"head_dim {d} has no Hopper tile"
    assert sorted(mod.hopper_bwd_tiles()) == HOPPER_HEAD_DIMS
    for t in mod.hopper_bwd_tiles().values():
        assert t["smem_bytes"] <= 227 * 1024 and t["threads"] == 384
    with _cuda.force_sm80():
        assert mod.bwd_kernel(dev, 128) == "sm80"
    assert mod.bwd_kernel(dev, 128) == "sm90"


def _case(head_dim, dtype, case, seed, batch=1, deterministic=False):
    _, sq, sk, hq, hkv, causal, window, softcap = case
    q, k, v, do = _qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed)
    opts = dict(scale=head_dim**-0.5, causal=causal, window=window, softcap=softcap, diagonal=sk - sq)
    grads = _level_bwd(q, k, v, do, deterministic=deterministic, **opts)
    _check(grads, _oracle(q, k, v, do, **opts), _torch_grads(q, k, v, do, **opts), dtype)
    return (q, k, v, do, opts), grads


@pytest.mark.parametrize("case", LONG_CASES, ids=[c[0] for c in LONG_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_many_query_blocks(head_dim, dtype, case, seed):
    _case(head_dim, dtype, case, seed)


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_sm80_backward_agrees(head_dim, seed):
    """The same call through the forced sm80-class backward: both within the oracle's bounds, and
    close to each other."""
    (q, k, v, do, opts), grads = _case(head_dim, torch.bfloat16, LONG_CASES[0], seed, batch=2)
    with _cuda.force_sm80():
        grads80 = _level_bwd(q, k, v, do, deterministic=False, **opts)
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads80):
        assert (a.float() - b.float()).abs().max() <= 0.02 * b.float().abs().max(), name


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_packed_qkv_strides_read_in_place(head_dim, seed):
    """q, k, v as slices of one projection and grad_output as a slice of a wider tensor: TMA reads
    them in place; the same gradients (within fp32 atomic order) as contiguous copies."""
    b, s, hq, hkv, d = 2, 403, 8, 2, head_dim
    qkv = kt.randn((b, s, (hq + 2 * hkv) * d), dtype=torch.bfloat16, device="cuda", seed=seed)
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hkv) * d].view(b, s, hkv, d)
    v = qkv[..., (hq + hkv) * d :].view(b, s, hkv, d)
    wide = kt.randn((b, s, hq, 2 * d), dtype=torch.bfloat16, device="cuda", seed=seed + 5)
    do = wide[..., d:]
    assert _cuda._aligned(q) is q and _cuda._aligned(do) is do
    opts = dict(scale=d**-0.5, causal=True, window=(-1, -1), softcap=0.0, diagonal=0)
    strided = _level_bwd(q, k, v, do, deterministic=False, **opts)
    dense = _level_bwd(q.contiguous(), k.contiguous(), v.contiguous(), do.contiguous(), deterministic=False, **opts)
    for name, a, c in zip(("dq", "dk", "dv"), strided, dense):
        assert (a.float() - c.float()).abs().max() <= 1e-2 * c.float().abs().max(), name
    _check(strided, _oracle(q, k, v, do, **opts), _torch_grads(q, k, v, do, **opts), torch.bfloat16)


@pytest.mark.parametrize("lens", ["ragged", "aligned"])
@pytest.mark.parametrize("causal, window, softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                      (False, (100, 7), 0.0), (True, (-1, -1), 10.0)])  # fmt: skip
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_varlen_key_ends_inside_and_on_blocks(head_dim, causal, window, softcap, lens, seed):
    """Packed sequences: one without query rows (dk = dv = 0), one without keys (dq = 0), key ends
    inside a block (ragged: cp.async, the last sequence's tail at the tensor's end) or on block
    boundaries (aligned: TMA only); GQA."""
    if lens == "ragged":
        lens_q, lens_k = [5, 0, 130, 1, 333, 9, 700], [7, 3, 130, 40, 200, 0, 901]
    else:
        lens_q, lens_k = [128, 0, 256, 384, 64], [256, 128, 0, 512, 128]
    _varlen_case(head_dim, lens_q, lens_k, causal, window, softcap, seed)


def _varlen_case(head_dim, lens_q, lens_k, causal, window, softcap, seed, hq=4, hkv=2):
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    dtype = torch.bfloat16
    q = kt.randn((sum(lens_q), hq, head_dim), dtype=dtype, device="cuda", seed=seed)
    k = kt.randn((sum(lens_k), hkv, head_dim), dtype=dtype, device="cuda", seed=seed + 1)
    v = kt.randn((sum(lens_k), hkv, head_dim), dtype=dtype, device="cuda", seed=seed + 2)
    do = kt.randn((sum(lens_q), hq, head_dim), dtype=dtype, device="cuda", seed=seed + 3)
    scale = head_dim**-0.5
    out, lse = _cuda.attention_varlen_fwd(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), scale, causal, *window,
                                          softcap)  # fmt: skip
    _poison((q.shape, dtype), (k.shape, dtype), (k.shape, dtype), (q.shape, torch.float32))
    grads = _cuda.attention_varlen_bwd(do, q, k, v, out, lse, cu_q, cu_k, max(lens_q), max(lens_k), scale, causal,
                                       *window, softcap, deterministic=False)  # fmt: skip
    want, theirs = _varlen_oracle(q, k, v, do, cu_q, cu_k, scale, causal, window, softcap)
    _check(grads, want, theirs, dtype)
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq == 0 and lk > 0:
            keys = slice(int(cu_k[i]), int(cu_k[i + 1]))
            assert (grads[1][keys] == 0).all() and (grads[2][keys] == 0).all()
        if lk == 0 and lq > 0:
            assert (grads[0][int(cu_q[i]) : int(cu_q[i + 1])] == 0).all()


# More tiles (key blocks x batch x kv heads x the GQA split) than SMs, so CTAs run in waves: 300-700
# tiles (132 SMs on an H100 / H200), mixing tiles without a query row (dK, dV zeros, no k, v load)
# with full ones. (A persistent variant that carried its ring from tile to tile ran these clean:
# session 26's journal.)
MANY_TILE_CASES = [  # (name, batch, seqlen_q, seqlen_k, heads_q, heads_kv, causal, window, softcap)
    ("plain", 12, 333, 333, 16, 16, False, (-1, -1), 0.0),
    ("causal_gqa_split", 8, 1100, 1100, 8, 2, True, (-1, -1), 0.0),
    ("keys_no_row_sees", 8, 300, 1300, 4, 4, True, (100, 0), 0.0),  # 7 of 11 key blocks: no rows
    ("softcap", 6, 500, 700, 8, 8, True, (-1, -1), 15.0),
]


@pytest.mark.parametrize("case", MANY_TILE_CASES, ids=[c[0] for c in MANY_TILE_CASES])
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_many_tiles(head_dim, case, seed):
    name, batch, *shape = case
    _case(head_dim, torch.bfloat16, (name, *shape), seed, batch=batch)


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_many_varlen_tiles(head_dim, seed):
    """60 packed sequences of 0-900 keys: most of the grid's key blocks lie past their sequence's end
    (skipped), the rest end inside or on a block."""
    gen = torch.Generator().manual_seed(seed)
    lens_q = torch.randint(0, 400, (60,), generator=gen).tolist()
    lens_k = torch.randint(0, 900, (60,), generator=gen).tolist()
    lens_q[3], lens_k[7], lens_k[11] = 0, 0, 256
    _varlen_case(head_dim, lens_q, lens_k, True, (-1, -1), 0.0, seed, hq=4, hkv=2)


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_seqlen_4k_causal_and_not(head_dim, seed):
    """The benchmark's length (seqlen 4096), GQA 4:1: 32 key blocks, 64 query blocks a head."""
    for causal in (False, True):
        _case(head_dim, torch.bfloat16, ("s4k", 4096, 4096, 4, 1, causal, (-1, -1), 0.0), seed)


def test_flash_attn_deterministic_reaches_the_cuda_backward(seed):
    """flash_attn(deterministic=True) at the CUDA level: the sm80-class dq kernel (no atomics), the
    same bits run to run, varlen too; deterministic=False: the Hopper kernel (atomics), within the
    oracle's bounds."""
    import kp_attention

    q, k, v, do = _qkv(2, 700, 700, 8, 2, 128, torch.bfloat16, seed)
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))

    def grads(det):
        out = kp_attention.flash_attn(qg, kg, vg, causal=True, deterministic=det, backend="cuda")
        return torch.autograd.grad(out, (qg, kg, vg), do)

    first = grads(True)
    for _ in range(2):
        for name, a, b in zip(("dq", "dk", "dv"), first, grads(True)):
            assert torch.equal(a, b), f"{name} differs between deterministic runs"
    opts = dict(scale=128**-0.5, causal=True, window=(-1, -1), softcap=0.0, diagonal=0)
    _check(grads(False), _oracle(q, k, v, do, **opts), _torch_grads(q, k, v, do, **opts), torch.bfloat16)
    cu = torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda")
    flat = [t[0].detach().clone().requires_grad_(True) for t in (q, k, v)]  # [700, heads, 128]
    runs = []
    for _ in range(2):
        out = kp_attention.flash_attn_varlen(*flat, cu, cu, 400, 400, causal=True, deterministic=True, backend="cuda")
        runs.append(torch.autograd.grad(out, flat, do[0]))
    for a, b in zip(*runs):
        assert torch.equal(a, b)
