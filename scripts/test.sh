#!/usr/bin/env bash
# Set up and run every check: lint, types, unit tests, and the integration tests against real
# Apache Kafka brokers (the newest 4.x and 3.9.x, started from Maven Central jars).
# The tests run in TEST_PROCESSES processes (default 4: most integration tests wait on brokers
# and other processes), a file's tests in one process, sharing one broker per Kafka version
# (tests/_shared_brokers.py); the longest files start first (tests/conftest.py), which xdist
# keeps only without its reordering by test count. Arguments go to pytest; `-n 0` runs
# everything in one process.
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -n "${TEST_PROCESSES:-4}" --dist loadfile --no-loadscope-reorder --durations=50 "$@"
