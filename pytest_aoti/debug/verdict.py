"""The public record of a failed test's debug verdict: what ``pytest_aoti_verdict`` hands to conftests and plugins.

It is the verdict rendered once (:func:`pytest_aoti.debug.reporting.render`): the report section, the JUnit
properties and the terminal and Markdown summaries show these same strings. Frozen; every field is documented
here and is public API. (The debug pipeline's own ``Verdict``, which the stages fill in field by field, is not.)

Example, a conftest that files each verdict::

    def pytest_aoti_verdict(config, nodeid, verdict):
        if verdict.reproduced and verdict.suspect_kernel:
            tracker.file(nodeid, verdict.headline, verdict.reproduce)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PublicVerdict:
    """One failed test's debug verdict.

    - ``nodeid``: the test's node id.
    - ``failure_kind``: the test's own kind of failure as pytest-aoti classified it (``mismatch``,
      ``output_nonfinite``, ``compile``, … , ``crash``), or None where none is known.
    - ``headline``: the verdict in one line (JUnit ``aoti_verdict``, the ``aoti`` summary's line).
    - ``text``: the report section ``aoti debug rerun``, whole: the headline, each stage, the logs' trimmed tails.
    - ``rerun_outcome``: how the rerun the verdict describes ended (``crashed with SIGSEGV``, ``failed: …``), or
      ``not rerun``.
    - ``not_rerun``: why the test was not rerun at all, or None when it was.
    - ``reproduced``: whether any rerun failed as the test did; ``reproduction``: ``consistent (2 of 2 reruns)``,
      ``flaky (1 of 3 reruns)``, ``did not reproduce (0 of 3 reruns)``, or None without a rerun; ``flaky``: some
      reruns failed and some passed.
    - ``suspect_kernel``: the kernel that never finished, else the last one that completed (None for a crash while
      no kernel ran); ``first_nonfinite_kernel``: the kernel that wrote the first buffer holding NaN/Inf
      (``model input`` when an input held it), and ``first_nonfinite_buffer`` that buffer (or input);
      ``first_divergent_kernel``: stage numerics' first kernel that differs from eager (``none`` when it compared
      and none did).
    - ``source_line``: the user's line the verdict points at, the one its headline leads with (``kernel: at
      model.py:42 in forward: …``).
    - ``signal``: the signal that ended the rerun (``SIGSEGV``), or None.
    - ``reproduce``: a shell line that reruns the first rerun by hand ("" without a rerun).
    - ``bundle``: the repro bundle's directory (``python repro.py`` in it), or None.
    - ``properties``: the JUnit properties written for the verdict, in order.
    """

    nodeid: str
    failure_kind: str | None
    headline: str
    text: str
    rerun_outcome: str
    not_rerun: str | None
    reproduced: bool
    reproduction: str | None
    flaky: bool
    suspect_kernel: str | None
    first_nonfinite_kernel: str | None
    first_nonfinite_buffer: str | None
    first_divergent_kernel: str | None
    source_line: str | None
    signal: str | None
    reproduce: str
    bundle: Path | None
    properties: tuple[tuple[str, str], ...]
