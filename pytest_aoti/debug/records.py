"""The JUnit properties the debug rerun writes on a failed test's report (:func:`pytest_aoti.debug.reporting.render`
writes them). The names are public: users' JUnit consumers read them. The features below which the debug rerun sits
(the CI summary, the ``--aoti-html`` page) read them from :data:`PROPERTIES`, never as literals."""

from __future__ import annotations

from pytest_aoti.hookspecs import PropertyRole, ReportProperty, ReportSection

RERUN_OUTCOME_PROPERTY = "aoti_rerun_outcome"
VERDICT_PROPERTY = "aoti_verdict"
SUSPECT_KERNEL_PROPERTY = "aoti_suspect_kernel"
FIRST_NONFINITE_KERNEL_PROPERTY = "aoti_first_nonfinite_kernel"
FIRST_NONFINITE_BUFFER_PROPERTY = "aoti_first_nonfinite_buffer"
SIGNAL_PROPERTY = "aoti_signal"
REPRODUCE_PROPERTY = "aoti_reproduce"
BUNDLE_PROPERTY = "aoti_bundle"
SANITIZER_PROPERTY = "aoti_sanitizer"
MINIFIED_PROPERTY = "aoti_minified"
FIRST_DIVERGENT_KERNEL_PROPERTY = "aoti_first_divergent_kernel"
REPRODUCED_PROPERTY = "aoti_reproduced"
SOURCE_PROPERTY = "aoti_source"

_VERDICTS = ReportSection.VERDICTS
PROPERTIES = (
    ReportProperty(RERUN_OUTCOME_PROPERTY, _VERDICTS),
    ReportProperty(VERDICT_PROPERTY, _VERDICTS, PropertyRole.HEADLINE, column="debug verdict"),
    ReportProperty(SUSPECT_KERNEL_PROPERTY, _VERDICTS),
    ReportProperty(FIRST_NONFINITE_KERNEL_PROPERTY, _VERDICTS),
    ReportProperty(FIRST_NONFINITE_BUFFER_PROPERTY, _VERDICTS),
    ReportProperty(SIGNAL_PROPERTY, _VERDICTS),
    ReportProperty(REPRODUCE_PROPERTY, _VERDICTS, PropertyRole.REPRODUCE),
    ReportProperty(BUNDLE_PROPERTY, _VERDICTS),
    ReportProperty(SANITIZER_PROPERTY, _VERDICTS),
    ReportProperty(MINIFIED_PROPERTY, _VERDICTS),
    ReportProperty(FIRST_DIVERGENT_KERNEL_PROPERTY, _VERDICTS),
    ReportProperty(REPRODUCED_PROPERTY, _VERDICTS),
    ReportProperty(SOURCE_PROPERTY, _VERDICTS),
)
