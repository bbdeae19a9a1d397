#!/usr/bin/env bash
# Set up and run every check: lint, types, unit tests, and the integration tests against real
# Apache Kafka brokers (the newest 4.x and 3.9.x, started from Maven Central jars).
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
