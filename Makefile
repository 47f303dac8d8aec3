# Two commands for a fresh Debian/Ubuntu machine with Python 3.10+ and Node 20:
#   make lab    install everything into .venv, build, start JupyterLab with jupyter-edt
#   make test   the same install, then every linter and test suite
# Both are idempotent: stamp files skip what is already installed and up to date.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
JUPYTER := $(VENV)/bin/jupyter
VIRTUAL_GPUS ?= 4
LAB_ARGS ?=
CHROMIUM ?= /usr/bin/chromium
SYSTEMD_ANALYZE ?= /usr/bin/systemd-analyze
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Jupyter's tools start each other by name (jupyter-builder, for one), so .venv/bin goes first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

# A machine with an NVIDIA GPU gets PyPI's CUDA build of torch; any other gets the CPU build.
HAS_NVIDIA_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_SPEC := $(if $(HAS_NVIDIA_GPU),torch>=2.3,torch==2.13.0)
# Jupyter refuses to run as root unless told to (CI runs as root).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root,)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

FRONTEND_SOURCES := $(shell find src style schema -type f 2>/dev/null) package.json tsconfig.json

.PHONY: help install lab test lint test-py test-js test-ui check-extension chromium systemd clean \
	gpu-wheels postgresql

help:
	@echo "make lab    install into $(VENV), build, and start JupyterLab with jupyter-edt"
	@echo "make test   install, then ruff, eslint/prettier, jest, pytest and the Galata UI tests"

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed"'
	$(PYTHON) -m venv $(VENV)

# Build tools and torch first: the editable install builds without isolation.
$(VENV)/.deps-stamp: pyproject.toml | $(PY)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH_SPEC)" numpy
	$(PIP) install "hatchling>=1.21" "hatch-jupyter-builder>=0.9" editables "jupyterlab>=4.6,<5"
	touch $@

node_modules/.install-stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# lib/ is rebuilt from scratch: a module left there by an older layout (lib/api.js beside the new
# lib/api/) would shadow the new one.
jupyter_edt/labextension/package.json: node_modules/.install-stamp $(FRONTEND_SOURCES)
	npm run clean:lib
	npm run build
	touch $@

# The lab extension is built above, so the Python build hook is skipped here. The develop link
# makes pip's copy of install.json land in jupyter_edt/labextension/, where a reinstall would
# then find it twice: remove that copy first.
$(VENV)/.install-stamp: $(VENV)/.deps-stamp pyproject.toml jupyter_edt/labextension/package.json
	rm -f jupyter_edt/labextension/install.json
	SKIP_JUPYTER_BUILDER=1 $(PIP) install -e ".[test]" --no-build-isolation
	$(VENV)/bin/jupyter-builder develop . --overwrite
	touch $@

install: $(VENV)/.install-stamp

lab: install
	@echo "Starting JupyterLab with jupyter-edt ($(VIRTUAL_GPUS) virtual GPUs when no NVIDIA GPU is found)"
	$(JUPYTER) lab --EDTApp.virtual_gpus=$(VIRTUAL_GPUS) $(ROOT_ARGS) $(LAB_ARGS)

chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  echo "Installing Debian's chromium for the UI tests"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; \
	fi

# `systemd-analyze verify` checks the deployment's unit (tests/deploy/): Debian's systemd has it.
systemd:
	@if [ ! -x "$(SYSTEMD_ANALYZE)" ]; then \
	  echo "Installing Debian's systemd for systemd-analyze (the deployment files' tests)"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y systemd; \
	fi

# The store's tests run on a throwaway PostgreSQL too (tests/pgserver.py): Debian's server.
postgresql:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "Installing Debian's postgresql for the store's tests on PostgreSQL"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y postgresql; \
	fi

ui-tests/node_modules/.install-stamp: ui-tests/package.json ui-tests/package-lock.json
	cd ui-tests && npm ci --no-audit --no-fund
	touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	npm run lint:check

check-extension: install
	$(JUPYTER) server extension list 2>&1 | grep -E "jupyter_edt.*OK"
	$(JUPYTER) labextension list 2>&1 | grep -E "jupyter-edt.*enabled.*OK"
	$(PY) -m jupyterlab.browser_check --no-browser-test $(ROOT_ARGS)

test-js: install
	npm test

# The suite's processes wait on servers, clusters and jobs much of the time: two pytest workers
# keep a 2-core machine busy (tests/conftest.py keeps each module, and the Ray package, on one).
PYTEST_WORKERS ?= 2
test-py: install systemd postgresql
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope

test-ui: install chromium ui-tests/node_modules/.install-stamp
	cd ui-tests && EDT_UI_SKIP_INSTALL=1 CHROMIUM_PATH=$(CHROMIUM) ./run.sh

# Summaries of pytest and Playwright come last, in that order.
test: lint check-extension test-js test-py test-ui

clean:
	rm -rf $(VENV) node_modules ui-tests/node_modules lib jupyter_edt/labextension tsconfig.tsbuildinfo

# Wheels for scripts/gpu-check.sh on a GPU machine whose python3 has CUDA torch and nvidia-ml-py
# but no Jupyter packages and no network (carry $(GPU_WHEELS); the script installs them there
# offline): what `jupyter edt serve` and bench.latency import beyond torch and numpy (traced
# from a bench.latency run), at the versions installed here, with their dependencies, for that
# machine's Python.
GPU_WHEELS ?= .gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
GPU_WHEELS_FOR := tornado traitlets sqlalchemy jupyter_core pyyaml prometheus_client
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
	manylinux2014_x86_64 manylinux1_x86_64

gpu-wheels: install
	rm -rf $(GPU_WHEELS)
	mkdir -p $(GPU_WHEELS)
	$(PY) -c 'import sys; from importlib.metadata import version as v; \
	  print("\n".join(f"{n}=={v(n)}" for n in sys.argv[1:]))' $(GPU_WHEELS_FOR) \
	  > $(GPU_WHEELS)/requirements.txt
	$(PIP) download --quiet --only-binary=:all: --implementation cp \
	  --python-version $(GPU_PYTHON_VERSION) $(addprefix --platform ,$(GPU_PLATFORMS)) \
	  -d $(GPU_WHEELS) -r $(GPU_WHEELS)/requirements.txt
	@ls $(GPU_WHEELS); du -sh $(GPU_WHEELS)
