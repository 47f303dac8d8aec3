"""Warm processes: a fork server that has imported torch and the runtime once, and forks each
job process (a driver, a worker) from that state in milliseconds instead of starting an
interpreter and importing torch again (seconds, on every start, grow and replacement).

One server per machine, started by the service (`ForkServer.start`), listening on an abstract
Unix socket (no file to clean up; it goes with the process). A request carries what
``python -m module args`` would get: the argv, the environment, the working directory, the log
files (as descriptors the requester opened, so the rules of `LocalLauncher` about whose files
they are still apply) and the account. The child leads a session of its own, takes that
environment and account, and runs the module as ``__main__``.

Why a fork server rather than a pool of idle interpreters: a child is made when it is asked
for, from a process that never ran anyone's code and holds no secret (it starts with the safe
part of the service's environment only), so no process ever passes from one user's job to
another's, and idle capacity costs one process, no GPU memory (CUDA is never initialised
before the fork) and no refilling.

Who may ask for what: the server runs as the service's account. A requester of another account
(the driver of a job that runs as its user) gets children of its own account only, whatever it
asks (``SO_PEERCRED`` says who it is); root's requests name the account. A requester's
children that must not outlive it (a driver's workers: ``die_with_requester``) are killed when
its connection closes, which its death does. When the requester is a child of the server too
(a forked driver), its exit reaches its own requester only once those children have been
reaped: a driver seen to end has no worker left, whichever way it ended.

Exit codes reach the requester through a pipe of its own: the child writes its code as it
exits, and the server writes the status it reaped (a signal, too), so the code arrives while
either lives; a pipe that ends without one is a process killed while the server was gone.
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import pwd
import resource
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..runtime.priority import START_NICE_ENV, raise_threads

log = logging.getLogger(__name__)

__all__ = ["FORKSERVER_ENV", "ForkClient", "ForkServer", "StatusPipe"]

#: What the server imports before it forks anything: what every job process would import.
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn",
    "torch.optim",
    "torch.utils.data",
    "torch._dynamo",  # what an optimizer imports when it is made (1.5 s here)
    "jupyter_edt.runtime",
    "jupyter_edt.runtime.control",
    "jupyter_edt.runtime.driver",
    "jupyter_edt.runtime.worker",
    "jupyter_edt.runtime.trainer",
)
#: The environment variable that tells a driver where its machine's fork server listens.
FORKSERVER_ENV = "EDT_FORKSERVER"
_CODE = struct.Struct("i")
_MAX_FDS = 3
_MAX_REQUEST = 1 << 20


# -- the server ---------------------------------------------------------------------------------


class _Server:
    """The fork server's loop: one thread, so that forking it is safe."""

    def __init__(self, name: str) -> None:
        self.uid = os.geteuid()
        self.parent = os.getppid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + name)
        self.sock.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ)
        self.children: dict[int, tuple[socket.socket, bool, int]] = {}  # pid: conn, dies, fd
        self.buffers: dict[socket.socket, bytearray] = {}
        self.peers: dict[socket.socket, int] = {}  # conn: the requester's pid
        # an ended child's status fd, open until its children that die with it are reaped
        self.closing: dict[int, tuple[int, set[int]]] = {}  # pid: fd, dependents
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through the fd
        self.selector.register(self.wake_r, selectors.EVENT_READ)

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                if key.fileobj is self.sock:
                    conn, _ = self.sock.accept()
                    self.buffers[conn] = bytearray()
                    self.peers[conn] = _peer(conn)[0]
                    self.selector.register(conn, selectors.EVENT_READ)
                elif key.fileobj == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            self._reap()
            if os.getppid() != self.parent:
                return  # its service is gone (its children are not: they live on their own)

    def _read(self, conn: socket.socket) -> None:
        try:
            data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(_MAX_FDS * 4))
        except OSError:
            data, ancdata = b"", []
        fds = _received_fds(ancdata)
        if not data:
            self._drop(conn)
            for fd in fds:
                os.close(fd)
            return
        buf = self.buffers[conn]
        buf += data
        if len(buf) > _MAX_REQUEST:
            self._drop(conn)
            for fd in fds:
                os.close(fd)
            return
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            try:
                request = json.loads(line)
                if "restore" in request:
                    answer = {"restored": self._restore(conn, int(request["restore"]))}
                else:
                    answer = {"pid": self._fork(conn, request, fds)}
            except Exception as err:  # the request was wrong: say so, keep serving
                answer = {"error": f"{type(err).__name__}: {err}"}
            finally:
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                fds = []
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def _restore(self, conn: socket.socket, lowered: int) -> int:
        """A child of ours that started `lowered` nicer raises every thread back (it may not
        itself once it is its user's): never above this server's own priority."""
        pid, _ = _peer(conn)
        if pid not in self.children:
            raise PermissionError(f"pid {pid} is not a process this server started")
        raise_threads(pid, lowered, ceiling=os.getpriority(os.PRIO_PROCESS, 0))
        return lowered

    def _drop(self, conn: socket.socket) -> None:
        """The requester is gone: its children that die with it are killed."""
        self.selector.unregister(conn)
        self.buffers.pop(conn, None)
        self.peers.pop(conn, None)
        self._kill(self._dependents(lambda owner: owner is conn))
        conn.close()

    def _dependents(self, asked_by: Any) -> set[int]:
        """The live children that die with their requester, of the requesters `asked_by` picks."""
        return {pid for pid, (owner, dies, _) in self.children.items() if dies and asked_by(owner)}

    def _kill(self, pids: set[int]) -> None:
        for pid in pids:  # live children only: a reaped one's pid may be another's already
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def _fork(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
        if len(fds) != 3:
            raise ValueError("a request passes three descriptors: status, stdout, stderr")
        uid, gid, groups = self._account(conn, request.get("account"))
        status_fd, out_fd, err_fd = fds
        led_r, led_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(led_r)
            _become(request, uid, gid, groups, status_fd, out_fd, err_fd, self, led_w)
        os.close(led_w)
        self.children[pid] = (conn, bool(request.get("die_with_requester")), os.dup(status_fd))
        # answer once it leads its session: a signal to its group right after cannot miss it
        os.read(led_r, 1)
        os.close(led_r)
        return pid

    def _account(
        self, conn: socket.socket, asked: Mapping[str, Any] | None
    ) -> tuple[int | None, int | None, list[int] | None]:
        """The uid, gid and groups the child takes (None: the server's own)."""
        _, peer_uid = _peer(conn)
        if peer_uid != self.uid:
            if self.uid != 0:
                raise PermissionError(f"uid {peer_uid} may not use the fork server of {self.uid}")
            entry = pwd.getpwuid(peer_uid)  # another account asks: it gets its own, nothing else
            groups = sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)))
            return peer_uid, entry.pw_gid, groups
        if asked is None or (asked["uid"] == self.uid and self.uid != 0):
            return None, None, None
        if self.uid != 0:
            raise PermissionError("only a root fork server starts another account's process")
        return int(asked["uid"]), int(asked["gid"]), [int(g) for g in asked["groups"]]

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.children.pop(pid, None)
            if entry is None:
                continue
            with contextlib.suppress(OSError):
                os.write(entry[2], _CODE.pack(os.waitstatus_to_exitcode(status)))
            # its own workers first (its connection's end may not have been read yet)
            dependents = self._dependents(lambda owner, ended=pid: self.peers.get(owner) == ended)
            self._kill(dependents)
            self.closing[pid] = (entry[2], dependents)
            for ended, (fd, left) in list(self.closing.items()):
                left.discard(pid)
                if not left:
                    del self.closing[ended]
                    os.close(fd)

    def close_in_child(self) -> None:
        signal.set_wakeup_fd(-1)
        self.selector.close()
        self.sock.close()
        for conn in self.buffers:
            conn.close()
        os.close(self.wake_r)
        for _, _, fd in self.children.values():
            os.close(fd)
        for fd, _ in self.closing.values():
            os.close(fd)


