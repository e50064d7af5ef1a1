"""The renderer, a child's outcome and the isolated-report state machine, as plain functions over real pytest
reports and real log text (the logs come from docs/gpu-evidence, recorded on an H100)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aoti.core.errors import AOTICompileError, failure_kind
from pytest_aoti.core.protocol import VerdictSummary
from pytest_aoti.core.source_lines import SourceLine
from pytest_aoti.debug import kernel_log
from pytest_aoti.debug.child import ChildRun, _outcome
from pytest_aoti.debug.crash_route import stamp
from pytest_aoti.debug.provenance import user_frame
from pytest_aoti.debug.reporting import (
    headline,
    isolated_reports,
    junit_properties,
    render,
    section_text,
    user_properties,
    verdict_record,
)
from pytest_aoti.debug.stages import KernelsResult, StageResults, Verdict, make_verdict
from pytest_aoti.debug.triage import not_rerun_reason


def _run(
    tmp_path: Path, stage: str, outcome: str, *, log: str = "", signal_name: str | None = None, **extra: object
) -> ChildRun:
    log_path = tmp_path / f"{stage}.log"
    log_path.write_text(log)
    return ChildRun(
        stage=stage,
        outcome=outcome,
        returncode=-11 if signal_name else 1,
        signal_name=signal_name,
        seconds=1.5,
        log_path=log_path,
        command=["python", "-u", "-m", "pytest", "tests"],
        env_delta={"PYTEST_AOTI_CHILD": stage, "PYTEST_AOTI_REPORT_FILE": "/x", "TMPDIR": "/y"},
        cwd=tmp_path,
        **extra,  # type: ignore[arg-type]
    )


CRASH_LOG = (
    "[ before_launch: k0 ]\n[ after_launch: k0 ]\n[ before_launch: k1 ]\nFatal Python error: Segmentation fault\n"
)


def test_crash_in_a_kernel_names_the_kernel_and_the_signal(tmp_path: Path) -> None:
    run = _run(tmp_path, "kernels", "crashed", log=CRASH_LOG, signal_name="SIGSEGV")
    # The analysis reads the log, once: rendering reads no file.
    verdict = make_verdict("t.py::test", StageResults(runs=(run,), kernels=KernelsResult.read(run)))
    assert (verdict.died_in, verdict.last_completed) == (kernel_log.died_in(CRASH_LOG), "k0")
    assert headline(verdict) == (
        "crashed with SIGSEGV; in kernel k1 (before_launch with no after_launch); consistent (1 of 1 rerun)"
    )
    properties = dict(user_properties(verdict))
    assert properties["aoti_signal"] == "SIGSEGV" and properties["aoti_suspect_kernel"] == "k1"
    assert properties["aoti_reproduce"] == f"cd {tmp_path} && PYTEST_AOTI_CHILD=kernels python -u -m pytest tests"
    run.log_path.unlink()
    section = section_text(verdict)
    assert "stage kernels (printer=None): crashed with SIGSEGV [1.5 s]" in section
    assert "suspect kernel: k1 (launched, never finished)" in section
    assert "Fatal Python error: Segmentation fault" in section
    rendered = render(verdict, "crash")
    summary = verdict_record(rendered)
    assert summary.headline == rendered.headline == headline(verdict)
    assert VerdictSummary.from_dict(summary.to_dict()) == summary  # as it crosses xdist inside the report


def test_a_crash_between_kernels_blames_the_code_between_them(tmp_path: Path) -> None:
    run = _run(tmp_path, "kernels", "crashed", signal_name="SIGABRT", phases=["run"])
    verdict = Verdict("t.py::test", stages=(run,), last_completed="k0", phase="run", crashed_in="call")
    assert "after kernel k0 completed and before the next kernel launched" in headline(verdict)
    assert dict(user_properties(verdict))["aoti_suspect_kernel"] == "k0"


def test_a_real_crash_dump_names_the_innermost_frame_of_the_users_code(tmp_path: Path) -> None:
    """faulthandler's dump of a real segfault (the standard library's ctypes frame innermost): the user's frame is
    the one named, with its line read from the file."""
    script = tmp_path / "user_code.py"
    script.write_text("import ctypes\n\n\ndef release(handle):\n    ctypes.string_at(handle)\n\n\nrelease(0)\n")
    crashed = subprocess.run([sys.executable, "-X", "faulthandler", str(script)], capture_output=True, text=True)
    assert crashed.returncode == -11, crashed.stderr
    frames = kernel_log.crash_frames("[ after_launch: k0 ]\n" + crashed.stderr)
    assert frames[0].function == "string_at" and [f.line for f in frames[1:]] == [5, 8], frames
    assert user_frame(frames) == SourceLine(str(script), 5, "release", "ctypes.string_at(handle)")
    assert kernel_log.crash_frames("[ after_launch: k0 ]\nFatal Python error: Segmentation fault\n") == []
    # The other headers faulthandler writes: a dump without thread ids, and a thread named after its id.
    for header in (
        "Stack (most recent call first):",
        "Current thread 0x00007f10 [MainThread] (most recent call first):",
    ):
        dump = f'Fatal Python error: Aborted\n\n{header}\n  File "/a/b.py", line 3 in f\n\nExtension modules: x\n'
        assert kernel_log.crash_frames(dump) == [kernel_log.CrashFrame("/a/b.py", 3, "f")]


@pytest.mark.parametrize(
    ("phases", "crashed_in", "expected"),
    [
        (["run", "ran"], "teardown", "in teardown, after the package's last run returned: no kernel was running"),
        (["load", "loaded"], "call", "before the package ran: no kernel was running"),
    ],
)
def test_a_crash_while_no_kernel_ran_names_the_python_stack_not_a_kernel(
    tmp_path: Path, phases: list[str], crashed_in: str, expected: str
) -> None:
    run = _run(tmp_path, "kernels", "crashed", signal_name="SIGSEGV", phases=phases)
    frame = SourceLine(str(tmp_path / "conftest.py"), 12, "device", "torch.cuda.synchronize()")
    verdict = Verdict(
        "t.py::test",
        stages=(run,),
        last_completed="k0" if "ran" in phases else None,
        phase=phases[-1],
        crashed_in=crashed_in,
        crash_frame=frame,
        source_root=tmp_path,
    )
    assert headline(verdict) == (
        f"crashed with SIGSEGV; {expected} (the crash is outside the compiled code, unless the package corrupted "
        "memory that later code touched); the Python stack was at conftest.py:12 in device: "
        "torch.cuda.synchronize(); consistent (1 of 1 rerun)"
    )
    properties = dict(user_properties(verdict))
    assert "aoti_suspect_kernel" not in properties
    assert properties["aoti_source"] == "crash: at conftest.py:12 in device: torch.cuda.synchronize()"
    assert f"Python stack at the crash (innermost frame of your code): {frame.describe()}" in section_text(verdict)


def test_a_crash_before_any_kernel_names_the_python_stack(tmp_path: Path) -> None:
    run = _run(tmp_path, "kernels", "crashed", signal_name="SIGSEGV")
    frame = SourceLine(str(tmp_path / "conftest.py"), 7, "data", "ctypes.string_at(0)")
    verdict = Verdict("t.py::test", stages=(run,), crashed_in="setup", crash_frame=frame, source_root=tmp_path)
    assert headline(verdict) == (
        "crashed with SIGSEGV; the Python stack was at conftest.py:7 in data: ctypes.string_at(0); "
        "consistent (1 of 1 rerun)"
    )


def test_a_run_that_passed_did_not_reproduce(tmp_path: Path) -> None:
    verdict = Verdict("t.py::test", stages=(_run(tmp_path, "kernels", "passed"),))
    assert headline(verdict).startswith("did not reproduce in isolation")


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (("failed", "crashed"), "consistent (2 of 2 reruns)"),
        (("passed", "failed", "passed"), "flaky (1 of 3 reruns)"),
        (("passed", "passed", "passed"), "did not reproduce (0 of 3 reruns)"),
    ],
)
def test_reruns_are_counted(tmp_path: Path, outcomes: tuple[str, ...], expected: str) -> None:
    runs = [_run(tmp_path, "kernels", outcome, attempt=n + 1) for n, outcome in enumerate(outcomes)]
    verdict = Verdict("t.py::test", stages=tuple(runs))
    assert verdict.reproduction == expected
    assert dict(user_properties(verdict))["aoti_reproduced"] == expected
    if verdict.reproduced:
        assert verdict.first is next(run for run in runs if run.reproduced)
        assert headline(verdict).endswith(f"; {expected}")
    else:
        assert headline(verdict).startswith("did not reproduce in isolation (0 of 3 reruns failed;")
        assert "stage kernels, run 3 (printer=None): passed" in section_text(verdict)


def test_a_vanished_log_degrades_the_verdict(tmp_path: Path) -> None:
    run = _run(tmp_path, "kernels", "error", error="the child exited with code 1 before reporting the test's result")
    run.log_path.unlink()
    assert run.log.startswith(f"(log missing: {run.log_path}")
    verdict = make_verdict("t.py::test", StageResults(runs=(run,), kernels=KernelsResult.read(run)))
    assert "(log missing: " in section_text(verdict)


def test_triage_skips_reruns_that_cannot_tell_more(tmp_path: Path) -> None:
    assert not_rerun_reason("input_invariant", None) is not None
    assert not_rerun_reason("output_nonfinite", None) is None
    assert not_rerun_reason("mismatch", None) is None
    assert not_rerun_reason(None, None) is None  # a crash under xdist: no kind known, rerun
    assert "torch.export rejected the model" in (not_rerun_reason("export", None) or "")
    assert "failed to compile or load" in (not_rerun_reason("compile", None) or "")
    assert failure_kind(AOTICompileError("C++ compile error: expected ';'")) == "compile"
    # Autotuning ran a kernel that read out of bounds: worth the debug environment.
    assert failure_kind(AOTICompileError("CUDA error: an illegal memory access was encountered")) == "package_error"
    assert "setup failed before" in (not_rerun_reason("other", None, setup_failed_before_aoti=True) or "")
    timed_out = _run(tmp_path, "isolate", "timed out", timeout=5.0)
    assert "timed out after 5 s" in (not_rerun_reason("other", timed_out) or "")
    verdict = Verdict("t.py::test", not_rerun=not_rerun_reason("input_invariant", None))
    assert headline(verdict).startswith("not rerun: the failure is an input check")
    assert dict(user_properties(verdict))["aoti_rerun_outcome"] == "not rerun"


def _reports(pytester: pytest.Pytester, source: str) -> list[pytest.TestReport]:
    return list(pytester.inline_runsource(source).getreports("pytest_runtest_logreport"))


def test_outcome_of_a_child(pytester: pytest.Pytester) -> None:
    reports = _reports(pytester, "def test_pass(): pass\ndef test_fail(): assert 1 == 2, 'boom'")
    passed = [r for r in reports if r.nodeid.endswith("test_pass")]
    failed = [r for r in reports if r.nodeid.endswith("test_fail")]
    assert _outcome(passed, 0, "t") == ("passed", None)
    assert _outcome(passed[:1], 0, "t") == ("error", "the child exited with code 0 before reporting the test's result")
    assert _outcome([], 5, "t.py::x") == ("error", "the child collected no test 't.py::x' (see its log)")
    assert _outcome(failed, 1, "t") == ("failed", "AssertionError: boom")


@pytest.mark.parametrize(
    ("phases_reported", "expected"),
    [
        ((), [("setup", "failed"), ("teardown", "passed")]),
        (("setup",), [("setup", "passed"), ("call", "failed"), ("teardown", "passed")]),
        (("setup", "call"), [("setup", "passed"), ("call", "passed"), ("teardown", "failed")]),
        (("setup", "call", "teardown"), [("setup", "passed"), ("call", "passed"), ("teardown", "passed")]),
    ],
)
def test_isolated_reports_fail_the_phase_the_child_never_reported(
    pytester: pytest.Pytester, tmp_path: Path, phases_reported: tuple[str, ...], expected: list[tuple[str, str]]
) -> None:
    reports = _reports(pytester, "def test_func(): pass")
    item = pytester.getitem("def test_func(): pass")
    run = _run(tmp_path, "isolate", "crashed", signal_name="SIGSEGV", log="the end\n")
    run.reports = [r for r in reports if r.when in phases_reported]
    logged = isolated_reports(item, run, "--aoti-isolate")
    assert [(r.when, r.outcome) for r in logged] == expected
    assert all(("aoti isolation", "ran in a fresh subprocess: --aoti-isolate") in r.sections for r in logged)
    failed = [r for r in logged if r.failed]
    if failed:
        assert "crashed with SIGSEGV in an isolated subprocess (pytest-aoti)" in str(failed[0].longrepr)


def _stats_log(*blocks: tuple[str, str, str, str]) -> str:
    """Printer mode-2 text (the format recorded on the H100: docs/gpu-evidence/nan_inside.txt)."""
    lines = []
    for header, low, high, mean in blocks:
        lines += [f"[  {header}  ]:", f"Mean value: {mean}", f"Min value: {low}", f"Max value: {high}", "Size: [8]", ""]
    return "\n".join(lines)


def test_a_device_assert_verdict_names_the_bad_input_value(tmp_path: Path) -> None:
    """An out-of-range embedding index: the assert text and the index tensor's max lead the verdict, in place of
    AOTI's generic wrapper error."""
    log = (
        "[ before_launch: triton_poi_fused_embedding_0 ]\n"
        "/tmp/x.py:12: block: [0,9,0], thread: [99,0,0] Assertion `index out of bounds: 0 <= tmp4 < 100` failed.\n"
    )
    stats = kernel_log.tensor_stats(
        _stats_log(
            ("aoti_model_inputs - arg3_1", "0", "5000", "812.5"),
            ("aoti_model_inputs - arg0_1", "-2.1", "2.3", "0.01"),
            ("before_launch - triton_poi_fused_embedding_0 - arg3_1", "0", "5000", "812.5"),
            ("before_launch - triton_poi_fused_embedding_0 - arg0_1", "-2.1", "2.3", "0.01"),
            ("before_launch - triton_poi_fused_embedding_0 - buf0", "-1e30", "nan", "nan"),  # its output: garbage
        )
    )
    run = _run(
        tmp_path, "kernels", "failed", log=log, error="RuntimeError: run_func_( container_handle_, input_handles..."
    )
    verdict = Verdict(
        "t.py::test",
        stages=(run,),
        died_in="triton_poi_fused_embedding_0",
        device_assert=kernel_log.device_assert(log),
        suspect_inputs=tuple(kernel_log.kernel_inputs(stats, "triton_poi_fused_embedding_0")),
    )
    assert [block.arg for block in verdict.suspect_inputs] == ["arg3_1", "arg0_1"]
    text = headline(verdict)
    assert text.startswith("failed: device-side assert `index out of bounds: 0 <= tmp4 < 100`; in kernel ")
    assert "run_func_" not in text
    assert (
        "bad input arg3_1 (min 0, max 5000, mean 812.5, size [8]) into triton_poi_fused_embedding_0: outside the "
        "asserted range [0, 100)" in text
    )
    assert "bad input: arg3_1" in section_text(verdict)


