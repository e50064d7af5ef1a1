"""The pictures as a person would look at them: real runs (a numerics divergence, a NaN, a crash, a golden drift, a
benchmark against its recorded runs) make one ``--aoti-html`` page and one pytest-html report, which a real headless
Chromium opens; the page must load with no error and no broken image, and show each picture with the kernel, source
line or tolerance the verdict names. Plus the option, its ini twin and what a page without matplotlib holds, without
compiling (that loading the plugin imports no matplotlib is tests/unit/test_layers.py's).

Set ``AOTI_PICTURES_DOCS=docs`` to also copy the end-to-end test's pictures and screenshots there (the README's).
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_aoti.pictures.render import NOT_DRAWN
from pytest_aoti.shared.figure_data import GoldenErrors, encode
from tests.conftest import RunPytest, junit_cases, plugin_args

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs Debian's)")

PICTURE_TESTS = """
import os

import torch

from aoti_models import MLP, CallCounter, Crashy, LogModel


def test_divergence(aoti_check):
    # Export bakes in the call counter that eager reads afresh: the second input set parts in the middle kernel.
    aoti_check(CallCounter(), (torch.randn(3, 8),), more_inputs=[(torch.randn(3, 8),)])


def test_nan(aoti_compile):
    compiled = aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))
    compiled(-torch.rand(4, 3) - 0.5)


def test_crash(aoti_compile):
    compiled = aoti_compile(Crashy(), (torch.randn(4, 3),))
    compiled(torch.full((4, 3), 1000.0))


def test_golden(aoti_check):
    # The same package each run; PICTURES_DRIFT moves the inputs above 0.5, so some outputs drift from the golden.
    x = torch.linspace(-1, 1, 32).reshape(4, 8)
    aoti_check(MLP(), (x + float(os.environ.get("PICTURES_DRIFT", "0")) * (x > 0.5),), snapshot=True)


def test_speed(aoti_benchmark):
    aoti_benchmark(MLP(), (torch.randn(4, 8),))
"""

# Injected into a copy of a page before Chromium opens it: what went wrong, on the root element, for --dump-dom.
CHECK_SCRIPT = """<script>
(function () {
  var problems = [];
  function note(text) {
    problems.push(text);
    document.documentElement.setAttribute('data-problems', problems.join(' | '));
  }
  window.addEventListener('error', function (e) {
    note(e.message ? 'error: ' + e.message : 'failed to load: ' + (e.target && (e.target.src || e.target.href)));
  }, true);
  var original = console.error;
  console.error = function () {
    note('console.error: ' + Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
  window.addEventListener('load', function () {
    var pictures = Array.prototype.slice.call(document.images).filter(function (i) {
      return i.src.indexOf('data:image/png') === 0;
    });
    var broken = pictures.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
    document.documentElement.setAttribute('data-pictures', pictures.length + ' pictures, ' + broken.length + ' broken');
  });
})();
</script>"""

TITLES = {
    "divergence": "Kernel errors against eager, in launch order",
    "nonfinite": "Kernel timeline: where the first NaN/Inf appeared",
    "crash": "Kernel timeline up to the crash",
    "golden": "Golden drift: per-element error of",
    "benchmark": "Latency of",
}


KIND_TESTS = {
    "divergence": "divergence",
    "nonfinite": "nan",
    "crash": "crash",
    "golden": "golden",
    "benchmark": "speed",
}


def _pytest_html_rows(report: str) -> dict[str, list[str]]:
    """pytest-html's rows by test: the names of each row's extras (the report keeps its data as a JSON blob)."""
    blob = re.search(r'data-jsonblob="([^"]*)"', report)
    assert blob is not None
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    return {
        nodeid: [str(extra.get("name")) for row in rows for extra in row["extras"]] for nodeid, rows in tests.items()
    }


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def open_in_chromium(page: Path, screenshot: Path) -> dict[str, str]:
    """Open a copy of ``page`` with :data:`CHECK_SCRIPT` in headless Chromium; its root element's marks (pictures
    loaded and broken, problems seen). Also a screenshot of the page as it is."""
    checked = page.with_name(f"checked-{page.name}")
    checked.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + CHECK_SCRIPT, 1), encoding="utf-8")
    dump = _chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri())
    assert dump.returncode == 0, dump.stderr[-2000:]
    root = re.search(r"<html[^>]*>", dump.stdout)
    assert root is not None, dump.stdout[:500]
    marks = {name: html.unescape(value) for name, value in re.findall(r'(data-[a-z]+)="([^"]*)"', root.group(0))}
    shot = _chromium("--window-size=1400,2600", "--hide-scrollbars", f"--screenshot={screenshot}", page.as_uri())
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return marks


def _pictures(page: str) -> dict[str, tuple[bytes, str]]:
    """The page's pictures by title: the PNG and the caption under it."""
    found = {}
    pattern = (
        r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)">(?:<p class="note">.*?</p>)?'
        r"<figcaption>(.*?)</figcaption>"
    )
    for data, title, caption in re.findall(pattern, page):
        found[html.unescape(title)] = (base64.b64decode(data), html.unescape(caption))
    return found


