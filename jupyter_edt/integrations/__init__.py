"""Thin integrations that let programs written for torchrun run as jupyter-edt "restart" jobs.

A restart job is resized by restarting all its workers at the new size: each gets SIGTERM, a
grace period, then starts again with torchrun's environment. A program that uses one of these
integrations reports its steps and loss to the job, checkpoints at a step all its workers agree
on when asked to stop, resumes from there by itself, and keeps its global batch at every size:

- :mod:`jupyter_edt.integrations.transformers`: Hugging Face ``Trainer``;
- :mod:`jupyter_edt.integrations.lightning`: Lightning (``lightning.pytorch``).

Each module exports ``EDTCallback`` (reporting and checkpoint-on-request, usable alone) and
``prepare_trainer`` (adds the callback, resumption and the accumulation). Importing this
package imports neither framework: each module imports only its own, and the rest of
jupyter-edt none.
"""
