"""kp_core.testing: the harness every kp package's tests use.

* the float64 oracle: `rel_error`, `assert_matches_oracle` (per-dtype bound, and <= 2x torch's own
  low-precision error + eps);
* inputs: `randn` (fresh, seeded, never zeros), `poisoned` outputs, `row_strided` / `column_major`
  views, `shapes_2d` with empty, odd and prime sizes;
* PyTorch integration: `opcheck`, `compiled` (fullgraph), `graph_captured`;
* pytest: markers gpu / large / slow / distributed and the `seed` fixture (opt-in: `pytest_plugins = ("kp_core.testing.pytest_plugin",)` in a conftest).
"""
from .inputs import (
    ODD_SIZES,
    ROW_COUNTS,
    column_major,
    devices,
    free_bytes,
    generator,
    poison_allocator,
    poisoned,
    randn,
    row_strided,
    seed_from,
    shapes_2d,
)
from .oracle import REL_ERROR_BOUND, assert_matches_oracle, rel_error
from .torch_checks import compiled, graph_captured, opcheck

__all__ = [
    "ODD_SIZES",
    "REL_ERROR_BOUND",
    "ROW_COUNTS",
    "assert_matches_oracle",
    "column_major",
    "compiled",
    "devices",
    "free_bytes",
    "generator",
    "graph_captured",
    "opcheck",
    "poison_allocator",
    "poisoned",
    "randn",
    "rel_error",
    "row_strided",
    "seed_from",
    "shapes_2d",
]
