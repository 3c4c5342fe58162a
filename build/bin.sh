#!/usr/bin/env bash
# Runs a tool (deno, bun, tsc, esbuild) for `deno task`: Deno's task runner takes node_modules/.bin/deno (and
# bun) for JavaScript bins and fails on the native binaries npm installs there (denoland/deno#27114). bash
# runs them as programs: the ones npm installed when present, else those on PATH (a system Deno or Bun).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -d "$root/node_modules/.bin" ] && PATH="$root/node_modules/.bin:$PATH"
export PATH DENO_NO_UPDATE_CHECK=1
exec "$@"
