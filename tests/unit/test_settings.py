"""Options, ini twins and marker arguments: resolution and every bad value, in-process (no torch, no compile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_aoti.debug.options import item_debug
from pytest_aoti.settings import item_settings


def _marked_beside_a_plain_test(pytester: pytest.Pytester, marker: str) -> pytest.RunResult:
    pytester.makepyfile(
        test_user=f"""
        import pytest

        @pytest.mark.{marker}
        def test_marked(aoti_device):
            pass

        def test_after():
            pass
        """
    )
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("aoti_ima(timeout='soon')", "aoti_ima: timeout= expected seconds greater than 0 (finite), got 'soon'"),
        ("aoti_ima(timeout=True)", "aoti_ima: timeout= expected seconds greater than 0 (finite), got True"),
        ("aoti_ima(timeout=float('nan'))", "aoti_ima: timeout= expected seconds greater than 0 (finite), got nan"),
        # Past threading.TIMEOUT_MAX a wait is an OverflowError (issue 62 item 1): at most a week.
        ("aoti_ima(timeout=1e99)", "aoti_ima: timeout= expected seconds of at most 604800, got 1e+99"),
        ("aoti_ima(timeout=1e12)", "aoti_ima: timeout= expected seconds of at most 604800, got 1000000000000.0"),
        ("aoti_ima(stagse=('kernels',))", "aoti_ima: got an unexpected keyword argument 'stagse'"),
        (
            "aoti_ima(stages=('kernel',))",
            "aoti_ima: stages= expected a non-empty subset of ('kernels', 'tensors', 'sanitizer', 'numerics', 'mini",
        ),
        ("aoti_ima(stages=())", "aoti_ima: stages= expected a non-empty subset of ('kernels', 'tensors', 'sani"),
        ("aoti_ima(stages=('minify',))", "aoti_ima: stages=('minify',) alone has no repro bundle to minify"),
        ("aoti_ima(stages='kernels')", "aoti_ima: stages= expected a non-empty subset of"),
        ("aoti_ima(env='A=1')", "aoti_ima: env= expected a dict of str to str, got 'A=1'"),
        ("aoti_ima(env={'A': 1})", "aoti_ima: env= expected a dict of str to str, got {'A': 1}"),
        ("aoti_ima(kernels=5)", "aoti_ima: kernels= expected a list of kernel names, got 5"),
        ("aoti_ima(kernels='cpp_fused_0')", "aoti_ima: kernels= expected a list of kernel names, got 'cpp_fused_0'"),
        ("aoti_ima(stages=('tensors',))", "aoti_ima: stages=('tensors',) alone needs kernels="),
        ("aoti_isolate(5)", "aoti_isolate: too many positional arguments"),
        ("aoti_isolate(timeout=0)", "aoti_isolate: timeout= expected seconds greater than 0 (finite), got 0"),
        ("aoti_isolate(timeout=1e99)", "aoti_isolate: timeout= expected seconds of at most 604800, got 1e+99"),
        ("aoti(allow_nan=True)", "aoti: got an unexpected keyword argument 'allow_nan'"),
        ("aoti(allow_nonfinite='false')", "aoti: allow_nonfinite= expected True or False, got 'false'"),
        ("aoti(restride_inputs=1)", "aoti: restride_inputs= expected True or False, got 1"),
        ("aoti(allow_out_of_range='yes')", "aoti: allow_out_of_range= expected True or False, got 'yes'"),
        ("aoti_deploy(threads=-1)", "aoti_deploy: threads= expected a whole number >= 0, got -1"),
        ("aoti_deploy(num_runners=0)", "aoti_deploy: num_runners= expected a whole number >= 1, got 0"),
        ("aoti_deploy(standalone='yes')", "aoti_deploy: standalone= expected True or False, got 'yes'"),
    ],
)
def test_a_bad_marker_argument_fails_only_its_test(pytester: pytest.Pytester, marker: str, message: str) -> None:
    """As pytest's own ``skipif`` with a bad condition: the test errors at setup with one line, and the session
    runs the rest (issue 62 item 1: ``aoti_ima(timeout=1e99)`` ended the session in an INTERNALERROR)."""
    result = _marked_beside_a_plain_test(pytester, marker)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_marked*", f"*test_user.py::test_marked: @pytest.mark.{message}*"]
    )
    assert "INTERNALERROR" not in result.stdout.str()
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--aoti-device=tpu"], "", "--aoti-device: unknown device 'tpu'; expected auto, cpu, cuda or cuda:N"),
        ([], "aoti_device = gpu0", "ini option aoti_device: unknown device 'gpu0'"),
        (["--aoti-rerun-timeout=soon"], "", "--aoti-rerun-timeout: expected seconds, got 'soon'"),
        (["--aoti-rerun-timeout=-1"], "", "--aoti-rerun-timeout: expected seconds greater than 0 (finite), got '-1'"),
        (["--aoti-rerun-timeout=nan"], "", "--aoti-rerun-timeout: expected seconds greater than 0 (finite), got 'nan'"),
        (["--aoti-rerun-timeout=inf"], "", "--aoti-rerun-timeout: expected seconds greater than 0 (finite), got 'inf'"),
        # Past threading.TIMEOUT_MAX a wait is an OverflowError (issue 62 item 1): at most a week.
        (["--aoti-rerun-timeout=1e99"], "", "--aoti-rerun-timeout: expected seconds of at most 604800, got '1e99'"),
        ([], "aoti_rerun_timeout = 1e12", "ini option aoti_rerun_timeout: expected seconds of at most 604800, got"),
        ([], "aoti_rerun_timeout = 0", "ini option aoti_rerun_timeout: expected seconds greater than 0"),
        (["--aoti-cache-max-mb=lots"], "", "--aoti-cache-max-mb: expected a size in MiB, got 'lots'"),
        (["--aoti-minify-budget=0"], "", "--aoti-minify-budget: expected seconds greater than 0 (finite), got '0'"),
        ([], "aoti_minify = sometimes", "ini option aoti_minify: invalid truth value 'sometimes'"),
        ([], "aoti_debug = maybe", "ini option aoti_debug: invalid truth value 'maybe'; expected true or false"),
        (["--aoti-debug", "--pdb"], "", "cannot be combined with --pdb"),
        (["--aoti-isolate", "--trace"], "", "cannot be combined with --trace"),
        (["--aoti-minify-budget=1e308"], "", "--aoti-minify-budget: expected seconds of at most 604800, got '1e308'"),
        (["--aoti-flaky-reruns=-1"], "", "--aoti-flaky-reruns: expected a number of extra runs (a whole number >= 0)"),
        (["--aoti-flaky-reruns=1000"], "", "--aoti-flaky-reruns: expected a number of extra runs of at most 10, got"),
        (["--aoti-flaky-reruns=99999999999999999999"], "", "--aoti-flaky-reruns: expected * of at most 10, got '9999*"),
        ([], "aoti_flaky_reruns = 11", "ini option aoti_flaky_reruns: expected a number of extra runs of at most 10"),
        # A test-only knob is no option (the suite's tests set PYTEST_AOTI_MINIFY_MAX_CANDIDATES instead).
        (["--aoti-minify-max-candidates=1"], "", "*unrecognized arguments: --aoti-minify-max-candidates=1"),
    ],
)
def test_bad_options_are_usage_errors(pytester: pytest.Pytester, args: list[str], ini: str, message: str) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_user="def test_nothing(): pass")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    assert "INTERNALERROR" not in result.stderr.str()


def test_precedence_ini_then_command_line_then_marker(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naoti_rerun_timeout = 120\naoti_debug = true\n")
    items, _ = pytester.inline_genitems(
        pytester.makepyfile(
            test_user="""
            import pytest

            @pytest.mark.aoti_ima(timeout=7, env={"A": "1"}, kernels=("k0",), stages=("tensors",))
            @pytest.mark.aoti_isolate
            @pytest.mark.aoti(allow_nonfinite=True, allow_out_of_range=True)
            def test_marked(aoti_device):
                pass

            def test_uses_fixture(aoti_compile):
                pass

            def test_plain():
                pass
            """
        ),
        "--aoti-rerun-timeout=60",
    )
    marked, uses_fixture, plain = (item_debug(item) for item in items)
    marked_aoti, uses_fixture_aoti = item_settings(items[0]), item_settings(items[1])
    assert marked.request is not None
    assert (marked.request.timeout, dict(marked.request.env), marked.request.kernels, marked.request.stages) == (
        7.0,
        {"A": "1"},
        ("k0",),
        ("tensors",),
    )
    # aoti_ima(timeout=) bounds the isolated run too, when aoti_isolate gives no timeout of its own.
    assert (marked.isolate_reason, marked.isolate_timeout, marked_aoti.allow_nonfinite) == (
        "marked aoti_isolate",
        7,
        True,
    )
    assert marked_aoti.allow_out_of_range and not uses_fixture_aoti.allow_out_of_range
    assert uses_fixture.request is not None and uses_fixture.request.timeout == 60  # the command line beats the ini
    assert uses_fixture.isolate_reason is None and not uses_fixture_aoti.allow_nonfinite
    assert plain.request is None  # --aoti-debug (here from the ini) covers only tests that use the aoti fixtures


def test_markers_and_options_are_registered(pytester: pytest.Pytester) -> None:
    markers = pytester.runpytest_inprocess("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.aoti_ima(*", "@pytest.mark.aoti_isolate(*", "@pytest.mark.aoti(*"])
    helps = pytester.runpytest_inprocess("--help")
    helps.stdout.fnmatch_lines(
        ["*--aoti-device=*", "*--aoti-debug*", "*--aoti-isolate*", "*--aoti-cache-dir=*", "*aoti_rerun_timeout*"]
    )


def test_report_header_shows_settings_from_ini_and_cli(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naoti_debug = true\naoti_rerun_timeout = 120\naoti_device = cpu\n")
    pytester.makepyfile(test_user="def test_nothing(): pass")
    result = pytester.runpytest_inprocess("--aoti-rerun-timeout=60")
    result.stdout.fnmatch_lines(["aoti: device=cpu, debug=on, isolate=off, rerun timeout=60s, cache=*"])


def test_a_relative_cache_dir_follows_pytests_conventions(pytester: pytest.Pytester) -> None:
    """On the command line: relative to where pytest was started (like --basetemp); in the ini file: to the rootdir
    (like cache_dir)."""
    pytester.makeini("[pytest]\naoti_cache_dir = from-ini\n")
    pytester.mkdir("sub")
    pytester.makepyfile(test_user="def test_nothing(): pass")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(pytester.path / "sub")
        from_ini = pytester.runpytest_inprocess("..", "-p", "no:cacheprovider")
        from_cli = pytester.runpytest_inprocess("..", "-p", "no:cacheprovider", "--aoti-cache-dir=from-cli")
    from_ini.stdout.fnmatch_lines([f"aoti: *cache={pytester.path / 'from-ini'} (cap *"])
    from_cli.stdout.fnmatch_lines([f"aoti: *cache={pytester.path / 'sub' / 'from-cli'} (cap *"])


def test_header_says_where_minify_applies_without_debug(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_nothing(): pass")
    alone = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--aoti-minify", "--aoti-sanitizer")
    alone.stdout.fnmatch_lines(["aoti: * (minify and sanitizer apply to tests marked aoti_ima only: add --aoti-debug*"])
    with_debug = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--aoti-minify", "--aoti-debug")
    assert "apply to tests marked aoti_ima only" not in with_debug.stdout.str()


@pytest.mark.parametrize(
    ("args", "header"),
    [
        (["--aoti-debug"], "crash guard: one xdist worker"),
        (["--aoti-debug", "-p", "no:xdist"], None),
        (["--aoti-debug", "-n", "0"], None),
        (["--aoti-debug", "-s"], None),  # xdist would swallow the output: isolated tests write it instead
        ([], None),
    ],
)
def test_where_debug_reruns_survive_a_crash(pytester: pytest.Pytester, args: list[str], header: str | None) -> None:
    """--aoti-debug alone becomes one supervised xdist worker; with xdist off, tests that want a debug rerun are
    isolated instead (test_crash_survival.py runs both with real crashes)."""
    from pytest_aoti.debug.options import CrashGuard, debug_settings_key

    pytester.makepyfile(test_user="def test_nothing(): pass")
    config = pytester.parseconfigure("-p", "no:cacheprovider", *args)
    guard = config.stash[debug_settings_key].crash_guard
    if header is not None:
        assert guard is CrashGuard.ONE_WORKER
        assert config.option.numprocesses == 1 and config.option.dist == "load"
    else:
        assert guard is CrashGuard.ISOLATE


def test_an_aoti_ima_timeout_bounds_the_isolated_first_run(pytester: pytest.Pytester) -> None:
    """In a session that runs tests in-process, a test marked aoti_ima runs isolated from the start: the marker's
    timeout bounds that run, as it bounds the debug stages (tests/test_options.py runs one that hangs)."""
    from pytest_aoti.debug.options import DEBUG_ISOLATION_REASON

    # Collected in a configured session, not under --collect-only (where no test runs, so none is isolated).
    module = pytester.getmodulecol(
        """
        import pytest

        @pytest.mark.aoti_ima(timeout=5)
        def test_bounded():
            pass

        @pytest.mark.aoti_ima
        def test_default():
            pass

        @pytest.mark.aoti_ima(timeout=5)
        @pytest.mark.aoti_isolate(timeout=9)
        def test_isolate_timeout_wins():
            pass
        """,
        configargs=["-p", "no:cacheprovider", "--aoti-rerun-timeout=60"],
        withinit=False,
    )
    items = pytester.genitems([module])
    bounded, default, both = (item_debug(item) for item in items)
    assert (bounded.isolate_reason, bounded.isolate_timeout) == (DEBUG_ISOLATION_REASON, 5)
    assert (default.isolate_reason, default.isolate_timeout) == (DEBUG_ISOLATION_REASON, 60)
    assert (both.isolate_reason, both.isolate_timeout) == ("marked aoti_isolate", 9)


def test_cache_clear_is_an_action_without_an_ini_twin(pytester: pytest.Pytester) -> None:
    """An ini twin of --aoti-cache-clear would empty the cache on every run: pytest calls it unknown instead."""
    from pytest_aoti.cache.options import cache_settings_key

    pytester.makeini("[pytest]\naoti_cache_clear = true\n")
    pytester.makepyfile(test_user="def test_nothing(): pass")
    assert not pytester.parseconfigure("-p", "no:cacheprovider").stash[cache_settings_key].cache_clear
    # The run that clears is pointed at a cache dir of its own: configuring with --aoti-cache-clear empties it.
    own_cache = str(pytester.path / "aoti-cache")
    clearing = pytester.parseconfigure("-p", "no:cacheprovider", "--aoti-cache-dir", own_cache, "--aoti-cache-clear")
    assert clearing.stash[cache_settings_key].cache_clear
    strict = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-config")
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    strict.stderr.fnmatch_lines(["*Unknown config option: aoti_cache_clear*"])


@pytest.mark.parametrize("raw", ["0", "two", "-1", "1.5"])
def test_the_minify_candidate_cap_knob_names_a_bad_value(
    raw: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The suite's cap on minify's candidates (an environment knob of the minify process, not a pytest option):
    a bad value stops the search before it starts, naming the variable."""
    from pytest_aoti.debug.minify import MAX_CANDIDATES_ENV, main

    monkeypatch.setenv(MAX_CANDIDATES_ENV, raw)
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path), "--budget", "1"])
    assert stopped.value.code == 2
    assert f"{MAX_CANDIDATES_ENV}: expected a whole number >= 1, got {raw!r}" in capsys.readouterr().err


