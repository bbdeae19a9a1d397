#!/usr/bin/env bash
# Set up and run the demo: a local Kafka broker, three PySpark pipeline workers sharing a
# 12-partition topic, events fed, one worker killed with SIGKILL, the results verified
# exactly against what was fed. Exits non-zero if they differ. Options: see
# `python -m recipes.pipeline demo --help`.
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
exec .venv/bin/python -m recipes.pipeline demo "$@"
