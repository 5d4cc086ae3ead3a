# The project's commands. `make setup` installs everything; `make test` runs the whole suite.
SHELL := /bin/bash
PY := .venv/bin/python
# The Pulumi CLI, language host and Kubernetes provider that `make setup` built or found.
TOOLCHAIN_PATH = $$(toolchain/build.sh --bin-dir):$$PATH
STACK ?= dev

.PHONY: setup test bench preview-diff cluster-up cluster-down image demo demo-resize demo-status demo-down

setup:
	scripts/setup.sh

test:
	PATH="$(TOOLCHAIN_PATH)" $(PY) -m pytest

bench:
	$(PY) bench/bench_program.py
	$(PY) bench/bench_trainer.py
	$(PY) bench/bench_checkpoint.py
	$(PY) bench/bench_step.py
	$(PY) bench/bench_tokens.py
	$(PY) bench/bench_reform.py
	$(PY) bench/bench_threads.py
	$(PY) bench/bench_exit.py
	$(PY) bench/bench_fork_server.py
	$(PY) bench/bench_compiled_loss.py
	$(PY) bench/bench_compile_cache.py
	$(PY) bench/profile_step.py
	$(PY) bench/bench_gpu.py
	$(PY) bench/bench_gpu_checkpoint.py
	$(PY) bench/bench_gpu_pod.py
	$(PY) bench/bench_gpu_spare.py

# The markdown that CI posts on a pull request for STACK (default dev), on stdout.
preview-diff:
	@PATH="$(TOOLCHAIN_PATH)" $(PY) scripts/preview_diff.py --stack $(STACK)

# A local Kubernetes cluster (toolchain/cluster/) for kubectl and `pulumi up`; CLUSTER names it
# (default dev), NODES gives it that many nodes (default 1). cluster-up prints the KUBECONFIG to export.
CLUSTER ?= dev
cluster-up:
	@$(PY) -m toolchain.cluster up --name $(CLUSTER) --nodes $(or $(NODES),1)

cluster-down:
	@$(PY) -m toolchain.cluster down --name $(CLUSTER)

# A task of one's own in its image: DIR's Dockerfile built FROM the trainer image and loaded into the
# local cluster CLUSTER as TAG (what `docker build` and `kind load` do elsewhere; docs/trainer.md).
image:
	@$(PY) -m toolchain.cluster image --name $(CLUSTER) "$(DIR)" "$(TAG)"

# The demo (demo/): the dev stack trained on the local cluster CLUSTER by the real `pulumi up`,
# followed to its result. demo-resize changes its size while it trains (NODES, default 3); demo-down
# removes the stack, its state, and the cluster if the demo started it.
demo:
	@PATH="$(TOOLCHAIN_PATH)" $(PY) -m demo --cluster $(CLUSTER) up

demo-resize:
	@PATH="$(TOOLCHAIN_PATH)" $(PY) -m demo --cluster $(CLUSTER) resize $(or $(NODES),3)

demo-status:
	@PATH="$(TOOLCHAIN_PATH)" $(PY) -m demo --cluster $(CLUSTER) status

demo-down:
	@PATH="$(TOOLCHAIN_PATH)" $(PY) -m demo --cluster $(CLUSTER) down
