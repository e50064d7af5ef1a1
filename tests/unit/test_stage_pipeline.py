"""The debug stages as one pipeline over a fake child launcher, fed the real logs of GPU runs in docs/gpu-evidence/
(as pytest-xdist tests its DSession with a MockNode): the verdict each real log gives, the flaky-or-consistent
count, and what a timed-out stage stops. No subprocess, no torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_aoti.core.protocol import Event, Outcome, ProtocolError, decode_events, encode_event
from pytest_aoti.debug.child import ChildRun
from pytest_aoti.debug.reporting import headline
from pytest_aoti.debug.stages import StagePipeline, StageResults, Verdict, make_verdict, run_stages

EVIDENCE = Path(__file__).parents[2] / "docs" / "gpu-evidence"


def _stage_log(evidence: str, stage: str) -> str:
    """The child's log of ``stage`` as the report printed it (trimmed: what the parser sees first and last)."""
    text = (EVIDENCE / evidence).read_text()
    start = text.index(f"--- log of stage {stage} (trimmed) ---\n") + len(f"--- log of stage {stage} (trimmed) ---\n")
    end = re.compile(r"^(--- log of stage \w+ \(trimmed\) ---|=+ aoti =+)$", re.M).search(text, start)
    return text[start : end.start() if end else len(text)]


class Finished:
    """A child that has already ended: what a fake launch hands back."""

    def __init__(self, run: ChildRun) -> None:
        self.run = run
        self.discarded = False

    def wait(self) -> ChildRun:
        return self.run

    def discard(self) -> None:
        self.discarded = True


class FakeLauncher:
    """Hands each stage the next of its scripted runs: (outcome, signal, log text)."""

    def __init__(
        self,
        tmp_path: Path,
        script: dict[str, list[tuple[str, str | None, str]]],
        errors: dict[str, str] | None = None,
    ) -> None:
        self.tmp_path = tmp_path
        self.script = script
        self.errors = errors or {}  # a stage's error line, as its child's report gave it
        self.launched: list[tuple[str, int, dict[str, str]]] = []

    def __call__(self, stage: str, env: dict[str, str], prefix: tuple[str, ...], attempt: int) -> Finished:
        self.launched.append((stage, attempt, env))
        outcome, signal_name, log = self.script[stage].pop(0)
        log_path = self.tmp_path / f"{stage}-{attempt}.log"
        log_path.write_text(log)
        return Finished(
            ChildRun(
                stage=stage,
                outcome=Outcome(outcome),
                returncode=None,
                signal_name=signal_name,
                seconds=1.0,
                log_path=log_path,
                command=["python", "-m", "pytest"],
                env_delta=env,
                cwd=self.tmp_path,
                attempt=attempt,
                error=self.errors.get(stage),
            )
        )


def _pipeline(launcher: FakeLauncher, tmp_path: Path, flaky_reruns: int = 2) -> StagePipeline:
    return StagePipeline(launcher, tmp_path, {}, flaky_reruns)


def _run(
    pipeline: StagePipeline,
    stages: tuple[str, ...],
    *,
    kernels: tuple[str, ...] = (),
    nonfinite: bool = False,
    sanitizer_on_cuda_error: bool = False,
    mismatch: bool = False,
) -> Verdict:
    """The verdict of the stages' results, as the debug rerun makes it."""
    results = run_stages(
        pipeline,
        stages,
        kernels=kernels,
        nonfinite_failure=nonfinite,
        sanitizer_on_cuda_error=sanitizer_on_cuda_error,
        mismatch=mismatch,
    )
    return make_verdict("test_user.py::test_embedding", results)


