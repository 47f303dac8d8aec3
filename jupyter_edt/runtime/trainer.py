"""The user API: ``Trainer(model, datasets, loss_fn, optimizer, ...).fit(...)``.

The same code trains in one plain process (a notebook cell, a debugger) and as a worker of an
elastic job (when started by a controller, which sets ``EDT_STORE``). Whatever the number of
workers, and however it changes, each update equals one-device training on the same global batch
(see ``partition.py`` for the rule, ``exchange.py`` for the order-fixed gradient sum).

Rules the user relies on:

- ``effective_batch_size`` is the global batch: samples per optimizer update, whatever the
  number of GPUs. ``micro_batch_size`` is what one forward/backward processes; it defaults to
  ``ceil(effective_batch_size / max_gpus)`` and is fixed for the whole job.
- ``loss_fn(output, target)`` and each metric return the mean over the micro-batch (PyTorch's
  default ``reduction="mean"``); the runtime weights micro-batch ``j`` by ``len_j / len(batch)``.
- A batch from ``collate_fn`` is a sequence whose last item is the target; the other items are
  passed to the model as positional arguments.
- Buffers (BatchNorm running statistics): every micro-batch of a step starts from the buffers of
  the step's start; at the end of the step the buffers become the weighted mean (weights
  ``len_j / len(batch)``) of the micro-batches' updated buffers, summed in micro-batch order, so
  they do not depend on placement. With one micro-batch per step this is plain PyTorch.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, default_collate

from . import hyper
from . import partition as part
from .events import EventLog
from .exchange import BUCKET_BYTES, OrderedExchange
from .group import ElasticGroup, GroupError, JobContext, LeaveJob, SoloGroup, select_device
from .state import atomic_save, latest_checkpoint, save_checkpoint, to_cpu

__all__ = [
    "LR_SCHEDULER_INTERVALS",
    "Callback",
    "Trainer",
    "check_lr_scheduler",
    "env_overrides",
    "resolve_device",
]

# when Trainer(lr_scheduler=...) steps: after each epoch, or after each optimizer step
LR_SCHEDULER_INTERVALS = ("epoch", "step")

# control values of a step, after the summed ones: their maximum over the workers
CONTROL = ("generation", "checkpoint_requests", "hp_fingerprint", "minus_hp_fingerprint")

# fit() argument -> (environment variable, lowest allowed value)
ENV_OPTIONS = {
    "epochs": ("EDT_EPOCHS", 1),
    "effective_batch_size": ("EDT_EFFECTIVE_BATCH_SIZE", 1),
    "checkpoint_every": ("EDT_CHECKPOINT_EVERY", 0),
}

MetricFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor | float]


class Callback:
    """Hooks called by ``Trainer.fit``; override what you need. ``self.trainer`` is set."""

    trainer: Trainer

    def on_train_begin(self) -> None: ...

    def on_epoch_begin(self, epoch: int) -> None: ...

    def on_step_end(self, step: int, logs: dict[str, Any]) -> None: ...

    def on_epoch_end(self, epoch: int, logs: dict[str, Any]) -> None: ...

    def on_train_end(self, logs: dict[str, Any]) -> None: ...


def check_fit_args(
    epochs: int,
    effective_batch_size: int,
    max_gpus: int,
    checkpoint_every: int,
    micro_batch_size: int | None,
    validate_every: int,
) -> int:
    """Validate ``fit``'s numbers (ValueError naming the argument); returns the micro-batch size."""

    def whole(name: str, value: object, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        return value

    whole("epochs", epochs, 1)
    whole("effective_batch_size", effective_batch_size, 1)
    whole("max_gpus", max_gpus, 1)
    whole("checkpoint_every", checkpoint_every, 0)
    whole("validate_every", validate_every, 0)
    if micro_batch_size is None:
        return part.default_micro_batch_size(effective_batch_size, max_gpus)
    whole("micro_batch_size", micro_batch_size, 1)
    if micro_batch_size > effective_batch_size:
        raise ValueError(
            f"micro_batch_size ({micro_batch_size}) must not exceed effective_batch_size "
            f"({effective_batch_size})"
        )
    return micro_batch_size


def env_overrides(env: Mapping[str, str], **given: int) -> tuple[dict[str, int], list[str]]:
    """``fit``'s options after the submission-time overrides in ``env``, and one log line per
    override. Precedence: option given at submission > value in the code > default.

    Raises ValueError naming the variable when a value is not a whole number within range.
    """
    values, notes = dict(given), []
    for name, (var, low) in ENV_OPTIONS.items():
        raw = env.get(var)
        if raw is None or name not in given:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
        if value is None or value < low:
            rule = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise ValueError(f"{var} must be {rule}, got {raw!r}")
        values[name] = value
        if value != given[name]:
            notes.append(f"{name}={value} from {var} overrides fit({name}={given[name]!r})")
    return values, notes


def check_lr_scheduler(lr_scheduler: Any, optimizer: torch.optim.Optimizer, interval: str) -> Any:
    """The scheduler of ``optimizer`` that ``lr_scheduler`` stands for (an instance, or a
    factory called with the optimizer), or None; ValueError naming the argument on bad input."""
    if interval not in LR_SCHEDULER_INTERVALS:
        raise ValueError(f"lr_scheduler_interval must be 'epoch' or 'step', got {interval!r}")
    if lr_scheduler is None:
        return None
    is_factory = isinstance(lr_scheduler, type) or not hasattr(lr_scheduler, "state_dict")
    if is_factory:
        if not callable(lr_scheduler):
            raise ValueError(
                "lr_scheduler must be a torch.optim.lr_scheduler scheduler or a function of "
                f"the optimizer returning one, got {type(lr_scheduler).__name__}"
            )
        lr_scheduler = lr_scheduler(optimizer)
    for name in ("step", "state_dict", "load_state_dict"):
        if not callable(getattr(lr_scheduler, name, None)):
            raise ValueError(
                f"lr_scheduler must have {name}() (a torch.optim.lr_scheduler scheduler), "
                f"got {type(lr_scheduler).__name__}"
            )
    if getattr(lr_scheduler, "optimizer", optimizer) is not optimizer:
        raise ValueError("lr_scheduler schedules another optimizer than the one given")
    if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError(
            "lr_scheduler: ReduceLROnPlateau needs a metric at each step; call its "
            "step(logs['val_loss']) from a callback's on_epoch_end instead"
        )
    return lr_scheduler


def resolve_device(requested: str | torch.device = "auto") -> torch.device:
    """The device this process trains on (see ``group.select_device``)."""
    name = select_device(
        requested,
        in_job="EDT_STORE" in os.environ,
        visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cuda_available=torch.cuda.is_available(),
    )
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _check_dataset(name: str, ds: object) -> Dataset[Any]:
    if not isinstance(ds, Dataset) or isinstance(ds, IterableDataset):
        raise ValueError(
            f"datasets must return map-style torch.utils.data.Dataset objects; "
            f"{name} is {type(ds).__name__}"
        )
    try:
        n = len(ds)  # type: ignore[arg-type]
    except TypeError as e:
        raise ValueError(f"datasets: {name} must define __len__") from e
    if n < 1:
        raise ValueError(f"datasets: {name} must not be empty")
    return ds


class Trainer:
    """Trains ``model`` with a constant effective batch size on however many workers it gets."""

    def __init__(
        self,
        model: nn.Module,
        datasets: Callable[[], tuple[Dataset[Any], Dataset[Any]]],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer: torch.optim.Optimizer
        | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
        metrics: Mapping[str, MetricFn] | Sequence[MetricFn] | None = None,
        lr_scheduler: Any = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        callbacks: Sequence[Callback] | None = None,
        device: str | torch.device = "auto",
        lr_scheduler_interval: str = "epoch",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(datasets):
            raise ValueError("datasets must be a function returning (train_dataset, test_dataset)")
        if not callable(loss_fn):
            raise ValueError("loss_fn must be callable as loss_fn(output, target)")
        if not isinstance(optimizer, torch.optim.Optimizer) and not callable(optimizer):
            raise ValueError("optimizer must be a torch.optim.Optimizer or a factory of one")
        self.device = resolve_device(device)
        if self.device.type == "cuda" and "EDT_STORE" in os.environ:
            torch.cuda.set_device(self.device)  # a worker's one GPU; NCCL wants it current
        self.model = model.to(self.device)
        self.datasets_fn = datasets
        self.loss_fn = loss_fn
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
        self.epoch = self.step = self.global_step = 0
        self.ckpt_seen = 0
        self.rank, self.world_size, self.generation = 0, 1, 1
        self.history: dict[str, list[Any]] = {"train": [], "val": []}
        self.events: EventLog | None = None
        self.left = False
        self._has_state = False
        self._joined_late = False  # this worker joined a job that had trained before
        self._hp = hyper.Tracker(self.optimizer)
        self._hp_agreed: hyper.Snapshot | None = None  # the last agreed hyperparameters
        self._hp_trace: list[hyper.Snapshot] = []  # after each piece of user code since then
        self._hp_now: hyper.Snapshot = ()  # this worker's, as it entered the step's reduction

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything a joiner or a checkpoint needs to continue exactly."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "hyperparameters": {"agreed": self._agreed_hp(), "trace": list(self._hp_trace)},
            "cursor": {
                "epoch": self.epoch,
                "step": self.step,
                "global_step": self.global_step,
                "ckpt_seen": self.ckpt_seen,
            },
            "rng": torch.get_rng_state(),
            "cuda_rng": (
                torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
            ),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state made by :meth:`state` (from a peer or a checkpoint)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        # a joiner takes the sender's pending changes as its own; a state from before the
        # agreement existed: its own hyperparameters are the agreed ones
        hp = state.get("hyperparameters") or {}
        self._hp_agreed = hp.get("agreed") or self._hp.snapshot()
        self._hp_trace = list(hp.get("trace", []))
        c = state["cursor"]
        self.epoch, self.step = int(c["epoch"]), int(c["step"])
        self.global_step, self.ckpt_seen = int(c["global_step"]), int(c["ckpt_seen"])
        torch.set_rng_state(state["rng"].cpu())
        cuda_rng = state.get("cuda_rng")
        if cuda_rng is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(cuda_rng.cpu(), self.device)

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
    ) -> dict[str, list[Any]]:
        """Train for ``epochs`` epochs; returns per-step and per-epoch metrics.

        ``checkpoint_every`` is in epochs (0: none) and ``validate_every`` too. In a job, a
        worker dropped by a shrink exits here with status 0. ``EDT_EPOCHS``,
        ``EDT_EFFECTIVE_BATCH_SIZE`` and ``EDT_CHECKPOINT_EVERY``, when set, win over the
        arguments of the same name.
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
        self.train_ds = _check_dataset("train_dataset", got[0])
        self.test_ds = _check_dataset("test_dataset", got[1])
        self.epochs, self.batch_size, self.seed = epochs, effective_batch_size, seed
        self.max_gpus, self.checkpoint_every, self.validate_every = (
            max_gpus,
            checkpoint_every,
            validate_every,
        )
        ctx = JobContext.from_env()
        result = result_dir or (ctx.result_dir if ctx else None)
        self.result_dir = Path(result) if result else None
        self.group: ElasticGroup | SoloGroup = (
            ElasticGroup(ctx, self.device) if ctx else SoloGroup(self.device)
        )
        self.events = EventLog(ctx.log_dir if ctx else None, self.group.worker_id)
        self._hp_agreed, self._hp_trace = None, []
        for note in notes:
            self.events.info(note)
        self._setup_grads()
        try:
            self._run()
        except LeaveJob:
            self.left = True
            self.events.emit("left", generation=self.group.generation)
        finally:
            for hook in self._grad_hooks:
                hook.remove()
            self.group.close()
            self.events.close()
        if self.left:
            raise SystemExit(0)
        return self.history

    # -- internals -----------------------------------------------------------------------------
    def _setup_grads(self) -> None:
        total = sum(p.numel() for p in self.params)
        p0 = self.params[0]
        self.flat = torch.zeros(total, dtype=p0.dtype, device=p0.device)
        self.grad_views, spans, off = [], [], 0
        for p in self.params:
            view = self.flat[off : off + p.numel()].view_as(p)
            p.grad = view
            self.grad_views.append(view)
            spans.append((off, off + p.numel()))
            off += p.numel()
        # the exact sum over workers; each parameter's hook lets it start during backward
        bucket_bytes = int(os.environ.get("EDT_BUCKET_BYTES", BUCKET_BYTES))
        self.exchange = OrderedExchange(self.group, self.flat, spans, bucket_bytes)
        self._grad_hooks = [
            p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)
        ]
        self.buffers = list(self.model.buffers())
        self.n_metrics = len(self.metrics)
        self.n_buf = sum(b.numel() for b in self.buffers)
        self.n_sum = 1 + self.n_metrics + self.n_buf
        self.aux_size = self.n_sum + len(CONTROL)
        # refilled every step: pageable host memory, which a copy to the device has read by the
        # time copy_ returns, even with non_blocking
        self._control = torch.empty(len(CONTROL), dtype=torch.float64)

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        view = self.grad_views[index]

        def ready(param: torch.Tensor) -> None:
            self._into_flat(param, view)
            self.exchange.grad_ready(index)

        return ready

    @staticmethod
    def _into_flat(p: torch.Tensor, view: torch.Tensor) -> None:
        """Make ``p.grad`` its view of ``flat`` again, keeping its value.

        A parameter's first micro-batch of a part gets a fresh gradient from autograd (its
        ``grad`` was None), which is copied here: cheaper than zeroing ``flat`` and adding into
        it, and the same value. A gradient that user code replaced is copied too; no gradient at
        all (the parameter took no part in the loss) is zero.
        """
        if p.grad is None:
            view.zero_()
        elif p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
        else:
            return
        p.grad = view

    def _emit(self, kind: str, **fields: Any) -> None:
        assert self.events is not None
        self.events.emit(kind, **{"generation": self.generation, "rank": self.rank, **fields})

    def _run(self) -> None:
        g = self.group
        if isinstance(g, ElasticGroup):
            g.signal_ready()
            gen, members = g.next_membership(after=0)
            self._form(gen, members, time.monotonic())
        else:
            self._resume_from_disk()
        self._hp_agreed = self._agreed_hp()  # before any callback can change them
        steps = part.steps_per_epoch(len(self.train_ds), self.batch_size)  # type: ignore[arg-type]
        self._emit(
            "train_begin",
            epoch=self.epoch,
            global_step=self.global_step,
            epochs=self.epochs,
            effective_batch_size=self.batch_size,
            micro_batch_size=self.micro_batch_size,
            steps_per_epoch=steps,
            device=str(self.device),
        )
        received = self._hp_agreed, list(self._hp_trace)
        for cb in self.callbacks:
            self._marked(cb.on_train_begin)
        if self._joined_late:  # the job began before us: our on_train_begin changes nothing
            self._hp_agreed, self._hp_trace = received
            hyper.apply(self.optimizer, self._hp_trace[-1] if self._hp_trace else received[0])
        perm_epoch, perm = -1, []
        held = -1
        while self.epoch < self.epochs:
            if self.step == steps:
                self._guarded(self._end_epoch)
                continue
            if perm_epoch != self.epoch:
                if self.step == 0:
                    for cb in self.callbacks:
                        self._marked(cb.on_epoch_begin, self.epoch)
                perm_epoch = self.epoch
                perm = part.epoch_permutation(len(self.train_ds), self.seed, self.epoch)  # type: ignore[arg-type]
            ctl = g.control()
            if ctl["hold"] == self.global_step and held != self.global_step and g.elastic:
                held = self.global_step
                self._emit("held", global_step=self.global_step)
                g.hold(self.global_step)  # type: ignore[union-attr]
                ctl = g.control()
            t0 = time.monotonic()
            try:
                tot = self._train_step(perm, ctl)
                host = tot.cpu()  # one copy to the host per step (the same on a CPU worker)
                agreed = dict(zip(CONTROL, host[self.n_sum :].tolist(), strict=True))
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

    def _train_step(self, perm: list[int], ctl: Mapping[str, int]) -> torch.Tensor:
        batch = part.global_batch(perm, self.step, self.batch_size)
        mbs = part.micro_batches(batch, self.micro_batch_size)
        lo, hi = part.deal(len(mbs), self.world_size)[self.rank]
        self.model.train()
        start = [b.detach().clone() for b in self.buffers]
        self._start_buffers = start
        self.exchange.start(len(mbs))
        extras: list[torch.Tensor] = []
        aux_parts = []
        for j in range(lo, hi):
            if j > lo:
                for b, b0 in zip(self.buffers, start, strict=True):
                    b.copy_(b0)
                if self.rank > 0:  # keep each micro-batch separate to fold in order later
                    extras.append(self.flat.clone())
            if j == lo or self.rank > 0:  # a new part: autograd hands out fresh gradients
                for p in self.params:
                    p.grad = None
            weight = len(mbs[j]) / len(batch)
            self._seed(part.micro_batch_seed(self.seed, self.epoch, self.step, j))
            out, target, loss = self._forward(mbs[j], self.train_ds)
            if j == hi - 1:
                self.exchange.arm(extras)  # the last backward sends buckets as they are done
            (loss * weight).backward()
            self._check_grads()
            aux = torch.empty(self.aux_size, dtype=torch.float64, device=self.device)
            aux[0] = loss.detach().double() * weight
            for i, fn in enumerate(self.metrics.values()):
                value = torch.as_tensor(fn(out.detach(), target), device=self.device)
                aux[1 + i] = value.double() * weight
            if self.buffers:
                flat_b = torch.cat([b.detach().double().reshape(-1) for b in self.buffers])
                aux[1 + self.n_metrics : self.n_sum] = flat_b * weight
            aux_parts.append(aux)
        # the hyperparameters as the step ends: a custom step hook may have changed them too
        self._hp_now = self._hp.snapshot()
        fp = self._hp.fingerprint()
        self._control.numpy()[:] = (ctl["gen"], ctl["ckpt"], fp, -fp)  # exact: below 2**53
        if not aux_parts:  # no micro-batch here this step: the control values still count
            aux_parts.append(torch.zeros(self.aux_size, dtype=torch.float64, device=self.device))
        aux_parts[0][self.n_sum :].copy_(self._control, non_blocking=True)  # no device wait
        return self.group.reduce(len(mbs), self.exchange, aux_parts, self.aux_size, self.n_sum)

    def _marked(self, fn: Callable[..., object], *args: Any) -> None:
        """Run user code, then note the hyperparameters it left: the trace that
        ``hyper.agree`` reads when workers differ (usually a comparison per param group)."""
        fn(*args)
        snap = self._hp.snapshot()
        if snap != (self._hp_trace[-1] if self._hp_trace else self._hp_agreed):
            self._hp_trace.append(snap)

    def _agreed_hp(self) -> hyper.Snapshot:
        if self._hp_agreed is None:
            return self._hp.snapshot()
        return self._hp_agreed

    def _agree_hyperparameters(self, agreed: Mapping[str, float]) -> None:
        """Make every worker's hyperparameters the same before the optimizer step (the rule is
        in ``hyper.py``); equal fingerprints, the common case, need no communication.
        ``agreed``: the step's control values, their maximum over the workers."""
        if agreed["hp_fingerprint"] == -agreed["minus_hp_fingerprint"]:  # highest == lowest
            self._hp_agreed, self._hp_trace = self._hp_now, []
            return
        # a failed exchange keeps the trace: the step is redone
        traces = self.group.all_gather_object([*self._hp_trace, self._hp_now])
        self._hp_trace = []
        try:
            agreed = hyper.agree(self._agreed_hp(), traces)  # type: ignore[arg-type]
        except hyper.HyperparameterConflict as e:
            self._emit("hyperparameter_conflict", error=str(e), global_step=self.global_step)
            raise
        changed = hyper.apply(self.optimizer, agreed)
        self._hp_agreed = agreed
        if changed:
            self._emit("hyperparameters", global_step=self.global_step, changed=changed)

    def _seed(self, seed: int) -> None:
        # torch.manual_seed also walks every accelerator backend (~1 ms); seed what is used.
        torch.default_generator.manual_seed(seed)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(seed)

    def _forward(
        self, indices: list[int], ds: Dataset[Any]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        data = self.collate_fn([ds[i] for i in indices])
        *inputs, target = data
        device = self.device
        inputs = [
            x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x for x in inputs
        ]
        if isinstance(target, torch.Tensor):
            target = target.to(device, non_blocking=True)
        out = self.model(*inputs)
        return out, target, self.loss_fn(out, target)

    def _check_grads(self) -> None:
        # After backward every gradient lives in ``flat`` (the hooks did it for parameters that
        # got one), so the flat buffer stays the single source of truth.
        for p, view in zip(self.params, self.grad_views, strict=True):
            self._into_flat(p, view)

    def _commit(
        self, tot: torch.Tensor, host: torch.Tensor, agreed: Mapping[str, float], t0: float
    ) -> None:
        self.optimizer.step()
        if self.lr_scheduler is not None and self.lr_scheduler_interval == "step":
            self._marked(self.lr_scheduler.step)
        if self.buffers:
            flat_b = tot[1 + self.n_metrics : self.n_sum]
            off = 0
            for b in self.buffers:
                vals = flat_b[off : off + b.numel()].view_as(b)
                b.copy_(vals if b.is_floating_point() else vals.round())
                off += b.numel()
        loss = float(host[0])
        logs: dict[str, Any] = {
            "epoch": self.epoch,
            "step": self.step,
            "global_step": self.global_step,
            "loss": loss,
            **{k: float(host[1 + i]) for i, k in enumerate(self.metrics)},
        }
        elapsed = time.monotonic() - t0
        batch = min(self.batch_size, len(self.train_ds) - self.step * self.batch_size)  # type: ignore[arg-type]
        self.step += 1
        self.global_step += 1
        self.history["train"].append(logs)
        self._emit(
            "step",
            **logs,
            world_size=self.world_size,
            samples=batch,
            step_s=elapsed,
            samples_per_s=batch / elapsed if elapsed > 0 else None,
        )
        for cb in self.callbacks:
            self._marked(cb.on_step_end, logs["step"], logs)
        agreed_ckpt = int(agreed["checkpoint_requests"])
        if agreed_ckpt > self.ckpt_seen:
            self.ckpt_seen = agreed_ckpt
            self._checkpoint("request")
        agreed_gen = int(agreed["generation"])
        if agreed_gen > self.generation:
            assert isinstance(self.group, ElasticGroup)
            t_end = time.monotonic()
            members = self.group.members_of(agreed_gen)
            if self.group.worker_id not in members:
                raise LeaveJob
            self._form(agreed_gen, members, t_end)

    def _end_epoch(self) -> None:
        logs: dict[str, Any] = {"epoch": self.epoch}
        if self.validate_every and (self.epoch + 1) % self.validate_every == 0:
            logs.update(self._validate())
        if self.lr_scheduler is not None and self.lr_scheduler_interval == "epoch":
            self._marked(self.lr_scheduler.step)
        self.history["val"].append(logs)
        self._emit("epoch", **logs, world_size=self.world_size)
        for cb in self.callbacks:
            self._marked(cb.on_epoch_end, self.epoch, logs)
        self.epoch += 1
        self.step = 0
        if self.checkpoint_every and self.epoch % self.checkpoint_every == 0:
            self._checkpoint("epoch")
        if self.epoch == self.epochs:
            self._finish(logs)

    def _validate(self) -> dict[str, float]:
        n = len(self.test_ds)  # type: ignore[arg-type]
        mbs = part.micro_batches(range(n), self.micro_batch_size)  # type: ignore[arg-type]
        lo, hi = part.deal(len(mbs), self.world_size)[self.rank]
        size = 2 + self.n_metrics
        parts = []
        self.model.eval()
        with torch.no_grad():
            for j in range(lo, hi):
                self._seed(part.micro_batch_seed(self.seed, self.epoch, -1, j))
                out, target, loss = self._forward(mbs[j], self.test_ds)
                k = len(mbs[j])
                aux = torch.empty(size, dtype=torch.float64, device=self.device)
                aux[0] = loss.double() * k
                for i, fn in enumerate(self.metrics.values()):
                    aux[1 + i] = torch.as_tensor(fn(out, target), device=self.device).double() * k
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
                to_cpu(self.model.state_dict()),
                self.result_dir / "model" / "model_epoch_final.pth",
            )
            self._emit("model_saved", path=str(path))
        self._emit("train_end", global_step=self.global_step)
        for cb in self.callbacks:
            cb.on_train_end(logs)

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

    # -- elastic membership --------------------------------------------------------------------
    def _form(self, gen: int, members: tuple[str, ...], t_start: float) -> None:
        """Join generation ``gen`` and make every member's state equal the most advanced one."""
        g = self.group
        assert isinstance(g, ElasticGroup)
        while True:
            try:
                g.form(gen, members)
                self.rank, self.world_size, self.generation = g.rank, g.world_size, gen
                views = g.all_gather_ints([self.global_step, int(self._has_state)])
                holders = [r for r, (_, h) in enumerate(views) if h]
                if not holders:  # a fresh job: rank 0 starts it, from a checkpoint if any
                    if self.rank == 0:
                        self._resume_from_disk()
                    src, best = 0, -1
                else:
                    best = max(views[r][0] for r in holders)
                    src = min(r for r in holders if views[r][0] == best)
                receivers = [
                    r for r, (s, h) in enumerate(views) if r != src and (not h or s != best)
                ]
                sent = 0
                if self.rank == src:
                    state = self.state()
                    for r in receivers:
                        sent += g.send_state(state, r)
                elif self.rank in receivers:
                    self.load_state(g.recv_state(src))  # type: ignore[arg-type]
                    self.flat.zero_()
                if not self._has_state:  # our first group: did the job run before us?
                    self._joined_late = bool(holders)
                self._has_state = True
                break
            except GroupError as e:
                self._emit("form_failed", error=str(e)[:300])
                g.report_failure()
                g.destroy()
                gen, members = g.next_membership(after=gen)
        pause = time.monotonic() - t_start
        info = {
            "generation": gen,
            "world_size": self.world_size,
            "members": list(members),
            "pause_s": pause,
            "state_from": src,
            "receivers": receivers,
            "bytes_sent": sent,
            "global_step": self.global_step,
            "backend": g.backend,
        }
        self._emit("generation", **info)
        if self.rank == 0:
            g.report_formed(info)

    def _recover(self, error: Exception) -> None:
        """Drop the half-done step and re-form without the failed peer."""
        g = self.group
        assert isinstance(g, ElasticGroup)
        t0 = time.monotonic()
        for b, b0 in zip(self.buffers, getattr(self, "_start_buffers", []), strict=False):
            b.copy_(b0)
        self._emit("failure", error=str(error)[:300], global_step=self.global_step)
        g.report_failure()
        self.exchange.drain()  # its thread must not post into the next generation's group
        g.destroy()
        gen, members = g.next_membership(after=self.generation)
        self._form(gen, members, t0)
