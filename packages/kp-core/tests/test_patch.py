"""kp_core.patch: discovery, option routing, ordering and the merged report (no kernel package needed)."""
import logging

import pytest

import kp_core
from kp_core import PatchReport, Skip, Swap, patching


class Model:
    """Stands in for an nn.Module: kp_core never looks inside the model."""

    def __init__(self):
        self.log = []


def swapper(package, n=1, cls="FooNorm"):
    def fn(model, *, shared=None, **_ignored):
        model.log.append((package, shared))
        return PatchReport(model=model, swaps=[Swap(f"layers.{i}", cls, f"{package}.Fast") for i in range(n)])

    fn.__module__ = f"{package}.patch"
    return fn


def norm_patcher(model, *, hf_rounding=False, backend=None):
    model.log.append(("kp_norm", hf_rounding, backend))
    return PatchReport(model=model, swaps=[Swap("a", "LlamaRMSNorm", "kp_norm.RMSNorm", "rounding='llama'")],
                       skips=[Skip("b", "GatedRMSNorm", "its forward takes (x, gate), not one tensor")])  # fmt: skip


class FakeEntryPoint:
    def __init__(self, name, fn=None, error=None):
        self.name, self.value, self._fn, self._error = name, f"{name}.patch:patch", fn, error

    def load(self):
        if self._error:
            raise self._error
        return self._fn


def test_explicit_patchers_run_in_the_given_order_with_their_options():
    model = Model()
    report = kp_core.patch(model, patchers=[norm_patcher, swapper("kp_mlp")], hf_rounding=True, shared=3)
    assert model.log == [("kp_norm", True, None), ("kp_mlp", 3)]
    assert report.model is model and report.patchers == ["test_patch", "kp_mlp"]
    assert report.swapped == {"LlamaRMSNorm": 1, "FooNorm": 1}
    assert report.skipped == [("b", "GatedRMSNorm", "its forward takes (x, gate), not one tensor")]
    assert [s.package for s in report.swaps] == ["test_patch", "kp_mlp"]


def test_a_mapping_names_the_patchers():
    report = kp_core.patch(Model(), patchers={"kp_norm": norm_patcher})
    assert report.patchers == ["kp_norm"] and report.swaps[0].package == "kp_norm"


def test_unknown_option_raises_naming_the_valid_ones():
    with pytest.raises(TypeError, match=r"unknown option\(s\) 'hf_round'.*\(kp_norm\) accept: backend, hf_rounding"):
        kp_core.patch(Model(), patchers={"kp_norm": norm_patcher}, hf_round=True)


def test_discovered_patchers_run_in_name_order_and_a_broken_one_is_reported(monkeypatch):
    eps = [
        FakeEntryPoint("kp_quant", swapper("kp_quant")),
        FakeEntryPoint("kp_broken", error=ImportError("no module named kp_broken._C")),
        FakeEntryPoint("kp_attention", swapper("kp_attention", n=2, cls="LlamaAttention")),
    ]
    monkeypatch.setattr(patching, "_entry_points", lambda: eps)
    model = Model()
    with pytest.warns(RuntimeWarning, match="kp_broken.*ImportError"):
        report = kp_core.patch(model)
    assert [p for p, _ in model.log] == ["kp_attention", "kp_quant"]
    assert report.swapped == {"LlamaAttention": 2, "FooNorm": 1}
    assert report.skips[0].package == "kp_broken" and "failed to load" in report.skips[0].reason
    assert [name for name, _ in patching.registered()] == ["kp_attention", "kp_broken", "kp_quant"]


def test_no_patcher_installed_warns(monkeypatch):
    monkeypatch.setattr(patching, "_entry_points", lambda: [])
    with pytest.warns(RuntimeWarning, match="no kp package registers a patcher"):
        report = kp_core.patch(Model())
    assert len(report) == 0
    with pytest.raises(TypeError, match="none installed"):
        kp_core.patch(Model(), hf_rounding=True)


def test_a_swapped_root_is_what_the_next_patcher_gets():
    new_root = Model()

    def replace_root(model):
        return PatchReport(model=new_root, swaps=[Swap("", "RMSNorm", "kp_norm.RMSNorm")])

    report = kp_core.patch(Model(), patchers=[replace_root, swapper("kp_other")])
    assert report.model is new_root and new_root.log == [("kp_other", None)]


def test_a_patcher_must_return_a_report():
    with pytest.raises(TypeError, match="returned Model, not a PatchReport"):
        kp_core.patch(Model(), patchers=[lambda model: model])


def test_report_text_verbose_and_logging(capsys, caplog):
    with caplog.at_level(logging.INFO, logger="kp_core.patch"):
        report = kp_core.patch(Model(), patchers={"kp_norm": norm_patcher, "kp_mlp": swapper("kp_mlp", n=3)},
                               verbose=True)  # fmt: skip
    text = str(report)
    assert text.splitlines() == [
        "kp patch (kp_norm, kp_mlp): 4 module(s) swapped, 1 skipped",
        "  swapped    3 x FooNorm -> kp_mlp.Fast",
        "  swapped    1 x LlamaRMSNorm -> kp_norm.RMSNorm (rounding='llama')",
        "  skipped b (GatedRMSNorm): its forward takes (x, gate), not one tensor",
    ]
    assert capsys.readouterr().out.strip() == text
    assert text in caplog.text
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["kp_core.patch: skipped b (GatedRMSNorm): its forward takes (x, gate), not one tensor"]
    assert "swapped={'LlamaRMSNorm': 1, 'FooNorm': 3}" in repr(report)


def test_python_m_kp_core_lists_the_patchers(monkeypatch, capsys):
    from kp_core import __main__ as cli

    monkeypatch.setattr(patching, "_entry_points", lambda: [FakeEntryPoint("kp_norm")])
    cli.main()
    assert "kp_core.patch runs: kp_norm (kp_norm.patch:patch)" in capsys.readouterr().out


def test_many_skips_of_one_kind_read_as_one_line():
    report = PatchReport(skips=[Skip(f"layers.{i}.norm", "GatedRMSNorm", "takes a gate") for i in range(40)])
    assert report.skip_lines() == ["skipped 40 x GatedRMSNorm (layers.0.norm and 39 more): takes a gate"]
