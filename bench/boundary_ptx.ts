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
    let s = "mov.u32 %r10, %r7;\n";
    for (const o of [16, 8, 4, 2, 1]) s += `shfl.sync.bfly.b32 %r11, %r10, ${o}, 31, -1;\nadd.u32 %r10, %r10, %r11;\n`;
    s += `and.b32 %r12, %r1, 31;\nsetp.eq.u32 %p3, %r12, 0;\nshr.u32 %r13, %r1, 5;\nmov.u32 %r14, red;\nmad.lo.u32 %r15, %r13, 4, %r14;\n@%p3 st.shared.u32 [%r15], %r10;\nbar.sync 0;\n`;
    s += `@!%p0 bra L_r${tag};\nmov.u32 %r10, 0;\n`;
    for (let i = 0; i < T / 32; i++) s += `ld.shared.u32 %r11, [%r14+${4 * i}];\nadd.u32 %r10, %r10, %r11;\n`;
    return s + `st.global.u32 [%rd3], %r10;\nL_r${tag}:\nbar.sync 0;\n`;
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
