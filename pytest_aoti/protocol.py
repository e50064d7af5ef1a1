"""What crosses the process boundary between the session the user started and a rerun child: the environment
variables the parent sets for a child, and the files a child writes for the parent to read. Both sides import these
names from here and nowhere else. Imports neither torch nor pytest.

The parent starts a child with (all but the first two optional):

- ``CHILD_ENV``: which child this is: ``isolate`` (the test run alone) or a debug stage (``kernels``, ``tensors``,
  ``sanitizer``, ``numerics``);
- ``NODEID_ENV`` / ``TEST_PATH_ENV``: the one test to run, and the file that defines it;
- ``REPORT_FILE_ENV``: where the child appends its test reports and warnings (JSON lines);
- ``PHASE_FILE_ENV``: where the compiled-model code appends the phase it is in (export, compile, load, run), so a
  crash can be placed;
- ``HOLD_FILE_ENV`` / ``HOLD_UNTIL_ENV``: a child started early waits for this file (its last environment variables)
  before running the test, and gives up at the epoch time given;
- ``BUNDLE_ENV``: where the failing call records a repro bundle;
- ``NUMERICS_ENV``: where stage numerics captures both sides of every call, and writes ``NUMERICS_FINDING``.
"""

from __future__ import annotations

CHILD_ENV = "PYTEST_AOTI_CHILD"
NODEID_ENV = "PYTEST_AOTI_NODEID"
TEST_PATH_ENV = "PYTEST_AOTI_TEST_PATH"
REPORT_FILE_ENV = "PYTEST_AOTI_REPORT_FILE"
PHASE_FILE_ENV = "PYTEST_AOTI_PHASE_FILE"
HOLD_FILE_ENV = "PYTEST_AOTI_HOLD_FILE"
HOLD_UNTIL_ENV = "PYTEST_AOTI_HOLD_UNTIL"
BUNDLE_ENV = "PYTEST_AOTI_BUNDLE_DIR"
NUMERICS_ENV = "PYTEST_AOTI_NUMERICS_DIR"

NUMERICS_FINDING = "numerics.json"  # in NUMERICS_ENV's dir: pytest_aoti.numerics.Finding as JSON
MINIFY_RESULT = "minify.json"  # in minify's output dir: what python -m pytest_aoti.minify found
