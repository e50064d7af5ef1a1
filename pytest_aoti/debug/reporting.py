"""The one renderer: a verdict's headline, report section, JUnit properties and summary lines; an isolated test's
reports; the cache line. Nothing else formats what pytest-aoti shows."""

from __future__ import annotations

from typing import Literal

import pytest

from pytest_aoti.core.protocol import Finding, KernelFinding, MinifyResult, Outcome, Stage, VerdictSummary
from pytest_aoti.debug import kernel_log, provenance, records
from pytest_aoti.debug.child import ChildRun
from pytest_aoti.debug.crash_route import AttachDebug, Crash, crash_reports, record_of
from pytest_aoti.debug.stages import FILTER_ENV, PRINTER_ENV, Verdict
from pytest_aoti.hookspecs import PublicVerdict

SECTION_TITLE = "aoti debug rerun"
ISOLATION_TITLE = "aoti isolation"
LOAD_SEGFAULT_HINT = (
    "the process crashed while loading the AOTI package. If this is a segfault in std::regex / parse_device_str, "
    "the package's .so carries its own libstdc++ locale code that clashes with the process's: run with "
    "LD_PRELOAD=libstdc++.so.6 (or the path of your libstdc++.so.6)"
)


def _where(stats: kernel_log.TensorStats) -> str:
    if stats.kernel is None:
        return f"model input {stats.arg}"
    return f"{stats.kernel} ({stats.arg} after launch, mean {stats.mean})"


def _at(verdict: Verdict, role: str) -> str:
    """`` at model.py:42 in forward: h = …`` for the kernel the verdict names in ``role``, or nothing. When the kernel
    failed an index check, the lines of its index reads (an embedding's lookup) come first: the check is theirs."""
    source = verdict.sources.get(role)
    return f" {_source_of(verdict, role, source)}" if source is not None else ""


def _source_of(verdict: Verdict, role: str, source: provenance.KernelSource) -> str:
    indexing = role == "suspect" and kernel_log.is_index_check(verdict.device_assert or verdict.bounds_check)
    # The op the eager replay stopped at (the index read out of range) leads among the kernel's lines.
    first = verdict.origin_line if verdict.origin is not None and verdict.origin.outputs == "raised" else None
    return provenance.where(source, verdict.source_root, indexing=indexing, first=first)


# Which named kernel's source line is the answer, most specific first.
_SOURCE_ROLES = ("divergent", "nonfinite", "next", "suspect")


def source_line(verdict: Verdict) -> str | None:
    """The user's line the verdict points at (JUnit ``aoti_source``): the line its headline leads with."""
    if verdict.crashed_after_run and verdict.crash_frame is not None:
        return f"crash: at {verdict.crash_frame.describe(verdict.source_root)}"
    origin = verdict.origin
    named = origin is not None and origin.op is not None and verdict.origin_line is not None
    if named and (nan_leads(verdict) or stopped_text(verdict) is not None):
        assert origin is not None and verdict.origin_line is not None
        return f"{origin.op}: at {verdict.origin_line.describe(verdict.source_root)}"
    roles = ("nonfinite", *_SOURCE_ROLES) if nan_leads(verdict) else _SOURCE_ROLES
    for role in roles:
        source = verdict.sources.get(role)
        if source is not None:
            return f"{source.name}: {_source_of(verdict, role, source)}"
    return None


_GENERIC_RUN_ERROR = "run_func_("


def nan_leads(verdict: Verdict) -> bool:
    """Whether the verdict is about a NaN/Inf whose maker the eager replay or whose writer the printer found: the
    rerun failed (it did not crash or hang) with no index check or CUDA error to explain first. Its headline then
    leads with that op, else that kernel."""
    first = verdict.first
    origin = verdict.origin
    found = verdict.first_nonfinite is not None or (origin is not None and origin.kind in ("NaN", "Inf"))
    return (
        found
        and first is not None
        and first.outcome is Outcome.FAILED
        and not (verdict.device_assert or verdict.bounds_check or verdict.cuda_error)
    )


