// The copy kernels of the ROCm device. AQL has no copy packet (copies are the SDMA engines' or blit
// kernels' work), so buffer-to-buffer steps and host-to-device writes (from the staging memory, which the GPU
// reads directly) are dispatches of one of two kernels, ordered in the queue like every other step. Their
// length is a word the device writes beside the kernel arguments, so two compiled kernels serve every size.
import { type Kernel, KernelBuilder } from "../../kernels/ir.ts";

/** Workgroups and work-items of a copy dispatch: a grid-stride loop over the elements. */
export const COPY_WORKGROUP = 256;
export const COPY_GROUPS = 1024;

/** Bindings: dst (w), src (r), n u32[1] (r): copies n elements of `elem` (u32 words, or u8 bytes). */
export function copyKernel(elem: "u32" | "u8"): Kernel {
  const b = new KernelBuilder(`rocm_copy_${elem}`, { workgroup: COPY_WORKGROUP, grid: COPY_GROUPS });
  const dst = b.buffer("dst", elem, "w"), src = b.buffer("src", elem, "r"), len = b.buffer("n", "u32", "r");
  const n = b.let(b.load(len, 0), "u32", "n");
  b.for(b.gid.x, n, COPY_WORKGROUP * COPY_GROUPS, (i) => b.store(dst, i, b.load(src, i)));
  return b.build();
}
