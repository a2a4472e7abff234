# Two environments, each created (Python 3.11) and installed into when missing or when the packaging changes:
#   .venv        TensorFlow 2.21 + tf-keras 2.21, no tensorflow-estimator (our own Estimator core); `make demo` uses it.
#   .venv-tf215  TensorFlow 2.15 + tensorflow-estimator 2.15 + tf-keras 2.15 (the `tf215` extra).
# `make test` runs the suite on both; `make test-tf221` / `make test-tf215` run one leg. PYTEST_ARGS adds pytest
# arguments, e.g. `make test-tf221 PYTEST_ARGS='tests/embedding -x'`. `make test` runs each leg in three parts
# (`test-tf215-engine`/`test-tf215-product`/`test-tf215-cluster`, likewise `test-tf221-...`: every test once, split
# by directory) so that each stays well under 20 minutes on 2 cores.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VENV_TF215 := .venv-tf215
PY := $(VENV)/bin/python
PY_TF215 := $(VENV_TF215)/bin/python
STAMP := $(VENV)/.installed
STAMP_TF215 := $(VENV_TF215)/.installed
PYTEST_ARGS ?= tests
# Tests marked `upstream` use tensorflow_estimator (TF 2.15's TPUEstimator) as an oracle: TF 2.15 leg only.
TEST_ENV := TF_CPP_MIN_LOG_LEVEL=2
# Each leg ends with its slowest tests, so a leg that grows shows where the time went.
DURATIONS := --durations=15

.PHONY: demo test check lint test-tf221 test-tf221-engine test-tf221-product test-tf221-cluster test-tf215 test-tf215-engine \
	test-tf215-product test-tf215-cluster test-tf215-our-core conformance install install-tf215 clean

install: $(STAMP)

install-tf215: $(STAMP_TF215)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --upgrade -e '.[test]' 'tensorflow==2.21.*' 'tf-keras==2.21.*'
	@# tensorflow-estimator 2.15 breaks TensorFlow's import next to TF >= 2.16: make sure it is not there.
	if $(PY) -m pip show --quiet tensorflow-estimator >/dev/null 2>&1; then $(PY) -m pip uninstall --quiet --yes tensorflow-estimator; fi
	@# TensorFlow imported through the CLI's quiet import: the check prints none of TensorFlow's start-up lines.
	$(TEST_ENV) TF_USE_LEGACY_KERAS=1 $(PY) -c "from tpu_estimator.app import quiet; tf = quiet.import_tensorflow(); assert tf.__version__.startswith('2.21.'), tf.__version__; import importlib.util as u; assert u.find_spec('tf_keras'), 'tf-keras is missing'"
	touch $(STAMP)

$(STAMP_TF215): setup.cfg pyproject.toml
	test -x $(PY_TF215) || $(PYTHON) -m venv $(VENV_TF215)
	$(PY_TF215) -m pip install --quiet --upgrade pip
	$(PY_TF215) -m pip install --quiet --upgrade -e '.[test,tf215]'
	$(TEST_ENV) $(PY_TF215) -c "import tensorflow as tf, tensorflow_estimator; assert tf.__version__.startswith('2.15.'), tf.__version__"
	touch $(STAMP_TF215)

# make demo [DEMO_DIR=dir] [DEMO_ARGS='--num_examples=N --set=key.path=value']: outputs kept in DEMO_DIR.
DEMO_DIR ?= demo_output
demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) scripts/demo.py --work_dir=$(DEMO_DIR) $(DEMO_ARGS)

test: lint test-tf215-engine test-tf215-product test-tf215-cluster test-tf215-our-core test-tf221-engine \
	test-tf221-product test-tf221-cluster

# The quick check, in minutes on 2 cores and on TF 2.21 alone (.venv; .venv-tf215 is not needed): the lint, the tests
# marked `quick` (a sample of every test directory, each testing a real behaviour; tests/docs/test_make_check.py keeps
# every directory sampled) and the README's first program, run as the README says. `make test` is the full suite on
# both TensorFlow versions, what CI runs.
QUICK_PROGRAM := examples/feature_columns.py
check: lint $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(DURATIONS) -m "quick and not upstream" tests
	$(TEST_ENV) $(PY) $(QUICK_PROGRAM)

# One code style: the formatter's check and the linter (config in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

test-tf221: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(DURATIONS) -m "not upstream" $(PYTEST_ARGS)

# The TF 2.21 leg in the same three parts as the TF 2.15 leg.
test-tf221-engine: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(DURATIONS) -m "not upstream" $(ENGINE_TESTS)

test-tf221-product: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(DURATIONS) -m "not upstream" $(addprefix --ignore=,$(ENGINE_TESTS) $(CLUSTER_TESTS)) tests

test-tf221-cluster: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(DURATIONS) -m "not upstream" $(CLUSTER_TESTS)

test-tf215: $(STAMP_TF215)
	$(TEST_ENV) $(PY_TF215) -m pytest $(DURATIONS) $(PYTEST_ARGS)

# Both legs in three parts: the embedding engine, the conformance array and the models; the multi-process cluster
# tests; then everything else.
ENGINE_TESTS := tests/embedding tests/conformance tests/models
CLUSTER_TESTS := tests/cluster

test-tf215-engine: $(STAMP_TF215)
	$(TEST_ENV) $(PY_TF215) -m pytest $(DURATIONS) $(ENGINE_TESTS)

test-tf215-product: $(STAMP_TF215)
	$(TEST_ENV) $(PY_TF215) -m pytest $(DURATIONS) $(addprefix --ignore=,$(ENGINE_TESTS) $(CLUSTER_TESTS)) tests

test-tf215-cluster: $(STAMP_TF215)
	$(TEST_ENV) $(PY_TF215) -m pytest $(DURATIONS) $(CLUSTER_TESTS)

# TPUEstimator's tests on our Estimator core where upstream's also runs: the same suite as the oracle of the core.
test-tf215-our-core: $(STAMP_TF215)
	$(TEST_ENV) TPU_ESTIMATOR_CORE=ours $(PY_TF215) -m pytest $(DURATIONS) -m "not upstream" tests/estimator tests/compat tests/estimator_core

# The conformance suite beyond make test's pairwise array (docs/CONFORMANCE.md): CONFORMANCE=full (the whole product)
# or CONFORMANCE=sample:N (N cases drawn with a fixed seed), on TF 2.15 with upstream's CPU path as an oracle.
CONFORMANCE ?= full
conformance: $(STAMP_TF215)
	$(TEST_ENV) $(PY_TF215) -m pytest tests/conformance --conformance=$(CONFORMANCE) $(PYTEST_ARGS_CONFORMANCE)

clean:
	rm -rf $(VENV) $(VENV_TF215) build *.egg-info