def first_nonfinite_text(verdict: Verdict) -> str | None:
    """``first NaN/Inf in <kernel> (<buffer> after launch, mean nan) at <its line>``: the kernel that wrote the
    first non-finite buffer stage tensors' printer saw (left out when it is the kernel the origin names)."""
    found = verdict.first_nonfinite
    if found is None or (found.kernel is not None and _origin_kernel(verdict) == found.kernel):
        return None
    return f"first NaN/Inf in {_where(found)}{_at(verdict, 'nonfinite')}"


def _origin_kernel(verdict: Verdict) -> str | None:
    source = verdict.sources.get("origin")
    return source.name if source is not None else None


def origin_text(verdict: Verdict) -> str | None:
    """The op the eager replay found making the NaN/Inf, with its line, its inputs and the kernel that computes it
    (that kernel's other lines after it): ``NaN made by aten.log.default at model.py:12 in forward: …``. Or that
    eager stays finite, so the package's kernels made it."""
    origin = verdict.origin
    if origin is None or origin.outputs == "raised":
        return None
    if origin.kind is None or origin.node is None:
        if origin.outputs == "finite":
            return (
                "eager's replay of the exported program on the failing call's inputs stays finite: the package's "
                "kernels made the NaN/Inf, not the model's arithmetic (a compiler bug: see the kernel below)"
            )
        return None
    line = verdict.origin_line
    text = f"{origin.kind} made by {origin.op} (node {origin.node})"
    text += f" at {line.describe(verdict.source_root)}" if line is not None else ""
    if origin.inputs:
        text += f" from {', '.join(origin.inputs[:3])}{' …' if len(origin.inputs) > 3 else ''}"
    kernel = verdict.sources.get("origin")
    if kernel is not None:
        others = [other for other in kernel.lines if other != line]
        also = f" (its other lines: {'; '.join(o.describe(verdict.source_root) for o in others[:2])})" if others else ""
        text += f", in kernel {kernel.name}{also}"
    return text


def stopped_text(verdict: Verdict) -> str | None:
    """The op where eager's replay of the failing call stops too, when the package raised (not crashed): an index
    read out of its table's range (``index out of range in aten.embedding.default (node embedding_1) at …: index 39
    outside [0, 32) …``) or an op that raises (a custom op's own check), with its line and the launch that runs it."""
    origin, first = verdict.origin, verdict.first
    if origin is None or origin.outputs != "raised" or first is None or first.outcome is not Outcome.FAILED:
        return None
    line = verdict.origin_line
    at = f" at {line.describe(verdict.source_root)}" if line is not None else ""
    if origin.kind == "index":
        text = f"index out of range in {origin.op} (node {origin.node}){at}: {origin.output}"
    else:
        text = f"{origin.op} (node {origin.node}) raises in eager too{at}: {origin.output}"
    if origin.inputs:
        text += f"; its inputs: {', '.join(origin.inputs[:3])}{' …' if len(origin.inputs) > 3 else ''}"
    kernel = verdict.sources.get("origin")
    return text + (f"; in the package: {kernel.name}" if kernel is not None else "")


def fills_text(verdict: Verdict) -> str | None:
    """The infinities the eager replay found by design (a constant fill such as an attention mask's ``-inf``)."""
    origin = verdict.origin
    if origin is None or not origin.fills:
        return None
    shown = ", ".join(origin.fills[:3]) + (f" and {len(origin.fills) - 3} more" if len(origin.fills) > 3 else "")
    return f"infinities by design, not the fault: {shown} (a constant -inf/inf fill, such as an attention mask)"


