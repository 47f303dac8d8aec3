"""The shared service of the serve modules: one real `jupyter edt serve` per module, with a
token file naming alice, bob (quota: 1 GPU) and root (an administrator)."""

from __future__ import annotations

import secrets

import pytest
from edtservice import token_file_service

TOKENS = {name: secrets.token_hex(16) for name in ("alice", "bob", "root")}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    process = token_file_service(
        tmp_path_factory.mktemp("serve"),
        {
            "alice": {"tokens": [TOKENS["alice"]], "groups": ["ml"]},
            "bob": {"tokens": [TOKENS["bob"]]},
            "root": {"tokens": [TOKENS["root"]], "admin": True},
        },
        {
            "virtual_gpus": 4,
            "min_rescale_interval": 0.0,
            "refresh_interval": 0.5,
            "user_quotas": {"bob": 1},
        },
    )
    yield process
    process.stop()


@pytest.fixture(scope="module")
def tokens() -> dict[str, str]:
    """Each user's token to the service."""
    return TOKENS
