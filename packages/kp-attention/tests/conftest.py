# kp's markers, options and seed fixture: opt-in, so installing kp never changes another project's tests.
pytest_plugins = ("kp_core.testing.pytest_plugin",)
