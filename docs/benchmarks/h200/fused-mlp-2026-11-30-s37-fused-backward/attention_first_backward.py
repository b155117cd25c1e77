"""A fresh process whose first backward is kp-attention's Hopper backward, called through
torch.autograd.grad with the attention output as the root: the autograd thread's first CUDA work is
kp's (its TMA descriptors need the thread's context: kp::bind_context)."""
import torch
import kp_attention

torch.manual_seed(0)
q, k, v = (torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
dout = torch.randn(2, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)
out = kp_attention.flash_attn(q, k, v, causal=True, backend="cuda")
grads = torch.autograd.grad(out, (q, k, v), dout)
torch.cuda.synchronize()
ref = kp_attention.flash_attn(q, k, v, causal=True, backend="reference")
want = torch.autograd.grad(ref, (q, k, v), dout)
for name, g, w in zip("qkv", grads, want):
    err = ((g.float() - w.float()).norm() / w.float().norm()).item()
    print(f"d{name} rel err {err:.2e}")
    assert err < 2e-2, name
print("first backward on the autograd thread: ok")
