"""Session 34: do independent GEMMs on two streams fill each other's last-round tails?
bwd: dX on the current stream, dW on a side stream (after dP), joined; against serial.
fwd: GatedMLP as two M-chunks on two streams (G0 | G1, D0 | D1) against serial G then D."""
import statistics, sys, time
import torch
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
mod = _cuda.NATIVE.module
M = 8192
side = torch.cuda.Stream()


def paired(fns, rounds=30):
    names = list(fns)
    ev = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fns[k](); e.record()
            ev[k].append((s, e))
    torch.cuda.synchronize()
    return {k: statistics.median(s.elapsed_time(e) for s, e in v) for k, v in ev.items()}


def windows(fns, calls=30, rounds=2):
    names = list(fns)
    got = {k: [] for k in names}
    for r in range(rounds):
        for k in names + names[::-1]:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(calls):
                fns[k]()
            e.record(); e.synchronize()
            got[k].append(s.elapsed_time(e) / calls)
    return {k: statistics.median(v) for k, v in got.items()}


def fork():
    ev = torch.cuda.Event(); ev.record()
    side.wait_event(ev)


def join():
    torch.cuda.current_stream().wait_stream(side)


def bwd_serial(dy, x, w):
    return _cuda.linear_act_bwd(dy, x, w, None, "none", True, True, False)


def bwd_overlap(dy, x, w, dw_first=False):
    fork()
    if dw_first:
        with torch.cuda.stream(side):
            dx = _cuda.linear_act_bwd(dy, x, w, None, "none", True, False, False)[0]
        dw = _cuda.linear_act_bwd(dy, x, w, None, "none", False, True, False)[1]
    else:
        dx = _cuda.linear_act_bwd(dy, x, w, None, "none", True, False, False)[0]
        with torch.cuda.stream(side):
            dw = _cuda.linear_act_bwd(dy, x, w, None, "none", False, True, False)[1]
    join()
    return dx, dw


def bwd_torch(dy, x, w):
    return torch.mm(dy, w), torch.mm(dy.t(), x)


def report(title, t, flops, base):
    print(f"== {title}", flush=True)
    for k, v in t.items():
        print(f"  {k:22s} {v*1e3:9.1f} us {flops/v/1e9:6.1f} TF  x{t[base]/v:.3f} vs {base}", flush=True)


def check_bwd(dy, x, w):
    a = bwd_serial(dy, x, w); b = bwd_overlap(dy, x, w); c = bwd_overlap(dy, x, w, True)
    torch.cuda.synchronize()
    for p, q, r in zip(a, b, c):
        assert torch.equal(p, q) and torch.equal(p, r), "overlap changed the result"


def bwd_cases(hidden, inter):
    x_up = torch.randn(M, hidden, device=dev, dtype=dt)
    w_up = torch.randn(inter, hidden, device=dev, dtype=dt) / hidden**0.5
    dy_up = torch.randn(M, inter, device=dev, dtype=dt)
    x_dn = torch.randn(M, inter, device=dev, dtype=dt)
    w_dn = torch.randn(hidden, inter, device=dev, dtype=dt) / inter**0.5
    dy_dn = torch.randn(M, hidden, device=dev, dtype=dt)
    w_gu = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
    dy_gu = torch.randn(M, 2 * inter, device=dev, dtype=dt)
    for name, dy, x, w in (("up", dy_up, x_up, w_up), ("down", dy_dn, x_dn, w_dn), ("gate_up", dy_gu, x_up, w_gu)):
        n, k = w.shape
        check_bwd(dy, x, w)
        fns = {"torch.mm serial": lambda: bwd_torch(dy, x, w), "kp serial": lambda: bwd_serial(dy, x, w),
               "kp overlap dx|dw": lambda: bwd_overlap(dy, x, w), "kp overlap dw|dx": lambda: bwd_overlap(dy, x, w, True)}
        for f in fns.values():
            f()
        fl = 2 * 2 * M * n * k
        report(f"bwd {name} {hidden}/{inter} paired", paired(fns), fl, "kp serial")
        report(f"bwd {name} {hidden}/{inter} windows", windows(fns), fl, "kp serial")


def fwd_cases(hidden, inter, chunks=(2,)):
    x = torch.randn(M, hidden, device=dev, dtype=dt)
    w_gu = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
    w_dn = torch.randn(hidden, inter, device=dev, dtype=dt) / inter**0.5

    def serial():
        h, _ = _cuda.gated_linear_fwd(x, w_gu, None, "silu", False)
        return _cuda.linear_act_fwd(h, w_dn, None, "none")

    def chunked(c):
        xs = x.chunk(c)
        out = []
        fork()
        for i, xi in enumerate(xs):
            if i % 2:
                with torch.cuda.stream(side):
                    out.append(_cuda.gated_linear_fwd(xi, w_gu, None, "silu", False)[0])
            else:
                out.append(_cuda.gated_linear_fwd(xi, w_gu, None, "silu", False)[0])
        ys = []
        for i, hi in enumerate(out):
            if i % 2:
                with torch.cuda.stream(side):
                    ys.append(_cuda.linear_act_fwd(hi, w_dn, None, "none"))
            else:
                ys.append(_cuda.linear_act_fwd(hi, w_dn, None, "none"))
        join()
        return ys

    def torch_eager():
        gu = torch.mm(x, w_gu.t())
        g, u = gu.chunk(2, dim=1)
        return torch.mm(torch.nn.functional.silu(g) * u, w_dn.t())

    a = serial()
    for c in chunks:
        b = torch.cat(chunked(c))
        torch.cuda.synchronize()
        print(f"chunks {c}: max |serial - chunked| {float((a.float() - b.float()).abs().max()):.3g}")
    fns = {"torch eager": torch_eager, "kp serial": serial}
    for c in chunks:
        fns[f"kp {c} chunks 2 streams"] = lambda c=c: chunked(c)
    for f in fns.values():
        f()
    fl = 2 * M * hidden * 3 * inter
    report(f"fwd GatedMLP {hidden}/{inter} paired", paired(fns), fl, "kp serial")
    report(f"fwd GatedMLP {hidden}/{inter} windows", windows(fns), fl, "kp serial")


print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for hidden, inter in ((4096, 14336), (8192, 28672)):
    t0 = time.time()
    bwd_cases(hidden, inter)
    fwd_cases(hidden, inter, chunks=(2, 4))
    print(f"({time.time()-t0:.0f} s)", flush=True)
