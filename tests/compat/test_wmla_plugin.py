"""WMLA compatibility as a plugin of the core: what marks a job as an exec (a spec field the
user cannot set, or the environment markers of execs stored before it), and what the plugin
adds to a job (WMLA's names, each exec worker's own LOG_DIR, a copy of its code)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from jupyter_edt.compat.plugin import WMLAPlugin
from jupyter_edt.compat.wmla import EXEC_SURFACE, ExecInfo, exec_annotations, exec_info
from jupyter_edt.jobs.models import Job, JobSpec, SpecError
from jupyter_edt.jobs.store import JobStore
from jupyter_edt.runtime.jobdir import JobDir
from jupyter_edt.runtime.worker import WORKER_SETUP_ENV, run_setup

NATIVE = JobSpec.from_dict({"code": "print(1)", "max_gpus": 1})
EXEC = dataclasses.replace(
    NATIVE, surface=EXEC_SURFACE, annotations=exec_annotations("mnist", "--x")
)


def job(spec: JobSpec) -> Job:
    """The job's record as the store returns it, with a known id."""
    store = JobStore("sqlite://")
    record = dataclasses.replace(store.create_job("ana", spec), id="j1")
    store.close()
    return record


def test_an_exec_is_marked_by_its_surface_and_stored_execs_by_their_old_env_markers():
    assert exec_info(EXEC) == ExecInfo("mnist", "--x")
    assert exec_info(NATIVE) is None
    legacy = {**NATIVE.to_dict(), "env": {"EDT_WMLA_MODEL_DIR": "m", "EDT_WMLA_ARGS": "a"}}
    for key in ("surface", "kind", "annotations"):
        del legacy[key]  # a record stored before the fields existed
    assert exec_info(JobSpec.from_stored(legacy)) == ExecInfo("m", "a")


def test_an_exec_stored_before_jobs_had_kinds_keeps_its_surface_and_is_elastic():
    stored = {**EXEC.to_dict(), "kind": EXEC_SURFACE}
    del stored["surface"]
    spec = JobSpec.from_stored(stored)
    assert (spec.surface, spec.kind) == (EXEC_SURFACE, "elastic")
    assert exec_info(spec) == ExecInfo("mnist", "--x")


@pytest.mark.parametrize("field", ["surface", "annotations"])
def test_a_user_cannot_make_a_job_an_exec(field):
    with pytest.raises(SpecError, match="is not a job field") as caught:
        JobSpec.from_dict({"code": "x", "max_gpus": 1, field: EXEC_SURFACE})
    assert caught.value.field == field


def test_the_plugin_gives_every_job_wmlas_names_and_an_exec_its_worker_setup(tmp_path, monkeypatch):
    plugin = WMLAPlugin(tmp_path / "fabric")
    d = JobDir(tmp_path / "job")
    d.create()
    native = plugin.environment(job(NATIVE), d)
    assert native["FABRIC_HOME"] == str(tmp_path / "fabric") and native["DLI_EXECID"] == "j1"
    assert WORKER_SETUP_ENV not in native
    (d.code / "main.py").write_text("print(1)\n")
    plugin.prepare(job(EXEC), d)
    assert (tmp_path / "fabric" / "libs" / "fabric.zip").is_file()
    assert (d.result / "_submitted_code" / "mnist" / "main.py").read_text() == "print(1)\n"

    setup = plugin.environment(job(EXEC), d)[WORKER_SETUP_ENV]
    for name, value in {"RESULT_DIR": d.result, "EDT_WORKER_ID": "w3", "LOG_DIR": d.logs}.items():
        monkeypatch.setenv(name, str(value))
    run_setup(setup)  # what each worker of the exec does before its program
    assert os.environ["LOG_DIR"] == str(d.result / "log" / "w3")
    assert (d.result / "log" / "w3").is_dir()


def test_a_worker_setup_that_names_no_function_is_refused():
    with pytest.raises(ValueError, match="must name module:function, got 'nocolon'"):
        run_setup("nocolon")
