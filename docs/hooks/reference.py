"""The reference pages, generated from the code at build time (an MkDocs hook, ``hooks:`` in mkdocs.yml).

The source is what pytest itself builds with pytest-aoti loaded: the argparse parser (every ``--aoti-*`` option
with its help and default), the ini keys pytest registered (their help, type and default), the markers the plugin
registered at configure time, the fixtures of the plugin modules pytest loaded, the hookspecs of
``pytest_aoti/hookspecs.py`` and the exceptions and warnings ``pytest_aoti`` exports. None of it is a hand-kept
list, so the pages follow the code.

The facts are read in a child interpreter started in an empty directory (``python docs/hooks/reference.py``
prints them as JSON): no conftest or ini file of this repository is read, and the MkDocs process gets none of
pytest's state. ``tests/unit/test_docs_reference.py`` reads the same facts and fails on a public name without help.

A page asks for a table with a line ``<!-- reference: NAME -->`` (NAME in ``SECTIONS``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from typing import Any

# The marker line a page uses to ask for one generated section.
_PLACEHOLDER = re.compile(r"^<!-- reference: (?P<name>[a-z]+) -->$", re.MULTILINE)


# --- the facts, read in the child -------------------------------------------------------------------------------


def _options(parser: Any) -> list[dict[str, Any]]:
    """Every option whose long name starts with ``--aoti``, with its ini twin (``--aoti-x`` reads ini ``aoti_x``)."""
    ini = parser._inidict
    found = []
    for group in parser._groups:
        for option in group.options:
            names = option.names()
            if not any(name.startswith("--aoti") for name in names):
                continue
            attrs = option.attrs()
            twin = names[0][2:].replace("-", "_")
            found.append(
                {
                    "names": names,
                    "group": group.name,
                    "help": attrs.get("help") or "",
                    "flag": attrs.get("nargs") == 0,  # takes no value: an on/off switch or an action
                    "metavar": attrs.get("metavar"),
                    "default": repr(attrs.get("default")),
                    "ini": twin if twin in ini else None,
                }
            )
    return found


def _ini_keys(parser: Any) -> list[dict[str, Any]]:
    keys = []
    for name, (help_text, kind, default) in parser._inidict.items():
        if name.startswith("aoti"):
            keys.append({"name": name, "help": help_text or "", "type": kind or "string", "default": repr(default)})
    return keys


def _markers(config: Any) -> list[dict[str, str]]:
    markers = []
    for line in config.getini("markers"):
        name_and_signature, _, description = line.partition(":")
        name = name_and_signature.split("(")[0].strip()
        if name.startswith("aoti"):
            markers.append({"name": name, "signature": name_and_signature.strip(), "help": description.strip()})
    return markers


def _fixtures(config: Any) -> list[dict[str, str]]:
    """The fixtures defined in pytest-aoti's plugin modules, as pytest registered them."""
    from _pytest.fixtures import FixtureFunctionDefinition

    found: dict[str, dict[str, str]] = {}
    for plugin in config.pluginmanager.get_plugins():
        module_name = getattr(plugin, "__name__", "")
        if not module_name.startswith("pytest_aoti"):
            continue
        for attribute in vars(plugin).values():
            if isinstance(attribute, FixtureFunctionDefinition):
                function = attribute._get_wrapped_function()
                found[attribute.name] = {
                    "name": attribute.name,
                    "scope": str(attribute._fixture_function_marker.scope),
                    "requests": ", ".join(inspect.signature(function).parameters),
                    "help": inspect.getdoc(function) or "",
                    "module": module_name,
                }
    return sorted(found.values(), key=lambda fixture: fixture["name"])


def _wrapped(name: str, function: Callable[..., Any]) -> str:
    """``name(signature)`` on one line, or one parameter a line where that is long (a page is ~90 columns wide)."""
    signature = inspect.signature(function)
    line = f"{name}{signature}".replace("'", "")
    if len(line) <= 88:
        return line
    parameters = ",\n".join(f"    {parameter}" for parameter in signature.parameters.values()).replace("'", "")
    returns = "" if signature.return_annotation is inspect.Signature.empty else f" -> {signature.return_annotation}"
    return f"{name}(\n{parameters},\n){returns}".replace("'", "")


