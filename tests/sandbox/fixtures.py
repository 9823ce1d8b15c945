"""A fixture for tests that run commands in a sandbox but check an env's logic, not isolation: where no
isolation works (no bubblewrap, no user namespaces) the sandbox refuses to start, and they skip, saying why."""
import pytest

from rollart.sandbox import SandboxUnavailable, resolve_mode


@pytest.fixture
def sandbox_isolation() -> str:
    """The isolation mode sandboxes get here; skips the test where there is none."""
    try:
        return resolve_mode("auto")
    except SandboxUnavailable as e:
        pytest.skip(f"no sandbox isolation on this machine: {e}")


@pytest.fixture
def no_isolation(monkeypatch):
    """This machine as one with neither bubblewrap nor unshare (probes re-run before and after)."""
    from rollart.sandbox import isolation

    def forget():
        isolation.mode_works.cache_clear()
        isolation._strongest.cache_clear()

    forget()
    monkeypatch.setenv("PATH", "/nonexistent")
    yield
    monkeypatch.undo()
    forget()
