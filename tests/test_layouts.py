"""Children find the test whatever the layout: pytest started from a subdir with the ini file above, with the tests
beside the cwd and no ini, with --rootdir elsewhere, with -c, with --import-mode=importlib, in a package, in a class,
with parametrized ids holding spaces, '::' and unicode, with custom conftest options and PYTEST_ADDOPTS.

Each layout runs a real segfault inside a compiled model (isolated, debug-rerun) and asserts the verdict and the JUnit
file (every test exactly once). The models compile once for the whole suite (location-free cache keys)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import MODELS_SOURCE, RunPytest, junit_cases

KERNEL_OF_THE_CRASH = "cpp_fused_add_maybe_crash_mul_sin_0"

# The isolated child is enough here: debug children are built by the same code (child_command), and the monorepo
# layout (test_subdir_ini_above_package_class_ids_options_addopts) runs one.
CRASH_AND_HEALTHY = """
import pytest
import torch
from aoti_models import MLP, Crashy


@pytest.mark.aoti_isolate
def check_crash(aoti_compile):
    compiled = aoti_compile(Crashy(), (torch.randn(4, 3),))
    compiled(torch.full((4, 3), 1000.0))


def check_healthy(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),))
"""


def _assert_isolated_crash(text: str) -> None:
    """The isolated child found the test and crashed in it (a child that did not find it says so instead)."""
    assert "crashed with SIGSEGV in an isolated subprocess (pytest-aoti)" in text
    for wrong in ("collected no test", "file or directory not found", "did not reproduce", "INTERNALERROR"):
        assert wrong not in text


def _assert_crash_verdict(text: str) -> None:
    _assert_isolated_crash(text)
    assert f"verdict: crashed with SIGSEGV; after kernel {KERNEL_OF_THE_CRASH} completed" in text


def _write_tests(directory: Path, source: str, name: str = "test_layout.py") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(source.replace("def check_", "def test_"))


def test_subdir_ini_above_package_class_ids_options_addopts(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monorepo case: ini at the root, pytest started in a sibling dir of the tests, which are a package."""
    root = pytester.path
    (root / "pytest.ini").write_text("[pytest]\n")
    tests = root / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--scale')\n    parser.addoption('--flavour')\n"
    )
    (tests / "test_pkg.py").write_text(
        """
import pytest
import torch
from aoti_models import LogModel, MLP, Crashy


class TestGroup:
    @pytest.mark.aoti_isolate
    @pytest.mark.aoti_ima(stages=("kernels",))
    def test_crash(self, aoti_compile, request):
        # Both options must reach the child: one on the command line, one through PYTEST_ADDOPTS.
        assert request.config.getoption("--flavour") == "spicy"
        assert request.config.getoption("--scale") == "3"
        aoti_compile(Crashy(), (torch.randn(4, 3),))(torch.full((4, 3), 1000.0))


@pytest.mark.aoti_ima(stages=("kernels",))
@pytest.mark.parametrize("label", ["a b::c [d] ü"])
def test_nan(aoti_compile, request, label):
    assert request.config.getoption("--scale") == "3"
    aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))(-torch.ones(4, 3))


def test_healthy(aoti_check):
    aoti_check(MLP(), (torch.randn(4, 8),))
"""
    )
    (root / "sub").mkdir()
    monkeypatch.setenv("PYTEST_ADDOPTS", "--flavour=spicy")
    result = run_pytest("../tests", "--scale=3", "--junitxml=../report.xml", "-p", "no:logging", cwd=root / "sub")
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    _assert_crash_verdict(text)
    assert (
        len(
            re.findall(
                r"verdict: NaN made by .*; failed: .*output 0: nonfinite invariant violated.*; last kernel completed: "
                r"cpp_fused_log_mul_0",
                text,
            )
        )
        == 1
    ), text
    cases = junit_cases(root / "report.xml")
    # pytest escapes non-ASCII ids (the child found "test_nan[a b::c [d] \\xfc]" by the same id).
    assert set(cases) == {"test_crash", "test_nan[a b::c [d] \\xfc]", "test_healthy"}
    assert cases["test_crash"]["outcomes"] == ["failure"]
    assert cases["test_crash"]["properties"]["aoti_signal"] == "SIGSEGV"  # type: ignore[index]
    assert cases["test_crash"]["properties"]["aoti_suspect_kernel"] == KERNEL_OF_THE_CRASH  # type: ignore[index]
    assert cases["test_healthy"]["outcomes"] == []

    # The reproduce line, pasted into a shell, crashes the same way.
    reproduce = re.search(r"^reproduce \(kernels\): (cd .*TestGroup::test_crash.*)$", text, re.MULTILINE)
    assert reproduce is not None, text
    pasted = subprocess.run(["bash", "-c", reproduce.group(1)], capture_output=True, text=True, timeout=600)
    assert pasted.returncode in (-11, 139), pasted.stdout + pasted.stderr
    assert f"[ after_launch: {KERNEL_OF_THE_CRASH} ]" in pasted.stdout + pasted.stderr


@pytest.mark.parametrize(
    "layout",
    ["tests beside the cwd, no ini", "--rootdir elsewhere with --import-mode=importlib", "-c other.ini"],
)
def test_layout(pytester: pytest.Pytester, run_pytest: RunPytest, layout: str) -> None:
    root = pytester.path
    cwd = root
    args: list[str] = ["--junitxml=report.xml", "-p", "no:logging"]
    source = CRASH_AND_HEALTHY
    if layout == "tests beside the cwd, no ini":
        _write_tests(root / "tests", source)
        (root / "tests" / "aoti_models.py").write_text(MODELS_SOURCE)
        cwd = root / "work"
        cwd.mkdir()
        args = ["../tests", "--junitxml=../report.xml", "-p", "no:logging"]
    elif layout == "--rootdir elsewhere with --import-mode=importlib":
        _write_tests(root / "tests", source)
        (root / "elsewhere").mkdir()
        args += ["tests", f"--rootdir={root / 'elsewhere'}", "--import-mode=importlib"]
    elif layout == "-c other.ini":
        # Only this ini makes check_* functions tests: a child that lost -c would collect nothing.
        (root / "configs").mkdir()
        (root / "configs" / "other.ini").write_text("[pytest]\npython_functions = check_*\n")
        (root / "tests").mkdir()
        (root / "tests" / "test_layout.py").write_text(source)
        args += ["-c", "configs/other.ini", "tests"]
    else:
        raise AssertionError(layout)
    result = run_pytest(*args, cwd=cwd)
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    _assert_isolated_crash(text)
    assert "last phase: run" in text  # read from the child's phase file: it got as far as the package
    cases = junit_cases(root / "report.xml")
    assert len(cases) == 2
    crash = next(case for name, case in cases.items() if name.endswith("crash"))
    assert crash["outcomes"] == ["failure"]


def test_a_path_argument_made_during_the_run_does_not_move_the_childs_rootdir(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    """pytest picks its rootdir from the path arguments that exist when it starts, option values included: the
    cache dir, given as ``--aoti-cache-dir DIR`` and made by the first test, would move the child's rootdir (to the
    common ancestor) and its node ids with it, unless the child is pinned to the parent's."""
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_user.py").write_text(
        """
import pytest


def test_opens_the_cache(aoti_compile):
    pass


@pytest.mark.aoti_isolate
def test_isolated(aoti_device):
    pass
"""
    )
    new_dir = pytester.path / "made-by-the-run"
    result = run_pytest("test_user.py", "--aoti-cache-dir", str(new_dir), cache=None, cwd=pytester.path / "suite")
    result.assert_outcomes(passed=2)
    assert new_dir.is_dir()
