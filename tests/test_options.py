"""Options, ini twins, markers and the promise that loading the plugin does not import torch."""

from __future__ import annotations

import pytest

from tests.conftest import RunPytest


def test_loading_the_plugin_does_not_import_torch(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import sys

        def test_torch_stays_out():
            assert "pytest_aoti.plugin" in sys.modules
            assert "torch" not in sys.modules
            assert "hypothesis.extra" not in sys.modules
        """
    )
    result = run_pytest("--aoti-debug", "--aoti-isolate")
    result.assert_outcomes(passed=1)


def test_report_header_shows_settings_from_ini_and_cli(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makeini(
        """
        [pytest]
        aoti_debug = true
        aoti_rerun_timeout = 120
        aoti_device = cpu
        """
    )
    pytester.makepyfile(test_user="def test_nothing(): pass")
    result = run_pytest("--aoti-rerun-timeout=60")
    result.stdout.fnmatch_lines(["aoti: device=cpu, debug=on, isolate=off, rerun timeout=60s, cache=*"])


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--aoti-device=tpu"], "", "--aoti-device: unknown device 'tpu'; expected auto, cpu, cuda or cuda:N"),
        ([], "aoti_device = gpu0", "ini option aoti_device: unknown device 'gpu0'"),
        (["--aoti-rerun-timeout=soon"], "", "--aoti-rerun-timeout: expected seconds, got 'soon'"),
        (["--aoti-rerun-timeout=-1"], "", "--aoti-rerun-timeout: expected seconds greater than 0, got '-1'"),
        (["--aoti-cache-max-mb=lots"], "", "--aoti-cache-max-mb: expected a size in MiB, got 'lots'"),
        (["--aoti-debug", "--pdb"], "", "cannot be combined with --pdb"),
    ],
)
def test_bad_options_are_usage_errors(
    pytester: pytest.Pytester, run_pytest: RunPytest, args: list[str], ini: str, message: str
) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_user="def test_nothing(): pass")
    result = run_pytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert "INTERNALERROR" not in result.stderr.str()


def test_markers_and_options_are_registered(run_pytest: RunPytest) -> None:
    markers = run_pytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.aoti_ima(*", "@pytest.mark.aoti_isolate(*", "@pytest.mark.aoti(*"])
    helps = run_pytest("--help")
    helps.stdout.fnmatch_lines(
        ["*--aoti-device=*", "*--aoti-debug*", "*--aoti-isolate*", "*--aoti-cache-dir=*", "*aoti_rerun_timeout*"]
    )


def test_strict_markers_accept_the_aoti_markers(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest

        @pytest.mark.aoti_ima(timeout=30)
        @pytest.mark.aoti(allow_nonfinite=True)
        def test_marked():
            pass
        """
    )
    run_pytest("--strict-markers").assert_outcomes(passed=1)
