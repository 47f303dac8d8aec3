"""The options given at submission (``%%edt_submit --epochs 3 --effective-batch-size 64``) reach a
job's program as environment variables: their names, in one place for the submitting side (the
magics, the server's spec checks) and the reading side (the Trainer, the integrations).
Standard library only, so that the server imports it without torch."""

from __future__ import annotations

__all__ = ["CHECKPOINT_EVERY_ENV", "EFFECTIVE_BATCH_ENV", "EPOCHS_ENV", "FIT_OPTION_ENV"]

EPOCHS_ENV = "EDT_EPOCHS"
#: The global batch a job keeps at every size (the runtime's Trainer and the integrations).
EFFECTIVE_BATCH_ENV = "EDT_EFFECTIVE_BATCH_SIZE"
CHECKPOINT_EVERY_ENV = "EDT_CHECKPOINT_EVERY"

#: ``Trainer.fit``'s argument -> (its variable, the lowest value allowed)
FIT_OPTION_ENV = {
    "epochs": (EPOCHS_ENV, 1),
    "effective_batch_size": (EFFECTIVE_BATCH_ENV, 1),
    "checkpoint_every": (CHECKPOINT_EVERY_ENV, 0),
}
