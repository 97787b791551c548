# The two commands of the README's quick start: `make demo` and `make test`.
BIN := .venv/bin

.PHONY: demo test lint bench venv clean

venv:
	@bash scripts/venv.sh

# The main job. Until the cluster runtime lands, it is the master's plan for a member joining.
demo: venv
	$(BIN)/shardgrid plan --members 3 --add 1 --partitions 271 --backups 1

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# The whole suite: lint, then every test.
test: lint
	$(BIN)/python -m pytest

bench: venv
	$(BIN)/shardgrid bench plan

clean:
	rm -rf .venv .pytest_cache .ruff_cache .hypothesis
