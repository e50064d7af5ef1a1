"""What the core and the fixtures need of the options, resolved once at configure time into a frozen
:class:`Settings`: the device and the ``aoti`` marker. The debug rerun's options live in ``debug/options.py``, the
package cache's in ``cache/options.py``; all of them read a flag and its ini twin through :func:`option_value`.
Precedence: ini < command line < marker."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

DEVICE_DESC = "device to compile for: auto (cuda:0 when CUDA is available, else cpu), cpu, cuda or cuda:N"
_DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


@dataclass(frozen=True)
class Settings:
    device: str


def option_group(parser: pytest.Parser) -> pytest.OptionGroup:
    return parser.getgroup("aoti", "AOTInductor testing (pytest-aoti)")


def add_option(
    parser: pytest.Parser,
    name: str,
    help: str,
    *,
    flag: bool = False,
    ini_type: Any = "string",
    default: Any = None,
    ini: bool = True,
    metavar: str | None = None,
) -> None:
    """``--aoti-<name>`` and, unless ``ini`` is False, its ini twin ``aoti_<name>`` (dashes as underscores): one
    name, spelled the same in both. Unset on the command line, the option is None, so the ini value shows through
    (:func:`option_value`)."""
    dest = "aoti_" + name.replace("-", "_")
    group = option_group(parser)
    if flag:
        group.addoption(f"--aoti-{name}", action="store_true", default=None, dest=dest, help=help)
    else:
        shown = metavar or name.split("-")[-1].upper()
        group.addoption(f"--aoti-{name}", default=None, dest=dest, metavar=shown, help=help)
    if ini:
        parser.addini(dest, help, type=ini_type, default=default)


def option_value(config: pytest.Config, dest: str) -> tuple[Any, str]:
    """The option ``dest``'s value (``aoti_x``: flag ``--aoti-x``, ini key ``aoti_x``) and where it came from, for
    messages: the command line's when given there, else the ini file's (or the ini default)."""
    cli = config.getoption(dest, None)
    if cli is not None:
        return cli, "--" + dest.replace("_", "-")
    try:
        return config.getini(dest), f"ini option {dest}"
    except (ValueError, pytest.UsageError) as error:  # a bool ini value pytest cannot read ("maybe")
        raise pytest.UsageError(f"ini option {dest}: {error}; expected true or false") from None


def positive_number(raw: Any, source: str, *, what: str, integer: bool = False, at_most: float | None = None) -> float:
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{source}: expected {what}, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise pytest.UsageError(f"{source}: expected {what} greater than 0 (finite), got {raw!r}")
    if at_most is not None and value > at_most:
        raise pytest.UsageError(f"{source}: expected {what} of at most {at_most:g}, got {raw!r}")
    return value


def whole_number(raw: Any, source: str, *, what: str, at_most: int) -> int:
    """A whole number from 0 to ``at_most`` (``raw`` from the command line or the ini file)."""
    text = str(raw).strip()
    if not text.isascii() or not text.isdigit():
        raise pytest.UsageError(f"{source}: expected {what} (a whole number >= 0), got {raw!r}")
    # Compared as text first: int() refuses digit strings past 4300 characters.
    if len(text.lstrip("0")) > len(str(at_most)) or int(text) > at_most:
        raise pytest.UsageError(f"{source}: expected {what} of at most {at_most}, got {raw!r}")
    return int(text)


def add_options(parser: pytest.Parser) -> None:
    add_option(parser, "device", DEVICE_DESC, default="auto")


def resolve(config: pytest.Config) -> Settings:
    device, device_source = option_value(config, "aoti_device")
    device = str(device).strip()
    if not _DEVICE_PATTERN.match(device):
        raise pytest.UsageError(f"{device_source}: unknown device {device!r}; expected auto, cpu, cuda or cuda:N")
    return Settings(device=device)


def _aoti_signature(
    *, allow_nonfinite: bool = False, restride_inputs: bool = False, allow_out_of_range: bool = False
) -> None: ...


MARKERS = {
    "aoti": "aoti(*, allow_nonfinite=False, restride_inputs=False, allow_out_of_range=False): per-test settings of "
    "the aoti fixtures: accept NaN/Inf in inputs and outputs; copy inputs whose strides differ from the compiled ones "
    "instead of failing; let embedding indices outside the table reach the package (whose bounds check aborts)",
}


@dataclass(frozen=True)
class ItemSettings:
    """One test's ``aoti`` marker over the session's settings. Resolved once, at collection."""

    allow_nonfinite: bool
    restride_inputs: bool
    allow_out_of_range: bool = False


def marker_arguments(item: pytest.Item, name: str, signature: Callable[..., None]) -> dict[str, Any] | None:
    """The marker's arguments bound through ``signature`` (defaults applied), or None when it is absent."""
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    try:
        bound = inspect.signature(signature).bind(*marker.args, **marker.kwargs)
    except TypeError as error:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: {error}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def _flag(value: Any, where: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise pytest.UsageError(f"{where}: {name}= expected True or False, got {value!r}")
    return value


def resolve_item(item: pytest.Item) -> ItemSettings:
    """``item``'s ``aoti`` marker; a bad argument is a :class:`pytest.UsageError` naming the test, the marker and
    the argument."""
    aoti_args = marker_arguments(item, "aoti", _aoti_signature) or {}
    where = f"{item.nodeid}: @pytest.mark.aoti"
    return ItemSettings(
        allow_nonfinite=_flag(aoti_args.get("allow_nonfinite", False), where, "allow_nonfinite"),
        restride_inputs=_flag(aoti_args.get("restride_inputs", False), where, "restride_inputs"),
        allow_out_of_range=_flag(aoti_args.get("allow_out_of_range", False), where, "allow_out_of_range"),
    )


settings_key = pytest.StashKey[Settings]()
# pytest's session TempPathFactory, which pytest hands out only to fixtures: aoti_device stashes it for the debug
# rerun, which keeps its children's logs under the session's basetemp (pytest's retention policy applies there).
session_temp_key = pytest.StashKey[pytest.TempPathFactory]()
_item_settings_key = pytest.StashKey[ItemSettings]()


def item_settings(item: pytest.Item) -> ItemSettings:
    """``item``'s resolved settings, computed once (collection validates them all up front)."""
    if _item_settings_key not in item.stash:
        item.stash[_item_settings_key] = resolve_item(item)
    return item.stash[_item_settings_key]
