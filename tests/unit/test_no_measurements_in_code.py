"""Measurements live in docs/benchmarks.md, not in the package's comments and docstrings (issue 64, item 7): a module
says why in a sentence and links the section that holds the numbers, which rot with every torch release and machine.

A measurement here is a duration with its unit (``35 s``, ``1.5 ms``, ``1-3 s``) said of a machine (a GPU or CPU
name, cores, a machine, box or runner) in the same sentence, or given as approximate (``~2 s``) or as what something
took or costs. A limit written as a constant (``1e308 s``, ``threading.TIMEOUT_MAX (~9.2e9 s)``) is not one."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import pytest_aoti

PACKAGE = Path(pytest_aoti.__file__).parent
BENCHMARKS = PACKAGE.parent / "docs" / "benchmarks.md"

# A number that starts a token (not the exponent of 1e308 or the digits of a version), an optional range, a time unit.
DURATION = re.compile(
    r"(?P<approx>~\s?)?(?<![\w.])\d+(?:\.\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?\s?"
    r"(?:s|ms|µs|us|secs?|seconds?|min|minutes?|h|hours?)\b(?!\.?\d)"
)
MACHINE = re.compile(
    r"\b(?:[AHLTV]\d{2,3}|GPUs?|CPUs?|cores?|\d+-core|machines?|box|runners?|hosts?|laptops?)\b", re.IGNORECASE
)
MEASURED_VERB = re.compile(r"\b(?:took|takes|take|costs?|costing|spent|spends)\b\W*(?:\w+\W+){0,3}$", re.IGNORECASE)
SENTENCE_END = re.compile(r"[.;:!?](?:\s|$)")
LINK = re.compile(r"docs/benchmarks\.md#([\w-]+)")


def _sentence_around(text: str, start: int, end: int) -> str:
    """The sentence (or clause, up to ``.``, ``;`` or ``:``) of ``text`` holding ``text[start:end]``."""
    before = [m.end() for m in SENTENCE_END.finditer(text, 0, start)]
    after = SENTENCE_END.search(text, end)
    return text[before[-1] if before else 0 : after.start() if after else len(text)]


def measurements(text: str) -> list[str]:
    """Each duration in ``text`` said of a machine, or given as approximate or as what something took."""
    found = []
    for match in DURATION.finditer(text):
        sentence = _sentence_around(text, match.start(), match.end())
        if match.group("approx") or MACHINE.search(sentence) or MEASURED_VERB.search(text[: match.start()]):
            found.append(match.group().strip())
    return found


def prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of a module's ``source``, by first line: each run of consecutive comment lines as
    one text, and each string that stands as a statement, its lines joined (a sentence may run over lines)."""
    texts: list[tuple[int, str]] = []
    last = -2
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line, text = token.start[0], token.string.lstrip("#").strip()
        if line == last + 1 and texts:
            texts[-1] = (texts[-1][0], f"{texts[-1][1]} {text}")
        else:
            texts.append((line, text))
        last = line
    texts += [
        (node.lineno, " ".join(node.value.value.split()))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    ]
    return texts


def test_no_module_of_the_package_states_a_measurement() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {duration!r} (move it to docs/benchmarks.md and link the section)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for source in [path.read_text(encoding="utf-8")]
        for line, text in prose(source)
        for duration in measurements(text)
    ]
    assert found == []


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_into_docs_benchmarks_names_a_section_there() -> None:
    anchors = {
        _anchor(line.lstrip("#"))
        for line in BENCHMARKS.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    links = {
        f"{path.relative_to(PACKAGE)}: #{anchor}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for anchor in LINK.findall(path.read_text(encoding="utf-8"))
        if anchor not in anchors
    }
    assert links == set()
    assert "measurements-behind-the-codes-choices" in anchors


@pytest.mark.parametrize(
    "text",
    [
        "the probes run before a fresh process's first compile: ~35 s on the H100 machine, in each worker",
        "vector-ISA probes (one build and one Python per ISA; 31-37 s on the H200 machine)",
        "On a 2-core machine shared with six test suites, rounds of a tiny model took 1-3 s.",
        "on 2 cores a run with failures to debug took 96.4 s with it started ahead of need",
        "importing torch._inductor.config costs ~1.6 s: not on a cache hit without configs",
        "a child starts fresh in ~2 s, faster than a server warms up",
        "normalized latencies read 0.4-0.8x on the 2-core box for a package with a 4 ms slower op",
        "Each extra run is a child (3 seconds on a CPU, more on a GPU)",
    ],
)
def test_a_measurement_is_found(text: str) -> None:
    assert measurements(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "a wait past threading.TIMEOUT_MAX (~9.2e9 s) is an OverflowError",
        "time arithmetic on it overflows (1e308 s)",
        "seconds a child may run before it is stopped (default 900, at most 604800: a week)",
        "a run stops after OVERRUN_FACTOR times its planned time (at least 60 s)",
        "each block runs its call this long, give or take: long enough for the clock, short for rounds",
        "torch 2.11 on CUDA promises float32 for the inverse of torch.unique",
        "seen on the H200: Cannot re-initialize CUDA in forked subprocess",
    ],
)
def test_a_limit_or_a_fact_is_not_a_measurement(text: str) -> None:
    assert measurements(text) == []
