"""The settings an administrator changes on a running service, without a restart: quotas,
weights, user groups, administrators and the allocation policy.

They are one record, `LiveRules`, validated as a whole before it replaces the running one, so
that a reload of the config file (SIGHUP, ``serve/reload.py``) and the admin API (``PATCH
/edt/api/v1/admin/config``) change them the same way (`LiveConfig.change`): validate, record who
changed what, swap at once, reschedule. A lowered quota then shrinks the jobs over it at the
next allocation, as a new job's arrival would, rather than stopping them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..scheduling.policy import POLICIES, Policy, ShareRules
from .models import SpecError

__all__ = [
    "FIELDS",
    "BadSetting",
    "LiveConfig",
    "LiveRules",
    "changes_between",
    "describe",
    "known_policy",
    "policy_of",
]

log = logging.getLogger(__name__)

#: The settings that change live, by their trait names (``c.EDTService.<name>``) and API fields.
FIELDS = (
    "user_quotas",
    "group_quotas",
    "user_weights",
    "user_groups",
    "admin_users",
    "admin_groups",
    "policy",
)


class BadSetting(SpecError):
    """A live setting's bad value, or a name that is no live setting: `field` names it, so
    the API answers 400 with it and a reload's log says which."""


def _name(setting: str, key: object) -> str:
    if not isinstance(key, str) or not key:
        raise BadSetting(setting, f"{setting} takes non-empty names as keys, not {key!r}.")
    return key


def _mapping(setting: str, value: object) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise BadSetting(setting, f"{setting} must be an object of names, not {value!r}.")
    return value


def _quotas(setting: str, value: object) -> dict[str, int]:
    out = {}
    for key, quota in _mapping(setting, value).items():
        if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
            raise BadSetting(
                setting,
                f"{setting}[{key!r}] must be a whole number of GPUs, 0 or more, not {quota!r}.",
            )
        out[_name(setting, key)] = quota
    return out


#: The weights a user may have: a million times another's is as far as a share means anything.
MIN_WEIGHT, MAX_WEIGHT = 1e-6, 1e6


def _weights(setting: str, value: object) -> dict[str, float]:
    out = {}
    for key, weight in _mapping(setting, value).items():
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not MIN_WEIGHT <= weight <= MAX_WEIGHT
        ):
            raise BadSetting(
                setting,
                f"{setting}[{key!r}] must be a positive number from {MIN_WEIGHT:g} to "
                f"{MAX_WEIGHT:g}, not {weight!r}.",
            )
        out[_name(setting, key)] = float(weight)
    return out


def _names(setting: str, value: object, what: str = "") -> tuple[str, ...]:
    """A list of names (a bare string is refused: "root" is not ["r", "o", "o", "t"]);
    `what` says which of the setting's values it is."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise BadSetting(setting, f"{setting}{what} must be a list of names, not {value!r}.")
    for item in value:
        _name(setting, item)
    return tuple(dict.fromkeys(value))


def _groups(setting: str, value: object) -> dict[str, tuple[str, ...]]:
    return {
        _name(setting, user): _names(setting, groups, f"[{user!r}]")
        for user, groups in _mapping(setting, value).items()
    }


def _policy(setting: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise BadSetting(setting, f"{setting} must be a policy's name, not {value!r}.")
    return value


_PARSERS: dict[str, Callable[[str, object], Any]] = {
    "user_quotas": _quotas,
    "group_quotas": _quotas,
    "user_weights": _weights,
    "user_groups": _groups,
    "admin_users": _names,
    "admin_groups": _names,
    "policy": _policy,
}


@dataclass(frozen=True)
class LiveRules:
    """The live settings as they stand; each absent one has its default (none, fair-share)."""

    user_quotas: Mapping[str, int] = field(default_factory=dict)
    group_quotas: Mapping[str, int] = field(default_factory=dict)
    user_weights: Mapping[str, float] = field(default_factory=dict)
    user_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    admin_users: tuple[str, ...] = ()
    admin_groups: tuple[str, ...] = ()
    policy: str = "fair-share"

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> LiveRules:
        """The rules `values` give (a config file's, or an API body merged into the running
        ones); BadSetting naming the first setting that is wrong or unknown."""
        unknown = sorted(str(k) for k in values if k not in FIELDS)
        if unknown:
            raise BadSetting(
                unknown[0],
                f"{unknown[0]!r} is not a setting that changes live; those are "
                f"{', '.join(FIELDS)}.",
            )
        return cls(**{name: _PARSERS[name](name, value) for name, value in values.items()})

    def merged(self, patch: object) -> LiveRules:
        """These rules with a JSON merge patch (RFC 7386) applied, as PATCH takes it: an
        object setting merges key by key (a null value removes the key), a list or a string
        replaces the setting, and a null setting goes back to its default."""
        if not isinstance(patch, Mapping):
            raise BadSetting("body", "The body must be a JSON object of settings.")
        values: dict[str, object] = self.to_dict()
        for name, value in patch.items():
            if name not in FIELDS:
                LiveRules.parse({name: value})  # raises, naming it
            if value is None:
                del values[name]
            elif isinstance(value, Mapping) and isinstance(values[name], dict):
                merged = dict(values[name])  # type: ignore[call-overload]
                for key, item in value.items():
                    if item is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = item
                values[name] = merged
            else:
                values[name] = value
        return LiveRules.parse(values)

    def to_dict(self) -> dict[str, Any]:
        """As JSON gives them (and the API answers)."""
        return {
            "user_quotas": dict(self.user_quotas),
            "group_quotas": dict(self.group_quotas),
            "user_weights": dict(self.user_weights),
            "user_groups": {user: list(groups) for user, groups in self.user_groups.items()},
            "admin_users": list(self.admin_users),
            "admin_groups": list(self.admin_groups),
            "policy": self.policy,
        }

    def share_rules(self) -> ShareRules:
        """The weights and quotas the policy shares devices by (groups: `UserDirectory`)."""
        return ShareRules(
            weights=dict(self.user_weights),
            user_quotas=dict(self.user_quotas),
            group_quotas=dict(self.group_quotas),
        )


def changes_between(old: LiveRules, new: LiveRules) -> list[dict[str, Any]]:
    """What differs, one entry per changed name of an object setting (`key`; null `old` or
    `new`: absent) or per other setting: what a change's record and log say."""
    before, after = old.to_dict(), new.to_dict()
    out: list[dict[str, Any]] = []
    for name in FIELDS:
        a, b = before[name], after[name]
        if a == b:
            continue
        if isinstance(a, dict):
            for key in sorted(a.keys() | b.keys()):
                if a.get(key) != b.get(key):
                    out.append({"setting": name, "key": key, "old": a.get(key), "new": b.get(key)})
        else:
            out.append({"setting": name, "old": a, "new": b})
    return out