def _hooks() -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The hookspecs and the public records of ``pytest_aoti.hookspecs`` (the classes its hooks hand out)."""
    import pytest_aoti.hookspecs as hookspecs

    hooks, records = [], []
    for name, member in vars(hookspecs).items():
        if name.startswith("pytest_") and inspect.isfunction(member):
            hooks.append({"name": name, "signature": _wrapped(name, member), "help": inspect.getdoc(member) or ""})
        elif inspect.isclass(member) and member.__module__ == hookspecs.__name__ and not name.startswith("_"):
            fields = [field.name for field in dataclasses.fields(member)] if dataclasses.is_dataclass(member) else []
            records.append({"name": name, "help": inspect.getdoc(member) or "", "fields": fields})
    return hooks, records


def _exceptions() -> list[dict[str, str]]:
    """Every exception and warning class ``pytest_aoti`` exports, with its bases."""
    import pytest_aoti

    found = []
    for name in pytest_aoti.__all__:
        member = getattr(pytest_aoti, name)
        if inspect.isclass(member) and issubclass(member, BaseException):
            bases = ", ".join(base.__name__ for base in member.__bases__)
            found.append({"name": name, "bases": bases, "help": inspect.getdoc(member) or ""})
    return found


def _api() -> list[dict[str, str]]:
    """The other names ``pytest_aoti`` exports (functions and classes; torch is imported for them)."""
    import pytest_aoti

    found = []
    for name in pytest_aoti.__all__:
        member = getattr(pytest_aoti, name)
        if inspect.isclass(member) and issubclass(member, BaseException):
            continue
        try:
            signature = _wrapped(name, member)
        except (TypeError, ValueError):
            signature = name
        kind = "class" if inspect.isclass(member) else "function"
        found.append({"name": name, "kind": kind, "signature": signature, "help": inspect.getdoc(member) or ""})
    return found


def facts_of(config: Any) -> dict[str, Any]:
    """The facts of a configured pytest ``config`` with pytest-aoti loaded."""
    hooks, records = _hooks()
    return {
        "options": _options(config._parser),
        "ini": _ini_keys(config._parser),
        "markers": _markers(config),
        "fixtures": _fixtures(config),
        "hooks": hooks,
        "records": records,
        "exceptions": _exceptions(),
        "api": _api(),
    }


def read_facts() -> dict[str, Any]:
    """The facts, read in this process (the child): pytest's config built with the plugin loaded."""
    from _pytest.config import _prepareconfig

    config = _prepareconfig(["-p", "no:cacheprovider"])
    config._do_configure()  # the markers are registered at configure time
    try:
        return facts_of(config)
    finally:
        config._ensure_unconfigure()


def undocumented(data: dict[str, Any]) -> list[str]:
    """Each public name whose help text or docstring is empty, as ``kind name``."""
    missing = [f"option {option['names'][0]}" for option in data["options"] if not option["help"].strip()]
    missing += [f"ini key {key['name']}" for key in data["ini"] if not key["help"].strip()]
    for kind in ("markers", "fixtures", "hooks", "records", "exceptions", "api"):
        missing += [f"{kind[:-1]} {item['name']}" for item in data[kind] if not item["help"].strip()]
    return missing


