"""A synthetic fleet: N jobs with documented size, shape and step distributions and root
causes mixed in chosen proportions, each with its ground truth (``truth.json``).

Every job is one :class:`~stragglers.synth.generator.SynthSpec` drawn by :func:`draw_specs`
from one seeded generator (job ``i`` of a seed is the same whatever N is: each job draws
from its own child generator), then written by
:func:`~stragglers.synth.generator.write_synth` into ``OUT/job-NNNNN/``.

Distributions (all independent, per job):

* **size**: workers = dp x pp = 2^k with k uniform over the integers of
  [log2 ``min_workers``, log2 ``max_workers``] (default 16..1,024: log-uniform, as job
  sizes in a cluster span orders of magnitude);
* **pipeline**: pp uniform over {2, 4, 8} (at most workers / 2, so that dp >= 2); dp =
  workers / pp; vpp = 2 with probability 0.2 (interleaved), else 1; tp 1;
* **microbatches**: uniform over {pp, 2 pp} (the 1F1B minimum and twice it);
* **steps**: uniform over [``min_steps``, ``max_steps``] (default 6..10: the paper samples
  a few steps per job, §4.2);
* **noise**: every op duration x log-normal(0, 0.02).

Root causes (``--mix``, proportions normalised to 1; default :data:`DEFAULT_MIX`), each with
its strength drawn uniformly from the range in :data:`STRENGTHS` (tuned on seed 1 so that
the verdict finds the injected cause; evaluated on other seeds):

* ``worker``: one random worker's compute x factor;
* ``last_stage``: the last stage's compute x factor;
* ``sequence_length``: microbatch sequence lengths log-normal(0, sigma), quadratic cost;
* ``gc``: uncoordinated GC inside forward compute, recorded in ``gc_s`` (as a probe's GC
  callbacks record it): each worker-step pauses with probability p for a pause drawn
  relative to the job's ideal step time, p = 2 / workers (about two pauses a step);
* ``communication``: one random P2P link (dp d, stage s <-> s + 1) transfers x factor;
* ``none``: noise only;
* ``combination``: a primary cause (one of the five above, uniformly) at full strength and a
  different secondary one at :data:`SECONDARY_SCALE` of its strength (factors:
  1 + (f - 1) x scale).

``truth.json`` keeps the generator's truth (``spec``, ``expected``) and adds ``primary`` (the
cause a verdict should name: the injected cause, or the primary of a combination),
``kind`` (the mix entry) and ``strengths`` (cause -> the factor, sigma or pause drawn).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.atomic import StagedDir, check_out_dir
from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.synth.generator import BASE_DURATIONS, SynthSpec, check_spec, write_synth
from stragglers.trace import schema

#: Single causes a fleet job can carry (verdict cause names).
SINGLE_CAUSES: tuple[str, ...] = ("worker", "last_stage", "sequence_length", "gc",
                                  "communication")
#: Entries of the mix: the single causes, ``none`` and ``combination``.
MIX_KINDS: tuple[str, ...] = (*SINGLE_CAUSES, "none", "combination")
#: Default proportions (about 40% of jobs straggle, as in the paper's fleet: §4.1).
DEFAULT_MIX: Mapping[str, float] = {
    "none": 0.55, "worker": 0.08, "last_stage": 0.10, "sequence_length": 0.07, "gc": 0.07,
    "communication": 0.05, "combination": 0.08}
#: Strength ranges (uniform): factor for worker / last_stage / communication, sigma for
#: sequence_length, pause in ideal step times for gc.
STRENGTHS: Mapping[str, tuple[float, float]] = {
    "worker": (1.8, 2.6), "last_stage": (1.8, 2.4), "sequence_length": (0.12, 0.2),
    "gc": (0.7, 1.2), "communication": (100.0, 200.0)}
#: Strength of a combination's secondary cause relative to its full strength (sigma of
#: sequence lengths acts through a quadratic cost: a smaller share of it).
SECONDARY_SCALE: Mapping[str, float] = {
    "worker": 0.25, "last_stage": 0.12, "sequence_length": 0.2, "gc": 0.25,
    "communication": 0.25}
JITTER = 0.02


@dataclass(frozen=True)
class FleetShape:
    """The size and step distributions of a synthetic fleet (see the module docstring)."""

    min_workers: int = 16
    max_workers: int = 1024
    min_steps: int = 6
    max_steps: int = 10

    def check(self) -> None:
        for name in ("min_workers", "max_workers"):
            v = getattr(self, name)
            if v < 4 or v & (v - 1):
                raise InputError(f"--fleet-workers: {v} must be a power of two >= 4")
        if self.min_workers > self.max_workers:
            raise InputError(f"--fleet-workers: {self.min_workers} > {self.max_workers}")
        check_limit("workers", self.max_workers, "--fleet-workers")
        if not 2 <= self.min_steps <= self.max_steps:
            raise InputError(f"--fleet-steps: need 2 <= MIN <= MAX, got {self.min_steps}-"
                             f"{self.max_steps}")


@dataclass(frozen=True)
class FleetJob:
    """One drawn job: its spec and its truth beyond the generator's."""

    name: str
    spec: SynthSpec
    kind: str
    primary: str
    strengths: dict[str, float] = field(default_factory=dict)