# A CPU kernel's failed index check, as the kernels stage logged it for a BERT token id of 5000 (its fused embedding
# kernel ran in a parallel region, so the c10::Error aborted the process), and as a small kernel fails the run.
_CPU_ABORT_LOG = """[ before_launch: cpp_fused_add_embedding_native_layer_norm_0 ]
terminate called after throwing an instance of 'c10::Error'
  what():  index out of bounds: 0 <= tmp2 < 100L
Exception raised from cpp_fused_add_embedding_native_layer_norm_0 at /tmp/x/cb7t.kernel.cpp:39 (most recent call first):
"""
_CPU_ERROR_LOG = "Error: index out of bounds: 0 <= tmp3 < 10L\nException raised from cpp_fused__to_copy_embedding_mul_0"


def test_a_cpu_bounds_check_verdict_names_the_bad_input_and_the_lookup_line(tmp_path: Path) -> None:
    from pytest_aoti.core.source_lines import SourceLine
    from pytest_aoti.debug.provenance import KernelSource

    assert kernel_log.bounds_check(_CPU_ERROR_LOG) == "index out of bounds: 0 <= tmp3 < 10"
    kernel = "cpp_fused_add_embedding_native_layer_norm_0"
    stats = kernel_log.tensor_stats(
        _stats_log(
            ("aoti_model_inputs - arg41_1", "1", "5000", "210.188"),
            (f"before_launch - {kernel} - arg41_1", "1", "5000", "210.188"),
        )
    )
    add = SourceLine("bert.py", 105, "forward", "embeddings = embeddings + position_embeddings")
    lookup = SourceLine("bert.py", 100, "forward", "inputs_embeds = self.word_embeddings(input_ids)")
    verdict = Verdict(
        "t.py::test",
        stages=(_run(tmp_path, "kernels", "crashed", log=_CPU_ABORT_LOG, signal_name="SIGABRT"),),
        died_in=kernel,
        bounds_check=kernel_log.bounds_check(_CPU_ABORT_LOG),
        suspect_inputs=tuple(kernel_log.kernel_inputs(stats, kernel)),
        sources={"suspect": KernelSource(kernel, ("add_1", "embedding"), (add, lookup), (lookup,))},
    )
    text = headline(verdict)
    # The lookup's line comes first (the check is its), the bad input and the check follow.
    assert f"in kernel {kernel} (before_launch with no after_launch) at bert.py:100 in forward: inputs_embeds" in text
    assert (
        f"bad input arg41_1 (min 1, max 5000, mean 210.188, size [8]) into {kernel}: outside the asserted range "
        "[0, 100)" in text
    )
    assert text.endswith("kernel bounds check `index out of bounds: 0 <= tmp2 < 100`; consistent (1 of 1 rerun)")
    assert "kernel bounds check: index out of bounds: 0 <= tmp2 < 100" in section_text(verdict)
    # Without a failed index check, the kernel's lines keep their order.
    verdict = dataclasses.replace(verdict, bounds_check=None)
    assert "at bert.py:105 in forward: embeddings = embeddings + position_embeddings" in headline(verdict)


