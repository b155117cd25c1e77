# kp's markers, options and seed fixture: opt-in (a package's tests load the plugin; installing kp
# never changes another project's test run).
pytest_plugins = ("kp_core.testing.pytest_plugin", "pytester")
