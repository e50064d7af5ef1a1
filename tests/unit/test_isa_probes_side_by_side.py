"""``torch_private.probe_side_by_side``: Inductor's ISA probes, one thread per candidate ISA, so their build and
load subprocesses overlap. Fakes stand for the ISAs (pure orchestration): each one's probe waits at a barrier that
opens only when every probe is running at once, so a serial run fails at the barrier's timeout, however fast the
machine."""

from __future__ import annotations

import threading

import pytest

torch_private = pytest.importorskip("pytest_aoti.core.torch_private")


class FakeIsa:
    def __init__(self, barrier: threading.Barrier, verdict: bool = True, error: Exception | None = None) -> None:
        self.barrier, self.verdict, self.error, self.probed_in = barrier, verdict, error, ""

    def __bool__(self) -> bool:
        self.probed_in = threading.current_thread().name
        self.barrier.wait(timeout=30)
        if self.error is not None:
            raise self.error
        return self.verdict


def test_every_candidate_is_probed_at_the_same_time_in_threads_of_their_own() -> None:
    barrier = threading.Barrier(3)
    isas = [FakeIsa(barrier), FakeIsa(barrier, verdict=False), FakeIsa(barrier)]
    torch_private.probe_side_by_side(isas)
    assert not barrier.broken
    names = {isa.probed_in for isa in isas}
    assert len(names) == 3 and all(name.startswith("pytest-aoti-isa-probe") for name in names), names


def test_a_probe_that_raises_leaves_the_others_and_the_caller_alone() -> None:
    barrier = threading.Barrier(2)
    isas = [FakeIsa(barrier, error=RuntimeError("the build failed")), FakeIsa(barrier)]
    torch_private.probe_side_by_side(isas)  # Inductor's own list meets the error again, as it would have
    assert all(isa.probed_in for isa in isas)


def test_one_candidate_is_left_to_inductor() -> None:
    isa = FakeIsa(threading.Barrier(1))
    torch_private.probe_side_by_side([isa])
    assert isa.probed_in == ""  # valid_vec_isa_list probes it, in the caller's thread