def test_the_embedding_assert_logs_give_the_bad_value_verdict(tmp_path: Path) -> None:
    launcher = FakeLauncher(
        tmp_path,
        {
            "kernels": [("crashed", "SIGABRT", _stage_log("embedding_assert.txt", "kernels"))],
            "tensors": [("crashed", "SIGABRT", _stage_log("embedding_assert.txt", "tensors"))],
        },
    )
    pipeline = _pipeline(launcher, tmp_path)
    verdict = _run(pipeline, ("kernels", "tensors"))
    # The GPU run's verdict, less the source line (that comes from the repro bundle's package, not from the logs).
    assert headline(verdict) == (
        "crashed with SIGABRT; in kernel triton_poi_fused_embedding_mul_0 (before_launch with no after_launch); bad "
        "input arg1_1 (min 5000, max 5000, mean 5000, size [4, 8]) into triton_poi_fused_embedding_mul_0: outside "
        "the asserted range [0, 100); device-side assert `index out of bounds: 0 <= tmp4 < 100`; consistent (2 of 2 "
        "reruns)"
    )
    # Stage tensors started first, beside stage kernels, printing every kernel (the suspects are not known yet);
    # its log was read for the suspect. Stage kernels alone recorded the failing call.
    (_, _, tensors_env), (_, _, kernels_env) = launcher.launched
    assert tensors_env["AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER"] == "2"
    assert "AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT" not in tensors_env
    assert verdict.suspects == ("triton_poi_fused_embedding_mul_0",)
    assert "PYTEST_AOTI_BUNDLE_DIR" in kernels_env and "PYTEST_AOTI_BUNDLE_DIR" not in tensors_env


def test_a_first_stage_that_passes_then_fails_is_called_flaky(tmp_path: Path) -> None:
    crash = _stage_log("ima_marked_plain.txt", "kernels")
    launcher = FakeLauncher(tmp_path, {"kernels": [("passed", None, "1 passed"), ("crashed", "SIGABRT", crash)]})
    pipeline = _pipeline(launcher, tmp_path)
    verdict = _run(pipeline, ("kernels",))
    assert [(stage, attempt) for stage, attempt, _ in launcher.launched] == [("kernels", 1), ("kernels", 2)]
    assert verdict.reproduction == "flaky (1 of 2 reruns)"
    assert verdict.died_in == "gather_shift_kernel_0"
    # Every run of the first stage records the failing call.
    assert all("PYTEST_AOTI_BUNDLE_DIR" in env for _, _, env in launcher.launched)


def test_a_failure_that_never_comes_back_stops_after_its_reruns(tmp_path: Path) -> None:
    passed = ("passed", None, "1 passed")
    launcher = FakeLauncher(tmp_path, {"kernels": [passed] * 3, "tensors": [passed]})
    pipeline = _pipeline(launcher, tmp_path)
    verdict = _run(pipeline, ("kernels", "tensors"))
    # Stage tensors ran once, beside the first run of stage kernels; only the first stage runs again.
    assert [stage for stage, _, _ in launcher.launched] == ["tensors"] + ["kernels"] * 3
    assert verdict.reproduction == "did not reproduce (0 of 4 reruns)"


def test_a_timed_out_kernels_stage_stops_the_stages_after_it(tmp_path: Path) -> None:
    crash = _stage_log("ima_marked_plain.txt", "kernels")
    launcher = FakeLauncher(tmp_path, {"kernels": [("timed out", None, crash)], "tensors": [("timed out", None, "")]})
    pipeline = _pipeline(launcher, tmp_path)
    verdict = _run(pipeline, ("kernels", "tensors", "sanitizer"), sanitizer_on_cuda_error=True)
    # Stage tensors, started beside it, is stopped with it: no sanitizer either.
    assert [stage for stage, _, _ in launcher.launched] == ["tensors", "kernels"]
    assert [run.stage for run in verdict.stages] == ["kernels"]
    assert pipeline.stopped
    assert "later stages not run: stage kernels timed out, and they would hang the same way" in verdict.notes


