#!/usr/bin/env bash
# The npm package's code: an ESM bundle of mod.ts (esbuild; node:* and npm dependencies stay imports) and
# its .d.ts files (tsc), in dist/npm/. `npm pack` then packs it with package.json's "exports"; a Bun project
# can `bun add ./poot-<version>.tgz` and `import { open } from "poot"`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -d node_modules/.bin ] && PATH="$PWD/node_modules/.bin:$PATH"
rm -rf dist/npm
esbuild mod.ts --bundle --format=esm --platform=node --target=es2022 --packages=external \
  --splitting --outdir=dist/npm --entry-names=[name] --chunk-names=chunks/[name]-[hash] --log-level=warning
tsc -p build/tsconfig.types.json
# Consumers resolve "./x.js" to x.d.ts under every moduleResolution; "./x.ts" needs allowImportingTsExtensions.
find dist/npm/types -name '*.d.ts' -exec sed -i -E 's/(from "\.{1,2}\/[^"]*)\.ts"/\1.js"/g; s/(import\("\.{1,2}\/[^"]*)\.ts"\)/\1.js")/g' {} +
test -f dist/npm/types/mod.d.ts
echo "dist/npm: $(find dist/npm -name '*.js' | wc -l) js files, $(find dist/npm -name '*.d.ts' | wc -l) .d.ts files"
