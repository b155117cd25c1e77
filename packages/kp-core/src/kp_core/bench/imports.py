"""The imports of a benchmark script: the package it measures, or an exit that says how to install
it; and optional baselines (Liger, QuACK, ...), whose rows are skipped with the reason when the
baseline is missing instead of failing the run."""
from __future__ import annotations

import importlib
import site
from typing import Optional


def require(module: str, script: str, install: str):
    """Import the package a benchmark measures, or exit with the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise SystemExit(f"{script}: {module} is not importable ({e}). Install it first, e.g. `{install}`.") from None


def optional(label: str, *specs: str, site_dir: Optional[str] = None):
    """The objects `"module:name"` of an optional baseline and None, or Nones and why it is missing.

    `site_dir`: a folder to add with `site.addsitedir` first (where a carried baseline was unpacked).
    """
    try:
        if site_dir:
            site.addsitedir(site_dir)
        found = []
        for spec in specs:
            module, _, name = spec.partition(":")
            found.append(getattr(importlib.import_module(module), name))
        return tuple(found), None
    except Exception as e:  # any failure to import a baseline only skips its rows
        return (None,) * len(specs), f"{label} not available: {type(e).__name__}: {e}"
