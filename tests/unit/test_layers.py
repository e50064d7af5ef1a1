"""What the layer contracts of pyproject.toml (import-linter, run by .ci/run) cannot check: what a load imports at run
time (each in a fresh interpreter), the 60-line rule, torch's private APIs behind core/torch_private.py; and that the
contracts themselves catch an import inside a function."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _loaded_after_each(modules: list[str]) -> list[tuple[str, set[str]]]:
    """Import ``modules`` one after another in a fresh interpreter: each with what is loaded after it (what it and
    those before it loaded)."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    print(json.dumps([name, sorted(sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    assert [name for name, _ in loaded] == modules
    return [(name, set(names)) for name, names in loaded]


def test_loading_the_plugin_imports_neither_torch_nor_matplotlib() -> None:
    """What import-linter cannot see: which modules a load runs (a function's import of torch is fine, one at module
    level of anything the plugin loads is not). Every pytest-aoti session pays for what loading the plugin loads."""
    ((_, loaded),) = _loaded_after_each(["pytest_aoti.plugin"])
    assert not {"torch", "matplotlib", "hypothesis"} & loaded


def _copy_of_the_package(tmp_path: Path) -> Path:
    root = Path(__file__).parents[2]
    shutil.copytree(root / "pytest_aoti", tmp_path / "pytest_aoti", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_layer_contracts_count_imports_inside_functions(tmp_path: Path) -> None:
    """The contracts of pyproject.toml (run by .ci/run) on a copy of the package with a core module whose function
    imports pytest and the fixtures, a cycle inside the core made by an import inside a function, and the debug
    rerun's parent side launching the fork server itself (warm starts are debug.warm_starts' alone): each broken
    contract names the import."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (the test extra installs it)")
    copy = _copy_of_the_package(tmp_path)
    core = copy / "pytest_aoti" / "core"
    (core / "late_imports.py").write_text(
        "def reach_up() -> None:\n    import pytest  # noqa: F401\n\n"
        "    from pytest_aoti import fixtures  # noqa: F401\n"
    )
    (core / "cycle_a.py").write_text("def late() -> None:\n    from pytest_aoti.core import cycle_b  # noqa: F401\n")
    (core / "cycle_b.py").write_text("from pytest_aoti.core import cycle_a  # noqa: F401\n")
    parent = copy / "pytest_aoti" / "debug" / "parent.py"
    parent.write_text(
        parent.read_text() + "\n\ndef launch_late() -> None:\n"
        "    from pytest_aoti.forkserver.client import launch_server  # noqa: F401\n"
    )
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run([lint_imports], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pytest_aoti.core.late_imports -> pytest_aoti.fixtures (l.4)" in done.stdout
    assert "pytest_aoti.core.late_imports -> pytest (l.2)" in done.stdout
    assert "No cycles are allowed in pytest_aoti.core." in done.stdout
    assert "- .cycle_b -> .cycle_a (1 import)" in done.stdout or "- .cycle_a -> .cycle_b (1 import)" in done.stdout
    assert "pytest_aoti.debug.parent -> pytest_aoti.forkserver.client (l." in done.stdout


@pytest.mark.parametrize(
    "light",
    [
        "pytest_aoti.core.protocol",
        "pytest_aoti.core.processes",
        "pytest_aoti.core.devices",
        "pytest_aoti.debug.triage",
        # A child's session builds its call observers at configure time; provenance reads a package as a zip.
        "pytest_aoti.core.observers",
        "pytest_aoti.core.source_lines",
    ],
)
def test_the_boundary_loads_neither_torch_nor_pytest(light: str) -> None:
    ((_, loaded),) = _loaded_after_each([light])
    assert not {"torch", "pytest", "_pytest"} & loaded


def test_no_function_in_the_package_runs_over_60_lines() -> None:
    import ast
    from pathlib import Path

    package = Path(__file__).parents[2] / "pytest_aoti"
    long = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


# Documented entry points despite their underscore: AOTI's own API (PyTorch's AOTInductor docs call these) and pytree.
_PUBLIC_UNDERSCORED = ("torch._inductor.aoti_compile_and_package", "torch._inductor.aoti_load_package", "_pytree")
# The one exception: a repro bundle's repro.py (bundle.REPRO_SCRIPT) runs with only torch installed, so it cannot
# import torch_private. It loads a package this machine built through the package loader itself (what
# torch_private.package_loader reaches) and falls back to aoti_load_package when a torch release moves it.
_REPRO_SCRIPT_PRIVATE = (
    "torch._C._aoti.AOTIModelPackageLoader",
    "torch.export.pt2_archive._package",
    "torch._inductor.package.package",
)


def _repro_script_lines(path: Path) -> range:
    """The lines of ``REPRO_SCRIPT``'s assignment in ``path`` (none elsewhere)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REPRO_SCRIPT" for t in node.targets):
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return range(0)


def test_private_torch_apis_are_reached_only_through_torch_private() -> None:
    """Every undocumented torch internal the package uses sits behind ``pytest_aoti.core.torch_private``, with its
    version guard: one file to change when a torch release moves one."""
    import re
    from pathlib import Path

    package = Path(__file__).parents[2] / "pytest_aoti"
    dotted = re.compile(r"\btorch(?:\.\w+)+")
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "torch_private.py":
            continue
        script = _repro_script_lines(path)
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if code.strip().startswith(("``", '"""')) or "``" in code:
                continue  # prose in a docstring
            allowed_here = _PUBLIC_UNDERSCORED + (_REPRO_SCRIPT_PRIVATE if number in script else ())
            for match in dotted.finditer(code):
                name = match.group(0)
                underscored = any(part.startswith("_") and not part.startswith("__") for part in name.split("."))
                if underscored and not any(allowed in name for allowed in allowed_here):
                    found.append(f"{path.name}:{number}: {name}")
    assert not found, found


# The pytest objects a plugin is handed; an underscored attribute of one is pytest's private (config._tmp_path_factory,
# item._request, session._setupstate ...), which a pytest release may move without notice.
_PYTEST_OBJECTS = {"config", "pytestconfig", "item", "session", "request", "report", "node", "terminalreporter"}


def test_no_pytest_private_is_used() -> None:
    """pytest-aoti uses what pytest documents: no ``_pytest`` import, no underscored attribute of a config, item,
    session, request or report. The xdist and execnet internals still needed sit in ``debug/xdist_compat.py``,
    behind its version guard."""
    package = Path(__file__).parents[2] / "pytest_aoti"
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
                if name in _PYTEST_OBJECTS or (isinstance(name, str) and name.endswith("config")):
                    found.append(f"{path.relative_to(package)}:{node.lineno}: {name}.{node.attr}")
            modules = (
                [node.module or ""] if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else []
            )  # fmt: skip
            where = f"{path.relative_to(package)}:{getattr(node, 'lineno', 0)}"
            found += [f"{where}: import {module}" for module in modules if module.startswith("_pytest")]
    assert not found, found