def describe(change: Mapping[str, Any]) -> str:
    """One change as a log line says it: ``user_quotas['alice']: 2 -> 1``."""
    key = f"[{change['key']!r}]" if "key" in change else ""
    return f"{change['setting']}{key}: {change['old']!r} -> {change['new']!r}"


def policy_of(policy: str | Policy, load: Callable[[str], Policy]) -> tuple[str, Policy]:
    """The name a policy goes by in the rules, and the policy: a name is loaded; an object
    (a test's, a deployment's own) keeps its name, or its class's import path."""
    if isinstance(policy, str):
        return policy, load(policy)
    cls = type(policy)
    same = POLICIES.get(policy.name) is cls
    return (policy.name if same else f"{cls.__module__}.{cls.__qualname__}"), policy


def known_policy(name: str) -> Policy:
    """One of `POLICIES` by its name; the host's `load_policy` also takes import paths."""
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {name!r}.")
    return POLICIES[name]()


class ConfigRecords(Protocol):
    """Where a change is recorded (the store)."""

    def record_config_change(
        self, user: str | None, source: str, changes: list[dict[str, Any]]
    ) -> dict[str, Any]: ...


class LiveConfig:
    """The running live rules of one job service, and the one way they change."""

    def __init__(
        self,
        rules: LiveRules,
        policy: Policy,
        *,
        load_policy: Callable[[str], Policy],
        records: ConfigRecords,
        use: Callable[[LiveRules, Policy], None],
        reschedule: Callable[[], Awaitable[object]],
    ) -> None:
        """`use` hands new rules to the service's parts (it must not await: the swap is
        whole between two allocations); `reschedule` is the next allocation."""
        self.rules = rules
        self.policy = policy
        self._load_policy = load_policy
        self._records = records
        self._use = use
        self._reschedule = reschedule

    def check(self, rules: LiveRules) -> Policy:
        """The policy `rules` name (the running one when it stays); BadSetting, naming
        `policy`, for one that does not load. (`LiveRules.parse` checked the rest.)"""
        if rules.policy == self.rules.policy:
            return self.policy
        try:
            return self._load_policy(rules.policy)
        except ValueError as err:
            raise BadSetting("policy", str(err)) from err

    async def change(
        self, rules: LiveRules, *, user: str | None, source: str
    ) -> dict[str, Any] | None:
        """Put `rules` in place of the running ones and allocate again; the change's record
        (None when nothing changed). `user`: who asked (None for a reload); `source`: how
        ("api", "reload")."""
        policy = self.check(rules)
        changed = changes_between(self.rules, rules)
        if not changed:
            return None
        # recorded first: a change the store could not keep is not applied either; nothing
        # awaits in between, so no allocation sees the rules half changed
        record = self._records.record_config_change(user, source, changed)
        self.rules, self.policy = rules, policy
        self._use(rules, policy)
        who = f"{user} ({source})" if user else source
        log.info("live settings changed by %s: %s", who, "; ".join(map(describe, changed)))
        await self._reschedule()
        return record
