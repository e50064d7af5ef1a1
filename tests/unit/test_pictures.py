"""The pictures' records, their JSON codec, the builders over real tensors and kernel logs (the H100 runs' logs in
docs/gpu-evidence, through the debug stages over a fake launcher), the drawing with and without matplotlib, and the
page's HTML: in-process, one behaviour each."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from pytest_aoti.benchmark.records import PROPERTIES as BENCHMARK_PROPERTIES
from pytest_aoti.debug.figures import verdict_figures
from pytest_aoti.debug.records import PROPERTIES as DEBUG_PROPERTIES
from pytest_aoti.debug.stages import Verdict
from pytest_aoti.hookspecs import ReportProperties, ReportSection
from pytest_aoti.pictures import render
from pytest_aoti.pictures.page import Findings, page_html, record_section, shown_as_text
from pytest_aoti.shared import output_diff
from pytest_aoti.shared.figure_builders import golden_errors, kernel_errors, kernel_timeline
from pytest_aoti.shared.figure_data import (
    FIGURE_PROPERTY,
    BenchmarkTimes,
    Divergence,
    FigureData,
    FigureDataError,
    GoldenErrors,
    InputStats,
    KernelError,
    KernelTimeline,
    attach_figure_data,
    decode,
    encode,
    figure_properties,
)
from pytest_aoti.snapshots.records import PROPERTIES as SNAPSHOT_PROPERTIES
from tests.unit.test_stage_pipeline import FakeLauncher, _pipeline, _run, _stage_log

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

DIVERGENCE = Divergence(
    kernels=(
        KernelError(1, "cpp_fused_relu_0", 2e-7, 1e-6),
        KernelError(2, "cpp_fused_add_mul_1", 0.75, math.inf),
    ),
    diverged_launch=2,
    source="at test_model.py:12 in forward: h = x * self.calls",
    tolerance="rtol=1.3e-06, atol=1e-05",
)
NONFINITE = KernelTimeline(
    problem="nonfinite",
    kernels=("cpp_fused_sin_0", "cpp_fused_log_mul_1", "cpp_fused_cos_2"),
    completed=3,
    marked="cpp_fused_log_mul_1",
    last_completed="cpp_fused_cos_2",
    inputs=(InputStats("buf0", "-1.5", "0.9", "-nan", "[4, 3]"),),
    source="at m.py:3 in forward: torch.log(x)",
)
CRASH = KernelTimeline(
    "crash", ("cpp_fused_sin_0", "aoti_tests::maybe_crash"), 1, "aoti_tests::maybe_crash", "cpp_fused_sin_0", (), ""
)
# What the parts publish through pytest_aoti_report_properties (the debug rerun's, imported below the features).
KNOWN = ReportProperties.of(DEBUG_PROPERTIES, SNAPSHOT_PROPERTIES, BENCHMARK_PROPERTIES)
VERDICTS, GOLDENS, BENCHMARKS = ReportSection.VERDICTS, ReportSection.GOLDENS, ReportSection.BENCHMARKS
GOLDEN = GoldenErrors("check0.example", 32, 3, 0, 20, (1e-6, 1e-5, 1e-4), (9, 3), 9e-5, 1.3e-6, 1e-5, 8.9e-5)
BENCHMARK = BenchmarkTimes(
    "test_speed", (1.2e-3, 1.3e-3, 1.25e-3), ((1e-3, 1.1e-3), (1.05e-3, 1e-3)), ("run 1", "run 2"), "1.2x slower"
)
RECORDS: list[FigureData] = [DIVERGENCE, NONFINITE, CRASH, GOLDEN, BENCHMARK]


def test_records_survive_their_json_with_nan_and_inf() -> None:
    nan_record = Divergence((KernelError(1, "k", math.nan, -math.inf),), None, "", "")
    decoded = decode(encode([*RECORDS, nan_record]))
    assert decoded[:-1] == RECORDS
    back = decoded[-1]
    assert isinstance(back, Divergence)
    assert math.isnan(back.kernels[0].max_abs) and back.kernels[0].max_rel == -math.inf


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ('{"kind": "golden"}', "expected a list of records, got dict"),
        ('[{"kind": "pie", "data": {}}]', "unknown kind of figure data 'pie'"),
        ('[{"kind": "golden", "data": {"name": "x"}}]', "golden: expected fields"),
        (
            '[{"kind": "divergence", "data": {"kernels": 3, "diverged_launch": 1, "source": "", "tolerance": ""}}]',
            "divergence:",
        ),
    ],
)
def test_figure_data_that_is_not_a_record_is_named(text: str, message: str) -> None:
    with pytest.raises(FigureDataError, match=message):
        decode(text)


def test_attached_records_travel_as_one_property_each_call() -> None:
    class Target:
        def __init__(self) -> None:
            self.user_properties: list[tuple[str, object]] = [("aoti_verdict", "x")]

    target = Target()
    attach_figure_data(target, GOLDEN)
    attach_figure_data(target)  # nothing to attach: no empty property
    attach_figure_data(target, BENCHMARK, CRASH)
    texts = figure_properties(target.user_properties)
    assert [name for name, _ in target.user_properties] == ["aoti_verdict", FIGURE_PROPERTY, FIGURE_PROPERTY]
    assert [decode(text) for text in texts] == [[GOLDEN], [BENCHMARK, CRASH]]


def test_golden_errors_of_real_tensors_agree_with_the_golden_comparison() -> None:
    torch.manual_seed(0)
    expected = torch.randn(64, 8)
    got = expected.clone()
    got[3, :4] += torch.tensor([1e-3, 2e-2, 5e-1, 3.0])
    got[7, 0] = math.nan
    expected[7, 0] = math.nan  # NaN against NaN matches
    rtol, atol = 1.3e-6, 1e-5
    record = golden_errors("out", got, expected, rtol, atol)
    diff = output_diff.compare("out", got, expected, rtol, atol)
    assert diff is not None
    assert record.elements == 512 and record.mismatched == 4 and record.nonfinite == 0
    assert record.zero == 508 and sum(record.counts) == 4
    assert record.max_abs == pytest.approx(3.0, rel=1e-6)
    assert record.needed_atol == pytest.approx(diff.needed_atol)
    assert record.bin_edges[0] <= 1e-3 and record.bin_edges[-1] >= 3.0


def test_golden_errors_count_an_unmatched_nan_as_nonfinite() -> None:
    expected = torch.zeros(4)
    record = golden_errors("out", torch.tensor([0.0, math.nan, 0.0, 1.0]), expected, 0.0, 0.5)
    assert (record.nonfinite, record.mismatched, record.zero) == (1, 2, 2)
    assert record.needed_atol == math.inf


def test_kernel_errors_keep_each_launch_worst_output_in_launch_order() -> None:
    rows = [[2, "k2", 1e-3, 1e-2], [1, "k1", 1e-7, 1e-6], [2, "k2", 5e-3, 1e-3]]
    assert kernel_errors(rows) == (KernelError(1, "k1", 1e-7, 1e-6), KernelError(2, "k2", 5e-3, 1e-2))


def test_a_timeline_from_kernel_log_events() -> None:
    events = [("before", "a"), ("after", "a"), ("before", "b"), ("after", "b"), ("before", "crash_op")]
    record = kernel_timeline("crash", events, marked="crash_op", inputs=[("buf1", "0", None, "1", "[2]")])
    assert record.kernels == ("a", "b", "crash_op")
    assert (record.completed, record.last_completed, record.marked) == (2, "b", "crash_op")
    assert record.inputs == (InputStats("buf1", "0", "?", "1", "[2]"),)


@pytest.mark.parametrize("record", RECORDS, ids=lambda record: record.kind + getattr(record, "problem", ""))
def test_each_record_is_drawn_with_its_numbers(record: FigureData) -> None:
    picture = render.draw(record)
    assert picture.png is not None and picture.png.startswith(PNG_MAGIC), picture.note
    assert picture.note is None and picture.table[0]


def test_captions_name_what_a_person_looks_for() -> None:
    assert (
        "first divergent kernel: cpp_fused_add_mul_1 (launch 2) at test_model.py:12" in render.draw(DIVERGENCE).caption
    )
    nonfinite = render.draw(NONFINITE).caption
    assert "first non-finite output: cpp_fused_log_mul_1" in nonfinite
    assert "its inputs: buf0 (min -1.5, max 0.9, mean -nan)" in nonfinite
    crash = render.draw(CRASH).caption
    assert "crashed in aoti_tests::maybe_crash" in crash and "last completed kernel: cpp_fused_sin_0" in crash
    assert "3 of 32 elements outside" in render.draw(GOLDEN).caption
    assert "passes with atol >= 8.9e-05" in render.draw(GOLDEN).caption


def test_without_matplotlib_the_numbers_stay_and_the_way_to_pictures_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` meets where it is not installed
    picture = render.draw(GOLDEN)
    assert picture.png is None and picture.note == render.NO_MATPLOTLIB
    assert picture.table[1] == ("1e-06", "1e-05", "9")


def test_a_matplotlib_that_fails_to_import_is_noted_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real package that raises what a matplotlib built for another numpy raises: not an ImportError.
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text('raise ValueError("dtype size changed.\\nExpected 96")\n')
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    picture = render.draw(GOLDEN)
    assert picture.png is None and picture.table[1] == ("1e-06", "1e-05", "9")
    assert picture.note == (
        "the picture could not be drawn: import matplotlib raised ValueError: dtype size changed. Expected 96"
    )


def test_a_picture_that_cannot_be_drawn_is_noted_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(figure: object, record: object) -> None:
        raise ValueError("no room on the canvas")

    monkeypatch.setitem(render._DRAW, GoldenErrors, refuse)
    picture = render.draw(GOLDEN)
    assert picture.png is None and picture.table == render.draw(GOLDEN).table
    assert picture.note == "the picture could not be drawn: ValueError: no room on the canvas"


def test_the_page_is_self_contained_and_escapes_what_tests_wrote() -> None:
    findings = Findings("test_x.py::test_<a>", "failed", "AssertionError: <b>")
    findings.properties = {"aoti_verdict": "kernel <k>", "aoti_reproduce": "python -m pytest x", "aoti_snapshot": "ok"}
    findings.pictures = [(record_section(record), render.draw(record)) for record in RECORDS]
    page = page_html([findings], KNOWN, "aoti cache: 1 hits, 2 misses")
    assert "<b>" not in page.replace("<b>verdict:</b>", "").replace("<figcaption><b>", "")
    assert "test_&lt;a&gt;" in page and "kernel &lt;k&gt;" in page
    assert page.count('src="data:image/png;base64,') == len(RECORDS)
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "aoti cache: 1 hits, 2 misses" in page and "python -m pytest x" in page


def test_records_and_properties_go_to_their_sections() -> None:
    assert [record_section(record) for record in RECORDS] == [VERDICTS, VERDICTS, VERDICTS, GOLDENS, BENCHMARKS]
    assert KNOWN.section_of("aoti_snapshot_file") is GOLDENS and KNOWN.section_of("aoti_latency_ms") is BENCHMARKS
    assert KNOWN.section_of("aoti_latency_ms (second)") is BENCHMARKS  # a named benchmark call's
    assert KNOWN.section_of("aoti_suspect_kernel") is VERDICTS and KNOWN.section_of("aoti_packages") is VERDICTS
    assert not shown_as_text("aoti_benchmark", KNOWN) and not shown_as_text(FIGURE_PROPERTY, KNOWN)
    assert shown_as_text("aoti_latency_ms", KNOWN)


def _gpu_verdict(tmp_path: Path, evidence: str, outcome: str, signal: str | None, *, nonfinite: bool) -> Verdict:
    """The verdict the debug stages give on a real H100 run's logs (docs/gpu-evidence), over a fake launcher."""
    script = {stage: [(outcome, signal, _stage_log(evidence, stage))] for stage in ("kernels", "tensors")}
    return _run(_pipeline(FakeLauncher(tmp_path, script), tmp_path), ("kernels", "tensors"), nonfinite=nonfinite)


