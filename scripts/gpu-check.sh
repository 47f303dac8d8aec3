#!/usr/bin/env bash
# The GPU check (issue 23): every part of jupyter-edt that only a GPU machine can measure, in one
# run of at most --budget seconds, one JSON file per part.
#
# Usage: bash scripts/gpu-check.sh [--dry-run] [--out DIR] [--only PART,...] [--budget SECONDS]
#
#   --dry-run      every part on the CPU (CUDA_VISIBLE_DEVICES=""), at its smallest size: world
#                  size 2 only, --quick everywhere, --require-cuda off. `make test` runs it
#                  (tests/bench/test_gpu_check_script.py), so that the script cannot rot.
#   --out DIR      where the JSON files go (default: a new folder under /tmp, printed at the
#                  start and the end). DIR/logs/PART.out and .err hold each part's output;
#                  DIR/tmp the job folders of a gpu_check that failed.
#   --only LIST    run only these parts (comma-separated; latency and restart bring server_env).
#   --budget S     the whole run's seconds (default 570: one device command may run 600 s, the
#                  issue allows 720). Each part runs under `timeout` with its own limit, cut to
#                  what is left of the budget, so one slow or failing part cannot cost the
#                  others their time; a part that no longer fits is skipped and says so.
#
# It runs from the working tree (PYTHONPATH is set to it; nothing is installed), on a machine
# whose python3 (or $PYTHON) has torch (a CUDA build, for the real run) and nvidia-ml-py. The
# Jupyter-side packages that `jupyter edt serve` needs (for bench.latency and bench.restart) are
# used if python3 has them; otherwise they are installed offline into a scratch folder from
# the wheels of `make gpu-wheels` (.gpu-wheels/, or $GPU_WHEELS), made where PyPI is reachable;
# with neither, those parts are skipped and say why.
#
# Parts, in order (limit in seconds, real run / dry run):
#   nvml        gpu_check --nvml: open_inventory("auto") finds the GPUs with UUID, memory and
#               utilisation, and the utilisation rises under a matmul load (60 / 60)
#   gpu_check   gpu_check --require-cuda: exactness against one GPU, grow/shrink pauses,
#               SIGKILL recovery, host-tensor checkpoints, resume on CPU and GPU (200 / 60)
#   runtime_w2, runtime_w4, runtime_w8
#               bench.runtime --workers N on gloo: overhead against DDP, grow/shrink pauses,
#               recovery (80, 100, 130 / w2 only, --quick, 120)
#   models      bench.models, if it exists: the Trainer against DDP under torchrun on ResNet-18
#               and a small GPT-2, CUDA at 1 worker and gloo at 2, 4, 8 (200 / --quick, 120)
#   server_env  the Jupyter-side packages for the next two: present, or installed from wheels
#               (90 / 90)
#   latency     bench.latency, warm and cold (200 / --quick, 150)
#   restart     bench.restart (the restart benchmark), if it exists (150 / 120)
#
# Each part writes OUT/PART.json: {part, status, exit_code, duration_s, limit_s, command,
# result (the JSON its command printed), stderr_tail, stdout_tail (if it failed), reason};
# status is ok, failed, timeout, skipped, or no_nvml (the nvml part on a machine without
# NVML). Then OUT/summary.json: {mode, ok, failed, wall_s, budget_s, machine, parts: {PART:
# {status, duration_s, exit_code, reason}}, records: {PART: its whole record}}. Exit status:
# 0 when no part failed or timed out, 1 otherwise, 2 for bad usage.
#
# On the device machine, as one command (its $OUT brings back at most 8 files, so the folder
# comes back as one archive beside the summary):
#   bash scripts/gpu-check.sh --out /tmp/gc; s=$?; cp /tmp/gc/summary.json $OUT/;
#   tar czf $OUT/gpu-check.tgz -C /tmp gc; exit $s
# with carry [".gpu-wheels"] (made here first by `make gpu-wheels`) and timeout_s 600.

set -u -o pipefail

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
HELPER=$ROOT/scripts/gpu_check_helper.py
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
DRY=0
OUT=""
ONLY=""
BUDGET=570
GRACE=15 # after a part's limit, SIGINT; after this many seconds more, SIGKILL