@pytest.mark.parametrize("mismatch", [True, False])
def test_stage_numerics_runs_only_for_a_mismatch(tmp_path: Path, mismatch: bool) -> None:
    launcher = FakeLauncher(tmp_path, {"numerics": [("failed", None, "1 failed")]})
    pipeline = _pipeline(launcher, tmp_path)
    verdict = _run(pipeline, ("numerics",), mismatch=mismatch)
    assert [stage for stage, _, _ in launcher.launched] == (["numerics"] if mismatch else [])
    expected_note = (
        "stage numerics found no mismatch to explain (the failure in this run was another)"
        if mismatch
        else "stage numerics not run: it explains a package-vs-eager mismatch from aoti_check, and this failure is "
        "not one"
    )
    assert verdict.notes == (expected_note,)


def test_the_report_stream_is_named_events_and_an_unknown_one_is_an_error() -> None:
    lines = [
        encode_event(Event.REPORT, {"nodeid": "t.py::test"}),
        encode_event(Event.WARNING, {"message": "m"}),
        '{"event": "report", "data": {"nodeid": "t.py::te',  # cut short by a crash: skipped
    ]
    assert list(decode_events(lines)) == [(Event.REPORT, {"nodeid": "t.py::test"}), (Event.WARNING, {"message": "m"})]
    with pytest.raises(ProtocolError, match="a child sent an unknown event 'progress'"):
        list(decode_events(['{"event": "progress", "data": {}}']))


KERNELS_CRASH = ("crashed", "SIGABRT", "[ before_launch: k0 ]\n[ after_launch: k0 ]\n[ before_launch: k1 ]\n")
TENSORS_CRASH = ("crashed", "SIGABRT", "[ before_launch: k1 ]\n")


@pytest.mark.parametrize(
    ("stages", "kernels", "sanitizer", "launched", "note"),
    [
        (("kernels",), (), None, ["kernels"], None),
        (("tensors",), ("k1",), None, ["tensors"], None),  # the user named the kernels: no kernels stage needed
        (("tensors",), (), None, [], None),  # nothing to filter to: stage tensors cannot run
        (("kernels", "tensors"), (), None, ["tensors", "kernels"], None),  # tensors beside kernels
        (("kernels", "tensors"), ("k1",), None, ["tensors", "kernels"], None),
        (
            ("kernels", "tensors", "sanitizer"),
            (),
            "/opt/cuda/bin/compute-sanitizer",
            ["tensors", "kernels", "sanitizer"],
            None,
        ),
        (("kernels", "sanitizer"), (), None, ["kernels"], "stage sanitizer not run: compute-sanitizer is not on PATH"),
        (("numerics", "kernels"), (), None, ["kernels"], "stage numerics not run"),
    ],
)
def test_each_stage_combination_launches_what_it_needs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stages: tuple[str, ...],
    kernels: tuple[str, ...],
    sanitizer: str | None,
    launched: list[str],
    note: str | None,
) -> None:
    import pytest_aoti.debug.stages as debug

    monkeypatch.setattr(debug, "sanitizer_path", lambda: sanitizer)  # this machine's PATH does not decide
    launcher = FakeLauncher(
        tmp_path,
        {"kernels": [KERNELS_CRASH], "tensors": [TENSORS_CRASH], "sanitizer": [("crashed", "SIGABRT", "")]},
    )
    pipeline = _pipeline(launcher, tmp_path, flaky_reruns=0)
    verdict = _run(pipeline, stages, kernels=kernels)
    assert [stage for stage, _, _ in launcher.launched] == launched
    if "kernels" in launched:
        assert verdict.suspect_kernel == "k1"
    if "tensors" in launched:
        _, _, env = next(entry for entry in launcher.launched if entry[0] == "tensors")
        # Filtered at codegen to the kernels the user named, else printing every kernel.
        assert env.get("AOT_INDUCTOR_FILTERED_KERNELS_TO_PRINT") == ("k1" if kernels else None)
    if "kernels" in launched and "tensors" in launched and not kernels:
        # The one that never finished first, then the last that did (a kernel may read what the one before wrote).
        assert verdict.suspects == ("k1", "k0")
    if note is not None:
        assert any(line.startswith(note) for line in verdict.notes), verdict.notes


