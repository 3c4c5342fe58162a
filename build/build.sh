#!/usr/bin/env bash
# `deno task build` / `npm run build`: the single binary dist/poot (bun build --compile, the default model
# embedded) and the npm package's ESM bundle of mod.ts with its .d.ts (build/npm.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -d node_modules/.bin ] && PATH="$PWD/node_modules/.bin:$PATH"
bun build --compile build/bun-entry.ts --outfile dist/poot
bash build/npm.sh
