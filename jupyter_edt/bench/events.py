"""Event stream under load: `python -m jupyter_edt.bench.events --json`.

Starts a real Jupyter server with jupyter-edt, runs `--jobs` jobs whose synthetic driver
(bench/emitter.py) writes `--rate` metric events per second in total, and connects
`--subscribers` WebSocket clients to the events feed, each of which disconnects once halfway and
resumes from its last cursor. Meanwhile it times `GET /edt/api/v1/jobs`. Prints:

- `p95_latency_ms`: from an event's write in the job's event file to its receipt by a subscriber
- `lost_events`: steps missing from what a subscriber saw of a job, over all subscribers
- `api_p95_ms`: latency of GET jobs under that load
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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


class Server:
    """A Jupyter server in its own process and directories, with the synthetic driver."""

    def __init__(self, root: Path, jobs: int) -> None:
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
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

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    async def ready(self, client: AsyncHTTPClient, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                await client.fetch(f"{self.url}/api/status", headers=self.headers())
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Jupyter server did not start") from None
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Subscriber:
    """One WebSocket client: records latency and the steps it saw of each job."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cursor = 0
        self.latencies: list[float] = []
        self.steps: dict[str, list[int]] = {}
        self.reconnects = 0

    async def run(self, until: asyncio.Event, reconnect_at: float) -> None:
        reconnected = False
        while not until.is_set():
            url = f"ws://127.0.0.1:{self.server.port}/edt/api/v1/events?after={self.cursor}"
            ws = await websocket_connect(HTTPRequest(url, headers=self.server.headers()))
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
                    self._take(json.loads(message), time.time())
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


async def measure(args: argparse.Namespace, server: Server) -> dict[str, Any]:
    client = AsyncHTTPClient(max_clients=20)
    await server.ready(client)
    api = f"{server.url}/edt/api/v1"
    subscribers = [Subscriber(server) for _ in range(args.subscribers)]
    done = asyncio.Event()
    start = time.monotonic()
    tasks = [
        asyncio.create_task(s.run(done, start + args.seconds / 2 + i * 0.01))
        for i, s in enumerate(subscribers)
    ]
    per_job = args.rate / args.jobs
    ids = []
    for k in range(args.jobs):
        body = {
            "name": f"emitter-{k}",
            "code": "pass",
            "max_gpus": 1,
            "env": {"EDT_EMIT_RATE": str(per_job), "EDT_EMIT_SECONDS": str(args.seconds)},
        }
        response = await client.fetch(
            f"{api}/jobs", method="POST", body=json.dumps(body), headers=server.headers()
        )
        ids.append(json.loads(response.body)["id"])
    expected = int(per_job * args.seconds)

    api_latencies: list[float] = []
    deadline = time.monotonic() + args.seconds + 120
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        response = await client.fetch(f"{api}/jobs", headers=server.headers())
        api_latencies.append((time.monotonic() - t0) * 1000)
        jobs = json.loads(response.body)["jobs"]
        finished = all(j["state"] == "SUCCEEDED" for j in jobs)
        seen_all = all(
            len(s.steps) == args.jobs and all(len(v) >= expected for v in s.steps.values())
            for s in subscribers
        )
        if finished and seen_all:
            break
        await asyncio.sleep(0.1)
    done.set()
    await asyncio.gather(*tasks)
    latencies = [x for s in subscribers for x in s.latencies]
    return {
        "jobs": args.jobs,
        "events_per_s": args.rate,
        "subscribers": args.subscribers,
        "seconds": args.seconds,
        "events_received": len(latencies),
        "reconnects": sum(s.reconnects for s in subscribers),
        "p50_latency_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p95_latency_ms": round(p95(latencies), 1),
        "lost_events": sum(s.lost(expected) for s in subscribers),
        "api_p95_ms": round(p95(api_latencies), 1),
        "api_requests": len(api_latencies),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s over all jobs")
    parser.add_argument("--subscribers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long jobs emit")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edt-bench-events-") as tmp:
        server = Server(Path(tmp), args.jobs)
        try:
            result = asyncio.run(measure(args, server))
        finally:
            server.stop()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
