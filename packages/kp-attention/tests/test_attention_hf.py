"""replace_attention on tiny Hugging Face models (random weights, built from configs: nothing is
downloaded): the same logits as transformers' eager attention, greedy decoding with a KV cache
gives the same tokens, and a training step runs. Skipped where transformers is not installed."""
import pytest
import torch

import kp_attention

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
    ref = getattr(transformers, model_cls)(config).eval()
    ref.set_attn_implementation("eager")
    kp = getattr(transformers, model_cls)(config).eval()
    kp.load_state_dict(ref.state_dict())
    return ref, kp_attention.replace_attention(kp)


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
