"""The Hugging Face program `jupyter_edt.bench.restart` resizes: read as text and submitted as a
restart job's code, or run by torchrun as a script. Nothing imports it.

As a user writes it for torchrun, plus `prepare_trainer`: a GPT-2 of one layer built from its
config, made-up tokens, 4 sequences per device and a global batch of 16 (the job's
``EDT_EFFECTIVE_BATCH_SIZE``; under torchrun the program's own accumulation,
``BENCH_ACCUMULATION``), the Trainer's own checkpoint every `SAVE_STEPS` steps. In a jupyter-edt
job `prepare_trainer`'s ``train()`` resumes from the newest checkpoint; outside one it is inert,
so the program resumes from ``output_dir``'s newest, as Hugging Face's examples do.

A device's work is slept in each forward pass (`SAMPLE_S` per sample; ``bench.latency``'s MLP
sleeps too): on this CPU-only machine it lets 4 workers step faster than 2, as 4 GPUs would,
instead of sharing the same two cores, so growing pays as the service judges it.

The benchmark's instrument (`Instrument`, active only when ``BENCH_STEP_FILE`` names a file):
rank 0 appends ``<global step> <world size> <restart count> <time>`` to that file at every
optimizer step's end (the global step counted from 0, as the job's metrics count it), and
training ends at the first step at which any worker sees ``BENCH_STOP_FILE``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from jupyter_edt.integrations.transformers import prepare_trainer

SAMPLES, SEQ, VOCAB = 1024, 16, 64
PER_DEVICE = 4
EPOCHS = 1000  # far more than a run lasts: the benchmark ends it (BENCH_STOP_FILE)
SAMPLE_S = 0.01
SAVE_STEPS = 50


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def device_work(module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
    """What a GPU would spend on the batch's forward pass, slept."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    time.sleep(SAMPLE_S * (len(ids) if ids is not None else PER_DEVICE))


class Instrument(TrainerCallback):
    """The benchmark's, not the program's: the step file, and the stop file."""

    def __init__(self, steps: str, stop: str | None) -> None:
        self.steps, self.stop = Path(steps), Path(stop) if stop else None
        self.restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if args.process_index == 0:
            with self.steps.open("a") as f:
                f.write(f"{state.global_step - 1} {args.world_size} {self.restart} {time.time()}\n")
        if self.stop is None:
            return
        seen = torch.tensor([1.0 if self.stop.exists() else 0.0])
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(seen, op=dist.ReduceOp.MAX)  # every worker stops at the same step
        if seen.item() > 0:
            control.should_training_stop = True


def build() -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=1,
        n_head=2,
        n_embd=16,
        vocab_size=VOCAB,
        n_positions=SEQ,
        bos_token_id=0,
        eos_token_id=0,
    )
    args = TrainingArguments(
        per_device_train_batch_size=PER_DEVICE,
        gradient_accumulation_steps=int(os.environ.get("BENCH_ACCUMULATION", "1")),
        num_train_epochs=EPOCHS,
        learning_rate=1e-3,
        logging_steps=10,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        save_total_limit=2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        seed=0,
    )
    callbacks = []
    if os.environ.get("BENCH_STEP_FILE"):
        callbacks.append(
            Instrument(os.environ["BENCH_STEP_FILE"], os.environ.get("BENCH_STOP_FILE"))
        )
    model = GPT2LMHeadModel(config)
    model.register_forward_pre_hook(device_work, with_kwargs=True)
    return Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(SAMPLES, 1),
        callbacks=callbacks,
    )


def main() -> None:
    torch.set_num_threads(1)
    trainer = prepare_trainer(build())
    resume = None  # in a job, prepare_trainer's train() finds the newest checkpoint
    if not os.environ.get("EDT_LOG_DIR") and os.path.isdir(trainer.args.output_dir):
        resume = get_last_checkpoint(trainer.args.output_dir)  # plain torchrun: Hugging Face's
    trainer.train(resume_from_checkpoint=resume)
    print("training over", flush=True)


if __name__ == "__main__":
    main()
