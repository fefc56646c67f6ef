"""A PyTorch Lightning callback that records the trace ``stragglers analyze`` reads.

::

    from stragglers.probe.lightning import StragglersCallback

    trainer = L.Trainer(strategy="ddp", ..., callbacks=[StragglersCallback("runs/pl")])
    trainer.fit(model, loader)
    # rank 0 wrote runs/pl/trace.parquet and runs/pl/meta.yaml

The callback drives a :class:`~stragglers.probe.loop.LoopProbe` (see
:mod:`stragglers.probe.loop` for what each span is) from Lightning's hooks: one training
step per optimizer step (with ``accumulate_grad_batches`` several batches, one micro-batch
each); ``forward-compute`` runs from ``on_train_batch_start`` to ``on_before_backward`` (the
training step with its loss; with a DDP module that broadcasts its buffers before each
forward, from its inner module's forward call, after the broadcast, which is timed as
``params-all-gather``), ``backward-compute`` from there to the last parameter
gradient, and the optimizer span starts at ``on_before_optimizer_step`` (Lightning runs the
optimizer with a closure, so the optimizer's own pre-hook comes before the forward). The
batch is fetched before ``on_train_batch_start``, outside the spans: a rank that loads slowly
starts its step late (the launch delay of its first op), and the others wait for it in the
gradient synchronisation. Its live step records count Lightning's broadcast before each
fetch (every rank waits there for the others) as a wait. Needs
the ``lightning`` package (``pip install 'stragglers[lightning]'``), imported only by this
module.
"""

from __future__ import annotations

from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - the optional extra
    raise ImportError("stragglers.probe.lightning needs the lightning package: "
                      "pip install 'stragglers[lightning]'") from exc

from stragglers.probe.loop import CallbackProbe


class StragglersCallback(CallbackProbe, pl.Callback):
    """Record every rank's trace of ``trainer.fit`` into ``out_dir`` (rank files in
    ``OUT_DIR/probe/``, merged by rank 0 into ``OUT_DIR/trace.parquet`` + ``meta.yaml`` at
    the end of the fit). ``config``, ``trial_name``, ``merge`` and ``force`` as in
    :func:`stragglers.probe.attach`."""

    default_trial = "lightning"

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Start the probe (a collective) and hook the strategy's (DDP-wrapped) module."""
        # Lightning's only collective between two batches (the SIGTERM broadcast) comes
        # before it fetches the next batch, and the step's first span starts after the
        # fetch: recording the broadcast as the step's first op would turn the fetch into a
        # gap inside the step instead of the launch delay of the step's first op. It is a
        # wait of the live step record (a rank that arrives first waits there).
        self.start_probe().install(trainer.strategy.model, forward_hooks=False,
                                   collectives="live")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self.loop is not None:
            self.loop.begin_step()
            if self.loop.times_buffer_sync:  # the forward starts after DDP's broadcast
                self.loop.forward_begin_at_model()
            else:
                self.loop.forward_begin(pl_module.training)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.loop is not None:
            self.loop.forward_end()
            self.loop.backward_begin()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.loop is not None:
            self.loop.optimizer_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # with gradient accumulation the step ends with the batch that ran the optimizer
        if self.loop is not None and self.loop.optimizer_done:
            self.loop.end_step()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """Close the probe (a collective) and merge on rank 0."""
        self.close_probe()
