"""File adapter for the simulation report port: ``summary.json``, ``curves.csv`` and ``failures.csv``."""

from .writer import (
    CURVES_FILE,
    FAILURES_FILE,
    SUMMARY_FILE,
    SUMMARY_KEYS,
    ReportFiles,
    curves_header,
    failures_header,
    summary_row,
)

__all__ = [
    "CURVES_FILE",
    "FAILURES_FILE",
    "SUMMARY_FILE",
    "SUMMARY_KEYS",
    "ReportFiles",
    "curves_header",
    "failures_header",
    "summary_row",
]
