"""Every code example of README.md and docs/ runs, and gives what its page shows.

A page is read top down as one example project (a fresh directory per page):
- a fenced block with ``title="NAME"`` is a file of the project, written when it is reached;
- a line ``<!-- docs-test: pytest ARGS => OUTCOME -->`` runs ``python -m pytest ARGS`` in the project as it stands,
  and checks pytest's closing counts (``1 failed, 1 passed``) and that each ``E`` line of the next ``text`` block
  is in the output;
- any other ``python`` block runs as a script in the project (exit 0);
- a block the line before which says ``<!-- docs-test: skip REASON -->`` is not run (REASON is required).

The pages' runs share one package cache (``HOME`` points every run at it), so the README's model and the getting
started page's (the same model) compile once for the whole suite. The record pages (benchmarks, GPU validation, the
private-API table) hold logs of past runs, not examples.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = {"benchmarks.md", "gpu-validation.md", "torch-private-apis.md"}
_ANNOTATION = re.compile(r"^<!-- docs-test: (?P<what>skip|pytest)(?P<rest>.*?)-->$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
_COUNTS = re.compile(r"(\d+) (passed|failed|error|errors|skipped|xfailed|xpassed|deselected)")


def pages() -> list[Path]:
    docs = sorted(path for path in (ROOT / "docs").rglob("*.md") if path.name not in RECORDS)
    return [ROOT / "README.md", *docs]


@dataclass
class Block:
    line: int
    language: str
    title: str | None
    text: str
    annotation: tuple[str, str] | None  # ("skip", reason) or ("pytest", "ARGS => OUTCOME")


@dataclass
class PytestRun:
    line: int
    args: list[str]
    outcome: str
    shown_errors: list[str] = field(default_factory=list)


def blocks(path: Path) -> list[Block | PytestRun]:
    """The page's fenced blocks and pytest runs, in order (a run's shown ``E`` lines from the next text block)."""
    lines = path.read_text().splitlines()
    found: list[Block | PytestRun] = []
    pending: tuple[str, str] | None = None
    waiting: PytestRun | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        annotation = _ANNOTATION.match(line.strip())
        fence = _FENCE.match(line)
        if annotation and annotation["what"] == "pytest":
            args, _, outcome = annotation["rest"].partition("=>")
            assert outcome.strip(), f"{path.name}:{index + 1}: expected <!-- docs-test: pytest ARGS => OUTCOME -->"
            waiting = PytestRun(index + 1, shlex.split(args), outcome.strip())
            found.append(waiting)
        elif annotation:
            pending = ("skip", annotation["rest"].strip())
        elif fence:
            end = next(k for k in range(index + 1, len(lines)) if lines[k].strip() == fence["fence"] and k > index)
            body = "\n".join(text[len(fence["indent"]) :] for text in lines[index + 1 : end])
            info = fence["info"].strip()
            title = _TITLE.search(info)
            block = Block(index + 1, info.split()[0] if info else "", title and title["title"], body + "\n", pending)
            if waiting is not None and block.language == "text":
                waiting.shown_errors = [text for text in body.splitlines() if text.startswith("E   ")]
                waiting = None
            found.append(block)
            pending, index = None, end
        elif line.strip():
            pending = None
        index += 1
    return found


def _runs(path: Path) -> bool:
    return any(
        isinstance(item, PytestRun) or (item.annotation is None and (item.title or item.language == "python"))
        for item in blocks(path)
    )


@pytest.mark.parametrize("page", pages(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_python_block_runs_or_says_why_not(page: Path) -> None:
    for item in blocks(page):
        if isinstance(item, Block) and item.annotation is not None:
            assert item.annotation[1], f"{page.name}:{item.line}: <!-- docs-test: skip --> needs a reason"


@pytest.fixture(scope="session")
def docs_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One HOME for every page's runs (beside the xdist workers' base temps): ``~/.cache/pytest-aoti`` is then one
    package cache for them all, and its file lock makes a second worker wait for the first compile."""
    home = tmp_path_factory.getbasetemp().parent / "aoti-docs-home"
    home.mkdir(exist_ok=True)
    return home


def _environment(home: Path) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "XDG_CACHE"))}
    environment.update(HOME=str(home), CI="", PYTHONDONTWRITEBYTECODE="1")
    return environment


def _run_pytest(run: PytestRun, project: Path, environment: dict[str, str], where: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *run.args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    closing = output.strip().splitlines()[-1] if output.strip() else ""
    counts = sorted(f"{n} {kind}" for n, kind in _COUNTS.findall(closing))
    assert counts == sorted(part.strip() for part in run.outcome.split(",")), f"{where}: {closing}\n{output}"
    for shown in run.shown_errors:
        assert shown.strip() in output, f"{where}: the page shows a line this run does not print:\n{shown}\n{output}"


@pytest.mark.parametrize(
    "page", [page for page in pages() if _runs(page)], ids=lambda path: str(path.relative_to(ROOT))
)
def test_the_pages_examples_run(page: Path, tmp_path: Path, docs_home: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    environment = _environment(docs_home)
    for item in blocks(page):
        where = f"{page.relative_to(ROOT)}:{item.line}"
        if isinstance(item, PytestRun):
            _run_pytest(item, project, environment, where)
        elif item.annotation is not None:
            continue
        elif item.title:
            (project / item.title).write_text(item.text)
        elif item.language == "python":
            done = subprocess.run(
                [sys.executable, "-c", item.text],
                cwd=project,
                env=environment,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert done.returncode == 0, f"{where}: the example failed:\n{done.stdout}{done.stderr}"


def test_the_troubleshooting_pages_plugin_trap_is_what_pytest_prints(tmp_path: Path) -> None:
    """Where pytest-aoti is installed, ``-p pytest_aoti.plugin`` stops pytest as troubleshooting.md shows (a change
    of that behaviour must change the page). Skipped where the plugin is importable but not installed."""
    if not any(ep.value == "pytest_aoti.plugin" for ep in importlib.metadata.entry_points(group="pytest11")):
        pytest.skip("pytest-aoti is not installed here (on PYTHONPATH only): there is no trap")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_aoti.plugin", "--collect-only", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    shown = "ValueError: Plugin already registered under a different name: aoti=<module 'pytest_aoti.plugin'"
    assert done.returncode != 0
    assert shown in done.stdout + done.stderr
    assert shown in page