def nan_disagreement(verdict: Verdict) -> str | None:
    """What the NaN assert of stage kernels and the printer's stats of stage tensors say, when they differ: the
    assert names a buffer that is not the first non-finite one the printer saw, or the printer saw none. The
    asserts stop at the first Inf as well as the first NaN: a NaN's origin after an infinity by design (a mask)
    is said so."""
    buffer = kernel_log.nan_assert_buffer(verdict.nan_assert)
    found = verdict.first_nonfinite
    if buffer is None or (found is not None and found.arg == buffer):
        return None
    origin = verdict.origin
    if origin is not None and origin.kind == "NaN" and "NaN" not in (verdict.nan_assert or ""):
        return f"the NaN assert stopped earlier, at an infinity ({verdict.nan_assert}), before the NaN was made"
    tensors = next((run for run in verdict.stages if run.stage == Stage.TENSORS), None)
    if found is not None:
        printer = f"the printer's first non-finite buffer is {found.arg} ({found.kernel or 'a model input'})"
    elif tensors is not None and tensors.reproduced:
        printer = f"the printer saw no NaN/Inf in the kernels it printed ({', '.join(verdict.suspects) or 'none'})"
    else:
        return None
    return f"the NaN assert and the printer disagree: the assert names {buffer}, {printer}"


def _cause(verdict: Verdict) -> str | None:
    """The specific reason the package failed, when the logs tell one."""
    if verdict.device_assert:
        return f"device-side assert `{verdict.device_assert}`"
    if verdict.bounds_check:
        return f"kernel bounds check `{verdict.bounds_check}`"
    if verdict.nan_assert:
        return f"NaN assert: {verdict.nan_assert}"
    return verdict.cuda_error


def _stats_text(block: kernel_log.TensorStats) -> str:
    return f"{block.arg} (min {block.minimum}, max {block.maximum}, mean {block.mean}, size {block.size})"


def bad_values(verdict: Verdict) -> list[str]:
    """The suspect kernel's inputs that explain the failure: outside an asserted range, or not finite."""
    bounds = kernel_log.asserted_bounds(verdict.device_assert or verdict.bounds_check)
    facts = []
    for block in verdict.suspect_inputs:
        if kernel_log.out_of_range(block, bounds):
            assert bounds is not None
            facts.append(
                f"{_stats_text(block)} into {verdict.suspect_kernel}: outside the asserted range "
                f"[{bounds[0]}, {bounds[1]})"
            )
        elif block.nonfinite:
            facts.append(f"{_stats_text(block)} into {verdict.suspect_kernel}: not finite")
    return facts


def _kernel_text(found: KernelFinding, at: str = "") -> str:
    return (
        f"{found.kernel} (nodes: {', '.join(found.nodes) or '?'}){at}{';' if at else ''} max abs err "
        f"{found.max_abs:.3g}, max rel err {found.max_rel:.3g} at index {tuple(found.index)}"
    )


def _inputs_text(found: KernelFinding) -> str:
    if not found.inputs_matched:
        return "; ".join(found.input_notes)
    if found.inputs_not_compared:
        return "inputs matched eager where compared; not compared: " + ", ".join(found.inputs_not_compared)
    return "inputs matched eager"


_EXPORT_CAUSE = (
    "Python state read at trace time, e.g. a counter or an attribute, is a constant in the graph while eager reads "
    "it afresh"
)


def divergence(finding: Finding, at: str = "") -> str:
    """Stage numerics' answer in one line: the first divergent kernel (``at``: its source line), or why there is
    none."""
    found = finding.diverged
    if found:
        return f"first divergent kernel: {_kernel_text(found, at)}; {_inputs_text(found)}"
    if not finding.compared:
        return "numerics: " + ("; ".join(finding.notes) or "no kernel output could be compared")
    text = f"no kernel diverged from eager beyond rounding noise ({finding.noise})"
    past = finding.past_tolerance
    if past:
        return (
            f"{text}; the test's tolerance ({finding.test_tolerance}) is tighter than the arithmetic allows: "
            f"the first kernel past it is {_kernel_text(past)}"
        )
    if finding.outputs_as_exported:
        return (
            f"{text}; the package's outputs are the exported program's and eager's are not: the difference comes "
            f"from export, not Inductor ({_EXPORT_CAUSE})"
        )
    if finding.outputs_within_noise:
        return (
            f"{text}; the outputs differ from eager's by rounding noise only: the test's tolerance "
            f"({finding.test_tolerance}) is tighter than the arithmetic allows"
        )
    return f"{text}; every kernel matched at the test's tolerance: the mismatch is in the comparison itself"


