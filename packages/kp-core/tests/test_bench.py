"""The benchmark harness on CPU: every impl timed or skipped with its reason, ratios, reports."""
import json

import pytest
import torch

from kp_core import bench


def _cases(quick, device):
    for n in (1000, 4000):
        def make(n=n):
            return (torch.randn(n, device=device),)

        def broken(x):
            raise RuntimeError("backend unavailable here")

        yield bench.Case(
            op="scale", label=f"n={n}", params={"n": n}, make_inputs=make, bytes=8 * n,
            impls={"kp-fast": lambda x: x * 2, "torch": lambda x: torch.mul(x, 2), "kp-broken": broken},
        )


def test_main_on_cpu_writes_json_and_markdown(tmp_path):
    assert bench.main(_cases, suite="toy", argv=["--out", str(tmp_path), "--no-plot"]) == 0
    result = json.loads((tmp_path / "toy.json").read_text())
    rows = {(r["label"], r["impl"]): r for r in result["rows"]}
    assert len(rows) == 6
    ok = rows[("n=1000", "kp-fast")]
    assert ok["status"] == "ok" and ok["ms"] > 0 and "torch" in ok["speedup"]
    skipped = rows[("n=4000", "kp-broken")]
    assert skipped["status"] == "skipped" and "backend unavailable here" in skipped["reason"]
    md = (tmp_path / "toy.md").read_text()
    assert "## scale" in md and "kp-broken" in md


def test_impls_option_keeps_only_the_named_implementations(tmp_path):
    argv = ["--out", str(tmp_path), "--no-plot", "--impls", "kp-fast,torch"]
    assert bench.main(_cases, suite="toy", argv=argv) == 0
    result = json.loads((tmp_path / "toy.json").read_text())
    assert sorted({r["impl"] for r in result["rows"]}) == ["kp-fast", "torch"]
    assert bench.main(_cases, suite="toy", argv=["--out", str(tmp_path), "--impls", "nothing"]) == 1


def test_git_revision_can_be_given(monkeypatch, tmp_path):
    # A GPU machine's copy of the tree may carry a stale .git: KP_GIT_REV names the real revision.
    from kp_core.bench import env
    monkeypatch.setenv("KP_GIT_REV", "abc1234")
    assert env._git_describe(tmp_path) == "abc1234"
    monkeypatch.delenv("KP_GIT_REV")
    assert env._git_describe(tmp_path) != "abc1234"


def test_bench_imports_required_and_optional():
    from kp_core import bench

    assert bench.require("math", "bench_x", "pip install x").sqrt(4.0) == 2.0
    with pytest.raises(SystemExit, match="bench_x: no_such_kp_pkg is not importable.*pip install x"):
        bench.require("no_such_kp_pkg", "bench_x", "pip install x")
    (sqrt, pi), missing = bench.optional("Math", "math:sqrt", "math:pi")
    assert missing is None and sqrt(9.0) == 3.0 and pi > 3
    (a, b), missing = bench.optional("Liger", "math:sqrt", "no_such_baseline.ops:Fn")
    assert a is None and b is None and missing.startswith("Liger not available: ModuleNotFoundError")


def test_progress_counts_host_timing_as_a_step(capsys, monkeypatch):
    """Plain progress lines never count past their total (host timing is one step of its own)."""
    import contextlib
    import re

    from kp_core.bench import progress as progress_mod
    from kp_core.bench import runner

    monkeypatch.setattr(runner, "progress", lambda total: contextlib.nullcontext(progress_mod._Plain(total)))
    case = bench.Case(op="scale", label="n=8", params={"n": 8}, make_inputs=lambda: (torch.ones(8),),
                      impls={"kp": lambda x: x * 2, "torch": lambda x: torch.mul(x, 2)}, host_timing=True)
    rows = bench.run([case], device="cpu", warmup=1, rep=2)
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["host_ms"] for r in rows)
    steps = [tuple(map(int, m)) for m in re.findall(r"\[(\d+)/(\d+)\]", capsys.readouterr().out)]
    assert steps and all(done <= total for done, total in steps), steps


def test_sustained_timing_adds_its_columns(capsys, monkeypatch):
    """A case with sustained=True: every ok row gets sustained_ms and kp's rows a sustained speedup
    over each baseline; the report shows the columns; progress counts it as a step."""
    import contextlib
    import re

    from kp_core.bench import progress as progress_mod
    from kp_core.bench import report, runner

    monkeypatch.setattr(runner, "progress", lambda total: contextlib.nullcontext(progress_mod._Plain(total)))
    case = bench.Case(op="scale", label="n=8", params={"n": 8}, make_inputs=lambda: (torch.ones(8),),
                      impls={"kp": lambda x: x * 2, "torch": lambda x: torch.mul(x, 2),
                             "broken": lambda x: 1 / 0}, sustained=True)  # fmt: skip
    rows = bench.run([case], device="cpu", warmup=1, rep=2)
    assert [r["status"] for r in rows] == ["ok", "ok", "skipped"]
    assert rows[0]["sustained_ms"] > 0 and rows[1]["sustained_ms"] > 0 and rows[2]["sustained_ms"] is None
    assert set(rows[0]["sustained_speedup"]) == {"torch"} and rows[1]["sustained_speedup"] == {}
    assert rows[0]["host_ms"] is None and rows[0]["host_speedup"] == {}
    out = capsys.readouterr().out
    assert "sustained" in out
    steps = [tuple(map(int, m)) for m in re.findall(r"\[(\d+)/(\d+)\]", out)]
    assert steps and all(done <= total for done, total in steps) and steps[-1][1] == 4, steps
    table = "\n".join(report._table(rows, {}))
    assert "sustained (µs)" in table and "vs torch (sustained)" in table and "(host)" not in table


def test_sustained_ms_interleaves_and_times_each(monkeypatch):
    """sustained_ms runs each impl in windows, A B .. B A every round, and returns a time per call."""
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    got = bench.sustained_ms(fns, device="cpu", window_ms=0.001, rounds=2)
    assert set(got) == {"a", "b"} and all(v >= 0 for v in got.values())
    # two calls each to size the windows (a window of 0.001 ms is one call), then the rounds
    assert order == ["a", "a", "b", "b"] + ["a", "b", "b", "a"] * 2
