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

# The tests on real sockets, Ray, Spark and network namespaces one at a time (they share one
# Ray and one RayDP session, and mostly wait), and beside them, at a lower priority, the unit
# and simulator tests (CPU only); the latter's report follows the former's. Either failing
# fails the run. PYTEST_ARGS="<files, ids or options>" runs one plain pytest instead.
test: $(VENV)/.installed
ifeq ($(strip $(PYTEST_ARGS)),)
	@log=$$(mktemp); \
	nice -n 10 $(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/unit tests/sim \
		> $$log 2>&1 & cpu=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 tests/integration; real=$$?; \
	wait $$cpu; sims=$$?; \
	echo "== the unit and simulator tests (exit $$sims):"; cat $$log; rm -f $$log; \
	test $$real -eq 0 && test $$sims -eq 0
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
