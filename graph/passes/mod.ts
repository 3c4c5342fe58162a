// The semantic passes, each bit-exact against the oracle (tests/graph/passes.test.ts checks it on random graphs).
import type { Graph } from "../ir.ts";
import { validate } from "../validate.ts";
import { cse } from "./cse.ts";
import { dce } from "./dce.ts";
import { fold } from "./fold.ts";
import { fuse } from "./fuse.ts";

export { cse, dce, fold, fuse };

export interface OptimizeOptions {
  /** Annotate fusion groups (default true). */
  fuse?: boolean;
  /** Validate the result (default true). */
  validate?: boolean;
}

/** fold and cse to a fixed point, then dce, then fusion grouping. */
export function optimize(g: Graph, o: OptimizeOptions = {}): Graph {
  let cur = g;
  for (let i = 0; i < 8; i++) {
    const next = cse(fold(cse(cur)));
    if (next === cur) break;
    cur = next;
  }
  cur = dce(cur);
  if (o.fuse ?? true) cur = fuse(cur);
  return o.validate ?? true ? validate(cur) : cur;
}
