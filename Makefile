# Two commands on a fresh clone: `make demo` and `make test`. Both create .venv
# when it is missing and install the package with its dependencies into it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test check fuzz bench validate docs clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m batchloaders.demo

# One pytest worker per core plus one (pytest-xdist), each taking whole test files (module fixtures set up
# once), the costliest first (tests/conftest.py: COSTLIEST). The extra worker keeps the cores busy while
# tests wait on the processes and servers they start (docs/decisions/test-suite.md). The tf.data service servers tests/test_service.py
# runs in pytest's workers log from C++ where pytest captures nothing (a client released after its
# dispatcher stopped), onto pytest's progress line: TensorFlow's log level 3 unless you set one.
# oneDNN's graph pass off unless you set it (a third of each pipeline's first batch; the tests' models are
# tiny), and Grappler's meta optimizer off in the tests' processes (tests/conftest.py: pytest_configure):
# BATCHLOADERS_TEST_GRAPPLER=1 TF_ENABLE_ONEDNN_OPTS=1 make test runs with TensorFlow's defaults.
test: setup
	TF_CPP_MIN_LOG_LEVEL=$${TF_CPP_MIN_LOG_LEVEL:-3} TF_ENABLE_ONEDNN_OPTS=$${TF_ENABLE_ONEDNN_OPTS:-0} \
		$(PY) -m pytest -n $$(( $$(nproc) + 1 )) --dist loadfile --no-loadscope-reorder

# The fast tier for the edit-run loop: every test file but the costliest (marked slow in tests/conftest.py:
# COSTLIEST), about a tenth of the suite's CPU. `make test` (and CI) still runs them all.
check: setup
	TF_CPP_MIN_LOG_LEVEL=$${TF_CPP_MIN_LOG_LEVEL:-3} TF_ENABLE_ONEDNN_OPTS=$${TF_ENABLE_ONEDNN_OPTS:-0} \
		$(PY) -m pytest -n $$(( $$(nproc) + 1 )) --dist loadfile --no-loadscope-reorder -m "not slow"

# The fuzz tests at eight times the suite's example counts, and the global shuffle's exit stress test
# at eight times its children (several minutes on 2 cores): before a
# release, or after a change to validation or the config model.
fuzz: setup
	TF_CPP_MIN_LOG_LEVEL=$${TF_CPP_MIN_LOG_LEVEL:-3} TF_ENABLE_ONEDNN_OPTS=$${TF_ENABLE_ONEDNN_OPTS:-0} FUZZ_SCALE=8 \
		$(PY) -m pytest -n $$(( $$(nproc) + 1 )) tests/test_fuzz.py tests/test_damage_fuzz.py \
		tests/test_trust_global_reads.py::test_programs_that_took_a_batch_always_exit

bench: setup
	$(PY) benchmarks/run.py

# docs/reference.md from the JSON Schemas (tests/test_reference_docs.py checks it is up to date), then the
# documentation site into site/ with MkDocs, warnings as errors (tests/test_docs_site.py builds it too).
docs: setup
	$(PY) -m batchloaders.cli.reference
	$(VENV)/bin/mkdocs build --strict --quiet

# The example configs point at demo_data/, which the demo generates.
validate: setup
	$(PY) -c "from batchloaders.demo_data import generate; generate()"
	$(VENV)/bin/batchloaders validate configs manifests

clean:
	rm -rf demo_data benchmarks/data benchmarks/out build dist site *.egg-info .pytest_cache
