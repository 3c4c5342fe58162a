// Kernel IR -> LLVM IR (kernel.ts) -> code object through libamd_comgr (ffi/comgr.ts), with the launch
// description read back from the code object's own metadata (meta.ts). Compiles are cached per (target,
// LLVM text): a plan renders many identical kernels, and the tests compile the same plans for three targets.
//
// comgr's ISA table is fixed when it is built: the comgr 2.4 (ROCm 5.2, LLVM 15) of CI lists neither gfx942
// nor gfx1100. Such a target is compiled by naming a listed ISA and overriding the processor with -mcpu
// (the last -mcpu wins); where LLVM itself does not know the processor (gfx942 before LLVM 17) its stand-in
// of the same generation (gfx940) is compiled instead and `processor` says so.
import type { Kernel } from "../../ir.ts";
import { KernelError } from "../../ir.ts";
import {
  AMD_COMGR_ACTION_CODEGEN_BC_TO_ASSEMBLY,
  AMD_COMGR_ACTION_DISASSEMBLE_EXECUTABLE_TO_SOURCE,
  AMD_COMGR_DATA_KIND_BC,
  AMD_COMGR_DATA_KIND_EXECUTABLE,
  AMD_COMGR_DATA_KIND_SOURCE,
  type Comgr,
  ComgrError,
  type MetadataValue,
  openComgr,
} from "../../../ffi/comgr.ts";
import { LibraryNotFound } from "../../../ffi/lib.ts";
import { type AmdgpuModule, renderAmdgpu } from "./kernel.ts";
import { linkModules } from "./ll.ts";
import type { AmdCodeObject, AmdKernelArg, AmdKernelMeta } from "./meta.ts";
import type { AmdTarget } from "./targets.ts";

/** How comgr is asked to build one target: the ISA name it is given and the options that follow. */
interface Build {
  isa: string;
  options: string[];
  processor: string;
}

const PROBE = `target triple = "amdgcn-amd-amdhsa"\ndefine amdgpu_kernel void @probe() {\n  ret void\n}\n`;
const ISA = (p: string) => `amdgcn-amd-amdhsa--${p}`;
const OPT = ["-O3"];

let shared: Comgr | undefined | string;
/** The process's comgr, or the reason it cannot be loaded (a message naming the library). */
export function comgr(): Comgr | string {
  if (shared === undefined) {
    try {
      shared = openComgr();
    } catch (e) {
      if (!(e instanceof LibraryNotFound)) throw e;
      shared = e.message;
    }
  }
  return shared;
}

export class AmdCompiler {
  private readonly cache = new Map<string, AmdCodeObject>();
  private readonly builds = new Map<string, Build>();
  private isas?: Set<string>;
  /** Compiles run and cache hits, for tests and the bench. */
  readonly stats = { compiles: 0, hits: 0, ms: 0 };

  constructor(readonly cg: Comgr) {}

  /** The kernel rendered and compiled for `t`. Throws KernelError (what the IR cannot express) or ComgrError. */
  compile(k: Kernel, t: AmdTarget): AmdCodeObject & { module: AmdgpuModule } {
    const module = renderAmdgpu(k, { wave: t.wave });
    return { ...this.compileModule(module, k, t), module };
  }

  compileModule(m: AmdgpuModule, k: Kernel, t: AmdTarget): AmdCodeObject {
    return this.compileMany([{ module: m, kernel: k }], t)[0];
  }

