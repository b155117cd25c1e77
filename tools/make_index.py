"""Turn a folder of built wheels and sdists into PEP 503 simple indexes, one per CUDA variant.

    python tools/make_index.py dist/cu130 [--out dist/index] [--variant cu130]

One index per CUDA variant the wheels were built for. `nox -s build` writes each variant's wheels
to dist/<variant>/ (KP_CUDA, tools/cuda_toolkit.py); given such a folder, the variant is its name
and the index lands beside the others' in dist/index/<variant>/ (any other folder: --variant,
default cu130, and DIST/index/<variant>/). Pure-Python wheels (kp-core) and sdists belong in every
variant. The result installs offline:

    pip install --index-url file:///abs/path/dist/index/cu130 kp-norm

which resolves kp-norm and kp-core from the folder and nothing else (torch must already be
installed: kp's wheels never replace it).
"""
from __future__ import annotations

import argparse
import hashlib
import html
import pathlib
import re
import shutil
import sys


VARIANT = r"cu\d{3}|cpu"  # a CUDA variant: cu130 (CUDA 13.0), cu128 ..., cpu (no CUDA level)


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    if filename.endswith(".whl"):
        return normalize(filename.split("-", 1)[0])
    m = re.match(r"(.+?)-\d", filename)  # sdist: name-version.tar.gz
    if not m:
        raise ValueError(f"cannot read a project name from {filename}")
    return normalize(m.group(1))


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_index(dist: pathlib.Path, out: pathlib.Path, variant: str) -> pathlib.Path:
    """Write out/<variant>/index.html and out/<variant>/<project>/index.html (files copied beside)."""
    root = out / variant
    if root.exists():
        shutil.rmtree(root)
    files = sorted(p for p in dist.iterdir() if p.is_file() and (p.name.endswith(".whl") or p.name.endswith(".tar.gz")))
    if not files:
        raise SystemExit(f"make_index: no wheels or sdists in {dist}")
    projects: dict = {}
    for f in files:
        projects.setdefault(project_of(f.name), []).append(f)
    for project, pfiles in sorted(projects.items()):
        pdir = root / project
        pdir.mkdir(parents=True)
        links = []
        for f in pfiles:
            shutil.copy2(f, pdir / f.name)
            href = f"{html.escape(f.name)}#sha256={_sha256(f)}"
            links.append(f'    <a href="{href}">{html.escape(f.name)}</a><br/>')
        (pdir / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n    <h1>Links for {project}</h1>\n" + "\n".join(links) + "\n</body></html>\n"
        )
    top = [f'    <a href="{p}/">{p}</a><br/>' for p in sorted(projects)]
    (root / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(top) + "\n</body></html>\n")
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dist", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, default=None, help="default: DIST/../index for dist/<variant>, else DIST/index")
    ap.add_argument("--variant", default=None, help="the CUDA variant these wheels were built for (cu130, cu129 ...; "
                    "default: DIST's name if it is one, else cu130)")
    args = ap.parse_args(argv)
    named = re.fullmatch(VARIANT, args.dist.resolve().name) is not None
    variant = args.variant or (args.dist.resolve().name if named else "cu130")
    if not re.fullmatch(VARIANT, variant):
        raise SystemExit(f"make_index: --variant must look like cu130 or cpu, not {variant!r}")
    out = args.out or (args.dist.parent / "index" if named else args.dist / "index")
    root = build_index(args.dist, out, variant)
    print(f"make_index: {root} (pip install --index-url {root.resolve().as_uri()} <package>)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
