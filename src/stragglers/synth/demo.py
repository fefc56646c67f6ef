"""``stragglers demo``: a synthetic job with known stragglers, analysed, its outputs written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stragglers.analysis import analyze_files
from stragglers.analysis.result import AnalysisResult
from stragglers.synth.generator import SynthJob, SynthSpec, synthesize

#: The demo job, as :func:`write_demo` generates it.
SHAPE = "dp 4 x pp 4, 8 microbatches, 12 steps"
INJECTED = "a slow worker (dp 1, stage 1, x1.8) and a heavy last stage (x1.25)"


@dataclass(frozen=True)
class Demo:
    """The generated job and its analysis (with the output files written)."""

    job: SynthJob
    result: AnalysisResult

    def generated(self) -> str:
        """What was generated, in one line."""
        return f"generated {self.job.files['trace']} ({SHAPE}) with {INJECTED}"


def write_demo(out: str | Path) -> Demo:
    """Generate the demo job into ``out/input``, analyse it and write the analysis's outputs
    (result.json, heatmaps, timelines, report.html) into ``out``."""
    spec = SynthSpec(dp=4, pp=4, microbatches=8, steps=12, jitter=0.01, seed=7, name="demo",
                     slow_workers=[(1, 1, 1.8)], heavy_last_stage=1.25)
    job = synthesize(spec, Path(out) / "input")
    return Demo(job, analyze_files(job.files["trace"], job.files["meta"], out=out))
