"""The JUnit properties the golden outputs write on a test's report. The names are public: users' JUnit consumers
read them. Other features (the CI summary, the ``--aoti-html`` page) get them through the hook
``pytest_aoti_report_properties``, never as literals."""

from __future__ import annotations

from pytest_aoti.hookspecs import ReportProperty, ReportSection

SNAPSHOT_PROPERTY = "aoti_snapshot"  # each golden's name and outcome: ``name: matched; other: written``
SNAPSHOT_FILE_PROPERTY = "aoti_snapshot_file"

PROPERTIES = (
    ReportProperty(SNAPSHOT_PROPERTY, ReportSection.GOLDENS, column="goldens"),
    ReportProperty(SNAPSHOT_FILE_PROPERTY, ReportSection.GOLDENS),
)