def parse_mix(text: str) -> dict[str, float]:
    """``cause=weight,...`` (kinds of :data:`MIX_KINDS`; weights >= 0, normalised; kinds not
    named get 0)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        if "=" not in part:
            raise InputError(f"--mix {text!r}: expected CAUSE=WEIGHT,..., got {part!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in MIX_KINDS:
            raise InputError(f"--mix: unknown cause {k!r} (one of {', '.join(MIX_KINDS)})")
        if k in mix:
            raise InputError(f"--mix: {k} is given twice")
        try:
            w = float(v)
        except ValueError:
            raise InputError(f"--mix {k}={v!r}: expected a number") from None
        if not (math.isfinite(w) and w >= 0):
            raise InputError(f"--mix {k}={v}: expected a finite weight >= 0")
        mix[k] = w
    total = sum(mix.values())
    if total <= 0:
        raise InputError(f"--mix {text!r}: the weights sum to 0")
    return {k: mix.get(k, 0.0) / total for k in MIX_KINDS}


def _ideal_step(spec: SynthSpec) -> float:
    """Ideal step time of a 1F1B job, roughly: (microbatches + pp - 1) forward+backward
    slots plus the end-of-step ops."""
    fb = BASE_DURATIONS[schema.FORWARD_COMPUTE] + BASE_DURATIONS[schema.BACKWARD_COMPUTE]
    tail = sum(BASE_DURATIONS[t] for t in (schema.GRADS_REDUCE_SCATTER, schema.CLIP,
                                            schema.OPTIMIZER, schema.PARAMS_ALL_GATHER))
    return (spec.microbatches + spec.pp - 1) * fb + tail


def _inject(spec: SynthSpec, cause: str, scale: float, rng: np.random.Generator
            ) -> float:
    """Inject ``cause`` into ``spec`` at ``scale`` of a strength drawn from
    :data:`STRENGTHS`; returns the strength used."""
    lo, hi = STRENGTHS[cause]
    s = float(rng.uniform(lo, hi))
    if cause in ("worker", "last_stage", "communication"):
        s = 1.0 + (s - 1.0) * scale
    else:
        s *= scale
    if cause == "worker":
        spec.slow_workers = [(int(rng.integers(spec.dp)), int(rng.integers(spec.pp)), s)]
    elif cause == "last_stage":
        spec.heavy_last_stage = s
    elif cause == "sequence_length":
        spec.seq_len_sigma = s
    elif cause == "gc":
        workers = spec.dp * spec.pp
        spec.gc_prob = min(1.0, 2.0 / workers)
        spec.gc_pause = s * _ideal_step(spec)
        spec.gc_in_compute = True
        spec.gc_recorded = True
    elif cause == "communication":
        spec.slow_links = [(int(rng.integers(spec.dp)), int(rng.integers(spec.pp - 1)), s)]
    else:  # pragma: no cover - MIX_KINDS is closed
        raise ValueError(cause)
    return s


def draw_job(index: int, seed: int, shape: FleetShape, mix: Mapping[str, float]) -> FleetJob:
    """Job ``index`` of the fleet of ``seed`` (its own child generator)."""
    rng = np.random.default_rng([seed, index])
    k = int(rng.integers(int(math.log2(shape.min_workers)),
                         int(math.log2(shape.max_workers)) + 1))
    workers = 2**k
    pp = int(rng.choice([p for p in (2, 4, 8) if p <= workers // 2]))
    dp = workers // pp
    vpp = 2 if rng.random() < 0.2 else 1
    microbatches = int(rng.choice([pp, 2 * pp]))
    steps = int(rng.integers(shape.min_steps, shape.max_steps + 1))
    name = f"job-{index:05d}"
    spec = SynthSpec(dp=dp, pp=pp, vpp=vpp, microbatches=microbatches, steps=steps,
                     seed=int(rng.integers(2**31)), jitter=JITTER, name=name)
    kinds = list(mix)
    kind = str(rng.choice(kinds, p=np.array([mix[x] for x in kinds])))
    strengths: dict[str, float] = {}
    if kind == "none":
        primary = "none"
    elif kind == "combination":
        pair = rng.choice(len(SINGLE_CAUSES), size=2, replace=False)
        primary, secondary = SINGLE_CAUSES[pair[0]], SINGLE_CAUSES[pair[1]]
        strengths[primary] = _inject(spec, primary, 1.0, rng)
        strengths[secondary] = _inject(spec, secondary, SECONDARY_SCALE[secondary], rng)
    else:
        primary = kind
        strengths[kind] = _inject(spec, kind, 1.0, rng)
    check_spec(spec)
    return FleetJob(name=name, spec=spec, kind=kind, primary=primary, strengths=strengths)


def draw_specs(n: int, seed: int, shape: FleetShape | None = None,
               mix: Mapping[str, float] | None = None) -> list[FleetJob]:
    """The ``n`` jobs of the fleet of ``seed`` (checked against the limits first)."""
    shape = shape or FleetShape()
    shape.check()
    check_limit("fleet_jobs", n, "--fleet")
    return [draw_job(i, seed, shape, mix or DEFAULT_MIX) for i in range(n)]


def write_fleet(n: int, out: str | Path, seed: int, shape: FleetShape | None = None,
                mix: Mapping[str, float] | None = None) -> list[Path]:
    """Write the fleet: ``OUT/job-NNNNN/{trace.parquet, meta.yaml, truth.json}`` and
    ``OUT/fleet.json`` (seed, shape, mix, per-job kind and primary cause), last."""
    shape = shape or FleetShape()
    mix = dict(mix or DEFAULT_MIX)
    check_out_dir(out)
    jobs = draw_specs(n, seed, shape, mix)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    folders = []
    for job in jobs:
        folder = root / job.name
        write_synth(job.spec, folder, extra_truth={
            "primary": job.primary, "kind": job.kind, "strengths": job.strengths})
        folders.append(folder)
    manifest: dict[str, Any] = {
        "seed": seed, "n": n, "shape": vars(shape), "mix": mix, "strengths": dict(STRENGTHS),
        "secondary_scale": dict(SECONDARY_SCALE), "jitter": JITTER,
        "jobs": [{"name": j.name, "kind": j.kind, "primary": j.primary,
                  "workers": j.spec.dp * j.spec.pp} for j in jobs]}
    with StagedDir(root) as stage:
        stage.path("fleet.json").write_text(json.dumps(manifest, indent=1))
    return folders