# Flags that are actions, not settings: an ini twin would repeat the action on every run.
ACTIONS_WITHOUT_INI = {"--aoti-cache-clear", "--aoti-benchmark-update", "--aoti-snapshot-update"}


def test_every_flag_and_its_ini_twin_are_spelled_alike(pytester: pytest.Pytester) -> None:
    """``--aoti-x-y`` reads the ini key ``aoti_x_y``, in every part that has options (issue 53: the verify feature's
    ``--aoti-verify-import`` read ``aoti_verify_imports``)."""
    helps = pytester.runpytest_inprocess("--help").stdout.lines
    flags = {match for line in helps for match in re.findall(r"(?<![\w-])(--aoti-[a-z-]+)", line)}
    ini_keys = {match.group(1) for line in helps if (match := re.match(r"^  (aoti_\w+) \(", line))}
    deprecated = {"--aoti-verify-import"}
    assert {"--aoti-debug", "--aoti-verify-imports", "--aoti-benchmark-json", "--aoti-cache-url"} <= flags
    unmatched = sorted(
        flag
        for flag in flags - ACTIONS_WITHOUT_INI - deprecated
        if f"aoti_{flag[7:]}".replace("-", "_") not in ini_keys
    )
    assert unmatched == []
    assert sorted(key for key in ini_keys if "--" + key.replace("_", "-") not in flags) == []


def test_the_old_verify_import_spelling_still_works_with_a_deprecation_warning(pytester: pytest.Pytester) -> None:
    from pytest_aoti.verify.plugin import verify_settings_key

    pytester.makepyfile(test_user="def test_nothing(): pass")
    old = pytester.parseconfigure("-p", "no:cacheprovider", "--aoti-verify-import=my_ops", "--aoti-verify-import", "b")
    assert old.stash[verify_settings_key].imports == ("my_ops", "b")
    new = pytester.parseconfigure("-p", "no:cacheprovider", "--aoti-verify-imports=my_ops")
    assert new.stash[verify_settings_key].imports == ("my_ops",)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--aoti-verify-import=my_ops")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*PytestDeprecationWarning: --aoti-verify-import is deprecated: use --aoti-verify-imports*"]
    )
    quiet = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--aoti-verify-imports=my_ops")
    quiet.assert_outcomes(passed=1)
