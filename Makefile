# grpo-operator developer entry points. `make run` and `make test` are the README's first two commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(CURDIR)/$(VENV)/bin/python
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)

DOCKERFILES := $(shell find . -name Dockerfile -not -path './.venv/*' -not -path './.git/*' | sort)
PACKAGES := operator/grpo_operator devtools/grpo_dev reward_service/src/reward_service trainer_image/src/grpo_launcher

.PHONY: install test lint crds golden miles-flags control-plane images run bench-reward bench-operator clean mutation

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml devtools/pyproject.toml reward_service/pyproject.toml trainer_image/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]' -e ./devtools -e './reward_service[dev]' -e ./trainer_image
	touch $@

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES)
	$(BIN)/lint-imports
	$(if $(DOCKERFILES),$(BIN)/hadolint $(DOCKERFILES))

## Regenerate the CRD (crds/ and the chart's copy) from the pydantic types.
crds: install
	$(PY) -m grpo_dev.crdgen

## Regenerate the golden files: grpo render of examples/, helm template of the chart.
golden: install
	$(PY) -m tests.render.golden
	$(PY) -m tests.chart.golden

## Regenerate tests/data/miles_flags.json (miles's, Megatron's and SGLang's flags at the pins, by AST).
## Sources: MILES_GIT / MEGATRON_GIT (git dirs; cloned bare into the cache when unset), SGLANG_WHEEL (pip download).
SRC_CACHE ?= $(HOME)/.cache/grpo-operator/sources
MILES_GIT ?= $(SRC_CACHE)/miles.git
MEGATRON_GIT ?= $(SRC_CACHE)/Megatron-LM.git
SGLANG_WHEEL ?=
miles-flags: install
	@mkdir -p $(SRC_CACHE)
	test -d $(MILES_GIT) || git clone --bare --filter=blob:none https://github.com/radixark/miles.git $(MILES_GIT)
	test -d $(MEGATRON_GIT) || git clone --bare --filter=blob:none https://github.com/radixark/Megatron-LM.git $(MEGATRON_GIT)
	wheel="$(SGLANG_WHEEL)"; \
	if [ -z "$$wheel" ]; then \
	  $(BIN)/pip download -q --no-deps --only-binary=:all: -d $(SRC_CACHE) sglang==0.5.16; \
	  wheel=$$(ls $(SRC_CACHE)/sglang-0.5.16-*.whl | head -n1); \
	fi; \
	$(PY) -m grpo_dev.miles_flags extract --miles-git $(MILES_GIT) --megatron-git $(MEGATRON_GIT) --sglang-wheel "$$wheel" \
	  && MILES_GIT=$(MILES_GIT) MEGATRON_GIT=$(MEGATRON_GIT) SGLANG_WHEEL="$$wheel" $(PY) -m pytest -q tests/render/test_miles_flags.py

## Build (once, cached under ~/.cache/grpo-operator) etcd, kube-apiserver, kubectl, helm and the KubeRay CRDs.
control-plane: install
	$(PY) -m grpo_dev.localcluster build

## Build the operator and reward-service images with podman + runc on a local Debian base (installs podman,
## runc and debootstrap with apt-get if missing; base and layers cached).
images: install
	$(PY) -m grpo_dev.images build

test: install control-plane lint images
	$(PY) -m pytest

## Local embedded control plane + Ray head + operator, with examples/quickstart.yaml applied.
run: install control-plane
	$(PY) -m grpo_dev.devrun

## Mutation testing over the unit tier: the pure core, the launcher's summary and reward client, the reward
## service's scoring, cache and admission. Per group: MODULES=planning,render (of planning, render, api, cli,
## status, launcher, reward); JOBS mutants at once. Survivors: .mutation/survivors.txt.
MODULES ?=
JOBS ?= 1
mutation: install
	$(PY) -m grpo_dev.mutation $(if $(MODULES),--modules $(MODULES)) --jobs $(JOBS)

bench-reward: install
	$(PY) benchmarks/bench_reward.py

## The operator with N = 10, 100, 500 runs on the real local API server, against a bare kopf operator
## (SIZES=10,100 for a quicker run).
SIZES ?= 10,100,500
bench-operator: install control-plane
	$(PY) benchmarks/bench_operator.py --sizes $(SIZES)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .grpo
