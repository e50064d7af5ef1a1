"""The README's two commands for contributors are what `.ci/run` runs (its "README command 1/2" steps): a README
that drifts from CI would hand a newcomer commands nobody runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    """The bash block of the README's Contributing section, one command a line."""
    contributing = (ROOT / "README.md").read_text().split("## Contributing", 1)[1]
    block = re.search(r"```bash\n(.*?)```", contributing, re.DOTALL)
    assert block is not None, "README.md: no bash block under ## Contributing"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _ci_steps() -> list[list[str]]:
    """`.ci/run`'s commands as words, with `$pinned_torch` read from the script and pip's `-q` left out."""
    script = (ROOT / ".ci" / "run").read_text()
    pinned = re.search(r"^pinned_torch=(\S+)$", script, re.MULTILINE)
    assert pinned is not None
    steps = []
    for line in script.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            for part in line.replace("$pinned_torch", pinned.group(1)).split("&&"):
                try:
                    steps.append([word for word in shlex.split(part) if word != "-q"])
                except ValueError:
                    continue  # a line of a multi-line string, not a command
    return steps


def test_the_readmes_two_commands_are_what_ci_runs() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    steps = _ci_steps()
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            assert any(step[: len(words)] == words for step in steps), f".ci/run does not run {part.strip()!r}"


def test_a_command_ci_does_not_run_is_caught() -> None:
    steps = _ci_steps()
    words = shlex.split(".venv/bin/python -m pytest tests -n 4")
    assert not any(step[: len(words)] == words for step in steps)
