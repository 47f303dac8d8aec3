"""The live settings (jobs/liverules.py) over a fake runner, and how a reload reads them from
config files (serve/reload.py): a PATCH merges as RFC 7386 says and is checked whole, a change
is swapped in at once, recorded and allocated by, and administrators come from groups too.
The real service, its SIGHUP and its API are tests/serve/test_live_config.py."""

from __future__ import annotations

import pytest
from fakes import FakeRunner, fake_service

from jupyter_edt.jobs.liverules import BadSetting, LiveRules, changes_between
from jupyter_edt.jobs.models import JobSpec
from jupyter_edt.jobs.service import NotAllowed
from jupyter_edt.jobs.users import Identity
from jupyter_edt.scheduling.policy import Priority, ShareRules
from jupyter_edt.serve.app import EDTService
from jupyter_edt.serve.reload import live_values, read_config

RULES = LiveRules.parse(
    {
        "user_quotas": {"ana": 2, "bo": 1},
        "user_groups": {"ana": ["ml"]},
        "admin_users": ["root"],
    }
)


def test_a_patch_merges_objects_key_by_key_and_replaces_the_rest():
    patched = RULES.merged(
        {
            "user_quotas": {"ana": 3, "bo": None},  # null: bo's quota goes
            "admin_users": ["carol"],  # a list is replaced
            "user_groups": None,  # a null setting: back to its default
        }
    )
    assert patched.user_quotas == {"ana": 3}
    assert patched.admin_users == ("carol",)
    assert patched.user_groups == {}
    assert changes_between(RULES, patched) == [
        {"setting": "user_quotas", "key": "ana", "old": 2, "new": 3},
        {"setting": "user_quotas", "key": "bo", "old": 1, "new": None},
        {"setting": "user_groups", "key": "ana", "old": ["ml"], "new": None},
        {"setting": "admin_users", "old": ["root"], "new": ["carol"]},
    ]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"user_quotas": {"ana": 1.5}}, "user_quotas"),
        ({"group_quotas": {"ml": True}}, "group_quotas"),
        ({"user_weights": {"ana": float("inf")}}, "user_weights"),
        ({"user_groups": {"ana": "ml"}}, "user_groups"),
        ({"admin_groups": "admins"}, "admin_groups"),
        ({"policy": ""}, "policy"),
        ({"user_quotas": {"ana": 1}, "virtual_gpus": 8}, "virtual_gpus"),
        ("user_quotas", "body"),
    ],
)
def test_a_bad_setting_is_named(patch, field):
    with pytest.raises(BadSetting) as raised:
        RULES.merged(patch)
    assert raised.value.field == field


@pytest.mark.asyncio
async def test_a_change_is_checked_whole_swapped_recorded_and_allocated_by(tmp_path):
    runner = FakeRunner(tmp_path / "jobs")
    service = fake_service(tmp_path, runner, admin_users=["root"])
    job = await service.submit("ana", JobSpec(code="pass", max_gpus=4))
    await runner.started(job.id)
    await runner.goes_elastic(job.id)
    assert len(runner.running[job.id]) == 4
    with pytest.raises(NotAllowed):
        await service.change_config("ana", {"user_quotas": {"ana": 4}})
    with pytest.raises(BadSetting, match="policy"):  # nothing of it applies
        await service.change_config("root", {"user_quotas": {"ana": 1}, "policy": "no.such.Policy"})
    assert service.quota("ana").gpus is None and service.store.config_changes() == []

    record = await service.change_config("root", {"user_quotas": {"ana": 1}, "policy": "priority"})
    # the next allocation went by it: the job shrank in place to its user's new quota
    assert runner.orders[-1] == ("resize", job.id, runner.running[job.id])
    assert len(runner.running[job.id]) == 1
    assert isinstance(service.scheduler.policy, Priority)
    assert service.quota("ana").gpus == 1
    assert service.configured_rules == ShareRules(user_quotas={"ana": 1})
    assert service.store.config_changes() == [record]
    assert record is not None and (record["user"], record["source"]) == ("root", "api")
    assert await service.change_config("root", {"policy": "priority"}) is None  # no change
    assert len(service.store.config_changes()) == 1


@pytest.mark.asyncio
async def test_administrators_by_group_from_an_identity_or_the_configured_groups(tmp_path):
    service = fake_service(tmp_path, admin_users=["root"])
    service.users.note(Identity("dana", groups=("ops",)))
    assert not service.is_admin("dana") and not service.is_admin("eve")
    await service.change_config(
        "root", {"admin_groups": ["ops", "leads"], "user_groups": {"eve": ["leads"]}}
    )
    assert service.is_admin("dana") and service.is_admin("eve")
    assert service.config("dana")[0].admin_groups == ("ops", "leads")
    await service.change_config("dana", {"admin_groups": None, "admin_users": ["dana"]})
    assert service.is_admin("dana") and not service.is_admin("eve")
    assert not service.is_admin("root")  # the configured list was replaced
    with pytest.raises(NotAllowed):
        service.config("root")


def test_a_reload_reads_the_files_again_with_the_command_line_over_them(tmp_path):
    path = tmp_path / "edt_config.py"
    path.write_text(
        'c.JobHost.user_quotas = {"ana": 2}\n'
        'c.EDTService.policy = "priority"\n'
        'c.EDTService.group_quotas.update({"ml": 3})\n'
    )
    app = EDTService()
    app.parse_command_line(["--EDTService.admin_users=root"])
    app.load_config_file(str(path))
    values = live_values(app, read_config(app))
    assert values["user_quotas"] == {"ana": 2}  # a parent class's section counts
    assert values["group_quotas"] == {"ml": 3}
    assert values["policy"] == "priority"
    assert list(values["admin_users"]) == ["root"]
    path.write_text('c.EDTService.user_weights = {"ana": 2}\n')  # the other lines went
    rules = LiveRules.parse(live_values(app, read_config(app)))
    assert rules == LiveRules(user_weights={"ana": 2.0}, admin_users=("root",))
