// A test file's scratch folder, removed when the file's run ends: Deno runs a test module in a worker whose end
// fires `unload` and never the process's `exit` (a fresh-clone run left four folders of converted models in /tmp
// each time), Bun runs it in the process and fires `exit`. Both are registered; removing twice is harmless.
import { mkdtempSync, rmSync } from "node:fs";
import process from "node:process";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A new folder under the system's temporary folder, named `prefix` and a random tail. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  process.on("exit", remove);
  globalThis.addEventListener?.("unload", remove);
  return dir;
}
