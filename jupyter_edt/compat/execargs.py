"""The ``args`` string of a WMLA execs submission, checked and split.

``--exec-start edtPyTorch --model-dir mnist --model-main main.py --cs-datastore-meta
type=fs,data_path=mnist --edt-options maxWorkers=4 --epochs 5`` holds the platform's options
and the program's own. The platform's are taken out; every other flag reaches the program in
order. The program sees ``--numWorker N`` in both of WMLA's styles, as WMLA passes it (tutorial
programs read it for ``engines_number``): as given, or, after ``--edt-options maxWorkers=N``
alone, added at the end. A bad value raises ``SpecError("args", ...)`` naming the option.

``exec_query`` reads the query string the way clients write it: they paste ``args`` into the URL
unencoded (``requests.post(url + "/execs?args=" + args, ...)``), so it arrives with spaces as
``%20`` (requests quotes them) and ``=``, ``,`` and ``&`` raw.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from urllib.parse import unquote, unquote_plus

from ..jobs.models import MAX_GPUS_LIMIT, SpecError

__all__ = ["ExecArgs", "exec_query", "parse_exec_args"]

EXEC_STARTS = ("edtPyTorch",)
# options of the platform: name -> passed on to the program as well
PLATFORM = {
    "--exec-start": False,
    "--model-dir": False,
    "--model-main": False,
    "--cs-datastore-meta": False,
    "--edt-options": False,
    "--numWorker": True,
    "--gpuPerWorker": False,
    "--debug-level": False,
}
EDT_OPTIONS = ("maxWorkers", "minWorkers")


@dataclass(frozen=True)
class ExecArgs:
    model_main: str
    model_dir: str | None
    data_path: str | None
    datastore: bool  # --cs-datastore-meta given: DATA_DIR is under the data root
    max_workers: int
    min_workers: int
    program_args: tuple[str, ...]
    debug_level: str | None = None


def _bad(message: str) -> SpecError:
    return SpecError("args", message)


def _count(option: str, raw: str, low: int = 1) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= MAX_GPUS_LIMIT:
        raise _bad(f"{option} must be an integer from {low} to {MAX_GPUS_LIMIT}, got {raw!r}")
    return value


def _pairs(option: str, raw: str) -> dict[str, str]:
    out = {}
    for item in filter(None, raw.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _bad(f"{option} takes key=value pairs separated by commas, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _relative(option: str, path: str) -> str:
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if not parts or path.startswith("/") or ".." in parts:
        raise _bad(f"{option} must name a folder inside the archive, got {path!r}")
    return "/".join(parts)


def parse_exec_args(text: str | None) -> ExecArgs:
    """Split and check an execs ``args`` string."""
    if not text or not text.strip():
        raise _bad("is required: e.g. '--exec-start edtPyTorch --model-main main.py'")
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise _bad(f"cannot be split into words: {err}") from err
    given: dict[str, str] = {}
    program: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if name not in PLATFORM:
            program.append(word)
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(words):
            value = words[i + 1]
            i += 1
        else:
            raise _bad(f"{name} needs a value")
        if name in given:
            raise _bad(f"{name} is given twice")
        given[name] = value
        if PLATFORM[name]:
            program += [name, value]
        i += 1
    start = given.get("--exec-start")
    if start is None:
        raise _bad("--exec-start is required (edtPyTorch)")
    if start not in EXEC_STARTS:
        raise _bad(f"--exec-start {start!r} is not supported: jupyter-edt runs edtPyTorch")
    main = given.get("--model-main")
    if main is None:
        raise _bad("--model-main is required: the program file, e.g. main.py")
    if not main.endswith(".py") or "/" in main or main.startswith("."):
        raise _bad(f"--model-main must be a .py file name, got {main!r}")
    model_dir = given.get("--model-dir")
    if model_dir is not None:
        model_dir = _relative("--model-dir", model_dir)
    data_path = None
    if "--cs-datastore-meta" in given:
        meta = _pairs("--cs-datastore-meta", given["--cs-datastore-meta"])
        if meta.get("type", "fs") != "fs":
            raise _bad(f"--cs-datastore-meta type={meta['type']} is not supported (only fs)")
        unknown = sorted(set(meta) - {"type", "data_path"})
        if unknown:
            raise _bad(f"--cs-datastore-meta does not know {', '.join(unknown)}")
        data_path = meta.get("data_path") or None
    max_workers = min_workers = None
    if "--edt-options" in given:
        options = _pairs("--edt-options", given["--edt-options"])
        unknown = sorted(set(options) - set(EDT_OPTIONS))
        if unknown:
            known = ", ".join(EDT_OPTIONS)
            raise _bad(f"--edt-options does not know {', '.join(unknown)} (known: {known})")
        if "maxWorkers" in options:
            max_workers = _count("maxWorkers", options["maxWorkers"])
        if "minWorkers" in options:
            min_workers = _count("minWorkers", options["minWorkers"])
    if "--numWorker" in given:
        workers = _count("--numWorker", given["--numWorker"])
        max_workers = max_workers if max_workers is not None else workers
    elif max_workers is not None:  # WMLA passes maxWorkers on as the program's --numWorker
        program += ["--numWorker", str(max_workers)]
    if "--gpuPerWorker" in given and given["--gpuPerWorker"] != "1":
        raise _bad(
            f"--gpuPerWorker must be 1 (a worker has one GPU), got {given['--gpuPerWorker']!r}"
        )
    max_workers = max_workers or 1
    min_workers = min_workers or 1
    if min_workers > max_workers:
        raise _bad(f"minWorkers ({min_workers}) must not exceed maxWorkers ({max_workers})")
    return ExecArgs(
        model_main=main,
        model_dir=model_dir,
        data_path=data_path,
        datastore="--cs-datastore-meta" in given,
        max_workers=max_workers,
        min_workers=min_workers,
        program_args=tuple(program),
        debug_level=given.get("--debug-level"),
    )


# A query parameter starts after an '&' that a name and '=' follow; any other '&' is the value's
_PARAM = re.compile(r"&(?=[A-Za-z_][A-Za-z0-9_]*=)")


def exec_query(query: str) -> dict[str, str]:
    """The parameters of an execs query string, ``args`` intact as the client wrote it.

    A client that pastes ``args`` into the URL sends spaces as ``%20`` and ``+``, ``=``, ``,``
    and ``&`` raw; one that form-encodes it (``params={"args": ...}``) sends spaces as ``+``
    and ``+`` as ``%2B``. So: a value split off at ``&name=`` only (an ``&`` inside ``args``
    stays); ``+`` is a space unless the value holds ``%20`` (then the client quoted spaces
    itself and ``+`` is a plus). ``#`` never arrives: clients cut the fragment off, so it is
    sent as ``%23``. The first of a repeated name counts."""
    out: dict[str, str] = {}
    for part in _PARAM.split(query):
        name, _, value = part.partition("=")
        decode = unquote if "%20" in value else unquote_plus
        out.setdefault(unquote_plus(name), decode(value))
    return out
