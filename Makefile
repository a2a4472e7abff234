# `make demo` and `make test` each create .venv (Python 3.11) when missing and install the project into it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# make demo [DEMO_DIR=dir] [DEMO_ARGS='--num_examples=N --set=key.path=value']: outputs kept in DEMO_DIR.
DEMO_DIR ?= demo_output
demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) scripts/demo.py --work_dir=$(DEMO_DIR) $(DEMO_ARGS)

test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest tests

clean:
	rm -rf $(VENV) build *.egg-info
