"""tqdm adapter for the progress port."""

from .bar import TqdmProgress

__all__ = ["TqdmProgress"]