def test_a_nan_verdict_leads_with_the_nan_assert_not_the_wrapper_error(tmp_path: Path) -> None:
    evidence = (Path(__file__).parents[2] / "docs" / "gpu-evidence" / "nan_inside.txt").read_text()
    run = _run(tmp_path, "kernels", "failed", error="RuntimeError: run_func_( container_handle_, input_handles...")
    verdict = Verdict(
        "t.py::test",
        stages=(run,),
        last_completed="k",
        nan_assert="At least one NaN in buf0",
        first_nonfinite=kernel_log.first_nonfinite(kernel_log.tensor_stats(evidence)),
    )
    # The kernel that made the NaN leads (issue 50 item 7), then the NaN assert instead of AOTI's wrapper error.
    assert headline(verdict).startswith(
        "first NaN/Inf in triton_poi_fused_add_log_mul_0 (buf0 after launch, mean nan); "
        "failed: NaN assert: At least one NaN in buf0; last kernel completed: k"
    )


def test_a_crashed_items_file_is_found_from_its_node_id_outside_the_rootdir(tmp_path: Path) -> None:
    """Under --rootdir elsewhere, node ids start with ``../``: the file the child collects must be normalized as
    pytest normalizes its own paths, or the child prunes everything."""
    from types import SimpleNamespace

    from pytest_aoti.debug.parent import file_of_nodeid

    config = SimpleNamespace(rootpath=tmp_path / "elsewhere")
    assert file_of_nodeid(config, "../tests/test_x.py::TestA::test_b[a::b]") == tmp_path / "tests" / "test_x.py"  # type: ignore[arg-type]


