"""A Hugging Face program as a user writes it for torchrun, plus `prepare_trainer`: a GPT-2 of
one layer built from its config, trained on made-up tokens for two epochs of 8 steps (64
sequences, 4 per device, global batch 8).

What the test controls, by environment: ``TEST_OUT`` (where the final parameters go once
``train()`` has returned), ``TEST_ACCUMULATION`` (the program's own accumulation, 1 unless
given), ``TEST_HOLD_AT`` and ``TEST_HOLD_RELEASE`` (wait at the end of those optimizer steps, comma
separated, until that file exists, a "{step}" in its name standing for the step, writing
``held-<rank>`` beside it first), so that a test signals workers at a known step without racing
them; ``TEST_SIGTERM_AT`` (SIGTERM itself at the end of that step); ``TEST_SAMPLE_S`` (seconds
to read a sample, so that more workers train faster even on a machine of few cores);
``TEST_EPOCHS`` (2 unless given).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from jupyter_edt.integrations.transformers import prepare_trainer

SAMPLES, EVAL_SAMPLES, SEQ, VOCAB = 64, 16, 16, 64
EPOCHS, PER_DEVICE = int(os.environ.get("TEST_EPOCHS", "2")), 4
HOLD_LIMIT_S = 60.0
SAMPLE_S = float(os.environ.get("TEST_SAMPLE_S", "0"))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        time.sleep(SAMPLE_S)  # reading a sample: work that more workers share
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Hold(TrainerCallback):
    """The test's instrument, not part of the program: pauses at the end of a step."""

    def __init__(self, step: int, release: Path) -> None:
        self.step, self.release = step, release

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if state.global_step != self.step:
            return
        (self.release.parent / f"held-{args.process_index}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not self.release.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"never released at step {self.step}")
            time.sleep(0.01)


class SignalSelf(TrainerCallback):
    """The test's instrument: SIGTERM to this process at the end of a step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def build() -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=1,
        n_head=2,
        n_embd=16,
        vocab_size=VOCAB,
        n_positions=SEQ,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    args = TrainingArguments(
        per_device_train_batch_size=PER_DEVICE,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=int(os.environ.get("TEST_ACCUMULATION", "1")),
        num_train_epochs=EPOCHS,
        learning_rate=1e-2,
        logging_steps=1,
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    callbacks: list[TrainerCallback] = []
    for hold_at in filter(None, os.environ.get("TEST_HOLD_AT", "").split(",")):
        # one release per step: a "{step}" in the path names it
        release = os.environ["TEST_HOLD_RELEASE"].replace("{step}", hold_at)
        callbacks.append(Hold(int(hold_at), Path(release)))
    if os.environ.get("TEST_SIGTERM_AT"):
        callbacks.append(SignalSelf(int(os.environ["TEST_SIGTERM_AT"])))
    return Trainer(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=Tokens(SAMPLES, 1),
        eval_dataset=Tokens(EVAL_SAMPLES, 2),
        callbacks=callbacks,
    )


def main() -> Trainer:
    torch.set_num_threads(1)
    trainer = prepare_trainer(build())
    trainer.train()
    # the user's code after training: it must run once, when training is over
    if trainer.is_world_process_zero() and os.environ.get("TEST_OUT"):
        params = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        torch.save(params, Path(os.environ["TEST_OUT"]) / "final.pt")
    print("training over", flush=True)
    return trainer


if __name__ == "__main__":
    main()
