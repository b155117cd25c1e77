"""tools/release_check.py on a scratch repository: a release tag, then changes with and without a
version bump."""
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import release_check  # noqa: E402


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _write_package(repo, version, body="x = 1\n", changelog_versions=None):
    root = repo / "packages" / "kp-demo"
    (root / "src" / "kp_demo").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "kp-demo"\nversion = "{version}"\n')
    (root / "src" / "kp_demo" / "__init__.py").write_text(f'__version__ = "{version}"\n{body}')
    entries = "".join(f"## {v} — 2026-11-23\n- change\n\n" for v in (changelog_versions or [version]))
    (root / "CHANGELOG.md").write_text("# Changelog\n\n" + entries)


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "ci@example.invalid")
    _git(tmp_path, "config", "user.name", "ci")
    (tmp_path / "packages.txt").write_text("# list\nkp-demo\n")
    _write_package(tmp_path, "0.1.0")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "0.1.0")
    _git(tmp_path, "tag", "kp-demo-v0.1.0")
    return tmp_path


def _commit(repo, msg):
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", msg)


def test_unchanged_since_the_release_passes(repo):
    assert release_check.check(repo, "kp-demo") == []
    assert release_check.main(["--repo", str(repo)]) == 0


def test_a_change_without_a_version_bump_fails(repo):
    _write_package(repo, "0.1.0", body="x = 2\n")
    _commit(repo, "change")
    problems = release_check.check(repo, "kp-demo")
    assert len(problems) == 1 and "changed since kp-demo-v0.1.0" in problems[0] and "bump it" in problems[0]
    assert release_check.main(["--repo", str(repo)]) == 1


def test_a_bump_with_a_changelog_entry_passes(repo):
    _write_package(repo, "0.1.1", body="x = 2\n", changelog_versions=["0.1.1", "0.1.0"])
    _commit(repo, "0.1.1")
    assert release_check.check(repo, "kp-demo") == []


def test_a_bump_without_a_changelog_entry_fails(repo):
    _write_package(repo, "0.1.1", body="x = 2\n", changelog_versions=["0.1.0"])
    _commit(repo, "0.1.1, no changelog")
    assert any("no '## 0.1.1' section" in p for p in release_check.check(repo, "kp-demo"))


def test_mismatched_code_version_and_lower_versions_fail(repo):
    _write_package(repo, "0.0.9", changelog_versions=["0.0.9"])
    init = repo / "packages" / "kp-demo" / "src" / "kp_demo" / "__init__.py"
    init.write_text('__version__ = "0.0.8"\n')
    _commit(repo, "down")
    problems = release_check.check(repo, "kp-demo")
    assert any("lower than its last release 0.1.0" in p for p in problems)
    assert any("__version__ is 0.0.8" in p for p in problems)


def test_the_highest_tag_is_the_last_release(repo):
    _git(repo, "tag", "kp-demo-v0.10.0")
    _git(repo, "tag", "kp-demo-v0.9.3")
    assert release_check.last_release(repo, "kp-demo") == ("kp-demo-v0.10.0", "0.10.0")
