// The decomposition layer every renderer runs first: an IR-to-IR pass over a Kernel that leaves only what the
// renderer must write itself. Today it folds constants and integer identities (fold.ts: exact, keeps the IR's
// wrap-around and f32 rounding); the target-neutral math library (math.ts) is written once over a vocabulary
// each renderer implements. Graph-level decomposition (what no kernel computes directly) is graph.ts, run by
// kernels/lower.ts before planning.
import type { Kernel } from "../ir.ts";
import { foldKernel } from "./fold.ts";

/** The kernel as every renderer sees it. */
export function decompose(k: Kernel): Kernel {
  return foldKernel(k);
}
