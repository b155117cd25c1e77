"""kp's build, test and benchmark sessions.

  nox -s build          manylinux wheels of every package for CPython 3.10-3.13 into dist/<variant>/
                        (cu130 ...: KP_CUDA below; `build-3.12` for one Python)
  nox -s test-3.11      install the packages into a fresh venv and run their tests (3.10-3.13)
  nox -s bench          every package's benchmarks (on a CPU machine: a small CPU run, exit 0)
  nox -s release-check  every package changed since its last release tag has a new version (CI)
  python tools/make_index.py dist/cu130   PEP 503 index of dist/cu130 in dist/index/cu130 (pip --index-url file://...)

The matrix: `KP_TORCH` lists the torch versions to test ("2.13.0" by default; e.g.
"2.11.0+cu130,2.13.0"; `KP_TORCH=2.6.0,2.15.0` is the tested range, the ends of `torch>=2.6` on
PyPI: with torch 2.11 or older the triton level skips on CPU unless numpy<2.4 is installed),
`KP_TORCH_INDEX` an extra index to take them from. `KP_CUDA_ARCHS`
narrows the archs the native code is compiled for ("90a" for a quick build). `KP_TEST_WHEELS` a folder of
built wheels (one a package) that the test sessions install instead of building. One session name
selects a whole row: `nox -s test-3.11` runs every torch version of the matrix on Python 3.11.

`KP_CUDA` lists the CUDA toolkits `nox -s build` compiles with, one wheel set each in
dist/<variant>/, the variant named from the toolkit's nvcc release (13.0 -> cu130):
"system" (default: CUDACXX, else CUDA_HOME, else nvcc on PATH; a cu12 variant is this with
CUDA_HOME naming a 12.x toolkit) and "pypi-13.Y" (NVIDIA's CUDA 13.Y wheels from PyPI, installed
once into the build session's .nox/build-3-1X/cuda/: no system toolkit needed), e.g. KP_CUDA=pypi-13.0,pypi-13.5.
tools/cuda_toolkit.py has the rules, docs/install.md the drivers each variant needs.

`nox -s build` makes manylinux_2_28 wheels on any Linux (`KP_MANYLINUX`, default 2_28; `off` for
plain linux_x86_64 wheels): the native modules link against glibc 2.28 stub libraries and a static,
hidden libstdc++, and the wheels are checked and tagged (tools/manylinux.py; docs/release.md,
"manylinux wheels").
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "tools"))
import cuda_toolkit  # noqa: E402
PACKAGES = [l.strip() for l in (ROOT / "packages.txt").read_text().splitlines() if l.strip() and not l.startswith("#")]
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
TORCH = os.environ.get("KP_TORCH", "2.13.0").split(",")
ZIGLANG = "ziglang==0.17.1"  # KP_MANYLINUX's glibc stubs (tools/manylinux.py checks what it makes)

# Build requirements beyond the tools every package needs, pinned in the packages' own
# pyproject.toml (kp-fused-mlp: the CUTLASS headers of nvidia-cutlass), for the builds without
# isolation below. Only the headers are used: the test sessions install it --no-deps (its Python
# dependencies, cuda-python, scipy, ..., serve NVIDIA's GEMM generator); `python -m build
# --no-isolation` checks build requirements with their dependencies, so `build` takes them all.
EXTRA_BUILD_REQUIRES = sorted({
    m.group(1)
    for p in PACKAGES
    for m in re.finditer(r'"(nvidia-cutlass==[^"]+)"', (ROOT / "packages" / p / "pyproject.toml").read_text())
})

nox.options.sessions = ["test-3.11"]
nox.options.reuse_existing_virtualenvs = True


def _install_torch(session: nox.Session, torch_version: str) -> None:
    args = [f"torch=={torch_version}"]
    if os.environ.get("KP_TORCH_INDEX"):
        args += ["--extra-index-url", os.environ["KP_TORCH_INDEX"]]
    session.install(*args)


def _install_kp(session: nox.Session) -> None:
    """Build and install every package from source, the way a user's `pip install` would; or,
    with KP_TEST_WHEELS=<folder>, install the wheels a build session put there (one a package):
    CI tests the wheels of its default build instead of compiling everything a second time."""
    if os.environ.get("KP_TEST_WHEELS"):
        folder = Path(os.environ["KP_TEST_WHEELS"])
        found = {p: sorted(folder.glob(p.replace("-", "_") + "-*.whl")) for p in PACKAGES}
        wrong = {p: [w.name for w in ws] for p, ws in found.items() if len(ws) != 1}
        if wrong:
            session.error(f"KP_TEST_WHEELS={folder}: want one wheel a package, found {wrong}")
        session.install("--no-deps", "--force-reinstall", *[str(ws[0]) for ws in found.values()])
        return
    session.install("scikit-build-core>=0.11", "pybind11>=2.12", "cmake>=3.26", "ninja")
    if EXTRA_BUILD_REQUIRES:
        session.install("--no-deps", *EXTRA_BUILD_REQUIRES)
    # No build isolation: the packages build against the tools just installed, offline-friendly.
    session.install("--no-build-isolation", "--no-deps", *[str(ROOT / "packages" / p) for p in PACKAGES])


@nox.session(python=PYTHONS)
@nox.parametrize("torch_version", TORCH, ids=TORCH)
def test(session: nox.Session, torch_version: str) -> None:
    """Install and test every package. CPU: reference, Triton interpreter, API; GPU: all levels."""
    _install_torch(session, torch_version)
    # hypothesis: kp-norm's fuzz test; transformers: tiny Hugging Face models for kp_core.patch.
    session.install("pytest>=8", "pytest-xdist", "numpy", "hypothesis", "transformers")
    if not session.posargs or "--no-triton" not in session.posargs:
        session.install("triton")
    _install_kp(session)
    session.run("python", "-m", "kp_core")
    args = [a for a in session.posargs if a != "--no-triton"]
    tests = [str(ROOT / "packages" / p / "tests") for p in PACKAGES]
    # One pytest run imports every package's test modules by basename (rootdir-relative), so two
    # packages' test_modules.py collide at collection: say which, before the run.
    names = [f.name for t in tests for f in Path(t).glob("*.py") if f.name != "conftest.py"]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        session.error(f"test files must have basenames unique across packages (one pytest run imports them): {clashes}")
    session.run("python", "-m", "pytest", "-q", "-n", os.environ.get("KP_TEST_WORKERS", "2"), *tests, *args)


def _cuda_toolkit(session: nox.Session, variant: str) -> tuple[str, dict, list]:
    """A KP_CUDA variant -> its dist folder (cu130), and the environment and `build` arguments that
    make CMake compile with its nvcc (tools/cuda_toolkit.py)."""
    env = {}
    if variant == "system":
        nvcc = cuda_toolkit.system_nvcc(os.environ)
    else:  # pypi-13.Y: a toolkit of its own in the session's cuda/pypi-13.Y/, installed once
        target = Path(session.virtualenv.location) / "cuda" / variant
        home = cuda_toolkit.pypi_home(target, variant)
        if not (home / "bin" / "nvcc").exists():
            session.install("--target", str(target), cuda_toolkit.pypi_requirement(variant))
        cuda_toolkit.pypi_fix(home)
        nvcc, env["CUDA_HOME"] = str(home / "bin" / "nvcc"), str(home)
    if not nvcc:
        return "cpu", env, []
    env["CUDACXX"] = nvcc
    return cuda_toolkit.variant_name(nvcc, os.environ), env, [f"-Ccmake.define.CMAKE_CUDA_COMPILER={nvcc}"]


def _glibc_stubs(session: nox.Session) -> tuple[str, str] | None:
    """KP_MANYLINUX (default 2_28): (folder, "2.28") of the glibc 2.28 stub libraries the modules
    link against, made once into the session's glibc-2.28/ with zig from PyPI (tools/manylinux.py);
    None with KP_MANYLINUX=off."""
    tag = os.environ.get("KP_MANYLINUX", "2_28").strip()
    if tag.lower() in ("", "off", "none", "0"):
        return None
    if not re.fullmatch(r"2_\d+", tag):
        session.error(f"KP_MANYLINUX={tag}: want a glibc version as in the tag, e.g. 2_28")
    glibc = tag.replace("_", ".")
    session.install(ZIGLANG, "auditwheel")
    stubs = Path(session.virtualenv.location) / f"glibc-{glibc}"
    session.run("python", str(ROOT / "tools" / "manylinux.py"), "stubs", str(stubs), "--glibc", glibc)
    return str(stubs), glibc


@nox.session(python=PYTHONS)
def build(session: nox.Session) -> None:
    """Wheels and sdists of every package into dist/<variant>/ for each toolkit of KP_CUDA
    (`-- --no-sdist`: wheels only), manylinux_2_28 unless KP_MANYLINUX=off; one session a Python
    (build-3.12)."""
    try:
        variants = cuda_toolkit.parse(os.environ.get("KP_CUDA"))
    except ValueError as e:
        session.error(str(e))
    session.install("build", "scikit-build-core>=0.11", "pybind11>=2.12", "cmake>=3.26", "ninja", *EXTRA_BUILD_REQUIRES)
    manylinux = _glibc_stubs(session)
    kinds = ["--wheel"] if "--no-sdist" in session.posargs else ["--sdist", "--wheel"]
    for variant in variants:
        try:
            name, env, args = _cuda_toolkit(session, variant)
        except ValueError as e:
            session.error(str(e))
        out = ROOT / "dist" / name
        session.log(f"KP_CUDA {variant}: {env.get('CUDACXX', 'no nvcc: no CUDA level')} -> {out}")
        # manylinux: build into out/.linux/, then check and retag the wheels into out/.
        raw = out / ".linux" if manylinux else out
        if manylinux:
            shutil.rmtree(raw, ignore_errors=True)
            env["KP_GLIBC_STUBS"] = manylinux[0]
        for pkg in PACKAGES:
            session.run("python", "-m", "build", "--no-isolation", *kinds, *args, "-o", str(raw), str(ROOT / "packages" / pkg), env=env)
        if manylinux:
            glibc = manylinux[1]
            wheels = sorted(str(w) for w in raw.glob("*.whl"))
            session.run("python", str(ROOT / "tools" / "manylinux.py"), "repair", "--glibc", glibc, "-w", str(out), *wheels)
            for sdist in raw.glob("*.tar.gz"):
                shutil.copyfile(sdist, out / sdist.name)
            shutil.rmtree(raw)
            for w in sorted(out.glob("*manylinux*.whl")):
                session.run("python", "-m", "auditwheel", "show", str(w))


@nox.session
def bench(session: nox.Session) -> None:
    """Every package's benchmarks; results land in docs/benchmarks/<gpu>/."""
    _install_torch(session, TORCH[0])
    session.install("triton", "rich", "matplotlib", "numpy")
    _install_kp(session)
    for script in sorted(ROOT.glob("packages/*/bench/bench_*.py")):
        session.run("python", str(script), *session.posargs)


@nox.session(name="release-check")
def release_check(session: nox.Session) -> None:
    """Fails when a package's sources changed since its last release tag while its version did not
    (docs/release.md); runs the release tools' own tests first (release_check, make_index)."""
    session.install("pytest>=8")
    session.run("python", "-m", "pytest", "-q", str(ROOT / "tools" / "tests"))
    session.run("python", str(ROOT / "tools" / "release_check.py"))
