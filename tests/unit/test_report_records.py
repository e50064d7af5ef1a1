"""Each part owns the JUnit properties it writes (issue 53): it publishes them as typed records in its own package,
and no other module of pytest-aoti writes one of those names as a literal. The names themselves stay as users'
JUnit consumers read them."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import pytest_aoti
from pytest_aoti.benchmark import records as benchmark_records
from pytest_aoti.ci_summary import markdown
from pytest_aoti.debug import records as debug_records
from pytest_aoti.hookspecs import ReportProperties, ReportProperty, ReportSection, report_properties
from pytest_aoti.snapshots import records as snapshot_records

PACKAGE = Path(pytest_aoti.__file__).parent
# Each part's properties, by the package (a subpackage's name) that owns them.
OWNED = {
    "benchmark": benchmark_records.PROPERTIES,
    "snapshots": snapshot_records.PROPERTIES,
    "debug": debug_records.PROPERTIES,
}
KNOWN = ReportProperties.of(*OWNED.values())


def _owner_of(name: str) -> str | None:
    return next((part for part, properties in OWNED.items() if any(p.name == name for p in properties)), None)


def _part_of(path: Path) -> str:
    """The part a module belongs to: its subpackage, or the top-level module's own name."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def borrowed_names(source: str, part: str) -> list[tuple[int, str, str]]:
    """Each string literal of ``source`` (f-string pieces included) equal to a property name another part owns:
    its line, the name and its owner."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            owner = _owner_of(node.value)
            if owner is not None and owner != part:
                found.append((node.lineno, node.value, owner))
    return found


def test_no_module_writes_a_property_name_that_another_part_owns() -> None:
    borrowed = [
        f"{path.relative_to(PACKAGE)}:{line}: {name!r} is {owner}'s (read it from its records)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name, owner in borrowed_names(path.read_text(encoding="utf-8"), _part_of(path))
    ]
    assert borrowed == []


def test_the_scan_sees_literals_and_f_string_pieces() -> None:
    source = 'COLUMNS = ("aoti_latency_ms",)\nname = f"aoti_verdict{suffix}"\nown = "aoti_snapshot"\n'
    assert borrowed_names(source, "snapshots") == [(1, "aoti_latency_ms", "benchmark"), (2, "aoti_verdict", "debug")]


def test_the_property_names_stay_as_users_read_them() -> None:
    assert {part: [p.name for p in properties] for part, properties in OWNED.items()} == {
        "benchmark": [
            "aoti_latency_ms",
            "aoti_latency_iqr_ms",
            "aoti_vs_baseline",
            "aoti_speedup_vs_eager",
            "aoti_load_ms",
            "aoti_memory",
            "aoti_benchmark",
        ],
        "snapshots": ["aoti_snapshot", "aoti_snapshot_file"],
        "debug": [
            "aoti_rerun_outcome",
            "aoti_verdict",
            "aoti_suspect_kernel",
            "aoti_first_nonfinite_kernel",
            "aoti_first_nonfinite_buffer",
            "aoti_signal",
            "aoti_reproduce",
            "aoti_bundle",
            "aoti_sanitizer",
            "aoti_minified",
            "aoti_first_divergent_kernel",
            "aoti_reproduced",
            "aoti_source",
        ],
    }


def _report(nodeid: str, outcome: str, properties: list[tuple[str, object]]) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x.py", 0, nodeid), {}, outcome, None, "call", user_properties=properties)


def test_the_ci_summary_tables_are_the_columns_the_parts_publish() -> None:
    stats: dict[str, list[Any]] = {
        "failed": [_report("x.py::test_crash", "failed", [("aoti_verdict", "segfault in k")])],
        "passed": [
            _report("x.py::test_golden", "passed", [("aoti_snapshot", "out matched")]),
            _report("x.py::test_fast", "passed", [("aoti_latency_ms", "1.5"), ("aoti_memory", "2 MiB")]),
        ],
    }
    text = markdown(stats, 1, None, KNOWN)
    assert "| test | outcome | debug verdict |" in text and "segfault in k" in text
    assert "| test | goldens |" in text and "out matched" in text
    assert "| test | latency (ms) | vs baseline | vs eager | load (ms) | memory |" in text
    assert "| ` x.py::test_fast ` | 1\\.5 |  |  |  | 2 MiB |" in text
    # A part that publishes no column has no table.
    assert "### Benchmarks" not in markdown(stats, 1, None, ReportProperties.of(debug_records.PROPERTIES))


def _config(*published: object) -> Any:
    """A config whose hook returns ``published`` (what each plugin's implementation returned)."""
    return SimpleNamespace(hook=SimpleNamespace(pytest_aoti_report_properties=lambda config: list(published)))


def test_the_hook_adds_what_other_plugins_publish_after_the_layers_below() -> None:
    theirs = ReportProperty("my_plugin_score", ReportSection.BENCHMARKS, column="score")
    known = report_properties(_config([theirs]), debug_records.PROPERTIES)
    assert known.columns(ReportSection.BENCHMARKS) == (theirs,)
    assert known.find("aoti_verdict") is not None


def test_a_hook_result_that_is_no_list_of_records_is_a_usage_error() -> None:
    with pytest.raises(pytest.UsageError, match=r"pytest_aoti_report_properties returned \['aoti_x'\]: expected"):
        report_properties(_config(["aoti_x"]))
