"""Pure functions over the text AOTI's debug knobs print: the intermediate value printer (mode 3 kernel names,
mode 2 tensor stats), NaN asserts, runtime input checks, CUDA errors, and faulthandler's Python stack of a crash. No
torch, no pytest."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Mode 3: "[ before_launch: cpp_fused_add_sin_0 ]"
_LAUNCH = re.compile(r"^\[ (?P<when>before|after)_launch: (?P<kernel>[^\s\]]+) \]\s*$", re.MULTILINE)
# Mode 2: "[  after_launch - cpp_fused_log_mul_0 - buf0  ]:" then "Mean value: -nan" etc. until a blank line.
_STATS_HEADER = re.compile(
    r"^\[  (?:(?P<when>before|after)_launch - (?P<kernel>\S+)|aoti_model_inputs) - (?P<arg>\S+)  \]:\s*$", re.MULTILINE
)
# A scalar argument's line ("[  before_launch - triton_per_fused_0 - 16L: 16  ]"). The wrapper Inductor generates ends
# it with printf("\\n") (torch/_inductor/codegen/debug_utils.py), which prints a backslash and an n, not a newline:
# the next header lands on the same line, "[  … - 16L: 16  ]\n[  … - 64L: 64  ]\n[  after_launch - … - buf21  ]:",
# and a parser reading whole lines loses that block (its stats would go to the block before).
_SCALAR_END = re.compile(r"(?P<scalar>\[  (?:before|after)_launch - \S+ - \S+: [^\]\n]*  \])\\n")
_STAT_LINE = re.compile(r"^(?P<key>Mean value|Min value|Max value|Device|Size|Dtype): (?P<value>.*)$", re.MULTILINE)
_NAN_ASSERT = re.compile(r"At least one (?P<what>NaN|INF|Inf) in (?P<buffer>\S+)")
_RUNTIME_CHECK = re.compile(r"(?P<message>input_handles\[\d+\]: unmatched [^\n]*)")
_CUDA_ERROR = re.compile(r"(?P<message>CUDA error: [^\n]*)")


@dataclass(frozen=True)
class Launch:
    when: str  # "before" or "after"
    kernel: str


@dataclass(frozen=True)
class TensorStats:
    """One mode-2 block: a kernel argument's stats before or after the launch (``kernel`` None for model inputs)."""

    when: str  # "before", "after" or "input"
    kernel: str | None
    arg: str
    mean: str | None
    minimum: str | None
    maximum: str | None
    device: str | None
    size: str | None
    launch: int = 0  # which launch of ``kernel`` it belongs to, counted from 1 (0 for a model input)

    @property
    def nonfinite(self) -> bool:
        return any(_is_nonfinite(v) for v in (self.mean, self.minimum, self.maximum))

    @property
    def holds_nan(self) -> bool:
        """A NaN among its values: min and max propagate NaN; a mean alone is NaN for +Inf beside -Inf too."""
        extremes = [v for v in (self.minimum, self.maximum) if v is not None]
        return any(_is_nan(v) for v in extremes) if extremes else _is_nan(self.mean)


def _is_nonfinite(text: str | None) -> bool:
    if text is None:
        return False
    try:
        return not math.isfinite(float(text.strip()))
    except ValueError:
        return False


def _is_nan(text: str | None) -> bool:
    try:
        return text is not None and math.isnan(float(text.strip()))
    except ValueError:
        return False


def launches(log: str) -> list[Launch]:
    return [Launch(m.group("when"), m.group("kernel")) for m in _LAUNCH.finditer(log)]


def died_in(log: str) -> str | None:
    """The kernel launched last and never finished (``before_launch`` with no ``after_launch``), if any."""
    events = launches(log)
    if events and events[-1].when == "before":
        return events[-1].kernel
    return None


def last_completed(log: str) -> str | None:
    """The last kernel with an ``after_launch`` line."""
    for event in reversed(launches(log)):
        if event.when == "after":
            return event.kernel
    return None


def kernel_before(log: str, kernel: str) -> str | None:
    """The kernel launched just before the last launch of ``kernel``."""
    names = [e.kernel for e in launches(log) if e.when == "before"]
    for position in range(len(names) - 1, 0, -1):
        if names[position] == kernel:
            return names[position - 1]
    return None


