"""Which process this is, decided once at configure time (as pytest-xdist's ``is_xdist_worker`` answers it).

pytest-aoti runs in five kinds of process: the user's session, an xdist controller and its workers (the crash guard
of plain ``--aoti-debug`` is one supervised worker), a child pytest-aoti started for a debug stage or an isolated
test, and the fork server those children are forked from (``pytest_aoti/forkserver``; it runs no pytest session, so
no config ever has that role). Every "is this the user's session?" asks here.
"""

from __future__ import annotations

import enum
import os
import sys

import pytest

from pytest_aoti.core.protocol import CHILD_ENV


class Role(enum.Enum):
    SESSION = "session"  # the user's pytest process, tests run in it
    CONTROLLER = "controller"  # xdist's controller: its workers run the tests
    WORKER = "worker"  # an xdist worker
    CHILD = "child"  # a debug stage or isolated test pytest-aoti started (or its pasted reproduce line)
    FORK_SERVER = "fork server"  # forks the children; never a pytest session


role_key = pytest.StashKey["Role"]()


def decide(config: pytest.Config) -> Role:
    """This process's role; plugin.py stashes it at configure time, after the crash guard made the session one
    supervised xdist worker where it does."""
    if os.environ.get(CHILD_ENV):
        return Role.CHILD
    if hasattr(config, "workerinput"):
        return Role.WORKER
    distributed = getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "numprocesses", 0))
    if distributed and config.pluginmanager.hasplugin("xdist"):
        return Role.CONTROLLER
    return Role.SESSION


def role(config: pytest.Config) -> Role:
    stashed = config.stash.get(role_key, None)
    return stashed if stashed is not None else decide(config)


def started_as_pytest(config: pytest.Config) -> bool:
    """Whether this config is the session of the process pytest was started as (``python -m pytest ARGS`` or the
    ``pytest`` script), not a pytest run inside a test or a script (``pytest.main()``, pytester in-process)."""
    return list(config.invocation_params.args) == sys.argv[1:]


def writes_user_reports(config: pytest.Config) -> bool:
    """Whether this process writes what the user asked for at the end of the run (the pages, JSON, step summary,
    goldens' summary): the session or the controller, never a worker or a child."""
    return role(config) in (Role.SESSION, Role.CONTROLLER)
