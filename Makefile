# grpo-operator developer entry points. `make run` and `make test` are the README's first two commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(CURDIR)/$(VENV)/bin/python
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)

DOCKERFILES := $(shell find . -name Dockerfile -not -path './.venv/*' -not -path './.git/*' | sort)
PACKAGES := operator/grpo_operator devtools/grpo_dev reward_service/src/reward_service trainer_image/src/grpo_launcher

.PHONY: install test unit integration fuzz lint crds golden miles-flags control-plane images run bench-reward bench-operator clean mutation

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
	$(PY) -m grpo_dev.complexity --max 15 operator/grpo_operator/status operator/grpo_operator/controller
	$(if $(DOCKERFILES),$(BIN)/hadolint $(DOCKERFILES))

## Regenerate the CRD (crds/ and the chart's copy) from the pydantic types.
crds: install
	$(PY) -m grpo_dev.crdgen

## Regenerate the golden files: grpo render of examples/, helm template of the chart.
golden: install
	$(PY) -m tests.render.golden
	$(PY) -m tests.integration.chart.golden

## Regenerate tests/data/miles_flags.json and the operator's copy (operator/grpo_operator/planning/miles_flag_table.py):
## miles's, Megatron's, SGLang's and the router's flags at the pins, by AST. The sources come from the environment:
## MILES_GIT, MEGATRON_GIT, ROUTER_GIT (git dirs holding radixark/miles, radixark/Megatron-LM and
## radixark/sgl-router-for-miles with the pinned commits, e.g. mirrors under /work/.mirror/<owner>+<name>/repo)
## and SGLANG_WHEEL (the sglang 0.5.16 wheel; `pip download` fetches it when unset). Nothing is cloned. Without
## the git dirs this target stops and says so; `make test` then reports the regeneration test as skipped
## ("NOT CHECKED") and checks everything else against the committed table.
SRC_CACHE ?= $(HOME)/.cache/grpo-operator/sources
MILES_GIT ?=
MEGATRON_GIT ?=
ROUTER_GIT ?=
SGLANG_WHEEL ?=
miles-flags: install
	@missing=""; \
	for v in MILES_GIT=$(MILES_GIT) MEGATRON_GIT=$(MEGATRON_GIT) ROUTER_GIT=$(ROUTER_GIT); do \
	  dir=$${v#*=}; if [ -z "$$dir" ] || ! git --git-dir "$$dir" rev-parse -q --verify HEAD >/dev/null 2>&1; then missing="$$missing $${v%%=*}"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make miles-flags: not regenerated: set$$missing to git dirs holding the pinned sources (no clone is made)" >&2; exit 2; \
	fi
	@mkdir -p $(SRC_CACHE)
	wheel="$(SGLANG_WHEEL)"; \
	if [ -z "$$wheel" ]; then \
	  $(BIN)/pip download -q --no-deps --only-binary=:all: -d $(SRC_CACHE) sglang==0.5.16; \
	  wheel=$$(ls $(SRC_CACHE)/sglang-0.5.16-*.whl | head -n1); \
	fi; \
	for version in dec268f7 v0.1.0; do \
	  $(PY) -m grpo_dev.miles_flags extract --version $$version --miles-git $(MILES_GIT) --megatron-git $(MEGATRON_GIT) --router-git $(ROUTER_GIT) --sglang-wheel "$$wheel" || exit 1; \
	done \
	  && MILES_GIT=$(MILES_GIT) MEGATRON_GIT=$(MEGATRON_GIT) ROUTER_GIT=$(ROUTER_GIT) SGLANG_WHEEL="$$wheel" $(PY) -m pytest -q -rs tests/render/test_miles_flags.py tests/render/test_miles_flag_versions.py

## Build (once, cached under ~/.cache/grpo-operator) etcd, kube-apiserver, kubectl, helm and the KubeRay CRDs.
control-plane: install
	$(PY) -m grpo_dev.localcluster build

## Build the operator and reward-service images with podman + runc on a local Debian base (installs podman,
## runc and debootstrap with apt-get if missing; base and layers cached).
images: install
	$(PY) -m grpo_dev.images build

## Test tiers: `unit` is the pure tiers and the reconciler's tables on FakeKube and FakeRay (no control plane, images
## or network: under 3 minutes on 2 cores with its PYTEST_WORKERS), `integration` what needs the control plane, a Ray head, uvicorn servers, helm or images, `test`
## (CI) lint and every tier, printing its 40 slowest steps (what to shorten first). Hypothesis runs
## derandomized without its database (the `ci` profile, tests/conftest.py). `test` and `integration` run
## PYTEST_WORKERS pytest processes (pytest-xdist), a test module at a time each: most of an integration test's
## time is spent waiting on the components it started, so two workers halve the wall time on two cores. The
## tests that share the machine's one real node or `make run`'s .grpo/ run in order on one worker.
## PYTEST_WORKERS=0 runs everything in one process.
UNIT_ARGS := tests --ignore=tests/integration --ignore=tests/e2e
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder)

unit: install
	$(PY) -m pytest $(XDIST) $(UNIT_ARGS)

integration: install control-plane images
	$(PY) -m pytest $(XDIST) tests/integration tests/e2e

## The control plane (Go builds) and the images (debootstrap, pip, podman) are built side by side: the one waits
## on the CPU, the other mostly on the network and the disk. Their progress lines interleave as they come.
test: install lint
	$(MAKE) --no-print-directory -j2 control-plane images
	$(PY) -m pytest $(XDIST) --durations=40

## The hypothesis tests of the unit tier at random, ten times the examples, with the example database on
## (.hypothesis/): a failure found is replayed on the next `make fuzz` until fixed.
fuzz: install
	$(PY) -m pytest --hypothesis-profile=fuzz -m hypothesis $(UNIT_ARGS)

## Local embedded control plane + Ray head + operator, with examples/quickstart.yaml applied.
run: install control-plane
	$(PY) -m grpo_dev.devrun

## Mutation testing over the unit tier: the pure core, the launcher's summary and reward client, the reward
## service's scoring, cache and admission. Per group: MODULES=planning,render (of planning, render, api, cli,
## status, launcher, reward_client, reward); JOBS mutants at once; MUTATION_ARGS e.g. "--only render/job.py" or "--survivors"
## (run only the last run's survivors again) or "--memory-gib 8" (each mutant's address space, 4 GiB unless told; one
## that needs more is killed). Survivors: .mutation/survivors.txt.
MODULES ?=
JOBS ?= 1
MUTATION_ARGS ?=
mutation: install
	$(PY) -m grpo_dev.mutation $(if $(MODULES),--modules $(MODULES)) --jobs $(JOBS) $(MUTATION_ARGS)

bench-reward: install
	$(PY) benchmarks/bench_reward.py
	$(PY) benchmarks/bench_reward_healthz.py

## The operator with N = 10, 100, 500 runs on the real local API server, against a bare kopf operator
## (SIZES=10,100 for a quicker run).
SIZES ?= 10,100,500
bench-operator: install control-plane
	$(PY) benchmarks/bench_operator.py --sizes $(SIZES)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .grpo
