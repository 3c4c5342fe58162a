// GGUF block weights as the tensor-core matmuls' W operand: a prefill chunk over a quantized model multiplies on the
// staged kernel (kernels/lib/mma_staged.ts `blocks`), the blocks read in place and dequantized to bf16 as they are
// staged, as the cooperative-matrix matmul does on Vulkan (coop_matmul.ts blockStager); the server's entries on the
// register-operand kernel (mma_matmul.ts `blocks`, blockLanes at the end of this file), straight into operands.
//
// A staged slice is 64 values of k for each of the block's bn rows. That is whole spans of the type (dequant.ts
// QLayout.span: q8_0 and the other 32-value types two blocks, q4_k / q5_k one sub-block pair) or, for q6_k,
// whose span is 128 values, half of one: its chunks hold 8-value runs 32 apart, so a half takes two of each
// chunk's four runs (a select on the slice's parity; the other two are decoded and dropped).
//
// The work is split in two so the loads fly while the warps multiply: `issue` loads this invocation's chunks of a
// slice into registers (dequant.ts loadChunk), `store` decodes them (ggml's exact values), rounds each pair to a
// bf16 word and writes every 8-value run as one 16-byte row chunk of the stage, where the swizzle of the copied
// operands puts it (`place`).
import { type Buffer, type KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import { chunkGroups, chunkValues, type LoadedChunk, loadChunk, QLAYOUT, type QType, qWords } from "./dequant.ts";

/** Values of k a staged slice holds. */
const SLICE = 64;

/** Values one span of the type covers contiguously. */
const spanOf = (t: QType): number => QLAYOUT[t].per * QLAYOUT[t].span;

/** A chunk's values as 8-value runs: each run's offset from the chunk's `at` (a multiple of 8), in chunkValues order. */
export function runOffsets(t: QType): number[] | undefined {
  const offs: number[] = [];
  for (const g of chunkGroups(t)) {
    if (g.off % 8 || g.n % 8) return undefined;
    for (let o = 0; o < g.n; o += 8) offs.push(g.off + o);
  }
  return offs;
}

/** An 8-value run as the 4 bf16 pairs (low half the even value) that a bf16 row's 16 bytes would hold. */
const runWords = (b: KernelBuilder, run: Val[]): Val[] => [0, 1, 2, 3].map((w) => b.pack2("bf16", run[2 * w], run[2 * w + 1]));

/** Whether a slice of bk values of k can stage blocks of type t for rows of k values. */
export function blockStageFits(t: QType, k: number, bk: number): boolean {
  const q = QLAYOUT[t], S = spanOf(t), offs = runOffsets(t);
  if (bk !== SLICE || k % q.elems !== 0 || !offs) return false;
  if (S <= SLICE) return SLICE % S === 0;
  // half a span: run j of the second half lies 64 values past run j of the first
  const R = offs.length / 2;
  // (a chunk starts at most 24 values into its span: its first-half runs end inside the half)
  return S === 2 * SLICE && offs.slice(R).every((o, j) => o === offs[j] + SLICE) && offs.slice(0, R).every((o) => o + 32 <= SLICE);
}

export interface BlockStageShape {
  W: Buffer;
  /** The stages. */
  sm: Shared;
  t: QType;
  n: number;
  k: number;
  /** Rows of W a block stages, its first row. */
  bn: number;
  n0: Val;
  tid: Val;
  threads: number;
  /** Word offset of W's region inside a stage. */
  at: number;
  /** Word offset (inside a region) of 16-byte chunk c of staged row r: the operands' swizzle. */
  place: (r: Val, c: Val) => Val;
}

/** This invocation's chunks of one slice, loaded: decoded by `store`. */
export interface Issued {
  items: { row: Val; pos: Val; ch: LoadedChunk; odd?: Val }[];
}

export interface BlockStage {
  /** Registers of raw words an invocation holds for one slice's chunks between `issue` and `store`. */
  regs: number;
  /** Loads this invocation's chunks of slice kt (0 .. k / 64 - 1). */
  issue(kt: Val): Issued;
  /** Decodes what `issue` loaded into the stage at word `base`. */
  store(base: Val | number, what: Issued): void;
}

/** The stager of a staged matmul whose W holds blocks of `s.t` (blockStageFits must hold). */
export function blockStage(b: KernelBuilder, s: BlockStageShape): BlockStage {
  const { W, t, n, k, bn, n0, tid, threads } = s;
  const q = QLAYOUT[t], S = spanOf(t), offs = runOffsets(t);
  if (!offs || !blockStageFits(t, k, SLICE)) throw new KernelError(`staged matmul: ${t} blocks do not stage in slices of ${SLICE}`);
  const half = S > SLICE, R = half ? offs.length / 2 : offs.length;
  // chunks a row takes per slice: whole spans, or every chunk of the span a half slice lies in
  const cps = q.span, spans = half ? 1 : SLICE / S, cpr = spans * cps, items = bn * cpr;
  const slots = Math.ceil(items / threads), nb = k / q.elems, qw = qWords(t);
  return {
    regs: slots * q.raw,
    issue(kt) {
      // element index (in the row) of the slice's first span, and, for a half slice, which half
      const odd = half ? b.let(kt.and(1).ne(0), "bool", "qodd") : undefined;
      const k0 = b.let(half ? kt.shr(1).mul(S) : kt.mul(SLICE), "u32", "qk0");
      const out: Issued = { items: [] };
      for (let i = 0; i < slots; i++) {
        // past the last item (a partial round) the loads repeat it; store skips it
        const e = b.let(i === 0 ? tid : tid.add(i * threads), "u32", "qe");
        const ec = (i + 1) * threads > items ? b.let(e.min(items - 1), "u32", "qec") : e;
        const row = b.let(ec.div(cpr), "u32", "qrow"), ci = cpr > 1 ? b.let(ec.mod(cpr), "u32", "qci") : u32(0);
        const sp = spans > 1 ? b.let(ci.div(cps), "u32", "qsp") : u32(0);
        const e0 = spans > 1 ? b.let(k0.add(sp.mul(S)), "u32", "qe0") : k0;
        const inBlk = b.let(e0.mod(q.elems), "u32", "qib");
        const base = b.let(n0.add(row).min(n - 1).mul(nb).add(e0.div(q.elems)).mul(qw), "u32", "qbase");
        const c = b.let(inBlk.div(S).mul(cps).add(cps > 1 ? ci.mod(cps) : u32(0)), "u32", "qc");
        // rows of an even number of blocks: the 16-bit types' quants read as u32 words (as the decode gemv does)
        const ch = loadChunk(b, W, t, base, c, true, nb % 2 === 0);
        // the chunk's first value, counted from the slice's start
        const pos = b.let(ch.at.sub(inBlk).add(spans > 1 ? sp.mul(S) : u32(0)), "u32", "qpos");
        out.items.push({ row, pos, ch, odd });
      }
      return out;
    },
    store(base, what) {
      what.items.forEach((it, i) => {
        const emit = () => {
          const vals = chunkValues(it.ch.decode(), b);
          for (let j = 0; j < R; j++) {
            const run = vals.slice(8 * j, 8 * j + 8).map((v, x) => (it.odd ? it.odd.select(vals[8 * (j + R) + x].v, v.v) : v.v));
            const c16 = it.pos.add(offs[j]).shr(3);
            const at = b.let(s.place(it.row, c16).add(s.at).add(base), "u32", "qsw");
            runWords(b, run).forEach((word, w) => b.sstore(s.sm, w ? at.add(w) : at, word));
          }
        };
        if ((i + 1) * threads > items) b.if(tid.add(i * threads).lt(items), emit);
        else emit();
      });
    },
  };
}

/**
 * GGUF blocks as W of the register-operand MMA matmul (kernels/lib/mma_matmul.ts `blocks`, the serving entries'):
 * no stage; each lane decodes one chunk of its column a trip, and the chunk's 8-value runs are its pieces, each
 * feeding two k16 MMAs as a bf16 row's 16 bytes would. The four lanes of a column take four consecutive chunks:
 * they cover `span` values of k contiguously (a trip): two q8_0 blocks, or two of a q4_k block's 64-value sub-block
 * pairs.
 */
export interface BlockLanes {
  /** Values of k one trip covers (4 chunks). */
  span: number;
  /** Trips over a row (the last one partial where k is not a multiple of span). */
  trips: number;
  /** 8-value runs per chunk, each at `at + runs[r]`. */
  runs: number[];
  /**
   * Loads lane `t`'s chunk of trip `trip` of W row `col` (already clamped into n); `guard`: the trip may run past
   * the row (its last, partial one), where the block read is clamped and its words are zeros. `words()` decodes:
   * [run][4] bf16 pairs of ggml's exact values; `at` is the chunk's first element in the row.
   */
  load(col: Val, trip: Val, t: Val, guard: boolean): { at: Val; words(): Val[][] };
}

export function blockLanes(b: KernelBuilder, W: Buffer, t: QType, k: number): BlockLanes {
  const q = QLAYOUT[t], offs = runOffsets(t);
  if (!offs || k % q.elems) throw new KernelError(`mma matmul: rows of ${k} values do not hold whole ${t} blocks`);
  const nb = k / q.elems, qw = qWords(t), span = 4 * q.per;
  return {
    span,
    trips: Math.ceil(k / span),
    runs: offs,
    load(col, trip, lane, guard) {
      const gc = b.let(trip.mul(4).add(lane), "u32", "qgc"); // the chunk's index along the row
      const blk = b.let(gc.div(q.chunks), "u32", "qblk");
      const inside = guard ? b.let(blk.lt(nb), "bool", "qin") : undefined;
      const base = b.let(col.mul(nb).add(guard ? blk.min(nb - 1) : blk).mul(qw), "u32", "qbase");
      // rows of an even number of blocks: the 16-bit types' quants read as u32 words (as the decode gemv does)
      const ch = loadChunk(b, W, t, base, gc.mod(q.chunks), true, nb % 2 === 0);
      const at = b.let(blk.min(nb - 1).mul(q.elems).add(ch.at), "u32", "qat");
      return {
        at,
        words() {
          const vals = chunkValues(ch.decode(), b).map((v) => v.v);
          return offs.map((_, r) => runWords(b, vals.slice(8 * r, 8 * r + 8)).map((word) => b.let(inside ? inside.select(word, u32(0)) : word, "u32", "qbw")));
        },
      };
    },
  };
}
