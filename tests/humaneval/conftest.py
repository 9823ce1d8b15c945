from tests.sandbox.fixtures import sandbox_isolation  # noqa: F401 (fixture)
