// Copies WebGPU's copyBufferToBuffer cannot do: within one buffer (WebGPU refuses src === dst), or at offsets
// and sizes that are not multiples of 4 bytes (an unaligned host write lands through one of these too).
// Kernels in the IR, rendered like any other; their offsets and length come from a small parameter buffer
// [srcByte, dstByte, count] so one pipeline serves every copy.
import { type Kernel, KernelBuilder } from "../../kernels/ir.ts";

const WG = 256;
/** Most workgroups a copy dispatch uses; each invocation strides over the rest (grid-stride loop). */
export const COPY_GROUPS = 1024;

function copyKernel(unit: "u32" | "u8"): Kernel {
  const k = new KernelBuilder(`p_copy_${unit === "u32" ? "words" : "bytes"}`, { workgroup: WG, grid: COPY_GROUPS });
  const src = k.buffer("src", unit, "r");
  const dst = k.buffer("dst", unit, "rw");
  const prm = k.buffer("params", "u32", "r");
  const so = k.let(k.load(prm, 0), "u32", "so");
  const d0 = k.let(k.load(prm, 1), "u32", "do");
  const n = k.let(k.load(prm, 2), "u32", "n");
  const stride = k.let(k.nwg.x.mul(WG), "u32", "st");
  const iters = k.let(n.add(stride).sub(1).div(stride), "u32", "it");
  k.for(0, iters, 1, (j) => {
    const i = k.let(k.gid.x.add(j.mul(stride)), "u32", "i");
    k.if(i.lt(n), () => k.store(dst, d0.add(i), k.load(src, so.add(i))));
  });
  return k.build();
}

/** A copy kernel: whole words when every offset and the length are multiples of 4, else bytes. */
export const COPY_WORDS: Kernel = copyKernel("u32");
export const COPY_BYTES: Kernel = copyKernel("u8");
