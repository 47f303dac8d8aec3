"""Event stream under load: `python -m jupyter_edt.bench.events --json`.

Starts a real Jupyter server with jupyter-edt, runs `--jobs` jobs whose synthetic driver
(bench/emitter.py) writes `--rate` metric events per second in total, and connects
`--subscribers` WebSocket clients to the events feed, each of which disconnects once halfway and
resumes from its last cursor. Meanwhile it times `GET /edt/api/v1/jobs`. The subscribers run in
a process of their own, as browsers are elsewhere: an API call is then not timed behind the
decoding of 50 subscribers' messages in the prober's own event loop (the CPU stays shared, as on
one machine it would be). Prints:

- `p95_latency_ms`: from an event's write in the job's event file to its receipt by a subscriber
- `lost_events`: steps missing from what a subscriber saw of a job, over all subscribers
- `api_p95_ms`: latency of GET jobs under that load

Subscribers ask for batches (`batch=1`, as JupyterLab's client does); `--unbatched` for one event
per message, as before batching.

With `--through-forwarder`, the jobs run in a shared `jupyter edt serve` and the Jupyter server
forwards to it (the remote mode, as under JupyterHub): half the subscribers and half the API
calls go through the server's forwarder, half to the service directly, at the same time, so
`hop_p95_latency_ms` and `hop_api_p95_ms` are what the forwarding hop adds under one load. The
figures without a prefix are the forwarded ones (what a user's browser sees); `direct_*` the
service's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[94] if len(values) >= 2 else (values or [0.0])[0]


class Endpoint:
    """Where the API is served (`url`, ending before ``edt/api/``) and how to call it."""

    url: str
    token: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    @property
    def ws(self) -> str:
        return "ws" + self.url[4:]


BENCH_USER = "bench"


class Service(Endpoint):
    """A shared `jupyter edt serve` with the synthetic driver, its user's token in a file;
    `settings` (``EDTService.*``, ...) override its own."""

    def __init__(self, root: Path, jobs: int, settings: dict[str, Any] | None = None) -> None:
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        root.mkdir(parents=True)
        tokens = root / "tokens.json"
        tokens.write_text(json.dumps({BENCH_USER: {"tokens": [self.token]}}))
        tokens.chmod(0o600)
        default = {
            "EDTService.ip": "127.0.0.1",
            "EDTService.port": self.port,
            "EDTService.devices": "virtual",
            "EDTService.virtual_gpus": jobs,
            "EDTService.database_url": f"sqlite:///{root / 'edt.sqlite'}",
            "EDTService.jobs_dir": str(root / "jobs"),
            "EDTService.driver_module": "jupyter_edt.bench.emitter",
            "EDTService.authenticator_class": "jupyter_edt.serve.auth.TokenFileAuthenticator",
            "EDTService.run_as_users": False,
            "EDTService.allow_shared_account": True,
            "TokenFileAuthenticator.tokens_file": str(tokens),
        }
        config = root / "edt_config.py"
        options = {**default, **(settings or {})}
        config.write_text("".join(f"c.{k} = {v!r}\n" for k, v in options.items()))
        self.log = (root / "service.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_edt.cli", "serve", f"--config={config}"],
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,  # its jobs' processes lead their own: none of them here
        )

    async def ready(self, client: AsyncHTTPClient, timeout: float = 60.0) -> None:
        await _ready(client, f"{self.url}edt/api/health", {}, self.proc, timeout)

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


async def _ready(
    client: AsyncHTTPClient,
    url: str,
    headers: dict[str, str],
    proc: subprocess.Popen[bytes],
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.fetch(url, headers=headers)
            return
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer") from None
            await asyncio.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


class Server(Endpoint):
    """A Jupyter server in its own process and directories, with the synthetic driver, or
    forwarding to `service` (the remote mode)."""

    def __init__(self, root: Path, jobs: int, service: Service | None = None) -> None:
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/"
        config: dict[str, Any] = {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_edt": True},
                "allow_root": True,
                "open_browser": False,
                "port": self.port,
                "port_retries": 0,
                "root_dir": str(root),
            },
            "IdentityProvider": {"token": self.token},
            "EDTApp": {
                "devices": "virtual",
                "virtual_gpus": jobs,
                "database_url": f"sqlite:///{root / 'edt.sqlite'}",
                "jobs_dir": str(root / "jobs"),
                "driver_module": "jupyter_edt.bench.emitter",
            },
        }
        if service is not None:
            config["EDTApp"] = {
                "service_url": service.url,
                "service_token": service.token,
                "owner": BENCH_USER,
            }
        (root / "config").mkdir()
        (root / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(root / "config"),
            "JUPYTER_DATA_DIR": str(root / "data"),
            "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        }
        self.log = (root / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server"], env=env, stdout=self.log, stderr=self.log
        )

    async def ready(self, client: AsyncHTTPClient, timeout: float = 60.0) -> None:
        await _ready(client, f"{self.url}api/status", self.headers(), self.proc, timeout)

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


@dataclass(frozen=True)
class Route:
    """Where a subscriber connects: what of an `Endpoint` crosses into the subscribers'
    process."""

    ws: str
    headers: dict[str, str]

    @classmethod
    def of(cls, endpoint: Endpoint) -> Route:
        return cls(endpoint.ws, endpoint.headers())


class Subscriber:
    """One WebSocket client: records latency and the steps it saw of each job."""

    def __init__(self, server: Route, *, batch: bool = True) -> None:
        self.server = server
        self.batch = batch
        self.cursor = 0
        self.latencies: list[float] = []
        self.steps: dict[str, list[int]] = {}
        self.reconnects = 0

    async def run(self, until: asyncio.Event, reconnect_at: float) -> None:
        reconnected = False
        while not until.is_set():
            # batched, as JupyterLab's client asks for it (unless --unbatched)
            url = f"{self.server.ws}edt/api/v1/events?after={self.cursor}&batch={int(self.batch)}"
            ws = await websocket_connect(HTTPRequest(url, headers=self.server.headers))
            try:
                while not until.is_set():
                    if not reconnected and time.monotonic() >= reconnect_at:
                        reconnected = True
                        self.reconnects += 1
                        break
                    try:
                        message = await asyncio.wait_for(ws.read_message(), 0.5)
                    except asyncio.TimeoutError:
                        continue
                    if message is None:
                        break
                    now, data = time.time(), json.loads(message)
                    for event in data if isinstance(data, list) else [data]:
                        self._take(event, now)
            finally:
                ws.close()

    def _take(self, event: dict[str, Any], now: float) -> None:
        if "id" not in event:
            return  # keepalive
        self.cursor = event["id"]
        if event["kind"] != "metrics":
            return
        for record in event["records"]:
            self.latencies.append((now - record["time"]) * 1000)
            self.steps.setdefault(event["job_id"], []).append(record["global_step"])

    def lost(self, expected: int) -> int:
        missing = 0
        for steps in self.steps.values():
            missing += expected - len(set(steps))
        return missing

    def saw_all(self, jobs: int, expected: int) -> bool:
        return len(self.steps) == jobs and all(len(v) >= expected for v in self.steps.values())


def subscribe(
    routes: list[Route],
    args: argparse.Namespace,
    expected: int,
    seen_all: Any,
    stop: Any,
    results: Any,
) -> None:
    """The subscribers' process: `args.subscribers` clients over `routes` in turn, until
    `stop`; `seen_all` is set once every one has seen every job's `expected` steps. Sends
    each route's figures (by its index) to `results`."""
    subscribers = [
        Subscriber(routes[i % len(routes)], batch=not args.unbatched)
        for i in range(args.subscribers)
    ]

    async def run() -> None:
        done = asyncio.Event()
        start = time.monotonic()
        tasks = [
            asyncio.create_task(s.run(done, start + args.seconds / 2 + i * 0.01))
            for i, s in enumerate(subscribers)
        ]
        while not stop.is_set():
            if all(s.saw_all(args.jobs, expected) for s in subscribers):
                seen_all.set()
            await asyncio.sleep(0.1)
        done.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    figures = []
    for route in routes:
        mine = [s for s in subscribers if s.server is route]
        latencies = [x for s in mine for x in s.latencies]
        figures.append(
            {
                "events_received": len(latencies),
                "reconnects": sum(s.reconnects for s in mine),
                "p50_latency_ms": round(statistics.median(latencies), 1) if latencies else None,
                "p95_latency_ms": round(p95(latencies), 1),
                "lost_events": sum(s.lost(expected) for s in mine),
            }
        )
    results.send(figures)