def test_a_gpu_device_assert_crash_gives_the_timeline_up_to_the_kernel_that_never_finished(tmp_path: Path) -> None:
    verdict = _gpu_verdict(tmp_path, "embedding_assert.txt", "crashed", "SIGABRT", nonfinite=False)
    (timeline,) = verdict_figures(verdict)
    assert isinstance(timeline, KernelTimeline) and timeline.problem == "crash"
    assert timeline.marked == timeline.kernels[-1] == "triton_poi_fused_embedding_mul_0"
    assert timeline.completed == len(timeline.kernels) - 1
    assert [(s.arg, s.minimum, s.maximum) for s in timeline.inputs] == [("arg1_1", "5000", "5000")]
    picture = render.draw(timeline)
    assert picture.png is not None and "crashed in triton_poi_fused_embedding_mul_0" in picture.caption


def test_a_gpu_nan_gives_the_timeline_with_the_first_nonfinite_kernel(tmp_path: Path) -> None:
    verdict = _gpu_verdict(tmp_path, "gpu_nan.log", "failed", None, nonfinite=True)
    (timeline,) = verdict_figures(verdict)
    assert isinstance(timeline, KernelTimeline) and timeline.problem == "nonfinite"
    assert timeline.marked == "triton_poi_fused_add_log_mul_0" and timeline.kernels == (timeline.marked,)
    assert [s.arg for s in timeline.inputs] == ["arg0_1"]
    assert render.draw(timeline).png is not None


def test_a_long_timeline_shows_the_launches_around_the_first_nonfinite_kernel() -> None:
    kernels = tuple(f"cpp_fused_{number}" for number in range(100))
    record = KernelTimeline("nonfinite", kernels, 100, "cpp_fused_70", "cpp_fused_99", (), "")
    start, shown = render._window(record)
    assert kernels[start : start + len(shown)] == tuple(shown)
    assert len(shown) == render.TIMELINE_WINDOW and "cpp_fused_70" in shown and shown[-1] != "cpp_fused_70"
    crash = KernelTimeline("crash", kernels, 99, "cpp_fused_99", "cpp_fused_98", (), "")
    assert render._window(crash)[1][-1] == "cpp_fused_99"
    assert render.draw(record).png is not None
