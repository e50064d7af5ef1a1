"""Each record drawn once: a :class:`Picture` holds the PNG (when matplotlib could draw it), its caption, and the
numbers as a table, which are there with or without the picture.

matplotlib is imported here, inside :func:`draw`, through its object API on the Agg canvas: no pyplot, no global
backend switch in the user's process. Drawing never raises: a picture that cannot be drawn says why in ``note``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING, Any

from pytest_aoti.shared.figure_data import BenchmarkTimes, Divergence, FigureData, GoldenErrors, KernelTimeline

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NO_MATPLOTLIB = "pictures need matplotlib: pip install 'pytest-aoti[plots]'"
NOT_DRAWN = "the picture could not be drawn: "  # a note's start, before why
# Zero errors have no place on a log axis: they are drawn at this floor and the caption says so.
LOG_FLOOR = 1e-12
# Up to this many launches, the kernel errors' x axis names each kernel.
NAMED_LAUNCHES = 12
# A timeline of more kernels than this shows the ones around the marked kernel.
TIMELINE_WINDOW = 40

Table = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Picture:
    """One finding, rendered: ``png`` is None when there is no picture, and ``note`` then says why."""

    title: str
    caption: str
    table: Table  # the header row first
    png: bytes | None = None
    note: str | None = None


def _g(value: float) -> str:
    return f"{value:.3g}"


# -- captions and tables: the numbers, with or without matplotlib --------------------------------------------------


def _divergence_text(record: Divergence) -> tuple[str, str, Table]:
    diverged = next((k for k in record.kernels if k.launch == record.diverged_launch), None)
    if diverged is None:
        caption = f"no kernel diverged from eager beyond rounding noise (test tolerance {record.tolerance})"
    else:
        at = f" {record.source}" if record.source else ""
        caption = (
            f"first divergent kernel: {diverged.kernel} (launch {diverged.launch}){at}; max abs err "
            f"{_g(diverged.max_abs)}, max rel err {_g(diverged.max_rel)} (test tolerance {record.tolerance})"
        )
    if any(k.max_abs == 0 or k.max_rel == 0 for k in record.kernels):
        caption += f"; an error of 0 is drawn at {LOG_FLOOR:g}"
    rows = [("launch", "kernel", "max abs err", "max rel err", "")]
    rows += [
        (str(k.launch), k.kernel, _g(k.max_abs), _g(k.max_rel), "first divergent" if k is diverged else "")
        for k in record.kernels
    ]
    return "Kernel errors against eager, in launch order", caption, tuple(rows)


def _timeline_text(record: KernelTimeline) -> tuple[str, str, Table]:
    if record.problem == "nonfinite":
        title = "Kernel timeline: where the first NaN/Inf appeared"
        caption = f"first non-finite output: {record.marked or 'a model input'}"
    else:
        title = "Kernel timeline up to the crash"
        died = f"crashed in {record.marked} (launched, never finished)" if record.marked else "crashed between kernels"
        caption = f"{died}; last completed kernel: {record.last_completed or 'none'}"
    caption += f"; {record.completed} of {len(record.kernels)} launches completed"
    if record.source:
        caption += f"; {record.source}"
    if record.inputs:
        stats = ", ".join(f"{s.arg} (min {s.minimum}, max {s.maximum}, mean {s.mean})" for s in record.inputs[:3])
        caption += f"; its inputs: {stats}"
    rows = [("input of " + (record.marked or "the suspect kernel"), "min", "max", "mean", "size")]
    rows += [(s.arg, s.minimum, s.maximum, s.mean, s.size) for s in record.inputs]
    return title, caption, tuple(rows)


def _golden_text(record: GoldenErrors) -> tuple[str, str, Table]:
    caption = (
        f"{record.name}: {record.mismatched} of {record.elements} elements outside rtol={record.rtol:g}, "
        f"atol={record.atol:g}; max abs err {_g(record.max_abs)}; passes with atol >= {_g(record.needed_atol)} "
        f"at this rtol"
    )
    if record.zero:
        caption += f"; {record.zero} elements equal (not on the log axis)"
    if record.nonfinite:
        caption += f"; {record.nonfinite} non-finite errors (not drawn)"
    rows = [("abs error from", "to", "elements")]
    rows += [
        (_g(low), _g(high), str(count))
        for low, high, count in zip(record.bin_edges, record.bin_edges[1:], record.counts, strict=False)
        if count
    ]
    return f"Golden drift: per-element error of {record.name}", caption, tuple(rows)


def _benchmark_text(record: BenchmarkTimes) -> tuple[str, str, Table]:
    rows = [("run", "blocks", "median ms", "min ms", "max ms")]
    runs = [*zip(record.run_labels, record.baseline_runs, strict=False), ("now", record.now)]
    rows += [
        (label, str(len(times)), _g(median(times) * 1e3), _g(min(times) * 1e3), _g(max(times) * 1e3))
        for label, times in runs
        if times
    ]
    return f"Latency of {record.name}: now against the baseline's runs", record.verdict, tuple(rows)


_TEXT: dict[type[Any], Callable[[Any], tuple[str, str, Table]]] = {
    Divergence: _divergence_text,
    KernelTimeline: _timeline_text,
    GoldenErrors: _golden_text,
    BenchmarkTimes: _benchmark_text,
}


# -- the pictures ---------------------------------------------------------------------------------------------------


def _draw_divergence(figure: Figure, record: Divergence) -> None:
    axes = figure.add_subplot()
    launches = [k.launch for k in record.kernels]
    for values, label, style in (
        ([k.max_abs for k in record.kernels], "max abs err", "o-"),
        ([k.max_rel for k in record.kernels], "max rel err", "s--"),
    ):
        axes.plot(launches, [max(v, LOG_FLOOR) if math.isfinite(v) else math.nan for v in values], style, label=label)
    axes.set_yscale("log")
    axes.set_xlabel("kernel launch (in order)")
    if len(launches) <= NAMED_LAUNCHES:
        names = [f"{k.launch}: {k.kernel}" for k in record.kernels]
        axes.set_xticks(launches, names, rotation=20, ha="right", fontsize=7)
    else:
        from matplotlib.ticker import MaxNLocator

        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel("error against eager")
    diverged = next((k for k in record.kernels if k.launch == record.diverged_launch), None)
    if diverged is not None:
        axes.axvline(diverged.launch, color="crimson", linewidth=1.5)
        on_the_right = diverged.launch <= (launches[0] + launches[-1]) / 2
        axes.annotate(
            f"first divergent: {diverged.kernel}",
            xy=(diverged.launch, max(diverged.max_abs, LOG_FLOOR)),
            xytext=(8 if on_the_right else -8, -14),
            textcoords="offset points",
            ha="left" if on_the_right else "right",
            color="crimson",
            fontsize=8,
        )
    axes.legend(loc="upper left", fontsize=8)
    axes.grid(True, which="major", alpha=0.3)


def _window(record: KernelTimeline) -> tuple[int, list[str]]:
    """The launches to draw: all, or the ``TIMELINE_WINDOW`` ending just after the marked (or last) kernel."""
    kernels = list(record.kernels)
    if record.problem == "crash" or record.marked is None or record.marked not in kernels:
        focus = len(kernels) - 1
    else:
        focus = kernels.index(record.marked)
    start = max(0, min(focus - TIMELINE_WINDOW + 5, len(kernels) - TIMELINE_WINDOW))
    return start, kernels[start : start + TIMELINE_WINDOW]


def _box(axes: Any, launch: int, kernel: str, color: str, state: str) -> None:
    axes.barh(0, 1, left=launch, color=color, edgecolor="white")
    axes.text(launch + 0.5, 0.45, kernel, rotation=60, fontsize=7, ha="left", va="bottom")
    if state:
        axes.text(launch + 0.5, -0.5, state, color="crimson", fontsize=8, ha="center", va="top")


def _state(record: KernelTimeline, launch: int, marked_at: int | None) -> tuple[str, str]:
    if record.problem == "crash" and launch >= record.completed:
        return "crimson", "crashed here"
    if marked_at is not None and launch == marked_at:
        return "crimson", "first NaN/Inf"
    if marked_at is not None and launch > marked_at:
        return "orange", ""
    return "seagreen", ""


def _draw_timeline(figure: Figure, record: KernelTimeline) -> None:
    axes = figure.add_subplot()
    start, shown = _window(record)
    nonfinite = record.problem == "nonfinite" and record.marked in record.kernels
    marked_at = record.kernels.index(record.marked) if nonfinite and record.marked is not None else None
    for offset, kernel in enumerate(shown):
        _box(axes, start + offset, kernel, *_state(record, start + offset, marked_at))
    end = start + len(shown)
    if record.problem == "crash" and record.completed >= len(record.kernels):
        # Every launched kernel finished: the crash came after the last one (an op between kernels).
        _box(axes, end, "(after the last kernel)", "crimson", "crashed here")
        end += 1
    axes.set_xlim(start, max(end, start + 1))
    axes.set_ylim(-1, 4)
    axes.set_yticks([])
    axes.set_xticks([launch + 0.5 for launch in range(start, end)], [str(launch + 1) for launch in range(start, end)])
    later = ", orange: after the first NaN/Inf" if marked_at is not None else ""
    axes.set_xlabel(f"kernel launch (in order); green: completed{later}")
    for side in ("top", "right", "left"):
        axes.spines[side].set_visible(False)


def _draw_golden(figure: Figure, record: GoldenErrors) -> None:
    axes = figure.add_subplot()
    if record.counts:
        widths = [high - low for low, high in zip(record.bin_edges, record.bin_edges[1:], strict=False)]
        axes.bar(record.bin_edges[:-1], record.counts, width=widths, align="edge", color="steelblue")
        axes.set_xscale("log")
    axes.axvline(max(record.atol, LOG_FLOOR), color="seagreen", linestyle="--", label=f"atol = {record.atol:g}")
    if math.isfinite(record.needed_atol) and record.needed_atol > 0:
        axes.axvline(record.needed_atol, color="crimson", label=f"needed atol = {_g(record.needed_atol)}")
    axes.set_xlabel("per-element abs error against the golden")
    axes.set_ylabel("elements")
    axes.legend(fontsize=8)


def _draw_benchmark(figure: Figure, record: BenchmarkTimes) -> None:
    spread, trend = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    labels = [*record.run_labels, "now"]
    samples = [[t * 1e3 for t in times] for times in (*record.baseline_runs, record.now)]
    drawn = [(label, times) for label, times in zip(labels, samples, strict=False) if times]
    boxes = spread.boxplot([times for _, times in drawn], patch_artist=True)
    spread.set_xticks(range(1, len(drawn) + 1), [label for label, _ in drawn], rotation=30, fontsize=7)
    for box, (label, _) in zip(boxes["boxes"], drawn, strict=False):
        box.set_facecolor("orange" if label == "now" else "lightsteelblue")
    spread.set_ylabel("block time (ms)")
    spread.set_title("block times", fontsize=9)
    medians = [median(times) for _, times in drawn]
    trend.plot(range(len(medians)), medians, "o-", color="steelblue")
    if drawn and drawn[-1][0] == "now":
        trend.plot([len(medians) - 1], [medians[-1]], "o", color="orange", markersize=9)
    trend.set_xticks(range(len(drawn)), [label for label, _ in drawn], rotation=30, fontsize=7)
    trend.set_title("median per run", fontsize=9)


_DRAW: dict[type[Any], Callable[[Any, Any], None]] = {
    Divergence: _draw_divergence,
    KernelTimeline: _draw_timeline,
    GoldenErrors: _draw_golden,
    BenchmarkTimes: _draw_benchmark,
}


def _png(record: FigureData, title: str) -> bytes:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3.6), dpi=100, layout="constrained")
    _DRAW[type(record)](figure, record)
    figure.suptitle(title, fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def draw(record: FigureData) -> Picture:
    """The record's picture, caption and table; never raises for a record that decoded."""
    title, caption, table = _TEXT[type(record)](record)
    try:
        import matplotlib  # noqa: F401  # the import error alone says the extra is missing
    except ImportError:
        return Picture(title, caption, table, note=NO_MATPLOTLIB)
    except Exception as error:  # an installed matplotlib that fails to import (one built for another numpy)
        return Picture(title, caption, table, note=f"{NOT_DRAWN}{_one_line(error, 'import matplotlib')}")
    try:
        return Picture(title, caption, table, png=_png(record, title))
    except Exception as error:  # a picture is never worth a failed test or a lost page
        return Picture(title, caption, table, note=f"{NOT_DRAWN}{_one_line(error)}")


def _one_line(error: Exception, doing: str = "") -> str:
    """``error`` as one line of a note (a numpy ABI error spans several), prefixed by what raised it."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return f"{doing} raised {text}" if doing else text
