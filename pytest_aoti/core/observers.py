"""What a debug child plugs into the core's calls. The core reads no environment variable: the child's session reads
its own and builds these at configure time, before torch is imported (this module imports nothing heavy)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.core.compiler import ComparedCall, CompiledModel


class CallCapture(Protocol):
    """Both sides of one compared call, captured for stage numerics (``pytest_aoti.debug.numerics.Capture``)."""

    def package(self) -> contextlib.AbstractContextManager[None]: ...

    def eager(self) -> contextlib.AbstractContextManager[None]: ...

    def explain(self, call: ComparedCall) -> Any: ...


@dataclass(frozen=True)
class CallObservers:
    """``exported`` sees each exported program before it compiles (the repro bundle's node -> source line map: a
    compile can fail, and a device-side assert fire while Inductor autotunes, before any call);
    ``before_run`` records the call before the package runs (the repro bundle: the call may not survive it);
    ``capture`` gives compared call N of ``check_model`` its numerics capture."""

    exported: Callable[[ExportedProgram], None] | None = None
    before_run: Callable[[CompiledModel, Any, Any], None] | None = None
    capture: Callable[[int], CallCapture] | None = None


NO_OBSERVERS = CallObservers()
