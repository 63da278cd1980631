# The two commands of the README. Both create their own virtual environment (.venv).
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,fast]'
	touch $@

SEEDS ?= 1000
JOBS ?= 2
BUGGIFY ?= test

.PHONY: demo test campaign campaign-hosts
demo: $(VENV)/.installed
	$(PY) -m raygroups.integration.demo

# The tests on real sockets, Ray, Spark and network namespaces in two streams, and beside
# them, at a lower priority, the unit and simulator tests (CPU only). The first stream runs
# the tests of the shared Ray and RayDP session and those of Ray clusters of their own; the
# second, WAITING, the ones that start no Ray and mostly wait on failure detectors' timers
# (in network namespaces or in processes killed and started again). Alone, the integration
# tests keep 0.95 of 2 cores busy on average, WAITING's 0.1 to 0.6 (measured 2026-11-28).
# The second stream's report and the simulator's follow the first's. Any failing fails the
# run. PYTEST_ARGS="<files, ids or options>" runs one plain pytest instead.
WAITING := failures_real durable_kill netns fd_sock_real arbitrator_netns tie_breaker_netns \
	not_primary workqueue channels_sockets durable_disk_full durable_queue recovery_status \
	gossip_leave transport_frag_real cluster_yaml
WAITING_FILES := $(foreach t,$(WAITING),tests/integration/test_$(t).py)

test: $(VENV)/.installed
ifeq ($(strip $(PYTEST_ARGS)),)
	@sims=$$(mktemp); side=$$(mktemp); base=$$(mktemp -d); \
	nice -n 10 $(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/unit tests/sim \
		> $$sims 2>&1 & cpu=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 --basetemp=$$base/t \
		$(WAITING_FILES) > $$side 2>&1 & waits=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 tests/integration \
		$(foreach f,$(WAITING_FILES),--ignore=$(f)); real=$$?; \
	wait $$waits; waiting=$$?; wait $$cpu; cpus=$$?; \
	echo "== the integration tests that mostly wait (exit $$waiting):"; cat $$side; \
	echo "== the unit and simulator tests (exit $$cpus):"; cat $$sims; \
	rm -rf $$sims $$side $$base; \
	test $$real -eq 0 && test $$waiting -eq 0 && test $$cpus -eq 0
else
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 $(PYTEST_ARGS)
endif

# Simulator campaigns over fresh seeds: make campaign SEEDS=1000 BASE=<never run>
# [TESTS="file or id ..."] [EXCLUDE="id prefix ..."] [MINUTES=<time box>]
campaign: $(VENV)/.installed
	@test -n "$(BASE)" || { echo "make campaign needs BASE=<first seed, one never run before>"; exit 2; }
	$(PY) -m tests.campaign --seeds $(SEEDS) --base $(BASE) --jobs $(JOBS) --buggify $(BUGGIFY) \
		$(if $(MINUTES),--minutes $(MINUTES)) \
		$(foreach x,$(EXCLUDE),--exclude $(x)) $(TESTS)

# The fault campaign across Ray hosts in network namespaces, as root (tests/hosts/):
# make campaign-hosts HOURS=1 [LONG=1] [BASE=<first seed>]
campaign-hosts: $(VENV)/.installed
	$(PY) -m tests.hosts.campaign --hours $(or $(HOURS),1) $(if $(LONG),--long) $(if $(BASE),--base $(BASE))
