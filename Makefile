# The two commands of the README's quick start: `make demo` and `make test`.
BIN := .venv/bin

.PHONY: demo test lint rust docs bench venv java netlab clean

venv:
	@bash scripts/venv.sh

# Spark 4 needs Java 17+: installed (Debian's headless JRE) when missing.
java:
	@bash scripts/java.sh

# The network-namespace tests (tests/netns) cut members off as Jepsen does: iproute2 and nftables,
# installed when missing and the user is root; otherwise those tests are skipped, saying why.
netlab:
	@bash scripts/netlab.sh

# The main job: a 3-member cluster of real processes on 127.0.0.1 and local Spark; Spark loads
# 200,000 rows from Parquet through the data source while a member is SIGKILLed, an export is
# checked against the file, a member joins, every entry is verified again; it ends every process it
# started, and exits 1 if an entry is lost.
demo: venv java
	$(BIN)/shardgrid demo

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# The storage engine's own checks (native/engine, built into the venv by make venv): its Rust
# tests, clippy on every target and the Python bindings with every warning an error, and rustfmt.
# Cargo.lock as committed (--locked); clippy reads the venv's Python for the bindings.
rust: venv
	cd native/engine && cargo test --locked --quiet
	cd native/engine && PYO3_PYTHON=$(CURDIR)/$(BIN)/python cargo clippy --locked --quiet --all-targets --all-features -- -D warnings
	cd native/engine && cargo fmt --check

# The manual, built from docs/ into docs/_build/html; every warning is an error (a broken link, a
# missing page, a generated table that fails), and -E regenerates the pages read off the code.
docs: venv
	$(BIN)/sphinx-build -E -W --keep-going -q -b html docs docs/_build/html

# The whole suite: lint, the engine's Rust checks, the manual, then every test.
test: lint rust docs java netlab
	$(BIN)/python -m pytest

# The planning, simulator, data-path, storage-engine and memory-limit benchmarks, each kept in benchmarks/results/
# (the manual's benchmarks page shows the latest); make stops at the first that misses a target.
bench: venv
	$(BIN)/shardgrid bench plan --record
	$(BIN)/shardgrid bench sim --record
	$(BIN)/shardgrid bench member --record
	$(BIN)/shardgrid bench engine --record
	$(BIN)/shardgrid bench memory --record

clean:
	rm -rf .venv .pytest_cache .ruff_cache .hypothesis docs/_build native/engine/target src/shardgrid/_engine.*.so
