"""stragglers: find, explain and fix stragglers in distributed training jobs."""

__version__ = "0.1.0"
