"""The xdist scheduler of the session pytest-aoti runs as one supervised worker (``--aoti-debug`` without ``-n``).

It implements pytest-xdist's scheduler protocol (``xdist.scheduler.protocol.Scheduling``, chosen through the
documented ``pytest_xdist_make_scheduler`` hook) so that the run is pytest's run with crashes survived:

- every test goes to the one worker in pytest's order, and after a crash the tests the worker had not run go to its
  replacement in that same order (xdist's load scheduler appends them after the tests it had not sent yet);
- once the session must stop (``-x``/``--maxfail``, ``--sw``: the controller's session counts crash reports too), a
  replacement worker gets no test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


class InOrderScheduling:
    """One worker at a time, the tests in collection order. ``should_stop``: whether the controller's session was
    told to stop (its ``shouldfail``/``shouldstop``)."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        self.node: Any = None
        self.collection: list[str] | None = None
        self.unsent: list[int] = []  # indices into the collection, in order
        self.sent: list[int] = []  # sent to the node and not completed: the first is the one it runs

    @property
    def nodes(self) -> list[Any]:
        return [self.node] if self.node is not None else []

    @property
    def collection_is_completed(self) -> bool:
        return self.collection is not None

    @property
    def tests_finished(self) -> bool:
        if self.collection is None:
            return False
        # The worker runs its last test once told to shut down (it needs the next item to tear the last one down).
        return self.should_stop() or (not self.unsent and len(self.sent) < 2)

    @property
    def has_pending(self) -> bool:
        return bool(self.unsent or self.sent)

    def add_node(self, node: Any) -> None:
        if self.node is not None:
            raise ValueError(f"one worker at a time: {node} added while {self.node} runs")
        self.node = node

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self.collection is None:
            self.collection = list(collection)
            self.unsent = list(range(len(collection)))
        elif list(collection) != self.collection:
            pytest.exit(
                "pytest-aoti stopped the run: the worker that replaced a crashed one collected other tests "
                f"({len(collection)}) than the first ({len(self.collection)}): collection is not deterministic",
                returncode=pytest.ExitCode.INTERRUPTED,
            )

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.sent.remove(item_index)

    def mark_test_pending(self, item: str) -> None:
        """Run ``item`` again next (a ``pytest_handlecrashitem`` that retries the crashed test)."""
        assert self.collection is not None
        self.unsent.insert(0, self.collection.index(item))
        self.schedule()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError("pytest-aoti's one supervised worker never has tests stolen")

    def remove_node(self, node: Any) -> str | None:
        """The node ended: the test it was running (None if none), its other tests first in line for the next."""
        if node is not self.node:
            raise KeyError(node)
        self.node = None
        pending, self.sent = self.sent, []
        if not pending:
            return None
        assert self.collection is not None
        self.unsent[:0] = pending[1:]
        return self.collection[pending[0]]

    def schedule(self) -> None:
        """Send the worker every test not run yet, in order, then shutdown (it ends after the last one)."""
        if self.node is None or self.collection is None:
            return
        if not self.should_stop() and self.unsent:
            self.node.send_runtest_some(self.unsent)
            self.sent += self.unsent
            self.unsent = []
        self.node.shutdown()
