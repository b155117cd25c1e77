"""Fresh, seeded, never-zero inputs; NaN-poisoned outputs; odd, empty and strided shapes."""
from __future__ import annotations

import zlib
from typing import Iterable, Optional, Sequence

import torch

# Sizes that catch tail handling, vector-width assumptions and power-of-two thinking.
ODD_SIZES = (1, 2, 3, 7, 31, 127, 257, 1000, 1023, 4099)
ROW_COUNTS = (0, 1, 3, 17, 64)


def seed_from(text: str) -> int:
    """A stable 31-bit seed from a test id, so a failure reproduces exactly."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def randn(
    shape: Sequence[int],
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int,
    scale: float = 1.0,
    shift: float = 0.0,
) -> torch.Tensor:
    """Normal samples * scale + shift, drawn on `device` with its own seeded generator."""
    device = torch.device(device)
    g = generator(seed, device)
    x = torch.randn(tuple(shape), generator=g, device=device, dtype=torch.float32)
    if scale != 1.0 or shift != 0.0:
        x.mul_(scale).add_(shift)
    return x.to(dtype)


def poisoned(shape: Sequence[int], *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """An output buffer full of NaN: any element a kernel forgets to write fails the check."""
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)


def row_strided(x: torch.Tensor, pad: int = 5) -> torch.Tensor:
    """The same values as `x` ([..., N]) in a view whose rows are `pad` elements apart (non-contiguous).

    The padding holds NaN so a kernel that reads past a row fails.
    """
    base = poisoned((*x.shape[:-1], x.shape[-1] + pad), dtype=x.dtype, device=x.device)
    view = base[..., : x.shape[-1]]
    view.copy_(x)
    return view


def column_major(x: torch.Tensor) -> torch.Tensor:
    """The same values as 2-D `x` with a non-unit last-dim stride (a transposed copy, transposed back)."""
    return x.t().contiguous().t()


def shapes_2d(rows: Iterable[int] = ROW_COUNTS, cols: Iterable[int] = ODD_SIZES) -> list:
    return [(r, c) for r in rows for c in cols]


def devices() -> list:
    """cpu always; cuda:0 and cuda:1 where present."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(min(torch.cuda.device_count(), 2))]
    return out


def free_bytes(device: Optional[torch.device | str] = None) -> int:
    if not torch.cuda.is_available():
        return 0
    return torch.cuda.mem_get_info(torch.device(device or "cuda"))[0]


def poison_allocator(device: torch.device | str, nbytes: Sequence[int]) -> None:
    """Fill the caching allocator's next blocks with 0xFF bytes (NaN in fp32/fp16/bf16).

    kp ops allocate their outputs with torch.empty; on CUDA those blocks come back from the
    allocator's cache, so poisoning it first makes an unwritten output element show up as NaN.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return
    blocks = [torch.full((max(int(n), 1),), 0xFF, dtype=torch.uint8, device=device) for n in nbytes]
    del blocks  # returned to the cache, still holding the poison
