"""replace_attention on tiny Hugging Face models (random weights, built from configs: nothing is
downloaded): the same logits as transformers' eager attention, greedy decoding with a KV cache
gives the same tokens, and a training step runs. Skipped where transformers is not installed."""
import copy

import pytest
import torch

import kp_attention
from kp_core import testing as kt

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, attention_dropout=0.0)  # fmt: skip
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 1}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"sliding_window": 6, "attn_logit_softcapping": 3.0,
                                                      "head_dim": 16, "query_pre_attn_scalar": 16}),  # fmt: skip
}


def _pair(name, seed):
    config_cls, model_cls, extra = MODELS[name]
    if not hasattr(transformers, config_cls):
        pytest.skip(f"this transformers has no {config_cls}")
    config = getattr(transformers, config_cls)(**{**TINY, **extra})
    torch.manual_seed(seed)
    # each model its own config: set_attn_implementation writes to it, and a shared one would make
    # the eager reference run kp-attention too
    ref = getattr(transformers, model_cls)(copy.deepcopy(config)).eval()
    ref.set_attn_implementation("eager")
    kp = getattr(transformers, model_cls)(copy.deepcopy(config)).eval()
    kp.load_state_dict(ref.state_dict())
    kp = kp_attention.replace_attention(kp)
    assert ref.config._attn_implementation == "eager"
    return ref, kp


@pytest.mark.parametrize("name", list(MODELS))
def test_same_logits_and_tokens_as_eager(name, seed):
    ref, kp = _pair(name, seed)
    assert kp.config._attn_implementation == "kp_attention"
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want, got = ref(ids).logits, kp(ids).logits
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
    prompt = ids[:1, :4]
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(kp.generate(prompt, **kw), ref.generate(prompt, **kw))  # the KV cache's one-query steps


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_training_step(name, seed):
    _, kp = _pair(name, seed)
    kp.train()
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(seed))
    loss = kp(ids, labels=ids).loss
    loss.backward()
    grads = [p.grad for p in kp.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    torch.optim.SGD(kp.parameters(), lr=1e-2).step()
    assert torch.isfinite(kp(ids, labels=ids).loss)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_match_eager_on_the_real_tokens(side, seed):
    ref, kp = _pair("llama", seed)
    ids = torch.randint(1, 97, (3, 8), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(3, 8, dtype=torch.long)
    for row, pad in ((0, 3), (2, 1)):
        if side == "left":
            mask[row, :pad] = 0
        else:
            mask[row, 8 - pad:] = 0
    with torch.no_grad():
        want, got = ref(ids, attention_mask=mask).logits, kp(ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=2e-5, atol=2e-5)
    if side == "left":  # generation pads on the left: the cached steps see the padding mask too
        kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
        assert torch.equal(kp.generate(ids, attention_mask=mask, **kw), ref.generate(ids, attention_mask=mask, **kw))


def _llama(head_dim, seed, dtype=torch.float32, device="cpu"):
    """A two-layer Llama at a head dim the CUDA kernels serve (GQA 4:1), random weights."""
    heads = 512 // head_dim
    config = transformers.LlamaConfig(vocab_size=257, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                                      head_dim=head_dim, max_position_embeddings=1024, attention_dropout=0.0)  # fmt: skip
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def _copy(model, dtype, kp):
    twin = type(model)(copy.deepcopy(model.config)).to(device=model.device, dtype=dtype).eval()
    twin.load_state_dict(model.state_dict())
    if kp:
        return kp_attention.replace_attention(twin)
    twin.set_attn_implementation("eager")
    return twin


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss, torch.cat([p.grad.float().flatten() for p in model.parameters()])


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_llama_bf16_on_gpu_within_twice_torchs_error(backend, head_dim, seed):
    """bf16 logits and every parameter's gradient within 2x the error of transformers' own eager
    bf16 attention (the oracle: the same model in fp32, eager), 300 tokens (no tile multiple)."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from kp_core import use_backend

    oracle = _llama(head_dim, seed, device="cuda")
    oracle.set_attn_implementation("eager")
    eager16, kp16 = _copy(oracle, torch.bfloat16, kp=False), _copy(oracle, torch.bfloat16, kp=True)
    assert [m.config._attn_implementation for m in (oracle, eager16, kp16)] == ["eager", "eager", "kp_attention"]
    ids = torch.randint(0, 257, (2, 300), generator=torch.Generator().manual_seed(seed)).cuda()
    with torch.no_grad(), use_backend(backend):
        want, torch_out, got = (m(ids, use_cache=False).logits for m in (oracle, eager16, kp16))
    kt.assert_matches_oracle(got, want.double(), torch_out=torch_out, name="logits")
    for m in (oracle, eager16, kp16):
        m.train()
    with use_backend(backend):
        loss, got = _loss_and_grads(kp16, ids)
    _, want = _loss_and_grads(oracle, ids)
    _, torch_grads = _loss_and_grads(eager16, ids)
    kt.assert_matches_oracle(got, want.double(), dtype=torch.float32, bound=2e-2, torch_out=torch_grads,
                             name="gradients")  # fmt: skip
    torch.optim.SGD(kp16.parameters(), lr=1e-2).step()
    with torch.no_grad(), use_backend(backend):
        assert torch.isfinite(kp16(ids, labels=ids, use_cache=False).loss)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_llama_compiles_with_fullgraph(device, seed):
    """torch.compile(model, fullgraph=True) traces kp-attention without a graph break (no padding
    mask: the packed path's lengths are data) and gives the eager model's logits and a backward.
    CPU: aot_eager (the trace, without inductor's C++ build); GPU: inductor, bf16."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = kp_attention.replace_attention(_llama(64, seed, dtype=dtype, device=device))
    ids = torch.randint(0, 257, (2, 77), generator=torch.Generator().manual_seed(seed)).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    with torch.no_grad():
        want, got = model(ids, use_cache=False).logits, compiled(ids, use_cache=False).logits
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, want, **tol)
    assert model.config._attn_implementation == "kp_attention"
    model.train()
    loss = compiled(ids, labels=ids, use_cache=False).loss
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
