// llama.cpp's answers stored in the repository, for tests that run llama.cpp (node-llama-cpp on the CPU, through a
// helper script under Node) on files that poot's writers make deterministically (`poot quantize`, the converter,
// the oracle's f32 dequantization). An answer is used only while its key matches: the sha256 of every model file's
// bytes as written now, of the helper script, the pinned node-llama-cpp version and the request. A writer change
// changes the bytes, so the key, and the test runs llama.cpp live (and says the stored answer is stale): a stored
// answer can never stand in for a file llama.cpp did not read. The same pattern as tests/llm/llamacpp_reference.ts.
//
// Rewrite a store where llama.cpp runs with POOT_LLAMACPP_WRITE=1 and the whole test file, e.g.
//   POOT_LLAMACPP_WRITE=1 deno test -A --no-check tests/quant/tier3.test.ts
// which runs llama.cpp live for every entry and writes exactly the entries the file used.
import process from "node:process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../../", import.meta.url));
const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");

/** node-llama-cpp as package.json pins it (exactly): a new llama.cpp makes every stored answer stale. */
const LLAMACPP = (JSON.parse(readFileSync(`${root}package.json`, "utf8")) as { devDependencies: Record<string, string> })
  .devDependencies["node-llama-cpp"];

export interface Store {
  path: string;
  /** True under POOT_LLAMACPP_WRITE=1: nothing is read, everything computed is written. */
  write: boolean;
  entries: Record<string, { key: string; out: unknown }>;
  /** Entries that were stale or missing and ran live (named in the test's output). */
  live: string[];
}

export function openStore(path: string): Store {
  const write = process.env.POOT_LLAMACPP_WRITE === "1";
  const entries = !write && existsSync(path)
    ? (JSON.parse(readFileSync(path, "utf8")) as { entries: Store["entries"] }).entries
    : {};
  return { path, write, entries, live: [] };
}

/**
 * The key of one llama.cpp job: the model files' bytes (not their paths: they live in temporary folders), the
 * helper script, node-llama-cpp's version and the rest of the request.
 */
export function jobKey(script: string, files: string[], request: unknown): string {
  return sha(JSON.stringify([files.map((f) => sha(readFileSync(f))), sha(readFileSync(script, "utf8")), LLAMACPP, request])).slice(0, 24);
}

export interface Job<R> {
  /** Stable name of the entry in the store (the same job on every run). */
  name: string;
  key: string;
  /** Hook to set the result that ran live (or came from the store). */
  out?: R;
}

/**
 * Fills each job's `out` from the store where the key matches; the others go to `run` (all at once, so one
 * llama.cpp process serves them), whose results, in order, are recorded. Returns how many ran live.
 */
export function resolve<R>(store: Store, jobs: Job<R>[], run: (missing: Job<R>[]) => R[]): number {
  const missing: Job<R>[] = [];
  for (const j of jobs) {
    const e = store.entries[j.name];
    if (e && e.key === j.key) j.out = e.out as R;
    else missing.push(j);
  }
  if (missing.length) {
    const out = run(missing);
    if (out.length !== missing.length) throw new Error(`llama.cpp gave ${out.length} results for ${missing.length} jobs`);
    missing.forEach((j, i) => {
      j.out = out[i];
      if (!store.write) store.live.push(`${j.name}${store.entries[j.name] ? " (stale)" : " (not stored)"}`);
      store.entries[j.name] = { key: j.key, out: out[i] };
    });
  }
  if (store.write) save(store);
  return missing.length;
}

/** What to print after a file's llama.cpp jobs: which ran live, and how to store them. */
export function staleNote(store: Store, test: string): string | undefined {
  if (!store.live.length) return undefined;
  return `llama.cpp ran live for ${store.live.length} job(s) the store ${store.path.slice(root.length)} did not match ` +
    `(${store.live.slice(0, 6).join(", ")}${store.live.length > 6 ? ", ..." : ""}); ` +
    `rewrite it: POOT_LLAMACPP_WRITE=1 deno test -A --no-check ${test}`;
}

function save(store: Store): void {
  const entries = Object.fromEntries(Object.entries(store.entries).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  const source = `llama.cpp via node-llama-cpp ${LLAMACPP}; written by POOT_LLAMACPP_WRITE=1 (tests/llm/llamacpp_store.ts)`;
  // One entry per line: a rewrite shows in a diff as the entries that changed.
  const body = Object.entries(entries).map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",\n");
  writeFileSync(store.path, `{"source":${JSON.stringify(source)},"entries":{\n${body}\n}}\n`);
}
