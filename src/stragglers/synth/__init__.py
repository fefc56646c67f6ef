"""Synthetic traces produced by the analyzer's own dependency rules."""

from stragglers.synth.generator import SynthJob, SynthSpec, generate, synthesize, write_synth

__all__ = ["SynthJob", "SynthSpec", "generate", "synthesize", "write_synth"]