def divergence_details(finding: Finding) -> list[str]:
    found = finding.diverged or finding.past_tolerance
    lines = []
    if found and found.as_exported:
        lines.append(
            f"the exported program computes what the package does at {found.node}: the difference comes from "
            f"export, not Inductor ({_EXPORT_CAUSE})"
        )
    elif found and found.closer:
        closer = "both are as close" if found.closer == "neither" else f"the {found.closer} is closer"
        lines.append(
            f"float64 reference of {found.node}: {closer} (package max abs err "
            f"{found.package_err64:.3g}, eager {found.eager_err64:.3g})"
        )
    if found and found.within_noise is False and finding.past_tolerance and finding.diverged:
        lines.append(
            f"earlier, within rounding noise but past the test's tolerance: {_kernel_text(finding.past_tolerance)}"
        )
    lines.append(f"kernel outputs compared with eager: {finding.compared} over {finding.launches} launches")
    lines += [f"numerics: {note}" for note in finding.notes]
    return lines


def minified_text(result: MinifyResult) -> str:
    """Stage minify's answer: node counts before and after, and where the minimal repro is."""
    count = result.candidates
    searched = f"{count} candidate{'' if count == 1 else 's'} in {result.seconds} s"
    if result.nodes_after is None:
        return f"minify: {result.error or 'no smaller failing graph found'} ({searched})"
    stop = "candidate cap reached" if result.out_of_candidates else "budget reached" if result.out_of_time else "done"
    return (
        f"minify: {result.nodes_before} -> {result.nodes_after} nodes, still {result.want} ({searched}, {stop}): "
        f"{result.repro}"
    )


def headline(verdict: Verdict) -> str:
    if verdict.not_rerun:
        return f"not rerun: {verdict.not_rerun}"
    first = verdict.first
    if first is None:
        return "no debug stage ran"
    if not verdict.reproduced:
        total = verdict.rerun_counts[1]
        return (
            f"did not reproduce in isolation (0 of {total} rerun{'' if total == 1 else 's'} failed; the failure may "
            "depend on earlier tests or on timing)"
        )
    described = first.describe()
    cause = _cause(verdict)
    if cause and _GENERIC_RUN_ERROR in described:
        # AOTI's generic wrapper error says nothing; the logs said what happened.
        described = f"{first.outcome}: {cause}"
    # The first NaN/Inf: its kernel and line, and whether the NaN assert says otherwise. A NaN's verdict leads
    # with them; the run's outcome and the rest follow.
    nan_parts = [
        part
        for part in (origin_text(verdict), first_nonfinite_text(verdict), nan_disagreement(verdict))
        if part is not None
    ]
    leads = nan_leads(verdict)
    stopped = stopped_text(verdict)
    parts = [*(nan_parts if leads else []), *([stopped] if stopped is not None else []), described]
    if verdict.test_failure is not None:
        parts.append(f"not the test's failure ({_failure_text(verdict.test_failure)}): this explains the rerun's")
    where = _where_the_run_was(verdict, crashed=first.outcome is Outcome.CRASHED)
    if where is not None:
        parts.append(where)
    if verdict.phase == "load":
        parts.append("while loading the package")
    parts += [f"bad input {fact}" for fact in bad_values(verdict)[:1]]
    if verdict.device_assert and verdict.device_assert not in described:
        parts.append(f"device-side assert `{verdict.device_assert}`")
    if verdict.bounds_check and verdict.bounds_check not in described:
        parts.append(f"kernel bounds check `{verdict.bounds_check}`")
    if verdict.sanitizer is not None:
        parts.append(f"compute-sanitizer: {verdict.sanitizer.describe()}")
    if verdict.nan_assert and verdict.nan_assert not in described:
        parts.append(f"NaN assert: {verdict.nan_assert}")
    if not leads:
        parts += nan_parts
    if verdict.numerics is not None:
        parts.append(divergence(verdict.numerics, _at(verdict, "divergent")))
    if verdict.reproduction is not None:
        parts.append(verdict.reproduction)
    return "; ".join(parts)


