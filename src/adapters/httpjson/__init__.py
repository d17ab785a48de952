"""HTTP JSON adapter: reads JSON views other components serve over HTTP (stdlib ``urllib``, as the scrape adapter)."""

from .scheduler_view import HttpSchedulerView, view_url

__all__ = ["HttpSchedulerView", "view_url"]
