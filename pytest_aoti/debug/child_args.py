"""A child's command line, from the user's own: what writes the user's files or changes scheduling is left out.

A child is the parent's twin (its arguments and invocation directory), but pasted by hand or run by pytest-aoti it
must not rewrite the user's JUnit file or report log, restart xdist, or filter by ``--lf``. The options are removed
from the line (so the printed reproduce line reads as the user's command), and the child also turns them off in its
config (``child_session.neutralize_parent_options``), for what comes from ``PYTEST_ADDOPTS`` or the
ini file's ``addopts``. Pure functions over strings: no pytest, no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# pytest-xdist's ``--dist loadgroup`` appends ``@<group>`` to the node ids of tests marked ``xdist_group``; a child
# is not under xdist, and its node ids lack it. Not inside brackets: ``test[a@b]`` is a parameter id.
_XDIST_GROUP_SUFFIX = re.compile(r"@[^\[\]:@]+$")

# Options followed by a value (``--junitxml=r.xml`` or ``--junitxml r.xml``).
VALUE_OPTIONS = frozenset(
    {
        # report files
        "--junitxml",
        "--junit-xml",
        "--junitprefix",
        "--junit-prefix",
        "--report-log",
        "--html",
        "--json-report-file",
        "--result-log",
        "--resultlog",
        # temp and cache dirs, the layout pins the child gets from its parent
        "--basetemp",
        "--rootdir",
        "-c",
        "--config-file",
        "--inifile",
        # scheduling
        "-n",
        "--numprocesses",
        "--maxprocesses",
        "--dist",
        "--tx",
        "--max-worker-restart",
        "--maxschedchunk",
        "--lfnf",
        "--last-failed-no-failures",
        # output capture: debug stages set their own
        "--capture",
    }
)
# Options that stand alone.
FLAG_OPTIONS = frozenset(
    {
        "--lf",
        "--last-failed",
        "--ff",
        "--failed-first",
        "--nf",
        "--new-first",
        "--sw",
        "--stepwise",
        "--sw-skip",
        "--stepwise-skip",
        "--sw-reset",
        "--stepwise-reset",
        "--cache-clear",
        "--aoti-cache-clear",
        "-d",
        "--distload",
        "-f",
        "--looponfail",
        "--self-contained-html",
        "--json-report",
        "-s",
    }
)


def _attached_short_value(arg: str) -> bool:
    """``-n2``, ``-nauto``, ``-cpytest.ini``: a short option with its value attached."""
    return len(arg) > 2 and arg[:2] in ("-n", "-c") and not arg.startswith("--")


def strip_parent_only(args: Sequence[str]) -> list[str]:
    """``args`` without the options a child must not repeat; positional arguments and every other option stay."""
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        if arg == "--":
            kept.append(arg)
            continue
        name = arg.split("=", 1)[0]
        if name in VALUE_OPTIONS:
            skip_value = "=" not in arg
            continue
        if arg in FLAG_OPTIONS or _attached_short_value(arg):
            continue
        kept.append(arg)
    return kept


def without_xdist_group(nodeid: str) -> str:
    """``nodeid`` as a process outside xdist collects it: without the ``@group`` of ``--dist loadgroup``."""
    return _XDIST_GROUP_SUFFIX.sub("", nodeid)