while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    --out=*) OUT=${1#--out=} ;;
    --only) ONLY=${2:?--only needs a list of parts}; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    --budget=*) BUDGET=${1#--budget=} ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
  echo "gpu-check.sh: --budget takes whole seconds, got '$BUDGET'" >&2
  exit 2
fi
ALL_PARTS=(nvml gpu_check runtime_w2 runtime_w4 runtime_w8 models server_env latency restart)
for part in ${ONLY//,/ }; do
  if [[ " ${ALL_PARTS[*]} " != *" $part "* ]]; then
    echo "gpu-check.sh: no part '$part' (parts: ${ALL_PARTS[*]})" >&2
    exit 2
  fi
done
if ! command -v "$PY" >/dev/null || ! command -v timeout >/dev/null; then
  echo "gpu-check.sh: needs $PY and timeout (coreutils) on PATH" >&2
  exit 2
fi
if [[ -z $OUT ]]; then
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/edt-gpu-check.XXXXXX") || exit 2
fi
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs
WORK=$(mktemp -d "${TMPDIR:-/tmp}/edt-gpu-check-work.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT

export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
if ((DRY)); then
  MODE=dry-run
  export CUDA_VISIBLE_DEVICES="" # on the CPU, even on a GPU machine
else
  MODE=gpu
fi
# The modules `jupyter edt serve` and bench.latency import (as scripts/gpu_check_helper.py).
SERVER_IMPORTS="import jupyter_edt.serve.app, jupyter_edt.cli, jupyter_edt.bench.latency"

PARTS=()     # every part recorded, in order, for the summary
STATUS=""    # the last part's status
echo "gpu-check ($MODE): results in $OUT, budget ${BUDGET} s, python: $(command -v "$PY")"

selected() { # PART: whether --only (if given) names it
  [[ -z $ONLY ]] || [[ ,$ONLY, == *,$1,* ]]
}

skip() { # PART REASON
  PARTS+=("$1")
  STATUS=$("$PY" "$HELPER" skip "$1" --out "$OUT" --reason "$2")
  printf '== %-11s skipped: %s\n' "$1" "$2"
}

run_part() { # PART LIMIT COMMAND...: COMMAND under timeout, then its record
  local name=$1 own=$2
  shift 2
  local left=$((BUDGET - SECONDS - GRACE - 5))
  local limit=$((own < left ? own : left))
  if ((limit < 15)); then
    skip "$name" "out of time: the run's budget (--budget $BUDGET s) is spent"
    return
  fi
  PARTS+=("$name")
  printf '== %-11s (limit %3d s) %s\n' "$name" "$limit" "$*"
  local start rc
  start=$(date +%s.%N)
  timeout -s INT -k "$GRACE" "$limit" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" </dev/null
  rc=$?
  STATUS=$("$PY" "$HELPER" record "$name" --out "$OUT" --rc "$rc" --start "$start" \
    --limit "$limit" --logs "$LOGS" --command "$*")
  printf '   %-11s %s (exit %d)\n' "$name" "$STATUS" "$rc"
}

present() { # MODULE: whether the module exists (not imported: a broken one then fails loudly)
  "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$1') is None)" 2>/dev/null
}

bench() { # PART LIMIT MODULE ARGS...: a bench module, with the server's packages if needed
  local name=$1 limit=$2 module=$3 tmp=()
  shift 3
  [[ $name == gpu_check ]] && tmp=(TMPDIR="$OUT/tmp")
  run_part "$name" "$limit" env ${tmp[@]+"${tmp[@]}"} PYTHONPATH="$SERVER_PATH" \
    "$PY" -m "$module" --json "$@"
}

SERVER_PATH=$PYTHONPATH

# -- nvml ---------------------------------------------------------------------------------------
if selected nvml; then
  if ((DRY)); then
    bench nvml 60 jupyter_edt.bench.gpu_check --nvml --load-s 1
  else
    bench nvml 60 jupyter_edt.bench.gpu_check --nvml --load-s 5 --require-cuda
  fi
fi

# -- gpu_check ----------------------------------------------------------------------------------
# Its scratch folder in OUT: the job folders a failed check keeps come back with the results.
if selected gpu_check; then
  mkdir -p "$OUT/tmp"
  if ((DRY)); then
    bench gpu_check 60 jupyter_edt.bench.gpu_check
  else
    bench gpu_check 200 jupyter_edt.bench.gpu_check --require-cuda
  fi
  rmdir "$OUT/tmp" 2>/dev/null # only if the check kept nothing
fi

# -- runtime at world sizes 2, 4, 8 (gloo) ------------------------------------------------------
for n in 2 4 8; do
  selected "runtime_w$n" || continue
  if ((DRY)) && ((n > 2)); then
    skip "runtime_w$n" "dry run: world size 2 only"
  elif ((DRY)); then
    bench "runtime_w$n" 120 jupyter_edt.bench.runtime --quick --workers "$n"
  else
    case $n in 2) limit=80 ;; 4) limit=100 ;; *) limit=130 ;; esac
    bench "runtime_w$n" "$limit" jupyter_edt.bench.runtime --workers "$n"
  fi
