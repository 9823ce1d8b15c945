"""Security suite in the "unshare" fallback mode: the same hostile commands, contained without bubblewrap."""
import os

import pytest

from rollart.sandbox.isolation import mode_works
from tests.sandbox.test_security import CASE_NAMES, UNSHARE_FAST, _run_case, host  # noqa: F401 (fixture)


@pytest.mark.parametrize("name", UNSHARE_FAST)
def test_hostile_command_contained_unshare_fallback(host, name):
    if not mode_works("unshare")[0] or os.geteuid() != 0:
        pytest.skip("unshare fallback needs util-linux unshare and root (for the uid drop)")
    _run_case(host, name, "unshare")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASE_NAMES if n not in UNSHARE_FAST])
def test_hostile_command_contained_unshare_fallback_rest(host, name):
    if not mode_works("unshare")[0] or os.geteuid() != 0:
        pytest.skip("unshare fallback needs util-linux unshare and root (for the uid drop)")
    _run_case(host, name, "unshare")
