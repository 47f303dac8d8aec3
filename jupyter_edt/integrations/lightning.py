"""Lightning (``lightning.pytorch``) programs as jupyter-edt restart jobs.

::

    import lightning.pytorch as pl
    from jupyter_edt.integrations.lightning import prepare_trainer

    trainer = prepare_trainer(pl.Trainer(strategy="ddp", devices=local_world_size, ...))
    trainer.fit(model)
    trainer.save_checkpoint("final.ckpt")  # runs only once training is over, not at a restart

Why each piece:

- The service resizes a restart job by sending every worker SIGTERM and starting them all again
  at the new size. `EDTCallback` turns SIGTERM into a request the workers agree on at an
  optimizer step's end (one reduction per step, over the strategy, which also carries the
  step's loss, so the loss reported is the mean over all workers), writes
  ``checkpoint-<step>.ckpt`` there with ``Trainer.save_checkpoint`` (loops, optimizers,
  schedulers, callbacks) and ends the process with Lightning's ``SIGTERMException`` (a
  ``SystemExit``: status 0; ``on_exception`` hooks see it, nothing after ``fit()`` runs),
  which a job's worker takes for ``StopForRestart``: it ends at once.
- Lightning's own SIGTERM handling is not fit for this: its handler runs a collective
  (``broadcast``) from inside the signal handler, on whichever rank the signal reached,
  while the other ranks are elsewhere, and it stops at the next batch without a checkpoint. So
  once Lightning has installed it (``fit`` does, before ``on_train_start``) the callback puts its
  own in its place for the run, calling the handler that was there before Lightning's; Lightning
  puts the original back at its teardown.
- A callback cannot choose what ``fit()`` resumes from, hence `prepare_trainer`: ``fit()``
  called without ``ckpt_path`` resumes from the newest checkpoint. Lightning restores its loops,
  but neither at another accumulation (its batch counters count per-device batches) nor the data
  (a plain ``DataLoader`` restarts its epoch): the callback moves the counters to this size and
  skips the batches the interrupted epoch had consumed. With a ``DistributedSampler`` a step then
  covers the same samples whether two workers take one batch each or one takes two.
- The global batch must not depend on the worker count: `prepare_trainer` makes the callback
  set ``accumulate_grad_batches`` (when training starts: the per-device batch is the train
  loader's) so that per-device batch x workers x accumulation is the job's effective batch
  (``EDT_EFFECTIVE_BATCH_SIZE``) or the one the program had at its first start. A
  ``GradientAccumulationScheduler`` keeps the say.
- Steps (``global_step`` from 0), loss and learning rate, and epochs with the validation values
  (``val_*`` or ``val/*`` as ``val_*``) become the job's metric events in the runtime Trainer's
  format; ``checkpoint`` (``reason`` "restart") and ``resumed`` events say where the job stopped
  and took up again.

Checkpoints go to ``$RESULT_DIR/checkpoints/``. Outside a jupyter-edt job (no ``EDT_LOG_DIR``)
both are inert, and the program runs as under plain torchrun or in one process.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import GradientAccumulationScheduler
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from ..runtime.worker import StopForRestart
from ._common import (
    CHECKPOINTS,
    RESTART,
    Job,
    Reporter,
    StopRequest,
    destroy_process_group_at_exit,
    gradient_accumulation,
    newest_checkpoint,
    val_metrics,
)

__all__ = ["EDTCallback", "prepare_trainer"]

SUFFIX = ".ckpt"
_NOT_RESUMABLE = "You're resuming from a checkpoint that ended before the epoch ended"


class _Restart(SIGTERMException, StopForRestart):
    """Lightning's exit on SIGTERM, which its hooks recognise, that the worker ends at once."""