def suspect_kernels(log: str) -> tuple[str, ...]:
    """The kernel that died (else the last that completed) and the one launched before it: the kernels the
    tensor-stats stage prints."""
    suspect = died_in(log) or last_completed(log)
    if suspect is None:
        return ()
    previous = kernel_before(log, suspect)
    return (suspect,) if previous is None or previous == suspect else (suspect, previous)


def _printer_lines(log: str) -> str:
    """``log`` with each scalar argument's line ended by a newline, as the printer meant: every header on a line
    of its own (see ``_SCALAR_END``)."""
    return _SCALAR_END.sub(lambda match: match.group("scalar") + "\n", log)


def tensor_stats(log: str) -> list[TensorStats]:
    log = _printer_lines(log)
    headers = list(_STATS_HEADER.finditer(log))
    blocks = []
    launches: dict[str, int] = {}
    previous: tuple[str, str | None] | None = None
    for number, header in enumerate(headers):
        end = headers[number + 1].start() if number + 1 < len(headers) else len(log)
        fields: dict[str, str] = {}  # the first stats after a header are its own, should a header go unread
        for line in _STAT_LINE.finditer(log, header.end(), end):
            fields.setdefault(line.group("key"), line.group("value").strip())
        when, kernel = header.group("when") or "input", header.group("kernel")
        # A kernel's launch prints its "before" blocks, then its "after" blocks: another kernel's block, or a
        # "before" after an "after", starts the next launch.
        if kernel is not None and (
            previous is None or previous[1] != kernel or (previous[0], when) == ("after", "before")
        ):
            launches[kernel] = launches.get(kernel, 0) + 1
        previous = (when, kernel)
        blocks.append(
            TensorStats(
                when=when,
                kernel=kernel,
                arg=header.group("arg"),
                mean=fields.get("Mean value"),
                minimum=fields.get("Min value"),
                maximum=fields.get("Max value"),
                device=fields.get("Device"),
                size=fields.get("Size"),
                launch=launches.get(kernel, 0) if kernel is not None else 0,
            )
        )
    return blocks


def first_nonfinite(stats: list[TensorStats]) -> TensorStats | None:
    """The first model input or kernel output holding NaN, else the first holding Inf. ``before_launch`` blocks of
    output buffers show uninitialised memory, so only inputs and ``after_launch`` blocks count. A NaN comes first:
    real models hold infinities by design (an additive attention mask's ``-inf``) in kernels before the one that
    makes the NaN."""
    written = [block for block in stats if block.when in ("input", "after")]
    return next((b for b in written if b.holds_nan), None) or next((b for b in written if b.nonfinite), None)


def nan_assert(log: str) -> str | None:
    """The message of a failed ``TORCHINDUCTOR_NAN_ASSERTS`` check, e.g. ``At least one NaN in buf0``."""
    match = _NAN_ASSERT.search(log)
    return match.group(0) if match else None


def nan_assert_buffer(message: str | None) -> str | None:
    """The buffer a NaN assert's message names (``buf21`` of ``At least one NaN in buf21``)."""
    match = _NAN_ASSERT.search(message or "")
    return match.group("buffer") if match else None


def runtime_check_error(log: str) -> str | None:
    """The first ``AOTI_RUNTIME_CHECK_INPUTS`` complaint, e.g. ``input_handles[0]: unmatched dim value at 0 ...``."""
    match = _RUNTIME_CHECK.search(log)
    return match.group("message").strip() if match else None


def cuda_error(log: str) -> str | None:
    match = _CUDA_ERROR.search(log)
    return match.group("message").strip() if match else None


# faulthandler's dump of the thread that crashed (``PYTHONFAULTHANDLER=1`` in every child): a header, then one line
# per frame, innermost first. "Stack" is the header of a dump without thread ids; newer Pythons may name the thread
# after its id.
_CRASH_STACK = re.compile(
    r"^(?:Current thread 0x[0-9a-fA-F]+[^\n(]*|Stack )\(most recent call first\):\n(?P<frames>(?:  File [^\n]*\n?)+)",
    re.MULTILINE,
)
_CRASH_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)', re.MULTILINE)


@dataclass(frozen=True)
class CrashFrame:
    file: str
    line: int
    function: str


