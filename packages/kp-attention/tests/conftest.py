from kp_core.testing.levels import interpret_triton_without_gpu

interpret_triton_without_gpu()  # before kp_attention.triton is imported: CPU machines run its interpreter

# kp's markers, options and seed fixture: opt-in, so installing kp never changes another project's tests.
pytest_plugins = ("kp_core.testing.pytest_plugin",)
