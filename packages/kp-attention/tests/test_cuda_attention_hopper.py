"""kp-attention's Hopper forward (csrc/hopper_fwd*: TMA, wgmma, warp specialization; sm_90a) on an
H100 / H200: the dispatcher takes it at head dims 64 and 128 (the sm80 kernel keeps 96, 192, 256),
and it matches the float64 reference within 2x torch's own error over the sm80 suite's CASES, over
shapes long enough to run many key blocks through its shared-memory ring (mask-free middles, stage
wrap-around, the causal diagonal in several blocks), persistent CTAs walking several tiles each
(batched calls without mask or window), MQA with batch 1 (strides of size-1
dimensions), packed QKV read in place, and varlen with empty sequences and sequence ends inside a
block (the producer's cp.async path) and on block boundaries (TMA only). Outputs are NaN-poisoned.
The sm80 kernel, forced on the same inputs, gives the same answer within the same bounds."""
import math

import pytest
import torch
from kp_core import testing as kt

import kp_attention
from kp_attention import _cuda, reference

from test_cuda_attention import CASES, DTYPES, _check_lse, _packed, _qkv, _run_case

pytestmark = pytest.mark.gpu

HOPPER_HEAD_DIMS = [64, 128]

# Many key blocks (block_n 128): the ring of 2 stages wraps several times; lengths off any tile.
LONG_CASES = [
    ("long_causal", 1031, 1031, 4, 2, True, (-1, -1), 0.0),
    ("long_plain", 777, 1500, 2, 2, False, (-1, -1), 0.0),
    ("long_bottom_right", 1500, 777, 2, 1, True, (-1, -1), 0.0),  # rows 0..722 see nothing
    ("long_window", 1200, 1200, 2, 2, False, (300, 40), 0.0),
    ("long_window_causal", 1100, 1300, 2, 2, True, (257, 0), 0.0),
    ("long_softcap", 900, 1000, 2, 2, True, (-1, -1), 20.0),
    ("aligned_plain", 1024, 1024, 2, 2, False, (-1, -1), 0.0),  # every block mask-free
    ("aligned_causal", 1024, 2048, 2, 2, True, (-1, -1), 0.0),
]


def _on_hopper():
    return (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) and _cuda.NATIVE.loaded
            and _cuda.NATIVE.module.fwd_kernel(torch.cuda.current_device(), 128) == "sm90")  # fmt: skip


@pytest.fixture(autouse=True)
def _hopper_only():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper forward runs on sm_90 (H100, H200)")
    assert _cuda.NATIVE.loaded, _cuda.NATIVE.error


def test_dispatch_takes_the_hopper_kernel_on_sm90():
    mod, dev = _cuda.NATIVE.module, torch.cuda.current_device()
    for d in HOPPER_HEAD_DIMS:
        assert mod.fwd_kernel(dev, d) == "sm90", "an sm_90 device with a 90a build: the TMA / wgmma kernel"
    for d in (96, 192, 256):
        assert mod.fwd_kernel(dev, d) == "sm80", f"head_dim {d} has no Hopper tile: the sm80 kernel"
    assert sorted(mod.hopper_fwd_tiles()) == HOPPER_HEAD_DIMS
    for t in mod.hopper_fwd_tiles().values():
        assert t["smem_bytes"] <= 227 * 1024 and t["threads"] == 384
    with _cuda.force_sm80():
        assert mod.fwd_kernel(dev, 128) == "sm80"
    assert _on_hopper()


def _check(head_dim, dtype, case, seed, batch=2):
    _, sq, sk, hq, hkv, causal, window, softcap = case
    q, k, v = _qkv(batch, sq, sk, hq, hkv, head_dim, dtype, seed)
    out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=causal, window=window, softcap=softcap)
    assert out.shape == q.shape and out.dtype == dtype and out.is_contiguous()
    kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
    _check_lse(lse, want_lse)
    seen = torch.isfinite(want_lse).transpose(1, 2)
    assert (out[~seen] == 0).all(), "rows that see no key must be 0"
    return q, k, v, out, lse


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_forward_matches_the_oracle(head_dim, dtype, case, seed):
    _check(head_dim, dtype, case, seed)


