// poot command line: run | serve | bench | info (see README.md).
import { VERSION } from "../mod.ts";

const [cmd = "run"] = (globalThis as { Deno?: { args: string[] } }).Deno?.args ??
  (globalThis as { process?: { argv: string[] } }).process?.argv.slice(2) ?? [];
console.log(`poot ${VERSION}: ${cmd}: no model runner yet`);