def _stats(when: str, kernel: str, arg: str, value: str) -> str:
    return f"[  {when}_launch - {kernel} - {arg}  ]:\nMean value: {value}\nMin value: {value}\nMax value: {value}\n"


# Stage tensors' log printing every kernel: a NaN first made by k0, then carried into k1's output.
EVERY_KERNEL = (
    "crashed",
    "SIGABRT",
    _stats("after", "k0", "buf0", "nan") + _stats("before", "k1", "buf0", "nan") + _stats("after", "k1", "buf1", "nan"),
)


def test_a_crash_reads_stage_tensors_for_its_suspects_only(tmp_path: Path) -> None:
    launcher = FakeLauncher(tmp_path, {"kernels": [KERNELS_CRASH], "tensors": [EVERY_KERNEL]})
    pipeline = _pipeline(launcher, tmp_path, flaky_reruns=0)
    verdict = _run(pipeline, ("kernels", "tensors"))
    assert verdict.suspects == ("k1", "k0")
    assert verdict.first_nonfinite is not None and verdict.first_nonfinite.kernel == "k0"
    assert [block.arg for block in verdict.suspect_inputs] == ["buf0"]


def test_a_nan_widens_stage_tensors_to_every_launched_kernel(tmp_path: Path) -> None:
    kernels_log = "[ before_launch: k0 ]\n[ after_launch: k0 ]\n[ before_launch: k1 ]\n[ after_launch: k1 ]\n"
    launcher = FakeLauncher(tmp_path, {"kernels": [("failed", None, kernels_log)], "tensors": [EVERY_KERNEL]})
    pipeline = _pipeline(launcher, tmp_path, flaky_reruns=0)
    verdict = _run(pipeline, ("kernels", "tensors"), nonfinite=True)
    assert verdict.suspects == ("k0", "k1")
    assert verdict.first_nonfinite is not None and verdict.first_nonfinite.kernel == "k0"


def test_stage_tensors_log_is_read_for_the_suspects_only(tmp_path: Path) -> None:
    """A kernel the suspects do not name is not reported, whatever stage tensors printed for it."""
    only_k1_crashes = ("crashed", "SIGABRT", "[ before_launch: k1 ]\n")
    launcher = FakeLauncher(tmp_path, {"kernels": [only_k1_crashes], "tensors": [EVERY_KERNEL]})
    pipeline = _pipeline(launcher, tmp_path, flaky_reruns=0)
    verdict = _run(pipeline, ("kernels", "tensors"))
    assert verdict.suspects == ("k1",)
    assert verdict.first_nonfinite is not None
    assert (verdict.first_nonfinite.kernel, verdict.first_nonfinite.arg) == ("k1", "buf1")


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ("input_invariant", "an input check raised before the package ran"),
        ("export", "torch.export rejected the model"),
        ("compile", "failed to compile or load with an error"),
        ("random_mismatch", "the graph draws random numbers"),
        ("benchmark", "a benchmark slower than its baseline"),
        ("deploy", "a deployment check failed"),
        ("snapshot", "the outputs differ from golden outputs"),
        ("mismatch", None),
        ("output_nonfinite", None),
        ("crash", None),
        (None, None),
    ],
)
def test_triage_reruns_only_what_a_rerun_can_explain(failure: str | None, reason: str | None) -> None:
    from pytest_aoti.debug.triage import not_rerun_reason

    said = not_rerun_reason(failure, None)
    assert (said is None) if reason is None else (said is not None and reason in said), said


