"""The supervised session's scheduler with a fake worker node, no subprocess (as pytest-xdist tests its schedulers
with ``MockNode``): pytest's order across a crash, and no test for a replacement once the session must stop."""

from __future__ import annotations

import pytest

from pytest_aoti.debug.in_order import InOrderScheduling

TESTS = [f"test_x.py::test_{n}" for n in range(5)]


class FakeNode:
    """What a scheduler may call on xdist's ``WorkerController``."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, "tests sent after shutdown"
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def _started(scheduler: InOrderScheduling) -> FakeNode:
    """A worker added, collected and scheduled, as DSession does for each new worker."""
    node = FakeNode()
    scheduler.add_node(node)
    scheduler.add_node_collection(node, TESTS)
    assert scheduler.collection_is_completed
    scheduler.schedule()
    return node


def _run(scheduler: InOrderScheduling, node: FakeNode, count: int) -> None:
    for index in node.sent[:count]:
        scheduler.mark_test_complete(node, index)


def test_every_test_goes_to_the_worker_in_order_then_shutdown() -> None:
    scheduler = InOrderScheduling(lambda: False)
    node = _started(scheduler)
    assert node.sent == [0, 1, 2, 3, 4] and node.shutting_down
    assert not scheduler.tests_finished  # the worker has more than its last test to run
    _run(scheduler, node, 4)
    assert scheduler.tests_finished
    scheduler.mark_test_complete(node, 4)
    assert scheduler.remove_node(node) is None  # a worker that ended normally ran nothing it did not report


def test_after_a_crash_the_replacement_runs_the_rest_in_order() -> None:
    scheduler = InOrderScheduling(lambda: False)
    first = _started(scheduler)
    _run(scheduler, first, 1)  # test_0 passed; test_1 crashes the worker
    assert scheduler.remove_node(first) == "test_x.py::test_1"
    assert scheduler.nodes == [] and scheduler.has_pending
    second = _started(scheduler)
    assert second.sent == [2, 3, 4]


def test_a_retried_crash_runs_first_on_the_replacement() -> None:
    """A conftest's ``pytest_handlecrashitem`` may put the crashed test back (``sched.mark_test_pending``)."""
    scheduler = InOrderScheduling(lambda: False)
    first = _started(scheduler)
    crashed = scheduler.remove_node(first)
    assert crashed == "test_x.py::test_0"
    scheduler.mark_test_pending(crashed)
    assert _started(scheduler).sent == [0, 1, 2, 3, 4]


def test_once_the_session_must_stop_a_replacement_gets_nothing() -> None:
    stop = {"now": False}
    scheduler = InOrderScheduling(lambda: stop["now"])
    first = _started(scheduler)
    scheduler.remove_node(first)
    stop["now"] = True  # the crash report reached -x's count (or --sw's stop)
    assert scheduler.tests_finished
    second = _started(scheduler)
    assert second.sent == [] and second.shutting_down


def test_one_worker_at_a_time_and_the_same_collection() -> None:
    scheduler = InOrderScheduling(lambda: False)
    first = _started(scheduler)
    with pytest.raises(ValueError, match="one worker at a time"):
        scheduler.add_node(FakeNode())
    scheduler.remove_node(first)
    with pytest.raises(KeyError):
        scheduler.remove_node(first)
    other = FakeNode()
    scheduler.add_node(other)
    with pytest.raises(pytest.exit.Exception, match=r"collected other tests \(2\) than the first \(5\)"):
        scheduler.add_node_collection(other, TESTS[:2])