def _where_the_run_was(verdict: Verdict, *, crashed: bool) -> str | None:
    """Where in the package the rerun was when it failed: the kernel it died in, the code between two kernels, no
    kernel at all (the Python stack then), or the last kernel that completed."""
    if verdict.died_in:
        return f"in kernel {verdict.died_in} (before_launch with no after_launch){_at(verdict, 'suspect')}"
    if verdict.crashed_after_run:
        return _no_kernel_running(verdict)
    if verdict.crashed_between_kernels:
        following = verdict.sources.get("next")
        between = (
            f"the next call is {following.name}{_at(verdict, 'next')}"
            if following is not None
            else "a custom op or an extern call"
        )
        return (
            f"after kernel {verdict.last_completed} completed and before the next kernel launched "
            f"(the crash is in code between compiled kernels: {between})"
        )
    if verdict.last_completed:
        nonfinite = verdict.first_nonfinite
        # The first NaN/Inf's kernel names its line below: the same line once is enough.
        same = nonfinite is not None and nonfinite.kernel == verdict.last_completed
        return f"last kernel completed: {verdict.last_completed}{'' if same else _at(verdict, 'suspect')}"
    if verdict.assert_kernel is not None and verdict.assert_site is not None:
        return assert_kernel_text(verdict)
    if verdict.crash_frame is not None and crashed:
        # No kernel had run (a crash in a fixture, an export, a load): the Python stack is all there is.
        return f"the Python stack was at {verdict.crash_frame.describe(verdict.source_root)}"
    return None


def assert_kernel_text(verdict: Verdict) -> str:
    """``in kernel <name> (its device-side assert at <file>:<line>: <the assert>), while Inductor ran it at compile
    time …, at <the user's index read>``: the kernel Triton's assert message names, when no launch was printed."""
    kernel, site = verdict.assert_kernel, verdict.assert_site
    assert kernel is not None and site is not None
    when = (
        ", while Inductor ran it at compile time (it runs kernels to autotune them) before the package existed: "
        "the example inputs given to the compile reach the same index"
        if verdict.phase in ("export", "compile") or not verdict.last_completed
        else ""
    )
    return (
        f"in kernel {kernel.name} (its device-side assert at {site.file}:{site.line}: {kernel.assert_line}){when}"
        f"{_at(verdict, 'suspect')}"
    )


def _no_kernel_running(verdict: Verdict) -> str:
    """A crash once the package had returned (or before it ran): where the Python stack was instead of a kernel."""
    when = f"in {verdict.crashed_in}, " if verdict.crashed_in in ("setup", "teardown") else ""
    moment = "before the package ran" if verdict.phase == "loaded" else "after the package's last run returned"
    text = (
        f"{when}{moment}: no kernel was running (the crash is outside the compiled code, unless the package "
        "corrupted memory that later code touched)"
    )
    if verdict.crash_frame is not None:
        text += f"; the Python stack was at {verdict.crash_frame.describe(verdict.source_root)}"
    return text


def _failure_text(kind: str) -> str:
    if kind in ("crash", "timeout"):
        return f"it had a {kind}"
    if kind == "other":
        return "it failed with another error"
    words = kind.replace("_", " ").removesuffix(" error")
    return f"it failed with {'an' if words[0] in 'aeiou' else 'a'} {words} error"


def _stage_line(run: ChildRun) -> str:
    printer = run.env_delta.get(PRINTER_ENV)
    what = "compute-sanitizer memcheck" if run.stage == Stage.SANITIZER else f"printer={printer}"
    what += ", provenance tracking" if run.stage == Stage.NUMERICS else ""
    if run.stage == Stage.TENSORS:
        # Beside stage kernels it prints every kernel, and its log is read for the suspects.
        what += f" filtered to {run.env_delta[FILTER_ENV]}" if FILTER_ENV in run.env_delta else ", every kernel"
    return f"stage {run.label} ({what}): {run.describe()} [{run.seconds:.1f} s]"


