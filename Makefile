# One-command set-up: every target creates .venv (if absent) and installs the project with the
# pinned constraints kept in this repository.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test lint demo bench screenshots clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	# pyspark-client (required by apache-airflow-providers-apache-spark) ships the same files as
	# pyspark, in an older version: reinstall pyspark last so its Python files match its jars.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
		"$$(grep '^pyspark==' constraints.txt)"
	$(PY) -m pip check
	# Azurite, the Azure Blob emulator of the object-store tests (npm registry; skipped when
	# npm is absent, and those tests say so)
	if command -v npm >/dev/null; then \
		npm install --silent --no-audit --no-fund --prefix $(VENV)/azurite azurite@3.35.0; fi
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

# The UI screenshots in docs/img/, taken by the browser test (needs Debian's chromium).
screenshots: $(STAMP)
	AIRFLOW_DELTA_UPDATE_SCREENSHOTS=1 $(PY) -m pytest -q tests/airflow/real/test_browser_ui.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache bench/.data
