"""Which profiler event names mean which schema operation (configurable).

An *annotation* is a ``record_function`` range (category ``user_annotation``) on a CPU thread.
Each operation type of the schema has a list of regular expressions; an annotation whose name
matches one of them (``re.search``) is an operation of that type. A ``mb=N`` / ``mb_id=N`` /
``microbatch N`` part of the name gives the microbatch id. ``--annotations FILE`` replaces the
list of the types it names (YAML: ``{optype: [regex, ...]}``; an empty list turns a type off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from stragglers.errors import InputError
from stragglers.inputs import load_yaml
from stragglers.trace import schema

#: Default patterns: our example job's names (the schema's operation types), Megatron-style
#: ``forward_step``/``backward_step`` names, HTA/DDP examples' ``## forward ##`` ranges and
#: PyTorch optimizers' ``Optimizer.step#Adam.step``.
DEFAULT_PATTERNS: dict[str, tuple[str, ...]] = {
    schema.FORWARD_COMPUTE: (r"^forward-compute\b", r"^## forward ##$", r"^forward_step\b"),
    schema.BACKWARD_COMPUTE: (r"^backward-compute\b", r"^## backward ##$",
                              r"^backward_step\b"),
    schema.OPTIMIZER: (r"^optimizer$", r"^Optimizer\.step#"),
} | {t: (rf"^{re.escape(t)}\b",) for t in schema.OPTYPES
     if t not in (schema.FORWARD_COMPUTE, schema.BACKWARD_COMPUTE, schema.OPTIMIZER)}

#: The microbatch id inside an annotation name.
MB_RE = re.compile(r"\b(?:mb|mb_id|microbatch)[=# :_]?(\d+)\b")
#: The step of a ``ProfilerStep#N`` range.
STEP_RE = re.compile(r"^ProfilerStep#(\d{1,18})$")
#: Communication annotations of the process-group backends (``nccl:all_reduce``).
COMM_ANNOTATION_RE = re.compile(r"^(?:nccl|gloo|ucc|mpi|xccl):([A-Za-z_]+)")
#: NCCL kernels, old (``ncclKernel_AllReduce_RING_LL_Sum_float``) and new
#: (``ncclDevKernel_AllGather_RING_LL``, ``ncclDevKernel_SendRecv``) names.
NCCL_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


@dataclass(frozen=True)
class Patterns:
    """Compiled annotation patterns, by operation type."""

    by_type: dict[str, tuple[re.Pattern[str], ...]] = field(default_factory=dict)

    def match(self, name: str) -> str | None:
        """The operation type of an annotation name, or None."""
        for optype, regexes in self.by_type.items():
            for rx in regexes:
                if rx.search(name):
                    return optype
        return None


def compile_patterns(raw: dict[str, tuple[str, ...] | list[str]], source: str) -> Patterns:
    out: dict[str, tuple[re.Pattern[str], ...]] = {}
    for optype, regexes in raw.items():
        compiled = []
        for i, rx in enumerate(regexes):
            if not isinstance(rx, str):
                raise InputError(f"{source}: {optype}[{i}]: expected a regular expression "
                                 f"string, got {type(rx).__name__}")
            try:
                compiled.append(re.compile(rx))
            except re.error as exc:
                raise InputError(f"{source}: {optype}[{i}]: bad regular expression {rx!r} "
                                 f"({exc})") from None
        out[optype] = tuple(compiled)
    return Patterns(out)


def default_patterns() -> Patterns:
    return compile_patterns(dict(DEFAULT_PATTERNS), "<defaults>")


def load_patterns(path: str | Path | None) -> Patterns:
    """Default patterns, with the types named in ``path`` (YAML) replaced."""
    raw: dict[str, tuple[str, ...] | list[str]] = dict(DEFAULT_PATTERNS)
    if path is None:
        return compile_patterns(raw, "<defaults>")
    doc = load_yaml(path, "annotations file")
    if not isinstance(doc, dict):
        raise InputError(f"{path}: the annotations file must map operation types to lists of "
                         "regular expressions")
    for key, value in doc.items():
        if key not in schema.OPTYPE_CODE:
            raise InputError(f"{path}: field {key!r} is not an operation type (known: "
                             f"{', '.join(schema.OPTYPES)})")
        if isinstance(value, str):
            value = [value]
        if value is None:
            value = []
        if not isinstance(value, list):
            raise InputError(f"{path}: field {key!r} must be a list of regular expressions")
        raw[key] = value
    return compile_patterns(raw, str(path))
