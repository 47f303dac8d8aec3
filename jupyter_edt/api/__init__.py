"""Thin Tornado handlers: validate, call a service, shape the answer."""

from __future__ import annotations

from .cluster import ClusterHandler

API_PREFIX = "/edt/api/v1"

default_handlers = [
    (rf"{API_PREFIX}/cluster", ClusterHandler),
]
