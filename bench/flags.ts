// The bench scripts' flags: node:util parseArgs (strict), with a bad flag or value said in one line that names the
// script (exit status 2) instead of an uncaught error's stack.
import { exit } from "node:process";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { SYNTHETIC_DTYPES, type SyntheticDtype } from "../llm/synthetic.ts";

export function parseFlags<T extends ParseArgsConfig>(prog: string, config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    console.error(`${prog}: ${(e as Error).message.replace(/\. To specify .*$/, "")}`);
    exit(2);
  }
}

/** A comma-separated list of whole numbers, each `min` or more; a bad entry throws a RangeError naming the flag. */
export function intList(flag: string, v: string, min = 1): number[] {
  return v.split(",").map((s) => {
    const x = Number(s.trim());
    if (s.trim() === "" || !Number.isInteger(x) || x < min) throw new RangeError(`--${flag}: ${JSON.stringify(s)} is not a whole number >= ${min}`);
    return x;
  });
}

/** --dtype: a synthetic weight type (llm/synthetic.ts); anything else throws a RangeError naming the flag. */
export function syntheticDtype(v: string): SyntheticDtype {
  if (!(SYNTHETIC_DTYPES as readonly string[]).includes(v)) throw new RangeError(`--dtype: one of ${SYNTHETIC_DTYPES.join(", ")}, not ${v}`);
  return v as SyntheticDtype;
}
