"""A Lightning program as a user writes it for torchrun, plus `prepare_trainer`: a small MLP
regression on made-up data for two epochs of 8 steps (64 samples, 4 per device, global batch
8), sampled by a seeded ``DistributedSampler`` (its order does not depend on the worker count),
with Adam and a learning rate that decays each step.

What the test controls, by environment: ``TEST_OUT`` (where the final parameters go once
``fit()`` has returned), ``TEST_ACCUMULATION`` (the program's own accumulation, 1 unless given),
``TEST_HOLD_AT`` and ``TEST_HOLD_RELEASE`` (wait at the end of those optimizer steps, comma
separated, until that file exists, a "{step}" in its name standing for the step, writing
``held-<rank>`` beside it first); ``TEST_SIGTERM_AT`` (SIGTERM itself at the end of that step);
``TEST_SAMPLE_S`` (seconds to read a sample, so that more workers train faster even on a
machine of few cores); ``TEST_EPOCHS`` (2 unless given).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from jupyter_edt.integrations.lightning import prepare_trainer

SAMPLES, VAL_SAMPLES, FEATURES = 64, 16, 8
EPOCHS, PER_DEVICE = int(os.environ.get("TEST_EPOCHS", "2")), 4
HOLD_LIMIT_S = 60.0
SAMPLE_S = float(os.environ.get("TEST_SAMPLE_S", "0"))


class Slow(TensorDataset):
    """Reading a sample takes `TEST_SAMPLE_S` seconds: work that more workers share."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        time.sleep(SAMPLE_S)
        return super().__getitem__(i)


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=g)
    return Slow(x, y)


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=0.02)
        decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.1 * s))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    def _loader(self, data: TensorDataset, batch: int, shuffle: bool) -> DataLoader:
        sampler = DistributedSampler(data, self.world, self.rank, shuffle=shuffle, seed=0)
        return DataLoader(data, batch_size=batch, sampler=sampler, num_workers=0)

    def train_dataloader(self) -> DataLoader:
        return self._loader(dataset(SAMPLES, 1), PER_DEVICE, True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(dataset(VAL_SAMPLES, 2), 8, False)


class Hold(pl.Callback):
    """The test's instrument, not part of the program: pauses at the end of a step."""

    def __init__(self, step: int, release: Path) -> None:
        self.step, self.release = step, release

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.global_step != self.step or self.release.exists():
            return
        (self.release.parent / f"held-{trainer.global_rank}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not self.release.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"never released at step {self.step}")
            time.sleep(0.01)


class SignalSelf(pl.Callback):
    """The test's instrument: SIGTERM to this process at the end of a step."""

    def __init__(self, step: int) -> None:
        self.step, self.sent = step, False

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.global_step == self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)


def build() -> pl.Trainer:
    callbacks: list[pl.Callback] = []
    for hold_at in filter(None, os.environ.get("TEST_HOLD_AT", "").split(",")):
        # one release per step: a "{step}" in the path names it
        release = os.environ["TEST_HOLD_RELEASE"].replace("{step}", hold_at)
        callbacks.append(Hold(int(hold_at), Path(release)))
    if os.environ.get("TEST_SIGTERM_AT"):
        callbacks.append(SignalSelf(int(os.environ["TEST_SIGTERM_AT"])))
    under_torchrun = "WORLD_SIZE" in os.environ
    return pl.Trainer(
        accelerator="cpu",
        strategy="ddp" if under_torchrun else "auto",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")),
        max_epochs=EPOCHS,
        accumulate_grad_batches=int(os.environ.get("TEST_ACCUMULATION", "1")),
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=os.environ.get("TEST_OUT"),
        callbacks=callbacks,
    )


def main() -> pl.Trainer:
    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    model = Regression()
    trainer = prepare_trainer(build())
    trainer.fit(model)
    # the user's code after training: it must run once, when training is over
    if trainer.is_global_zero and os.environ.get("TEST_OUT"):
        params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save(params, Path(os.environ["TEST_OUT"]) / "final.pt")
    print("training over", flush=True)
    return trainer


if __name__ == "__main__":
    main()
