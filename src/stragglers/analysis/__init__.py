"""What-if analyses: metrics, verdict, result document, custom what-if."""

from stragglers.analysis.runner import Analysis, analyze_files, analyze_table, load_table

__all__ = ["Analysis", "analyze_files", "analyze_table", "load_table"]
