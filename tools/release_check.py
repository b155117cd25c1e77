"""Independent versions, enforced: a package whose sources changed since its last release must have
a new version, and a CHANGELOG entry for it.

    python tools/release_check.py [--repo DIR]          (nox -s release-check; CI runs it)

For each package of packages.txt: its last release is the highest tag `<package>-v<version>`
(`kp-norm-v0.3.1`). Fails when the package's files (its folder, and shared_cuda/ for a package with
native code) differ from that tag while pyproject.toml's version is still the tag's, or is lower;
and when CHANGELOG.md has no `## <version>` section for the current version. A package with no
tag yet has not been released: only its CHANGELOG is checked. docs/release.md has the steps.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys


def _git(repo: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+-]", v))


def _pyproject_version(path: pathlib.Path) -> str:
    m = re.search(r'^\[project\][^\[]*?^version = "([^"]+)"', path.read_text(), flags=re.M | re.S)
    if not m:
        raise SystemExit(f"release-check: no [project] version in {path}")
    return m.group(1)


def packages(repo: pathlib.Path) -> list:
    lines = (repo / "packages.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def last_release(repo: pathlib.Path, package: str):
    """(tag, version) of the package's highest release tag, or None."""
    tags = _git(repo, "tag", "--list", f"{package}-v*").split()
    versions = [(t, t[len(package) + 2:]) for t in tags if re.fullmatch(rf"{re.escape(package)}-v\d[\w.+-]*", t)]
    return max(versions, key=lambda tv: _version_key(tv[1]), default=None)


def check(repo: pathlib.Path, package: str) -> list:
    """Problems with one package's version (empty: fine)."""
    root = repo / "packages" / package
    version = _pyproject_version(root / "pyproject.toml")
    problems = []
    init = next(iter(sorted((root / "src").glob("*/__init__.py"))), None)
    code_version = re.search(r'^__version__ = "([^"]+)"', init.read_text(), flags=re.M) if init else None
    if code_version and code_version.group(1) != version:
        problems.append(f"{package}: __version__ is {code_version.group(1)} but pyproject.toml says {version}")
    changelog = (root / "CHANGELOG.md").read_text() if (root / "CHANGELOG.md").exists() else ""
    if not re.search(rf"^## {re.escape(version)}\b", changelog, flags=re.M):
        problems.append(f"{package}: CHANGELOG.md has no '## {version}' section for the current version")
    release = last_release(repo, package)
    if release is None:
        return problems
    tag, released = release
    paths = [f"packages/{package}"] + (["shared_cuda"] if (root / "CMakeLists.txt").exists() else [])
    changed = _git(repo, "diff", "--name-only", tag, "--", *paths).split()
    if _version_key(version) < _version_key(released):
        problems.append(f"{package}: version {version} is lower than its last release {released} ({tag})")
    elif changed and version == released:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        problems.append(
            f"{package}: {len(changed)} file(s) changed since {tag} ({shown}) but the version is still "
            f"{version}: bump it in pyproject.toml and __init__.py and add a CHANGELOG entry (docs/release.md)"
        )
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(pathlib.Path(__file__).resolve().parents[1]))
    args = ap.parse_args(argv)
    repo = pathlib.Path(args.repo)
    if _git(repo, "rev-parse", "--is-shallow-repository").strip() == "true":
        # A shallow clone may hold no release tags: only the versions and CHANGELOGs are checked.
        print("release-check: shallow clone; release tags may be missing (git fetch --unshallow --tags)")
    problems = []
    for package in packages(repo):
        found = check(repo, package)
        release = last_release(repo, package)
        status = "ok" if not found else "FAILED"
        print(f"release-check {package}: {status} (last release: {release[0] if release else 'none yet'})")
        problems += found
    for p in problems:
        print(f"  {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