@pytest.mark.parametrize("case", LONG_CASES, ids=[c[0] for c in LONG_CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_many_key_blocks(head_dim, dtype, case, seed):
    _check(head_dim, dtype, case, seed, batch=1)


@pytest.mark.parametrize("softcap", [0.0, 15.0])
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_persistent_ctas_walk_many_tiles(head_dim, softcap, seed):
    """Batched without causal mask or window: one persistent CTA an SM; 9 query blocks x 4 x 12
    heads = 432 tiles, 3-4 a CTA on 132 SMs (q reloaded behind q_empty, the k / v ring running on
    across tiles), a partial last query block and a ragged last key block in every head."""
    assert torch.cuda.get_device_properties(0).multi_processor_count < 432
    _check(head_dim, torch.bfloat16, ("persistent", 1100, 1000, 12, 4, False, (-1, -1), softcap), seed, batch=4)


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_sm80_kernel_agrees(head_dim, seed):
    """The same call through the forced sm80 kernel: both within the oracle's bounds, and close."""
    case = ("causal_gqa", 700, 900, 4, 2, True, (-1, -1), 0.0)
    q, k, v, out, lse = _check(head_dim, torch.bfloat16, case, seed)
    with _cuda.force_sm80():
        out80, lse80 = kp_attention.flash_attn(q, k, v, causal=True, return_lse=True, backend="cuda")
    fin = torch.isfinite(lse)
    assert torch.equal(fin, torch.isfinite(lse80))
    assert (lse[fin] - lse80[fin]).abs().max() < 1e-3
    assert (out.float() - out80.float()).abs().max() < 0.05


def test_mqa_batch_one_and_deterministic(seed):
    """batch 1 and one kv head: the size-1 dimensions' strides (0 from the Python level) stand in
    for TMA; two runs give the same bits."""
    q, k, v = _qkv(1, 515, 515, 8, 1, 128, torch.float16, seed)
    out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=True)
    kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
    _check_lse(lse, want_lse)
    again = kp_attention.flash_attn(q, k, v, causal=True, backend="cuda")
    assert torch.equal(out, again)


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_packed_qkv_strides_read_in_place(head_dim, seed):
    """q, k, v as slices of one projection (head strides d, row stride (hq + 2 hkv) d): TMA reads
    them in place, with the same bits as contiguous copies."""
    b, s, hq, hkv, d = 2, 403, 8, 2, head_dim
    qkv = kt.randn((b, s, (hq + 2 * hkv) * d), dtype=torch.bfloat16, device="cuda", seed=seed)
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hkv) * d].view(b, s, hkv, d)
    v = qkv[..., (hq + hkv) * d :].view(b, s, hkv, d)
    assert not q.is_contiguous() and _cuda._aligned(q) is q
    out = kp_attention.flash_attn(q, k, v, causal=True, backend="cuda")
    dense = kp_attention.flash_attn(q.contiguous(), k.contiguous(), v.contiguous(), causal=True, backend="cuda")
    assert torch.equal(out, dense)
    want, _ = reference.attention(q.double(), k.double(), v.double(), scale=d**-0.5, causal=True)
    kt.assert_matches_oracle(out, want, dtype=torch.bfloat16, name="out")


@pytest.mark.parametrize("lens", ["ragged", "aligned"])
@pytest.mark.parametrize("causal, window, softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                      (False, (100, 7), 0.0), (True, (-1, -1), 10.0)])  # fmt: skip
@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_varlen_with_empty_sequences(head_dim, causal, window, softcap, lens, seed):
    """Packed sequences: one without query rows, one without keys (0 and -inf), key ends inside a
    block (ragged: the producer's cp.async path, the last sequence's tail at the tensor's end) or
    on block boundaries (aligned: TMA only)."""
    if lens == "ragged":
        lens_q, lens_k = [5, 0, 130, 1, 333, 9, 700], [7, 3, 130, 40, 200, 0, 901]
    else:
        lens_q, lens_k = [128, 0, 256, 384, 64], [256, 128, 0, 512, 128]
    cu_q, cu_k, q, k, v = _packed(lens_q, lens_k, head_dim, seed)
    out, lse = kp_attention.flash_attn_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                              window=window, softcap=softcap, return_lse=True,
                                              backend="cuda")  # fmt: skip
    scale = head_dim**-0.5
    want, want_lse = reference.attention_varlen_fwd(q.double(), k.double(), v.double(), cu_q, cu_k, max(lens_q),
                                                    max(lens_k), scale, causal, *window, softcap)  # fmt: skip
    kt.assert_matches_oracle(out, want, dtype=torch.bfloat16, name="out")
    _check_lse(lse, want_lse)
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lk == 0 and lq > 0:
            rows = slice(int(cu_q[i]), int(cu_q[i + 1]))
            assert (out[rows] == 0).all() and torch.isinf(lse[:, rows]).all()


@pytest.mark.parametrize("head_dim", HOPPER_HEAD_DIMS)
def test_seqlen_4k_causal_and_not(head_dim, seed):
    """The acceptance shape (seqlen 4096), one head pair: 32 key blocks a CTA."""
    for causal in (False, True):
        q, k, v = _qkv(1, 4096, 4096, 2, 1, head_dim, torch.bfloat16, seed)
        out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=causal)
        kt.assert_matches_oracle(out, want, torch_out=theirs, name="out")
        _check_lse(lse, want_lse)


def test_scale_signs(seed):
    for scale in (-0.3, 0.0, 1.5):
        q, k, v = _qkv(1, 300, 400, 2, 2, 128, torch.bfloat16, seed)
        out, lse, want, want_lse, theirs = _run_case(q, k, v, causal=False, scale=scale)
        kt.assert_matches_oracle(out, want, torch_out=theirs, name=f"out (scale {scale})")
        _check_lse(lse, want_lse)
        assert not math.isnan(float(out.float().sum()))
