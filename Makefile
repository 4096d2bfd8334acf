# One-command set-up: every target creates .venv (if absent) and installs the project with the
# pinned constraints kept in this repository.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check airflow_delta tests bench examples dags_examples
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -n 2 -q

demo: $(STAMP)
	bash examples/demo.sh

bench: $(STAMP)
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache bench/.data