class EDTCallback(pl.Callback):
    """Reports to the job and checkpoints when asked to stop (see the module's docstring);
    with `keep_global_batch` (`prepare_trainer` sets it) it also sets the accumulation."""

    def __init__(self) -> None:
        self.job = Job.from_env()
        self.keep_global_batch = False
        self._stop = StopRequest()
        self._before_lightning: Any = signal.SIG_DFL  # the SIGTERM handler fit() found
        self._events: Reporter | None = None
        self._epoch_steps = 0  # optimizer steps done in this epoch
        self._resume_epoch_steps: int | None = None
        self._stop_at_epoch_end = False
        self._last_step = 0
        self._loss: torch.Tensor | float = 0.0
        self._have_loss = False
        self._t0: float | None = None
        self._lr: float | None = None
        self._samples: int | None = None
        self._val: dict[str, float] = {}

    def checkpoint_dir(self, trainer: pl.Trainer) -> Path:
        if self.job is not None and self.job.checkpoint_dir is not None:
            return self.job.checkpoint_dir
        return Path(trainer.default_root_dir) / CHECKPOINTS

    # -- state kept in Lightning's checkpoints ----------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"epoch_steps": self._epoch_steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_epoch_steps = int(state_dict.get("epoch_steps", 0))

    # -- training ------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.job is not None and stage == "fit":
            self._before_lightning = signal.getsignal(signal.SIGTERM)

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.job is not None:
            self._take_sigterm(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.job is None:
            return
        self._take_sigterm(trainer)
        destroy_process_group_at_exit()
        self._events = self.job.events(trainer.global_rank, trainer.is_global_zero)
        batch = _batch_size(trainer)
        if self.keep_global_batch:
            self._set_accumulation(trainer, batch)
        accumulation = trainer.accumulate_grad_batches
        self._samples = batch * trainer.world_size * accumulation if batch else None
        self._resume_position(trainer)
        self._last_step = trainer.global_step
        batches = trainer.num_training_batches
        self._events.emit(
            "train_begin",
            epoch=trainer.current_epoch,
            global_step=trainer.global_step,
            epochs=trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None,
            steps_per_epoch=math.ceil(batches / accumulation) if math.isfinite(batches) else None,
            max_steps=trainer.max_steps if trainer.max_steps > 0 else None,
            effective_batch_size=self._samples,
            micro_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            world_size=trainer.world_size,
            device=str(trainer.strategy.root_device),
        )
        if trainer.global_step > 0:
            self._events.emit("resumed", path=trainer.ckpt_path, global_step=trainer.global_step)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_steps = 0  # not called when Lightning resumes inside an epoch

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        if optimizer.param_groups:
            self._lr = float(optimizer.param_groups[0]["lr"])  # the rate this step uses

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.job is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            # Lightning divides each batch's loss by the accumulation: their sum is the mean
            self._loss = self._loss + loss.detach().float().reshape(())
            self._have_loss = True
        if trainer.global_step == self._last_step:
            return  # accumulating: no optimizer step yet
        self._last_step = trainer.global_step
        self._epoch_steps += 1
        stop, mean_loss = self._agree(trainer)
        elapsed = time.monotonic() - self._t0 if self._t0 is not None else None
        assert self._events is not None
        self._events.emit(
            "step",
            epoch=trainer.current_epoch,
            step=self._epoch_steps - 1,
            global_step=trainer.global_step - 1,
            loss=mean_loss,
            lr=self._lr,
            world_size=trainer.world_size,
            samples=self._samples,
            step_s=elapsed,
            samples_per_s=self._samples / elapsed if self._samples and elapsed else None,
        )
        # the next step's time runs from here (its batches are read before its first hook); a
        # run's first step, which also starts it, has none
        self._loss, self._have_loss, self._t0 = 0.0, False, time.monotonic()
        if stop and trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            self._stop_at_epoch_end = True  # after the epoch's validation and end
        elif stop:
            self._checkpoint_and_exit(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.job is not None and not trainer.sanity_checking:
            self._val = val_metrics(trainer.callback_metrics, ("val_", "val/"))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._events is None:
            return
        # validation at an epoch's end has run by now
        self._events.emit(
            "epoch", epoch=trainer.current_epoch, world_size=trainer.world_size, **self._val
        )
        self._val = {}
        if self._stop_at_epoch_end:
            self._checkpoint_and_exit(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._events is not None:
            self._events.emit("train_end", global_step=trainer.global_step)
        self._end()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._end()

    # -- internals -----------------------------------------------------------------------------
    def _take_sigterm(self, trainer: pl.Trainer) -> None:
        """Our handler in place of Lightning's; a SIGTERM Lightning's caught in between (it
        would end the run at the next batch, without a checkpoint) becomes our request."""
        self._stop.install(chained=self._before_lightning)
        connector = getattr(trainer, "_signal_connector", None)
        if getattr(connector, "received_sigterm", False):
            connector.received_sigterm = False  # type: ignore[union-attr]
            self._stop.requested = True

    def _agree(self, trainer: pl.Trainer) -> tuple[bool, float | None]:
        """One reduction (sum) over the strategy, on every worker at every optimizer step:
        whether any worker was asked to stop, and the step's loss over all workers."""
        strategy = trainer.strategy
        values = torch.stack(
            [
                torch.tensor(1.0 if self._stop.requested else 0.0),
                torch.as_tensor(self._loss, dtype=torch.float32).detach().cpu().reshape(()),
                torch.tensor(1.0 if self._have_loss else 0.0),
            ]
        ).to(strategy.root_device)
        if trainer.world_size > 1:
            values = strategy.reduce(values, reduce_op="sum")
        stop, loss, counted = values.tolist()
        world = trainer.world_size
        return stop > 0, loss / world if counted == world else None

    def _checkpoint_and_exit(self, trainer: pl.Trainer) -> None:
        step = trainer.global_step
        directory = self.checkpoint_dir(trainer)
        path = directory / f"checkpoint-{step}{SUFFIX}"
        partial = directory / f".checkpoint-{step}{SUFFIX}.partial"
        trainer.save_checkpoint(partial)  # every rank: rank 0 writes, then they all meet
        if trainer.is_global_zero:
            os.replace(partial, path)  # a checkpoint's name means it is complete
            assert self._events is not None
            self._events.emit("checkpoint", path=str(path), reason=RESTART, global_step=step)
        self._end()
        raise _Restart  # Lightning's own exit on SIGTERM, status 0; the worker ends at once

    def _set_accumulation(self, trainer: pl.Trainer, batch: int | None) -> None:
        if any(isinstance(cb, GradientAccumulationScheduler) for cb in trainer.callbacks):
            rank_zero_warn(
                "A GradientAccumulationScheduler sets the accumulation, not jupyter-edt."
            )
            return
        if batch is None:
            if self.job is not None and self.job.effective_batch is not None:
                raise ValueError(
                    "The effective batch cannot be kept: the train loader's per-device batch "
                    "size is unknown (give the DataLoader a batch_size)."
                )
            return
        trainer.accumulate_grad_batches = gradient_accumulation(
            self.job,
            batch,
            trainer.world_size,
            trainer.accumulate_grad_batches,
            writer=trainer.is_global_zero,
        )

    def _resume_position(self, trainer: pl.Trainer) -> None:
        """Resume inside an epoch at this size: Lightning's batch counters become this size's
        (`steps` optimizer steps x this accumulation batches per device), and the batches the
        interrupted epoch consumed are skipped, unless the loaders restore their own place."""
        steps, self._resume_epoch_steps = self._resume_epoch_steps, None
        if not steps:
            return
        self._epoch_steps = steps
        batches = steps * trainer.accumulate_grad_batches
        if not batches < trainer.num_training_batches:
            return  # saved at the epoch's end: Lightning goes on with the next one
        fit_loop = trainer.fit_loop
        progress = fit_loop.epoch_loop.batch_progress
        shift = batches - progress.current.ready
        for tracker in (progress.current, progress.total):
            for name in ("ready", "started", "processed", "completed"):
                setattr(tracker, name, getattr(tracker, name) + shift)
        fetcher = getattr(fit_loop, "_data_fetcher", None)
        loaders = getattr(getattr(fit_loop, "_combined_loader", None), "flattened", None)
        if fetcher is None or loaders is None:
            rank_zero_warn(
                "jupyter-edt could not skip the batches the interrupted epoch consumed: "
                "this Lightning version keeps its train data elsewhere."
            )
            return
        if all(_stateful(dl) for dl in loaders):
            return  # Lightning put them back where they were
        for dl in loaders:
            _set_epoch(dl, trainer.current_epoch)  # the order of this epoch, before it is drawn
        iter(fetcher)
        for _ in range(batches):
            next(fetcher.iterator)  # type: ignore[call-overload]
        # Lightning's warning that the loader will not resume in place no longer holds
        warnings.filterwarnings("ignore", message=_NOT_RESUMABLE, category=PossibleUserWarning)

    def _end(self) -> None:
        self._stop.uninstall()
        if self._events is not None:
            self._events.close()
            self._events = None


def prepare_trainer(trainer: pl.Trainer) -> pl.Trainer:
    """Give `trainer` an `EDTCallback` (unless it has one), and in a jupyter-edt job: the
    accumulation that keeps the job's global batch (set when training starts), and a ``fit()``
    that resumes from the newest checkpoint under ``$RESULT_DIR/checkpoints`` when called
    without ``ckpt_path``. Returns `trainer`; preparing it again changes nothing.

    ``fit()`` raises ValueError when the effective batch does not divide into whole per-device
    batches on this many workers."""
    callback = next((cb for cb in trainer.callbacks if isinstance(cb, EDTCallback)), None)
    if callback is None:
        callback = EDTCallback()
        trainer.callbacks.append(callback)
    if callback.job is None or getattr(trainer, "_edt_prepared", False):
        return trainer
    callback.keep_global_batch = True
    trainer.fit = _resuming(trainer.fit, trainer, callback)  # type: ignore[method-assign]
    trainer._edt_prepared = True  # type: ignore[attr-defined]
    return trainer


def _resuming(fit: Callable[..., Any], trainer: pl.Trainer, callback: EDTCallback) -> Any:
    @functools.wraps(fit)
    def resuming_fit(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 5 and kwargs.get("ckpt_path") is None:  # fit's 5th argument
            newest = newest_checkpoint(callback.checkpoint_dir(trainer), SUFFIX)
            kwargs["ckpt_path"] = str(newest) if newest is not None else None
        return fit(*args, **kwargs)

    return resuming_fit


def _batch_size(trainer: pl.Trainer) -> int | None:
    """The per-device batch of the train loader(s), when they agree on one."""
    loaders = trainer.train_dataloader
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    elif not isinstance(loaders, list | tuple):
        loaders = [loaders]
    sizes = {getattr(dl, "batch_size", None) for dl in loaders}
    size = sizes.pop() if len(sizes) == 1 else None
    return size if isinstance(size, int) and size > 0 else None


def _stateful(loader: object) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(
        getattr(loader, "load_state_dict", None)
    )


def _set_epoch(loader: object, epoch: int) -> None:
    batch_sampler = getattr(loader, "batch_sampler", None)
    for sampler in (
        getattr(loader, "sampler", None),
        batch_sampler,
        getattr(batch_sampler, "sampler", None),
    ):
        if callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)  # type: ignore[union-attr]
