# Shared set-up for scripts/demo.sh and scripts/test.sh: a virtualenv in .venv with the
# project and its test tools installed. Sourced, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for tool in python3 java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: '$tool' is not installed; this project needs Python 3.10+, a JDK 17+ and Maven" \
         "(Kafka's jars come from Maven Central)" >&2
    exit 1
  fi
done
# A virtualenv whose creation was interrupted (no pip in it) is made again, not reused.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  rm -rf .venv
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
# The project's own modules compiled once, here: with PYTHONDONTWRITEBYTECODE set (as on
# CI's machines) Python never caches what it compiles, and every process the tests and the
# demo start (members, peers, simulation chunks, Spark's Python workers) would compile
# them again, about 0.2 s of CPU each. Cached files are read whatever that variable says.
.venv/bin/python -m compileall -q -j 0 coordination recipes devtools tests benchmarks examples
