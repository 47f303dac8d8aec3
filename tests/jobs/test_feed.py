"""The in-memory change feed in front of the store."""

from __future__ import annotations

import asyncio
import json

import pytest

from jupyter_edt.jobs.feed import EventFeed
from jupyter_edt.jobs.models import JobSpec, JobState
from jupyter_edt.jobs.store import JobStore


@pytest.mark.asyncio
async def test_a_burst_wakes_subscribers_once_and_old_cursors_read_the_store(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    spec = JobSpec(code="pass", max_gpus=1)
    before = store.create_job("ana", spec)  # recorded before the feed started
    feed = EventFeed(store, keep=3)
    changed = feed.changed()
    for step in range(5):
        store.add_metrics(before.id, [{"step": step}])
        feed.notify()
    assert not changed.is_set()  # coalesced: published once, a moment later
    await asyncio.wait_for(changed.wait(), 5)
    assert feed.changed() is not changed and not feed.changed().is_set()

    everything = store.events()

    def read(after: int, owner: str | None = None) -> list[dict]:
        items = feed.read(after=after, owner=owner, limit=100)
        assert all(json.loads(i.text) == i.event for i in items)
        return [i.event for i in items]

    assert read(0) == everything  # older than memory: from the store
    newest = everything[-3:]
    assert read(newest[0]["id"] - 1) == newest  # from memory
    assert read(everything[-1]["id"]) == []
    assert read(newest[0]["id"] - 1, owner="bob") == []
    assert read(0, owner="bob") == []
    store.close()


@pytest.mark.asyncio
async def test_every_committed_change_publishes_itself(tmp_path):
    """Nobody calls notify: the store announces each commit, so no change can go unpublished."""
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    feed = EventFeed(store)
    changed = feed.changed()
    job_id = store.create_job("ana", JobSpec(code="pass", max_gpus=1)).id
    await asyncio.wait_for(changed.wait(), 5)
    for change in (
        lambda: store.set_state(job_id, JobState.STARTING, "given 1 GPU(s)"),
        lambda: store.set_devices(job_id, ["g0"], "admitted"),
        lambda: store.set_elastic(job_id, "the elastic runtime started"),
        lambda: store.update_limits(job_id, priority=2),
        lambda: store.add_metrics(job_id, [{"step": 0}]),
    ):
        changed = feed.changed()
        change()
        await asyncio.wait_for(changed.wait(), 5)
    kinds = [i.event["kind"] for i in feed.read(after=0, owner=None, limit=100)]
    assert kinds == ["state", "state", "allocation", "elastic", "limits", "metrics"]
    store.close()