def test_a_rerun_that_fails_another_way_says_it_is_not_the_tests_failure(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from pytest_aoti.debug.stages import failure_if_different

    reports = _reports(pytester, "def test_needs(scale): pass")  # a fixture only the parent had
    errored = _run(tmp_path, "kernels", "error", reports=[r for r in reports if r.when == "setup"])
    assert errored.failure == "other"
    crashed = _run(tmp_path, "kernels", "crashed", signal_name="SIGSEGV")

    def rerun(run: ChildRun, **found: object) -> Verdict:
        return Verdict("t.py::test", stages=(run,), **found)  # type: ignore[arg-type]

    assert failure_if_different("mismatch", rerun(errored)) == "mismatch"
    assert failure_if_different("crash", rerun(crashed)) is None
    assert failure_if_different(None, rerun(errored)) is None
    # A device-side assert raised as an exception in the test, aborting the launch-blocking rerun: one failure.
    from pytest_aoti.core.errors import failure_kind

    assert failure_kind(RuntimeError("CUDA error: device-side assert triggered")) == "package_error"
    wrapper = "run_func_( container_handle_, ...) API call failed at /pytorch/model_container_runner.cpp, line 145"
    assert failure_kind(RuntimeError(wrapper)) == "package_error"
    assert failure_if_different("package_error", rerun(crashed)) is None
    # On CUDA the NaN assert stops the package with AOTI's run error: the NaN the test found in an output.
    wrapped = _run(tmp_path, "kernels", "failed", error="RuntimeError: run_func_( ... ) API call failed")
    wrapped.reports = [r for r in reports if r.when == "setup"]
    for report in wrapped.reports:
        stamp(report, failure_kind="package_error")
    assert wrapped.failure == "package_error"
    assert failure_if_different("output_nonfinite", rerun(wrapped)) == "output_nonfinite"
    assert failure_if_different("output_nonfinite", rerun(wrapped, nan_assert="At least one NaN in buf0")) is None
    # The NaN asserts of stage kernels stop at the NaN the test found in an output: the same failure.
    assert failure_kind(RuntimeError("At least one NaN in buf4")) == "output_nonfinite"
    verdict = Verdict("t.py::test", stages=(errored,), test_failure="output_nonfinite")
    assert "(it failed with an output nonfinite error)" in headline(verdict)
    assert "it failed with another error" in headline(Verdict("t.py::test", stages=(errored,), test_failure="other"))
    verdict = Verdict("t.py::test", stages=(errored,), test_failure="mismatch")
    assert "not the test's failure (it failed with a mismatch error): this explains the rerun's" in headline(verdict)


def test_a_verdict_is_rendered_once_into_a_frozen_public_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The headline is computed once per rendering; the report section, the JUnit properties and the summary
    record all carry that one string; the public record is frozen and holds the facts a conftest files."""
    from pytest_aoti.debug import reporting

    runs = [
        _run(tmp_path, "kernels", "passed"),
        _run(tmp_path, "kernels", "crashed", log=CRASH_LOG, signal_name="SIGSEGV", attempt=2),
    ]
    verdict = Verdict("t.py::test", stages=tuple(runs), died_in="k1", last_completed="k0")
    calls = []
    real_headline = reporting.headline

    def counted(verdict: Verdict) -> str:
        calls.append(verdict.nodeid)
        return real_headline(verdict)

    monkeypatch.setattr(reporting, "headline", counted)
    rendered = render(verdict, "crash")
    assert calls == ["t.py::test"]
    assert rendered.text.startswith(f"verdict: {rendered.headline}\n")
    assert dict(junit_properties(rendered))["aoti_verdict"] == rendered.headline
    assert verdict_record(rendered).headline == rendered.headline
    assert (rendered.failure_kind, rendered.suspect_kernel, rendered.signal) == ("crash", "k1", "SIGSEGV")
    assert rendered.reproduced and rendered.flaky and rendered.reproduction == "flaky (1 of 2 reruns)"
    assert rendered.reproduce is not None and rendered.reproduce.startswith(
        f"cd {tmp_path} && PYTEST_AOTI_CHILD=kernels"
    )
    assert rendered.not_rerun is None and rendered.bundle is None and rendered.first_divergent_kernel is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        rendered.headline = "changed"  # type: ignore[misc]
    not_rerun = render(Verdict("t.py::test", not_rerun="setup failed"))
    assert (not_rerun.headline, not_rerun.rerun_outcome, not_rerun.reproduce) == ("not rerun: setup failed", None, None)
    assert junit_properties(not_rerun) == [
        ("aoti_rerun_outcome", "not rerun"),
        ("aoti_verdict", "not rerun: setup failed"),
    ]


def _nan_stats(kernel: str, arg: str) -> kernel_log.TensorStats:
    return kernel_log.tensor_stats(f"[  after_launch - {kernel} - {arg}  ]:\nMean value: nan\nMin value: nan\n")[0]


def test_a_crash_leads_with_where_it_crashed_even_after_a_nan(tmp_path: Path) -> None:
    """A NaN seen before a crash (a NaN index, say) follows the crash's kernel: the headline leads with the NaN's
    kernel only when the rerun failed on it."""
    run = _run(tmp_path, "kernels", "crashed", log=CRASH_LOG, signal_name="SIGSEGV")
    verdict = Verdict(
        "t.py::test", stages=(run,), died_in="k1", last_completed="k0", first_nonfinite=_nan_stats("k0", "buf0")
    )
    assert headline(verdict).startswith("crashed with SIGSEGV; in kernel k1 (before_launch with no after_launch); ")
    assert "; first NaN/Inf in k0 (buf0 after launch, mean nan); " in headline(verdict)


def test_a_nan_assert_with_no_nan_in_the_printers_stats_says_they_disagree(tmp_path: Path) -> None:
    kernels = _run(tmp_path, "kernels", "failed", error="RuntimeError: run_func_( container_handle_, …")
    tensors = _run(tmp_path, "tensors", "failed", error="AOTIInvariantError: output 0: nonfinite invariant violated")
    verdict = Verdict(
        "t.py::test",
        stages=(kernels, tensors),
        last_completed="k1",
        nan_assert="At least one NaN in buf3",
        suspects=("k0", "k1"),
    )
    disagreement = (
        "the NaN assert and the printer disagree: the assert names buf3, the printer saw no NaN/Inf in the kernels "
        "it printed (k0, k1)"
    )
    assert f"failed: NaN assert: At least one NaN in buf3; last kernel completed: k1; {disagreement}" in headline(
        verdict
    )
    assert disagreement in section_text(verdict).splitlines()
    # The same buffer in both: nothing to say.
    assert "disagree" not in section_text(dataclasses.replace(verdict, first_nonfinite=_nan_stats("k1", "buf3")))


def test_the_public_verdict_lives_with_the_hooks_and_holds_each_fact_once(tmp_path: Path) -> None:
    """Issue 53 item 5: the record ``pytest_aoti_verdict`` hands out carries no copy of its own fields (JUnit's
    properties are written from it; its report section is its headline's line and ``details``), and an absent
    value is None: stage numerics that compared and found no divergent kernel is None there, ``none`` in JUnit."""
    from pytest_aoti.core.protocol import Finding
    from pytest_aoti.hookspecs import PublicVerdict

    names = {field.name for field in dataclasses.fields(PublicVerdict)}
    assert not {"properties", "text"} & names
    run = _run(tmp_path, "numerics", "failed", error="AOTIMismatchError: output 0 differs")
    finding = Finding(diverged=None, launches=3, compared=3, noise="1e-06")
    rendered = render(Verdict("t.py::test", stages=(run,), numerics=finding), "mismatch")
    assert isinstance(rendered, PublicVerdict) and rendered.first_divergent_kernel is None
    assert rendered.numerics is not None and rendered.numerics.startswith("no kernel diverged from eager")
    properties = junit_properties(rendered)
    assert dict(properties)["aoti_first_divergent_kernel"] == "none"
    assert rendered.text == f"verdict: {rendered.headline}\n{rendered.details}"
    assert rendered.headline not in rendered.details
    # Each property is one field's value, in the order JUnit consumers have read them.
    assert [name for name, _ in properties] == [
        "aoti_rerun_outcome",
        "aoti_verdict",
        "aoti_reproduce",
        "aoti_first_divergent_kernel",
        "aoti_reproduced",
    ]
    from pytest_aoti.debug import verdict as old_home

    with pytest.warns(DeprecationWarning, match=r"import it from pytest_aoti\.hookspecs"):
        assert old_home.PublicVerdict is PublicVerdict  # conftests that annotate with it keep importing it
