# The commands a newcomer types. Everything installs into .venv; the local
# Slurm cluster (scripts/local-slurm) installs its Debian packages itself.
VENV ?= .venv
PY := $(VENV)/bin/python
SYS_PYTHON ?= python3

.PHONY: setup cluster cluster-down demo pyxis-sources test test-host test-confined test-wide test-jobscope test-chroots test-2411 test-2411-config chroot-2411 chroot-2411-umount test-2605 test-2605-config chroot-2605 chroot-2605-umount lint typecheck unit diagram docs docs-deps bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(SYS_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

cluster: setup            ## bring the local Slurm cluster up (installs Debian packages as root)
	$(PY) -m slurm_fsm_dev.localcluster up

cluster-down:
	$(PY) -m slurm_fsm_dev.localcluster down

# the demo's job needs no container: pyxis + enroot are used when built, not built now
demo: setup               ## the main job: an example job twice through one persistent allocation
	@eval "$$(SLURM_FSM_LOCAL_CONTAINERS=if-built scripts/local-slurm up)"; $(PY) -m slurm_fsm demo

lint: setup
	$(VENV)/bin/ruff check slurm_fsm slurm_fsm_dev tests scripts benchmarks examples

typecheck: setup
	$(VENV)/bin/mypy

unit: setup docs-deps     ## fast tests only (no real cluster)
	$(VENV)/bin/pytest -m "not slurm" -q

# First of all, in one line: whether this machine can have pyxis + enroot (the vendored
# sources beside the checkout, else the pinned upstream releases, fetched and checked)
# and why not; without them the container tests are deselected, everything else runs.
pyxis-sources: setup      ## say where the pyxis/enroot sources come from (fetch them if needed)
	@$(PY) -m slurm_fsm_dev.localpyxis sources

test: pyxis-sources lint typecheck docs-deps chroot-2411 chroot-2605  ## everything CI runs: lint, types, the cgroup-confined real tests, then at once the host's tests (unit and real, Slurm 22.05) and the real tests on Slurm 24.11 and 26.05, then those on 12-CPU nodes with DefCpuPerGPU, the docs, and the configuration-dependent ones on 24.11 and 26.05
	$(MAKE) --no-print-directory test-confined
	$(MAKE) --no-print-directory -j3 --output-sync=target test-host test-2411 test-2605
	$(MAKE) --no-print-directory test-wide
	$(MAKE) --no-print-directory test-jobscope
	$(MAKE) --no-print-directory docs
	$(MAKE) --no-print-directory test-2411-config
	$(MAKE) --no-print-directory test-2605-config

# The host's whole suite: the unit tests and the real ones on the host's cluster (Slurm
# 22.05). make test runs it beside the 24.11 and 26.05 suites: each real suite mostly
# waits on its Slurm, and one after the other they came near CI's 90 minutes. The one
# test that brings up a cgroup cluster takes a lock in this checkout (one per host).
test-host: setup docs-deps  ## the host's tests: unit and real (Slurm 22.05)
	$(VENV)/bin/pytest -q

# The real tests on Slurm 24.11 and 26.05 at the same time: two clusters of their own
# (own roots, folders and ports), each suite mostly waiting on its Slurm; one after the
# other they made CI's run longer than its limit allows. Each suite's output is printed
# whole when it ends (--output-sync).
test-chroots: chroot-2411 chroot-2605  ## the real tests on Slurm 24.11 and 26.05, both at once
	$(MAKE) --no-print-directory -j2 --output-sync=target test-2411 test-2605

# The second real cluster: Debian 13's Slurm 24.11 in a chroot (slurm_fsm_dev/chroot.py,
# docs/local-cluster.md). The root is made once per machine (as root: debootstrap,
# chroot, mount) under /var/cache/slurm_fsm/trixie-root ($$SLURM_FSM_TRIXIE_ROOT); its
# cluster has a folder of its own ($$SLURM_FSM_LOCAL_DIR-2411, else /tmp/slurm_fsm-2411)
# and runs beside the host's. Its venv is .venv-trixie in this checkout.
chroot-2411: setup        ## make the Debian 13 root with Slurm 24.11 (once per machine)
	$(PY) -m slurm_fsm_dev.chroot make

chroot-2411-umount: setup ## undo the chroot's bind mounts (also after a crash)
	$(PY) -m slurm_fsm_dev.chroot umount

test-2411: chroot-2411    ## the real-Slurm tests (pytest -m slurm) on Slurm 24.11, in the chroot
	$(PY) -m slurm_fsm_dev.chroot test

# The configuration-dependent real tests on Slurm 24.11 too: no association enforcement,
# a step past its --mem killed (memkill). Not task/cgroup: one cgroup cluster per host,
# and Slurm 24.11's cgroup plugins in the chroot are not measured here.
test-2411-config: chroot-2411  ## the configuration-dependent real tests on Slurm 24.11 (noenforce,memkill)
	SLURM_FSM_LOCAL_CONFIG=noenforce,memkill $(PY) -m slurm_fsm_dev.chroot test -- -m "slurm and config" -q -rfE

# The third real cluster: Debian unstable's Slurm 26.05, the same recipe
# (slurm_fsm_dev/chroot.py --release 2605): its root under /var/cache/slurm_fsm/sid-root
# ($$SLURM_FSM_SID_ROOT), its cluster in $$SLURM_FSM_LOCAL_DIR-2605 (else
# /tmp/slurm_fsm-2605, its own ports), its venv .venv-sid in this checkout.
chroot-2605: setup        ## make the Debian unstable root with Slurm 26.05 (once per machine)
	$(PY) -m slurm_fsm_dev.chroot --release 2605 make

chroot-2605-umount: setup ## undo the 26.05 chroot's bind mounts (also after a crash)
	$(PY) -m slurm_fsm_dev.chroot --release 2605 umount

test-2605: chroot-2605    ## the real-Slurm tests (pytest -m slurm) on Slurm 26.05, in the chroot
	$(PY) -m slurm_fsm_dev.chroot --release 2605 test

test-2605-config: chroot-2605  ## the configuration-dependent real tests on Slurm 26.05 (noenforce,memkill)
	SLURM_FSM_LOCAL_CONFIG=noenforce,memkill $(PY) -m slurm_fsm_dev.chroot --release 2605 test -- -m "slurm and config" -q -rfE

# The real tests whose behaviour depends on the cluster's configuration
# (@pytest.mark.config), on the configuration real GPU clusters have: task/cgroup with
# ConstrainCores and ConstrainDevices, no association enforcement, a step past its --mem
# killed (memkill: OverMemoryKill). A cluster of its own
# (started and stopped by the session; one cgroup cluster per host at a time).
CONFINED_DIR ?= /tmp/slurm_fsm-confined
test-confined: setup      ## the configuration-dependent real tests on the cgroup-confined cluster
	SLURM_FSM_LOCAL_DIR=$(CONFINED_DIR) SLURM_FSM_LOCAL_CONFIG=cgroup,noenforce,memkill \
	  $(VENV)/bin/pytest -m "slurm and config" -q

# The configuration-dependent real tests on nodes unlike the default's: 12 CPUs per node
# and DefCpuPerGPU=2 (wide,defcpu), where the persistent allocation's CPUs differ by
# rule (issue 44: 8 by DefCpuPerGPU, 12 in proportion, 4 one per task). A cluster of
# its own, no cgroup (it runs beside the confined one).
WIDE_DIR ?= /tmp/slurm_fsm-wide
test-wide: setup          ## the configuration-dependent real tests on 12-CPU nodes with DefCpuPerGPU=2
	SLURM_FSM_LOCAL_DIR=$(WIDE_DIR) SLURM_FSM_LOCAL_CONFIG=wide,defcpu \
	  $(VENV)/bin/pytest -m "slurm and config" -q

# The image cache's real tests (issue 42 item 2) on pyxis' container_scope=job, where a
# named container goes with its job: a cluster of its own (jobscope), no cgroup. Only
# the tests that need that scope: the rest of the suite assumes pyxis' default.
JOBSCOPE_DIR ?= /tmp/slurm_fsm-jobscope
test-jobscope: setup      ## the image cache's real tests on pyxis container_scope=job
	SLURM_FSM_LOCAL_DIR=$(JOBSCOPE_DIR) SLURM_FSM_LOCAL_CONFIG=jobscope \
	  $(VENV)/bin/pytest tests/integration/test_image_cache_real.py -m slurm -q

diagram: setup            ## regenerate docs/states.md from the machine's edges
	$(PY) scripts/gen-docs.py

docs: setup docs-deps    ## build the docs site; warnings are errors
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# Debian's packages for the docs: Graphviz draws the state diagram, Chromium opens
# the built site in tests/test_docs_site.py. Installed when missing (as root).
DOCS_DEBS := graphviz chromium fonts-dejavu-core
docs-deps:               ## Debian packages of the docs build and its browser test
	@if command -v dot >/dev/null && command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing $(DOCS_DEBS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DOCS_DEBS) >/dev/null; \
	else echo "docs-deps: install Debian's $(DOCS_DEBS) (as root: make docs-deps)" >&2; exit 1; fi

bench: setup              ## benchmarks on the local cluster (figures, not pass/fail)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .venv-trixie .venv-sid site .mypy_cache .ruff_cache .pytest_cache
