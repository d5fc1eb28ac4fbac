PYTHON ?= python3
export PYTHON

.PHONY: setup demo check test test-fast bench proto wheel ext docs

setup:
	bash scripts/setup.sh

# One command: set up, then capture the bundled 2-rank training job and print its summary.
demo: setup
	bash scripts/demo.sh

# The static checks CI runs before the tests (and pre-commit before a commit): ruff (pyflakes,
# isort, bugbear, 120 columns) over src/, tests/ and bench/, then mypy over src/ as pyproject.toml
# configures it (docs/decisions/0102-ruff-and-mypy.md).  Neither reformats anything.
check:
	$(PYTHON) -m ruff check src tests bench
	$(PYTHON) -m mypy

# One command: set up, then run the whole test suite (slow end-to-end tests included), on three
# pytest-xdist workers (TEST_WORKERS=0 runs it in one process); it ends with the 30 costliest tests
# in CPU seconds (tests/cpu_report.py) and the 30 slowest in wall time.
TEST_WORKERS ?= 3
test: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider -p no:benchmark -n $(TEST_WORKERS) --dist worksteal --durations=30

# The fast loop: the tests that start no process (chosen by tests/fastset.py: docs/decisions/
# 0098-fast-test-set.md) and a handful of cheap end-to-end checks marked @pytest.mark.fast.
test-fast:
	$(PYTHON) -m pytest -q -p no:cacheprovider -p no:benchmark -p no:hypothesispytest --fast \
		-n 2 --dist worksteal

bench: setup
	$(PYTHON) -m bench

# Regenerate the capture schema's module and its type stub after editing proto/ (scripts/gen_proto.sh).
proto:
	bash scripts/gen_proto.sh

# The C extensions built next to their sources (a source tree, PYTHONPATH=src or an editable install).
ext:
	$(PYTHON) setup.py -q build_ext --inplace

# The sdist and a manylinux wheel in dist/ (docs/install.md): the wheel is built from the sdist (so a
# file missing from the sdist fails here), then auditwheel gives it the manylinux tag this machine's
# glibc allows.  CC, CFLAGS and LDFLAGS apply.
wheel:
	rm -rf dist/raw && mkdir -p dist
	$(PYTHON) -m build --no-isolation -o dist/raw .
	$(PYTHON) -m auditwheel repair -w dist dist/raw/*.whl
	mv dist/raw/*.tar.gz dist/ && rm -rf dist/raw
	$(PYTHON) -m auditwheel show dist/*manylinux*.whl

# The HTML API reference in docs/api/ (pdoc): the public modules users import (docs/api.md).
DOC_MODULES = neuron_explorer.torch neuron_explorer.notebook neuron_explorer.view.scale neuron_explorer.analysis.reader \
	neuron_explorer.contracts.dataset neuron_explorer.contracts.ndet_log neuron_explorer.recorders.app_stats
docs:
	PYTHONPATH=src $(PYTHON) -m pdoc -o docs/api --docformat restructuredtext $(DOC_MODULES)
