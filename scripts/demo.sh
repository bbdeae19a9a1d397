#!/usr/bin/env bash
# Set up and run the demo: a local Kafka broker, members joining, one leaving.
source "$(dirname "${BASH_SOURCE[0]}")/_setup.sh"
exec .venv/bin/coordination demo "$@"
