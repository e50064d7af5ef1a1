"""Which process this is, decided once at configure time (as pytest-xdist's ``is_xdist_worker`` answers it), and
whether a test uses pytest-aoti.

pytest-aoti runs in six kinds of process: the user's session, an xdist controller and its workers (the crash guard of
plain ``--aoti-debug`` is one supervised worker), an isolated test and a debug stage (children pytest-aoti started, or
their pasted reproduce lines), and the fork server those children are forked from (``pytest_aoti/forkserver``; it runs
no pytest session, so no config ever has that role). Every question about the role asks one of the predicates here,
and only this module reads what decides it: xdist's ``workerinput`` and ``PYTEST_AOTI_CHILD``
(``tests/unit/test_roles.py`` checks it).
"""

from __future__ import annotations

import enum
import os
import sys
import weakref
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_aoti.core.protocol import CHILD_ENV, Stage


class Role(enum.Enum):
    SESSION = "session"  # the user's pytest process, tests run in it
    CONTROLLER = "controller"  # xdist's controller: its workers run the tests
    WORKER = "worker"  # an xdist worker
    ISOLATED = "isolated test"  # a child that runs one test alone (--aoti-isolate, aoti_isolate, a poisoned context)
    DEBUG_STAGE = "debug stage"  # a child that reruns a failed test for a debug stage (or its pasted reproduce line)
    FORK_SERVER = "fork server"  # forks the children; never a pytest session


CHILDREN = frozenset({Role.ISOLATED, Role.DEBUG_STAGE})
role_key = pytest.StashKey["Role"]()
# The fixtures whose tests use pytest-aoti: every builder fixture asks for aoti_device, so a test that uses a
# feature's fixture over it (aoti_benchmark) is one too; aoti_snapshot alone is not.
AOTI_FIXTURES = frozenset({"aoti_compile", "aoti_check", "aoti_device", "aoti_compile_shared"})


# The child pytest-aoti started is one process, and one config in it: a pytest run the child's test starts (pytester
# in-process or in a subprocess, a script's pytest.main()) inherits PYTEST_AOTI_CHILD but is a session of its own.
# The child claims the role at settle: its config here, its pid in the environment its subprocesses inherit.
CHILD_OWNER_ENV = "PYTEST_AOTI_CHILD_PID"
_child_config: weakref.ref[pytest.Config] | None = None


def _inherited_child_marker(config: pytest.Config) -> bool:
    """Whether PYTEST_AOTI_CHILD reached ``config`` from a child it runs inside, rather than naming it."""
    owner = os.environ.get(CHILD_OWNER_ENV)
    if owner is not None and owner != str(os.getpid()):
        return True
    claimed = _child_config() if _child_config is not None else None
    return claimed is not None and claimed is not config


def _decide(config: pytest.Config) -> Role:
    child = os.environ.get(CHILD_ENV)
    if child and not _inherited_child_marker(config):
        return Role.ISOLATED if child == Stage.ISOLATE else Role.DEBUG_STAGE
    if hasattr(config, "workerinput"):
        return Role.WORKER
    # Workers from -n, or from --tx without -n (xdist's own test: a dist mode and transports; -n's become --tx at
    # xdist's pytest_cmdline_main, which an early question precedes).
    option = config.option
    workers = bool(getattr(option, "numprocesses", 0)) or bool(getattr(option, "tx", None))
    distributed = getattr(option, "dist", "no") != "no" and workers
    if distributed and config.pluginmanager.hasplugin("xdist"):
        return Role.CONTROLLER
    return Role.SESSION


def settle(config: pytest.Config) -> Role:
    """Decide this process's role and stash it: plugin.py calls it at configure time, after the crash guard made
    the session one supervised xdist worker where it does (the session is then that worker's controller). The
    questions asked before (at ``pytest_cmdline_main``, by the configure hooks that run before plugin.py's) get
    their answers from the same rules, and none of them tells a session from a controller."""
    global _child_config
    decided = config.stash[role_key] = _decide(config)
    if decided in CHILDREN:
        _child_config = weakref.ref(config)
        os.environ[CHILD_OWNER_ENV] = str(os.getpid())
    return decided


def release(config: pytest.Config) -> None:
    """At the end of ``config``'s session: a child's claim on its role ends with it (plugin.py's unconfigure)."""
    global _child_config
    if _child_config is not None and _child_config() is config:
        _child_config = None
        if os.environ.get(CHILD_OWNER_ENV) == str(os.getpid()):
            del os.environ[CHILD_OWNER_ENV]


def role(config: pytest.Config) -> Role:
    stashed = config.stash.get(role_key, None)
    return stashed if stashed is not None else _decide(config)


def is_child(config: pytest.Config) -> bool:
    """A child pytest-aoti started (an isolated test or a debug stage), or a pasted reproduce line of one."""
    return role(config) in CHILDREN


def is_isolated_test(config: pytest.Config) -> bool:
    """A child that runs one test alone: the test's own run, which reports as the test would in the parent."""
    return role(config) is Role.ISOLATED


def is_debug_stage(config: pytest.Config) -> bool:
    """A debug stage, or a pasted reproduce line of one: it writes nothing into the user's tree (no golden outputs,
    no benchmark baselines)."""
    return role(config) is Role.DEBUG_STAGE


def is_worker(config: pytest.Config) -> bool:
    return role(config) is Role.WORKER


def writes_user_reports(config: pytest.Config) -> bool:
    """Whether this process writes what the user asked for at the end of the run (the pages, JSON, step summary,
    goldens' summary): the session or the controller, never a worker or a child."""
    return role(config) in (Role.SESSION, Role.CONTROLLER)


def started_as_pytest(config: pytest.Config) -> bool:
    """Whether this config is the session of the process pytest was started as (``python -m pytest ARGS`` or the
    ``pytest`` script), not a pytest run inside a test or a script (``pytest.main()``, pytester in-process)."""
    return list(config.invocation_params.args) == sys.argv[1:]


def worker_input(config: pytest.Config) -> Mapping[str, Any]:
    """What the xdist controller handed this worker (xdist's ``workerinput``: ``workerid``, ``workercount``,
    ``testrunuid``, ``mainargv``, and what :func:`hand_to_worker` added); empty in any other process."""
    given = getattr(config, "workerinput", None)
    return given if isinstance(given, dict) else {}


def worker_id(config: pytest.Config) -> str | None:
    """``gwN`` in xdist worker N; None in any other process. Not ``PYTEST_XDIST_WORKER``: a pytest started from
    inside a worker (pytester, a script) inherits that variable without being a worker."""
    workerid = worker_input(config).get("workerid")
    return workerid if isinstance(workerid, str) else None


def hand_to_worker(node: Any, key: str, value: object) -> None:
    """On the xdist controller (``pytest_configure_node``): give the worker ``node`` starts ``value`` under ``key``,
    which it reads with :func:`worker_input`. A plain value: xdist's wire (execnet) takes no subclass of one."""
    node.workerinput[key] = value


def uses_aoti(item: pytest.Item) -> bool:
    """Whether ``item`` uses pytest-aoti: one of :data:`AOTI_FIXTURES` is in its fixture closure. The one answer to
    it: isolation, the debug rerun, the setup report's device (which launches the fork server) all ask here."""
    return bool(AOTI_FIXTURES & set(getattr(item, "fixturenames", ())))
