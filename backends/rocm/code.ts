// Code objects on the ROCm device: a kernel compiled for the agent's target (the amdgpu renderer, render.ts),
// checked against what the device will pass (wave size, workgroup, LDS, the kernarg layout of kernarg.ts),
// loaded through a code object reader into a frozen executable of the agent's profile; the kernel
// descriptor symbol gives the kernel object and the kernarg/group/private sizes, which must equal the
// metadata's. Identical code objects share one executable; each kernel with checks gets a fault word.
import type { Hsa } from "../../ffi/hsa.ts";
import type { Kernel } from "../../kernels/ir.ts";
import type { CompiledKernel } from "../device.ts";
import { ExecError, Unsupported } from "../errors.ts";
import type { RocmAgent } from "./agent.ts";
import { type AmdgpuCode, kernargLayout, type KernargLayout } from "./kernarg.ts";
import type { AmdgpuCompiler } from "./render.ts";

/** A kernel's fault word: fine-grained host memory the kernel stores its failing check's code to. */
export interface FaultWord {
  words: Uint32Array;
  index: number;
  ptr: bigint;
}

export class RocmCompiled implements CompiledKernel {
  constructor(
    readonly kernel: Kernel,
    readonly kernelObject: bigint,
    readonly groupBytes: number,
    readonly privateBytes: number,
    readonly layout: KernargLayout,
    readonly fault?: FaultWord,
  ) {}
}

interface Loaded {
  executable: bigint;
  reader: bigint;
  kernel: RocmCompiled;
}

export class CodeObjects {
  private readonly byKernel = new WeakMap<Kernel, RocmCompiled>();
  private readonly executables = new Map<string, Loaded>();

  constructor(
    private readonly hsa: Hsa,
    private readonly agent: RocmAgent,
    private readonly compiler: AmdgpuCompiler,
    private readonly faultWord: () => FaultWord,
  ) {}

  owns(c: RocmCompiled): boolean {
    return this.byKernel.get(c.kernel) === c;
  }
  /** Every loaded kernel (where a fault word may be set). */
  loaded(): RocmCompiled[] {
    return [...this.executables.values()].map((e) => e.kernel);
  }

  /** The kernel compiled and loaded; `guard` runs the runtime calls (a failure there poisons the device). */
  compile(kernel: Kernel, guard: <T>(what: string, f: () => T) => T): RocmCompiled {
    const known = this.byKernel.get(kernel);
    if (known) return known;
    const caps = this.agent.caps, gfx = this.agent.gfx;
    if (kernel.uses.mma) throw new Unsupported(`rocm: ${kernel.name} needs warp MMA tiles`);
    const wg = kernel.workgroup[0] * kernel.workgroup[1] * kernel.workgroup[2];
    if (wg > caps.maxWorkgroupSize) throw new Unsupported(`rocm: ${kernel.name}: workgroup of ${wg} exceeds ${caps.maxWorkgroupSize}`);
    let code: AmdgpuCode;
    try {
      code = this.compiler(kernel, this.agent);
    } catch (e) {
      if (e instanceof ExecError) throw e;
      throw new Unsupported(`rocm: compiling ${kernel.name} for ${gfx} failed: ${(e as Error).message}`);
    }
    const m = code.meta;
    if (m.wavefrontSize !== caps.subgroupSize) {
      throw new Unsupported(`rocm: ${kernel.name}: code object is wave${m.wavefrontSize}, ${gfx} runs wave${caps.subgroupSize}`);
    }
    if (m.workgroupSize.some((n) => n !== 0) && m.workgroupSize.some((n, i) => n !== kernel.workgroup[i])) {
      throw new Unsupported(`rocm: ${kernel.name}: code object fixes workgroup ${m.workgroupSize.join("x")}, the kernel is ${kernel.workgroup.join("x")}`);
    }
    if (m.groupSegmentSize > caps.maxSharedBytes) {
      throw new Unsupported(`rocm: ${kernel.name} needs ${m.groupSegmentSize} bytes of LDS (${caps.maxSharedBytes} available)`);
    }
    const pointers = m.args.filter((a) => !a.kind.startsWith("hidden_")).length;
    const layout = kernargLayout(m, kernel.buffers.length, m.args.some((a) => a.binding === "fault") || pointers === kernel.buffers.length + 1);
    const key = `${m.symbol}:${hashBytes(code.elf)}`;
    let shared = this.executables.get(key);
    if (!shared) {
      shared = guard(`load ${kernel.name}`, () => this.load(kernel, code, layout));
      this.executables.set(key, shared);
    }
    const k = shared.kernel;
    const out = k.kernel === kernel ? k : new RocmCompiled(kernel, k.kernelObject, k.groupBytes, k.privateBytes, k.layout, k.fault);
    this.byKernel.set(kernel, out);
    return out;
  }

  /** Loads a code object into a frozen executable and reads its kernel's dispatch sizes. */
  private load(kernel: Kernel, code: AmdgpuCode, layout: KernargLayout): Loaded {
    const hsa = this.hsa, gpu = this.agent.gpu, m = code.meta;
    const reader = hsa.codeObjectReaderFromMemory(code.elf);
    let executable = 0n;
    try {
      executable = hsa.executableCreate(this.agent.profile);
      hsa.executableLoadAgentCodeObject(executable, gpu, reader);
      hsa.executableFreeze(executable);
      const info = hsa.kernelInfo(hsa.executableSymbol(executable, m.symbol, gpu));
      const differ = [
        ["kernarg size", m.kernargSize, info.kernargSize], ["group segment", m.groupSegmentSize, info.groupSize],
        ["private segment", m.privateSegmentSize, info.privateSize],
      ].filter(([, a, b]) => a !== b);
      if (differ.length) {
        throw new Unsupported(`rocm: ${kernel.name}: the metadata and the loaded kernel disagree: ${differ.map(([w, a, b]) => `${w} ${a} vs ${b}`).join(", ")}`);
      }
      const fault = layout.pointers.length > kernel.buffers.length ? this.faultWord() : undefined;
      return { executable, reader, kernel: new RocmCompiled(kernel, info.kernelObject, info.groupSize, info.privateSize, layout, fault) };
    } catch (e) {
      if (executable) hsa.executableDestroy(executable);
      hsa.codeObjectReaderDestroy(reader);
      throw e;
    }
  }

  /** Destroys every executable and reader (the queue must be idle). */
  release(): void {
    for (const e of this.executables.values()) {
      this.hsa.executableDestroy(e.executable);
      this.hsa.codeObjectReaderDestroy(e.reader);
    }
    this.executables.clear();
  }
}

/** FNV-1a of a code object: identical objects share one executable. */
function hashBytes(b: Uint8Array): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) h = Math.imul(h ^ b[i], 0x01000193);
  return `${(h >>> 0).toString(16)}:${b.length}`;
}
