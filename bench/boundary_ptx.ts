// The kernels and chains of bench/boundary.ts (its header says what they measure): PTX text for sm_90, written
// here by hand because the point is to time bare weight streams and their boundaries, not poot's kernels.
import { SHAPES, type ShapeName } from "./shapes.ts";

/** Threads of a persistent block. */
export const T = 256;

/** A chain of stream sizes in bytes (each a multiple of 16). */
export function chainOf(name: ShapeName): { layer: number[]; layers: number; head: number } {
  const c = SHAPES[name];
  const hd = c.headDim ?? c.dim / c.heads, kv = c.kvHeads * hd;
  const b = (n: number) => Math.ceil((n * 2) / 16) * 16; // bf16
  return { layer: [b(c.dim * (c.dim + 2 * kv)), 128 << 10, b(c.dim * c.dim), b(c.dim * 2 * c.hidden), b(c.hidden * c.dim)], layers: c.layers, head: b(c.vocab * c.dim) };
}

/**
 * Block reduction of %r7 over `T` threads through red[8], `bar` the barrier instruction: thread 0 (%p0) ends with
 * the block's sum in %r10; the others have branched to L_r`tag` (which the caller places).
 */
function blockSum(tag: string, T: number, bar: string): string {
  let s = "mov.u32 %r10, %r7;\n";
  for (const o of [16, 8, 4, 2, 1]) s += `shfl.sync.bfly.b32 %r11, %r10, ${o}, 31, -1;\nadd.u32 %r10, %r10, %r11;\n`;
  s += `and.b32 %r12, %r1, 31;\nsetp.eq.u32 %p3, %r12, 0;\nshr.u32 %r13, %r1, 5;\nmov.u32 %r14, red;\nmad.lo.u32 %r15, %r13, 4, %r14;\n@%p3 st.shared.u32 [%r15], %r10;\n${bar};\n`;
  s += `@!%p0 bra L_r${tag};\nmov.u32 %r10, 0;\n`;
  for (let i = 0; i < T / 32; i++) s += `ld.shared.u32 %r11, [%r14+${4 * i}];\nadd.u32 %r10, %r10, %r11;\n`;
  return s;
}

