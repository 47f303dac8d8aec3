"""The two metric file formats WMLA programs write, and how the server reads them.

- emetrics (``$LOG_DIR/evaluation-metrics.txt``), one JSON object a line::

    {"meta": {"training_id": "...", "time": <ms>, "rindex": <n>[, "subid": "..."]},
     "grouplabel": "train" | "test",
     "etimes": {"iteration": {"type": 2, "value": "<n>"}, "time_stamp": {"value": "..."}},
     "values": {"<name>": {"type": 3, "value": "<float>"}}}

  A typed value is a string with ``type`` 2 (int), 3 (float) or none (string).
- elog (``$LOG_DIR/stdout``), one text line per record::

    [%Y-%m-%d %H:%M:%S] Train,\\tTimestamp: <ms>,\\tGlobal steps: <n>,\\tIteration: <n>,
    \\tLoss: <%.5f>,\\tAccuracy: <%.5f>      (one line)

  and the same without steps and iteration for test lines.

The server turns emetrics lines into metric records of type ``emetrics`` (one per line, with
``group``, ``iteration`` and each value as a number), next to the runtime's own records.
Standard library only: it runs in the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ELOG_FILE",
    "EMETRICS_FILE",
    "elog_line",
    "emetrics_line",
    "emetrics_records",
    "parse_elog_line",
    "typed_value",
]

EMETRICS_FILE = "evaluation-metrics.txt"
ELOG_FILE = "stdout"
# where a job's processes write them, relative to the job directory: a WMLA job's LOG_DIR is
# RESULT_DIR/log/<process>; other jobs share logs/
EMETRICS_PATTERNS = (f"result/log/*/{EMETRICS_FILE}", f"logs/{EMETRICS_FILE}")
ELOG_PATTERNS = (f"result/log/*/{ELOG_FILE}",)
INT, FLOAT = 2, 3


def typed_value(value: Any) -> dict[str, Any]:
    """A value in emetrics' typed form."""
    if isinstance(value, bool):
        return {"value": str(value)}
    if isinstance(value, int):
        return {"type": INT, "value": str(value)}
    if isinstance(value, float):
        return {"type": FLOAT, "value": str(value)}
    return {"value": str(value)}


def untyped(item: Any) -> Any:
    """A typed emetrics value as a Python value; ValueError for a malformed one."""
    if not isinstance(item, Mapping) or "value" not in item:
        raise ValueError(f"an emetrics value must be an object with a 'value', got {item!r}")
    kind, raw = item.get("type"), item["value"]
    if kind == INT:
        return int(raw)
    if kind == FLOAT:
        return float(raw)
    return str(raw)


def emetrics_line(
    training_id: str,
    group: str,
    iteration: int,
    values: Mapping[str, Any],
    *,
    rindex: int,
    subid: str | None = None,
    now_ms: int | None = None,
) -> str:
    """One emetrics line (without the newline)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    meta: dict[str, Any] = {"training_id": training_id, "time": now_ms, "rindex": rindex}
    if subid is not None:
        meta["subid"] = subid
    return json.dumps(
        {
            "meta": meta,
            "grouplabel": group,
            "etimes": {
                "iteration": typed_value(int(iteration)),
                "time_stamp": {"value": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())},
            },
            "values": {k: typed_value(v) for k, v in values.items()},
        }
    )


def emetrics_record(line: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """A metric record from one emetrics line (or its decoded JSON); ValueError naming what
    is wrong."""
    try:
        data = line if isinstance(line, Mapping) else json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"an emetrics line is not JSON: {err}") from err
    if not isinstance(data, Mapping):
        raise ValueError("an emetrics line must be a JSON object")
    meta = data.get("meta") or {}
    group = data.get("grouplabel")
    if not isinstance(group, str) or not isinstance(meta, Mapping):
        raise ValueError("an emetrics line needs 'grouplabel' and 'meta'")
    record: dict[str, Any] = {"type": "emetrics", "group": group}
    if isinstance(meta.get("time"), int | float):
        record["time"] = meta["time"] / 1000.0
    for key in ("rindex", "subid"):
        if key in meta:
            record[key] = meta[key]
    etimes = data.get("etimes") or {}
    if "iteration" in etimes:
        record["iteration"] = untyped(etimes["iteration"])
    values = data.get("values") or {}
    if not isinstance(values, Mapping):
        raise ValueError("an emetrics line's 'values' must be an object")
    for name, item in values.items():
        if name in ("type", "group", "iteration", "time"):
            raise ValueError(f"an emetrics value may not be named {name!r}")
        record[str(name)] = untyped(item)
    return record


def emetrics_records(lines: Iterable[str | bytes | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Metric records from emetrics lines; lines that are not emetrics are skipped."""
    records = []
    for line in lines:
        if not isinstance(line, Mapping) and not line.strip():
            continue
        try:
            records.append(emetrics_record(line))
        except (ValueError, TypeError):
            continue
    return records


def elog_line(
    title: str,
    *,
    loss: float,
    accuracy: float,
    global_steps: int | None = None,
    iteration: int | None = None,
    now: float | None = None,
) -> str:
    """One elog line (without the newline); steps and iteration only on train lines."""
    now = time.time() if now is None else now
    parts = [
        f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}] {title}",
        f"Timestamp: {int(now * 1000)}",
    ]
    if global_steps is not None:
        parts.append(f"Global steps: {global_steps}")
    if iteration is not None:
        parts.append(f"Iteration: {iteration}")
    parts += [f"Loss: {loss:.5f}", f"Accuracy: {accuracy:.5f}"]
    return ",\t".join(parts)


def parse_elog_line(line: str) -> dict[str, Any] | None:
    """The fields of an elog line (``title``, ``timestamp``, ``loss``, ...), or None for any
    other line."""
    if not line.startswith("[") or "] " not in line:
        return None
    stamp, _, rest = line.rstrip("\n").partition("] ")
    parts = rest.split(",\t")
    if len(parts) < 4:
        return None
    fields: dict[str, Any] = {"date": stamp[1:], "title": parts[0]}
    names = {
        "Timestamp": ("timestamp", int),
        "Global steps": ("global_steps", int),
        "Iteration": ("iteration", int),
        "Loss": ("loss", float),
        "Accuracy": ("accuracy", float),
    }
    for part in parts[1:]:
        key, sep, value = part.partition(": ")
        if not sep or key not in names:
            return None
        name, kind = names[key]
        try:
            fields[name] = kind(value)
        except ValueError:
            return None
    return fields if "loss" in fields and "timestamp" in fields else None