def _peer(conn: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end (the kernel says, not the request)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[: len(data) - (len(data) % arr.itemsize)])
            fds.extend(arr)
    return fds


def _become(
    request: Mapping[str, Any],
    uid: int | None,
    gid: int | None,
    groups: list[int] | None,
    status_fd: int,
    out_fd: int,
    err_fd: int,
    server: _Server,
    led: int,
) -> None:
    """In the forked child: become the process asked for, run it, exit with its code."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        server.close_in_child()
        os.setsid()
        os.write(led, b"x")
        os.close(led)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (null, out_fd, err_fd):
            os.close(fd)
        asked = int(request.get("nice") or 0)
        server_raises = _capable(_CAP_SYS_NICE)  # the server may raise it back (`_restore`)
        if uid is not None:
            _allow_return(asked)
            os.setgroups(groups or [])
            os.setgid(gid)  # type: ignore[arg-type]
            os.setuid(uid)
        nice = _lowered(asked, server_raises)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if nice:
            os.environ[START_NICE_ENV] = str(nice)
        code = _run_module(request["argv"], request["cwd"], request["env"])
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)  # sys.exit("why"), as Python says it
    except BaseException as err:
        import traceback

        # from the module's own frames on, as `python -m` would show it (a log's last lines
        # are what a failed job shows its user)
        tb = err.__traceback__
        while tb is not None and tb.tb_next is not None and not _theirs(tb.tb_next):
            tb = tb.tb_next
        traceback.print_exception(type(err), err, tb.tb_next if tb is not None else None)
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            os.write(status_fd, _CODE.pack(code))
        os._exit(code & 0xFF if code >= 0 else 1)


def _allow_return(nice: int) -> None:
    """Before a root child switches to its account: let that account raise its CPU priority
    back later (RLIMIT_NICE), where this root may grant it."""
    if nice > 0 and os.geteuid() == 0:
        ceiling = 20 - os.getpriority(os.PRIO_PROCESS, 0)
        with contextlib.suppress(OSError, ValueError):
            soft, hard = resource.getrlimit(resource.RLIMIT_NICE)
            if soft < ceiling:
                resource.setrlimit(resource.RLIMIT_NICE, (ceiling, max(hard, ceiling)))


def _lowered(nice: int, server_raises: bool) -> int:
    """Lower this process's CPU priority by `nice` if it, or its server, may raise it back
    later; how much it lowered it (0: not at all: it could never come back, and the job would
    wait for it)."""
    if nice <= 0:
        return 0
    current = os.getpriority(os.PRIO_PROCESS, 0)
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if soft < 20 - current and not _capable(_CAP_SYS_NICE) and not server_raises:
        return 0
    os.setpriority(os.PRIO_PROCESS, 0, min(19, current + nice))
    return os.getpriority(os.PRIO_PROCESS, 0) - current


_CAP_SYS_NICE = 23


def _capable(cap: int) -> bool:
    """Whether this process holds capability `cap` (effective set)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def _theirs(tb: Any) -> bool:
    """Whether a traceback entry is the run module's (not this server's, nor runpy's)."""
    name = tb.tb_frame.f_code.co_filename
    return name != __file__ and not name.startswith("<frozen runpy")