/** The kernels with `U` 16-byte loads in flight a thread: stage_pdl / stage_early (one stream) and chain_persist / chain_prefetch. */
export function boundaryPtx(U: number): { stage(early: boolean, T: number): string; chain(prefetch: boolean): string } {
  const head = (name: string, params: string[], T: number) =>
    `.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry ${name}(${params.map((p) => `.param ${p}`).join(", ")})\n{\n` +
    `.reg .pred %p<16>;\n.reg .b32 %r<${64 + 4 * U}>;\n.reg .b64 %rd<32>;\n.shared .align 4 .b32 red[8];\n` +
    `mov.u32 %r1, %tid.x;\nmov.u32 %r2, %ctaid.x;\nmov.u32 %r3, %nctaid.x;\nmad.lo.u32 %r4, %r2, ${T}, %r1;\nmul.lo.u32 %r5, %r3, ${T};\n` +
    `mul.lo.u32 %r6, %r5, ${U};\nmov.u32 %r7, 0;\nsetp.eq.u32 %p0, %r1, 0;\n`;
  // registers: %r4 gtid, %r5 stride (threads), %r6 U x stride, %r7 acc, %r8 i, batch values %r64...
  const V = (k: number, j: number) => `%r${64 + 4 * k + j}`;
  /** Loads the batch at index %r8 of the stream at `w` (u64 reg) with `n` (u32 reg) chunks, predicated. */
  function loadBatch(w: string, n: string): string {
    let s = "";
    for (let k = 0; k < U; k++) {
      s += (k ? `mul.lo.u32 %r9, %r5, ${k};\nadd.u32 %r9, %r9, %r8;\n` : "mov.u32 %r9, %r8;\n") + `setp.lt.u32 %p1, %r9, ${n};\nmul.wide.u32 %rd1, %r9, 16;\nadd.s64 %rd2, ${w}, %rd1;\n`;
      s += `mov.u32 ${V(k, 0)}, 0;\nmov.u32 ${V(k, 1)}, 0;\nmov.u32 ${V(k, 2)}, 0;\nmov.u32 ${V(k, 3)}, 0;\n`;
      s += `@%p1 ld.global.nc.v4.u32 {${V(k, 0)}, ${V(k, 1)}, ${V(k, 2)}, ${V(k, 3)}}, [%rd2];\n`;
    }
    return s;
  }
  /** The stream's loop, its first batch already loaded. */
  function streamLoop(w: string, n: string, tag: string): string {
    let acc = "";
    for (let k = 0; k < U; k++) for (let j = 0; j < 4; j++) acc += `add.u32 %r7, %r7, ${V(k, j)};\n`;
    return `L_b${tag}:\n${acc}add.u32 %r8, %r8, %r6;\nsetp.ge.u32 %p2, %r8, ${n};\n@%p2 bra L_d${tag};\n${loadBatch(w, n)}bra L_b${tag};\nL_d${tag}:\n`;
  }
  /** Block reduction of %r7; thread 0 stores it at [%rd3] (u64 address). */
  function reduceStore(tag: string, T: number): string {
    return blockSum(tag, T, "bar.sync 0") + `st.global.u32 [%rd3], %r10;\nL_r${tag}:\nbar.sync 0;\n`;
  }

  function stagePtx(early: boolean, T: number): string {
    const name = early ? "stage_early" : "stage_pdl";
    let s = head(name, [".u64 pw", ".u32 pn", ".u64 pdep", ".u64 pout"], T);
    s += `ld.param.u64 %rd10, [pw];\nld.param.u32 %r20, [pn];\nld.param.u64 %rd11, [pdep];\nld.param.u64 %rd12, [pout];\nmov.u32 %r8, %r4;\n`;
    if (early) s += loadBatch("%rd10", "%r20");
    s += "griddepcontrol.wait;\ngriddepcontrol.launch_dependents;\n";
    s += "ld.global.cg.u32 %r21, [%rd11];\nadd.u32 %r7, %r7, %r21;\n";
    if (!early) s += loadBatch("%rd10", "%r20");
    s += streamLoop("%rd10", "%r20", "0");
    s += "mul.wide.u32 %rd4, %r2, 4;\nadd.s64 %rd3, %rd12, %rd4;\n" + reduceStore("0", T);
    return s + "ret;\n}\n";
  }

  /**
   * The chain as one kernel: tab[s] = (first chunk, chunks) of stream s; cnt = (barrier count, exit count, timeout
   * flag); out[s * grid + block]. The barrier's spin is bounded (2^26 polls): past it the flag is set and it goes on.
   */
  function persistPtx(prefetch: boolean): string {
    const name = prefetch ? "chain_prefetch" : "chain_persist";
    let s = head(name, [".u64 pw", ".u64 ptab", ".u32 pns", ".u64 pcnt", ".u64 pout"], T);
    s += `ld.param.u64 %rd10, [pw];\nld.param.u64 %rd11, [ptab];\nld.param.u32 %r20, [pns];\nld.param.u64 %rd12, [pcnt];\nld.param.u64 %rd13, [pout];\n`;
    // stream 0: %rd14 its base, %r22 its chunks; %r23 = s
    s += "ld.global.nc.v2.u32 {%r21, %r22}, [%rd11];\nmul.wide.u32 %rd5, %r21, 16;\nadd.s64 %rd14, %rd10, %rd5;\nmov.u32 %r23, 0;\nmov.u32 %r8, %r4;\n";
    s += loadBatch("%rd14", "%r22");
    s += "L_s:\n" + streamLoop("%rd14", "%r22", "0");
    s += "add.u32 %r24, %r23, 1;\nsetp.lt.u32 %p4, %r24, %r20;\n";
    if (prefetch) {
      s += "@!%p4 bra L_nopf;\nmul.wide.u32 %rd6, %r24, 8;\nadd.s64 %rd7, %rd11, %rd6;\nld.global.nc.v2.u32 {%r25, %r26}, [%rd7];\n";
      s += "mul.wide.u32 %rd5, %r25, 16;\nadd.s64 %rd15, %rd10, %rd5;\nmov.u32 %r8, %r4;\n" + loadBatch("%rd15", "%r26") + "L_nopf:\n";
    }
    // this stream's word, then the barrier: target (s + 1) x grid
    s += "mad.lo.u32 %r27, %r23, %r3, %r2;\nmul.wide.u32 %rd4, %r27, 4;\nadd.s64 %rd3, %rd13, %rd4;\n" + reduceStore("0", T);
    s += "@!%p0 bra L_bw;\nred.release.gpu.global.add.u32 [%rd12], 1;\nmul.lo.u32 %r28, %r24, %r3;\nmov.u32 %r29, 0;\n";
    s += "L_spin:\nld.acquire.gpu.global.u32 %r30, [%rd12];\nsetp.ge.u32 %p5, %r30, %r28;\n@%p5 bra L_bw;\nadd.u32 %r29, %r29, 1;\n";
    s += "setp.lt.u32 %p6, %r29, 67108864;\n@%p6 bra L_spin;\nst.global.u32 [%rd12+8], 1;\nL_bw:\nbar.sync 0;\n";
    // the dependency: the first block's word of this stream
    s += "mul.lo.u32 %r31, %r23, %r3;\nmul.wide.u32 %rd4, %r31, 4;\nadd.s64 %rd8, %rd13, %rd4;\nld.acquire.gpu.global.u32 %r32, [%rd8];\nadd.u32 %r7, %r7, %r32;\n";
    s += "mov.u32 %r23, %r24;\n@!%p4 bra L_end;\n";
    if (prefetch) s += "mov.b64 %rd14, %rd15;\nmov.u32 %r22, %r26;\n";
    else {
      s += "mul.wide.u32 %rd6, %r23, 8;\nadd.s64 %rd7, %rd11, %rd6;\nld.global.nc.v2.u32 {%r25, %r22}, [%rd7];\n";
      s += "mul.wide.u32 %rd5, %r25, 16;\nadd.s64 %rd14, %rd10, %rd5;\nmov.u32 %r8, %r4;\n" + loadBatch("%rd14", "%r22");
    }
    s += "bra L_s;\nL_end:\n";
    // the last block out resets the counts for the next launch
    s += "@!%p0 bra L_x;\natom.acq_rel.gpu.global.add.u32 %r33, [%rd12+4], 1;\nsub.u32 %r34, %r3, 1;\nsetp.eq.u32 %p7, %r33, %r34;\n";
    s += "@!%p7 bra L_x;\nst.relaxed.gpu.global.u32 [%rd12], 0;\nst.relaxed.gpu.global.u32 [%rd12+4], 0;\nL_x:\nret;\n}\n";
    return s;
  }
  return { stage: stagePtx, chain: persistPtx };
}

