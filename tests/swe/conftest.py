from tests.sandbox.fixtures import no_isolation, sandbox_isolation  # noqa: F401 (fixtures)
