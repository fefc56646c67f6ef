"""The fleet study: every job of a fleet analysed as a Dask task, one row each, and the
paper's fleet figures (§4-§5, Figs. 3-7 and 11) with root causes against ground truth.

Modules, one job each: :mod:`~stragglers.fleet.discover` (inputs -> job folders),
:mod:`~stragglers.fleet.task` (one job -> one typed :class:`~stragglers.fleet.task.FleetRow`,
keyed by a content hash), :mod:`~stragglers.fleet.rowstore` (finished rows on disk; resume),
:mod:`~stragglers.fleet.execute` (Dask or sequential execution in a bounded window),
:mod:`~stragglers.fleet.parquet` (the fleet table, parquet), :mod:`~stragglers.fleet.stats`
(fleet figures: headline numbers, confusion matrix) and :mod:`~stragglers.fleet.figures`
(HTML + PNG figures).
"""
