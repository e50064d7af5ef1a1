"""The fork server's messages (pytest_aoti/forkserver/wire.py): each record crosses the wire and comes back equal, and
a line that is not a message the reader expects is a WireError that says what was wrong, never a KeyError or a
TypeError from deep inside a reader."""

from __future__ import annotations

import json

import pytest

from pytest_aoti.forkserver import wire
from pytest_aoti.forkserver.wire import Ended, Forked, ForkRequest, Ready, Refused, Unsafe, WireError, decode, encode

EACH_MESSAGE: list[wire.Message] = [
    Ready(4242),
    Unsafe("CUDA was initialised while warming up"),
    ForkRequest(args=("-k", "x", "tests/t.py::t"), safe_path=True, cwd="/w", env={"PATH": "/bin"}, log="/w/log"),
    Forked(4243),
    Refused("PYTHONHASHSEED differs from the fork server's"),
    Ended(-9),
]


@pytest.mark.parametrize("message", EACH_MESSAGE, ids=lambda message: message.NAME)
def test_each_message_comes_back_equal(message: wire.Message) -> None:
    line = encode(message)
    assert line.endswith("\n") and line.count("\n") == 1
    assert decode(line, type(message)) == message
    assert decode(line.encode(), type(message), Ended if not isinstance(message, Ended) else Ready) == message


def test_every_message_is_named_once() -> None:
    assert sorted(wire.MESSAGES) == sorted(message.NAME for message in EACH_MESSAGE)


@pytest.mark.parametrize(
    ("line", "expected", "says"),
    [
        ("", (Ready, Unsafe), "not a JSON line"),
        ('{"ready": 12}\n', (Ready, Unsafe), "not a message"),  # the old wire format: no name
        ('{"message": "hello", "data": {}}\n', (Ready, Unsafe), "an unknown message 'hello'"),
        ('{"message": "ended", "data": {}}\n', (Ended,), "ended: 'returncode' must be int, got None"),
        ('{"message": "ended", "data": {"returncode": "1"}}\n', (Ended,), "'returncode' must be int, got '1'"),
        ('{"message": "forked", "data": {"pid": true}}\n', (Forked, Refused), "'pid' must be int, got True"),
        ('{"message": "forked", "data": {"pid": 3}}\n', (Ended,), "a 'forked' message where 'ended' was expected"),
        (
            '{"message": "fork", "data": {"args": ["-x", 1], "safe_path": false, "cwd": "/", "env": {}, "log": ""}}',
            (ForkRequest,),
            "'args' must be a list of str",
        ),
        (
            '{"message": "fork", "data": {"args": [], "safe_path": false, "cwd": "/", "env": {"A": 1}, "log": ""}}',
            (ForkRequest,),
            "'env' must map str to str",
        ),
        (b"\xff\xfe\n", (ForkRequest,), "not a JSON line"),
    ],
)
def test_a_line_that_is_not_an_expected_message_says_what_is_wrong(
    line: str | bytes, expected: tuple[type[wire.Message], ...], says: str
) -> None:
    with pytest.raises(WireError) as raised:
        decode(line, *expected)
    assert says in str(raised.value)


def test_a_message_is_a_named_record_on_the_wire() -> None:
    """What another version of either side would have to read: the name, and the record's fields under ``data``."""
    assert json.loads(encode(Ended(3))) == {"message": "ended", "data": {"returncode": 3}}
    assert json.loads(encode(EACH_MESSAGE[2]))["data"]["args"] == ["-k", "x", "tests/t.py::t"]


@pytest.mark.parametrize("cut", [None, 90], ids=["whole", "partial"])
def test_a_bad_lines_error_shows_no_environment(cut: int | None) -> None:
    """The server logs a bad request's error: a client of another version (the wire before named messages) sends the
    child's environment, whose values it must not show."""
    env = {"GITHUB_TOKEN": "ghp_s3cret", "PATH": "/bin"}
    old = json.dumps({"args": ["t.py::x"], "safe_path": False, "cwd": "/w", "env": env, "log": ""}) + "\n"
    with pytest.raises(WireError) as raised:
        decode(old[:cut], ForkRequest)
    assert "s3cret" not in str(raised.value) and "GITHUB_TOKEN" not in str(raised.value)
    assert '"cwd": "/w", "env": (not shown)' in str(raised.value)
