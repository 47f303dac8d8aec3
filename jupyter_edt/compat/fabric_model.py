"""WMLA's ``FabricModel`` on jupyter-edt's elastic runtime (``runtime.Trainer``).

``FabricModel(model, getDatasets, loss, optimizer, ...).train(epochs, batch_size, engines)``
trains as a worker of an elastic job (started by jupyter-edt, ``EDT_STORE`` set), or in the
process itself when there is no job (a script, a test, a debugger).

Batch size: ``batch_size`` is the batch **per device**, at the job's most devices
(``engines_number``). The effective (global) batch is ``batch_size * engines_number``
samples per optimizer update and the micro-batch is ``batch_size``; both are fixed for the
whole job. So whatever number of GPUs the job holds at any moment (1 up to ``engines_number``),
every update is the one a single device would make on that global batch, and the result does
not depend on the GPU count. ``engines_number`` defaults to the job's most GPUs
(``EDT_MAX_GPUS``), or 1 outside a job.

Mapping of ``train``'s other arguments: ``validation_freq`` and ``checkpoint_freq`` are in
epochs (0: never); a checkpoint epoch writes ``model/train/model_epoch_<N>.pth`` and
``model_epoch_<N>_optimizer_state.pth`` (N counts epochs from 1) besides the runtime's resumable
``checkpoint/``; the end of training writes ``model/train/model_epoch_final.pth`` and
``model_epoch_final_optimizer_state.pth`` besides the runtime's ``model/model_epoch_final.pth``.
``num_dataloader_threads`` caps the worker's DataLoader processes, which read
its next micro-batches while it computes (its GPU's share of the node's cores decides below the
cap; none on virtual GPUs, whose workers share the CPU); ``scaleup_function`` is accepted and
never needed, since the effective batch (and
so the learning rate) does not change when the job grows. ``train(..., fn_args={...})`` is
handed to the custom hooks, ``seed=`` sets the data order's seed.

Callbacks: ``driver_logger``/``driver_logger_callback`` and ``user_callback`` run once per job
(on the worker of rank 0, which plays WMLA's driver); ``worker_logger``/``worker_logger_callback``
run on every worker. Loggers receive the train loss and accuracy (a percentage, for
classifiers: ``argmax(output) == target``) after each step, and the validation ones after
each validation.

Learning rate and other hyperparameters: ``FabricModel(..., lr_scheduler=StepLR(optimizer, 2),
lr_scheduler_interval="epoch")`` steps the scheduler after each epoch (``"step"``: after each
optimizer step) on every worker; its state moves to joiners and into checkpoints. A change to
``optimizer.param_groups`` made anywhere, a scheduler stepped in a ``user_callback`` (rank 0
only) included, reaches every worker before the next optimizer step, so the result still does
not depend on the GPU count; changes that contradict each other on different workers stop the
job with an error naming them (``runtime/hyper.py`` has the rule). A scheduler living in a
``user_callback`` keeps its own state on rank 0: it is not moved, so it starts over should the
job ever lose the worker of rank 0; the ``lr_scheduler`` argument has no such limit.

Custom hooks (each on one micro-batch, on the worker's device):

- ``fn_batch_collate(samples) -> (features, labels)``: the collate function.
- ``fn_step_train(model, data, eva, train_loader, fn_args) -> (acc, loss)``: ``data`` is
  ``(features, labels)``; it does ``zero_grad()`` and ``backward()`` of the micro-batch's mean
  loss, never ``optimizer.step()``. The runtime takes the gradients it left, weights them by the
  micro-batch's share of the global batch, and sums them across workers in a fixed order, as
  for built-in steps. ``eva`` has ``loss_function`` and ``accuracy(output, target)``;
  ``train_loader`` is a DataLoader over the train set in micro-batches.
- ``fn_test(model, test_iter, fn_args) -> loss`` (or ``(loss, acc)``): ``test_iter`` yields one
  micro-batch of the test set; the runtime averages over the whole set.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..runtime.batches import to_device
from ..runtime.resources import default_num_workers
from ..runtime.state import atomic_save, to_cpu
from ..runtime.trainer import Callback as RuntimeCallback
from ..runtime.trainer import Trainer, check_lr_scheduler
from .callbacks import uses_dict_form

__all__ = ["Evaluator", "FabricModel", "accuracy"]


def accuracy(output: torch.Tensor, target: Any) -> torch.Tensor:
    """Percentage of rows whose arg-max is the target; 0 where that means nothing."""
    if output.dim() == 0:  # a custom hook's own accuracy, passed through
        return output
    if (
        not isinstance(target, torch.Tensor)
        or output.dim() != 2
        or target.dim() != 1
        or target.is_floating_point()
        or len(target) != len(output)
    ):
        return torch.zeros((), dtype=torch.float64, device=output.device)
    return (output.argmax(1) == target).double().mean() * 100.0


class Evaluator:
    """The ``eva`` argument of ``fn_step_train``."""

    def __init__(self, loss_function: Callable[..., Any]) -> None:
        self.loss_function = loss_function

    @staticmethod
    def accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
        return float(accuracy(output.detach(), target))


def _as_list(name: str, value: Any, needs: str) -> list[Any]:
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not hasattr(item, needs):
            raise ValueError(
                f"{name} must be a callbacks object with {needs}() (or a list of them), "
                f"got {type(item).__name__}"
            )
    return items


def _metric_fns(metrics: Any) -> dict[str, Callable[[torch.Tensor, Any], Any]]:
    fns: dict[str, Callable[[torch.Tensor, Any], Any]] = {"accuracy": accuracy}
    if metrics is None:
        return fns
    if isinstance(metrics, Mapping):
        items = list(metrics.items())
    elif isinstance(metrics, list | tuple):
        items = [
            (m if isinstance(m, str) else getattr(m, "__name__", f"metric{i}"), m)
            for i, m in enumerate(metrics)
        ]
    else:
        raise ValueError("metrics must be a list of metric functions or names, or a dict")
    for name, fn in items:
        if isinstance(fn, str):
            if fn.lower() not in ("accuracy", "acc"):
                raise ValueError(f"metrics: unknown metric name {fn!r} (known: 'accuracy')")
            continue
        if not callable(fn):
            raise ValueError(f"metrics: {name!r} is not callable as fn(output, target)")
        fns[str(name)] = _skip_hook_outputs(fn)
    return fns


MetricFn = Callable[[torch.Tensor, Any], Any]


def _skip_hook_outputs(fn: MetricFn) -> MetricFn:
    def metric(output: torch.Tensor, target: Any) -> Any:
        if output.dim() == 0:  # a custom hook ran: there is no model output to measure
            return torch.zeros((), dtype=torch.float64, device=output.device)
        return fn(output, target)

    metric.__name__ = getattr(fn, "__name__", "metric")
    return metric


def _whole(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


class FabricModel:
    """A WMLA EDT model: train it elastically with ``train(epochs, batch_size, engines)``."""

    def __init__(
        self,
        model: nn.Module,
        datasets_function: Callable[[], tuple[Any, Any]],
        loss_function: Callable[..., Any],
        optimizer: torch.optim.Optimizer,
        metrics: Any = None,
        worker_logger: Any = None,
        driver_logger: Any = None,
        worker_logger_callback: Any = None,
        driver_logger_callback: Any = None,
        user_callback: Any = None,
        fn_step_train: Callable[..., Any] | None = None,
        fn_test: Callable[..., Any] | None = None,
        fn_batch_collate: Callable[[list[Any]], Any] | None = None,
        enable_onnx: bool = False,
        save_to_onnx: bool = False,
        lr_scheduler: Any = None,
        lr_scheduler_interval: str = "epoch",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(datasets_function):
            raise ValueError(
                "datasets_function must be a function returning (train_dataset, test_dataset)"
            )
        if not callable(loss_function):
            raise ValueError("loss_function must be callable as loss_function(output, target)")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        for name, fn in (
            ("fn_step_train", fn_step_train),
            ("fn_test", fn_test),
            ("fn_batch_collate", fn_batch_collate),
        ):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be a function, got {type(fn).__name__}")
        for name, flag in (("enable_onnx", enable_onnx), ("save_to_onnx", save_to_onnx)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        if isinstance(lr_scheduler, type) or not hasattr(lr_scheduler, "state_dict"):
            if lr_scheduler is not None and not callable(lr_scheduler):
                raise ValueError(
                    "lr_scheduler must be a torch.optim.lr_scheduler scheduler or a function of "
                    f"the optimizer returning one, got {type(lr_scheduler).__name__}"
                )
            check_lr_scheduler(None, optimizer, lr_scheduler_interval)  # a factory runs later
        else:
            check_lr_scheduler(lr_scheduler, optimizer, lr_scheduler_interval)
        self.model = model
        self.datasets_function = datasets_function
        self.loss_function = loss_function
        self.optimizer = optimizer
        self.metrics = _metric_fns(metrics)
        self.driver_loggers = _as_list(
            "driver_logger", driver_logger, "log_train_metrics"
        ) + _as_list("driver_logger_callback", driver_logger_callback, "log_train_metrics")
        self.worker_loggers = _as_list(
            "worker_logger", worker_logger, "log_train_metrics"
        ) + _as_list("worker_logger_callback", worker_logger_callback, "log_train_metrics")
        self.user_callbacks = _as_list("user_callback", user_callback, "on_epoch_end")
        self.fn_step_train = fn_step_train
        self.fn_test = fn_test
        self.fn_batch_collate = fn_batch_collate
        self.enable_onnx = enable_onnx or save_to_onnx
        self.lr_scheduler = lr_scheduler
        self.lr_scheduler_interval = lr_scheduler_interval
        self.history: dict[str, list[Any]] | None = None
        self.job: Any = None  # the submitted job, in a notebook

    def get_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer

    def get_loss_function(self) -> Callable[..., Any]:
        return self.loss_function

    def train(
        self,
        epoch_number: int,
        batch_size: int,
        engines_number: int | None = None,
        num_dataloader_threads: int = 4,
        validation_freq: int = 1,
        checkpoint_freq: int = 0,
        scaleup_function: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, list[Any]] | None:
        """Train; see the module's documentation for what each argument means here.

        In a job or a plain process, returns the runtime's history (per-step and per-epoch
        metrics). In a notebook kernel (no job around), submits the notebook's code as a job,
        shows its progress until it ends and returns None (see :meth:`download`).
        """
        _whole("epoch_number", epoch_number, 1)
        _whole("batch_size", batch_size, 1)
        if engines_number is None:
            engines_number = int(os.environ.get("EDT_MAX_GPUS", "1") or 1)
        _whole("engines_number", engines_number, 1)
        _whole("num_dataloader_threads", num_dataloader_threads, 0)
        _whole("validation_freq", validation_freq, 0)
        _whole("checkpoint_freq", checkpoint_freq, 0)
        if scaleup_function is not None and not callable(scaleup_function):
            raise ValueError("scaleup_function must be a function or None")
        fn_args = kwargs.pop("fn_args", None)
        seed = _whole("seed", kwargs.pop("seed", 0), 0)
        submit = kwargs.pop("submit", None)
        if kwargs:
            warnings.warn(
                f"FabricModel.train: ignoring arguments jupyter-edt does not use: "
                f"{', '.join(sorted(kwargs))}",
                stacklevel=2,
            )
        if submit is None:
            submit = "EDT_STORE" not in os.environ and _in_kernel()
        if submit:
            from .notebook import submit_and_wait

            self.job = submit_and_wait(self, epoch_number, batch_size, engines_number)
            return None
        trainer = _HookTrainer(
            self.model,
            self.datasets_function,
            self.loss_function,
            self.optimizer,
            metrics=self.metrics,
            lr_scheduler=self.lr_scheduler,
            collate_fn=self.fn_batch_collate,
            callbacks=[_Bridge(self, checkpoint_freq, epoch_number)],
            lr_scheduler_interval=self.lr_scheduler_interval,
        )
        trainer.fn_step_train = self.fn_step_train
        trainer.fn_test = self.fn_test
        trainer.fn_args = fn_args if fn_args is not None else {}
        trainer.eva = Evaluator(self.loss_function)
        self.history = trainer.fit(
            epoch_number,
            batch_size * engines_number,
            engines_number,
            checkpoint_every=checkpoint_freq,
            micro_batch_size=batch_size,
            validate_every=validation_freq,
            seed=seed,
            result_dir=os.environ.get("RESULT_DIR") if "EDT_STORE" not in os.environ else None,
            num_workers=min(num_dataloader_threads, default_num_workers(trainer.device.type)),
        )
        return self.history

    def download(self, out_dir: str | os.PathLike[str] = ".") -> Path:
        """Save the submitted job's result directory as ``<out_dir>/<job id>.zip``."""
        if self.job is None:
            raise ValueError("download() needs a job: call train() in a notebook first")
        from .notebook import download_zip

        return download_zip(self.job, Path(out_dir))


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class _HookTrainer(Trainer):
    """``Trainer`` whose forward pass can be a WMLA custom step or test hook."""

    fn_step_train: Callable[..., Any] | None = None
    fn_test: Callable[..., Any] | None = None
    fn_args: dict[str, Any]
    eva: Evaluator
    _loader: Any = None

    def _forward(self, batch: Any) -> tuple[torch.Tensor, tuple[Any, Any]]:
        training = self.model.training and torch.is_grad_enabled()
        hook = self.fn_step_train if training else self.fn_test
        if hook is None:
            return super()._forward(batch)
        data = tuple(to_device(batch, self.device))
        if training:
            acc, loss = self._hook_step(data)
        else:
            got = hook(self.model, iter([data]), self.fn_args)
            value, accuracy = got if isinstance(got, tuple | list) else (got, 0.0)
            acc = torch.as_tensor(float(accuracy), dtype=torch.float64, device=self.device)
            loss = torch.as_tensor(float(value), dtype=torch.float64, device=self.device)
        return loss, (acc, None)  # the metrics pass the hook's own accuracy through

    def _hook_step(self, data: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the user's step; return a loss whose gradient is the gradient it computed, so
        the runtime weights and sums it like its own."""
        assert self.fn_step_train is not None
        if self._loader is None:
            from torch.utils.data import DataLoader

            self._loader = DataLoader(
                self.train_ds, batch_size=self.micro_batch_size, collate_fn=self.collate_fn
            )
        # Put the gradients back as the runtime left them (its views of `flat`, with the
        # micro-batches this worker already added, or None for a fresh part) once the user's
        # step has computed its own.
        prior = [p.grad for p in self.params]
        before = self.flat.clone()
        self.flat.zero_()
        acc, loss = self.fn_step_train(self.model, data, self.eva, self._loader, self.fn_args)
        grads = []
        for p, grad in zip(self.params, prior, strict=True):
            grads.append(torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
            p.grad = grad
        self.flat.copy_(before)
        surrogate = sum((p * g).sum() for p, g in zip(self.params, grads, strict=True))
        assert isinstance(surrogate, torch.Tensor)
        value = torch.as_tensor(float(loss), dtype=surrogate.dtype, device=self.device)
        return (
            torch.as_tensor(float(acc), dtype=torch.float64, device=self.device),
            surrogate - surrogate.detach() + value,
        )


class _Bridge(RuntimeCallback):
    """Runs the WMLA callbacks from the runtime's hooks, and writes the per-epoch models."""

    def __init__(self, fm: FabricModel, checkpoint_freq: int, epochs: int) -> None:
        self.fm = fm
        self.checkpoint_freq = checkpoint_freq
        self.epochs = epochs

    @property
    def lead(self) -> bool:
        return self.trainer.rank == 0

    def _callbacks(self) -> list[Any]:
        once = self.fm.driver_loggers + self.fm.user_callbacks
        return (once if self.lead else []) + self.fm.worker_loggers

    def _loggers(self) -> list[tuple[Any, int]]:
        once = [(cb, 0) for cb in self.fm.driver_loggers] if self.lead else []
        return once + [(cb, self.trainer.rank) for cb in self.fm.worker_loggers]

    def on_train_begin(self) -> None:
        params = {"optimizer": self.trainer.optimizer, "epochs": self.epochs}
        if self.lead and self.trainer.result_dir is not None:
            (self.trainer.result_dir / "checkpoint").mkdir(parents=True, exist_ok=True)
        for cb in self._callbacks():
            cb.params, cb.model = params, self.trainer.model
            _call(cb, "on_train_begin")

    def on_epoch_begin(self, epoch: int) -> None:
        for cb in self._callbacks():
            _call(cb, "on_epoch_begin", epoch)

    def on_step_end(self, step: int, logs: dict[str, Any]) -> None:
        done = int(logs["global_step"]) + 1
        values = {k: v for k, v in logs.items() if k not in ("epoch", "step", "global_step")}
        for cb, worker in self._loggers():
            if uses_dict_form(cb.log_train_metrics):
                cb.log_train_metrics(values, done, int(logs["epoch"]), self.trainer.world_size)
            else:
                cb.log_train_metrics(logs["loss"], logs.get("accuracy", 0.0), done, worker)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any]) -> None:
        t = self.trainer
        done = t.global_step
        if "val_loss" in logs:
            values = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
            for cb, worker in self._loggers():
                if uses_dict_form(cb.log_test_metrics):
                    cb.log_test_metrics(values, done, epoch)
                else:
                    cb.log_test_metrics(values["loss"], values.get("accuracy", 0.0), done, worker)
        save = bool(self.checkpoint_freq) and (epoch + 1) % self.checkpoint_freq == 0
        if save and self.lead and t.result_dir is not None:
            train_dir = t.result_dir / "model" / "train"
            atomic_save(to_cpu(t.model.state_dict()), train_dir / f"model_epoch_{epoch + 1}.pth")
            atomic_save(
                to_cpu(t.optimizer.state_dict()),
                train_dir / f"model_epoch_{epoch + 1}_optimizer_state.pth",
            )
        for cb in self._callbacks():
            _call(cb, "on_epoch_end", epoch, save)

    def on_train_end(self, logs: dict[str, Any]) -> None:
        t = self.trainer
        if self.lead and t.result_dir is not None:  # the layout WMLA's tutorials show
            train_dir = t.result_dir / "model" / "train"
            atomic_save(to_cpu(t.module.state_dict()), train_dir / "model_epoch_final.pth")
            atomic_save(
                to_cpu(t.optimizer.state_dict()),
                train_dir / "model_epoch_final_optimizer_state.pth",
            )
        if self.fm.enable_onnx and self.lead:
            warnings.warn("jupyter-edt saves the model as .pth, not ONNX", stacklevel=1)
        for cb in self._callbacks():
            _call(cb, "on_train_end")


def _call(cb: Any, name: str, *args: Any) -> None:
    method = getattr(cb, name, None)
    if method is None:
        return
    if name == "on_epoch_end" and not _takes(method, 2):
        args = args[:1]  # an override of the first form, without save_model
    method(*args)


def _takes(method: Any, n: int) -> bool:
    """Whether ``method`` accepts ``n`` positional arguments."""
    try:
        inspect.signature(method).bind(*range(n))
    except TypeError:
        return False
    except ValueError:
        return True
    return True
