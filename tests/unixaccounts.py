"""Unix accounts for the tests of jobs that run as their users (root only): made, given a
python they can execute, and removed with whatever they still run."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from waiting import eventually_sync

from jupyter_edt.runtime.jobdir import process_start_time


@contextlib.contextmanager
def accounts(
    names: Sequence[str], groups: dict[str, Sequence[str]] | None = None
) -> Iterator[None]:
    """Make the accounts `names` (`groups`: the supplementary groups to make and give each);
    remove them, their homes, groups and processes after."""
    groups = groups or {}
    made_groups = sorted({g for gs in groups.values() for g in gs})
    made: list[str] = []
    try:
        with _account_files():
            for group in made_groups:
                subprocess.run(["groupadd", group], check=True)
            for name in names:
                extra = ["-G", ",".join(groups[name])] if groups.get(name) else []
                subprocess.run(["useradd", "-m", "-s", "/bin/sh", *extra, name], check=True)
                made.append(name)
        yield
    finally:
        for name in made:
            end_processes_of(pwd.getpwnam(name).pw_uid)
        with _account_files():
            for name in made:
                subprocess.run(["userdel", "-r", name], check=False, capture_output=True)
            for group in made_groups:
                subprocess.run(["groupdel", group], check=False, capture_output=True)


@contextlib.contextmanager
def _account_files() -> Iterator[None]:
    """One test process at a time changes /etc/passwd and /etc/group (pytest-xdist runs
    several): useradd fails, rather than waits, while another holds their lock."""
    with open(os.path.join(tempfile.gettempdir(), "edt-test-accounts.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def shared_python(venv: Path) -> str:
    """A python other accounts can execute (this machine's default lives in root's 0700
    home), seeing this interpreter's packages: Debian's python3, same version and ABI, in a
    venv whose .pth adds our site-packages (their own .pth files too: the editable install)."""
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_paths()["purelib"]
    probe = "import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_paths()['purelib'])"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    version, ours = out.rsplit(" ", 1)
    assert version == str(sys.version_info[:2]), f"/usr/bin/python3 is {version}: another ABI"
    Path(ours.strip(), "edt-main.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")
    return str(venv / "bin" / "python")


def end_processes_of(uid: int) -> None:
    """Kill, by pid, what is left of the processes a test account ran (only the tests run as
    it): userdel refuses an account that still has processes."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uids = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uids.split()[1]) == uid:
            pids.append(int(status.parent.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    eventually_sync(
        lambda: all(process_start_time(p) is None for p in pids),
        f"the processes of uid {uid} ended",
        timeout=30,
    )


def process_ids(pid: int) -> tuple[int, int]:
    """The real uid and gid of a running process."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line for line in lines if line.startswith("Uid:")).split()[1]
    gid = next(line for line in lines if line.startswith("Gid:")).split()[1]
    return int(uid), int(gid)
