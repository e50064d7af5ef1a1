"""pytest-aoti has two public modules, ``pytest_aoti`` and ``pytest_aoti.hookspecs`` (ARCHITECTURE.md): everything
else is internal and moves freely, so no internal module re-exports another's names for compatibility. The one old
import path kept for users, ``pytest_aoti.debug.verdict``, warns where it is used."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

import pytest_aoti
from pytest_aoti.hookspecs import PublicVerdict

PACKAGE = Path(pytest_aoti.__file__).parent
DEPRECATED = "pytest_aoti.debug.verdict"


def _imported_modules(tree: ast.AST, module: str) -> set[str]:
    """The modules ``tree`` (the source of ``module``) imports, relative imports resolved; ``from a import b``
    counts as both ``a`` and ``a.b`` (``b`` may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(module.split(".")[: -node.level]) if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def _modules() -> list[tuple[str, ast.AST]]:
    return [
        (
            ".".join(("pytest_aoti", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"),
            ast.parse(path.read_text(encoding="utf-8")),
        )
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_module_of_the_package_imports_the_deprecated_path() -> None:
    """pyproject's filterwarnings makes a DeprecationWarning from pytest_aoti an error in this suite: the package
    itself never goes through the old path."""
    importers = [name for name, tree in _modules() if DEPRECATED in _imported_modules(tree, name)]
    assert importers == []


def test_the_scan_sees_absolute_and_relative_imports() -> None:
    assert DEPRECATED in _imported_modules(ast.parse("from pytest_aoti.debug import verdict"), "pytest_aoti.plugin")
    assert DEPRECATED in _imported_modules(ast.parse("from .verdict import X"), "pytest_aoti.debug.stages")
    assert DEPRECATED not in _imported_modules(ast.parse("from pytest_aoti.hookspecs import X"), "pytest_aoti.x")


def test_no_internal_module_re_exports_another_modules_names() -> None:
    """``from a import b as b`` is the re-export idiom (mypy's explicit re-export): none in the package."""
    re_exports = [
        f"{name}: {alias.name}"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]
    assert re_exports == []


def test_the_old_path_of_public_verdict_warns_at_the_users_line() -> None:
    with pytest.warns(DeprecationWarning, match=r"import it from pytest_aoti\.hookspecs") as caught:
        from pytest_aoti.debug.verdict import PublicVerdict as Old
    assert Old is PublicVerdict
    assert [Path(warning.filename).name for warning in caught] == [Path(__file__).name]


def test_importing_the_old_module_alone_does_not_warn() -> None:
    """A conftest that only imports the module (or a tool that walks the package) is told nothing until it uses the
    name."""
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = importlib.import_module(DEPRECATED)
    with pytest.raises(AttributeError, match="has no attribute 'Verdict'"):
        module.Verdict  # noqa: B018


def test_the_verify_features_functions_are_public_from_the_top() -> None:
    from pytest_aoti.verify import bundled

    assert (pytest_aoti.bundle_io, pytest_aoti.verify_package) == (bundled.bundle_io, bundled.verify_package)
