# The two commands of the README's quick start: `make demo` and `make test`.
BIN := .venv/bin

.PHONY: demo test lint bench venv clean

venv:
	@bash scripts/venv.sh

# The main job. Until the network runtime lands: the master's plan for a member joining, then the
# same member code running as a simulated cluster under crashes, joins and splits.
demo: venv
	$(BIN)/shardgrid plan --members 3 --add 1 --partitions 271 --backups 1
	$(BIN)/shardgrid sim --seed 1 --members 5 --partitions 271 --backups 1 --ops 2000 --faults crash,master-crash,join,split

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# The whole suite: lint, then every test.
test: lint
	$(BIN)/python -m pytest

bench: venv
	$(BIN)/shardgrid bench plan
	$(BIN)/shardgrid bench sim
	$(BIN)/shardgrid bench member

clean:
	rm -rf .venv .pytest_cache .ruff_cache .hypothesis
