"""Keep torch's structured-trace records (``torch.__trace``, what ``TORCH_TRACE`` writes for tlparse) out of pytest's
captured logs, leaving every other torch logger and ``TORCH_TRACE`` itself as they are."""

from __future__ import annotations

import logging

TRACE_LOGGER = "torch.__trace"


class _DropTorchTrace(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != TRACE_LOGGER


_DROP_TORCH_TRACE = _DropTorchTrace()


def quiet_torch_trace() -> None:
    """Filter the trace logger's records out of the handlers pytest attached to it.

    The trace logger does not propagate, so pytest attaches its capturing handlers to it directly as well as to the
    root logger; TORCH_TRACE's own handler sits on the trace logger only. A handler found on both is pytest's."""
    trace = logging.Logger.manager.loggerDict.get(TRACE_LOGGER)
    if not isinstance(trace, logging.Logger):
        return  # torch is not imported yet
    root_handlers = set(logging.getLogger().handlers)
    for handler in trace.handlers:
        if handler in root_handlers:
            handler.addFilter(_DROP_TORCH_TRACE)