def render(verdict: Verdict, failure_kind: str | None = None) -> PublicVerdict:
    """The verdict rendered once, reading no file: its headline, report section and the facts a conftest's
    ``pytest_aoti_verdict`` gets, from which :func:`junit_properties` writes JUnit's. Everything pytest-aoti shows
    of a verdict is read from this."""
    head = headline(verdict)
    first = verdict.first
    failed, total = verdict.rerun_counts
    nonfinite, numerics, minified = verdict.first_nonfinite, verdict.numerics, verdict.minified
    return PublicVerdict(
        nodeid=verdict.nodeid,
        failure_kind=failure_kind,
        headline=head,
        details="\n".join(_section(verdict)),
        rerun_outcome=first.describe() if first is not None else None,
        not_rerun=verdict.not_rerun,
        reproduced=verdict.reproduced,
        reproduction=verdict.reproduction,
        flaky=0 < failed < total,
        suspect_kernel=verdict.suspect_kernel,
        first_nonfinite_kernel=(nonfinite.kernel or "model input") if nonfinite is not None else None,
        first_nonfinite_buffer=nonfinite.arg if nonfinite is not None else None,
        numerics=divergence(numerics, _at(verdict, "divergent")) if numerics is not None else None,
        first_divergent_kernel=numerics.diverged.kernel if numerics is not None and numerics.diverged else None,
        sanitizer=verdict.sanitizer.describe() if verdict.sanitizer is not None else None,
        minified=_minified_property(minified) if minified is not None else None,
        source_line=source_line(verdict),
        signal=(first.signal_name or None) if first is not None else None,
        reproduce=first.reproduce if first is not None else None,
        bundle=verdict.bundle,
    )


def _minified_property(result: MinifyResult) -> str | None:
    if result.nodes_after is None:
        return None
    return f"{result.nodes_before} -> {result.nodes_after} nodes: {result.repro}"


def section_text(verdict: Verdict) -> str:
    """The report section ``aoti debug rerun`` (:func:`render`'s ``text``)."""
    return render(verdict).text


def _section(verdict: Verdict) -> list[str]:
    """The report section's lines below its headline's."""
    lines = [_stage_line(run) for run in verdict.stages]
    if verdict.seconds is not None and verdict.stages:
        lines.append(f"debug stages: {verdict.seconds:.1f} s in all")
    lines += verdict.notes
    if verdict.numerics is not None:
        lines.append(divergence(verdict.numerics, _at(verdict, "divergent")))
        lines += divergence_details(verdict.numerics)
    if verdict.sanitizer is not None:
        lines.append(f"sanitizer: {verdict.sanitizer.describe()}")
    if verdict.minified is not None:
        lines.append(minified_text(verdict.minified))
        lines.append(f"minify candidates: {', '.join(verdict.minified.verdicts) or 'none'}")
    if verdict.minify_log is not None:
        lines.append(f"minify log: {verdict.minify_log}")
    if verdict.died_in:
        lines.append(f"suspect kernel: {verdict.died_in} (launched, never finished)")
    elif verdict.last_completed:
        lines.append(f"last completed kernel: {verdict.last_completed}")
    if verdict.suspects and any(run.stage == Stage.TENSORS for run in verdict.stages):
        lines.append(f"suspects (read in stage tensors' log): {', '.join(verdict.suspects)}")
    lines += [f"bad input: {fact}" for fact in bad_values(verdict)]
    if verdict.suspect_inputs:
        lines.append(
            f"inputs of {verdict.suspect_kernel}: " + "; ".join(_stats_text(block) for block in verdict.suspect_inputs)
        )
    lines += _nonfinite_lines(verdict)
    for label, signal_text in (
        ("device-side assert", verdict.device_assert),
        ("kernel bounds check", verdict.bounds_check),
        ("NaN assert", verdict.nan_assert),
        ("runtime input check", verdict.runtime_check),
        ("CUDA error", verdict.cuda_error),
    ):
        if signal_text:
            lines.append(f"{label}: {signal_text}")
    if verdict.phase:
        lines.append(f"last phase: {verdict.phase}")
    if verdict.crash_frame is not None:
        # Innermost first: a Python custom op's own line, else the test's line that called the package.
        lines.append(f"Python stack at the crash (innermost frame of your code): {verdict.crash_frame.describe()}")
    first = verdict.first
    if verdict.phase == "load" and first is not None and first.outcome is Outcome.CRASHED:
        lines.append(f"hint: {LOAD_SEGFAULT_HINT}")
    for run in verdict.stages:
        lines.append(f"reproduce ({run.label}): {run.reproduce}")
        lines.append(f"full log ({run.label}): {run.log_path}")
    if verdict.bundle is not None:
        lines.append(f"repro bundle: {verdict.bundle} (python repro.py: {_needs(verdict)})")
    for run, log in zip(verdict.stages, verdict.trimmed_logs, strict=False):
        lines.append("")
        lines.append(f"--- log of stage {run.label} (trimmed) ---")
        lines.append(log)
    return lines


