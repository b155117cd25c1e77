"""The harness itself must be able to fail."""
import pytest
import torch

from kp_core import testing as kt


def test_rel_error_sees_nan_and_wrong_values(seed):
    ref = kt.randn((16, 9), dtype=torch.float64, seed=seed)
    assert kt.rel_error(ref.float(), ref) < 1e-7
    bad = ref.clone()
    bad[3, 4] = float("nan")
    assert kt.rel_error(bad, ref) == float("inf")
    with pytest.raises(AssertionError, match="relative error"):
        kt.assert_matches_oracle((ref * 1.01).float(), ref)
    with pytest.raises(AssertionError, match="shape"):
        kt.rel_error(ref[:2], ref)


def test_twice_torch_error_criterion(seed):
    ref = kt.randn((64, 64), dtype=torch.float64, seed=seed)
    torch_out = ref.to(torch.bfloat16)
    kt.assert_matches_oracle(ref.to(torch.bfloat16), ref, torch_out=torch_out)
    noisy = (ref * (1 + 1e-2 * torch.sign(kt.randn(ref.shape, seed=seed + 1, dtype=torch.float64)))).to(torch.bfloat16)
    with pytest.raises(AssertionError, match="2 x torch's own"):
        kt.assert_matches_oracle(noisy, ref, torch_out=torch_out)


def test_inputs_are_seeded_fresh_and_never_zero():
    a = kt.randn((1000,), seed=1)
    assert torch.equal(a, kt.randn((1000,), seed=1))
    assert not torch.equal(a, kt.randn((1000,), seed=2))
    assert (a != 0).all()
    assert kt.seed_from("test_a") == kt.seed_from("test_a") != kt.seed_from("test_b")


def test_strided_views_hold_the_values_and_poison_the_gaps(seed):
    x = kt.randn((5, 7), seed=seed)
    v = kt.row_strided(x, pad=3)
    assert not v.is_contiguous() and v.stride(0) == 10 and torch.equal(v, x)
    assert torch.isnan(v.as_strided((5, 10), (10, 1))[:, 7:]).all()
    c = kt.column_major(x)
    assert c.stride(-1) != 1 and torch.equal(c, x)
    assert torch.isnan(kt.poisoned((3,), dtype=torch.float16, device="cpu")).all()


def test_shapes_include_empty_and_odd_sizes():
    shapes = kt.shapes_2d()
    assert any(r == 0 for r, _ in shapes) and any(c == 1 for _, c in shapes)
    assert any(c % 2 == 1 and c > 1000 for _, c in shapes)


def test_plugin_skips_by_marker_not_by_parameter_id(pytester):
    """A case whose parameter id is "slow" (or "gpu", "large") runs: only the marker skips."""
    pytester.makeconftest('pytest_plugins = ("kp_core.testing.pytest_plugin",)')
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("name", ["slow", "large", "gpu", "distributed"])
        def test_named(name):
            assert name

        @pytest.mark.slow
        def test_marked_slow():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=4, skipped=1)
