#!/usr/bin/env bash
# `make test`'s two phases (docs/testing.md): the suite but its `alone` tests on parallel
# workers, then the `alone` tests by themselves. A phase that selects nothing (pytest's exit 5,
# e.g. PYTEST_ARGS naming one unit file) is no failure; the other phase still runs, and the
# worst exit code of the two is the run's.
set -uo pipefail
py=$1
shift
workers=${TEST_WORKERS:-3}
"$py" -m pytest -ra --durations=25 -n "$workers" --dist loadgroup --no-loadscope-reorder \
  -m "not alone" "$@"
first=$?
"$py" -m pytest -ra --durations=10 -m alone "$@"
second=$?
rc=0
for r in $first $second; do
  if [ "$r" -ne 0 ] && [ "$r" -ne 5 ]; then rc=$r; fi
done
if [ "$first" -eq 5 ] && [ "$second" -eq 5 ]; then rc=5; fi
exit $rc