def _nonfinite_lines(verdict: Verdict) -> list[str]:
    """The report section's lines on the first NaN/Inf: the buffer's stats and the line of the kernel that wrote
    it, and whether the NaN assert agrees."""
    lines = [text for text in (origin_text(verdict), fills_text(verdict)) if text is not None]
    origin = verdict.origin
    if origin is not None and origin.outputs == "raised":
        lines.append(f"eager replay stopped at node {origin.node}: {origin.output}; inputs: {'; '.join(origin.inputs)}")
    elif origin is not None and origin.output is not None:
        lines.append(f"eager replay: {origin.output} made by node {origin.node}; inputs: {'; '.join(origin.inputs)}")
    if origin is not None and origin.error is not None:
        lines.append(f"eager replay of the exported program not possible: {origin.error}")
    stats = verdict.first_nonfinite
    if stats is not None:
        lines.append(
            f"first NaN/Inf: {stats.kernel or 'model input'} {stats.arg} (mean {stats.mean}, min {stats.minimum}, "
            f"max {stats.maximum}, size {stats.size}){_at(verdict, 'nonfinite')}"
        )
    disagreement = nan_disagreement(verdict)
    return [*lines, disagreement] if disagreement is not None else lines


def user_properties(verdict: Verdict) -> list[tuple[str, str]]:
    """The JUnit properties of a verdict."""
    return junit_properties(render(verdict))


def junit_properties(rendered: PublicVerdict) -> list[tuple[str, str]]:
    """The JUnit properties of a rendered verdict, in order, each read off its one field."""
    optional = (
        (records.SUSPECT_KERNEL_PROPERTY, rendered.suspect_kernel),
        (records.FIRST_NONFINITE_KERNEL_PROPERTY, rendered.first_nonfinite_kernel),
        (records.FIRST_NONFINITE_BUFFER_PROPERTY, rendered.first_nonfinite_buffer),
        (records.SIGNAL_PROPERTY, rendered.signal),
        (records.REPRODUCE_PROPERTY, rendered.reproduce),
        (records.BUNDLE_PROPERTY, str(rendered.bundle) if rendered.bundle is not None else None),
        (records.SANITIZER_PROPERTY, rendered.sanitizer),
        (records.MINIFIED_PROPERTY, rendered.minified),
        # "none": stage numerics compared, and no kernel diverged.
        (records.FIRST_DIVERGENT_KERNEL_PROPERTY, _divergent_property(rendered)),
        (records.REPRODUCED_PROPERTY, rendered.reproduction),
        (records.SOURCE_PROPERTY, rendered.source_line),
    )
    return [
        (records.RERUN_OUTCOME_PROPERTY, rendered.rerun_outcome or "not rerun"),
        (records.VERDICT_PROPERTY, rendered.headline),
        *((name, value) for name, value in optional if value is not None),
    ]


