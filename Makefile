PYTHON ?= python3
export PYTHON

.PHONY: setup demo test test-fast bench

setup:
	bash scripts/setup.sh

# One command: set up, then capture the bundled 2-rank training job and print its summary.
demo: setup
	bash scripts/demo.sh

# One command: set up, then run the whole test suite (slow end-to-end tests included), on two
# pytest-xdist workers (TEST_WORKERS=0 runs it in one process); it ends with the 30 slowest tests.
TEST_WORKERS ?= 2
test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider -p no:benchmark -n $(TEST_WORKERS) --dist worksteal --durations=30

# The fast loop: the tests that start no process (chosen by tests/fastset.py: docs/decisions/
# 0098-fast-test-set.md) and a handful of cheap end-to-end checks marked @pytest.mark.fast.
test-fast:
	$(PYTHON) -m pytest -q -p no:cacheprovider -p no:benchmark -p no:hypothesispytest --fast \
		-n $(TEST_WORKERS) --dist worksteal

bench: setup
	$(PYTHON) -m bench
