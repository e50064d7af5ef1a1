"""The unit layer compiles nothing and builds no wheel: a test that does belongs in tests/ (issue 53). Read with ast,
so a name in a string or a comment does not count."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
# What compiles a package (Inductor's own entry point) or builds a wheel (pip wheel, python -m build).
COMPILING_CALLS = frozenset({"aoti_compile_and_package"})
BUILDING_ARGUMENTS = frozenset({"wheel", "build", "bdist_wheel"})


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _builds(call: ast.Call) -> bool:
    """A command line (a list literal) naming pip or a build module and a wheel/build step."""
    for argument in call.args:
        if isinstance(argument, ast.List):
            words = {element.value for element in argument.elts if isinstance(element, ast.Constant)}
            if words & {"pip", "build"} and words & BUILDING_ARGUMENTS:
                return True
    return False


def test_no_unit_test_compiles_a_package_or_builds_a_wheel() -> None:
    offenders = []
    for path in sorted(UNIT.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and (_called_name(node) in COMPILING_CALLS or _builds(node)):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == [], f"compiles or builds in the unit layer (move to tests/): {offenders}"