done

# -- the real-model benchmark (issue 26): ResNet-18 and a small GPT-2, the Trainer against DDP --
# Real run: on CUDA at 1 worker (and its data-bound runs), then on gloo (virtual devices, the
# CPU's cores shared among 8) at 2, 4 and 8 workers; 18 launches, each a job or a torchrun.
if selected models; then
  if ! present jupyter_edt.bench.models; then
    skip models "not present: jupyter_edt.bench.models has not landed"
  elif ((DRY)); then
    bench models 120 jupyter_edt.bench.models --quick --workers 2
  else
    bench models 200 jupyter_edt.bench.models --device cuda --workers 1 --gloo-workers 2,4,8
  fi
fi

# -- the Jupyter-side packages for bench.latency and bench.restart -----------------------------
SERVER_OK=0
if selected latency || selected restart || selected server_env; then
  if "$PY" -c "$SERVER_IMPORTS" >/dev/null 2>&1; then
    run_part server_env 90 "$PY" -c \
      'import json, sys; print(json.dumps({"python": sys.executable, "from": "present"}))'
  elif compgen -G "$WHEELS/*.whl" >/dev/null; then
    run_part server_env 90 "$PY" "$HELPER" server-env --wheels "$WHEELS" --site "$WORK/site" \
      --root "$ROOT"
    SERVER_PATH=$WORK/site:$PYTHONPATH
  else
    skip server_env "$PY lacks the Jupyter-side packages (tornado, traitlets, sqlalchemy, \
jupyter_core) and $WHEELS holds no wheels: run 'make gpu-wheels' where PyPI is reachable and \
carry .gpu-wheels"
  fi
  [[ $STATUS == ok ]] && SERVER_OK=1
fi
NO_SERVER="no Jupyter-side packages: see server_env"

# -- latency, warm and cold ---------------------------------------------------------------------
if selected latency; then
  if ((!SERVER_OK)); then
    skip latency "$NO_SERVER"
  elif ((DRY)); then
    bench latency 150 jupyter_edt.bench.latency --quick
  else
    bench latency 200 jupyter_edt.bench.latency
  fi
fi

# -- the restart benchmark (issue 25), once it exists -------------------------------------------
# When it lands, give it its sizes here: on CUDA at 1 worker, on gloo at 2, 4 and 8 workers.
if selected restart; then
  if ! present jupyter_edt.bench.restart; then
    skip restart "not present: jupyter_edt.bench.restart has not landed"
  elif ((!SERVER_OK)); then
    skip restart "$NO_SERVER"
  elif ((DRY)); then
    bench restart 120 jupyter_edt.bench.restart --quick
  else
    bench restart 150 jupyter_edt.bench.restart
  fi
fi

# -- the summary --------------------------------------------------------------------------------
parts_list=$(IFS=,; echo "${PARTS[*]}")
"$PY" "$HELPER" summary --out "$OUT" --parts "$parts_list" --mode "$MODE" --wall "$SECONDS" \
  --budget "$BUDGET"
rc=$?
echo "gpu-check ($MODE): $OUT/summary.json"
exit "$rc"