def test_triage_skips_a_setup_that_failed_before_aoti_and_a_timed_out_isolated_run(tmp_path: Path) -> None:
    from pytest_aoti.debug.triage import not_rerun_reason

    assert "setup failed before it exported" in str(not_rerun_reason(None, None, setup_failed_before_aoti=True))
    timed_out = FakeLauncher(tmp_path, {"isolate": [("timed out", None, "")]})("isolate", {}, (), 1).wait()
    timed_out.timeout = 5.0
    assert "timed out after 5 s" in str(not_rerun_reason("other", timed_out))


def test_phases_and_a_numerics_finding_cross_the_boundary_in_the_event_stream(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from pytest_aoti.core import phases
    from pytest_aoti.core.protocol import Finding, KernelFinding, append_event
    from pytest_aoti.debug.child import read_stream

    kernel = KernelFinding(
        kernel="cpp_fused_mul_tanh_1",
        launch=2,
        nodes=["tanh", "mul"],
        node="mul",
        buffer="buf1",
        max_abs=0.5,
        max_rel=0.25,
        index=[0, 3],
        within_noise=False,
        inputs_matched=True,
    )
    finding = Finding(diverged=kernel, launches=3, compared=2, notes=["n"])
    stream_file = tmp_path / "numerics.reports.jsonl"
    phases.report_to(str(stream_file), to_stderr=False)  # what a child's session does
    try:
        phases.mark("export")
        phases.mark("run", "/cache/model.pt2")
    finally:
        phases.report_to(None, to_stderr=False)
        phases.forget()
    append_event(str(stream_file), Event.FINDING, finding.to_dict())
    with stream_file.open("a") as stream:
        stream.write('{"event": "phase", "data": {"pha')  # a line cut short by a crash
    streamed = read_stream(pytester.parseconfigure("-p", "no:cacheprovider"), stream_file)
    assert streamed.phases == ["export", "run"]
    assert streamed.finding == finding


def test_a_minify_result_crosses_the_boundary_whole_and_renders_once() -> None:
    from pytest_aoti.core.protocol import MinifyResult
    from pytest_aoti.debug.reporting import minified_text

    result = MinifyResult(
        want="crash", nodes_before=6, budget_s=300.0, candidates=2, seconds=4.5, out_of_candidates=True
    )
    assert minified_text(result) == "minify: no smaller failing graph found (2 candidates in 4.5 s)"
    result.nodes_after, result.repro = 2, "/b/minified/repro.py"
    assert MinifyResult.from_json(result.to_json()) == result
    assert minified_text(result) == (
        "minify: 6 -> 2 nodes, still crash (2 candidates in 4.5 s, candidate cap reached): /b/minified/repro.py"
    )


def test_a_child_whose_stream_names_an_unknown_event_is_an_error_not_a_crash_of_pytest(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from pytest_aoti.debug.child import _ChildSetup, _finish

    config = pytester.parseconfigure("-p", "no:cacheprovider")
    report_path = tmp_path / "reports.jsonl"
    report_path.write_text('{"event": "progress", "data": {}}\n')
    launch = _ChildSetup(
        stage="isolate",
        attempt=1,
        nodeid="t.py::test",
        command=["python"],
        overrides=[],
        env_delta={},
        cwd=tmp_path,
        log_path=tmp_path / "isolate.log",
        report_path=report_path,
        tmpdir=tmp_path / "tmp",
        compiles=True,
    )
    run = _finish(config, launch, returncode=0, timed_out=False, seconds=1.0, timeout=60.0, forked=False)
    assert run.outcome is Outcome.ERROR
    assert (
        run.describe()
        == 'error: a child sent an unknown event \'progress\': \'{"event": "progress", "data": {}}\' (see its log)'
    )


def test_stages_running_side_by_side_get_their_own_basetemp_and_cache(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A child's pytest wipes its basetemp at start: stage tensors, started beside stage kernels, must not wipe the
    packages stage kernels is compiling (seen on the H100 as "Parent directory .../aoti-packages does not exist")."""
    from pytest_aoti.debug.child import _isolating_overrides

    config = pytester.parseconfigure()
    kernels, tensors, again = (
        _isolating_overrides(config, tmp_path, stem) for stem in ("kernels", "tensors", "kernels.2")
    )
    assert len({kernels[0], tensors[0], again[0]}) == 3 and all(
        o.startswith("--basetemp=") for o in (kernels[0], tensors[0])
    )
    assert kernels[-1] != tensors[-1]  # pytest's cache dir too


# Issue 50 item 6: the printer logs of a real CUDA run (H200, torch 2.11.0+cu130) of tests/data/cuda_nan_logs/
# test_deepnan.py.txt: an 8-block model whose block 4 is followed by log(h - 100), and a shallow relu(linear), log,
# linear. Stage kernels stops at the NaN assert; stage tensors prints every kernel's stats.
CUDA_NAN = Path(__file__).parents[1] / "data" / "cuda_nan_logs"
# What both stages' children reported on the GPU (pytest_debug_run.log): AOTI's wrapper error.
RUN_FUNC_ERROR = (
    "RuntimeError: run_func_( container_handle_, input_handles.data(), input_handles.size(), output_handles.data(), "
    "output_handles.size(), reinterpret_cast<AOTInductorStreamHandle>(stream_handle), proxy..."
)
DEEP_LOG_KERNEL = "triton_per_fused_add_addmm_gelu_log_native_layer_norm_sub_3"
SHALLOW_LOG_KERNEL = "triton_poi_fused_addmm_log_relu_sub_0"
# The model lines of test_deepnan.py each launch computes (as the GPU run's verdict named them): the fused kernel
# holding the log has the log's line first; every other launch of the deep model is a block's line.
MODEL_LINES = {
    "deep": {DEEP_LOG_KERNEL: (24, 11)},
    "shallow": {"aoti_torch_cuda_mm_out": (35,), SHALLOW_LOG_KERNEL: (36, 35), "aoti_torch_cuda_addmm_out": (37,)},
}


def _provenance_package(path: Path, model: str, tensors_log: str, model_file: Path) -> None:
    """A package holding only provenance data (``kernel_information.json``) for the model's launches, in the order
    stage tensors' log printed them, each with the stack trace of its lines in ``model_file``."""
    import json
    import zipfile

    from pytest_aoti.debug import kernel_log

    source = model_file.read_text().splitlines()
    launches = dict.fromkeys((b.kernel, b.launch) for b in kernel_log.tensor_stats(tensors_log) if b.kernel)
    info = {}
    for handle, (kernel, _) in enumerate(launches, start=1):
        assert kernel is not None
        lines = MODEL_LINES[model].get(kernel, (11,))
        traces = [f'File "{model_file}", line {n}, in forward\n    {source[n - 1].strip()}' for n in lines]
        info[f"{kernel}:{handle}"] = {"stack_traces": traces, "pre_grad_nodes": [f"node_{handle}"]}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data/aotinductor/model/kernel_information.json", json.dumps(info))


def _cuda_nan_verdict(tmp_path: Path, model: str, stages: tuple[str, ...], kernels_log: str | None = None) -> Verdict:
    """The verdict the stage pipeline makes of the recorded logs of ``model``, with the source lines a repro bundle
    would give it (read by the same ``read_bundle`` the debug rerun calls)."""
    kernels_log = kernels_log or (CUDA_NAN / f"{model}_kernels.log").read_text()
    tensors_log = (CUDA_NAN / f"{model}_tensors.log").read_text()
    launcher = FakeLauncher(
        tmp_path,
        {"kernels": [("failed", None, kernels_log)], "tensors": [("failed", None, tensors_log)]},
        errors={"kernels": RUN_FUNC_ERROR, "tensors": RUN_FUNC_ERROR},
    )
    pipeline = StagePipeline(launcher, tmp_path, {}, 0)
    results = run_stages(
        pipeline, stages, kernels=(), nonfinite_failure=True, sanitizer_on_cuda_error=False, mismatch=False
    )
    model_file = tmp_path / "test_deepnan.py"
    model_file.write_text((CUDA_NAN / "test_deepnan.py.txt").read_text())
    pipeline.bundle.mkdir()
    _provenance_package(pipeline.bundle / "package.pt2", model, tensors_log, model_file)
    bundle = pipeline.read_bundle(tmp_path)
    return make_verdict(f"test_deepnan.py::test_{model}_nan", results, bundle=bundle)


def test_the_deep_cuda_nan_is_blamed_on_the_kernel_that_wrote_it_everywhere(tmp_path: Path) -> None:
    """The printer writes a scalar argument's line with a literal backslash-n: the header of buf21's stats (the
    log's output) shared a line with it, and the first non-finite block the parser saw was the next matmul's."""
    from pytest_aoti.debug.figures import timeline
    from pytest_aoti.debug.reporting import junit_properties, render, summary_lines, verdict_record

    verdict = _cuda_nan_verdict(tmp_path, "deep", ("kernels", "tensors"))
    rendered = render(verdict, "output_nonfinite")
    at_the_log = "at test_deepnan.py:24 in forward: h = torch.log(h - 100.0); test_deepnan.py:11 in forward: "
    lead = f"first NaN/Inf in {DEEP_LOG_KERNEL} (buf21 after launch, mean nan) {at_the_log}"
    # The headline leads with the writer and its line (item 7), then the rerun's outcome; the NaN assert agrees.
    assert rendered.headline.startswith(lead), rendered.headline
    assert "; failed: NaN assert: At least one NaN in buf21; " in rendered.headline
    assert "aoti_torch_cuda_mm_out" not in rendered.headline and "disagree" not in rendered.headline
    assert f"first NaN/Inf: {DEEP_LOG_KERNEL} buf21 (mean nan, min nan, max nan, size [16, 64]) {at_the_log}" in (
        rendered.text
    )
    properties = dict(junit_properties(rendered))
    assert properties["aoti_verdict"] == rendered.headline
    assert (properties["aoti_first_nonfinite_kernel"], properties["aoti_first_nonfinite_buffer"]) == (
        DEEP_LOG_KERNEL,
        "buf21",
    )
    assert properties["aoti_source"].startswith(f"{DEEP_LOG_KERNEL}: {at_the_log}")
    assert summary_lines(verdict.nodeid, verdict_record(rendered))[0].startswith(f"{verdict.nodeid}: {lead}")
    # The page's timeline marks the same launch, with its line and the stats of its (finite) inputs.
    record = timeline(verdict)
    assert record is not None and record.marked == DEEP_LOG_KERNEL and record.source.startswith(at_the_log)
    assert record.inputs and all(stats.mean != "nan" for stats in record.inputs)


@pytest.mark.parametrize("stages", [("kernels", "tensors"), ("kernels",)], ids=["with stats", "NaN assert only"])
def test_the_shallow_cuda_nans_junit_source_is_the_writers_line_not_the_next_calls(
    tmp_path: Path, stages: tuple[str, ...]
) -> None:
    """The JUnit ``aoti_source`` named the linear after the NaN (the call after the last completed kernel, which
    only a crash between kernels is about)."""
    from pytest_aoti.debug.reporting import junit_properties, render

    rendered = render(_cuda_nan_verdict(tmp_path, "shallow", stages), "output_nonfinite")
    properties = dict(junit_properties(rendered))
    at_the_log = "at test_deepnan.py:36 in forward: h = torch.log(h - 100.0); test_deepnan.py:35 in forward: "
    assert properties["aoti_source"].startswith(f"{SHALLOW_LOG_KERNEL}: {at_the_log}"), properties
    assert "addmm_out" not in properties["aoti_source"]
    if stages == ("kernels",):  # no stats: the NaN assert and the kernel it stopped after lead
        assert rendered.headline.startswith(
            f"failed: NaN assert: At least one NaN in buf1; last kernel completed: {SHALLOW_LOG_KERNEL} {at_the_log}"
        ), rendered.headline
    else:
        assert rendered.headline.startswith(
            f"first NaN/Inf in {SHALLOW_LOG_KERNEL} (buf1 after launch, mean nan) {at_the_log}"
        ), rendered.headline
        assert (properties["aoti_first_nonfinite_kernel"], properties["aoti_first_nonfinite_buffer"]) == (
            SHALLOW_LOG_KERNEL,
            "buf1",
        )


def test_a_nan_assert_that_names_another_buffer_than_the_printer_says_they_disagree(tmp_path: Path) -> None:
    """Stage kernels' NaN assert and stage tensors' stats come from two runs: where they name different buffers,
    the verdict says so instead of picking one silently."""
    from pytest_aoti.debug.reporting import render

    kernels_log = (CUDA_NAN / "deep_kernels.log").read_text().replace("NaN in buf21", "NaN in buf25")
    rendered = render(_cuda_nan_verdict(tmp_path, "deep", ("kernels", "tensors"), kernels_log))
    disagreement = (
        "the NaN assert and the printer disagree: the assert names buf25, the printer's first non-finite buffer is "
        f"buf21 ({DEEP_LOG_KERNEL})"
    )
    assert rendered.headline.startswith(f"first NaN/Inf in {DEEP_LOG_KERNEL} (buf21 after launch"), rendered.headline
    assert f"; {disagreement}; failed: NaN assert: At least one NaN in buf25" in rendered.headline
    assert disagreement in rendered.text.splitlines()


def test_the_verdict_is_made_once_from_the_stages_frozen_results(tmp_path: Path) -> None:
    """Issue 53 item 5: each stage's run gives a frozen record of what its log said, and the verdict is made of them
    once the stages ran, frozen: no stage fills it in field by field."""
    import dataclasses

    launcher = FakeLauncher(tmp_path, {"kernels": [KERNELS_CRASH], "tensors": [EVERY_KERNEL]})
    results = run_stages(
        _pipeline(launcher, tmp_path, flaky_reruns=0),
        ("kernels", "tensors"),
        kernels=(),
        nonfinite_failure=False,
        sanitizer_on_cuda_error=False,
        mismatch=False,
    )
    assert isinstance(results, StageResults) and [run.stage for run in results.runs] == ["kernels", "tensors"]
    assert results.kernels is not None and (results.kernels.died_in, results.kernels.last_completed) == ("k1", "k0")
    assert results.tensors is not None and len(results.tensors.stats) == 3  # every block; read for the suspects
    verdict = make_verdict("test_user.py::test_embedding", results)
    assert (verdict.died_in, verdict.suspects, verdict.stages) == ("k1", ("k1", "k0"), results.runs)
    for record, name in ((results, "suspects"), (results.kernels, "died_in"), (verdict, "died_in")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, None)
    assert make_verdict("test_user.py::test_embedding", results) == verdict


def test_reruns_forked_with_one_hash_seed_say_so(tmp_path: Path) -> None:
    """Forks of one server share its string-hash seed: a verdict counted over two of them says that a failure that
    depends on a set's order could not differ between them (issue #62 item 13); one forked rerun, or fresh ones,
    say nothing."""

    def run(stage: str, shared: bool) -> ChildRun:
        return ChildRun(
            stage, Outcome.FAILED, 1, None, 1.0, tmp_path / f"{stage}.log", [], {}, tmp_path, shared_hash_seed=shared
        )

    from pytest_aoti.debug.stages import shared_hash_seed_note

    (note,) = shared_hash_seed_note((run("kernels", True), run("tensors", True)))
    assert note.startswith("2 reruns (kernels, tensors) were forked warm and shared one string-hash seed"), note
    assert shared_hash_seed_note((run("kernels", True), run("tensors", False))) == ()
    assert shared_hash_seed_note((run("kernels", True), run("sanitizer", True))) == ()
