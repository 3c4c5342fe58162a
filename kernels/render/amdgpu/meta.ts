// What the ROCm device needs to launch one compiled AMDGPU kernel: plain data read back from the code
// object's own metadata (the "amdhsa.kernels" note, through comgr's metadata API), never recomputed by hand.
// The device builds each dispatch's kernarg segment from `args` (kernargSize bytes, kernargAlign aligned) and
// fills the AQL packet from the rest.
//
// Kernel arguments are laid out as on the other targets (see kernels/render/amdgpu/kernel.ts): one 64-bit
// global pointer per binding, in binding order (the binding's address with its byte offset applied), then,
// when the kernel has checks, one more pointing at a host-visible u32 fault word that a failing check stores
// its code to before `s_trap`. Hidden arguments the compiler appends (value kinds starting with "hidden_") are
// listed too; the device zero-fills any it does not know.

/** One argument of the kernarg segment, as the code object's metadata states it. */
export interface AmdKernelArg {
  /** Byte offset in the kernarg segment. */
  offset: number;
  /** Byte size. */
  size: number;
  /** The metadata's .value_kind: "global_buffer" (a binding or the fault word), "by_value", "hidden_..." ... */
  kind: string;
  /** Binding index for a binding's pointer; "fault" for the fault word; undefined for hidden arguments. */
  binding?: number | "fault";
}

/** One kernel of a code object, ready for an AQL kernel-dispatch packet. */
export interface AmdKernelMeta {
  /** The kernel's function name (.name). */
  name: string;
  /** The kernel descriptor symbol (.symbol, "<name>.kd") hsa_executable_get_symbol_by_name looks up. */
  symbol: string;
  /** Bytes of the kernarg segment (.kernarg_segment_size) and its alignment (.kernarg_segment_align). */
  kernargSize: number;
  kernargAlign: number;
  /** Static LDS bytes (.group_segment_fixed_size): the packet's group_segment_size. */
  groupSegmentSize: number;
  /** Scratch bytes per work-item (.private_segment_fixed_size): the packet's private_segment_size. */
  privateSegmentSize: number;
  /** Lanes per wave (.wavefront_size): 64 on gfx90a/gfx942, 32 on gfx1100. */
  wavefrontSize: number;
  /** The workgroup the kernel was compiled for (.reqd_workgroup_size): the packet's workgroup_size_{x,y,z}. */
  workgroupSize: [number, number, number];
  /** Workgroups per dimension (from the kernel IR; grid_size in the packet is this times workgroupSize). */
  grid: [number, number, number];
  /** Registers the kernel uses (.sgpr_count / .vgpr_count), for occupancy reports. */
  sgprCount: number;
  vgprCount: number;
  args: AmdKernelArg[];
}

/** A compiled kernel: the executable code object (ELF, hsa_code_object_reader_create_from_memory) and its meta. */
export interface AmdCodeObject {
  /** The target it was built for ("gfx90a", "gfx942", "gfx1100") and the processor comgr actually compiled. */
  target: string;
  processor: string;
  elf: Uint8Array;
  meta: AmdKernelMeta;
}

/**
 * The kernarg segment of one dispatch: each binding's address (its buffer's address plus the binding's byte
 * offset) and the fault word's address written as u64 at the offsets the metadata gives; everything else
 * (hidden arguments, padding) zero. `into` (kernargSize bytes) is reused when given.
 */
export function packKernargs(meta: AmdKernelMeta, bindings: readonly bigint[], fault = 0n, into?: Uint8Array): Uint8Array {
  const out = into ?? new Uint8Array(meta.kernargSize);
  if (out.byteLength < meta.kernargSize) throw new RangeError(`${meta.name}: kernarg buffer of ${out.byteLength} bytes, needs ${meta.kernargSize}`);
  out.fill(0, 0, meta.kernargSize);
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  let used = 0;
  for (const a of meta.args) {
    if (a.binding === undefined) continue;
    if (a.size !== 8) throw new RangeError(`${meta.name}: argument at ${a.offset} is ${a.size} bytes, not a pointer`);
    if (a.binding === "fault") {
      if (fault === 0n) throw new RangeError(`${meta.name}: the kernel has checks and needs a fault word address`);
      dv.setBigUint64(a.offset, fault, true);
      continue;
    }
    if (a.binding >= bindings.length) throw new RangeError(`${meta.name}: binding ${a.binding} not given (${bindings.length} given)`);
    dv.setBigUint64(a.offset, bindings[a.binding], true);
    used++;
  }
  if (used !== bindings.length) throw new RangeError(`${meta.name}: ${bindings.length} bindings given, the kernel takes ${used}`);
  return out;
}
