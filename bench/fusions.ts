// The fusions a bench run can turn off or on by name (bench/kernels.ts --backend variants, bench/decode.ts
// --plan-fuse): those whose default is the target's Caps.dispatchGap (kernels/lower.ts CompileOptions), so that
// one run on a GPU can time each against its absence.
import type { CompileOptions } from "../kernels/lower.ts";

/**
 * The fusions whose default is the target's Caps.dispatchGap (kernels/lower.ts CompileOptions), by the name a
 * bench variant gives them: the embedding gather with its cast, small outputs written straight into their
 * readback buffers, per-head norms with their ropes and cache write, an rmsnorm with its residual add, and
 * split-K attention / the vocab argmax combining in their own last team.
 */
export const FUSIONS = {
  "gather-cast": "gatherCast",
  "outputs-in-place": "outputsInPlace",
  "norm-rope": "normRope",
  "norm-add": "normAdd",
  "attention-fuse": "attentionFuse",
} as const satisfies Record<string, keyof CompileOptions>;

/**
 * CompileOptions for a fusion flag: "no-plan-fuse" (the four plan fusions off; attention-fuse stays), "no-X"
 * (fusion X off), "X" (X on, whatever the target's default); undefined for any other flag.
 */
export function fusionFlag(flag: string): CompileOptions | undefined {
  if (flag === "no-plan-fuse") return { gatherCast: false, outputsInPlace: false, normRope: false, normAdd: false };
  const off = flag.startsWith("no-"), name = off ? flag.slice(3) : flag;
  return Object.hasOwn(FUSIONS, name) ? { [FUSIONS[name as keyof typeof FUSIONS]]: !off } : undefined;
}
