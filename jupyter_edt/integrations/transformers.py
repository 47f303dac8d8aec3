"""Hugging Face ``Trainer`` programs as jupyter-edt restart jobs.

::

    from jupyter_edt.integrations.transformers import prepare_trainer

    trainer = prepare_trainer(Trainer(model, args, train_dataset=train, eval_dataset=test))
    trainer.train()
    trainer.save_model()  # runs only once training is over, not at a restart

Why each piece:

- The service resizes a restart job by sending every worker SIGTERM and starting them all again
  at the new size. Dying there would lose the steps since the last checkpoint, so `EDTCallback`
  turns SIGTERM into a request that the workers agree on at an optimizer step's end (one
  all-reduce per step: the signal reaches them at slightly different times, and a worker that
  saved alone at another step would resume apart from the others). At that step the Trainer
  writes its own ``checkpoint-<step>`` (model, optimizer, scheduler, RNG, trainer state), and
  the process exits with status 0 from inside ``train()``, so that the code after it (a final
  ``save_model``, an evaluation) runs only when training has really ended.
- A callback cannot choose what ``train()`` resumes from, hence `prepare_trainer`: it makes
  ``train()`` resume from the newest complete checkpoint when called without
  ``resume_from_checkpoint``. The Trainer then fast-forwards its data to that step, at the new
  size too: accelerate deals a seeded order of batches round-robin to the workers, so a step
  covers the same samples whether two workers take one batch each or one takes two.
- The global batch (samples per optimizer step) must not depend on the worker count, or the
  result would depend on the allocation history. `prepare_trainer` sets
  ``gradient_accumulation_steps`` so that per-device batch x workers x accumulation is the
  job's effective batch (``EDT_EFFECTIVE_BATCH_SIZE``), or the one the program had at its first
  start. The Trainer reads the argument when ``train()`` starts (its Accelerator accumulates
  nothing itself), so changing it after ``__init__`` takes effect.
- Steps (``global_step`` counted from 0: the service takes ``global_step + 1`` as steps done),
  loss and learning rate as the Trainer logs them, epochs with their evaluation (``eval_*`` as
  ``val_*``) become the job's metric events, in the runtime Trainer's format, so the loss chart,
  sidebar and widgets show them. A ``checkpoint`` event (``reason`` "restart") says at which
  step the job stopped, and ``resumed`` where it took up again.

Checkpoints go to ``$RESULT_DIR/checkpoints/checkpoint-<step>`` when ``output_dir`` was left at
its default; a program that names its ``output_dir`` keeps it (and resumes from there). Outside
a jupyter-edt job (no ``EDT_LOG_DIR``) both are inert, and the program runs as under plain
torchrun or in one process.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..runtime.worker import StopForRestart
from ._common import (
    RESTART,
    Job,
    Reporter,
    StopRequest,
    any_worker,
    destroy_process_group_at_exit,
    gradient_accumulation,
    newest_checkpoint,
    val_metrics,
)

__all__ = ["EDTCallback", "prepare_trainer"]

# TrainingArguments' output_dir when the program names none.
DEFAULT_OUTPUT_DIR = "trainer_output"
# what Trainer.evaluate reports besides the model's quality
_EVAL_SPEED = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "eval_epoch")


class EDTCallback(TrainerCallback):
    """Reports to the job and checkpoints when asked to stop (see the module's docstring)."""

    def __init__(self) -> None:
        self.job = Job.from_env()
        self.resumed_from: str | None = None  # told by prepare_trainer's train()
        self._stop = StopRequest()
        self._events: Reporter | None = None
        self._stopping = False  # the workers agreed to stop
        self._exit_on_save = False  # at the next checkpoint (not one inside an epoch's end)
        self._t0: float | None = None
        self._lr: float | None = None
        self._samples = 0
        self._steps_per_epoch: int | None = None
        self._step: dict[str, Any] | None = None  # the last step's record, until its loss is logged
        self._epoch: dict[str, Any] | None = None  # an ended epoch's, until its evaluation
        self._val: dict[str, float] = {}

    # -- training ------------------------------------------------------------------------------
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.job is None:
            return
        self._stop.install()
        destroy_process_group_at_exit()
        self._events = self.job.events(args.process_index, state.is_world_process_zero)
        batch, world = args.train_batch_size, args.world_size
        accumulation = args.gradient_accumulation_steps
        self._samples = batch * world * accumulation
        loader = kw.get("train_dataloader")
        try:
            self._steps_per_epoch = math.ceil(len(loader) / accumulation)  # type: ignore[arg-type]
        except TypeError:  # no loader, or an iterable one
            self._steps_per_epoch = None
        self._events.emit(
            "train_begin",
            epoch=self._epoch_index(state),
            global_step=state.global_step,
            epochs=math.ceil(state.num_train_epochs or args.num_train_epochs),
            steps_per_epoch=self._steps_per_epoch,
            max_steps=state.max_steps,
            effective_batch_size=self._samples,
            micro_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            world_size=world,
            device=str(args.device),
        )
        if state.global_step > 0:
            self._events.emit("resumed", path=self.resumed_from, global_step=state.global_step)

    def on_step_begin(self, *_: Any, **__: Any) -> None:
        self._flush_epoch()

    def on_optimizer_step(self, *_: Any, optimizer: Any = None, **__: Any) -> None:
        if optimizer is not None and optimizer.param_groups:
            self._lr = float(optimizer.param_groups[0]["lr"])  # the rate this step used

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        if self.job is None:
            return control
        self._flush_step()
        stop = any_worker(self._stop.requested)  # every worker, every step: they agree
        # a step's time runs from the previous step's end (the Trainer reads a step's batches
        # before on_step_begin); a run's first step, which also starts it, has none
        now = time.monotonic()
        elapsed = now - self._t0 if self._t0 is not None else None
        self._t0 = now
        step = state.global_step - 1
        epoch = self._epoch_index(state)
        self._step = {
            "epoch": epoch,
            "step": step - epoch * self._steps_per_epoch if self._steps_per_epoch else step,
            "global_step": step,
            "lr": self._lr,
            "world_size": args.world_size,
            "samples": self._samples,
            "step_s": elapsed,
            "samples_per_s": self._samples / elapsed if elapsed else None,
        }
        if stop:
            self._stopping = True
            control.should_log = True  # with this step's loss
            # the Trainer's own checkpoint, then on_save exits; at an epoch's last step, after
            # the epoch's end and its evaluation (on_epoch_end), so that they are not lost
            if not float(state.epoch or 0.0).is_integer():
                control.should_save = self._exit_on_save = True
        if not control.should_log:
            self._flush_step()
        return control

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        if self._step is not None and logs and "loss" in logs:
            self._step["loss"] = float(logs["loss"])
            if "learning_rate" in logs:
                self._step["lr"] = float(logs["learning_rate"])
            if "grad_norm" in logs and logs["grad_norm"] is not None:
                self._step["grad_norm"] = float(logs["grad_norm"])
            self._flush_step()

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        if self._events is None:
            return
        values = val_metrics(
            {k: v for k, v in (metrics or {}).items() if k not in _EVAL_SPEED}, ("eval_",)
        )
        self._val.update(values)
        self._events.emit("evaluate", global_step=state.global_step, **values)
        self._flush_epoch()

    def on_epoch_begin(self, *_: Any, **__: Any) -> None:
        self._flush_epoch()

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> TrainerControl:
        if self._events is None:
            return control
        if self._stopping:
            control.should_save = self._exit_on_save = True  # agreed at its last step
        self._flush_step()
        # the evaluation at an epoch's end comes after this hook: the record waits for it
        self._epoch = {"epoch": self._epoch_index(state), "world_size": args.world_size}
        strategy = getattr(args, "eval_strategy", None) or getattr(
            args, "evaluation_strategy", "no"
        )
        if getattr(strategy, "value", strategy) == "no":
            self._flush_epoch()
        return control

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if not self._exit_on_save:
            return
        self._flush_step()
        self._flush_epoch()
        if self._events is not None:
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self._events.emit(
                "checkpoint", path=str(path), reason=RESTART, global_step=state.global_step
            )
        self._end()
        # every worker has written its part: end here, so nothing after train() runs
        raise StopForRestart

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self._events is None:
            return
        self._flush_step()
        self._flush_epoch()
        self._events.emit("train_end", global_step=state.global_step)
        self._end()

    # -- internals -----------------------------------------------------------------------------
    def _flush_step(self) -> None:
        if self._step is not None and self._events is not None:
            self._events.emit("step", **self._step)
        self._step = None

    def _flush_epoch(self) -> None:
        if self._epoch is not None and self._events is not None:
            self._events.emit("epoch", **self._epoch, **self._val)
        if self._epoch is not None:
            self._val = {}
        self._epoch = None

    def _end(self) -> None:
        self._stop.uninstall()
        if self._events is not None:
            self._events.close()
            self._events = None

    @staticmethod
    def _epoch_index(state: TrainerState) -> int:
        """The epoch (from 0) the last step belongs to: the Trainer's ``state.epoch`` is
        fractional, reaching n at the end of epoch n - 1."""
        return max(0, math.ceil(round(state.epoch or 0.0, 9)) - 1)


def prepare_trainer(trainer: Trainer) -> Trainer:
    """Give `trainer` an `EDTCallback` (unless it has one), and in a jupyter-edt job: its
    checkpoints under ``$RESULT_DIR/checkpoints`` (when ``output_dir`` is the default), the
    accumulation that keeps the job's global batch, and a ``train()`` that resumes from the
    newest checkpoint by default. Returns `trainer`; preparing it again changes nothing.

    Raises ValueError when the effective batch does not divide into whole per-device batches
    on this many workers."""
    callback = next(
        (cb for cb in trainer.callback_handler.callbacks if isinstance(cb, EDTCallback)), None
    )
    if callback is None:
        callback = EDTCallback()
        trainer.add_callback(callback)
    job = callback.job
    if job is None or getattr(trainer, "_edt_prepared", False):
        return trainer
    args = trainer.args
    if args.output_dir == DEFAULT_OUTPUT_DIR and job.checkpoint_dir is not None:
        args.output_dir = str(job.checkpoint_dir)
    args.gradient_accumulation_steps = gradient_accumulation(
        job,
        args.train_batch_size,
        args.world_size,
        args.gradient_accumulation_steps,
        writer=args.process_index == 0,
    )
    trainer.train = _resuming(trainer.train, trainer, callback)  # type: ignore[method-assign]
    trainer._edt_prepared = True  # type: ignore[attr-defined]
    return trainer


def _resuming(train: Callable[..., Any], trainer: Trainer, callback: EDTCallback) -> Any:
    @functools.wraps(train)
    def resuming_train(
        resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        if resume_from_checkpoint is None:
            newest = newest_checkpoint(trainer.args.output_dir)
            resume_from_checkpoint = str(newest) if newest is not None else None
        if isinstance(resume_from_checkpoint, str):
            callback.resumed_from = resume_from_checkpoint
        return train(resume_from_checkpoint, *args, **kwargs)

    return resuming_train
