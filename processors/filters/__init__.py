"""Reward filters: which finished agent sessions may become training data, and why not."""

from rolltape.processors.filters._config import FILTER_VERSION, FilterConfig
from rolltape.processors.filters._filters import FilterState, observe, outcome

__all__ = ["FILTER_VERSION", "FilterConfig", "FilterState", "observe", "outcome"]
