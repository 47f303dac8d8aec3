"""Every key of a job's rendezvous store (torch's TCPStore, served by the controller), in one
place: the controller and the workers talk only through these.

  ctl                   the controller's orders: {"gen", "hold", "ckpt"} (JSON)
  members/<gen>         the workers of generation <gen>, in rank order (JSON list)
  ready/<worker>        a started worker's pid: it is ready to join
  formed/<gen>          set once generation <gen>'s group has formed (JSON: what it agreed)
  failed/<gen>          counter: a worker of generation <gen> could not form its group
  held/<step>/<worker>  the worker holds at <step> for a rescale
  release/<step>        the controller lets the holders of <step> go on
  hb/<worker>           counter a CUDA worker bumps as its heartbeat
"""

from __future__ import annotations

CTL = "ctl"


def members_key(gen: int) -> str:
    return f"members/{gen}"


def ready_key(worker: str) -> str:
    return f"ready/{worker}"


def formed_key(gen: int) -> str:
    return f"formed/{gen}"


def failed_key(gen: int) -> str:
    return f"failed/{gen}"


def held_key(step: int, worker: str) -> str:
    return f"held/{step}/{worker}"


def release_key(step: int) -> str:
    return f"release/{step}"


def heartbeat_key(worker: str) -> str:
    return f"hb/{worker}"
