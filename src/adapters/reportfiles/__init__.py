"""File adapter for the simulation report port: ``summary.json`` and ``curves.csv``."""

from .writer import CURVES_FILE, SUMMARY_FILE, SUMMARY_KEYS, ReportFiles, curves_header, summary_row

__all__ = ["CURVES_FILE", "SUMMARY_FILE", "SUMMARY_KEYS", "ReportFiles", "curves_header", "summary_row"]
