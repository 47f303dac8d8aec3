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
