"""The user API: ``Trainer(model, datasets, loss_fn, optimizer, ...).fit(...)``.

The same code trains in one plain process (a notebook cell, a debugger) and as a worker of an
elastic job (when started by a controller, which sets ``EDT_STORE``). Whatever the number of
workers, and however it changes, each update equals one-device training on the same global batch
(see ``partition.py`` for the rule, ``exchange.py`` for the order-fixed gradient sum).

This module holds the API and the step's arithmetic; the rest has rooms of its own, so that a
step never sees membership: ``options.py`` checks the arguments, ``state.TrainState`` is what
moves to joiners and into checkpoints, ``membership.py`` joins, rescales and recovers,
``buckets.py`` keeps the flat gradient and its exchange, ``step_values.py`` names what rides
in a step's reduction besides the gradients, and ``group.Group`` hides a solo process from a
job's worker.

Rules the user relies on:

- ``effective_batch_size`` is the global batch: samples per optimizer update, whatever the
  number of GPUs. ``micro_batch_size`` is what one forward/backward processes; it defaults to
  ``ceil(effective_batch_size / max_gpus)`` and is fixed for the whole job.
- ``loss_fn(output, target)`` and each metric return the mean over the micro-batch (PyTorch's
  default ``reduction="mean"``); the runtime weights micro-batch ``j`` by ``len_j / len(batch)``.
- A batch from ``collate_fn`` is a sequence whose last item is the target; the other items are
  passed to the model as positional arguments. A dict batch is passed as keyword arguments, and
  ``loss_fn=None`` takes the loss the model returns (Hugging Face's); ``step_fn(model, batch)``
  computes it any other way (``batches.py``).
- ``precision="bf16"`` autocasts forward and loss to bfloat16 (CPU and CUDA); ``"fp16"`` to
  float16 with a loss scale that is training state, and a step whose summed gradient overflowed
  is skipped on every worker (``precision.py``). ``clip_grad_norm`` / ``clip_grad_value`` clip
  the summed gradient with ``torch.nn.utils``' own functions, as one process would.
- ``fit(num_workers=...)``: DataLoader processes read the micro-batches this worker computes
  next while it computes; a micro-batch's data, augmentation included, depends only on (seed,
  epoch, step, micro-batch), never on ``num_workers`` or the GPU count (``loading.py``).
- A ``torch.compile``'d model trains compiled; checkpoints and the saved model hold the module it
  wraps. The micro-batch size never changes with the allocation, so a resize compiles nothing
  new (a joiner compiles once, as any new process does).
- Buffers (BatchNorm running statistics): every micro-batch of a step starts from the buffers of
  the step's start; at the end of the step the buffers become the weighted mean (weights
  ``len_j / len(batch)``) of the micro-batches' updated buffers, summed in micro-batch order, so
  they do not depend on placement. With one micro-batch per step this is plain PyTorch.
- Training mode: ``model.train()`` as each epoch begins, before ``on_epoch_begin`` (where a
  callback may set parts of the model to eval, to freeze BatchNorm statistics, say), and after
  validation; a step that finds the model in eval mode (a callback's ``model.eval()``) sets it
  back to training mode first. Lightning does the same.
- ``lr_scheduler`` steps once per epoch, or after every optimizer step with
  ``lr_scheduler_interval="step"``; its state moves to joiners and into checkpoints. Callbacks run
  on every worker (``trainer.rank`` tells which); their own state is not moved to joiners.
- The optimizer's hyperparameters (``param_groups``: lr, momentum, weight decay, betas, ...) are
  the same on every worker at every step: a value that user code changed on some workers only (a
  callback when ``trainer.rank == 0``) reaches the others before the next optimizer step, and
  values changed differently on different workers stop the job with an error naming them. See
  ``hyper.py`` for the rule and what counts as a hyperparameter. A worker that joins a running
  job runs ``on_train_begin`` too, but what it changes there is dropped: the job's values, and
  its changes not yet agreed, come with the state.
- ``device`` (default ``"auto"``): in a job the allocation decides (the worker's one GPU, or the
  CPU for a virtual device); in a plain process CUDA when available. The model moves there when
  the trainer is built; batches, loss and metrics are computed there. See
  ``group.select_device``.
- Options given at submission (``%%edt_submit --epochs 3 --effective-batch-size 64
  --checkpoint-every 2``) reach the job as ``EDT_EPOCHS``, ``EDT_EFFECTIVE_BATCH_SIZE`` and
  ``EDT_CHECKPOINT_EVERY`` and win over ``fit``'s arguments (:func:`env_overrides`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import ConcatDataset, Dataset, default_collate

from . import hyper
from . import partition as part
from .batches import Compute, StepFn, to_device
from .buckets import GradientBuckets
from .events import EventLog
from .group import ElasticGroup, Group, GroupError, JobContext, LeaveJob, SoloGroup
from .loading import MicroBatchLoader, Task, data_seed
from .membership import Membership, Placement
from .options import (
    ENV_OPTIONS,
    LR_SCHEDULER_INTERVALS,
    check_clipping,
    check_dataset,
    check_fit_args,
    check_lr_scheduler,
    check_num_workers,
    env_overrides,
    resolve_device,
)
from .precision import PRECISIONS, Precision
from .resources import default_num_workers
from .state import TrainState, atomic_save, latest_checkpoint, save_checkpoint, to_cpu
from .step_values import StepControl, StepLayout

__all__ = [
    "ENV_OPTIONS",
    "LR_SCHEDULER_INTERVALS",
    "PRECISIONS",
    "Callback",
    "Trainer",
    "check_fit_args",
    "check_lr_scheduler",
    "env_overrides",
    "resolve_device",
]

MetricFn = Callable[[Any, Any], torch.Tensor | float]


class Callback:
    """Hooks called by ``Trainer.fit``; override what you need. ``self.trainer`` is set."""

    trainer: Trainer

    def on_train_begin(self) -> None: ...

    def on_epoch_begin(self, epoch: int) -> None: ...

    def on_step_end(self, step: int, logs: dict[str, Any]) -> None: ...

    def on_epoch_end(self, epoch: int, logs: dict[str, Any]) -> None: ...

    def on_train_end(self, logs: dict[str, Any]) -> None: ...


class Trainer:
    """Trains ``model`` with a constant effective batch size on however many workers it gets.

    The step's arithmetic lives here; what moves between workers is ``train_state``
    (``state.TrainState``), who takes part is the ``Membership`` loop, and the gradient sum is
    ``GradientBuckets``: the step sees membership only at its boundaries.
    """

    def __init__(
        self,
        model: nn.Module,
        datasets: Callable[[], tuple[Dataset[Any], Dataset[Any]]],
        loss_fn: Callable[[Any, Any], torch.Tensor] | None,
        optimizer: torch.optim.Optimizer
        | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
        metrics: Mapping[str, MetricFn] | Sequence[MetricFn] | None = None,
        lr_scheduler: Any = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        callbacks: Sequence[Callback] | None = None,
        device: str | torch.device = "auto",
        lr_scheduler_interval: str = "epoch",
        *,
        precision: str = "32",
        clip_grad_norm: float | None = None,
        clip_grad_value: float | None = None,
        step_fn: StepFn | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(datasets):
            raise ValueError("datasets must be a function returning (train_dataset, test_dataset)")
        self.compute = Compute(loss_fn, step_fn)
        self.clip_grad_norm, self.clip_grad_value = check_clipping(clip_grad_norm, clip_grad_value)
        if not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
            raise ValueError("optimizer must be a torch.optim.Optimizer or a factory of one")
        self.device = resolve_device(device)
        if self.device.type == "cuda" and "EDT_STORE" in os.environ:
            torch.cuda.set_device(self.device)  # a worker's one GPU; NCCL wants it current
        self.model = model.to(self.device)
        # a torch.compile'd model trains as compiled; its state is the module it wraps, so that
        # checkpoints and the saved model load into the plain model
        self.module: nn.Module = getattr(self.model, "_orig_mod", self.model)
        self.precision = Precision(precision, self.device)
        self.datasets_fn = datasets
        self.optimizer = (
            optimizer
            if isinstance(optimizer, torch.optim.Optimizer)
            else optimizer(model.parameters())
        )
        if metrics is None:
            metrics = {}
        elif not isinstance(metrics, Mapping):
            metrics = {getattr(f, "__name__", f"metric{i}"): f for i, f in enumerate(metrics)}
        self.metrics: dict[str, MetricFn] = dict(metrics)
        self.lr_scheduler = check_lr_scheduler(lr_scheduler, self.optimizer, lr_scheduler_interval)
        self.lr_scheduler_interval = lr_scheduler_interval
        self.collate_fn = collate_fn or default_collate
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            cb.trainer = self
        self.params = [p for p in model.parameters() if p.requires_grad]
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) != 1:
            raise ValueError(f"model: trainable parameters must share one dtype, got {dtypes}")
        self.train_state = TrainState(
            self.module, self.optimizer, self.lr_scheduler, self.device, self.precision.scaler
        )
        self.placement = Placement()
        self.history: dict[str, list[Any]] = {"train": [], "val": []}
        self.events: EventLog | None = None
        self.left = False
        self._hp_now: hyper.Snapshot = ()  # this worker's, as it entered the step's reduction
        self._data_s = 0.0  # the step's wait for its micro-batches

    # -- where training stands and where this worker sits ---------------------------------------
    @property
    def epoch(self) -> int:
        return self.train_state.epoch

    @property
    def step(self) -> int:
        """The step within the epoch."""
        return self.train_state.step

    @property
    def global_step(self) -> int:
        return self.train_state.global_step

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def generation(self) -> int:
        return self.placement.generation

    @property
    def flat(self) -> torch.Tensor:
        """The flat gradient buffer that every ``param.grad`` views (during ``fit``)."""
        return self.grads.flat

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything a joiner or a checkpoint needs to continue exactly."""
        return self.train_state.capture()

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state made by :meth:`state` (from a peer or a checkpoint)."""
        self.train_state.restore(state)

    # -- fit -----------------------------------------------------------------------------------
    def fit(
        self,
        epochs: int,
        effective_batch_size: int,
        max_gpus: int,
        checkpoint_every: int = 1,
        micro_batch_size: int | None = None,
        validate_every: int = 1,
        seed: int = 0,
        result_dir: str | os.PathLike[str] | None = None,
        num_workers: int | None = None,
    ) -> dict[str, list[Any]]:
        """Train for ``epochs`` epochs; returns per-step and per-epoch metrics.

        ``checkpoint_every`` is in epochs (0: none) and ``validate_every`` too. In a job, a
        worker dropped by a shrink exits here with status 0. ``num_workers`` data-loading
        processes read each worker's next micro-batches while it computes (default: on a GPU,
        its share of the node's cores, see ``resources.py``; 0 on the CPU: read in place).
        ``EDT_EPOCHS``, ``EDT_EFFECTIVE_BATCH_SIZE`` and ``EDT_CHECKPOINT_EVERY``, when set, win
        over the arguments of the same name.
        """
        opts, notes = env_overrides(
            os.environ,
            epochs=epochs,
            effective_batch_size=effective_batch_size,
            checkpoint_every=checkpoint_every,
        )
        epochs, checkpoint_every = opts["epochs"], opts["checkpoint_every"]
        if (
            micro_batch_size is not None
            and effective_batch_size != opts["effective_batch_size"]
            and micro_batch_size > opts["effective_batch_size"]
        ):
            raise ValueError(
                f"micro_batch_size ({micro_batch_size}) must not exceed effective_batch_size "
                f"({opts['effective_batch_size']}, from EDT_EFFECTIVE_BATCH_SIZE)"
            )
        effective_batch_size = opts["effective_batch_size"]
        self.micro_batch_size = check_fit_args(
            epochs,
            effective_batch_size,
            max_gpus,
            checkpoint_every,
            micro_batch_size,
            validate_every,
        )
        got = self.datasets_fn()
        if not isinstance(got, tuple | list) or len(got) != 2:
            raise ValueError("datasets must return a pair (train_dataset, test_dataset)")
        self.train_size = check_dataset("train_dataset", got[0])
        self.test_size = check_dataset("test_dataset", got[1])
        self.train_ds, self.test_ds = got[0], got[1]
        workers = (
            default_num_workers(self.device.type)
            if num_workers is None
            else check_num_workers(num_workers)
        )
        # samples per optimizer update, over all workers: what makes results independent of
        # the allocation (each worker computes some of its micro-batches)
        self.effective_batch_size = effective_batch_size
        self.epochs, self.seed = epochs, seed
        self.max_gpus, self.checkpoint_every, self.validate_every = (
            max_gpus,
            checkpoint_every,
            validate_every,
        )
        ctx = JobContext.from_env()
        result = result_dir or (ctx.result_dir if ctx else None)
        self.result_dir = Path(result) if result else None
        self.group: Group = ElasticGroup(ctx, self.device) if ctx else SoloGroup(self.device)
        self.events = EventLog(
            ctx.log_dir if ctx else None, self.group.worker_id, ctx.run if ctx else None
        )
        self.train_state.hp_agreed, self.train_state.hp_trace = None, []
        for note in notes:
            self.events.info(note)
        self.grads = GradientBuckets(self.params, self.group)
        self.buffers = list(self.model.buffers())
        self.layout = StepLayout(len(self.metrics), sum(b.numel() for b in self.buffers))
        # refilled every step: pageable host memory, which a copy to the device has read by the
        # time copy_ returns, even with non_blocking
        self._control = torch.empty(StepControl.count(), dtype=torch.float64)
        # both sets through one loader (test indices after the training set's), started before
        # the group forms: a joiner's readers start while it receives the state (their
        # processes are forked from this one, and use none of its group's connections)
        self.loader = MicroBatchLoader(
            ConcatDataset([self.train_ds, self.test_ds]),
            self.collate_fn,
            workers,
            pin_memory=self.device.type == "cuda",
        )
        self.loader.start()
        self.events.emit("loader", num_workers=workers)
        self.membership = Membership(
            self.group,
            self.train_state,
            self.grads,
            self.placement,
            self._emit,
            self._resume_from_disk,
        )
        try:
            self._run()
        except LeaveJob:
            self.left = True
            self.events.emit("left", generation=self.group.generation)
        finally:
            self.membership.close()
            self.loader.close()
            self.grads.close()
            self.group.close()
            self.events.close()
        if self.left:
            raise SystemExit(0)
        return self.history

    # -- internals -----------------------------------------------------------------------------
    def _emit(self, kind: str, **fields: Any) -> None:
        assert self.events is not None
        self.events.emit(kind, **{"generation": self.generation, "rank": self.rank, **fields})

    def _run(self) -> None:
        st = self.train_state
        self.membership.join()
        st.hp_agreed = st.agreed_hp()  # before any callback can change them
        steps = part.steps_per_epoch(self.train_size, self.effective_batch_size)
        self._emit(
            "train_begin",
            epoch=st.epoch,
            global_step=st.global_step,
            epochs=self.epochs,
            effective_batch_size=self.effective_batch_size,
            micro_batch_size=self.micro_batch_size,
            steps_per_epoch=steps,
            device=str(self.device),
        )
        received = st.hp_agreed, list(st.hp_trace)
        for cb in self.callbacks:
            self._marked(cb.on_train_begin)
        if self.placement.joined_late:  # the job began before us: on_train_begin changed nothing
            st.hp_agreed, st.hp_trace = received
            hyper.apply(self.optimizer, st.hp_trace[-1] if st.hp_trace else received[0])
        perm_epoch, perm = -1, []
        while st.epoch < self.epochs:
            if st.step == steps:
                self._guarded(self._end_epoch)
                continue
            if perm_epoch != st.epoch:
                self.model.train()  # before on_epoch_begin, which may set parts of it to eval
                if st.step == 0:
                    for cb in self.callbacks:
                        self._marked(cb.on_epoch_begin, st.epoch)
                perm_epoch = st.epoch
                perm = part.epoch_permutation(self.train_size, self.seed, st.epoch)
            ctl = self.membership.orders(st.global_step)
            t0 = time.monotonic()
            try:
                tot = self._train_step(perm, ctl)
                host = tot.cpu()  # one copy to the host per step (the same on a CPU worker)
                agreed = StepControl.unpack(host[self.layout.control].tolist())
                self._agree_hyperparameters(agreed)
            except GroupError as e:
                self._recover(e)
                continue
            self._commit(tot, host, agreed, t0)

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except GroupError as e:
            self._recover(e)

    def _recover(self, error: Exception) -> None:
        """Drop the half-done step (buffers back to the step's start) and re-form."""
        t0 = time.monotonic()
        for b, b0 in zip(self.buffers, getattr(self, "_start_buffers", []), strict=False):
            b.copy_(b0)
        self.membership.recover(error, t0)

    def _train_step(self, perm: list[int], ctl: Mapping[str, int]) -> torch.Tensor:
        st, lay, grads = self.train_state, self.layout, self.grads
        global_batch = part.global_batch(perm, st.step, self.effective_batch_size)
        mbs = part.micro_batches(global_batch, self.micro_batch_size)
        mine = part.deal(len(mbs), self.world_size)[self.rank]
        if not self.model.training:  # a callback's model.eval(); train() walks every module
            self.model.train()
        start = [b.detach().clone() for b in self.buffers]
        self._start_buffers = start
        grads.start(len(mbs))
        aux_parts = []
        self._data_s = 0.0
        for q, j in enumerate(mine):
            if q:
                for b, b0 in zip(self.buffers, start, strict=True):
                    b.copy_(b0)
            if q == 0 or grads.exchange.collective:  # each round's gradient goes on its own
                grads.new_part()
            weight = len(mbs[j]) / len(global_batch)
            batch = self._read(self._train_task(st.epoch, st.step, j, mbs[j]))
            self._seed(part.micro_batch_seed(self.seed, st.epoch, st.step, j))
            with self.precision.autocast():
                loss, metric_args = self._forward(batch)
            grads.begin_round(q)  # the backward sends buckets as they are done
            scaled = loss * weight
            if self.precision.scaler is not None:  # fp16: the summed gradient is unscaled
                scaled = scaled * self.precision.loss_scale
            scaled.backward()
            grads.collect()
            grads.end_round()
            aux = torch.empty(lay.size, dtype=torch.float64, device=self.device)
            aux[lay.LOSS] = loss.detach().double() * weight
            with torch.no_grad():
                for i, fn in enumerate(self.metrics.values()):
                    value = torch.as_tensor(fn(*metric_args), device=self.device)
                    aux[lay.metric(i)] = value.double() * weight
            if self.buffers:
                flat_b = torch.cat([b.detach().double().reshape(-1) for b in self.buffers])
                aux[lay.buffers] = flat_b * weight
            aux_parts.append(aux)
        # the hyperparameters as the step ends: a custom step hook may have changed them too
        self._hp_now = st.hp.snapshot()
        StepControl.of(ctl["gen"], ctl["ckpt"], st.hp.fingerprint()).pack(self._control)
        if not aux_parts:  # no micro-batch here this step: the control values still count
            aux_parts.append(torch.zeros(lay.size, dtype=torch.float64, device=self.device))
        aux_parts[0][lay.control].copy_(self._control, non_blocking=True)  # no device wait
        self.membership.read_orders_ahead()
        return self.group.reduce(len(mbs), grads.exchange, aux_parts, lay.size, lay.n_sum)

    def _marked(self, fn: Callable[..., object], *args: Any) -> None:
        """Run user code, then note the hyperparameters it left (see
        ``TrainState.note_hyperparameters``)."""
        fn(*args)
        self.train_state.note_hyperparameters()

    def _agree_hyperparameters(self, agreed: StepControl) -> None:
        """Make every worker's hyperparameters the same before the optimizer step (the rule is
        in ``hyper.py``); equal fingerprints, the common case, need no communication.
        ``agreed``: the step's control values, their maximum over the workers."""
        st = self.train_state
        if agreed.hyperparameters_agree:
            st.hp_agreed, st.hp_trace = self._hp_now, []
            return
        # a failed exchange keeps the trace: the step is redone
        traces = self.group.all_gather_object([*st.hp_trace, self._hp_now])
        st.hp_trace = []
        try:
            values = hyper.agree(st.agreed_hp(), traces)
        except hyper.HyperparameterConflict as e:
            self._emit("hyperparameter_conflict", error=str(e), global_step=st.global_step)
            raise
        changed = hyper.apply(self.optimizer, values)
        st.hp_agreed = values
        if changed:
            self._emit("hyperparameters", global_step=st.global_step, changed=changed)

    def _seed(self, seed: int) -> None:
        # torch.manual_seed also walks every accelerator backend (~1 ms); seed what is used.
        torch.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)

    def _forward(self, batch: Any) -> tuple[torch.Tensor, tuple[Any, Any]]:
        """One micro-batch through the model (``batches.py``): its loss, and what its metrics
        are given."""
        _, loss, metric_args = self.compute(self.model, to_device(batch, self.device))
        return loss, metric_args

    # -- reading micro-batches ahead (loading.py) ----------------------------------------------
    def _train_task(self, epoch: int, step: int, j: int, indices: list[int]) -> Task:
        return Task(("train", epoch, step, j), indices, data_seed(self.seed, epoch, step, j))

    def _val_task(self, epoch: int, j: int, indices: list[int]) -> Task:
        # the test set follows the training set in the loader's dataset
        at = [self.train_size + i for i in indices]
        return Task(("val", epoch, j), at, data_seed(self.seed, epoch, -1, j))

    def _read(self, task: Task) -> Any:
        t0 = time.monotonic()
        batch = self.loader.get(task, lambda: self._upcoming(task))
        self._data_s += time.monotonic() - t0
        return batch

    def _upcoming(self, first: Task) -> Iterator[Task]:
        """This worker's micro-batches from ``first`` on, in the order it computes them under
        its placement now: its share of each step's micro-batches, then of each validation's."""
        rank, world = self.rank, self.world_size
        steps = part.steps_per_epoch(self.train_size, self.effective_batch_size)
        phase, epoch, *where = first.key
        step, j0 = (where[0], where[1]) if phase == "train" else (steps, where[0])
        for e in range(epoch, self.epochs):
            perm = part.epoch_permutation(self.train_size, self.seed, e)
            for s in range(step if e == epoch else 0, steps):
                mbs = part.micro_batches(
                    part.global_batch(perm, s, self.effective_batch_size), self.micro_batch_size
                )
                for j in part.deal(len(mbs), world)[rank]:
                    if (e, s) != (epoch, step) or j >= j0:
                        yield self._train_task(e, s, j, mbs[j])
            if self._validates(e):
                mbs = part.micro_batches(range(self.test_size), self.micro_batch_size)
                for j in part.deal(len(mbs), world)[rank]:
                    if (e, phase) != (epoch, "val") or j >= j0:
                        yield self._val_task(e, j, mbs[j])

    def _validates(self, epoch: int) -> bool:
        return bool(self.validate_every) and (epoch + 1) % self.validate_every == 0

    def _commit(
        self, tot: torch.Tensor, host: torch.Tensor, agreed: StepControl, t0: float
    ) -> None:
        st, lay = self.train_state, self.layout
        clipped: dict[str, Any] = {}
        # the summed gradient is the same on every worker: so are the overflow check (fp16),
        # the clipping and the decision to step
        with self.precision.unscaled(self.grads.flat) as finite:
            if finite:
                clipped = self._clip()
                self.optimizer.step()
        if self.lr_scheduler is not None and self.lr_scheduler_interval == "step":
            self._marked(self.lr_scheduler.step)
        if self.buffers:
            flat_b = tot[lay.buffers]
            off = 0
            for b in self.buffers:
                vals = flat_b[off : off + b.numel()].view_as(b)
                b.copy_(vals if b.is_floating_point() else vals.round())
                off += b.numel()
        loss = float(host[lay.LOSS])
        logs: dict[str, Any] = {
            "epoch": st.epoch,
            "step": st.step,
            "global_step": st.global_step,
            "loss": loss,
            **{k: float(host[lay.metric(i)]) for i, k in enumerate(self.metrics)},
            **clipped,
        }
        if self.precision.scaler is not None:
            logs["skipped"] = not finite  # an overflow: no update, on every worker
            logs["loss_scale"] = self.precision.scaler.scale
        elapsed = time.monotonic() - t0
        # the last global batch of an epoch may be smaller
        samples = min(
            self.effective_batch_size, self.train_size - st.step * self.effective_batch_size
        )
        st.step += 1
        st.global_step += 1
        self.history["train"].append(logs)
        self._emit(
            "step",
            **logs,
            world_size=self.world_size,
            samples=samples,
            step_s=elapsed,
            data_s=self._data_s,
            samples_per_s=samples / elapsed if elapsed > 0 else None,
        )
        for cb in self.callbacks:
            self._marked(cb.on_step_end, logs["step"], logs)
        if agreed.checkpoint_requests > st.ckpt_seen:
            st.ckpt_seen = agreed.checkpoint_requests
            self._checkpoint("request")
        self.membership.rescale(agreed.generation)

    def _clip(self) -> dict[str, Any]:
        """Clip the summed gradient as a single process would (``torch.nn.utils``' own
        functions on the parameters, whose gradients are views of it); the norm before clipping
        for the step's logs."""
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(self.params, self.clip_grad_value)
        if self.clip_grad_norm is None:
            return {}
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_grad_norm)
        return {"grad_norm": float(norm)}

    def _end_epoch(self) -> None:
        st = self.train_state
        logs: dict[str, Any] = {"epoch": st.epoch}
        if self._validates(st.epoch):
            logs.update(self._validate())
        if self.lr_scheduler is not None and self.lr_scheduler_interval == "epoch":
            self._marked(self.lr_scheduler.step)
        self.history["val"].append(logs)
        self._emit("epoch", **logs, world_size=self.world_size)
        for cb in self.callbacks:
            self._marked(cb.on_epoch_end, st.epoch, logs)
        st.epoch += 1
        st.step = 0
        if self.checkpoint_every and st.epoch % self.checkpoint_every == 0:
            self._checkpoint("epoch")
        if st.epoch == self.epochs:
            self._finish(logs)

    def _validate(self) -> dict[str, float]:
        mbs = part.micro_batches(range(self.test_size), self.micro_batch_size)
        mine = part.deal(len(mbs), self.world_size)[self.rank]
        # per micro-batch: loss and metrics weighted by its samples, then the samples
        size = 2 + len(self.metrics)
        parts = []
        self.model.eval()
        with torch.no_grad():
            for j in mine:
                batch = self._read(self._val_task(self.epoch, j, mbs[j]))
                self._seed(part.micro_batch_seed(self.seed, self.epoch, -1, j))
                with self.precision.autocast():
                    loss, metric_args = self._forward(batch)
                k = len(mbs[j])
                aux = torch.empty(size, dtype=torch.float64, device=self.device)
                aux[0] = loss.double() * k
                for i, fn in enumerate(self.metrics.values()):
                    value = torch.as_tensor(fn(*metric_args), device=self.device)
                    aux[1 + i] = value.double() * k
                aux[-1] = k
                parts.append(aux)
        self.model.train()
        tot = self.group.reduce(len(mbs), None, parts, size, size)
        tot = tot.cpu()
        res = {"val_loss": float(tot[0] / tot[-1])}
        res.update({f"val_{k}": float(tot[1 + i] / tot[-1]) for i, k in enumerate(self.metrics)})
        return res

    def _checkpoint(self, reason: str) -> None:
        if self.rank != 0 or self.result_dir is None:
            return
        path = save_checkpoint(to_cpu(self.state()), self.result_dir / "checkpoint")
        self._emit("checkpoint", path=str(path), reason=reason, global_step=self.global_step)

    def _finish(self, logs: dict[str, Any]) -> None:
        if self.rank == 0 and self.result_dir is not None:
            path = atomic_save(
                to_cpu(self.module.state_dict()),
                self.result_dir / "model" / "model_epoch_final.pth",
            )
            self._emit("model_saved", path=str(path))
        self._emit("train_end", global_step=self.global_step, **self._compiled())
        for cb in self.callbacks:
            cb.on_train_end(logs)

    def _compiled(self) -> dict[str, int]:
        """For a compiled model, the graphs this process compiled: a resize that recompiled
        would show here."""
        if self.module is self.model:
            return {}
        try:
            from torch._dynamo.utils import counters
        except ImportError:  # a torch without dynamo's counters: nothing to say
            return {}
        return {"compiled_graphs": int(counters["stats"]["unique_graphs"])}

    def _resume_from_disk(self) -> bool:
        if self.result_dir is None:
            return False
        path = latest_checkpoint(self.result_dir / "checkpoint")
        if path is None:
            return False
        # host tensors: load_state_dict puts them on this device (and Adam's step counters and
        # the RNG states must stay on the host anyway)
        self.load_state(torch.load(path, map_location="cpu", weights_only=False))
        self._emit("resumed", path=str(path), global_step=self.global_step)
        return True
