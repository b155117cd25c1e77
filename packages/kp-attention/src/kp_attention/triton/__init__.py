"""The Triton level of exact attention: `attention.attention_fwd` and `attention.attention_bwd`
(FlashAttention-2 style, fp32 accumulation, deterministic backward). Importing this package does
not import Triton; import `kp_attention.triton.attention` for the kernels."""
