# The two commands of the README. Both create their own virtual environment (.venv).
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,fast]'
	touch $@

.PHONY: demo test
demo: $(VENV)/.installed
	$(PY) -m raygroups.integration.demo

test: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)
