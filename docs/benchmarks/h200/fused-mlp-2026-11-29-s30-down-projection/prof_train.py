"""Kernel-level profile (torch.profiler, CUDA activity) of one training step at 8192 tokens:
linear_act (up / down projection, SiLU) and GatedMLP (4096 / 14336), kp-cuda against torch.compile
of the unfused expression. Prints each kernel's device time for one step."""
import torch
from torch.profiler import profile, ProfilerActivity

from sustained import gated_mlp_steps, linear_steps  # beside this file


def profile_step(name, step):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in evs)
    print(f"== {name}: {len(evs)} kernels, {total:.0f} us of kernel time")
    for e in evs:
        print(f"   {e.device_time:8.1f} us  {e.name[:150]}")
    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        step()
    t.record()
    torch.cuda.synchronize()
    print(f"   back to back: {s.elapsed_time(t) / 10 * 1e3:.0f} us a step")



for k, n in ((14336, 4096), (4096, 14336)):
    for name, step in linear_steps(k, n).items():
        profile_step(f"{name} linear_act silu {k}->{n}", step)
for name, step in gated_mlp_steps()[0].items():
    profile_step(f"{name} GatedMLP", step)
