#!/usr/bin/env bash
# The standing mutation check (tests/mutants/mutants.ts): not in CI; run by hand, a few minutes of CPU.
#   bash tests/mutants/run.sh [--only NAME,...] [--no-baseline] [--keep] [--timeout S]
set -euo pipefail
cd "$(dirname "$0")/../.."
export NO_COLOR=1 DENO_NO_UPDATE_CHECK=1
exec deno run -A --no-check tests/mutants/run.ts "$@"
