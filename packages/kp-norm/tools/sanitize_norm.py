"""Run every CUDA kernel path of kp-norm once, small, for compute-sanitizer (tools/gpu_check.sh).

Shapes cover the warp-per-row, block-per-row, cluster and multi-pass paths, the scalar (unaligned)
path, residuals and both norms; each call is checked so a sanitizer run also fails on wrong results.
"""
import torch
import torch.nn.functional as F

import kp_norm

SHAPES = [(3, 7), (5, 1024), (7, 3000), (2, 4099), (4, 4096), (2, 8192), (3, 16384), (2, 40008), (2, 65536), (1, 131072),
          (1, 262144), (2, 200000)]
# Hidden sizes of real models below 1K (QK-norm heads; the backward's warp teams of E = 8 and 16,
# whose 16-bit launch failed in 0.2.9), and two above.
SHAPES += [(6, 64), (64, 96), (6, 128), (9, 256), (5, 512), (3, 768), (4, 1536), (2, 5120), (2, 7168)]


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    for rows, cols in SHAPES:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            x = torch.randn(rows, cols, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            r = torch.randn(rows, cols, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            w = torch.randn(cols, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            b = torch.randn(cols, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
            y = kp_norm.rms_norm(x, w, backend="cuda")
            want = F.rms_norm(x.double(), (cols,), w.double(), torch.finfo(dtype).eps)
            assert (y.double() - want).norm() <= 2e-2 * want.norm(), (rows, cols, dtype)
            y.sum().backward()
            y = kp_norm.layer_norm(x, w, b, backend="cuda")
            want = F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)
            assert (y.double() - want).norm() <= 2e-2 * want.norm(), (rows, cols, dtype)
            y.float().sum().backward()  # db, no residual
            y, h = kp_norm.fused_add_layer_norm(x, r, w, b, backend="cuda")
            (y.float().sum() + h.float().sum()).backward()
            if dtype != torch.float32:  # fp32 weights of a 16-bit x (autocast): the kernels read them at run time
                wf = w.detach().float().requires_grad_(True)
                y = kp_norm.rms_norm(x, wf, backend="cuda")
                want = F.rms_norm(x.double(), (cols,), wf.double(), torch.finfo(dtype).eps)
                assert (y.double() - want).norm() <= 2e-2 * want.norm(), (rows, cols, dtype, "fp32 w")
                y.float().sum().backward()
    torch.cuda.synchronize()
    print("sanitize_norm: all paths ran")


if __name__ == "__main__":
    main()
