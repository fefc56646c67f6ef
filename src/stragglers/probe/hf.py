"""A Hugging Face ``transformers`` ``TrainerCallback`` that records the trace ``stragglers
analyze`` reads.

::

    from stragglers.probe.hf import StragglersCallback

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[StragglersCallback("runs/hf")])
    trainer.train()  # under torchrun: rank 0 writes runs/hf/trace.parquet and meta.yaml

The callback drives a :class:`~stragglers.probe.loop.LoopProbe` (see
:mod:`stragglers.probe.loop` for what each span is): a step from ``on_step_begin`` to
``on_step_end`` (one optimizer step; with ``gradient_accumulation_steps`` one micro-batch per
forward), forward hooks on the model the ``Trainer`` was given (the DDP wrapper calls it),
the backward from the gradient of the model's output (its loss) to the last parameter
gradient, the gradient synchronisation (and the ``Trainer``'s gradient clipping) up to the
optimizer step, timed by ``torch.optim`` hooks. The ``Trainer`` fetches the step's batches
before ``on_step_begin``, then all-gathers their token count (``average_tokens_across_devices``,
on by default): every rank waits there for the slowest loader, so that collective is timed
(``params-all-gather``, :mod:`stragglers.probe.prestep`) and a rank that loads slowly shows
as the late start of that op (its launch delay). Needs the ``transformers`` package (``pip
install 'stragglers[hf]'``), imported only by this module.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - the optional extra
    raise ImportError("stragglers.probe.hf needs the transformers package: "
                      "pip install 'stragglers[hf]'") from exc

from stragglers.probe.loop import CallbackProbe


class StragglersCallback(CallbackProbe, TrainerCallback):
    """Record every rank's trace of ``trainer.train()`` into ``out_dir`` (rank files in
    ``OUT_DIR/probe/``, merged by rank 0 into ``OUT_DIR/trace.parquet`` + ``meta.yaml`` when
    training ends). ``config``, ``trial_name``, ``merge`` and ``force`` as in
    :func:`stragglers.probe.attach`."""

    default_trial = "hf"

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        """Start the probe (a collective) and hook the model."""
        if model is None:
            raise ValueError("StragglersCallback: the Trainer passed no model to on_train_begin")
        self.start_probe().install(model)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.loop is not None:
            self.loop.begin_step()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any,
                              **kwargs: Any) -> None:
        if self.loop is not None:
            self.loop.optimizer_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.loop is not None:
            self.loop.end_step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close the probe (a collective) and merge on rank 0."""
        self.close_probe()
