"""What a benchmark case is: one op at one size, with every implementation to time on it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Impl:
    """One implementation of a case's op.

    `run(*args)` is what gets timed. `setup(*inputs)`, when given, runs untimed once per input set
    and returns the tuple `run` receives: a backward case uses it to build the forward graph, so
    only `autograd.grad` is timed.
    """

    run: Callable[..., Any]
    setup: Callable[..., tuple] | None = None


@dataclass(frozen=True)
class Case:
    """One row group of a report.

    op:          the table / plot the case belongs to ("rms_norm_fwd").
    label:       short text for progress lines ("hidden=4096").
    params:      the case's parameters; they become table columns and the plot's x axis.
    make_inputs: returns one fresh input set (a tuple, or a single tensor); the runner calls it
                 several times to rotate inputs, so repeated calls do not hit the L2.
    impls:       name -> callable(*inputs) or `Impl`. Names starting with "kp" are kp's own; all
                 others are baselines the kp rows are compared with.
    bytes/flops: the work of one call, for GB/s and TFLOP/s (the op's minimal traffic, not what
                 a given implementation happens to move).
    ceiling:     "copy" or "gemm": the measured ceiling the % column refers to; None for none.
    host_timing: also measure host (CPU) time per call, for launch-bound sizes.
    sustained:   also time windows of back-to-back calls, the impls in turn (timing.sustained_ms):
                 for compute-bound ops that real use runs back to back (training steps, prefill),
                 where the power limit, not the clock's ceiling, sets the speed.
    sweep:       the params key on the plot's x axis; default: the first key whose value varies
                 over the op's cases.
    """

    op: str
    label: str
    params: Mapping[str, Any]
    make_inputs: Callable[[], Any]
    impls: Mapping[str, Callable[..., Any] | Impl]
    bytes: int | None = None
    flops: int | None = None
    ceiling: str | None = None
    host_timing: bool = False
    sustained: bool = False
    sweep: str | None = None

    def impl(self, name: str) -> Impl:
        fn = self.impls[name]
        return fn if isinstance(fn, Impl) else Impl(run=fn)


def is_kp(impl_name: str) -> bool:
    """kp's own implementations are named "kp" or "kp-<something>"; everything else is a baseline."""
    return impl_name == "kp" or impl_name.startswith("kp-")
