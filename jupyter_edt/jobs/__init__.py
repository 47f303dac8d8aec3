"""Jobs: what a user submitted and where it is kept, its lifecycle, and how its processes run.

- ``models``: the submission (``JobSpec``), the stored record (``Job``), the states and their
  groups; ``store``: the records, events and metrics (SQLAlchemy), publishing every commit to
  ``feed``, the live change feed.
- ``service``: the commands (submit, change, cancel, delete), the runner's reports and the
  recovery after a restart; ``queries``: what a user may see; ``scheduler``: the scheduling
  loop that turns the policy's target into orders.
- ``protocols``: what the service and a runner know of each other; ``runner``: the runner
  that starts one driver process per job through a ``launch.Launcher``.
- ``plugins``: what an add-on (``compat/``) adds to every job; ``archives``, ``logs``,
  ``metrics`` and ``progress``: uploaded code and results, logs, the workers' metric files
  and the progress the goodput policy reads.

Nothing here imports Jupyter or tornado: the same code serves the embedded extension and a
standalone service.
"""
