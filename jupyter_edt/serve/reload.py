"""SIGHUP (``systemctl reload jupyter-edt``): read the config files that ``jupyter edt serve``
started with again, with its command line over them, and apply the settings that change live
(``jobs/liverules.py``). Every other setting takes a restart. A file that does not load, or a
bad value, is logged, naming the problem, and the running configuration stays."""

from __future__ import annotations

import os
from typing import Any

from traitlets.config import Application, Config, DeferredConfigString, LazyConfigValue

from ..jobs.liverules import FIELDS, BadSetting, LiveConfig, LiveRules, describe


def read_config(app: Application) -> Config:
    """The app's config files as they are now (in the order it loaded them), then its
    command line, which wins as it did at the start. Whatever a file raises, raised."""
    config = Config()
    for path in app.loaded_config_files:
        directory, filename = os.path.split(path)
        loader = (
            app.json_config_loader_class
            if filename.endswith(".json")
            else app.python_config_loader_class
        )
        config.merge(loader(filename, path=directory, log=app.log).load_config())
    config.merge(app.cli_config)
    return config


def live_values(app: Application, config: Config) -> dict[str, Any]:
    """The live settings `config` gives `app` (by its class's name or a parent's, as at the
    start); one it no longer sets goes back to its default."""
    section = app._find_my_config(config)  # the sections of the app's classes, merged
    values: dict[str, Any] = {}
    for name in FIELDS:
        value = section[name] if name in section else app.trait_defaults(name)
        if isinstance(value, LazyConfigValue):  # c.EDTService.user_quotas.update({...})
            value = value.get_value(app.trait_defaults(name))
        elif isinstance(value, DeferredConfigString):  # from the command line
            value = value.get_value(app.traits()[name])
        values[name] = value
    return values


async def reload_live_settings(app: Application, live: LiveConfig) -> dict[str, Any] | None:
    """Apply what the config files say now of the live settings; the change's record (None:
    nothing changed, or nothing applied because the files do not load or hold a bad value)."""
    files = ", ".join(app.loaded_config_files) or "no config file"
    try:
        rules = LiveRules.parse(live_values(app, read_config(app)))
        live.check(rules)
    except BadSetting as err:
        app.log.error(
            "jupyter-edt: SIGHUP: not reloaded, %s has a bad %s: %s The running "
            "configuration stays.",
            files,
            err.field,
            err.message,
        )
        return None
    except Exception as err:  # a file that does not run, or is gone
        app.log.error(
            "jupyter-edt: SIGHUP: not reloaded, %s does not load (%s: %s). The running "
            "configuration stays.",
            files,
            type(err).__name__,
            err,
        )
        return None
    try:
        record = await live.change(rules, user=None, source="reload")
    except Exception:  # applied, but the allocation after it failed: the next tick retries
        app.log.exception("jupyter-edt: SIGHUP: reloaded %s, but allocating again failed", files)
        return None
    if record is None:
        app.log.info("jupyter-edt: SIGHUP: reloaded %s; no live setting changed.", files)
    else:
        said = "; ".join(describe(c) for c in record["changes"])
        app.log.info(
            "jupyter-edt: SIGHUP: reloaded %s: %s (other settings take a restart).", files, said
        )
    return record
