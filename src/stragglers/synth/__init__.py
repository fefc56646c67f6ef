"""Synthetic traces produced by the analyzer's own dependency rules."""

from stragglers.synth.generator import SynthSpec, generate, write_synth

__all__ = ["SynthSpec", "generate", "write_synth"]