def crash_frames(log: str) -> list[CrashFrame]:
    """The Python frames of the thread that crashed, innermost first, from the last faulthandler dump in ``log``;
    empty when there is none."""
    dumps = list(_CRASH_STACK.finditer(log))
    if not dumps:
        return []
    frames = dumps[-1].group("frames")
    return [CrashFrame(m["file"], int(m["line"]), m["function"]) for m in _CRASH_FRAME.finditer(frames)]


_SAVE_LINE = "aoti_torch_save_tensor_handle:"


def trim(log: str, *, head: int = 60, tail: int = 120) -> str:
    """Keep the first ``head`` and last ``tail`` lines of a long log, saying how many were left out. Printer mode 1's
    line per saved tensor is counted, not shown."""
    lines = log.splitlines()
    saves = [line for line in lines if line.startswith(_SAVE_LINE)]
    if saves:
        lines = [line for line in lines if not line.startswith(_SAVE_LINE)]
        lines.append(f"({len(saves)} 'aoti_torch_save_tensor_handle' lines of the printer left out)")
        log = "\n".join(lines)
    if len(lines) <= head + tail:
        return log
    skipped = len(lines) - head - tail
    return "\n".join(
        [*lines[:head], f"... {skipped} lines left out (full log in the file named above) ...", *lines[-tail:]]
    )


_DEVICE_ASSERT = re.compile(r"Assertion `(?P<condition>[^`]+)` failed")
# CUDA's message for a failed device-side assert, which Triton's ``tl.device_assert`` raises: the kernel's generated
# source file and line, the function (the kernel) when the compiler kept its name, the block and thread:
# "/cache/zy/czyvp7….py:36: triton_poi_fused_embedding_1: block: [0,0,0], thread: [64,0,0] Assertion `…` failed."
_ASSERT_SITE = re.compile(
    r"(?P<file>/[^\s:]+\.py):(?P<line>\d+): (?:(?P<function>[A-Za-z_]\w*): )?block: \[[\d, ]+\], "
    r"thread: \[[\d, ]+\] Assertion [`'](?P<condition>[^`'\n]+)[`'] failed"
)


@dataclass(frozen=True)
class AssertSite:
    """Where a device-side assert fired: the kernel's generated source file and line, and the kernel's name when
    CUDA's message has it."""

    file: str
    line: int
    function: str | None
    condition: str


def device_assert_site(log: str) -> AssertSite | None:
    """The source file and line of the first failed device-side assert whose message names them."""
    match = _ASSERT_SITE.search(log)
    if match is None:
        return None
    return AssertSite(match["file"], int(match["line"]), match["function"], match["condition"].strip())


# "0 <= tmp4 < 100", or "tmp6 < 32" where Inductor proved the index is not negative (an ``arange``'s position ids).
_BOUNDS = re.compile(r"(?P<low>-?\d+)\s*<=\s*\w+\s*<\s*(?P<high>-?\d+)")
_UPPER_BOUND = re.compile(r"out of bounds: [A-Za-z_]\w*\s*<\s*(?P<high>-?\d+)")


def device_assert(log: str) -> str | None:
    """The condition of the first failed device-side assert, e.g. ``index out of bounds: 0 <= tmp4 < 100``."""
    match = _DEVICE_ASSERT.search(log)
    return match.group("condition").strip() if match else None


# Inductor's CPU kernels check an index with TORCH_CHECK. AOTI prints the c10::Error as ``Error: index out of bounds:
# 0 <= tmp3 < 10L`` when the run fails with it, and C++'s terminate prints ``what():  index out of bounds: …`` when it
# escaped a parallel region and aborted the process.
_BOUNDS_CHECK = re.compile(r"(?:what\(\):|^Error:)[ \t]*(?P<condition>index out of bounds: [^\n]*)", re.MULTILINE)


def bounds_check(log: str) -> str | None:
    """The condition of the first failed index check of a CPU kernel, e.g. ``index out of bounds: 0 <= tmp2 < 100``
    (C++'s ``L`` suffix dropped)."""
    match = _BOUNDS_CHECK.search(log)
    return re.sub(r"(\d)L\b", r"\1", match.group("condition").strip()) if match else None


def asserted_bounds(condition: str | None) -> tuple[int, int] | None:
    """``(low, high)`` of a ``low <= x < high`` device assert (an index check), if the condition is one."""
    match = _BOUNDS.search(condition or "")
    return (int(match.group("low")), int(match.group("high"))) if match else None


