// Lowering of all_reduce and all_gather as collective steps of a rank's program (PTX ranks with NCCL).
import { byteSize } from "../../graph/dtype.ts";
import { type Node, numel } from "../../graph/ir.ts";
import type { Binding } from "../program.ts";
import type { LowerContext } from "../lower.ts";
import { LoweringError } from "./common.ts";

/**
 * A collective as a step of the rank's own program, where the target records collectives (caps.collectives: a
 * PTX rank with NCCL). NCCL gathers rank-major (rank r's block at r·count); a gather along an inner axis (rows
 * of logits gathered along the vocab) lands in a scratch first and one copy per (outer index, rank) block puts
 * it in place.
 */
export function lowerCollective(cx: LowerContext, n: Node): void {
  if (!cx.caps.collectives) throw new LoweringError(`${n.op} needs a device that records collectives`);
  const x = cx.nodes[n.inputs[0]], ranks = n.attrs.ranks!, count = numel(x.shape);
  const esize = byteSize(x.dtype as "f32", 1), bytes = count * esize;
  const src = cx.bind(x.id), dst = cx.bind(n.id);
  if (n.op === "all_reduce") {
    cx.steps.push({ k: "collective", op: n.op, dtype: x.dtype, count, ranks, src, dst, work: { bytes: 2 * bytes, flops: count * ranks } });
    return;
  }
  const axis = n.attrs.axis!, outer = numel(x.shape.slice(0, axis));
  const work = { bytes: bytes * (ranks + 1), flops: 0 };
  if (outer === 1) {
    cx.steps.push({ k: "collective", op: "all_gather", dtype: x.dtype, count, ranks, src, dst, work });
    return;
  }
  const scratch: Binding = { buffer: cx.buf("arena", "all-gather-scratch", bytes * ranks), offset: 0, bytes: bytes * ranks };
  cx.steps.push({ k: "collective", op: "all_gather", dtype: x.dtype, count, ranks, src, dst: scratch, work });
  const block = bytes / outer; // one rank's part of one outer index
  for (let o = 0; o < outer; o++) {
    for (let r = 0; r < ranks; r++) {
      cx.copy({ buffer: scratch.buffer, offset: (r * outer + o) * block, bytes: block }, { buffer: dst.buffer, offset: dst.offset + (o * ranks + r) * block, bytes: block });
    }
  }
}
