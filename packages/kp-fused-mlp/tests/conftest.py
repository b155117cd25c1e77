from kp_core.testing.levels import interpret_triton_without_gpu, level_fixture

interpret_triton_without_gpu()  # before kp_fused_mlp.triton is imported

# kp's markers, options and seed fixture: opt-in, so installing kp never changes another project's tests.
pytest_plugins = ("kp_core.testing.pytest_plugin",)

level = level_fixture("kp_fused_mlp")
