"""What a result was measured on: device, software versions, and the GPU's folder name."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from .timing import is_cuda

# Baselines whose versions matter for reading a result, besides kp's own (kp-core and every
# package registered under the `kp_core.packages` entry points).
_BASELINES = ("liger-kernel", "quack-kernels", "flash-attn", "flash-attn-4")
# Name tokens that say nothing about speed class: vendor, brand, memory size and type, form factor.
_NOISE = re.compile(r"^(nvidia|geforce|tesla|quadro|\d+gb|hbm\w*|sxm\d*)$")


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200', 'NVIDIA H100 PCIe' ->
    'h100-pcie', 'NVIDIA GeForce RTX 4090' -> 'rtx-4090'."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and not _NOISE.match(t)]
    return "-".join(tokens) or "gpu"


def describe(device: Any, repo: Path | None = None) -> dict[str, Any]:
    """The header of a result. `repo`: the checkout the benchmark script ran from (for `git`)."""
    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": _versions(),
        "git": _git_describe(repo or Path.cwd()),
    }
    if is_cuda(device):
        p = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=p.name, slug=gpu_slug(p.name), sm_count=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", l2_bytes=p.L2_cache_size,
                    memory_bytes=p.total_memory)
    else:
        info.update(gpu=None, slug="cpu", cpu=platform.processor() or platform.machine())
    return info


def _versions() -> dict[str, str]:
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "cuda": torch.version.cuda or "none"}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        v["triton"] = "not installed"
    if torch.backends.cudnn.is_available():
        v["cudnn"] = str(torch.backends.cudnn.version())
    kp = ["kp-core"] + sorted(ep.name.replace("_", "-") for ep in importlib.metadata.entry_points(group="kp_core.packages"))
    for dist in kp + list(_BASELINES):
        try:
            v[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return v


def _git_describe(repo: Path) -> str | None:
    # A GPU machine that gets a copy of the working tree may hold a stale .git; whoever sent the
    # tree knows the revision and can say so.
    if os.environ.get("KP_GIT_REV"):
        return os.environ["KP_GIT_REV"]
    try:
        r = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                           text=True, timeout=10, cwd=repo)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None
