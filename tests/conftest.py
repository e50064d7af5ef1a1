from __future__ import annotations

import contextlib
import getpass
import importlib.metadata
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests import tiers

# This suite starts hundreds of Python processes (xdist workers, inner pytest runs, debug children, fork servers).
# Where the environment sets PYTHONDONTWRITEBYTECODE (some CI images and containers do, this project's among them),
# each one compiles pytest-aoti, the test modules and every plugin pytest rewrites (all of Hypothesis) from source
# again: about 1 CPU-s a process, and 9 s of a 66 s unit tier on 2 cores. The suite writes bytecode, as Python does by
# default; no test's outcome depends on it. (tests/test_docs_examples.py sets it again for the runs it starts.)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

MODELS_SOURCE = (Path(__file__).parent / "aoti_models.py").read_text()


def plugin_args() -> list[str]:
    """``-p pytest_aoti.plugin`` where the package is importable but not installed (the GPU machine)."""
    installed = any(ep.value == "pytest_aoti.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One package cache for all xdist workers of a run (beside their base temps): identical models compile once
    (debug builds too: they key on the debug environment); the cache's file lock makes concurrent workers wait for
    the first compile."""
    cache = tmp_path_factory.getbasetemp().parent / "aoti-shared-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return cache


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Keep the torch modules a test imported. The ``pytester`` fixture removes at teardown every module first
    imported during the test, but torch keeps registries in modules it had imported before (dynamo's backends):
    re-importing a removed one fails later compiles in this worker ("duplicate name: eager")."""
    torch_modules = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "torch"}
    try:
        return (yield)
    finally:
        for name, module in torch_modules.items():
            sys.modules.setdefault(name, module)


RunPytest = Callable[..., pytest.RunResult]


