"""Resource limits on sizes taken from input, checked before anything is allocated.

Every command that sizes arrays, loops or files from its input checks the size against one
of these limits first and refuses beyond it with one line that names the input, the size,
the limit and how to raise it. Each limit can be overridden by an environment variable
``STRAGGLERS_MAX_<NAME>`` (for example ``STRAGGLERS_MAX_WORKERS=100000``); commands with a
natural option for it (``watch --max-ranks``) take that too.
docs/reference/errors-and-limits.md lists the limits with the memory each unit costs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from stragglers.errors import InputError


class LimitError(InputError):
    """An input asks for more than a documented limit allows."""


@dataclass(frozen=True)
class Limit:
    """One limit: its default and what it bounds."""

    name: str
    default: int
    what: str

    @property
    def env(self) -> str:
        return f"STRAGGLERS_MAX_{self.name.upper()}"


#: The limits, by name. Defaults are chosen so that the largest input allowed fits in a few
#: GiB of memory on the machine kinds the project targets.
LIMITS: dict[str, Limit] = {lim.name: lim for lim in (
    Limit("workers", 1_048_576, "workers (dp_size x pp_size) of one job"),
    Limit("trace_rows", 200_000_000, "rows (ops) of one trace"),
    Limit("table_cells", 400_000_000, "cells (op identities x DP ranks x steps) of one trace"),
    Limit("text_bytes", 64 * 2**20, "bytes of a text input read whole (a times or lengths "
          "file, a truth file, a result.json)"),
    Limit("yaml_bytes", 2**20, "bytes of a YAML (or JSON) metadata or configuration file"),
    Limit("yaml_nodes", 100_000, "values of a YAML file (counted while it is read, and once "
          "its aliases are expanded)"),
    Limit("nesting", 64, "nesting depth of a JSON or YAML value"),
    Limit("int_digits", 30, "digits of an integer in JSON, YAML or pickle input"),
    Limit("shared_values", 100_000, "values a tuple of a pickle stands for once its shared "
          "(memoised) parts are expanded: what hashing it visits"),
    Limit("trace_string_bytes", 1024, "bytes of one text value of a trace (optype, host), "
          "bounding a parquet string column by its row count before it is read"),
    Limit("synth_ops", 20_000_000, "ops (dp x pp x ops per worker-step x steps) of one "
          "synthetic trace"),
    # Plausibility bounds on trace values (seconds), not sizes: beyond them a value is a unit
    # or recording error, and sums of such values could overflow float32.
    Limit("op_seconds", 86_400, "seconds of one op's duration"),
    Limit("timestamp_seconds", 10_000_000_000, "seconds of a start_ts (absolute value; "
          "epoch seconds are below 2e9)"),
    Limit("record_bytes", 1 << 20, "bytes of one JSON-lines record (detect, watch)"),
    Limit("detect_records", 10_000_000, "records of one input of a detect command"),
    Limit("watch_ranks", 16_384, "distinct ranks followed by watch"),
    Limit("warmup_iters", 10_000_000, "iterations of the minimum warm-up (watch --warmup)"),
    Limit("matrix_ranks", 8_192, "ranks of a delay matrix (8 bytes x ranks^2 each)"),
    Limit("topology_ranks", 16_384, "ranks of a hang topology or a validation plan"),
    Limit("fr_dump_bytes", 256 * 2**20, "bytes of one flight-recorder dump"),
    Limit("fr_entries", 1_000_000, "entries (calls, groups) of one flight-recorder dump"),
    Limit("validate_ranks", 64, "local processes of `stragglers validate`"),
    Limit("validate_bytes", 1 << 30, "bytes of one validation transfer or GEMM matrix"),
    Limit("period_window", 16_384, "calls in one period-estimation window"),
    Limit("call_kinds", 4_096, "distinct (type, size) call signatures of one rank"),
    Limit("format_probe_bytes", 16 * 2**20, "bytes read from the start of a watch input to "
          "tell its format (--format auto)"),
    Limit("megatron_json_bytes", 256 * 2**20, "bytes of a Megatron iteration-time JSON file "
          "(read whole by watch)"),
    Limit("hog_processes", 64, "CPU-hog processes of `probe verdict-eval --hog`"),
    Limit("eval_series", 40_000, "series of a detect-eval corpus (400 at --scale 1)"),
    Limit("upload_bytes", 2 * 2**30, "bytes of one session upload to `stragglers serve` "
          "(trace and metadata)"),
    Limit("mitigate_groups", 1_048_576, "DP groups of a micro-batch assignment "
          "(`mitigate microbatch`)"),
    Limit("mitigate_events", 10_000_000, "events of one `mitigate plan` input"),
    Limit("live_steps", 10_000_000, "steps (the step number of a probe record followed by "
          "`mitigate run`; arrays indexed by step, 17 bytes per step and rank)"),
    Limit("seqlen_sequences", 10_000_000, "sequence lengths of one `mitigate fit-cost` or "
          "`rebalance` input"),
    Limit("kineto_bytes", 16 * 2**30, "bytes of one uncompressed profiler trace (import kineto)"),
    Limit("kineto_events", 100_000_000, "events of one profiler trace (import kineto)"),
    Limit("kineto_files", 65_536, "rank files of one profiler trace folder (import kineto)"),
    Limit("kineto_event_bytes", 8 * 2**20, "bytes of one event of a profiler trace, or of "
          "its keys before or after the events array (import kineto)"),
    Limit("fleet_jobs", 1_000_000, "jobs of a fleet study or a synthetic fleet"),
    Limit("records_bytes", 8 * 2**20, "bytes of one batch of records posted to "
          "`stragglers serve`"),
    Limit("records_batch", 50_000, "records of one batch posted to `stragglers serve`"),
    Limit("queued_sessions", 1_000, "sessions waiting in the analysis queue of "
          "`stragglers serve` (a full queue answers 503 with Retry-After)"),
)}


def limit(name: str) -> int:
    """The current value of limit ``name``: its environment override, else its default."""
    lim = LIMITS[name]
    raw = os.environ.get(lim.env)
    if raw is None or raw.strip() == "":
        return lim.default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"environment variable {lim.env}: expected a positive integer, "
                         f"got {raw!r}") from None
    if value < 1:
        raise InputError(f"environment variable {lim.env}: expected a positive integer, "
                         f"got {value}")
    return value


def check_limit(name: str, value: int, source: str) -> None:
    """Raise :class:`LimitError` when ``value`` exceeds limit ``name``.

    ``source`` says where the size comes from (a file and field, or an option), so that the
    message reads ``SOURCE: 2,000,000 workers (dp_size x pp_size) of one job exceed the
    limit of 1,048,576 (set STRAGGLERS_MAX_WORKERS to raise it)``.
    """
    cap = limit(name)
    if value > cap:
        lim = LIMITS[name]
        raise LimitError(f"{source}: {value:,} {lim.what} exceed the limit of {cap:,} "
                         f"(set {lim.env} to raise it)")
