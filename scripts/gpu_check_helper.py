"""What scripts/gpu-check.sh needs beyond bash: part records, the summary, the server packages.

Standard library only, any Python 3.8+: it runs with the machine's ``python3`` before anything
else is known to work there.

  record NAME --out DIR --rc N --start T --limit S --logs DIR --command STR
        $OUT/NAME.json from a part that started at T (Unix time) and has ended: its status
        (``timeout`` for exit 124 or 137 at its limit: ``timeout`` stopped it; ``failed`` for
        any other exit but 0, or for no JSON object in its output; else ``ok``, or the status
        its JSON names, such as ``no_nvml``), its exit code, duration and limit, the JSON
        object its command printed last (``result``) and the tail of its stderr (and of its
        stdout, when it failed; both whole in DIR/NAME.out and .err). Prints the status.
  skip NAME --out DIR --reason STR
        $OUT/NAME.json of a part not run: status ``skipped``. Prints the status.
  summary --out DIR --parts A,B,... --mode MODE --wall S --budget S
        $OUT/summary.json: every part's status and duration, and each part's record whole, so
        that this one file is enough to read a run. Exits 1 when a part failed or timed out.
  server-env --wheels DIR --site DIR --root DIR
        Installs every wheel in DIR (``make gpu-wheels``) into the folder --site, with no
        index and no dependency resolution (the wheels are the whole closure), then checks that
        ``jupyter edt serve`` and bench.latency import with PYTHONPATH=--site:--root. Prints
        one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

TAIL_CHARS = 2000
# What the server-side parts import; checked after the install.
SERVER_IMPORTS = "import jupyter_edt.serve.app, jupyter_edt.cli, jupyter_edt.bench.latency"


def _tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-chars:].decode("utf-8", "replace")


def _last_json(path: Path) -> dict | None:
    """The JSON object on the last line of `path` that holds one, if any."""
    try:
        lines = path.read_text("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _write(out: Path, name: str, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out / f"{name}.json")


def record(args: argparse.Namespace) -> int:
    logs = Path(args.logs)
    result = _last_json(logs / f"{args.name}.out")
    rc = args.rc
    duration = time.time() - args.start
    if rc in (124, 137) and duration >= args.limit - 1:
        status = "timeout"
    elif rc != 0:
        status = "failed"
    elif result is None:
        status = "failed"  # exit 0 but no figures: the part did not do its work
    else:
        status = result.get("status") if isinstance(result.get("status"), str) else "ok"
    rec = {
        "part": args.name,
        "status": status,
        "exit_code": rc,
        "duration_s": round(duration, 2),
        "limit_s": args.limit,
        "command": args.command,
        "result": result,
        "stderr_tail": _tail(logs / f"{args.name}.err"),
    }
    if status in ("failed", "timeout"):  # what it printed besides its result, if anything
        rec["stdout_tail"] = _tail(logs / f"{args.name}.out", 1000)
    if status == "timeout":
        rec["reason"] = f"ran past its limit of {args.limit} s"
    elif status == "failed":
        rec["reason"] = f"exit code {rc}" if rc else "no JSON object in its output"
    _write(Path(args.out), args.name, rec)
    print(status)
    return 0


def skip(args: argparse.Namespace) -> int:
    rec = {
        "part": args.name,
        "status": "skipped",
        "reason": args.reason,
        "exit_code": None,
        "duration_s": 0.0,
        "limit_s": None,
        "command": None,
        "result": None,
    }
    _write(Path(args.out), args.name, rec)
    print("skipped")
    return 0


def summary(args: argparse.Namespace) -> int:
    out = Path(args.out)
    names = [n for n in args.parts.split(",") if n]
    records = {}
    for name in names:
        try:
            records[name] = json.loads((out / f"{name}.json").read_text())
        except (OSError, ValueError) as e:  # the script itself broke: say so
            records[name] = {
                "part": name,
                "status": "failed",
                "reason": f"no record: {e}",
                "duration_s": None,
            }
    statuses = {n: r.get("status") for n, r in records.items()}
    bad = [n for n, s in statuses.items() if s in ("failed", "timeout")]
    doc = {
        "mode": args.mode,
        "ok": not bad,
        "failed": bad,
        "wall_s": round(args.wall, 2),
        "budget_s": args.budget,
        "out": str(out),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "python_path": sys.executable,
        },
        "parts": {
            n: {
                "status": r.get("status"),
                "duration_s": r.get("duration_s"),
                "exit_code": r.get("exit_code"),
                "reason": r.get("reason"),
            }
            for n, r in records.items()
        },
        "records": records,
    }
    _write(out, "summary", doc)
    print(json.dumps({"ok": doc["ok"], "failed": bad, "wall_s": doc["wall_s"]}))
    for n, r in records.items():
        why = f"  ({r['reason']})" if r.get("reason") else ""
        print(f"  {n:<14} {r.get('status')!s:<9} {r.get('duration_s')!s:>7} s{why}")
    return 0 if doc["ok"] else 1


def server_env(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    wheels = sorted(Path(args.wheels).glob("*.whl"))
    if not wheels:
        print(json.dumps({"error": f"no wheels in {args.wheels}"}))
        return 1
    site = Path(args.site)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    pip += ["--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--upgrade"]
    done = subprocess.run([*pip, "--target", str(site), *map(str, wheels)], check=False)
    if done.returncode != 0:
        print(json.dumps({"error": f"pip install exited {done.returncode}"}))
        return 1
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), args.root])}
    check = subprocess.run(
        [sys.executable, "-c", SERVER_IMPORTS], env=env, capture_output=True, text=True
    )
    size = sum(w.stat().st_size for w in wheels)
    result = {
        "python": sys.executable,
        "from": "wheels",
        "site": str(site),
        "wheels": [w.name for w in wheels],
        "wheels_mb": round(size / 2**20, 2),
        "imports_ok": check.returncode == 0,
        "install_s": round(time.monotonic() - t0, 2),
    }
    if check.returncode != 0:
        result["error"] = check.stderr.strip().splitlines()[-1:] or ["import failed"]
    print(json.dumps(result))
    return 0 if check.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("record")
    r.add_argument("name")
    r.add_argument("--out", required=True)
    r.add_argument("--rc", type=int, required=True)
    r.add_argument("--start", type=float, required=True)
    r.add_argument("--limit", type=int, required=True)
    r.add_argument("--logs", required=True)
    r.add_argument("--command", default="")
    s = sub.add_parser("skip")
    s.add_argument("name")
    s.add_argument("--out", required=True)
    s.add_argument("--reason", required=True)
    m = sub.add_parser("summary")
    m.add_argument("--out", required=True)
    m.add_argument("--parts", required=True)
    m.add_argument("--mode", required=True)
    m.add_argument("--wall", type=float, required=True)
    m.add_argument("--budget", type=int, required=True)
    e = sub.add_parser("server-env")
    e.add_argument("--wheels", required=True)
    e.add_argument("--site", required=True)
    e.add_argument("--root", required=True)
    args = ap.parse_args(argv)
    return {"record": record, "skip": skip, "summary": summary, "server-env": server_env}[
        args.verb
    ](args)


if __name__ == "__main__":
    sys.exit(main())
