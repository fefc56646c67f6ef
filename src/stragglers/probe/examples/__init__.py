"""A real distributed training job to exercise the probes: see :mod:`.job`."""
