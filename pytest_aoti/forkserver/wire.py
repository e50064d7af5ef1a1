"""What the fork server and its client say to each other: one frozen record per message, named on the wire.

Each message is one JSON line, ``{"message": NAME, "data": {...}}``, written by :func:`encode` and read back by
:func:`decode`, which names what was wrong with a line that is not one of the messages the reader expects (an unknown
name, a missing or mistyped field, a message out of place): both sides import these records from here, and neither
guesses a message from its keys (as pytest-xdist's controller fails on an ``unknown event``).

- The server, once on its stdout: :class:`Ready` (its pid), or :class:`Unsafe` (why no child may be forked from it)
  before it exits.
- The client, once per connection: :class:`ForkRequest` (the child's pytest arguments, ``-P``, cwd, environment and
  log file).
- The server, on that connection: :class:`Forked` (the child's pid), or :class:`Refused` (why the child must start
  fresh instead); after :class:`Forked`, :class:`Ended` (its exit status, negative for a signal as ``subprocess``
  reports it).

Imports neither torch nor pytest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Self, TypeVar, overload


class WireError(ValueError):
    """A line that is not a message the reader expects; the text says what was wrong with it."""


def _field(data: Mapping[str, Any], name: str, kind: type, message: str) -> Any:
    value = data.get(name)
    # bool is an int to isinstance: a pid or an exit status that is True is not one.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"{message}: {name!r} must be {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True)
class _OneValue:
    """A message of one plain field (an int or a str): written as its dataclass, read back with that field's type
    checked. Each subclass is a frozen dataclass naming its ``NAME``, its ``KIND`` and its one field."""

    NAME: ClassVar[str]
    KIND: ClassVar[type]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        (only,) = fields(cls)
        return cls(_field(data, only.name, cls.KIND, cls.NAME))  # type: ignore[call-arg]  # the subclass's one field


@dataclass(frozen=True)
class Ready(_OneValue):
    """The server has warmed up and listens on its socket."""

    NAME: ClassVar[str] = "ready"
    KIND: ClassVar[type] = int
    pid: int


@dataclass(frozen=True)
class Unsafe(_OneValue):
    """A fork of the server would not be a clean start (CUDA touched while warming up, ...): it exits."""

    NAME: ClassVar[str] = "unsafe"
    KIND: ClassVar[type] = str
    reason: str


@dataclass(frozen=True)
class ForkRequest:
    """Fork a child that becomes ``python -u [-P] -m pytest ARGS`` started in ``cwd`` with ``env``, its output to
    ``log``."""

    NAME: ClassVar[str] = "fork"
    args: tuple[str, ...]
    safe_path: bool
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)
    log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"args": list(self.args), "safe_path": self.safe_path, "cwd": self.cwd, "env": dict(self.env),
                "log": self.log}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ForkRequest:
        args = _field(data, "args", list, cls.NAME)
        env = _field(data, "env", dict, cls.NAME)
        if not all(isinstance(arg, str) for arg in args):
            raise WireError(f"{cls.NAME}: 'args' must be a list of str, got {args!r}")
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in env.items()):
            raise WireError(f"{cls.NAME}: 'env' must map str to str")
        return cls(
            args=tuple(args),
            safe_path=_field(data, "safe_path", bool, cls.NAME),
            cwd=_field(data, "cwd", str, cls.NAME),
            env=dict(env),
            log=_field(data, "log", str, cls.NAME),
        )


@dataclass(frozen=True)
class Forked(_OneValue):
    """The child was forked: its pid."""

    NAME: ClassVar[str] = "forked"
    KIND: ClassVar[type] = int
    pid: int


@dataclass(frozen=True)
class Refused(_OneValue):
    """The child must start fresh instead: what a fork cannot give it."""

    NAME: ClassVar[str] = "refused"
    KIND: ClassVar[type] = str
    reason: str


@dataclass(frozen=True)
class Ended(_OneValue):
    """The forked child ended: its exit status, negative for the signal that ended it."""

    NAME: ClassVar[str] = "ended"
    KIND: ClassVar[type] = int
    returncode: int


Message = Ready | Unsafe | ForkRequest | Forked | Refused | Ended
MESSAGES: dict[str, type[Message]] = {kind.NAME: kind for kind in (Ready, Unsafe, ForkRequest, Forked, Refused, Ended)}
_One = TypeVar("_One", bound=Message)
_Other = TypeVar("_Other", bound=Message)


def encode(message: Message) -> str:
    """One line of the wire."""
    return json.dumps({"message": message.NAME, "data": message.to_dict()}) + "\n"


def _shown(line: str | bytes) -> str:
    """The start of a bad line for its error, which the fork server logs: never an environment's values (a fork
    request's, of a client of another version, may hold a token), so the line is cut where an "env" key starts."""
    text = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
    cut = text.find('"env"')
    return repr(text[:cut][:200] + '"env": (not shown)' if cut >= 0 else text[:200])


@overload
def decode(line: str | bytes, expected: type[_One], /) -> _One: ...
@overload
def decode(line: str | bytes, expected: type[_One], other: type[_Other], /) -> _One | _Other: ...
def decode(line: str | bytes, /, *expected: Any) -> Any:
    """The message ``line`` holds, which must be one of ``expected``; a :class:`WireError` that says what is wrong
    with anything else."""
    shown = _shown(line)
    try:
        record = json.loads(line)
    except ValueError:
        raise WireError(f"not a JSON line: {shown!r}") from None
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        raise WireError(f"not a message ({{'message': NAME, 'data': {{...}}}}): {shown!r}")
    name = record.get("message")
    kind = MESSAGES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise WireError(f"an unknown message {name!r}: {shown!r}")
    if kind not in expected:
        wanted = " or ".join(repr(each.NAME) for each in expected)
        raise WireError(f"a {name!r} message where {wanted} was expected")
    return kind.from_dict(record["data"])
