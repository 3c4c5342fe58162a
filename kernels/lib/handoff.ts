// A producer and its consumer in one dispatch, without a kernel boundary between them (caps.handoff): the
// producer's workgroups take the lowest indices and, once done, raise the handoff's words; each consumer workgroup
// issues what does not depend on the producer (a gemv's weight loads), waits for its word (the "await" statement),
// counts itself there, and the last to count sets the word back to zero for the next dispatch. What a consumer
// then computes is what it computed as a kernel of its own: the same bits. (CompileOptions.handoff, off by default:
// the H100 measured the first form slower, README "A gemv's x prep in the gemv's own dispatch".)
//
// The words (u32, zero between dispatches) are HANDOFF_LINES lines of their own cache line (HANDOFF_STRIDE bytes
// apart), so the consumers' polls and counts spread over as many L2 slices instead of queueing at one: consumer
// workgroup w polls line w mod HANDOFF_LINES. Every producer workgroup adds PRODUCER to every line (one lane a line)
// after its device barrier; a line's low 16 bits count its consumers, and its last consumer zeroes it.
// A decode gemv's x prep (xq_prep.ts) is the producer this was made for: a step whose own work is a few hundred
// nanoseconds, and whose dependent-launch boundary (~1.5-2 µs on the H200) and the gemv's ramp after it are what
// it costs the step.
import { type Buffer, type KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import { FAULT } from "./codes.ts";

const PRODUCER = 0x10000;
/** Lines a handoff's words spread over, and the bytes between them (a line of L2 each, and then some). */
export const HANDOFF_LINES = 32, HANDOFF_STRIDE = 256;
/** Bytes of one handoff's words (its sync binding). */
export const HANDOFF_BYTES = HANDOFF_LINES * HANDOFF_STRIDE;
const WORDS = HANDOFF_STRIDE / 4;

/** The most producer workgroups a handoff counts, and consumer workgroups (each line counts 16 bits' worth). */
export const HANDOFF_MAX = 0xffff, HANDOFF_CONSUMERS = HANDOFF_MAX * HANDOFF_LINES;

/** The lines `consumers` workgroups use (a line nobody polls is never zeroed, so none is raised). */
const linesOf = (consumers: number) => Math.min(HANDOFF_LINES, consumers);

/**
 * A producer workgroup's end, before `consumers` workgroups: every invocation's writes released, then one count on
 * each of their lines (a lane a line). Uniform flow, no return before it.
 */
export function handoffDone(b: KernelBuilder, sync: Buffer, consumers: number): void {
  const lines = linesOf(consumers), wg = b.workgroup[0];
  b.barrier("device");
  const raise = (l: Val) => b.atomic(sync, l.mul(WORDS), "add", PRODUCER);
  if (wg >= lines) b.if(b.lid.x.lt(lines), () => raise(b.lid.x));
  else b.for(b.lid.x, u32(lines), wg, raise);
}

/**
 * A consumer workgroup (index `wg` among the `consumers`, counted from 0) waits for all `producers` on its line,
 * then counts itself there: `seen` (a u32 variable of the kernel's top level, 0 until here) takes its count's old word
 * in invocation 0, for handoffEnd. Uniform flow.
 */
export function handoffAwait(b: KernelBuilder, sync: Buffer, producers: number, wg: Val, seen: Val): void {
  if (!(producers >= 1 && producers <= HANDOFF_MAX)) throw new KernelError(`handoff: ${producers} producer workgroups (1..${HANDOFF_MAX})`);
  const at = b.let(wg.mod(HANDOFF_LINES).mul(WORDS), "u32", "hw"); // (a line the producers raise: wg < consumers)
  b.await(sync, at, producers * PRODUCER, FAULT.HANDOFF);
  b.if(b.lid.x.eq(u32(0)), () => b.atomicFetch(sync, at, "add", 1, seen));
}

/**
 * A consumer's end (its count's latency hidden behind its work): the last of its line's consumers zeroes the line;
 * every producer has added to it and every consumer of it has counted by then.
 */
export function handoffEnd(b: KernelBuilder, sync: Buffer, wg: Val, seen: Val, consumers: number): void {
  if (!(consumers >= 1 && consumers <= HANDOFF_CONSUMERS)) throw new KernelError(`handoff: ${consumers} consumer workgroups (1..${HANDOFF_CONSUMERS})`);
  const r = b.let(wg.mod(HANDOFF_LINES), "u32", "hl");
  // consumers w ≡ r (mod lines): ⌊(consumers − 1 − r) / lines⌋ + 1 (r < consumers: r is some w's residue)
  const mine = b.let(u32(consumers - 1).sub(r).div(HANDOFF_LINES).add(1), "u32", "hn");
  b.if(b.lid.x.eq(u32(0)).and(seen.and(0xffff).add(1).eq(mine)), () => b.atomic(sync, r.mul(WORDS), "and", 0));
}
