"""The in-memory change feed in front of the store."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_edt.jobs.feed import EventFeed
from jupyter_edt.jobs.models import JobSpec
from jupyter_edt.jobs.store import JobStore


@pytest.mark.asyncio
async def test_a_burst_wakes_subscribers_once_and_old_cursors_read_the_store(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'edt.sqlite'}")
    spec = JobSpec(code="pass", max_gpus=1)
    before = store.create_job("ana", spec)  # recorded before the feed started
    feed = EventFeed(store, keep=3)
    changed = feed.changed()
    for step in range(5):
        store.add_metrics(before["id"], [{"step": step}])
        feed.notify()
    assert not changed.is_set()  # coalesced: published once, a moment later
    await asyncio.wait_for(changed.wait(), 5)
    assert feed.changed() is not changed and not feed.changed().is_set()

    everything = store.events()
    anyone = {"visible": lambda e: True, "owner": None, "limit": 100}
    assert feed.read(after=0, **anyone) == everything  # older than memory: from the store
    newest = everything[-3:]
    assert feed.read(after=newest[0]["id"] - 1, **anyone) == newest  # from memory
    assert feed.read(after=everything[-1]["id"], **anyone) == []
    bob_only = {"visible": lambda e: e["user"] == "bob", "owner": "bob", "limit": 100}
    assert feed.read(after=newest[0]["id"] - 1, **bob_only) == []
    assert feed.read(after=0, **bob_only) == []
    store.close()
