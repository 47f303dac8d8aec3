"""The shared service of the serve modules: one real `jupyter edt serve` per module, with a
token file naming alice, bob (quota: 1 GPU) and root (an administrator)."""

from __future__ import annotations

import json
import secrets

import pytest
from edtservice import ServiceProcess

TOKENS = {name: secrets.token_hex(16) for name in ("alice", "bob", "root")}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    tokens = root / "tokens.json"
    tokens.write_text(
        json.dumps(
            {
                "alice": {"tokens": [TOKENS["alice"]], "groups": ["ml"]},
                "bob": {"tokens": [TOKENS["bob"]]},
                "root": {"tokens": [TOKENS["root"]], "admin": True},
            }
        )
    )
    tokens.chmod(0o600)
    process = ServiceProcess(
        root,
        {
            "authenticator_class": "jupyter_edt.serve.auth.TokenFileAuthenticator",
            "virtual_gpus": 4,
            "min_rescale_interval": 0.0,
            "refresh_interval": 0.5,
            "user_quotas": {"bob": 1},
            "run_as_users": False,
            "allow_shared_account": True,
        },
    )
    process.settings["TokenFileAuthenticator.tokens_file"] = str(tokens)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def tokens() -> dict[str, str]:
    """Each user's token to the service."""
    return TOKENS
