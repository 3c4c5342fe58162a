// The renderer registry: one entry per kernel language, each with the one signature
// `render(kernel, caps, opts?)`, the backend whose devices run its output, the file extension of its source,
// and the capabilities of a typical device of its kind (for rendering without one: `poot info --dump-kernels`,
// the render tests). Every device compiles through `RENDERERS[lang].render` with its own caps, so the
// signature is the same for all of them. A new target is its renderer, its backends/ folder, and one line here.
import { type Kernel, KernelError } from "../ir.ts";
import { type Backend, type Caps, JS_CAPS } from "../target.ts";
import { type JsKernel, type JsRenderOptions, renderJs } from "./js.ts";
import { type PtxModule, type PtxOptions, renderPtx } from "./ptx/kernel.ts";
import { type AmdgpuModule, type AmdgpuOptions, renderAmdgpu } from "./amdgpu/kernel.ts";
import { AMD_TARGETS, amdCaps } from "./amdgpu/targets.ts";
import { renderSpirv, type SpirvOptions, type SpirvShader } from "./spirv.ts";
import { renderWgsl, type WgslOptions, type WgslShader } from "./wgsl.ts";

export interface Renderer<O, M> {
  /** The backend whose devices run this language. */
  backend: Backend;
  /** File extension of `source`. */
  ext: string;
  /** A typical device of the kind, for rendering when none is present. */
  caps: Caps;
  /** The kernel in this language for a target with `caps`; options are the renderer's own knobs. */
  render(kernel: Kernel, caps: Caps, opts?: O): M;
  /** What a dump writes: the text (or binary words) of a rendered kernel. */
  source(m: M): string | Uint8Array;
}

const GPU: Caps = {
  subgroups: true, subgroupSize: 32, f16: true, storage16: true, storage8: true, trap: false,
  maxWorkgroupSize: 1024, maxWorkgroupsPerDim: [65535, 65535, 65535], maxSharedBytes: 48 * 1024,
  maxBindingBytes: 2 ** 31, bindingAlign: 256, dispatchGap: true,
};

export const RENDERERS = {
  ptx: {
    backend: "ptx", ext: "ptx",
    caps: { ...GPU, trap: true, dispatchGap: false, maxWorkgroupsPerDim: [2 ** 31 - 1, 65535, 65535] },
    // PTX reads no Caps: the architecture (opts.sm) picks instructions; checks always trap.
    render: (k: Kernel, _caps: Caps, opts: PtxOptions = { sm: 90 }) => renderPtx(k, opts),
    source: (m: PtxModule) => m.ptx,
  } satisfies Renderer<PtxOptions, PtxModule>,
  spirv: {
    backend: "vulkan", ext: "spv", caps: GPU,
    render: (k: Kernel, caps: Caps, opts?: SpirvOptions) => renderSpirv(k, caps, opts),
    source: (m: SpirvShader) => new Uint8Array(m.words.buffer, m.words.byteOffset, m.words.byteLength),
  } satisfies Renderer<SpirvOptions, SpirvShader>,
  wgsl: {
    backend: "wgpu", ext: "wgsl",
    caps: { ...GPU, f16: false, storage16: false, storage8: false, maxWorkgroupSize: 256, maxSharedBytes: 16384, maxBindingBytes: 2 ** 27 },
    render: (k: Kernel, caps: Caps, opts?: Partial<WgslOptions>) => renderWgsl(k, { f16: caps.f16, subgroups: caps.subgroups, dot4: caps.dot4Native, ...opts }),
    source: (m: WgslShader) => m.code,
  } satisfies Renderer<Partial<WgslOptions>, WgslShader>,
  amdgpu: {
    // LLVM IR text; kernels/render/amdgpu/compile.ts turns it into a code object through comgr. The wave size
    // comes from the caps (64 for gfx90a/gfx942, the typical device here; 32 for gfx1100).
    backend: "rocm", ext: "ll", caps: amdCaps(AMD_TARGETS.gfx942),
    render: (k: Kernel, caps: Caps, opts?: Partial<AmdgpuOptions>) => {
      const wave = opts?.wave ?? caps.subgroupSize;
      if (wave !== 32 && wave !== 64) throw new KernelError(`${k.name}: AMDGPU waves are 32 or 64 lanes, not ${wave}`);
      return renderAmdgpu(k, { ...opts, wave });
    },
    source: (m: AmdgpuModule) => m.ll,
  } satisfies Renderer<Partial<AmdgpuOptions>, AmdgpuModule>,
  js: {
    backend: "js", ext: "js", caps: { ...JS_CAPS, subgroupSize: 1 },
    render: (k: Kernel, caps: Caps, opts?: Partial<JsRenderOptions>) => renderJs(k, { subgroupSize: Math.max(1, caps.subgroupSize), ...opts }),
    source: (m: JsKernel) => m.source,
  } satisfies Renderer<Partial<JsRenderOptions>, JsKernel>,
};

export type RenderTarget = keyof typeof RENDERERS;
export const RENDER_TARGETS = Object.keys(RENDERERS) as RenderTarget[];

/** The language a backend's devices run (undefined for a backend without a renderer). */
export function rendererOf(b: Backend): RenderTarget | undefined {
  return RENDER_TARGETS.find((t) => RENDERERS[t].backend === b);
}

/** One kernel rendered for `t` and what a dump of it writes. */
export function renderSource(k: Kernel, t: RenderTarget, caps: Caps = RENDERERS[t].caps): { ext: string; data: string | Uint8Array } {
  const r = RENDERERS[t] as Renderer<unknown, unknown>;
  return { ext: r.ext, data: r.source(r.render(k, caps)) };
}