def _divergent_property(rendered: PublicVerdict) -> str | None:
    """Stage numerics' first divergent kernel, ``none`` where it compared and no kernel diverged."""
    if rendered.numerics is None:
        return None
    return rendered.first_divergent_kernel or "none"


def _needs(verdict: Verdict) -> str:
    modules = verdict.custom_ops
    if not modules:
        return "needs only torch"
    roots = sorted({root for _, root in modules})
    return (
        "needs importable: "
        + ", ".join(module for module, _ in modules)
        + " (the custom ops the graph calls; repro.py imports them from "
        + ", ".join(roots)
        + ": elsewhere, put that on PYTHONPATH)"
    )


def verdict_record(rendered: PublicVerdict) -> VerdictSummary:
    """What a report carries of its rendered verdict for the terminal summary."""
    bundle = str(rendered.bundle) if rendered.bundle is not None else ""
    return VerdictSummary(rendered.headline, reproduce=rendered.reproduce or "", bundle=bundle)


def summary_lines(nodeid: str, summary: VerdictSummary) -> list[str]:
    lines = [f"{nodeid}: {summary.headline}"]
    if summary.reproduce:
        lines.append(f"    reproduce: {summary.reproduce}")
    if summary.bundle:
        lines.append(f"    repro bundle: {summary.bundle}")
    return lines


def isolation_failure_text(run: ChildRun) -> str:
    """The longrepr of a test whose isolated child ended without reporting it: how it ended, the phase, the end of
    its output."""
    lines = [f"{run.describe()} in an isolated subprocess (pytest-aoti)"]
    phase = run.phase
    if phase:
        lines.append(f"last phase: {phase}")
    if phase == "load" and run.outcome is Outcome.CRASHED:
        lines.append(f"hint: {LOAD_SEGFAULT_HINT}")
    # A hang stopped with SIGABRT, or a crash: faulthandler's dump, innermost call first, may be longer than the
    # tail shown below (a forked child's stack holds the fork server's frames under pytest's).
    frame = provenance.user_frame(kernel_log.crash_frames(run.log)) if run.signal_name or run.timeout else None
    if frame is not None:
        lines.append(f"Python stack (innermost frame of your code): {frame.describe()}")
    lines.append(f"reproduce: {run.reproduce}")
    lines.append(f"full log: {run.log_path}")
    lines.append("--- end of the child's output ---")
    lines.append("\n".join(run.log.splitlines()[-40:]))
    return "\n".join(lines)


def isolated_reports(
    item: pytest.Item, run: ChildRun, reason: str, attach: AttachDebug | None = None
) -> list[pytest.TestReport]:
    """The child's reports as the parent logs them: each with a note on why it ran isolated, completed through
    :func:`~pytest_aoti.debug.crash_route.crash_reports` (with the debug verdict ``attach`` gives) for the phase the
    child never reported (it crashed, timed out or exited early), unless the test called ``pytest.exit``."""
    note = (ISOLATION_TITLE, f"ran in a fresh subprocess: {reason}")
    reports = list(run.reports)
    for report in reports:
        report.sections.append(note)
        # The parent's id: under ``--dist loadgroup`` it carries ``@group``, which the child's (not a worker) lacks,
        # and xdist checks that a worker reports the item it runs.
        report.nodeid = item.nodeid
    died_in = run.unreported_phase
    if died_in is None or run.exit is not None:
        # The test was fully reported, and whatever ended the child came after it; or the test called pytest.exit,
        # which ends the parent's session too, with no report of the phase it was called in (as in-process).
        return reports
    setup = next((report for report in reports if report.when == "setup"), None)
    # The device it set up on: junitxml reads it from the teardown report, which the child never sent.
    crash = Crash(died_in, isolation_failure_text(run), record_of(setup).device if setup is not None else None)
    keywords: dict[str, Literal[1]] = {name: 1 for name in item.keywords}
    failed = pytest.TestReport(item.nodeid, item.location, keywords, "failed", None, "call", sections=[note])
    completed = crash_reports(crash, failed, attach)
    for report in completed[1:]:
        report.sections.append(note)
    return [*reports, *completed]