def facts(python: str = sys.executable) -> dict[str, Any]:
    """The facts, read in a child interpreter started in an empty directory (no conftest, no ini file)."""
    with tempfile.TemporaryDirectory(prefix="aoti-docs-reference-") as empty:
        done = subprocess.run([python, __file__], cwd=empty, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"reading the reference from pytest failed ({done.returncode}):\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# --- the pages --------------------------------------------------------------------------------------------------


def _inline(text: str) -> str:
    """reST inline markup as Markdown: double backticks single, ``:class:`x``` roles plain code."""
    return re.sub(r":(?:func|class|attr|meth):`~?([^`]+)`", r"`\1`", text.replace("``", "`"))


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped."""
    return " ".join(_inline(text).split()).replace("|", "\\|")


def _default(shown: str) -> str:
    """A default as the user would write it: ``'auto'`` as ``auto``, an empty string or None as unset."""
    if shown in ("''", "None", "[]"):
        return "unset"
    if shown in ("True", "False"):
        return shown.lower()
    return shown[1:-1] if shown[:1] == shown[-1:] == "'" else shown


def _options_table(data: dict[str, Any]) -> str:
    """One entry per option (each its own anchor): its names, ini twin, default, and help."""
    ini = {key["name"]: key for key in data["ini"]}
    parts = []
    for option in data["options"]:
        names = ", ".join(f"{name}" for name in option["names"])
        metavar = f" {option['metavar']}" if option["metavar"] else ""
        twin = ini.get(option["ini"]) if option["ini"] else None
        if twin is not None:
            facts = f"ini `{twin['name']}` ({twin['type']}) · default `{_default(twin['default'])}`"
        else:
            default = "off" if option["flag"] else _default(option["default"])
            facts = f"no ini key: an action for one run · default `{default}`"
        parts.append(f"### `{names}{metavar}`\n\n{facts}\n\n{_inline(option['help'])}")
    return "\n\n".join(parts)


def _ini_only(data: dict[str, Any]) -> str:
    twins = {option["ini"] for option in data["options"]}
    alone = [key for key in data["ini"] if key["name"] not in twins]
    if not alone:
        return "Every `aoti_*` ini key is the twin of an option above."
    rows = ["| ini key | type | default | what it does |", "|---|---|---|---|"]
    rows += [f"| `{k['name']}` | {k['type']} | `{_default(k['default'])}` | {_cell(k['help'])} |" for k in alone]
    return "\n".join(rows)


def _markers_section(data: dict[str, Any]) -> str:
    parts = []
    for marker in data["markers"]:
        parts.append(f"### `{marker['name']}`\n\n```text\n@pytest.mark.{marker['signature']}\n```\n\n{marker['help']}")
    return "\n\n".join(parts)


def _fixtures_section(data: dict[str, Any]) -> str:
    parts = []
    for fixture in data["fixtures"]:
        parts.append(
            f"### `{fixture['name']}`\n\nScope `{fixture['scope']}`; requests `{fixture['requests']}`; defined in "
            f"`{fixture['module']}`.\n\n{_docstring(fixture['help'])}"
        )
    return "\n\n".join(parts)


def _hooks_section(data: dict[str, Any]) -> str:
    parts = [
        f"### `{hook['name']}`\n\n```text\n{hook['signature']}\n```\n\n{_docstring(hook['help'])}"
        for hook in data["hooks"]
    ]
    parts.append("## Records the hooks hand out")
    for record in data["records"]:
        fields = f"\n\nFields: {', '.join(f'`{name}`' for name in record['fields'])}." if record["fields"] else ""
        where = f"`pytest_aoti.hookspecs.{record['name']}`"
        parts.append(f"### `{record['name']}`\n\n{where}\n\n{_docstring(record['help'])}{fields}")
    return "\n\n".join(parts)


def _exceptions_section(data: dict[str, Any]) -> str:
    rows = ["| name | derives from | what it means |", "|---|---|---|"]
    for exception in data["exceptions"]:
        rows.append(f"| `pytest_aoti.{exception['name']}` | `{exception['bases']}` | {_cell(exception['help'])} |")
    return "\n".join(rows)


def _docstring(text: str) -> str:
    """A docstring as Markdown: reST literal blocks (``::``) become fenced blocks, double backticks single."""
    lines, out, in_block = textwrap.dedent(text).splitlines(), [], False
    for line in lines:
        if in_block and line.strip() and not line.startswith(" "):
            out.append("```")
            in_block = False
        if line.rstrip().endswith("::") and not in_block:
            out += [line.rstrip()[:-1], "", "```python"]
            in_block = True
            continue
        out.append(line[4:] if in_block else line)
    if in_block:
        out.append("```")
    return _inline("\n".join(out))


def _api_section(data: dict[str, Any]) -> str:
    parts = []
    for member in data["api"]:
        call = member["signature"]
        parts.append(f"### `{member['name']}`\n\n```text\n{member['kind']} {call}\n```\n\n{_docstring(member['help'])}")
    return "\n\n".join(parts)


SECTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "options": _options_table,
    "ini": _ini_only,
    "markers": _markers_section,
    "fixtures": _fixtures_section,
    "hooks": _hooks_section,
    "exceptions": _exceptions_section,
    "api": _api_section,
}


def render(markdown: str, data: dict[str, Any]) -> str:
    """``markdown`` with each ``<!-- reference: NAME -->`` line replaced by that generated section."""

    def section(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in SECTIONS:
            raise ValueError(f"<!-- reference: {name} -->: no such section (known: {', '.join(SECTIONS)})")
        return SECTIONS[name](data)

    return _PLACEHOLDER.sub(section, markdown)


# --- the MkDocs hook --------------------------------------------------------------------------------------------

_cached: dict[str, Any] = {}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs: fill the reference placeholders of a page (the facts read once per build)."""
    if not _PLACEHOLDER.search(markdown):
        return markdown
    if not _cached:
        _cached.update(facts())
    return render(markdown, _cached)


if __name__ == "__main__":
    print(json.dumps(read_facts()))