/** Consumer threads of chain_mega (8 warps); one more warp's first thread is its loader. */
export const MEGA_T = 256;

/**
 * What a chain_mega block waits for before stream s: "all" every block's stream s - 1 (one counter, target
 * s x grid, as in chain_persist, but no block waits at a barrier of its own; a gemv's x is written by all of them),
 * "one" only the next block's (a count a block; a split-K gemv whose slice of x one block wrote), "none" nothing
 * (the ring's own pace), "ll" every block's word itself, stored with its launch's tag in one 8-byte store (no fence,
 * no counter; NCCL's LL protocol carries its flag so), polled by the first `grid` consumer threads, one word each.
 */
export type MegaDep = "all" | "one" | "none" | "ll";

/**
 * The chain as a megakernel would run it (`chain_mega`): one block a multiprocessor, each block's share of
 * every stream (a contiguous run of chunks, as a gemv's rows are) copied by one loader thread into a ring of
 * `nb` shared-memory buffers of `bytes` each with bulk copies (cp.async.bulk, an mbarrier a buffer), as far
 * ahead as the ring allows, since weights never wait on the stream before. The 256 consumer threads, per
 * stream: wait for what `dep` says, add the word(s) they depend on, sum their share from shared memory,
 * release each buffer, reduce, store one word and publish it. A block's word of stream s is its sum of the
 * stream plus, for s > 0: the first block's word of s - 1 ("all"), the next block's ("one"), nothing ("none"),
 * every block's ("ll"); the host checks that on a run from zeroed words (the weights as 32-bit ones: 4 a
 * chunk). Words: out[s * grid + block], or (word, tag) pairs with "ll". cnt: chain_persist's three words, word
 * 3 the launches so far (the "ll" tag is that count + 1, so zeroed words never match), then one count a block
 * ("one": the streams it finished).
 */
