"""`kp_core.patch(model)`: swap every module an installed kp package can serve for its kp twin.

kp-core knows no kernel package. Each package registers a *patcher* under the entry-point group
`kp_core.patches` (in its pyproject.toml):

    [project.entry-points."kp_core.patches"]
    kp_norm = "kp_norm.patch:patch_norms"

A patcher is `fn(model, *, option=default, ...) -> PatchReport`: it swaps modules in place and
returns what it did; `report.model` is the (possibly new) root. Its keyword-only parameters are the
options it understands, so `patch()` can reject a misspelt option instead of ignoring it.

(This file is not called patch.py: `kp_core.patch` is the function, and a submodule of the same
name would be shadowed by it.)
"""
from __future__ import annotations

import collections
import importlib.metadata as md
import inspect
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Optional, Union

GROUP = "kp_core.patches"
log = logging.getLogger("kp_core.patch")


@dataclass(frozen=True)
class Swap:
    """One module replaced. A module shared by several parents is one Swap with several names."""

    name: str  # where it sits in the model, e.g. "model.layers.0.input_layernorm" ("" for the root)
    old: str  # the original class, e.g. "LlamaRMSNorm"
    new: str  # the kp class, e.g. "kp_norm.RMSNorm"
    detail: str = ""  # what was chosen for it, e.g. "rounding='llama'"
    aliases: tuple = ()  # the other names of a shared module
    package: str = ""


@dataclass(frozen=True)
class Skip:
    """A module that looked servable but was left alone, and why."""

    name: str
    cls: str
    reason: str
    package: str = ""


@dataclass
class PatchReport:
    """What `kp_core.patch` (or one package's patcher) swapped and skipped.

    `model` is the patched model: the object passed in, unless the root module itself was swapped.
    """

    model: Any = None
    swaps: list = field(default_factory=list)
    skips: list = field(default_factory=list)
    patchers: list = field(default_factory=list)  # names of the patchers that ran, in order

    @property
    def swapped(self) -> dict:
        """Count of swapped modules by original class: {"LlamaRMSNorm": 5, ...}."""
        return dict(collections.Counter(s.old for s in self.swaps))

    @property
    def skipped(self) -> list:
        """[(name, class, reason), ...] of the modules left alone."""
        return [(s.name, s.cls, s.reason) for s in self.skips]

    def __len__(self) -> int:
        return len(self.swaps)

    def merge(self, other: "PatchReport", package: str = "") -> "PatchReport":
        """Append another report (tagging its entries with `package` where they have none)."""
        tag = (lambda e: replace(e, package=package) if package and not e.package else e)
        self.swaps += [tag(s) for s in other.swaps]
        self.skips += [tag(s) for s in other.skips]
        self.patchers += [package] if package else other.patchers
        if other.model is not None:
            self.model = other.model
        return self

    def __str__(self) -> str:
        ran = ", ".join(self.patchers) or "no patchers"
        lines = [f"kp patch ({ran}): {len(self.swaps)} module(s) swapped, {len(self.skips)} skipped"]
        # Swaps grouped by what they became: a 32-layer model is a few lines, not a hundred.
        groups = collections.Counter((s.old, s.new, s.detail) for s in self.swaps)
        for (old, new, detail), n in sorted(groups.items()):
            lines.append(f"  swapped {n:4d} x {old} -> {new}" + (f" ({detail})" if detail else ""))
        lines += [f"  {line}" for line in self.skip_lines()]
        return "\n".join(lines)

    def skip_lines(self) -> list:
        """One line per (class, reason) skipped: a model's 40 gated norms are one line."""
        groups = collections.defaultdict(list)
        for s in self.skips:
            groups[(s.cls, s.reason)].append(s.name or "<root>")
        out = []
        for (cls, reason), names in groups.items():
            where = names[0] if len(names) == 1 else f"{len(names)} x {cls} ({names[0]} and {len(names) - 1} more)"
            out.append(f"skipped {where}" + (f" ({cls})" if len(names) == 1 else "") + f": {reason}")
        return out

    def __repr__(self) -> str:
        return f"PatchReport(swapped={self.swapped}, skipped={len(self.skips)}, patchers={self.patchers})"


Patcher = Callable[..., PatchReport]


def _entry_points() -> list:
    return list(md.entry_points(group=GROUP))


def registered() -> list:
    """[(name, "module:function"), ...] of the installed patchers, in the order patch() runs them."""
    return sorted((ep.name, ep.value) for ep in _entry_points())


def _discover(report: PatchReport) -> list:
    found = []
    for ep in sorted(_entry_points(), key=lambda ep: ep.name):
        try:
            found.append((ep.name, ep.load()))
        except Exception as e:  # one broken package must not stop the others from patching
            reason = f"its patcher {ep.value!r} failed to load: {type(e).__name__}: {e}"
            report.skips.append(Skip(ep.name, "patcher", reason, ep.name))
            warnings.warn(f"kp_core.patch: package {ep.name}: {reason}", RuntimeWarning, stacklevel=3)
    return found


def _named(patchers: Union[Mapping[str, Patcher], Iterable[Patcher]]) -> list:
    if isinstance(patchers, Mapping):
        return list(patchers.items())
    if callable(patchers):
        patchers = [patchers]
    return [((getattr(fn, "__module__", None) or "patcher").split(".")[0], fn) for fn in patchers]


def _options_of(fn: Patcher) -> set:
    """The option names a patcher declares: its keyword-only parameters."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def patch(
    model,
    *,
    patchers: Optional[Union[Mapping[str, Patcher], Iterable[Patcher]]] = None,
    verbose: bool = False,
    **options,
) -> PatchReport:
    """Swap, in place, every module of `model` that an installed kp package can serve.

    The patchers registered under the `kp_core.patches` entry-point group run in the order of their
    names; `patchers=` (a list of functions, or {name: function}) runs those instead, in the order
    given. `options` go to each patcher that declares them (e.g. kp-norm's `hf_rounding=True`,
    `backend="reference"`); a name no patcher declares raises TypeError. The report is logged at
    INFO on the `kp_core.patch` logger (each skipped module at WARNING), and printed with
    `verbose=True`. The patched model is
    `report.model` (the same object as `model` unless the root itself was swapped).
    """
    report = PatchReport(model=model)
    found = _named(patchers) if patchers is not None else _discover(report)
    accepted = {name: _options_of(fn) for name, fn in found}
    valid = sorted(set().union(*accepted.values()))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        who = ", ".join(name for name, _ in found) or "none installed"
        raise TypeError(
            f"kp_core.patch() got unknown option(s) {', '.join(map(repr, unknown))}; the patchers "
            f"({who}) accept: {', '.join(valid) or 'no options'} (and patchers=, verbose=)"
        )
    if not found:
        warnings.warn(
            f"kp_core.patch: no kp package registers a patcher (entry-point group {GROUP!r}): nothing "
            "was swapped. Install a kp kernel package, or pass patchers=[...]",
            RuntimeWarning,
            stacklevel=2,
        )
    for name, fn in found:
        part = fn(report.model, **{k: v for k, v in options.items() if k in accepted[name]})
        if not isinstance(part, PatchReport):
            raise TypeError(f"kp_core.patch: patcher {name} returned {type(part).__name__}, not a PatchReport")
        report.merge(part, package=name)
    log.info("%s", report)
    for line in report.skip_lines():  # what the user may have expected swapped: said even without INFO logging
        log.warning("kp_core.patch: %s", line)
    if verbose:
        print(report)
    return report
