# Two commands a newcomer needs: `make demo` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit realcp realcp-assets bench fuzz soak image manifests help clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch pinned to the CPU build this machine keeps on disk (an unpinned torch downloads a
	# multi-GB CUDA build); the hf extra adds transformers and accelerate for the SDK's tests.
	$(BIN)/pip install --quiet 'torch==2.13.0' -e '.[test,demo,hf]'
	touch $(STAMP)

demo: $(STAMP) ## run the local demo on the emulated GPU cluster (WORKLOAD=torch: real PyTorch scavengers)
	$(BIN)/python -m emulator.demo $(if $(WORKLOAD),--workload $(WORKLOAD))

lint: $(STAMP) ## ruff lint and format check, shellcheck of the shell scripts, import-linter contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/shellcheck -x kind/*.sh tests/realcp/*.sh .ci/run
	$(BIN)/lint-imports

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy

# The real-control-plane tier (tests/realcp, docs/testing.md) runs when KUBEBUILDER_ASSETS is
# set or tests/realcp/prepare-assets.sh can prepare it (../shared/envtest and etcd present);
# otherwise its tests skip and the run says so.
unit: $(STAMP) ## the pytest suite (with tests/realcp when its assets are there)
	@if [ -z "$${KUBEBUILDER_ASSETS:-}" ]; then \
		if out="$$(tests/realcp/prepare-assets.sh 2>&1)"; then \
			KUBEBUILDER_ASSETS="$$(printf '%s\n' "$$out" | tail -n 1)"; export KUBEBUILDER_ASSETS; \
		else \
			echo "real-control-plane tier (tests/realcp) will NOT run: $$out"; \
		fi; \
	fi; \
	if [ -n "$${KUBEBUILDER_ASSETS:-}" ]; then echo "real-control-plane tier: KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS"; fi; \
	$(BIN)/pytest

realcp-assets: ## unpack kube-apiserver & co. from ../shared/envtest into a cache dir, print it
	tests/realcp/prepare-assets.sh

realcp: $(STAMP) ## only the real-control-plane tier (fails when it cannot run)
	KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(tests/realcp/prepare-assets.sh)}" \
		KONTINUE_REQUIRE_REALCP=1 $(BIN)/pytest -m realcp tests/realcp

test: lint typecheck unit ## lint, type checks and the whole test suite

IMAGE ?= ghcr.io/kontinue/kontinue:0.1.0
image: ## build the image the manifests name (IMAGE=...), with docker, podman or buildah
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then builder="docker build"; \
	elif command -v podman >/dev/null 2>&1; then builder="podman build"; \
	elif command -v buildah >/dev/null 2>&1; then builder="buildah bud"; \
	else echo "make image: no usable image builder (docker with a running daemon, podman or buildah)" >&2; exit 1; fi; \
	echo "building $(IMAGE) with $$builder"; $$builder -t $(IMAGE) .

KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo "$${KUBEBUILDER_ASSETS:-$$HOME/.cache/kontinue/envtest/v1.36.2}/kubectl")
manifests: ## write dist/kontinue-<overlay>.yaml (kueue, volcano, both) with kubectl's kustomize
	@[ -x "$(KUBECTL)" ] || { echo "make manifests: kubectl not found (or run make realcp-assets)" >&2; exit 1; }
	@mkdir -p dist
	@for overlay in kueue volcano both; do \
		$(KUBECTL) kustomize manifests/overlays/$$overlay > dist/kontinue-$$overlay.yaml || exit 1; \
		echo "wrote dist/kontinue-$$overlay.yaml"; \
	done

bench: $(STAMP) ## run the benchmarks; each prints its numbers
	@for b in benchmarks/bench_*.py; do [ -e "$$b" ] || continue; echo "== $$b"; $(BIN)/python -m "benchmarks.$$(basename $$b .py)" || exit 1; done

fuzz: $(STAMP) ## the fuzz properties: >=100,000 admission reviews, 10,000 restore-program inputs (FUZZ_INPUTS=n, FUZZ_RESTORE_INPUTS=m, FUZZ_SEED=s)
	$(BIN)/python -m tests.fuzz --inputs $(or $(FUZZ_INPUTS),100000) --restore-inputs $(or $(FUZZ_RESTORE_INPUTS),10000) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

soak: $(STAMP) ## the seeded fault soak on the emulated cluster (SEED=n RUNS=k ROUNDS=r SHAPE=all|indexed|jobset|vcjob; a failure prints its seed and plan)
	$(BIN)/python -m tests.soak $(if $(SEED),--seed $(SEED)) --runs $(or $(RUNS),1) --rounds $(or $(ROUNDS),25) --shape $(or $(SHAPE),all) $(if $(TRACE),--trace)

clean: ## remove the virtualenv
	rm -rf $(VENV)
