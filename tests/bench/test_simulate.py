"""The scheduler simulator: its speed model, its calibration, and that it runs the real policy."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import pytest

from jupyter_edt.bench import simulate as sim
from jupyter_edt.bench.pollux_data import canonical_placement, default_data_dir, load_applications
from jupyter_edt.scheduling import policy

DATA = default_data_dir()
WORKLOAD_1 = DATA / "workloads" / "workload-1.csv"


@pytest.fixture(scope="module")
def apps():
    return load_applications()


def rows(app: str, name: str) -> list[dict[str, str]]:
    with (DATA / "traces" / app / name).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("app", "batch", "replicas", "expected"),
    [
        # local = ceil(B/r); k = ceil(local/max) - 1, at least 1 on one GPU when B > B0;
        # m = ceil(local/(k+1)), capped at floor(Bmax / (r (k+1)))
        ("cifar10", 2048, 1, (1024, 1)),  # 2048 > max 1024: one extra micro-step
        ("ncf", 32768, 1, (16384, 1)),  # fits one GPU, yet B > B0 on one GPU: k raised to 1
        ("cifar10", 4096, 12, (341, 0)),  # ceil(4096/12) = 342, capped at 4096 // 12 = 341
        ("bert", 384, 8, (12, 3)),  # 48 per GPU, 12 at most: 4 micro-steps of 12
        ("cifar10", 128, 1, (128, 0)),  # B0 on one GPU: no accumulation
    ],
)
def test_batch_configuration(apps, app, batch, replicas, expected):
    assert apps[app].batch_config(batch, replicas) == expected


def test_progress_boundaries_and_gain_follow_the_validation_rows(apps):
    cifar = apps["cifar10"]
    files = [f"validation-{b}.csv" for b in (128, 256, 512, 1024, 2048, 4096)]
    first = min(float(rows("cifar10", f)[0]["progress"]) for f in files)
    assert cifar.progress(0) == 0.0 and cifar.progress(1) == first
    assert cifar.epochs == 100 and len(cifar.boundaries) == 101
    assert cifar.gain(128, 0) == pytest.approx(1.0)  # one step at B0 adds 1
    row = rows("cifar10", "validation-2048.csv")[4]  # epoch 5, 0-based row 4
    sqr, var = float(row["grad_sqr"]), float(row["grad_var"])
    assert cifar.gain(2048, 4) == pytest.approx((var + sqr) / (var * 128 / 2048 + sqr))
    # halfway between two validated sizes: grad statistics interpolated linearly
    lo, hi = rows("cifar10", "validation-1024.csv")[4], rows("cifar10", "validation-2048.csv")[4]
    mid_sqr = (float(lo["grad_sqr"]) + float(hi["grad_sqr"])) / 2
    mid_var = (float(lo["grad_var"]) + float(hi["grad_var"])) / 2
    assert cifar.grad(1536, 4) == pytest.approx((mid_sqr, mid_var))


def test_step_time_of_measured_and_unmeasured_placements(apps):
    cifar = apps["cifar10"]
    assert canonical_placement((3, 1)) == (1, 3)
    assert canonical_placement((2, 1, 1, 0)) == (1, 1, 2)
    measured = [r for r in rows("cifar10", "placements.csv") if r["placement"] == "1"]
    a, b = measured[0], measured[1]  # local_bsz 32 and 45
    assert cifar.step_time((1,), 32) == (float(a["step_time"]), float(a["sync_time"]))
    halfway = cifar.step_time((1,), (32 + 45) / 2)[0]
    assert halfway == pytest.approx((float(a["step_time"]) + float(b["step_time"])) / 2)
    # 5 nodes is not in placements.csv: Delaunay interpolation, still finite and positive
    st, sy = cifar.step_time((4, 4, 4, 4, 4), 128)
    assert 0 < sy < st and math.isfinite(st)
    # one optimizer step = step_time + k * (step_time - sync_time) at micro-batch m
    st, sy = cifar.step_time((1,), 1024)
    assert cifar.iteration_time((1,), 2048) == (pytest.approx(st + (st - sy)), 2048)


def test_tiresias_reproduces_the_published_figure_on_workload_1():
    out = sim.simulate(WORKLOAD_1, sim.Options(policy="tiresias"))
    published = sim.PUBLISHED["tiresias"][0]
    assert abs(out["avg_jct_s"] / published - 1) < 0.05
    assert out["avg_jct_s"] == pytest.approx(published, abs=0.5)  # in fact to 0.1 s


@pytest.fixture
def tiny(tmp_path):
    """Six jobs of workload 1 (cifar10, ncf, deepspeech2, ...), on 2 nodes x 4 GPUs."""
    with WORKLOAD_1.open() as f:
        lines = f.readlines()
    path = tmp_path / "tiny.csv"
    path.write_text("".join(lines[:7]))
    return path


def test_the_simulator_calls_the_real_allocate(tiny, monkeypatch):
    assert sim.allocate is policy.allocate
    calls = []

    def spy(jobs, devices, name, **kw):
        jobs = list(jobs)
        out = policy.allocate(jobs, devices, name, **kw)
        calls.append((jobs, list(devices), name, kw, out))
        return out

    monkeypatch.setattr(sim, "allocate", spy)
    sim.simulate(tiny, sim.Options(policy="fair-share", nodes=2))
    assert calls and {c[2] for c in calls} == {"fair-share"}
    jobs, devices, name, kw, out = calls[0]
    assert [d.id for d in devices] == [f"n{n:02d}g{g}" for n in range(2) for g in range(4)]
    assert out == policy.allocate(jobs, devices, name, **kw)
    assert all(j.min_gpus == 1 and j.user == j.id for j in jobs)


def test_policies_give_different_results(tiny):
    results = {
        p: sim.simulate(tiny, sim.Options(policy=p, nodes=2))["avg_jct_s"]
        for p in ("static", "fair-share", "goodput")
    }
    assert len(set(results.values())) == 3
    # priority without priorities in the workload is fair-share
    same = sim.simulate(tiny, sim.Options(policy="priority", nodes=2))["avg_jct_s"]
    assert same == results["fair-share"]


@pytest.mark.parametrize("name", ["static", "tiresias", "fair-share", "goodput"])
def test_json_output_is_complete_and_sane(tiny, capsys, name):
    assert sim.main(["--policy", name, "--workload", str(tiny), "--nodes", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == name and out["workload"] == str(tiny) and out["jobs"] == 6
    assert 0 < out["avg_jct_s"] <= out["p99_jct_s"] <= out["max_jct_s"] <= out["makespan_s"]
    assert 0 < out["gpu_utilization"] <= out["gpu_allocated"] <= 1
    assert out["starts"] >= 6


def test_rescale_cost_is_an_option_and_costs_time(tiny):
    cheap = sim.simulate(tiny, sim.Options(policy="fair-share", nodes=2, rescale_cost=0.5))
    dear = sim.simulate(tiny, sim.Options(policy="fair-share", nodes=2, rescale_cost=30.0))
    assert cheap["rescales"] > 0
    assert dear["avg_jct_s"] > cheap["avg_jct_s"]


@pytest.mark.parametrize("name", ["fair-share", "goodput"])
def test_auto_max_and_reports_reach_the_policy(tiny, monkeypatch, apps, name):
    """`auto`: a fair-share user asks for num_replicas as max, a goodput user leaves it to the
    policy; both policies are told remaining steps and measured throughput, like the service."""
    calls = []

    def spy(jobs, devices, policy_name, **kw):
        jobs = list(jobs)
        calls.append(jobs)
        return policy.allocate(jobs, devices, policy_name, **kw)

    monkeypatch.setattr(sim, "allocate", spy)
    out = sim.simulate(tiny, sim.Options(policy=name, nodes=2))
    assert out["max_gpus"] == ("scalable" if name == "goodput" else "requested")
    with tiny.open(newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    for job in calls[0]:
        row = rows[job.id]
        batch, replicas = int(row["batch_size"]), int(row["num_replicas"])
        scalable = apps[row["application"]].max_replicas(batch)
        assert job.max_gpus == min(8, scalable if name == "goodput" else replicas)
    later = [j for jobs in calls[1:] for j in jobs if j.current]
    assert later and all(j.remaining_steps is not None and j.throughput for j in later)


# ---- kinds of job: elastic, restart, rigid ---------------------------------------------------

MIX = "elastic=0.5,restart=0.3,rigid=0.2"


def test_kinds_are_assigned_in_exact_shares_by_seed():
    mix = sim.parse_mix(MIX)
    kinds = sim.assign_kinds(160, mix, seed=0)
    assert [kinds.count(k) for k in sim.KINDS] == [80, 48, 32]
    assert sim.assign_kinds(160, mix, seed=0) == kinds  # the same jobs under every policy
    assert sim.assign_kinds(160, mix, seed=1) != kinds
    assert sorted(sim.assign_kinds(6, mix, seed=0)) == sorted(
        ["elastic"] * 3 + ["restart"] * 2 + ["rigid"]
    )
    assert sim.assign_kinds(5, None, seed=0) == ["elastic"] * 5
    assert sim.parse_mix("restart=2,rigid=2") == {"restart": 0.5, "rigid": 0.5}
    for bad, message in [("lazy=1", "kinds are"), ("rigid=x", "must be a number"),
                         ("rigid=-1", "0 or more"), ("rigid=0", "not all be 0")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            sim.parse_mix(bad)


def test_a_restart_job_pays_its_restart_cost_per_resize(apps):
    """Under our policies a running restart job pays --restart-cost per change of its devices,
    an elastic one --rescale-cost, any job --start-cost to start; the baselines pay the
    published restart. The pause is time without progress."""
    opts = sim.Options(policy="fair-share", restart_cost=42.0, rescale_cost=0.5, start_cost=30.0)
    job = sim.SimJob("j", apps["cifar10"], 0.0, replicas=2, batch=128, max_gpus=4, kind="restart")
    assert sim.change_cost(job, opts) == 30.0
    job.assign(("g0",), (1,), 0.0, sim.change_cost(job, opts))
    assert sim.change_cost(job, opts) == 42.0
    job.advance(0.0, 30.0)
    assert job.progress == 0.0 and job.pause == 0.0
    job.assign(("g0", "g1"), (2,), 30.0, sim.change_cost(job, opts))
    assert job.pause == 42.0 and job.rescales == 1
    job.advance(30.0, 42.0)
    assert job.progress == 0.0  # the whole restart without progress
    job.advance(72.0, 1.0)
    assert job.progress > 0.0
    elastic = sim.SimJob("e", apps["cifar10"], 0.0, 2, 128, 4, alloc=("g1",))
    assert sim.change_cost(elastic, opts) == 0.5
    assert sim.change_cost(job, replace(opts, policy="static")) == 42.0
    # the defaults: the published 30 s for the baselines, 10 s for restart jobs
    assert sim.Options(policy="tiresias").restart_s() == sim.PUBLISHED_RESTART_S == 30.0
    assert sim.Options(policy="goodput").restart_s() == sim.DEFAULT_RESTART_KIND_S == 10.0


def test_a_dearer_restart_costs_restart_jobs_time_and_the_policy_resizes_them_less(tiny):
    runs = {
        cost: sim.simulate(
            tiny, sim.Options(policy="fair-share", nodes=2, mix={"restart": 1.0}, restart_cost=cost)
        )
        for cost in (0.0, 600.0)
    }
    assert runs[0.0]["rescales"] > runs[600.0]["rescales"]
    assert runs[600.0]["by_kind"]["restart"]["jobs"] == 6
    elastic = sim.simulate(tiny, sim.Options(policy="fair-share", nodes=2, restart_cost=600.0))
    assert elastic["by_kind"].keys() == {"elastic"}  # no mix: the restart cost plays no part
    assert (
        elastic["avg_jct_s"] == sim.simulate(tiny, sim.Options("fair-share", nodes=2))["avg_jct_s"]
    )


@pytest.mark.parametrize("name", ["fair-share", "goodput"])
def test_a_mix_runs_and_reports_jct_per_kind(tiny, capsys, name):
    argv = ["--policy", name, "--workload", str(tiny), "--nodes", "2", "--mix", MIX, "--json"]
    assert sim.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    kinds = out["by_kind"]
    assert kinds.keys() == {"elastic", "restart", "rigid"}
    assert [kinds[k]["jobs"] for k in sim.KINDS] == [3, 2, 1]
    assert out["mix"] == pytest.approx({"elastic": 0.5, "restart": 0.3, "rigid": 0.2})
    assert out["restart_cost_s"] == 10.0 and out["restart_interval_s"] == 60.0
    assert kinds["rigid"]["rescales"] == 0
    for row in kinds.values():
        assert 0 < row["avg_jct_s"] <= row["p99_jct_s"] <= row["max_jct_s"] <= out["max_jct_s"]
    jcts = sum(kinds[k]["avg_jct_s"] * kinds[k]["jobs"] for k in kinds) / 6
    assert jcts == pytest.approx(out["avg_jct_s"])
    with pytest.raises(SystemExit):
        sim.main(["--mix", "lazy=1"])
    assert "kinds are elastic, restart, rigid" in capsys.readouterr().err


def test_the_policy_is_told_each_kind_as_the_service_would(tiny, monkeypatch):
    """Restart jobs carry their restart cost and the counts that divide their batch, rigid
    ones their exact count; allocate gets the restart interval; rigid jobs never change."""
    calls = []

    def spy(jobs, devices, policy_name, **kw):
        jobs = list(jobs)
        out = policy.allocate(jobs, devices, policy_name, **kw)
        calls.append((jobs, kw, out))
        return out

    monkeypatch.setattr(sim, "allocate", spy)
    opts = sim.Options(
        policy="fair-share", nodes=2, mix=sim.parse_mix(MIX), restart_cost=25.0,
        restart_interval=120.0,
    )  # fmt: skip
    sim.simulate(tiny, opts)
    with tiny.open(newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    seen = set()
    for jobs, kw, out in calls:
        assert kw["restart_interval"] == 120.0
        for job in jobs:
            batch, replicas = int(rows[job.id]["batch_size"]), int(rows[job.id]["num_replicas"])
            if job.restarts:
                seen.add("restart")
                assert job.restart_cost_s == 25.0 and job.rigid is False
                assert job.sizes and all(batch % n == 0 for n in job.sizes)
                assert not out[job.id] or batch % len(out[job.id]) == 0
            elif job.rigid:
                seen.add("rigid")
                assert job.min_gpus == job.max_gpus == min(8, replicas)
                if job.current:  # once started, exactly its devices
                    assert out[job.id] == list(job.current)
            else:
                seen.add("elastic")
                assert job.restart_cost_s is None and job.sizes is None
    assert seen == {"elastic", "restart", "rigid"}
