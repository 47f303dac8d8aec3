"""Who the service's callers are: names, groups and administrators.

The service never authenticates anyone. Its front (the Jupyter server in the embedded mode,
`jupyter edt serve` in the shared mode) says who each caller is with an `Identity`; the
directory remembers the groups and administrator flag it last heard for each name (in the
store, so group quotas and usage by group survive a restart before the users come back), and
adds what the deployment configured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..scheduling.policy import ShareRules
from .store import JobStore


@dataclass(frozen=True)
class Identity:
    """A caller as its identity provider names it."""

    name: str
    groups: tuple[str, ...] = ()
    admin: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("A user's name must not be empty.")


class UserDirectory:
    def __init__(
        self,
        store: JobStore,
        *,
        admin_users: Iterable[str] = (),
        groups: Mapping[str, Sequence[str]] | None = None,
        admin_groups: Iterable[str] = (),
    ) -> None:
        self.store = store
        self.configure(admin_users=admin_users, admin_groups=admin_groups, groups=groups)
        self._seen: dict[str, tuple[tuple[str, ...], bool]] = {
            name: (tuple(g), admin) for name, (g, admin) in store.users().items()
        }

    def configure(
        self,
        *,
        admin_users: Iterable[str],
        admin_groups: Iterable[str],
        groups: Mapping[str, Sequence[str]] | None,
    ) -> None:
        """What the deployment says (at the start, and at each change of the live settings,
        ``liverules.py``): its administrators, by name or group, and groups of users."""
        self.admin_users = frozenset(admin_users)
        self.admin_groups = frozenset(admin_groups)
        self.configured_groups = {user: tuple(g) for user, g in (groups or {}).items()}

    def note(self, identity: Identity) -> None:
        """Remember what the provider says of a caller; the store is written only on change."""
        said = (tuple(dict.fromkeys(identity.groups)), identity.admin)
        if self._seen.get(identity.name) != said:
            self.store.note_user(identity.name, said[0], said[1])
            self._seen[identity.name] = said

    def is_admin(self, name: str) -> bool:
        """Named in the configuration, in one of its `admin_groups`, or an administrator the
        last time the provider said."""
        if name in self.admin_users or self._seen.get(name, ((), False))[1]:
            return True
        return bool(self.admin_groups) and not self.admin_groups.isdisjoint(self.groups_of(name))

    def groups_of(self, name: str) -> tuple[str, ...]:
        heard = self._seen.get(name, ((), False))[0]
        return tuple(dict.fromkeys((*self.configured_groups.get(name, ()), *heard)))

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Every known user's groups."""
        names = self._seen.keys() | self.configured_groups.keys()
        return {name: self.groups_of(name) for name in names}

    def share_rules(self, configured: ShareRules) -> ShareRules:
        """The configured weights and quotas, with the groups as known now."""
        return ShareRules(
            weights=configured.weights,
            user_quotas=configured.user_quotas,
            group_quotas=configured.group_quotas,
            groups=self.groups(),
        )
