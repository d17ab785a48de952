"""CSV adapter for the trace port: reads the Alibaba GPU trace's node and pod lists with the stdlib ``csv``."""

from .reader import NODE_COLUMNS, POD_COLUMNS, TIME_COLUMNS, CsvTraceReader, PodTimes

__all__ = ["NODE_COLUMNS", "POD_COLUMNS", "TIME_COLUMNS", "CsvTraceReader", "PodTimes"]