async def measure(
    args: argparse.Namespace, server: Server, service: Service | None = None
) -> dict[str, Any]:
    """The load on `server`; with `service`, half of it through the server, half direct."""
    client = AsyncHTTPClient(max_clients=20)
    await server.ready(client)
    routes: list[Endpoint] = [server] if service is None else [server, service]
    if service is not None:
        await service.ready(client)
    per_job = args.rate / args.jobs
    expected = int(per_job * args.seconds)
    spawn = multiprocessing.get_context("spawn")
    seen_all, stop = spawn.Event(), spawn.Event()
    results, sender = spawn.Pipe(duplex=False)
    process = spawn.Process(
        target=subscribe,
        args=([Route.of(r) for r in routes], args, expected, seen_all, stop, sender),
        daemon=True,
    )
    process.start()
    for k in range(args.jobs):
        body = {
            "name": f"emitter-{k}",
            "code": "pass",
            "max_gpus": 1,
            "env": {"EDT_EMIT_RATE": str(per_job), "EDT_EMIT_SECONDS": str(args.seconds)},
        }
        await client.fetch(
            f"{server.url}edt/api/v1/jobs",
            method="POST",
            body=json.dumps(body),
            headers=server.headers(),
        )

    api_latencies: dict[int, list[float]] = {id(r): [] for r in routes}
    deadline = time.monotonic() + args.seconds + 120
    n = 0
    while time.monotonic() < deadline:
        route = routes[n % len(routes)]
        n += 1
        t0 = time.monotonic()
        response = await client.fetch(f"{route.url}edt/api/v1/jobs", headers=route.headers())
        api_latencies[id(route)].append((time.monotonic() - t0) * 1000)
        jobs = json.loads(response.body)["jobs"]
        finished = all(j["state"] == "SUCCEEDED" for j in jobs)
        if finished and seen_all.is_set():
            break
        if not process.is_alive():
            raise RuntimeError("the subscribers' process ended early")
        await asyncio.sleep(0.1)
    stop.set()
    subscribed = await asyncio.to_thread(results.recv)
    await asyncio.to_thread(process.join, 30)

    def figures(route: Endpoint) -> dict[str, Any]:
        return {
            **subscribed[routes.index(route)],
            "api_p95_ms": round(p95(api_latencies[id(route)]), 1),
            "api_requests": len(api_latencies[id(route)]),
        }

    result = {
        "jobs": args.jobs,
        "events_per_s": args.rate,
        "subscribers": args.subscribers,
        "seconds": args.seconds,
        "batched": not args.unbatched,
        **figures(server),
    }
    if service is not None:
        direct = figures(service)
        result |= {f"direct_{k}": v for k, v in direct.items()}
        result["hop_p95_latency_ms"] = round(result["p95_latency_ms"] - direct["p95_latency_ms"], 1)
        result["hop_api_p95_ms"] = round(result["api_p95_ms"] - direct["api_p95_ms"], 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s over all jobs")
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long jobs emit")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--through-forwarder",
        action="store_true",
        help="jobs in a shared `jupyter edt serve`, the Jupyter server forwarding to it",
    )
    parser.add_argument(
        "--unbatched",
        action="store_true",
        help="subscribe one event per message (batch=0), as clients before batching did",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edt-bench-events-") as tmp:
        service = Service(Path(tmp) / "service", args.jobs) if args.through_forwarder else None
        server = Server(Path(tmp), args.jobs, service)
        try:
            result = asyncio.run(measure(args, server, service))
        finally:
            server.stop()
            if service is not None:
                service.stop()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
