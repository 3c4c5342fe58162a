// The WebGPU device's pipeline cache: a compiled kernel's variants ("n" as the kernel declares its bindings,
// "rw" or "rw:i,j" with bindings declared read_write where a dispatch reads and writes one buffer), each
// rendered to WGSL and made into a compute pipeline once; kernels that render to the same WGSL (the same op in
// every layer) share one pipeline.
import { KernelError } from "../../kernels/ir.ts";
import type { TargetSet } from "../../kernels/target.ts";
import type { WgslShader } from "../../kernels/render/wgsl.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { Unsupported } from "../errors.ts";
import { B, COMPUTE, type Variant, type WgpuCompiled, type WgpuStats } from "./handles.ts";
import type { WgpuFeatures } from "./target.ts";
import type { GpuErrors } from "./validation.ts";

/** The pipelines of one device, by the WGSL they run. */
export class Pipelines {
  private readonly byCode = new Map<string, Variant>();

  constructor(
    private readonly gpu: GPUDevice,
    private readonly target: TargetSet,
    private readonly features: WgpuFeatures,
    /** Unroll the loops PTX unrolls before rendering (WgpuOptions.unroll). */
    private readonly unroll: boolean,
    private readonly errs: GpuErrors,
    private readonly stats: WgpuStats,
  ) {}

  /** The pipeline of `c` in variant `v`, made the first time (or shared with a kernel of the same WGSL). */
  variant(c: WgpuCompiled, v: string): Variant {
    let x = c.variants.get(v);
    if (x) return x;
    let shader: WgslShader;
    const readWrite = v === "rw" ? true : v.startsWith("rw:") ? v.slice(3).split(",").map(Number) : false;
    try {
      shader = RENDERERS.wgsl.render(c.kernel, this.target.caps, { enableSubgroups: this.features.enableSubgroups, readWrite, unroll: this.unroll });
    } catch (e) {
      if (e instanceof KernelError) throw new Unsupported(`${B}: ${e.message}`);
      throw e;
    }
    const name = c.kernel.name;
    const lim = this.gpu.limits.maxStorageBuffersPerShaderStage;
    if (shader.bindings.length > lim) {
      throw new Unsupported(`${B}: ${name}: ${shader.bindings.length} storage bindings, the adapter allows ${lim} per stage`);
    }
    // Kernels that render to the same WGSL (the same op in every layer) share one pipeline.
    const key = shader.code.slice(shader.code.indexOf("\n", shader.code.indexOf("// kernel ")));
    const same = this.byCode.get(key);
    if (same) {
      c.variants.set(v, same);
      return same;
    }
    this.errs.scoped(`compile ${name}`, () => {
      const module = this.gpu.createShaderModule({ label: name, code: shader.code });
      this.errs.checks.push(module.getCompilationInfo().then((info) => {
        const errs = info.messages.filter((m) => m.type === "error");
        return errs.length ? new Unsupported(`${B}: ${name}: WGSL does not compile: ${errs.map((m) => m.message).join("; ")}`) : undefined;
      }, () => undefined));
      const layout = this.gpu.createBindGroupLayout({
        label: name,
        entries: shader.bindings.map((b) => ({
          binding: b.binding,
          visibility: COMPUTE,
          buffer: { type: b.access === "read" ? "read-only-storage" as const : "storage" as const },
        })),
      });
      const pipeline = this.gpu.createComputePipeline({
        label: name,
        layout: this.gpu.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: shader.entry },
      });
      x = { shader, pipeline, layout };
    });
    this.byCode.set(key, x!);
    this.stats.pipelines++;
    c.variants.set(v, x!);
    return x!;
  }
}