  /**
   * Many kernels for one target: the uncached ones linked into modules of up to `batch` kernels and compiled
   * together (a comgr compile costs about the same for one kernel or fifty). A kernel compiled in a batch
   * shares its `elf` with the batch's other kernels; its `meta.symbol` names it in there.
   */
  compileMany(items: { module: AmdgpuModule; kernel: Kernel }[], t: AmdTarget, batch = 48): AmdCodeObject[] {
    const key = (m: AmdgpuModule) => `${t.name}\n${m.ll}`;
    const todo: { module: AmdgpuModule; kernel: Kernel }[] = [];
    const queued = new Set<string>();
    for (const it of items) {
      const kk = key(it.module);
      if (this.cache.has(kk)) this.stats.hits++;
      else if (!queued.has(kk)) {
        queued.add(kk);
        todo.push(it);
      }
    }
    while (todo.length) {
      // entry names must differ within one module
      const names = new Set<string>(), group: typeof todo = [], rest: typeof todo = [];
      for (const it of todo) {
        if (group.length < batch && !names.has(it.module.entry)) {
          names.add(it.module.entry);
          group.push(it);
        } else rest.push(it);
      }
      todo.splice(0, todo.length, ...rest);
      let cos: AmdCodeObject[];
      try {
        cos = this.compileGroup(group, t);
      } catch (e) {
        if (group.length === 1) throw e;
        // one bad kernel fails the module: compile them one by one, so the error names the kernel
        cos = group.map((g) => this.compileGroup([g], t)[0]);
      }
      cos.forEach((co, i) => this.cache.set(key(group[i].module), co));
    }
    return items.map((it) => this.cache.get(key(it.module))!);
  }

  private compileGroup(group: { module: AmdgpuModule; kernel: Kernel }[], t: AmdTarget): AmdCodeObject[] {
    const t0 = performance.now();
    const b = this.build(t);
    const text = group.length === 1 ? group[0].module.ll : linkModules(group.map((g) => g.module.parts));
    const { elf, out } = this.cg.compileIr(text, b.isa, b.options, (exe) => this.cg.dataMetadata(exe, wanted));
    const kernels = out && typeof out === "object" && !Array.isArray(out) ? out["amdhsa.kernels"] : undefined;
    if (!Array.isArray(kernels) || kernels.length !== group.length) {
      throw new KernelError(`${t.name}: code object describes ${Array.isArray(kernels) ? kernels.length : "no"} kernels, compiled ${group.length}`);
    }
    this.stats.compiles++;
    this.stats.ms += performance.now() - t0;
    return group.map(({ module: m, kernel: k }) => {
      const km = kernels.find((x) => (x as { [k: string]: MetadataValue })[".name"] === m.entry);
      if (!km) throw new KernelError(`${k.name} (amdgpu): not in the code object's metadata`);
      return { target: t.name, processor: b.processor, elf, meta: kernelMeta(km as { [k: string]: MetadataValue }, m, k) };
    });
  }

  /** Assembly of a compiled kernel: comgr's disassembly of the code object (its own codegen for a processor
   * the library's ISA table lacks, which the disassembler then cannot name). */
  assembly(co: AmdCodeObject, m: AmdgpuModule, t: AmdTarget): string {
    const b = this.build(t);
    if (b.options.length === OPT.length) {
      return this.cg.actionText(AMD_COMGR_ACTION_DISASSEMBLE_EXECUTABLE_TO_SOURCE, AMD_COMGR_DATA_KIND_EXECUTABLE, co.elf, AMD_COMGR_DATA_KIND_SOURCE, b.isa);
    }
    return this.cg.actionText(AMD_COMGR_ACTION_CODEGEN_BC_TO_ASSEMBLY, AMD_COMGR_DATA_KIND_BC, m.ll, AMD_COMGR_DATA_KIND_SOURCE, b.isa, b.options);
  }

