"""Unix accounts that jobs run as.

A shared job service serves many users. Run as root, it starts each job's processes as its
user's Unix account, so a job reads what its user may read and nothing else (other users' job
directories are 0700). Run as anyone else, it can only start processes as itself: every user's
jobs then share one account and can read each other's files, which only a trusted team should
accept (`check_shared_account`). Standard library only, like the rest of `launch/`.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Account",
    "NoAccount",
    "account_environment",
    "check_shared_account",
    "current_account",
    "hand_over",
    "job_accounts",
    "lookup_account",
]

#: What a process started as an account keeps of the service's environment: how to find
#: programs and libraries, the locale and time zone, temporary files, and the machine's network
#: settings for NCCL and gloo. Nothing else: the service's HOME, its tokens (JUPYTERHUB_*) and
#: its configuration are not the job's business.
SAFE_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH"})
SAFE_ENV_PREFIXES = ("LC_", "NCCL_", "GLOO_")


@dataclass(frozen=True)
class Account:
    """A Unix account as a process started for it sees it. `groups` are the gids `initgroups`
    would give it (its primary gid among them)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: Path
    shell: str


class NoAccount(ValueError):
    """A user whose jobs cannot run: this machine has no Unix account of that name."""


def lookup_account(name: str) -> Account:
    """The Unix account named `name`, or NoAccount saying how to make one."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise NoAccount(
            f"No Unix account named {name!r} on this machine: jobs run as their user's "
            f"account; create it (useradd -m {name}) or ask an administrator to."
        ) from None
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    return Account(
        entry.pw_name, entry.pw_uid, entry.pw_gid, groups, Path(entry.pw_dir), entry.pw_shell
    )


def current_account() -> Account:
    """The account this process runs as (effective ids). A uid with no passwd entry (a
    container's arbitrary uid) is named by its number, its home taken from HOME."""
    uid, gid = os.geteuid(), os.getegid()
    groups = tuple(sorted({gid, *os.getgroups()}))
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return Account(str(uid), uid, gid, groups, Path(os.environ.get("HOME", "/")), "/bin/sh")
    return Account(entry.pw_name, uid, gid, groups, Path(entry.pw_dir), entry.pw_shell)


def job_accounts(as_root: bool | None = None) -> Callable[[str], Account | None]:
    """How a service finds the account a user's jobs run as: as root (`as_root`; None: whether
    this process is root), the user's own (`lookup_account`, which refuses a user without
    one); otherwise None, the service's own account, the only one it can start processes as."""
    if as_root is None:
        as_root = os.geteuid() == 0
    if as_root:
        return lookup_account
    return lambda user: None


def check_shared_account(allow_shared_account: bool, *, as_root: bool | None = None) -> None:
    """Refuse to serve several users from one account unless told it is a trusted team.

    Called where a service starts to serve several users; ValueError with the sentence an
    administrator needs."""
    if as_root is None:
        as_root = os.geteuid() == 0
    if as_root or allow_shared_account:
        return
    me = current_account().name
    raise ValueError(
        f"jupyter edt serve runs as {me!r}, not root, so every user's jobs would run as "
        f"{me!r} and could read each other's files. Run it as root to run each job as its "
        "user, or set EDTService.allow_shared_account = True for a trusted team."
    )


def account_environment(
    account: Account, environ: Mapping[str, str], extra: Mapping[str, str] = {}
) -> dict[str, str]:
    """The environment of a process started as `account`: the safe part of `environ` (the
    service's, see SAFE_ENV), then `extra` (the job's own), then the account's identity."""
    env = safe_environment(environ)
    env.update(extra)
    env.update(HOME=str(account.home), USER=account.name, LOGNAME=account.name, SHELL=account.shell)
    return env


def safe_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of `environ` a process may inherit from the service (see SAFE_ENV)."""
    return {k: v for k, v in environ.items() if k in SAFE_ENV or k.startswith(SAFE_ENV_PREFIXES)}


def hand_over(root: str | os.PathLike[str], account: Account) -> None:
    """Make `root` and everything under it belong to `account` (uid and primary gid).

    Links are changed themselves, never followed, and the walk goes by directory descriptors
    (`os.fwalk`), so a link swapped in meanwhile cannot lead it outside `root`. Still, call it
    only on a tree the account has not had yet: what root wrote there is then all there is.
    """
    os.chown(root, account.uid, account.gid, follow_symlinks=False)
    for _, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirs, *files):
            os.chown(name, account.uid, account.gid, dir_fd=dir_fd, follow_symlinks=False)
