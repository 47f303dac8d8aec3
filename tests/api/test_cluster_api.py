"""GET /edt/api/v1/cluster against a real Jupyter server."""

from __future__ import annotations

import json

import pynvml
import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_edt.scheduling.inventory import NvmlInventory, NvmlUnavailable


def nvml_works() -> bool:
    """Whether NVML really answers on this machine (it does not on CPU-only CI)."""
    try:
        NvmlInventory().close()
    except NvmlUnavailable:
        return False
    return True


async def get_cluster(jp_fetch) -> dict:
    response = await jp_fetch("edt", "api", "v1", "cluster")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


@pytest.mark.parametrize("edt_config", [{"devices": "virtual", "virtual_gpus": 3}])
async def test_virtual_devices_are_listed_and_marked(jp_fetch):
    body = await get_cluster(jp_fetch)
    assert body["source"] == "virtual"
    assert [d["index"] for d in body["devices"]] == [0, 1, 2]
    assert len({d["id"] for d in body["devices"]}) == 3
    for device in body["devices"]:
        assert device["virtual"] is True
        assert device["name"] == f"Virtual GPU {device['index']}"
        assert device["memory_total"] is None
        assert device["utilization"] is None


@pytest.mark.parametrize("edt_config", [{"devices": "virtual", "virtual_gpus": 0}])
async def test_zero_virtual_devices_is_an_empty_list(jp_fetch):
    body = await get_cluster(jp_fetch)
    assert body == {"source": "virtual", "devices": []}


@pytest.mark.parametrize("edt_config", [{"devices": "auto", "virtual_gpus": 2}])
async def test_auto_uses_nvml_or_falls_back_to_virtual(jp_fetch):
    """With no NVML library or driver (CI), 'auto' serves the virtual devices instead."""
    body = await get_cluster(jp_fetch)
    if nvml_works():
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        assert body["source"] == "nvml"
        assert len(body["devices"]) == count
        for device in body["devices"]:
            assert device["virtual"] is False
            assert device["memory_total"] > 0
            assert 0 <= device["memory_used"] <= device["memory_total"]
            assert device["uuid"].startswith(("GPU-", "MIG-"))
    else:
        assert body["source"] == "virtual"
        assert len(body["devices"]) == 2
        assert all(d["virtual"] for d in body["devices"])


async def test_unauthenticated_request_is_refused(http_server_client, jp_base_url):
    """No token, no cookie: the API answers 403 and lists nothing."""
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(f"{jp_base_url}edt/api/v1/cluster")
    assert caught.value.code in (401, 403)
    assert b"Virtual GPU" not in (caught.value.response.body or b"")


async def test_wrong_token_is_refused(http_server_client, jp_base_url):
    with pytest.raises(HTTPClientError) as caught:
        await http_server_client.fetch(
            f"{jp_base_url}edt/api/v1/cluster", headers={"Authorization": "token wrong"}
        )
    assert caught.value.code in (401, 403)


class DenyEDT(Authorizer):
    """Lets a user do everything in Jupyter except touch jupyter-edt's resource."""

    def is_authorized(self, handler, user, action, resource) -> bool:
        return resource != "edt"


@pytest.mark.parametrize(
    "jp_server_config",
    [
        {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_edt": True},
                "authorizer_class": DenyEDT,
            }
        }
    ],
)
async def test_authorizer_can_deny_the_edt_resource(jp_fetch):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("edt", "api", "v1", "cluster")
    assert caught.value.code == 403
    # the same user still reaches Jupyter's own API, so the denial is ours, not a broken server
    response = await jp_fetch("api", "status")
    assert response.code == 200


@pytest.mark.parametrize("jp_base_url", ["/user/alice/"])
async def test_served_under_a_base_url(jp_fetch):
    body = await get_cluster(jp_fetch)
    assert body["source"] in ("nvml", "virtual")


ADMIN = {"devices": "virtual", "virtual_gpus": 2, "owner": "ana", "admin_users": ["ana"]}


async def drain(jp_fetch, node: str, method: str = "POST", body=None):
    kwargs = {"body": json.dumps(body if body is not None else {})} if method == "POST" else {}
    response = await jp_fetch(
        "edt", "api", "v1", "cluster", "nodes", node, "drain", method=method, **kwargs
    )
    return json.loads(response.body)


async def refused(jp_fetch, node: str, body=None) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await drain(jp_fetch, node, body=body)
    return caught.value.code, json.loads(caught.value.response.body)


@pytest.mark.parametrize("edt_config", [ADMIN])
async def test_an_admin_drains_a_node_and_takes_the_drain_back(jp_fetch):
    """A drained node's devices show as draining, with the deadline, and are offered to no
    job until the drain is taken back. The node may be named by the start of its id."""
    node = (await get_cluster(jp_fetch))["devices"][0]["node"]
    answer = await drain(jp_fetch, node[:4], body={"deadline_s": 30})
    assert answer["node"] == node and answer["draining"] is True
    assert sorted(answer["devices"]) == ["vgpu0", "vgpu1"]
    devices = (await get_cluster(jp_fetch))["devices"]
    assert all(d["draining"] for d in devices)
    assert len({d["drain_deadline"] for d in devices}) == 1
    assert devices[0]["drain_deadline"] == answer["drain_deadline"] > 0
    back = await drain(jp_fetch, node, method="DELETE")
    assert back["draining"] is False and back["drain_deadline"] is None
    devices = (await get_cluster(jp_fetch))["devices"]
    assert not any(d["draining"] for d in devices)


@pytest.mark.parametrize("edt_config", [ADMIN])
async def test_a_bad_drain_names_the_problem_and_changes_nothing(jp_fetch):
    node = (await get_cluster(jp_fetch))["devices"][0]["node"]
    code, body = await refused(jp_fetch, "no-such-node")
    assert code == 404 and "no-such-node" in body["message"]
    code, body = await refused(jp_fetch, node, {"deadline_s": -1})
    assert (code, body["field"]) == (400, "deadline_s")
    code, body = await refused(jp_fetch, node, {"deadline_s": "soon"})
    assert (code, body["field"]) == (400, "deadline_s")
    code, body = await refused(jp_fetch, node, {"when": 3})
    assert (code, body["field"]) == (400, "when")
    code, body = await refused(jp_fetch, node, [30])
    assert (code, body["field"]) == (400, "body")
    assert not any(d["draining"] for d in (await get_cluster(jp_fetch))["devices"])


@pytest.mark.parametrize("edt_config", [{**ADMIN, "admin_users": []}])
async def test_only_an_admin_drains_a_node(jp_fetch):
    node = (await get_cluster(jp_fetch))["devices"][0]["node"]
    code, body = await refused(jp_fetch, node)
    assert code == 403 and "administrator" in body["message"]
    assert not any(d["draining"] for d in (await get_cluster(jp_fetch))["devices"])