def _picture(pictures: dict[str, tuple[bytes, str]], kind: str) -> tuple[bytes, str]:
    matches = [value for title, value in pictures.items() if title.startswith(TITLES[kind])]
    assert len(matches) == 1, f"{kind}: {sorted(pictures)}"
    return matches[0]


def _keep_for_docs(files: dict[str, Path | bytes]) -> None:
    target = os.environ.get("AOTI_PICTURES_DOCS")
    if not target:
        return
    for name, content in files.items():
        destination = Path(target) / name
        if isinstance(content, bytes):
            destination.write_bytes(content)
        else:
            shutil.copyfile(content, destination)


@needs_chromium
def test_pictures_of_real_findings_in_the_page_and_in_pytest_html(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_findings=PICTURE_TESTS)
    quick = ("-p", "no:logging")
    # Baseline runs for the trend. A run whose calibration moved (a busy machine) is not recorded: up to three
    # tries for two, and the picture must show the runs that were recorded, however many.
    recorded_runs = 0
    for _ in range(3):
        recorded = run_pytest("-k", "golden or speed", "--aoti-benchmark-update", "--aoti-snapshot-update", *quick)
        recorded.assert_outcomes(passed=2)
        recorded_runs += sum(line.startswith("test_speed: baseline run recorded in ") for line in recorded.outlines)
        if recorded_runs == 2:
            break
    monkeypatch.setenv("PICTURES_DRIFT", "0.01")
    result = run_pytest(
        "--aoti-debug",
        "--aoti-benchmark",
        "--aoti-benchmark-tolerance=100",  # judged, but never failed by a busy machine
        "--aoti-html=findings/aoti.html",
        "--html=report.html",
        "--self-contained-html",
        "--junitxml=findings.xml",
        *quick,
    )
    result.assert_outcomes(failed=4, passed=1)
    result.stdout.fnmatch_lines(["aoti html: *findings/aoti.html (5 tests, 5 pictures)"])
    cases = junit_cases(pytester.path / "findings.xml")
    page = (pytester.path / "findings" / "aoti.html").read_text(encoding="utf-8")
    pictures = _pictures(page)
    assert len(pictures) == 5, sorted(pictures)

    divergent = cases["test_divergence"]["properties"]["aoti_first_divergent_kernel"]  # type: ignore[index]
    caption = _picture(pictures, "divergence")[1]
    assert f"first divergent kernel: {divergent} (launch " in caption
    assert "aoti_models.py:" in caption and "in forward: h = torch.relu(self.first(x)) * self.calls + 0.5" in caption
    nonfinite = cases["test_nan"]["properties"]["aoti_first_nonfinite_kernel"]  # type: ignore[index]
    assert f"first non-finite output: {nonfinite}" in _picture(pictures, "nonfinite")[1]
    crash_caption = _picture(pictures, "crash")[1]
    last = cases["test_crash"]["properties"]["aoti_suspect_kernel"]  # type: ignore[index]
    assert f"last completed kernel: {last}" in crash_caption
    golden_caption = _picture(pictures, "golden")[1]
    assert re.search(r"[1-9]\d* of 16 elements outside rtol=1\.3e-06, atol=1e-05.*passes with atol >= ", golden_caption)
    runs = re.findall(r"<td>(run \d+|now)</td>", page)
    assert runs == [*(f"run {number}" for number in range(1, recorded_runs + 1)), "now"], (runs, recorded_runs)
    assert "aoti_latency_ms" in page and "aoti cache:" in page
    for test in ("test_divergence", "test_nan", "test_crash", "test_golden", "test_speed"):  # JUnit has the data too
        assert "aoti_figure_data" in cases[test]["properties"], test  # type: ignore[operator]
    for test in ("test_divergence", "test_nan", "test_crash"):  # the verdicts' reproduce lines
        assert html.escape(str(cases[test]["properties"]["aoti_reproduce"])) in page, test  # type: ignore[index]

    report = (pytester.path / "report.html").read_text(encoding="utf-8")
    rows = _pytest_html_rows(report)
    # Every test has its row, the crashed one too (its failed call report reaches pytest-html before its teardown),
    # and every row carries its picture.
    shown = {kind: title for kind, title in TITLES.items() if rows[f"test_findings.py::test_{KIND_TESTS[kind]}"]}
    assert set(shown) == set(TITLES), rows
    for kind, title in shown.items():
        assert any(name.startswith(title) for name in rows[f"test_findings.py::test_{KIND_TESTS[kind]}"]), kind
    marks = open_in_chromium(pytester.path / "findings" / "aoti.html", pytester.path / "page.png")
    assert marks == {"data-pictures": "5 pictures, 0 broken"}, marks
    report_marks = open_in_chromium(pytester.path / "report.html", pytester.path / "report.png")
    assert report_marks["data-pictures"] == f"{len(shown)} pictures, 0 broken", report_marks
    # pytest-html's own template holds an image without a source (its media viewer), which fails to load even in a
    # report without extras: only script errors count there.
    assert "error: " not in report_marks.get("data-problems", ""), report_marks
    _keep_for_docs(
        {
            "pictures-page.png": pytester.path / "page.png",
            "pictures-pytest-html.png": pytester.path / "report.png",
            **{f"picture-{kind}.png": _picture(pictures, kind)[0] for kind in TITLES},
        }
    )