export function megaPtx(nb: number, bytes: number, dep: MegaDep = "all"): string {
  const PC = bytes / 16, C = MEGA_T;
  /** A bounded wait on mbarrier `bar` (u32 shared address) for phase parity `par`; past it the flag is set. */
  const wait = (bar: string, par: string, tag: string) =>
    `mov.u32 %r46, 0;\nL_w${tag}:\nmbarrier.try_wait.parity.shared::cta.b64 %p7, [${bar}], ${par};\n@%p7 bra L_wd${tag};\n` +
    `add.u32 %r46, %r46, 1;\nsetp.lt.u32 %p5, %r46, 16777216;\n@%p5 bra L_w${tag};\nst.global.u32 [%rd12+8], 2;\nL_wd${tag}:\n`;
  /** Stream %r41's table entry (%r21 first chunk, %r22 chunks) and this block's share [%r50, %r52). */
  const share = "mul.wide.u32 %rd6, %r41, 8;\nadd.s64 %rd7, %rd11, %rd6;\nld.global.nc.v2.u32 {%r21, %r22}, [%rd7];\n" +
    "cvt.u64.u32 %rd2, %r3;\nmul.wide.u32 %rd1, %r22, %r2;\ndiv.u64 %rd1, %rd1, %rd2;\ncvt.u32.u64 %r50, %rd1;\n" +
    "add.u32 %r51, %r2, 1;\nmul.wide.u32 %rd1, %r22, %r51;\ndiv.u64 %rd1, %rd1, %rd2;\ncvt.u32.u64 %r52, %rd1;\n";
  /** Piece %r40's chunks %r53 (of what is left of the share), buffer %r54, phase parity %r55. */
  const piece = `sub.u32 %r53, %r52, %r50;\nmin.u32 %r53, %r53, ${PC};\nrem.u32 %r54, %r40, ${nb};\ndiv.u32 %r55, %r40, ${nb};\nand.b32 %r55, %r55, 1;\n` +
    "mad.lo.u32 %r56, %r54, 8, %r43;\nmad.lo.u32 %r64, %r54, 8, %r44;\n" + `mad.lo.u32 %r57, %r54, ${bytes}, %r42;\n`;
  let s = `.version 8.0\n.target sm_90\n.address_size 64\n.extern .shared .align 128 .b8 ring[];\n` +
    ".visible .entry chain_mega(.param .u64 pw, .param .u64 ptab, .param .u32 pns, .param .u64 pcnt, .param .u64 pout)\n{\n" +
    ".reg .pred %p<16>;\n.reg .b32 %r<96>;\n.reg .b64 %rd<32>;\n" +
    `.shared .align 8 .b64 fullb[${nb}];\n.shared .align 8 .b64 emptyb[${nb}];\n.shared .align 4 .b32 red[8];\n` +
    "mov.u32 %r1, %tid.x;\nmov.u32 %r2, %ctaid.x;\nmov.u32 %r3, %nctaid.x;\nsetp.eq.u32 %p0, %r1, 0;\n" +
    "ld.param.u64 %rd10, [pw];\nld.param.u64 %rd11, [ptab];\nld.param.u32 %r20, [pns];\nld.param.u64 %rd12, [pcnt];\nld.param.u64 %rd13, [pout];\n" +
    "mov.u32 %r42, ring;\nmov.u32 %r43, fullb;\nmov.u32 %r44, emptyb;\nmov.u32 %r40, 0;\nmov.u32 %r41, 0;\n";
  if (dep === "ll") s += "ld.relaxed.gpu.global.u32 %r36, [%rd12+12];\nadd.u32 %r36, %r36, 1;\n"; // the tag
  s += "@!%p0 bra L_ini;\n";
  for (let k = 0; k < nb; k++) s += `mbarrier.init.shared::cta.b64 [fullb+${8 * k}], 1;\nmbarrier.init.shared::cta.b64 [emptyb+${8 * k}], ${C};\n`;
  s += "fence.mbarrier_init.release.cluster;\nL_ini:\nbar.sync 0;\n" + `setp.ge.u32 %p1, %r1, ${C};\n@%p1 bra L_prod;\n`;

  // ---- consumers ----
  s += "L_cs:\nmov.u32 %r7, 0;\nsetp.eq.u32 %p3, %r41, 0;\n@%p3 bra L_nodep;\n";
  if (dep === "ll") {
    // threads below grid: poll word %r1 of stream s - 1 until it carries this launch's tag, and add it
    s += "setp.ge.u32 %p12, %r1, %r3;\n@%p12 bra L_dsync;\n";
    s += "sub.u32 %r48, %r41, 1;\nmad.lo.u32 %r48, %r48, %r3, %r1;\nmul.wide.u32 %rd4, %r48, 8;\nadd.s64 %rd5, %rd13, %rd4;\nmov.u32 %r46, 0;\n";
    s += "L_ll:\nld.relaxed.gpu.global.v2.u32 {%r49, %r37}, [%rd5];\nsetp.eq.u32 %p4, %r37, %r36;\n@%p4 bra L_llgot;\n";
    s += "add.u32 %r46, %r46, 1;\nsetp.lt.u32 %p5, %r46, 67108864;\n@%p5 bra L_ll;\nst.global.u32 [%rd12+8], 1;\nL_llgot:\nadd.u32 %r7, %r7, %r49;\nbra L_dsync;\n";
  } else {
    // thread 0: spin on the counter (the global one, target s x grid, or the next block's own, target s), then
    // add the word depended on; "none" jumps past it all
    s += "@!%p0 bra L_dsync;\n" + (dep === "none" ? "bra L_dsync;\n" : "");
    s += dep === "one"
      ? "add.u32 %r68, %r2, 1;\nrem.u32 %r68, %r68, %r3;\nmul.wide.u32 %rd15, %r68, 4;\nadd.s64 %rd15, %rd15, %rd12;\nadd.s64 %rd15, %rd15, 16;\nmov.u32 %r69, %r41;\n"
      : "mov.b64 %rd15, %rd12;\nmul.lo.u32 %r69, %r41, %r3;\n";
    s += "mul.lo.u32 %r45, %r41, %r3;\nmov.u32 %r46, 0;\nL_spin:\nld.acquire.gpu.global.u32 %r47, [%rd15];\nsetp.ge.u32 %p4, %r47, %r69;\n@%p4 bra L_got;\n";
    s += "add.u32 %r46, %r46, 1;\nsetp.lt.u32 %p5, %r46, 67108864;\n@%p5 bra L_spin;\nst.global.u32 [%rd12+8], 1;\nL_got:\n";
    s += "sub.u32 %r48, %r45, %r3;\n" + (dep === "one" ? "add.u32 %r48, %r48, %r68;\n" : "") + "mul.wide.u32 %rd4, %r48, 4;\nadd.s64 %rd5, %rd13, %rd4;\nld.relaxed.gpu.global.u32 %r49, [%rd5];\nadd.u32 %r7, %r7, %r49;\n";
  }
  s += `L_dsync:\nbar.sync 1, ${C};\nL_nodep:\n` + share;
  s += "L_cp:\nsetp.ge.u32 %p6, %r50, %r52;\n@%p6 bra L_cdone;\n" + piece + wait("%r56", "%r55", "c");
  // the piece's chunks, four a thread at a time (their loads in flight together)
  s += "mov.u32 %r58, %r1;\nL_cj:\nsetp.ge.u32 %p8, %r58, %r53;\n@%p8 bra L_cjd;\n";
  for (let k = 0; k < 4; k++) {
    s += `add.u32 %r59, %r58, ${k * C};\nsetp.lt.u32 %p10, %r59, %r53;\nmad.lo.u32 %r59, %r59, 16, %r57;\n`;
    s += `mov.u32 %r${70 + 2 * k}, 0;\nmov.u32 %r${71 + 2 * k}, 0;\nmov.u32 %r60, 0;\nmov.u32 %r61, 0;\n`;
    s += `@%p10 ld.shared.v4.u32 {%r60, %r61, %r${70 + 2 * k}, %r${71 + 2 * k}}, [%r59];\nadd.u32 %r7, %r7, %r60;\nadd.u32 %r7, %r7, %r61;\n`;
  }
  for (let k = 0; k < 8; k++) s += `add.u32 %r7, %r7, %r${70 + k};\n`;
  s += `add.u32 %r58, %r58, ${4 * C};\nbra L_cj;\nL_cjd:\nmbarrier.arrive.shared::cta.b64 %rd8, [%r64];\nadd.u32 %r50, %r50, %r53;\nadd.u32 %r40, %r40, 1;\nbra L_cp;\nL_cdone:\n`;
  // the block's word of this stream, then the release add
  s += blockSum("", C, `bar.sync 1, ${C}`);
  if (dep === "ll") s += "mad.lo.u32 %r27, %r41, %r3, %r2;\nmul.wide.u32 %rd4, %r27, 8;\nadd.s64 %rd3, %rd13, %rd4;\nst.relaxed.gpu.global.v2.u32 [%rd3], {%r10, %r36};\n";
  else {
    s += "mad.lo.u32 %r27, %r41, %r3, %r2;\nmul.wide.u32 %rd4, %r27, 4;\nadd.s64 %rd3, %rd13, %rd4;\nst.global.u32 [%rd3], %r10;\n";
    s += "red.release.gpu.global.add.u32 [%rd12], 1;\n";
  }
  if (dep === "one") s += "mul.wide.u32 %rd16, %r2, 4;\nadd.s64 %rd16, %rd16, %rd12;\nred.release.gpu.global.add.u32 [%rd16+16], 1;\n";
  s += `L_r:\nbar.sync 1, ${C};\n`;
  s += "add.u32 %r41, %r41, 1;\nsetp.lt.u32 %p9, %r41, %r20;\n@%p9 bra L_cs;\n";
  // the last block out resets the counts for the next launch
  s += "@!%p0 bra L_x;\natom.acq_rel.gpu.global.add.u32 %r33, [%rd12+4], 1;\nsub.u32 %r34, %r3, 1;\nsetp.eq.u32 %p7, %r33, %r34;\n";
  s += "@!%p7 bra L_x;\nst.relaxed.gpu.global.u32 [%rd12], 0;\nst.relaxed.gpu.global.u32 [%rd12+4], 0;\n";
  if (dep === "ll") s += "st.relaxed.gpu.global.u32 [%rd12+12], %r36;\n";
  s += "mov.u32 %r35, 0;\nL_z:\nmul.wide.u32 %rd17, %r35, 4;\nadd.s64 %rd17, %rd17, %rd12;\nst.relaxed.gpu.global.u32 [%rd17+16], 0;\n";
  s += "add.u32 %r35, %r35, 1;\nsetp.lt.u32 %p11, %r35, %r3;\n@%p11 bra L_z;\nbra L_x;\n";

  // ---- the loader: every piece of every stream in the consumers' order, each into the next free buffer ----
  s += `L_prod:\nsetp.ne.u32 %p2, %r1, ${C};\n@%p2 bra L_x;\n`;
  s += "L_ps:\n" + share + "L_pp:\nsetp.ge.u32 %p6, %r50, %r52;\n@%p6 bra L_pn;\n" + piece;
  s += "xor.b32 %r65, %r55, 1;\n" + wait("%r64", "%r65", "p");
  s += "shl.b32 %r66, %r53, 4;\nmbarrier.arrive.expect_tx.shared::cta.b64 %rd8, [%r56], %r66;\n";
  s += "add.u32 %r67, %r21, %r50;\nmul.wide.u32 %rd9, %r67, 16;\nadd.s64 %rd9, %rd10, %rd9;\n";
  s += "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r57], [%rd9], %r66, [%r56];\n";
  s += "add.u32 %r50, %r50, %r53;\nadd.u32 %r40, %r40, 1;\nbra L_pp;\nL_pn:\nadd.u32 %r41, %r41, 1;\nsetp.lt.u32 %p9, %r41, %r20;\n@%p9 bra L_ps;\n";
  return s + "L_x:\nret;\n}\n";
}
