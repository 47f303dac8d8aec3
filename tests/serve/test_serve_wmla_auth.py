"""WMLA's clients on `jupyter edt serve` (a token file): Basic `user:<their token>` and, after
`/auth/v1/logon`, `X-Auth-Token`, as IBM's tutorials send them with `requests`; bad
credentials get 401 with a Basic challenge, and no token reaches the service's log."""

from __future__ import annotations

import requests


def test_basic_and_access_tokens_work_and_bad_ones_get_a_basic_401(service, tokens):
    alice = ("alice", tokens["alice"])
    sc = f"{service.url}platform/rest/conductor/v1"
    execs = f"{service.url}edt/api/wmla/v1/execs"
    assert requests.get(f"{sc}/auth/logon", auth=alice, timeout=30).json()["user"] == "alice"
    logon = requests.get(f"{service.url}auth/v1/logon", auth=alice, timeout=30).json()
    access = {"X-Auth-Token": logon["accessToken"]}
    assert requests.get(execs, headers=access, timeout=30).json() == {"execs": []}
    # a POST with Basic goes through (a 404 of the exec, not a refusal)
    stop = requests.post(f"{execs}/nope/stop", auth=alice, timeout=30)
    assert stop.status_code == 404
    # a path under WMLA's roots that names no operation: a JSON 404
    for path in ("platform/rest/deeplearning/v1/nope", "auth/v1/nope"):
        unknown = requests.get(f"{service.url}{path}", auth=alice, timeout=30)
        assert unknown.status_code == 404 and "No API operation" in unknown.json()["message"]

    refused = [
        requests.get(f"{sc}/auth/logon", auth=("bob", tokens["alice"]), timeout=30),
        requests.get(f"{sc}/auth/logon", auth=("alice", "x" * 32), timeout=30),
        requests.get(f"{sc}/auth/logon", timeout=30),
        requests.get(execs, headers={"X-Auth-Token": logon["accessToken"] + "x"}, timeout=30),
        requests.get(f"{service.url}auth/v1/logon", headers=access, timeout=30),
    ]
    assert [r.status_code for r in refused] == [401] * len(refused)
    assert {r.headers["WWW-Authenticate"] for r in refused} == {'Basic realm="jupyter-edt"'}

    # the access token names alice's identity: root's admin view is not hers
    sig_apps = requests.get(f"{sc}/instances/nope/applications", headers=access, timeout=30)
    assert sig_apps.status_code == 404 and sig_apps.json()["message"].startswith("No instance")

    # a token in a URL (a WebSocket's) is scrubbed from the access log (refusals are logged)
    wrong = "y" * 32
    assert (
        requests.get(f"{service.url}edt/api/v1/user?token={wrong}", timeout=30).status_code == 403
    )
    log = service.log_path.read_text(errors="replace")
    assert "/edt/api/v1/user?token=[secret]" in log
    assert not any(t in log for t in [wrong, *tokens.values(), logon["accessToken"]])
