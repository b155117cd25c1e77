"""Tiny random-init Hugging Face models through kp_core.patch on a GPU: the issue-15 acceptance.

    python packages/kp-norm/tools/hf_acceptance.py [--device cuda]

For Llama, Mistral, Qwen3 and Gemma in bf16 (2 layers, hidden 64; no download) and each kp level
(auto, triton, reference): `kp_core.patch(model, hf_rounding=True)` through the installed
entry points; whether every norm was swapped, whether the logits equal the HF model's bit for bit,
whether one training step runs, and whether norm weights frozen before the swap stay frozen.
Exits non-zero when any of these fails.
"""
import argparse
import copy
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import kp_core  # noqa: E402
import kp_norm  # noqa: E402
from test_hf_models import ids, norms, tiny  # noqa: E402  (the test suite's model builders)


def check(family, backend, device):
    base = tiny(family, device=device)
    x = ids(device, batch=4, seq=32)
    with torch.no_grad():
        want = base(x).logits
    m = copy.deepcopy(base)
    n = len(norms(m, family))
    frozen = [mod.weight for mod in norms(m, family)[:2]]
    for p in frozen:
        p.requires_grad_(False)
    before = [p.clone() for p in frozen]
    report = kp_core.patch(m, hf_rounding=True, backend=backend)
    with torch.no_grad():
        got = m(x).logits
    m.train()
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    loss = torch.nn.functional.cross_entropy(m(x).logits.float().flatten(0, 1), x.flatten())
    loss.backward()
    trainable = [k.weight for k in m.modules() if isinstance(k, kp_norm.RMSNorm) and k.weight.requires_grad]
    opt.step()
    row = dict(
        swapped=sum(report.swapped.values()) == n and not report.skips,
        bit_equal=torch.equal(got, want),
        grads=all(p.grad is not None and torch.isfinite(p.grad).all() for p in trainable),
        frozen=all(p.grad is None and torch.equal(p, b) for p, b in zip(frozen, before)),
    )
    diff = (got.float() - want.float()).abs().max().item()
    print(f"{family:8s} {backend or 'auto':9s} swapped {sum(report.swapped.values())}/{n}  "
          + "  ".join(f"{k}={v}" for k, v in row.items()) + f"  max|diff|={diff:.3g}  loss={loss.item():.4f}")
    return all(row.values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    ok = True
    for family in ("llama", "mistral", "qwen3", "gemma"):
        for backend in (None, "triton", "reference"):
            if backend == "triton" and a.device == "cpu":
                continue
            ok &= check(family, backend, a.device)
    print("all held" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