def test_aoti_html_refuses_a_directory_and_its_ini_twin_writes_the_page(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one=f"""
        def test_drift(record_property):
            record_property("aoti_figure_data", {encode([GOLDEN])!r})
            record_property("aoti_verdict", "not rerun: golden outputs drifted")
        """
    )
    (pytester.path / "out").mkdir()
    refused = pytester.runpytest_subprocess(*plugin_args(), "--aoti-html=out")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--aoti-html: */out is a directory; expected the path of an HTML file to write*"])
    pytester.makeini("[pytest]\naoti_html = out/page.html\n")
    written = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:html")
    written.assert_outcomes(passed=1)
    page = (pytester.path / "out" / "page.html").read_text()
    assert "not rerun: golden outputs drifted" in page and 'src="data:image/png;base64,' in page


GOLDEN = GoldenErrors("check0.example", 4, 1, 0, 0, (1e-3, 1e-2), (1,), 5e-3, 0.0, 1e-3, 5e-3)


def test_without_matplotlib_the_page_has_the_numbers_and_says_how_to_get_pictures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one=f"""
        def test_drift(record_property):
            record_property("aoti_figure_data", {encode([GOLDEN])!r})
        """,
        # What a Python without matplotlib does at `import matplotlib`.
        sitecustomize="import sys\nsys.modules['matplotlib'] = None\n",
    )
    result = pytester.runpytest_subprocess(*plugin_args(), "--aoti-html=page.html", "-p", "no:html")
    result.assert_outcomes(passed=1)
    # Only the pictures drawn are counted, and the terminal says why the others are not there (issue 62 item 15).
    result.stdout.fnmatch_lines(
        [
            "aoti html: *page.html (1 tests, 0 pictures; 1 could not be drawn: pictures need matplotlib: pip install "
            "'pytest-aoti[[]plots]')"
        ]
    )
    page = (pytester.path / "page.html").read_text()
    assert "data:image/png" not in page
    assert "pictures need matplotlib: pip install &#x27;pytest-aoti[plots]&#x27;" in page
    assert "<td>0.001</td><td>0.01</td><td>1</td>" in page


def test_a_matplotlib_that_fails_to_import_is_noted_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    """A matplotlib built for another numpy raises ValueError (not ImportError) at import: a real broken package on
    the run's path. The page and pytest-html's report say why in one line; the test and the run pass."""
    pytester.makepyfile(
        test_one=f"""
        def test_drift(record_property):
            record_property("aoti_figure_data", {encode([GOLDEN])!r})
        """
    )
    broken = pytester.mkpydir("matplotlib") / "__init__.py"
    broken.write_text('raise ValueError("numpy.dtype size changed, may indicate binary incompatibility.\\n'
                      'Expected 96 from C header, got 88 from PyObject")\n')  # fmt: skip
    result = pytester.runpytest_subprocess(*plugin_args(), "--aoti-html=page.html", "--html=report.html")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    note = (
        "the picture could not be drawn: import matplotlib raised ValueError: numpy.dtype size changed, may "
        "indicate binary incompatibility. Expected 96 from C header, got 88 from PyObject"
    )
    result.stdout.fnmatch_lines(
        [f"aoti html: *page.html (1 tests, 0 pictures; 1 could not be drawn: {note.removeprefix(NOT_DRAWN)})"]
    )
    page = (pytester.path / "page.html").read_text()
    assert f'<p class="note">{note}</p>' in page and "data:image/png" not in page
    assert "<td>0.001</td><td>0.01</td><td>1</td>" in page  # the numbers stay
    assert note in html.unescape((pytester.path / "report.html").read_text())


def test_figure_data_another_version_wrote_is_noted_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one="""
        def test_other(record_property):
            record_property("aoti_figure_data", '[{"kind": "pie-chart", "data": {}}]')
        """
    )
    result = pytester.runpytest_subprocess(*plugin_args(), "--aoti-html=page.html", "-p", "no:html")
    result.assert_outcomes(passed=1)
    assert (
        "figure data that could not be read: unknown kind of figure data &#x27;pie-chart&#x27;"
        in (pytester.path / "page.html").read_text()
    )
