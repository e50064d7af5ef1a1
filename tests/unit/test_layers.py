"""The import graph points down: the plain-Python core (export, compile, load, checks, cache) loads neither pytest nor
the debug orchestration, and the boundary's names load nothing at all. Each import in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ORCHESTRATION = (
    "pytest_aoti.debug.stages",
    "pytest_aoti.debug.child",
    "pytest_aoti.debug.parent",
    "pytest_aoti.plugin",
    "pytest_aoti.debug.reporting",
    "pytest_aoti.settings",
    "pytest_aoti.debug.minify",
    "pytest_aoti.debug.child_session",
    # What a debug child plugs into the core's calls (compiler.CallObservers), not what the core imports:
    "pytest_aoti.debug.bundle",
    "pytest_aoti.debug.numerics",
)


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


def test_the_core_loads_neither_pytest_nor_the_debug_orchestration() -> None:
    """The core's modules in one interpreter (each imports torch): the first one to load a forbidden module is
    named."""
    for name, loaded in _loaded_after_each(
        ["pytest_aoti.core.compiler", "pytest_aoti.core.cache", "pytest_aoti.core.invariants"]
    ):
        forbidden = loaded & {"pytest", "_pytest", *ORCHESTRATION}
        assert not forbidden, f"importing {name} loaded {sorted(forbidden)}"


@pytest.mark.parametrize(
    "light",
    ["pytest_aoti.core.protocol", "pytest_aoti.core.processes", "pytest_aoti.core.devices", "pytest_aoti.debug.triage"],
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


def test_the_package_has_no_import_cycle() -> None:
    """Module-level imports between pytest_aoti's modules form no cycle (imports inside functions are deferred on
    purpose: what only one path needs, such as torch or a debug stage, is loaded when that path runs)."""
    import ast
    from pathlib import Path

    package = Path(__file__).parents[2] / "pytest_aoti"
    imports: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        found: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_aoti"):
                parts = node.module.split(".")
                found |= {parts[1]} if len(parts) > 1 else {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("pytest_aoti.")}
        imports[path.stem] = found

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for module in imports.get(start, ()):
            if module == target or (module not in seen and reaches(module, target, seen | {module})):
                return True
        return False

    assert not [module for module in imports if reaches(module, module, {module})]


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
