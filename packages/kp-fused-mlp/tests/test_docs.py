"""The examples users copy: docs/adding-an-op.md's "Try it" block and this package's README."""
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parents[1]


def _python_blocks(text: str) -> list:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _runnable():
    page = (ROOT / "docs" / "adding-an-op.md").read_text()
    yield "adding-an-op: Try it", _python_blocks(page.split("## Try it", 1)[1])[0]
    readme = (PACKAGE / "README.md").read_text()
    yield "README: Use", _python_blocks(readme.split("## Use", 1)[1])[0]
    yield "README: Gated MLP", _python_blocks(readme.split("## Gated MLP", 1)[1])[0]


@pytest.mark.parametrize("name, code", list(_runnable()), ids=lambda v: v if isinstance(v, str) and ":" in v else "")
def test_example_runs(name, code):
    exec(compile(code, name, "exec"), {})
