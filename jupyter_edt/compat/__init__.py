"""Run IBM WMLA Elastic Distributed Training programs unchanged (README: "WMLA programs").

- ``fabric_model.FabricModel`` and ``callbacks`` are what such programs import (also as
  ``pyedt.*`` and from ``$FABRIC_HOME/libs/fabric.zip``, built by ``fabric_home``); they run
  on the runtime's ``Trainer`` in job workers and import torch. ``notebook``: ``train()`` in a
  kernel submits the notebook's cells as a job.
- ``wmla`` says what makes a job an exec and the per-process rules of its programs;
  ``plugin`` adds WMLA's contract to every job through the core's plugin seam
  (``jobs.plugins``), so ``jobs/`` and ``runtime/`` never import this package.
- ``formats`` (the emetrics and elog line formats), ``execargs`` (the execs ``args`` string)
  and ``execs`` (the execs facade over ``JobService``) run in the server: no torch there.
"""
