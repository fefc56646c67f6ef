"""Robust training (MegaScale §4.1, C4D): a driver that launches and watches the ranks of a
job, detects a hang or a crashed rank, localises the culprit, excludes it and restarts the job
from its latest checkpoint.

* :mod:`~stragglers.recover.heartbeat` - the client API a job calls (step, current call,
  status), written by a background thread so that a live rank keeps beating while it waits;
* :mod:`~stragglers.recover.driver` - the driver behind ``stragglers run``: launch, watch,
  localise, exclude, restart;
* :mod:`~stragglers.recover.guard` - the node guard behind ``stragglers guard``, one per node
  beside ``torchrun``: watch every rank, localise, take the culprit's node out of the
  rendezvous, record what it cost;
* :mod:`~stragglers.recover.blame` - who failed first in a crash (exit times, statuses, exit
  codes, stale heartbeats);
* :mod:`~stragglers.recover.attempt` - the states of one attempt and the transitions allowed;
* :mod:`~stragglers.recover.incidents` - the incidents and the driver's result, as JSON;
* :mod:`~stragglers.recover.marker` - the checkpoint marker a restarted job resumes at;
* :mod:`~stragglers.testbed.toyjob` - a small elastic data-parallel training job over gloo
  with checkpoints and hang/crash injections, for the tests of the elastic mode (the incident
  benchmark and the fixed-size tests run the example job, whose injections live in
  :mod:`stragglers.testbed.faults`).
"""