def is_index_check(condition: str | None) -> bool:
    """Whether a failed assert or check is an index check: ``low <= x < high``, or ``x < high`` where Inductor proved
    the index is not negative. The one-sided form guards an index the kernel computes (GPT-2's position ids, an
    ``arange``), so no input's range is held to its bound."""
    return asserted_bounds(condition) is not None or _UPPER_BOUND.search(condition or "") is not None


def kernel_inputs(stats: list[TensorStats], kernel: str, launch: int | None = None) -> list[TensorStats]:
    """The stats of ``kernel``'s input tensors just before its ``launch`` (counted from 1; default its last):
    arguments that are model inputs or that an earlier kernel wrote. The kernel's own output buffers are left out:
    before the launch they hold garbage."""
    known = {block.arg for block in stats if block.when == "input"}
    inputs: dict[str, TensorStats] = {}
    for block in stats:
        this_launch = launch is None or block.launch == launch
        if block.kernel == kernel and block.when == "before" and block.arg in known and this_launch:
            inputs[block.arg] = block
        if block.when == "after" and block.kernel != kernel:
            known.add(block.arg)
    return list(inputs.values())


def out_of_range(block: TensorStats, bounds: tuple[int, int] | None) -> bool:
    """Whether a tensor's min or max falls outside an asserted ``[low, high)`` range."""
    if bounds is None:
        return False
    try:
        low, high = float(block.minimum or "nan"), float(block.maximum or "nan")
    except ValueError:
        return False
    return low < bounds[0] or high >= bounds[1]


# compute-sanitizer memcheck: "========= Invalid __global__ read of size 4 bytes" then indented detail lines.
_SANITIZER_ERROR = re.compile(r"^=+ (?P<what>Invalid __\w+__ (?:read|write) of size \d+ bytes?)\s*$", re.MULTILINE)
_SANITIZER_AT = re.compile(r"^=+\s+at (?P<kernel>[^\s+]+)(?:\+0x[0-9a-f]+)?(?: in (?P<where>\S+))?", re.MULTILINE)
_SANITIZER_THREAD = re.compile(r"by thread (?P<thread>\([\d,]+\)) in block (?P<block>\([\d,]+\))")
_SANITIZER_ACCESS = re.compile(r"^=+\s+Access to (?P<address>0x[0-9a-f]+) (?P<how>.*?)\s*$", re.MULTILINE)
_SANITIZER_NEAREST = re.compile(r"^=+\s+and is (?P<distance>.*?)\s*$", re.MULTILINE)
_SANITIZER_SUMMARY = re.compile(r"ERROR SUMMARY: (?P<count>\d+) error")


@dataclass(frozen=True)
class SanitizerError:
    """compute-sanitizer's first memcheck error and its error count."""

    access: str  # "Invalid __global__ read of size 4 bytes"
    kernel: str | None
    thread: str | None
    block: str | None
    address: str | None
    detail: str  # "is out of bounds, 1,859,041 bytes after the nearest allocation at ... of size 32 bytes"
    count: int | None

    def describe(self) -> str:
        where = f" in {self.kernel}" if self.kernel else ""
        who = f" by thread {self.thread} in block {self.block}" if self.thread else ""
        address = f": access to {self.address} {self.detail}" if self.address else ""
        count = f"; {self.count} error(s) in all" if self.count is not None else ""
        return f"{self.access}{where}{who}{address}{count}"


def sanitizer_error(log: str) -> SanitizerError | None:
    first = _SANITIZER_ERROR.search(log)
    if first is None:
        return None
    following = _SANITIZER_ERROR.search(log, first.end())
    block = log[first.end() : following.start() if following else len(log)]
    at = _SANITIZER_AT.search(block)
    thread = _SANITIZER_THREAD.search(block)
    access = _SANITIZER_ACCESS.search(block)
    nearest = _SANITIZER_NEAREST.search(block)
    summary = _SANITIZER_SUMMARY.search(log)
    detail = ", ".join(
        part for part in (access.group("how") if access else "", nearest.group("distance") if nearest else "") if part
    )
    return SanitizerError(
        access=first.group("what"),
        kernel=at.group("kernel") if at else None,
        thread=thread.group("thread") if thread else None,
        block=thread.group("block") if thread else None,
        address=access.group("address") if access else None,
        detail=detail,
        count=int(summary.group("count")) if summary else None,
    )
