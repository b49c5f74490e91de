# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# optional extras to install with the package: CI adds ray and docs (`make test EXTRAS=dev,ray,docs`)
# so the Ray executor's tests and the strict docs build run instead of skipping; one stamp per
# set, so a change reinstalls
EXTRAS ?= dev
comma  := ,
STAMP  := $(VENV)/.dpaudit-installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch==2.13.0 first when torch is missing, so pip never resolves a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dpaudit demo

# lint first: CI fails on a lint or formatting error before spending the suite's 20 minutes
test: lint
	$(PY) -m pytest -q --durations=20

LINTED := dpaudit defenses attacks reports tests benchmarks examples
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

clean:
	rm -rf $(VENV) demo-out demo-report.html demo-report.json