class ForkServer:
    """The client side of ``tests/forkserver.py``: one server per xdist worker of this suite, started on first use."""

    def __init__(self) -> None:
        self._server: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self.unavailable: str | None = None  # why runs start fresh instead (threads after imports, a GPU machine)

    def usable(self) -> bool:
        if self._server is None and self.unavailable is None:
            self._server = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                cwd=Path(__file__).parent.parent,
            )
            hello = self._answer(timeout=600)
            if "ready" not in hello:
                self.unavailable = str(hello["unsafe"])
        return self.unavailable is None

    def runpytest(self, pytester: pytest.Pytester, *args: str, timeout: float) -> pytest.RunResult:
        """What ``pytester.runpytest_subprocess`` does, forked: ``python -m pytest ARGS`` from the cwd with this
        process's environment, a ``--basetemp`` of its own, the cwd on PYTHONPATH, stdin closed."""
        basetemp = tempfile.mkdtemp(prefix="runpytest-", dir=pytester.path)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
        out, err = pytester.path / "stdout", pytester.path / "stderr"
        started = time.monotonic()
        ret = self._run([f"--basetemp={basetemp}", *args], Path.cwd(), env, out, err, timeout)
        outlines, errlines = out.read_text().splitlines(), err.read_text().splitlines()
        print("\n".join(outlines))
        print("\n".join(errlines), file=sys.stderr)
        code: int | pytest.ExitCode = ret
        with contextlib.suppress(ValueError):
            code = pytest.ExitCode(ret)
        return pytest.RunResult(code, outlines, errlines, time.monotonic() - started)

    def _run(self, args: Sequence[str], cwd: Path, env: dict[str, str], out: Path, err: Path, timeout: float) -> int:
        """``python -m pytest ARGS`` from ``cwd`` with ``env``, its output in ``out`` and ``err``: its exit status."""
        assert self._server is not None and self._server.stdin is not None
        request = {"args": list(args), "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        self._server.stdin.write(json.dumps(request).encode() + b"\n")
        pid = int(self._answer(timeout=600)["pid"])
        try:
            return int(self._answer(timeout)["returncode"])
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._answer(timeout=600)
            raise pytest.Pytester.TimeoutExpired(f"{timeout} second timeout expired running pytest {args}") from None

    def _answer(self, timeout: float) -> dict[str, object]:
        """The server's next JSON line (read unbuffered, so that ``select`` sees what is left to read)."""
        assert self._server is not None and self._server.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if not select.select([self._server.stdout], [], [], max(deadline - time.monotonic(), 0.0))[0]:
                raise TimeoutError
            chunk = os.read(self._server.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError(f"the fork server ended (exit status {self._server.wait()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, object] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._server is not None and self._server.stdin is not None:
            self._server.stdin.close()
            self._server.wait(timeout=60)


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


@pytest.fixture
def run_pytest(
    pytester: pytest.Pytester, shared_cache: Path, monkeypatch: pytest.MonkeyPatch, fork_server: ForkServer
) -> RunPytest:
    """Run pytest as a user would (from ``cwd``, default the pytester dir), with the shared cache; the test models
    are in the pytester dir as ``aoti_models.py``. The run is a process of its own, forked from a server that has
    imported torch already (``tests/forkserver.py``), with what ``pytester.runpytest_subprocess`` gives a run: a
    ``--basetemp`` of its own, the cwd on PYTHONPATH, stdin closed. ``fresh=True`` starts a new interpreter instead,
    for what the server's imports would change (which modules a run imports).

    The run and every process it starts load no Hypothesis plugin unless ``hypothesis=True``, as for a user without
    Hypothesis installed: its plugin imports all of Hypothesis in each pytest process's terminal summary (~1.3 CPU-s
    in every debug stage, isolated test and xdist worker). The scenarios with Hypothesis tests ask for it."""
    pytester.makepyfile(aoti_models=MODELS_SOURCE)

    def run(
        *args: str,
        cache: Path | None = shared_cache,
        cwd: Path | None = None,
        fresh: bool = False,
        hypothesis: bool = False,
    ) -> pytest.RunResult:
        cache_args = [f"--aoti-cache-dir={cache}"] if cache is not None else []
        all_args = [*plugin_args(), "-p", "no:cacheprovider", *cache_args, *args]
        with monkeypatch.context() as patch:
            if cwd is not None:
                patch.chdir(cwd)
            if not hypothesis:
                addopts = os.environ.get("PYTEST_ADDOPTS", "")
                patch.setenv("PYTEST_ADDOPTS", f"{addopts} -p no:hypothesispytest".strip())
            if fresh or os.environ.get("AOTI_TESTS_FRESH_RUNS") == "1" or not fork_server.usable():
                return pytester.runpytest_subprocess(*all_args, timeout=900)
            return fork_server.runpytest(pytester, *all_args, timeout=900)

    return run


def failure_section(result: pytest.RunResult, test: str) -> str:
    """The failure section of one user test in a pytest run's output."""
    text = result.stdout.str()
    start = text.index(f"_ {test} _")
    end = text.find("\n____", start + 1)
    return text[start:] if end == -1 else text[start:end]


def junit_cases(path: Path) -> dict[str, dict[str, object]]:
    """Each ``<testcase>`` of a JUnit file by name: its outcome tags and properties. Asserts every name occurs once."""
    cases: dict[str, dict[str, object]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        assert name not in cases, f"{name} appears twice in {path}"
        cases[name] = {
            "outcomes": sorted(child.tag for child in case if child.tag in ("failure", "error", "skipped")),
            "properties": {p.get("name"): p.get("value") for p in case.iter("property")},
        }
    return cases


def report_log_failures(path: Path) -> Counter[str]:
    """How many times pytest-reportlog's file reports each test failed in setup or call (every line must parse)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return Counter(
        r["nodeid"]
        for r in records
        if r.get("$report_type") == "TestReport" and r["when"] in ("call", "setup") and r["outcome"] == "failed"
    )


@pytest.fixture
def watched_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TMPDIR for the pytest runs of one test, holding only a link to Inductor's warm per-user cache: what
    else is in it afterwards was left behind."""
    tmp = tmp_path_factory.mktemp("watched-tmp")
    inductor_cache = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    inductor_cache.mkdir(exist_ok=True)
    (tmp / inductor_cache.name).symlink_to(inductor_cache)
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def left_behind(tmp: Path) -> list[str]:
    return sorted(entry.name for entry in tmp.iterdir() if not entry.name.startswith("torchinductor_"))


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty tmpfs mounted read-only: root's permission bits allow everything, the mount does not."""
    mount_point = tmp_path / "read-only"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mount_point)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--aoti-suite-record-durations",
        action="store_true",
        help="this suite's own: write the seconds of each test that passed into tests/durations.json (merged with "
        "what it holds), which sets the `slow` mark and the order of work (tests/README.md)",
    )


DURATIONS = pytest.StashKey[dict[str, float]]()


class DurationsRecorder:
    """Adds up each test's setup, call and teardown seconds (on the xdist controller: the workers' reports reach it)
    and merges them into the record as each test ends, so a run cut short keeps what it measured. A test that failed
    or was skipped leaves its entry as it was."""

    def __init__(self, path: Path = tiers.DURATIONS_FILE) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}
        self.not_passed: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        seconds = self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if not report.passed:
            self.not_passed.add(report.nodeid)
        if report.when == "teardown" and report.nodeid not in self.not_passed:
            recorded = tiers.load_durations(self.path)
            tiers.write_durations(tiers.merged_durations(recorded, {report.nodeid: seconds}), self.path)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[DURATIONS] = tiers.load_durations()
    if config.getoption("--aoti-suite-record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationsRecorder(), "aoti-suite-durations-recorder")


def pytest_itemcollected(item: pytest.Item) -> None:
    """The tier marks from the test's place (a test added to a file gets its file's tier), ``slow`` from its recorded
    time: so ``-m`` selects by them (tests/README.md)."""
    marks = tiers.tier_marks(item.path)
    for mark in marks:
        item.add_marker(mark)
    if marks and tiers.is_slow(item.nodeid, item.config.stash[DURATIONS]):  # the unit tier is quick by its place
        item.add_marker("slow")


def _seconds(item: pytest.Item) -> float:
    if item.get_closest_marker("skip") is not None:
        return 0.0  # tests/gpu without a GPU
    return tiers.expected_seconds(item.nodeid, tiers.tier_marks(item.path), item.config.stash[DURATIONS])


def _first_split(count: int, workers: int) -> list[int]:
    """How many of ``count`` tests each worker gets in worksteal's first split (each the rest over those left)."""
    sizes = []
    for left in range(workers, 0, -1):
        sizes.append((count - sum(sizes)) // left)
    return sizes


@pytest.hookimpl(trylast=True)  # after tests/gpu/conftest.py marks its tests skipped on a machine without a GPU
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests for xdist's ``--dist=worksteal`` (pyproject.toml). Its first split hands each worker a run of
    consecutive tests, and a worker that runs out steals the end of another's queue. So each worker's run starts with
    its share of the long tests, longest first by their recorded seconds (tests/durations.json; each goes to the run
    with the fewest seconds so far), and ends with quick tests: what is stolen and what runs last is short, and the
    workers end together."""
    if not hasattr(config, "workerinput"):
        return  # not an xdist worker (whose collection the controller schedules): pytest's own order
    sizes = _first_split(len(items), int(config.workerinput.get("workercount", 1)))
    runs: list[list[pytest.Item]] = [[] for _ in sizes]
    seconds = [0.0 for _ in sizes]
    quick: list[pytest.Item] = []
    for item in sorted(items, key=_seconds, reverse=True):  # stable: quick tests keep pytest's order
        if _seconds(item) < 1:
            quick.append(item)
            continue
        lightest = min(range(len(runs)), key=lambda run: seconds[run])
        runs[lightest].append(item)
        seconds[lightest] += _seconds(item)
    for run, size in zip(runs, sizes, strict=True):
        fill = max(0, size - len(run))
        run.extend(quick[:fill])
        del quick[:fill]
    items[:] = [item for run in runs for item in run] + quick
