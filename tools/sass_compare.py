"""Compare the machine code of two builds of a native module, kernel by kernel.

    python tools/sass_compare.py OLD.so|OLD.whl NEW.so|NEW.whl [--strip NAMESPACE ...]

Dumps `cuobjdump -sass` of both (a wheel: its `_C*.so`), splits the dumps at each kernel,
demangles the names (c++filt), removes the namespaces given (code that moved between
namespaces keeps its identity; `(anonymous namespace)` always), and reports kernels only in one
build and kernels whose SASS differs. Identical SASS means identical kernels, performance
included: a refactoring that passes needs a GPU only for its host code. Runs without a GPU;
cuobjdump comes from the CUDA toolkit (or triton's bundled copy, found automatically).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile


def _cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton

        path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.path.exists(path):
            return path
    except ImportError:
        pass
    sys.exit("sass_compare: cuobjdump not found (install a CUDA toolkit, or triton)")


def _module(path: str, tmp: str) -> str:
    if not path.endswith(".whl"):
        return path
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if re.search(r"/_C[^/]*\.so$", n)]
        if len(names) != 1:
            sys.exit(f"sass_compare: {path} holds {len(names)} native modules, expected one")
        return z.extract(names[0], tmp)


def kernels(path: str, strip: list) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        dump = subprocess.run([_cuobjdump(), "-sass", _module(path, tmp)], capture_output=True, text=True, check=True).stdout
    bodies, name, lines = {}, None, []
    for line in dump.splitlines(keepends=True):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                bodies[name] = "".join(lines).rstrip()
            name, lines = m.group(1), []
        elif name is not None:
            if line.startswith(("Fatbin", "..........")):  # the end of a module: the next one's header follows
                bodies[name] = "".join(lines).rstrip()
                name, lines = None, []
                continue
            lines.append(" ".join(line.split()) + "\n")  # cuobjdump pads columns to the longest name
    if name:
        bodies[name] = "".join(lines).rstrip()
    names = list(bodies)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    pattern = re.compile("|".join([r"\(anonymous namespace\)::"] + [rf"\b{re.escape(ns)}::" for ns in strip]))
    return {pattern.sub("", d): bodies[n] for n, d in zip(names, demangled)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--strip", nargs="*", default=[], help="namespaces to ignore in kernel names (e.g. kp kp_norm)")
    args = ap.parse_args()
    a, b = kernels(args.old, args.strip), kernels(args.new, args.strip)
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    differ = sorted(n for n in set(a) & set(b) if a[n] != b[n])
    print(f"{len(a)} kernels in the old build, {len(b)} in the new; "
          f"{len(only_a)} only in the old, {len(only_b)} only in the new, {len(differ)} with different SASS")
    for tag, names in (("-", only_a), ("+", only_b), ("~", differ)):
        for n in names[:20]:
            print(f"  {tag} {n}")
    return 0 if not (only_a or only_b or differ) else 1


if __name__ == "__main__":
    raise SystemExit(main())
