// The bench scripts' flags: node:util parseArgs (strict), with a bad flag or value said in one line that names the
// script (exit status 2) instead of an uncaught error's stack.
import { exit } from "node:process";
import { parseArgs, type ParseArgsConfig } from "node:util";

export function parseFlags<T extends ParseArgsConfig>(prog: string, config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    console.error(`${prog}: ${(e as Error).message.replace(/\. To specify .*$/, "")}`);
    exit(2);
  }
}