def _run_module(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> int:
    """What ``python -m module args`` does, in this process."""
    import random
    import runpy

    random.seed()  # the server's state is every child's: each draws its own, as a new one would
    module, args = argv[2], list(argv[3:])
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [cwd, *extra, *[p for p in sys.path[1:] if p not in extra]]
    sys.argv = [module, *args]
    sys.modules.pop(module, None)  # preloaded: runs again as __main__, as `-m` runs it
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def serve(name: str, warm: Sequence[str] = ()) -> None:
    """The server process: preload (and the `warm` modules the deployment names, as far as
    they import), then fork on request until its service is gone."""
    logging.basicConfig(level=logging.WARNING)
    for module in PRELOAD:
        __import__(module)
    for module in warm:
        try:
            __import__(module)
        except Exception as err:  # a module the jobs may want: they import it themselves
            log.warning("fork server: %s is not preloaded: %s", module, err)
    torch = sys.modules["torch"]  # preloaded (launch/ imports nothing but the standard library)
    if torch.cuda.is_initialized():  # a child could not use CUDA, and idle GPUs hold memory
        raise RuntimeError("CUDA was initialised while preloading: nothing may be forked")
    server = _Server(name)
    print("ready", flush=True)
    server.serve()


# -- the client ---------------------------------------------------------------------------------


class ForkServer:
    """The service's handle on its machine's fork server: starts it, says where it listens."""

    def __init__(self, python: str = sys.executable, warm: Sequence[str] = ()) -> None:
        """`warm`: modules to import besides torch and the runtime (a framework the jobs'
        programs import: its import is most of a restarted worker's start)."""
        self.python = python
        self.warm = list(warm)
        self.name = f"jupyter-edt-forkserver-{os.getpid()}-{secrets.token_hex(6)}"
        self.process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()

    def start(self, environ: Mapping[str, str] = os.environ) -> None:
        """Start the server (it preloads in the background; requests made before it is ready
        start cold). Its environment is the safe part of `environ`: whatever it holds, every
        process forked from it holds too."""
        from .accounts import safe_environment

        env = safe_environment(environ)
        env.update({k: environ[k] for k in ("HOME", "PYTHONPATH") if k in environ})
        # a framework that asks whether CUDA is there must not initialise it: nothing forks then
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        self.process = subprocess.Popen(
            [self.python, "-m", "jupyter_edt.launch.forkserver", self.name, *self.warm],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        threading.Thread(target=self._wait_ready, daemon=True).start()

    def _wait_ready(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        if self.process.stdout.readline().strip() == b"ready":
            self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        """Whether it is ready, waiting up to `timeout` while it preloads (not once it died)."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            if self.process is None or self.process.poll() is not None:
                return False
            if time.monotonic() >= deadline:
                return False
        return self.ready

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ForkClient:
    """One requester's connection to a fork server (a launcher holds one for its process's
    life: the children it asks to die with it are killed when it closes)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._buf = b""

    def fork(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdout: int,
        stderr: int,
        *,
        account: Mapping[str, Any] | None = None,
        die_with_requester: bool = False,
        nice: int = 0,
    ) -> tuple[int, int]:
        """Fork a process; returns its pid and the read end of its status pipe. OSError when
        the server cannot be reached or refuses (the caller starts the process cold)."""
        request = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "account": account,
            "die_with_requester": die_with_requester,
            "nice": nice,
        }
        status_r, status_w = os.pipe()
        try:
            with self._lock:
                sock = self._connect()
                try:
                    fds = array.array("i", [status_w, stdout, stderr])
                    sock.sendmsg(
                        [json.dumps(request).encode() + b"\n"],
                        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)],
                    )
                    answer = self._answer(sock)
                except OSError:
                    self._close()
                    raise
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        if "pid" not in answer:
            os.close(status_r)
            raise OSError(f"the fork server refused: {answer.get('error')}")
        return int(answer["pid"]), status_r

    def restore(self, lowered: int) -> int:
        """Ask the server that forked this process to raise it back by `lowered`."""
        with self._lock:
            sock = self._connect()
            try:
                sock.sendall(json.dumps({"restore": lowered}).encode() + b"\n")
                answer = self._answer(sock)
            except OSError:
                self._close()
                raise
        if "restored" not in answer:
            raise OSError(f"the fork server refused: {answer.get('error')}")
        return int(answer["restored"])

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(30)
            try:
                sock.connect("\0" + self.name)
            except OSError:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def _answer(self, sock: socket.socket) -> dict[str, Any]:
        while b"\n" not in self._buf:
            data = sock.recv(4096)
            if not data:
                raise ConnectionResetError("the fork server closed the connection")
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buf = b""


