"""The testbed ring: real jobs to exercise the library, and the faults they can inject.

* :mod:`~stragglers.testbed.job` - the example job: a GPT model with data and pipeline
  parallelism over ``torch.distributed``, probed (``stragglers probe example``);
* :mod:`~stragglers.testbed.faults` - injected stragglers (slow rank, GC pauses, seqlen, hangs);
* :mod:`~stragglers.testbed.toyjob` - a small elastic data-parallel job for the recovery driver.

The testbed imports the library only; the formats it shares with it (the action file
:mod:`stragglers.mitigate.action`, the checkpoint marker :mod:`stragglers.recover.marker`, the
output-folder claim :mod:`stragglers.probe.outdir`) live in the library.
"""
