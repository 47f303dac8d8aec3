"""The integration tests' fixture: jobs whose workers never outlive the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from restartjobs import RestartJob

from jupyter_edt.launch.local import LocalLauncher


@pytest.fixture
def restart_job(
    tmp_path: Path, warm_launcher: Callable[[], LocalLauncher]
) -> Iterator[Callable[..., RestartJob]]:
    """`RestartJob`, whose workers start warm from the session's fork server and are all
    killed when the test ends."""
    made: list[RestartJob] = []

    def make(program: str, env: Mapping[str, str] = {}) -> RestartJob:
        job = RestartJob(tmp_path / f"job{len(made)}", program, env, warm_launcher)
        made.append(job)
        return job

    yield make
    for job in made:
        job.stop()
