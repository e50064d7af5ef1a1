"""What a user sees of pytest-aoti's own machinery when a build fails: a traceback that ends at the test's line (or
goes on into the user's own code), and a conftest hook's bad result named with where the hook lives, as a failure
of the test that built, never an INTERNALERROR."""

from __future__ import annotations

import re

import pytest

from tests.conftest import RunPytest, failure_section

JUNK_BUILD_CONFTEST = """
def pytest_aoti_build(config, request, build):
    if request.nodeid.endswith(("test_junk", "test_junk_snapshot")):
        return "junk"
    return None


def pytest_aoti_package_built(config, built):
    if built.request.nodeid.endswith("test_conftest_raises"):
        raise ValueError("the conftest's own check failed")
"""

BUILD_TESTS = """
import torch

from aoti_models import MLP


def test_junk(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))


def test_after_junk(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),))


def test_junk_snapshot(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), snapshot=True)


def test_failing_check(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),), more_inputs=[(torch.randn(5, 8),)])


def test_conftest_raises(aoti_compile):
    aoti_compile(MLP(), (torch.randn(4, 8),))
"""


def _traceback_files(section: str) -> set[str]:
    """The files of the traceback entries a failure section shows (``path:line: Error`` and ``path:line: in f``)."""
    return {match.group(1).rsplit("/", 1)[-1] for match in re.finditer(r"^(\S+\.py):\d+: ", section, re.M)}


def test_a_bad_build_result_fails_its_test_and_tracebacks_end_at_the_users_line(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makeconftest(JUNK_BUILD_CONFTEST)
    pytester.makepyfile(test_user=BUILD_TESTS)
    result = run_pytest("-p", "no:randomly", "-p", "no:logging")
    text = result.stdout.str()
    assert "INTERNALERROR" not in text
    result.assert_outcomes(passed=1, failed=4)

    conftest = pytester.path / "conftest.py"
    # With snapshot=True too (issue 62 item 9): the hook is the cause named, not the snapshot.
    for test in ("test_junk", "test_junk_snapshot"):
        junk = failure_section(result, test)
        assert _traceback_files(junk) == {"test_user.py"}, junk
        assert (
            "TypeError: pytest_aoti_build returned 'junk' (str), not the CompiledModel that build() returns; "
            f"implemented at {conftest}:1 (an implementation returns build()'s result, or None to leave the build to "
            "the next one)"
        ) in junk
        assert "only aoti_check compares" not in junk

    # A failing aoti_check: the traceback is the test's line and the error, none of pluggy's or the fixtures' frames.
    failing = failure_section(result, "test_failing_check")
    assert "more_inputs[0]: input 0 ('x'): shape invariant violated" in failing
    assert _traceback_files(failing) == {"test_user.py"}, failing
    for hidden in ("_hooks.py", "_caller.py", "_manager.py", "fixtures.py", "build_and_load", "pytest_aoti_build"):
        assert hidden not in failing, hidden

    # An error raised in the user's own hook keeps its frame there.
    raised = failure_section(result, "test_conftest_raises")
    assert "ValueError: the conftest's own check failed" in raised
    assert _traceback_files(raised) == {"test_user.py", "conftest.py"}, raised


def test_a_bad_build_options_result_fails_the_tests_that_build(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytester.makeconftest(
        """
        def pytest_aoti_build_options(config):
            return 5
        """
    )
    pytester.makepyfile(
        test_user="""
        import torch

        from aoti_models import MLP


        def test_builds(aoti_compile):
            aoti_compile(MLP(), (torch.randn(4, 8),))


        def test_plain():
            pass
        """
    )
    result = run_pytest("-p", "no:logging")
    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    builds = failure_section(result, "test_builds")
    assert (
        "TypeError: pytest_aoti_build_options returned 5 (int), not a list of keyword names; implemented at "
        f"{pytester.path / 'conftest.py'}:1"
    ) in builds
    assert _traceback_files(builds) == {"test_user.py"}, builds
