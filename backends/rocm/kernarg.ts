// What the ROCm device needs from an AMDGPU code object, and the kernarg segment it builds from that.
//
// The launch metadata is the amdgpu renderer's (kernels/render/amdgpu/meta.ts): the device reads the subset
// below (Pick), so a stand-in compiler in the tests need not invent register counts.
//
// Kernel arguments are laid out as on the other targets: one global pointer per kernel buffer in order, then
// the fault word's pointer when the kernel has checks. LLVM appends hidden (implicit) arguments; the device
// fills the ones a dispatch defines (block counts, group sizes, remainders, grid dims) and zeroes the rest
// (offsets, printf/hostcall/heap pointers the renderer's kernels never use).
import type { AmdKernelArg, AmdKernelMeta } from "../../kernels/render/amdgpu/meta.ts";
import { Unsupported } from "../errors.ts";

/** One argument of the kernarg segment, from the code object's metadata (.args). */
export type AmdgpuArg = AmdKernelArg;

/** One kernel of a code object: what the device reads of the renderer's launch metadata. */
export type AmdgpuKernelMeta = Pick<
  AmdKernelMeta,
  "name" | "symbol" | "kernargSize" | "kernargAlign" | "groupSegmentSize" | "privateSegmentSize" | "wavefrontSize" | "workgroupSize" | "args"
>;

/** A kernel compiled for one AMDGPU target: its code object (ELF) and that object's metadata. */
export interface AmdgpuCode {
  elf: Uint8Array;
  meta: AmdgpuKernelMeta;
}

const POINTER_KINDS = new Set(["global_buffer"]);

/** Where each kernarg value goes: pointer args by position, hidden ones by what fills them. */
export interface KernargLayout {
  bytes: number;
  align: number;
  /** Offsets of the pointer arguments: the kernel's buffers in order, then the fault word (if any). */
  pointers: number[];
  hidden: { offset: number; size: number; kind: string }[];
}

/**
 * Checks a kernel's metadata against what the device will pass (`buffers` pointers, plus the fault word when
 * `fault`) and returns where each value goes. Throws Unsupported naming the mismatch.
 */
export function kernargLayout(meta: AmdgpuKernelMeta, buffers: number, fault: boolean): KernargLayout {
  const pointers: number[] = [];
  const hidden: KernargLayout["hidden"] = [];
  const args = meta.args.every((a) => a.binding === undefined) ? meta.args : [...meta.args].sort((a, b) => order(a, buffers) - order(b, buffers));
  for (const a of args) {
    if (!(Number.isInteger(a.offset) && a.offset >= 0 && Number.isInteger(a.size) && a.size > 0 && a.offset + a.size <= meta.kernargSize)) {
      throw new Unsupported(`rocm: ${meta.name}: kernel argument ${a.kind} at ${a.offset}+${a.size} is outside the ${meta.kernargSize}-byte kernarg segment`);
    }
    if (POINTER_KINDS.has(a.kind)) {
      if (a.size !== 8 || a.offset % 8 !== 0) throw new Unsupported(`rocm: ${meta.name}: pointer argument at ${a.offset} is ${a.size} bytes`);
      pointers.push(a.offset);
    } else if (a.kind.startsWith("hidden_")) hidden.push(a);
    else throw new Unsupported(`rocm: ${meta.name}: kernel argument kind ${a.kind} is not one the device passes`);
  }
  const named = args.filter((a) => a.binding !== undefined).map((a) => a.binding);
  const expect = [...Array.from({ length: buffers }, (_, i) => i), ...(fault ? ["fault"] : [])];
  if (named.length && named.join() !== expect.join()) {
    throw new Unsupported(`rocm: ${meta.name}: code object's pointer arguments are [${named.join(", ")}], the device passes [${expect.join(", ")}]`);
  }
  const want = buffers + (fault ? 1 : 0);
  if (pointers.length !== want) {
    throw new Unsupported(`rocm: ${meta.name}: code object takes ${pointers.length} pointer arguments, the device passes ${want} (${buffers} buffers${fault ? " + fault word" : ""})`);
  }
  const align = Math.max(16, meta.kernargAlign);
  if ((align & (align - 1)) !== 0) throw new Unsupported(`rocm: ${meta.name}: kernarg alignment ${meta.kernargAlign}`);
  return { bytes: meta.kernargSize, align, pointers, hidden };
}

/** Sort key of an argument: bindings in order, the fault word after them, hidden ones last. */
function order(a: AmdgpuArg, buffers: number): number {
  return a.binding === "fault" ? buffers : typeof a.binding === "number" ? a.binding : buffers + 1 + a.offset / 2 ** 20;
}

/**
 * Writes one dispatch's kernarg segment into `out` (at least layout.bytes, zeroed by the caller):
 * `ptrs` in pointer order, hidden arguments from the grid (workgroups per dimension) and workgroup size.
 */
export function writeKernargs(out: DataView, layout: KernargLayout, ptrs: readonly bigint[], grid: readonly number[], workgroup: readonly number[]): void {
  layout.pointers.forEach((off, i) => out.setBigUint64(off, ptrs[i], true));
  const dims = grid[2] > 1 || workgroup[2] > 1 ? 3 : grid[1] > 1 || workgroup[1] > 1 ? 2 : 1;
  for (const h of layout.hidden) {
    const axis = "xyz".indexOf(h.kind.slice(-1));
    const v = h.kind.startsWith("hidden_block_count_") ? grid[axis]
      : h.kind.startsWith("hidden_group_size_") ? workgroup[axis]
      : h.kind === "hidden_grid_dims" ? dims
      : 0; // remainders (grids are whole workgroups), global offsets, unused runtime pointers
    if (h.size === 2) out.setUint16(h.offset, v, true);
    else if (h.size === 4) out.setUint32(h.offset, v, true);
    else if (h.size === 8) out.setBigUint64(h.offset, BigInt(v), true);
    else if (v !== 0) throw new Unsupported(`rocm: hidden argument ${h.kind} of ${h.size} bytes`);
  }
}
