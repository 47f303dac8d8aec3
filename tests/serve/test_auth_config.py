"""Bad settings of `jupyter edt serve`'s authentication and accounts: each refused at start
with a sentence naming the option (no service process needed)."""

from __future__ import annotations

import json
import os

import pytest

from jupyter_edt.serve.app import EDTService
from jupyter_edt.serve.auth import HubAuthenticator, TokenFileAuthenticator


def test_a_token_file_that_is_missing_or_malformed_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"TokenFileAuthenticator\.tokens_file is not set"):
        TokenFileAuthenticator().check()
    bad = tmp_path / "tokens.json"
    for text in ('["alice"]', '{"alice": {"groups": []}}', "{not json"):
        bad.write_text(text)
        with pytest.raises(ValueError, match=r"tokens_file .* is not a JSON object of users"):
            TokenFileAuthenticator(tokens_file=str(bad)).check()
    bad.write_text(json.dumps({"alice": {"tokens": ["short"]}}))
    with pytest.raises(ValueError, match="shorter than 16 characters"):
        TokenFileAuthenticator(tokens_file=str(bad)).check()


def test_a_hub_authenticator_without_the_hubs_url_is_refused(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_API_URL", raising=False)
    with pytest.raises(ValueError, match=r"HubAuthenticator\.api_url is not set"):
        HubAuthenticator().check()


def test_one_account_for_every_user_needs_saying_so(tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice": {"tokens": ["x" * 16]}}))
    settings = [
        "--EDTService.authenticator_class=jupyter_edt.serve.auth.TokenFileAuthenticator",
        f"--TokenFileAuthenticator.tokens_file={tokens}",
        "--EDTService.run_as_users=False",
    ]
    service = EDTService()
    service.initialize(settings)
    with pytest.raises(ValueError, match=r"EDTService\.allow_shared_account = True"):
        service.check()
    allowed = EDTService()
    allowed.initialize([*settings, "--EDTService.allow_shared_account=True"])
    allowed.check()
    if os.geteuid() != 0:
        as_users = EDTService()
        as_users.initialize([*settings[:2], "--EDTService.run_as_users=True"])
        with pytest.raises(ValueError, match="run_as_users needs root"):
            as_users.check()
