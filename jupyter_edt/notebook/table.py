"""A list of jobs shown as a table: text for terminals and ``%edt_jobs``, HTML for notebooks."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from typing import Any

COLUMNS = ("ID", "NAME", "STATE", "GPUS", "KIND", "PRIORITY", "AGE", "REASON")


class JobTable(list):
    """A plain list of ``Job`` handles that displays itself as a table."""

    def rows(self) -> list[tuple[str, ...]]:
        now = time.time()
        return [_row(job, now) for job in self]

    def __repr__(self) -> str:
        return format_text(self.rows()) if self else "No jobs."

    def _repr_html_(self) -> str:
        if not self:
            return "<p>No jobs.</p>"
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in COLUMNS)
        body = "".join(
            "<tr>"
            + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row)
            + "</tr>"
            for row in self.rows()
        )
        table = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        return f"<table class='edt-jobs'>{table}</table>"


def format_text(rows: Iterable[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the reason, last, is not padded."""
    rows = [COLUMNS, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _row(job: Any, now: float) -> tuple[str, ...]:
    reason = job.reason.splitlines()[0] if job.reason else ""
    return (
        job.id,
        job.name,
        job.state,
        f"{len(job.devices)}/{job.max_gpus}",
        _kind(job),
        str(job.priority),
        _age(now - job.created),
        reason[:60] + ("..." if len(reason) > 60 else ""),
    )


def _kind(job: Any) -> str:
    """What a resize does to the job (its kind), "fixed" for an elastic one whose program
    runs without the elastic runtime, with its restarts after a driver died: ``elastic+1``."""
    kind = str(job.spec.get("kind") or "elastic")
    if kind == "elastic" and job.state == "RUNNING" and not job.elastic:
        kind = "fixed"
    return kind + (f"+{job.restarts}" if job.restarts else "")


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d"
