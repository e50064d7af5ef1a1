"""Turning a debug verdict into what pytest shows: a report section, JUnit properties, terminal summary lines."""

from __future__ import annotations

import pytest

from pytest_aoti import kernel_log
from pytest_aoti.child import ChildRun
from pytest_aoti.debug import FILTER_ENV, LOAD_SEGFAULT_HINT, PRINTER_ENV, Verdict

SECTION_TITLE = "aoti debug rerun"


def _stage_line(run: ChildRun) -> str:
    printer = run.env_delta.get(PRINTER_ENV)
    what = f"printer={printer}" + (f" filtered to {run.env_delta[FILTER_ENV]}" if FILTER_ENV in run.env_delta else "")
    return f"stage {run.stage} ({what}): {run.describe()} [{run.seconds:.1f} s]"


def section_text(verdict: Verdict) -> str:
    lines = [f"verdict: {verdict.headline()}"]
    lines += [_stage_line(run) for run in verdict.stages]
    if verdict.died_in:
        lines.append(f"suspect kernel: {verdict.died_in} (launched, never finished)")
    elif verdict.last_completed:
        lines.append(f"last completed kernel: {verdict.last_completed}")
    if verdict.suspects:
        lines.append(f"suspects (printed by the tensors stage): {', '.join(verdict.suspects)}")
    if verdict.first_nonfinite is not None:
        stats = verdict.first_nonfinite
        lines.append(
            f"first NaN/Inf: {stats.kernel or 'model input'} {stats.arg} "
            f"(mean {stats.mean}, min {stats.minimum}, max {stats.maximum}, size {stats.size})"
        )
    for label, signal_text in (
        ("NaN assert", verdict.nan_assert),
        ("runtime input check", verdict.runtime_check),
        ("CUDA error", verdict.cuda_error),
    ):
        if signal_text:
            lines.append(f"{label}: {signal_text}")
    if verdict.phase:
        lines.append(f"last phase: {verdict.phase}")
    if verdict.phase == "load" and verdict.stages and verdict.first.outcome == "crashed":
        lines.append(f"hint: {LOAD_SEGFAULT_HINT}")
    for run in verdict.stages:
        lines.append(f"reproduce ({run.stage}): {run.reproduce}")
        lines.append(f"full log ({run.stage}): {run.log_path}")
    for run in verdict.stages:
        lines.append("")
        lines.append(f"--- log of stage {run.stage} (trimmed) ---")
        lines.append(kernel_log.trim(run.log))
    return "\n".join(lines)


def user_properties(verdict: Verdict) -> list[tuple[str, object]]:
    properties: list[tuple[str, object]] = [
        ("aoti_rerun_outcome", verdict.first.describe() if verdict.stages else "not run"),
        ("aoti_verdict", verdict.headline()),
    ]
    if verdict.suspect_kernel:
        properties.append(("aoti_suspect_kernel", verdict.suspect_kernel))
    if verdict.first_nonfinite is not None:
        properties.append(("aoti_first_nonfinite_kernel", verdict.first_nonfinite.kernel or "model input"))
    if verdict.stages and verdict.first.signal_name:
        properties.append(("aoti_signal", verdict.first.signal_name))
    if verdict.stages:
        properties.append(("aoti_reproduce", verdict.first.reproduce))
    return properties


def isolation_crash_text(run: ChildRun) -> str:
    """The longrepr of a test whose isolated child died: the signal, the phase, and the end of its output."""
    from pytest_aoti.phases import last_phase

    log = run.log
    phase = last_phase(log)
    lines = [f"{run.describe()} in an isolated subprocess (pytest-aoti)"]
    if phase:
        lines.append(f"last phase: {phase}")
    if phase == "load" and run.outcome == "crashed":
        lines.append(f"hint: {LOAD_SEGFAULT_HINT}")
    lines.append(f"reproduce: {run.reproduce}")
    lines.append(f"full log: {run.log_path}")
    lines.append("--- end of the child's output ---")
    lines.append("\n".join(log.splitlines()[-40:]))
    return "\n".join(lines)


def cache_summary(stats: list[dict[str, float]]) -> str:
    """One line over the cache statistics of this process and of every xdist worker."""
    total = {
        key: sum(s.get(key, 0) for s in stats)
        for key in ("hits", "misses", "compile_seconds", "saved_seconds", "corrupt")
    }
    line = (
        f"aoti cache: {int(total['hits'])} hits, {int(total['misses'])} misses, "
        f"{total['compile_seconds']:.1f} s compiling, {total['saved_seconds']:.1f} s saved"
    )
    if total["corrupt"]:
        line += f", {int(total['corrupt'])} corrupt entries recompiled"
    return line


def isolated_reports(item: pytest.Item, run: ChildRun, reason: str) -> list[pytest.TestReport]:
    """The child's reports, completed with a failed report for the phase it died in (crash or timeout)."""
    reports = list(run.reports)
    for report in reports:
        report.sections.append(("aoti isolation", f"ran in a fresh subprocess: {reason}"))
    if run.outcome in ("crashed", "timed out", "error") and not any(r.failed for r in reports):
        phases_done = [r.when for r in reports]
        when = "setup" if not phases_done else ("call" if phases_done[-1] == "setup" else "teardown")
        reports = [r for r in reports if r.when != "teardown"]
        if not phases_done:
            reports.append(_synthetic_report(item, "setup", "passed", None, reason))
            when = "call"
        reports.append(_synthetic_report(item, when, "failed", isolation_crash_text(run), reason))
        if when != "teardown":
            reports.append(_synthetic_report(item, "teardown", "passed", None, reason))
    return reports


def _synthetic_report(
    item: pytest.Item, when: str, outcome: str, longrepr: str | None, reason: str
) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={name: 1 for name in item.keywords},
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=longrepr,
        when=when,  # type: ignore[arg-type]
        sections=[("aoti isolation", f"ran in a fresh subprocess: {reason}")],
        user_properties=list(item.user_properties),
    )
