"""The suite's /dev/shm guard (tests/shm_guard.py), run on a throwaway suite by pytester."""

import uuid

import pytest

from tests.shm_guard import SHM

pytest_plugins = ["pytester"]


@pytest.fixture
def region():
    path = SHM / f"speechstream-guard-check-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


def test_a_suite_that_leaves_a_region_in_dev_shm_fails_and_names_it(pytester, region):
    pytester.makepyfile(f"""
        from pathlib import Path
        def test_leaks():
            Path({str(region)!r}).write_bytes(b"x")
    """)
    result = pytester.runpytest("-p", "tests.shm_guard")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    assert region.name in result.stdout.str()


def test_a_suite_that_removes_what_it_made_passes(pytester, region):
    pytester.makepyfile(f"""
        from pathlib import Path
        def test_cleans_up():
            Path({str(region)!r}).write_bytes(b"x")
            Path({str(region)!r}).unlink()
    """)
    assert pytester.runpytest("-p", "tests.shm_guard").ret == pytest.ExitCode.OK