  /**
   * Decides once per target how comgr builds it, probing with an empty kernel: LLVM 15 given a processor it
   * does not know may still reach codegen as a generic one and abort the process on the first wave intrinsic
   * ("Cannot select"), so a candidate is only ever tried on text without any.
   */
  private build(t: AmdTarget): Build {
    const got = this.builds.get(t.name);
    if (got) return got;
    this.isas ??= new Set(this.cg.isaNames());
    const candidates: Build[] = [];
    if (this.isas.has(ISA(t.name))) candidates.push({ isa: ISA(t.name), options: OPT, processor: t.name });
    else {
      const any = [...this.isas].find((n) => /gfx9|gfx10/.test(n)) ?? [...this.isas][0];
      if (!any) throw new KernelError(`comgr lists no AMDGPU ISA`);
      candidates.push({ isa: any, options: [...OPT, `-mcpu=${t.name}`], processor: t.name });
      if (t.standIn) candidates.push({ isa: any, options: [...OPT, `-mcpu=${t.standIn}`], processor: t.standIn });
    }
    let last: unknown;
    for (const b of candidates) {
      try {
        this.cg.compileIr(PROBE, b.isa, b.options, () => 0);
        this.builds.set(t.name, b);
        return b;
      } catch (e) {
        if (!(e instanceof ComgrError) || !/invalid target ID|unknown target CPU|not a recognized processor/i.test(e.message)) throw e;
        last = e;
      }
    }
    throw new KernelError(`comgr cannot build ${t.name}${t.standIn ? ` nor its stand-in ${t.standIn}` : ""}: ${String(last)}`);
  }
}

/** The metadata keys read (comgr maps are read by lookup; see Comgr.dataMetadata). */
function wanted(path: string): readonly string[] {
  if (path === "") return ["amdhsa.version", "amdhsa.kernels"];
  if (path === "amdhsa.kernels[]") {
    return [".name", ".symbol", ".kernarg_segment_size", ".kernarg_segment_align", ".group_segment_fixed_size",
      ".private_segment_fixed_size", ".wavefront_size", ".reqd_workgroup_size", ".sgpr_count", ".vgpr_count", ".args"];
  }
  if (path === "amdhsa.kernels[]/.args[]") return [".offset", ".size", ".value_kind", ".address_space", ".name"];
  return [];
}

function num(m: { [k: string]: MetadataValue }, key: string, what: string): number {
  const v = m[key];
  const n = typeof v === "string" ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < 0) throw new KernelError(`${what}: code-object metadata ${key} is ${JSON.stringify(v)}`);
  return n;
}

/** One kernel's launch description from the executable's metadata, checked against what was rendered. */
function kernelMeta(km: { [k: string]: MetadataValue }, m: AmdgpuModule, k: Kernel): AmdKernelMeta {
  const what = `${k.name} (amdgpu)`;
  const wg = km[".reqd_workgroup_size"];
  const args = km[".args"];
  if (!Array.isArray(args)) throw new KernelError(`${what}: code-object metadata has no .args`);
  let explicit = 0;
  const out: AmdKernelArg[] = args.map((a) => {
    const am = a as { [k: string]: MetadataValue };
    const kind = String(am[".value_kind"]);
    const arg: AmdKernelArg = { offset: num(am, ".offset", what), size: num(am, ".size", what), kind };
    if (!kind.startsWith("hidden_")) {
      arg.binding = explicit < k.buffers.length ? explicit : "fault";
      explicit++;
    }
    return arg;
  });
  if (explicit !== m.params) throw new KernelError(`${what}: code object has ${explicit} arguments, rendered ${m.params}`);
  return {
    name: String(km[".name"]),
    symbol: String(km[".symbol"]),
    kernargSize: num(km, ".kernarg_segment_size", what),
    kernargAlign: num(km, ".kernarg_segment_align", what),
    groupSegmentSize: num(km, ".group_segment_fixed_size", what),
    privateSegmentSize: num(km, ".private_segment_fixed_size", what),
    wavefrontSize: num(km, ".wavefront_size", what),
    workgroupSize: Array.isArray(wg) && wg.length === 3 ? wg.map(Number) as [number, number, number] : [...k.workgroup],
    grid: [...k.grid],
    sgprCount: num(km, ".sgpr_count", what),
    vgprCount: num(km, ".vgpr_count", what),
    args: out,
  };
}
