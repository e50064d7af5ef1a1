"""The JUnit properties the benchmark writes on a test's report. The names are public: users' JUnit consumers read
them. Other features (the CI summary, the ``--aoti-html`` page) get them through the hook
``pytest_aoti_report_properties``, never as literals."""

from __future__ import annotations

from pytest_aoti.hookspecs import PropertyRole, ReportProperty, ReportSection

LATENCY_PROPERTY = "aoti_latency_ms"
LATENCY_IQR_PROPERTY = "aoti_latency_iqr_ms"
RATIO_PROPERTY = "aoti_vs_baseline"  # the ratio to the baseline, or the baseline's verdict where none was judged
SPEEDUP_PROPERTY = "aoti_speedup_vs_eager"
LOAD_PROPERTY = "aoti_load_ms"
MEMORY_PROPERTY = "aoti_memory"
RECORD_PROPERTY = "aoti_benchmark"  # one benchmark's whole record as JSON, for the summary table and the JSON file

_BENCHMARKS = ReportSection.BENCHMARKS
# A test's first (unnamed) benchmark writes the plain names; each further call writes ``<name> (<benchmark>)``.
PROPERTIES = (
    ReportProperty(LATENCY_PROPERTY, _BENCHMARKS, column="latency (ms)", per_call=True),
    ReportProperty(LATENCY_IQR_PROPERTY, _BENCHMARKS, per_call=True),
    ReportProperty(RATIO_PROPERTY, _BENCHMARKS, column="vs baseline", per_call=True),
    ReportProperty(SPEEDUP_PROPERTY, _BENCHMARKS, column="vs eager", per_call=True),
    ReportProperty(LOAD_PROPERTY, _BENCHMARKS, column="load (ms)", per_call=True),
    ReportProperty(MEMORY_PROPERTY, _BENCHMARKS, column="memory", per_call=True),
    ReportProperty(RECORD_PROPERTY, _BENCHMARKS, PropertyRole.RECORD),
)
