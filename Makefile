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

# Three streams side by side, each a plain pytest: the tests on real sockets, Ray, Spark and
# network namespaces one at a time (they share one Ray and one RayDP session, and mostly
# wait); the three longest of them (a fresh venv with the Spark tests in it, ray up on hosts,
# the fault campaign across hosts: their own Ray each, hosts in their own namespaces) one at
# a time in a second stream; and, at a lower priority, the unit and simulator tests (CPU
# only). The second and third streams' reports follow the first's; any failing fails the
# run. PYTEST_ARGS="<files, ids or options>" runs one plain pytest instead.
APART := tests/integration/test_packaging.py tests/integration/test_ray_up_hosts.py \
	tests/integration/test_host_campaign.py
test: $(VENV)/.installed
ifeq ($(strip $(PYTEST_ARGS)),)
	@log=$$(mktemp); apart=$$(mktemp); \
	nice -n 10 $(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/unit tests/sim \
		> $$log 2>&1 & cpu=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=5 $(APART) > $$apart 2>&1 & long=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 --spark-in-wheel \
		$(foreach t,$(APART),--ignore=$(t)) tests/integration; real=$$?; \
	wait $$long; longs=$$?; wait $$cpu; sims=$$?; \
	echo "== the longest integration tests, apart (exit $$longs):"; cat $$apart; \
	echo "== the unit and simulator tests (exit $$sims):"; cat $$log; rm -f $$log $$apart; \
	test $$real -eq 0 && test $$longs -eq 0 && test $$sims -eq 0
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