class StatusPipe:
    """The read end of a forked process's status pipe: its exit code once it has ended.

    Several threads may ask at once (a controller's watcher polls while another thread
    waits). The descriptor stays open until this object goes: a thread waiting in ``select``
    on it wakes at its end of file, where one closed under it by another thread would never
    wake it (Linux does not), and it would wait out its whole timeout."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._data = b""
        self._lock = threading.Lock()
        self.code: int | None = None

    def poll(self) -> int | None:
        with self._lock:  # one reader at a time: the bytes are gathered in order
            if self.code is not None:
                return self.code
            while True:
                try:
                    chunk = os.read(self.fd, 64)
                except BlockingIOError:
                    return None
                if not chunk:
                    break
                self._data += chunk
            usable = len(self._data) - len(self._data) % _CODE.size
            # the server's reaped status comes last when it lived; the child's own otherwise;
            # none: killed while the server was gone
            self.code = (
                _CODE.unpack_from(self._data, usable - _CODE.size)[0] if usable else -signal.SIGKILL
            )
            return self.code

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            sel = selectors.DefaultSelector()
            try:
                sel.register(self.fd, selectors.EVENT_READ)
                sel.select(left)
            finally:
                sel.close()
        return code

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m jupyter_edt.launch.forkserver <name> [module...]", file=sys.stderr)
        return 2
    serve(args[0], args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
