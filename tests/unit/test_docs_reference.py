"""The documentation's reference is generated from the code (``docs/hooks/reference.py``, an MkDocs hook) and
complete: every public name (option, ini key, marker, fixture, hook and its records, exception, exported function or
class) has help text, and every one of them reaches a reference page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _generator()


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The facts of pytest's own config with pytest-aoti loaded, read once, in-process, from an empty directory (no
    conftest or ini file of this repository), as the documentation build reads them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("docs-reference"))
        patch.delenv("PYTEST_ADDOPTS", raising=False)
        result: dict[str, Any] = reference.read_facts()
    return result


def test_the_facts_hold_the_plugins_public_names(facts: dict[str, Any]) -> None:
    options = {name for option in facts["options"] for name in option["names"]}
    assert {"--aoti-debug", "--aoti-device", "--aoti-cache-clear", "--aoti-verify"} <= options
    assert {"aoti_debug", "aoti_device"} <= {key["name"] for key in facts["ini"]}
    assert {"aoti", "aoti_ima", "aoti_isolate", "aoti_deploy"} <= {marker["name"] for marker in facts["markers"]}
    fixtures = {fixture["name"] for fixture in facts["fixtures"]}
    assert {"aoti_device", "aoti_compile", "aoti_check", "aoti_compile_shared", "aoti_snapshot"} <= fixtures
    assert "pytest_aoti_verdict" in {hook["name"] for hook in facts["hooks"]}
    assert "PublicVerdict" in {record["name"] for record in facts["records"]}
    assert {"AOTIError", "AOTIInvariantError", "AOTIWarning"} <= {item["name"] for item in facts["exceptions"]}
    assert {"compile_model", "PackageCache"} <= {item["name"] for item in facts["api"]}


def test_every_option_has_its_ini_twin_except_the_actions(facts: dict[str, Any]) -> None:
    """An option without an ini key must be a switch for one run (``--aoti-cache-clear``), never a setting."""
    alone = [option["names"][0] for option in facts["options"] if option["ini"] is None]
    assert "--aoti-cache-clear" in alone
    for option in facts["options"]:
        if option["ini"] is None:
            assert option["flag"], f"{option['names'][0]} takes a value but has no ini twin"


def test_every_public_name_has_documentation(facts: dict[str, Any]) -> None:
    assert reference.undocumented(facts) == []


def test_a_name_without_help_is_caught(facts: dict[str, Any]) -> None:
    """The check itself can fail: a blank help, docstring or marker description is reported by name."""
    broken = {kind: [dict(item) for item in items] for kind, items in facts.items()}
    broken["options"][0]["help"] = " "
    broken["markers"][0]["help"] = ""
    broken["fixtures"][0]["help"] = ""
    assert reference.undocumented(broken) == [
        f"option {broken['options'][0]['names'][0]}",
        f"marker {broken['markers'][0]['name']}",
        f"fixture {broken['fixtures'][0]['name']}",
    ]


def test_the_reference_pages_show_every_public_name(facts: dict[str, Any]) -> None:
    pages = sorted((ROOT / "docs" / "reference").glob("*.md"))
    rendered = "\n".join(reference.render(page.read_text(), facts) for page in pages)
    asked = set(re.findall(r"<!-- reference: ([a-z]+) -->", "\n".join(page.read_text() for page in pages)))
    assert asked == set(reference.SECTIONS), "each generated section is on a reference page"
    names = [name for option in facts["options"] for name in option["names"]]
    names += [
        item["name"]
        for kind in ("ini", "markers", "fixtures", "hooks", "records", "exceptions", "api")
        for item in facts[kind]
    ]
    assert [name for name in names if name not in rendered] == []
    assert "<!-- reference:" not in rendered


def test_an_unknown_section_is_an_error_naming_it(facts: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="reference: optoins"):
        reference.render("<!-- reference: optoins -->", facts)
