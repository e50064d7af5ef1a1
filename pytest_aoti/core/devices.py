"""Which device a process tests on: ``--aoti-device``, and under pytest-xdist each worker's share of the GPUs.

``auto`` and ``cuda`` (no index) give xdist worker ``gwN`` the GPU ``cuda:(N mod visible GPUs)``: on a multi-GPU
host ``-n 8`` spreads eight workers over the GPUs instead of stacking them on ``cuda:0``, and one worker's illegal
memory access poisons only its own GPU's tests. ``cuda:K`` pins every worker to K. A rerun or isolation child gets
its parent's device on its command line (``--aoti-device=cuda:K``), so its reproduce line names the GPU.

The choice is a pure function (:func:`choose_device`); only :func:`visible_cuda_devices` imports torch, and only on
a machine with an NVIDIA driver, so a CPU-only session never imports torch to learn it has no GPU.
"""

from __future__ import annotations

import re
from pathlib import Path

SPREAD_SETTINGS = ("auto", "cuda")  # settings that let each xdist worker take its own GPU
_WORKER = re.compile(r"gw(\d+)")
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def xdist_worker_index(workerid: str | None) -> int | None:
    """N of the xdist worker ``gwN`` (``roles.worker_id``); None outside xdist (the controller, a
    plain run, a child). Not ``PYTEST_XDIST_WORKER``: a pytest started from inside a worker (pytester, a script)
    inherits that variable without being a worker."""
    match = _WORKER.fullmatch(workerid or "")
    return int(match.group(1)) if match else None


def choose_device(setting: str, worker: int | None, cuda_count: int) -> str:
    """The device for ``--aoti-device`` ``setting`` in xdist worker ``worker`` (None: not a worker) on a machine with
    ``cuda_count`` visible GPUs. ``auto`` falls back to ``cpu`` without GPUs; ``cuda`` stays ``cuda`` then, and the
    fixture skips its tests."""
    if setting not in SPREAD_SETTINGS:
        return setting
    if cuda_count <= 0:
        return "cpu" if setting == "auto" else setting
    return f"cuda:{(worker or 0) % cuda_count}"


def worker_map(setting: str, workers: int, cuda_count: int) -> list[str]:
    """``gw0→cuda:0`` … for the header of an xdist run of ``workers`` workers."""
    return [f"gw{index}→{choose_device(setting, index, cuda_count)}" for index in range(workers)]


def nvidia_driver_present() -> bool:
    """Whether this machine has an NVIDIA driver loaded, read without importing torch (Linux; elsewhere: True, so
    torch is asked)."""
    if not Path("/proc/driver").exists():
        return True
    return _NVIDIA_GPUS.is_dir()


def visible_cuda_devices() -> int:
    """How many GPUs this process may use (``CUDA_VISIBLE_DEVICES`` applies); 0 without importing torch on a machine
    with no NVIDIA driver."""
    if not nvidia_driver_present():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def assigned_device(setting: str, worker: str | None) -> str | None:
    """The device xdist worker ``worker``'s share gives it, when the setting spreads workers and there is a GPU;
    None otherwise (the setting applies as given). What a child of this worker is pinned to."""
    index = xdist_worker_index(worker)
    if index is None or setting not in SPREAD_SETTINGS:
        return None
    count = visible_cuda_devices()
    return choose_device(setting, index, count) if count else None
