"""Hang localisation: the rank everybody waits for, from what the ranks left behind.

* :mod:`~stragglers.hang.last_op` - from the last operation of every rank on a
  ``dp x pp x tp`` topology;
* :mod:`~stragglers.hang.flight_recorder` - reading PyTorch NCCL/gloo flight-recorder dumps
  (a restricted unpickler: plain containers and scalars only);
* :mod:`~stragglers.hang.fr_hang` - localisation from those dumps, any process groups;
* :mod:`~stragglers.hang.heartbeats` - the ranks' heartbeat files read back, and the hang
  evidence of heartbeats and dumps together (which ranks to blame).

It imports the log readers (:mod:`stragglers.logs`) and no series detection
(:mod:`stragglers.detect`); :mod:`stragglers.recover` acts on its diagnoses.
"""
