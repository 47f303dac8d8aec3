"""GET /edt/api/v1/metrics on a real Jupyter server (the embedded mode): for the server's owner
and administrators only, in Prometheus' text format (or OpenMetrics, asked for) that
prometheus_client's parser reads; the API's latency and the event feed's subscribers and lag
in it; and docs/grafana-dashboard.json querying only metrics that a scrape exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from multiuser import api, as_user
from scrapes import Scrape
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect
from waiting import eventually

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
#: PromQL's words that are neither functions nor metrics.
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
PROMQL_KEYWORDS |= {"and", "or", "unless", "offset"}


async def scrape(jp_fetch, **kwargs) -> Scrape:
    response = await jp_fetch("edt", "api", "v1", "metrics", **kwargs)
    assert response.headers["Content-Type"].startswith("text/plain")
    return Scrape(response.body.decode())


async def test_the_servers_owner_reads_the_metrics(jp_fetch):
    """On a server of Jupyter's own token login, every caller is its owner."""
    metrics = await scrape(jp_fetch)
    assert metrics.value("edt_gpus", state="idle") == 0  # this package's server has no GPU
    assert {"edt_jobs", "edt_queue_wait_seconds", "process_resident_memory_bytes"} <= (
        metrics.exposed()
    )
    openmetrics = await jp_fetch(
        "edt", "api", "v1", "metrics", headers={"Accept": "application/openmetrics-text"}
    )
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.body.decode().rstrip().endswith("# EOF")


@pytest.mark.multi_user
async def test_only_administrators_read_the_metrics_of_a_shared_server(jp_fetch):
    for caller in ("bob", "nobody"):  # a user, and no user at all
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("edt", "api", "v1", "metrics", headers=as_user(caller))
        assert caught.value.code == 403, caller
    await scrape(jp_fetch, headers=as_user("root"))


@pytest.mark.multi_user
async def test_the_api_latency_and_the_event_feed_are_measured(jp_fetch, jp_http_port, jp_base_url):
    url = f"ws://localhost:{jp_http_port}{jp_base_url}edt/api/v1/events?token=alice"
    ws = await websocket_connect(url)
    root = as_user("root")
    metrics = await eventually(
        lambda: scrape(jp_fetch, headers=root),
        "the subscriber counted",
        until=lambda m: m.value("edt_event_feed_subscribers") == 1,
    )
    assert metrics.value("edt_event_feed_lag_seconds_count") == 0
    job = await api(jp_fetch, "alice", "jobs", method="POST", body={"code": "1", "max_gpus": 1})
    assert json.loads(await ws.read_message())["job_id"] == job["id"]  # delivered live
    metrics = await eventually(
        lambda: scrape(jp_fetch, headers=root),
        "the delivery's lag measured",
        until=lambda m: m.value("edt_event_feed_lag_seconds_count") >= 1,
    )
    assert (
        metrics.value(
            "edt_api_request_duration_seconds_count", handler="SubmitHandler", method="POST"
        )
        == 1
    )
    assert (
        metrics.value(
            "edt_api_request_duration_seconds_count", handler="PrometheusHandler", status="200"
        )
        >= 1
    )
    ws.close()
    await eventually(
        lambda: scrape(jp_fetch, headers=root),
        "the subscriber gone",
        until=lambda m: m.value("edt_event_feed_subscribers") == 0,
    )


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label
    matchers, ranges, grouping labels, functions and keywords are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return {
        m.group()
        for m in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", expr)  # not 5m's m
        if m.group() not in PROMQL_KEYWORDS and not expr[m.end() :].lstrip().startswith("(")
    }


def test_metric_names_are_found_in_promql():
    expr = (
        'histogram_quantile(0.95, sum by (le, kind) (rate(edt_a_bucket{state=~"A|B"}'
        "[$__rate_interval]))) / on(kind) group_left edt_b offset 5m"
    )
    assert metric_names(expr) == {"edt_a_bucket", "edt_b"}


async def test_the_grafana_dashboard_queries_only_metrics_that_exist(jp_fetch):
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = (await scrape(jp_fetch)).exposed()
    queried: set[str] = set()
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= exposed, (panel["title"], names - exposed)
            queried |= names
    # and it shows every metric of the service (a metric added later gets a panel); the
    # text format gives a counter's or histogram's creation time a gauge of its own
    families = (await scrape(jp_fetch)).families
    ours = {
        f.name for f in families if f.name.startswith("edt_") and not f.name.endswith("_created")
    }
    shown = {name for name in ours if any(q.startswith(name) for q in queried)}
    assert shown == ours
