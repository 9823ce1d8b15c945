"""Fixtures every test folder may use."""
import pytest


@pytest.fixture
def portable_cpu(monkeypatch):
    """ROLLART_PORTABLE_CPU=1 for this test: every CPU-feature path takes its portable fallback, in this process
    and in the processes it starts (the per-process answers are cached: cleared before and after)."""
    from rollart import cpu_features
    from rollart.models import cpu_linear

    def clear():
        cpu_features.cpu_features.cache_clear()
        cpu_linear.unavailable.cache_clear()

    monkeypatch.setenv(cpu_features.PORTABLE_ENV, "1")
    clear()
    yield
    monkeypatch.delenv(cpu_features.PORTABLE_ENV)
    clear()
