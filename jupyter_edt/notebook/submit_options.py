"""The options of a submission, declared once for ``jupyter edt submit`` and ``%%edt_submit``.

Each row of :data:`SUBMIT_OPTIONS` is one option: its flag, its argparse keywords (type,
default, nargs...), its help and its range. The CLI adds the rows to its ``submit`` subcommand
(:func:`add_submit_options`); the magic adds them as its ``@argument`` decorators
(``submit_arguments`` in :mod:`.magics`), so both show the same help, defaults and ranges, and
:func:`submit_option_error` checks the ranges the same way wherever it is called. Options that
one surface alone has (the CLI's program, ``--entrypoint``) stay on that surface.

Standard library and the kernel-side client only: the CLI imports this without IPython.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..jobs.models import JOB_KINDS, PRIORITY_MAX, PRIORITY_MIN
from .client import parse_env_pairs


@dataclass(frozen=True)
class SubmitOption:
    """One option of a submission, as both surfaces declare it."""

    flag: str
    #: The help text; ``%(default)s`` is the default (argparse expands it), and
    #: ``{name_default}`` what the surface names a job by default.
    help: str
    #: Keywords for ``add_argument`` besides ``help``: ``type``, ``default``, ``nargs``...
    keywords: Mapping[str, Any] = field(default_factory=dict)
    at_least: int | None = None
    at_most: int | None = None
    #: Another option (its flag) whose value this one must not exceed.
    not_above: str | None = None

    @property
    def dest(self) -> str:
        """The attribute the parsed namespace holds it in, as argparse names it."""
        return dest_of(self.flag)

    def arguments(self, name_default: str) -> dict[str, Any]:
        """The keywords of ``add_argument`` (or IPython's ``@argument``) for this option."""
        return {**self.keywords, "help": self.help.format(name_default=name_default)}

    def error(self, args: argparse.Namespace) -> str | None:
        """What is wrong with this option's value in `args`, or None."""
        value = getattr(args, self.dest)
        if value is None:
            return None
        if self.at_most is not None and self.at_least is not None:
            if not self.at_least <= value <= self.at_most:
                return (
                    f"{self.flag} must be between {self.at_least} and {self.at_most}, got {value}"
                )
        elif self.at_least is not None and value < self.at_least:
            return f"{self.flag} must be at least {self.at_least}, got {value}"
        if self.not_above is not None:
            limit = getattr(args, dest_of(self.not_above))
            if limit is not None and value > limit:
                return f"{self.flag} ({value}) must not exceed {self.not_above} ({limit})"
        return None


def dest_of(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


SUBMIT_OPTIONS: tuple[SubmitOption, ...] = (
    SubmitOption("--name", "Job name (default: {name_default})"),
    SubmitOption(
        "--max-gpus",
        "Most GPUs the job may use (default %(default)s)",
        {"type": int, "default": 1},
        at_least=1,
    ),
    SubmitOption(
        "--min-gpus",
        "Fewest GPUs to start with (default %(default)s)",
        {"type": int, "default": 1},
        at_least=1,
        not_above="--max-gpus",
    ),
    SubmitOption(
        "--priority",
        f"{PRIORITY_MIN}..{PRIORITY_MAX}; higher first (default %(default)s)",
        {"type": int, "default": 0},
        at_least=PRIORITY_MIN,
        at_most=PRIORITY_MAX,
    ),
    SubmitOption(
        "--kind",
        "What a resize does: elastic (in place, the runtime's Trainer), restart (a torchrun "
        "program, restarted at the new size between min and max) or rigid (one size); "
        "default %(default)s",
        {"choices": JOB_KINDS, "default": "elastic"},
    ),
    SubmitOption("--epochs", "Sets EDT_EPOCHS for Trainer.fit", {"type": int}, at_least=1),
    SubmitOption(
        "--effective-batch-size",
        "Sets EDT_EFFECTIVE_BATCH_SIZE: samples per update, whatever the GPU count (a "
        "restart job's integration sets gradient accumulation from it)",
        {"type": int},
        at_least=1,
    ),
    SubmitOption(
        "--checkpoint-every",
        "Sets EDT_CHECKPOINT_EVERY: epochs between checkpoints (0: none)",
        {"type": int},
        at_least=0,
    ),
    SubmitOption("--data-dir", "Sets EDT_DATA_DIR (made absolute): where the program reads data"),
    SubmitOption(
        "--env",
        "Environment variables for the program (repeatable)",
        {"nargs": "+", "action": "append", "metavar": "K=V"},
    ),
    SubmitOption(
        "--files",
        "Files or folders to place next to the program, by their base name (repeatable)",
        {"nargs": "+", "action": "append", "metavar": "PATH"},
    ),
    SubmitOption("--wait", "Block until the job finishes, with progress", {"action": "store_true"}),
)


def add_submit_options(parser: argparse.ArgumentParser, name_default: str) -> None:
    """Add every submit option to an argparse parser, in the table's order."""
    for option in SUBMIT_OPTIONS:
        parser.add_argument(option.flag, **option.arguments(name_default))


def submit_option_error(args: argparse.Namespace) -> str | None:
    """The first option out of its range, said as a sentence; None when all are in range."""
    for option in SUBMIT_OPTIONS:
        problem = option.error(args)
        if problem is not None:
            return problem
    return None


def job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options that reach the job, as :meth:`EDTClient.submit` takes them (not the name,
    the files or the program, which each surface gives in its own way). Raises BadRequest for
    a malformed ``--env``."""
    data_dir = os.path.abspath(os.path.expanduser(args.data_dir)) if args.data_dir else None
    return {
        "max_gpus": args.max_gpus,
        "min_gpus": args.min_gpus,
        "priority": args.priority,
        "kind": args.kind,
        "env": parse_env_pairs(args.env),
        "epochs": args.epochs,
        "effective_batch_size": args.effective_batch_size,
        "checkpoint_every": args.checkpoint_every,
        "data_dir": data_dir,
    }
