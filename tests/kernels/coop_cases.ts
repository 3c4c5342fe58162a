// Shared pieces of the cooperative-matrix tests (coop_matmul.test.ts, coop_flash.test.ts): the caps the JS device
// emulates the matrices with, the devices a case runs on (JS at several subgroup sizes, then a Vulkan device that
// has them, skipped saying why where none does), and a tiny Llama step to lower for such caps.
import { JsDevice } from "../../backends/js/device.ts";
import { openVulkanDevice, type VulkanDevice } from "../../backends/vulkan/mod.ts";
import type { Device } from "../../backends/device.ts";
import { JS_CAPS, type Caps, type TargetSet } from "../../kernels/target.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { randomLlama, TINY_LLAMA } from "../ptx/model.ts";
import { bytes, floats, type Rng } from "./data.ts";
import { type BlockDType, dequantize } from "../../graph/dtype.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";

/** JS caps with cooperative matrices of `coop`'s types, `sg`-lane subgroups and Vulkan's 48 KiB of shared memory. */
export const emulatedCoop = (sg: number, coop: Caps["coop"] = { bf16: true, f16: false }): Caps => ({
  ...JS_CAPS, subgroups: true, subgroupSize: sg, maxWorkgroupSize: 1024, maxSharedBytes: 48 * 1024, coop, f16: true,
});

/** A raw-Vulkan device (with bf16 cooperative matrices where `need` says so, any where "coop"), or why not. */
export function openVulkanWith(need: "bf16" | "coop" | "any"): VulkanDevice | string {
  try {
    const v = openVulkanDevice();
    if (need === "bf16" && !v.target.caps.coop?.bf16) return `${v.target.device} has no bf16 cooperative matrices`;
    if (need === "coop" && !v.target.caps.coop) return `${v.target.device} has no cooperative matrices`;
    return v;
  } catch (e) {
    return `no usable Vulkan device: ${(e as Error).message}`;
  }
}

/** [label, device, its caps, skip reason]: a JS device per emulated caps, then `vulkan`. */
export type CoopDevice = [string, () => Device, Caps | undefined, string | false];
export function coopDevices(js: [string, Caps][], vulkan: VulkanDevice | string): CoopDevice[] {
  return [
    ...js.map(([label, caps]): CoopDevice => [label, () => new JsDevice({ debug: true, caps }), caps, false]),
    ["vulkan", () => vulkan as VulkanDevice, typeof vulkan === "string" ? undefined : vulkan.target.caps, typeof vulkan === "string" ? vulkan : false],
  ];
}

/** A CPU target with these caps, for compileGraph. */
export const jsTarget = (caps: Caps): TargetSet => ({ backend: "js", device: "cpu", caps, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 });

/** A `rows`-row step of the tiny Llama (bf16 matrices) with its weights, logits of every row out. */
export function tinyLlamaStep(rows: number) {
  const { store, map, dtypeOf } = randomLlama(TINY_LLAMA, 11, true);
  const { tracer, logits } = traceLlama(TINY_LLAMA, { rows, cap: 64 }, { dtypeOf });
  tracer.output("logits", logits);
  return { store, map, graph: tracer.build() };
}

/** The kernel names of tinyLlamaStep(rows) lowered for a CPU target with these caps. */
export function tinyLlamaKernels(caps: Caps, rows = 20): string[] {
  return compileGraph(tinyLlamaStep(rows).graph, jsTarget(caps)).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
}

/** A matmul case's W [n, k]: bf16 values, or ggml's quantization of U(-1, 1) to `w` (values: its exact dequantization). */
export function caseWeights(rng: Rng, w: BlockDType | undefined, n: number, k: number): { bytes: Uint8Array; values: Float64Array } {
  if (!w) return floats(rng, "bf16", n * k);
  const blocks = quantizeBlocks(w, rng.f32(n * k, -1, 1));
  return { bytes: bytes(blocks), values: Float64Array.from(dequantize(w, blocks, n * k)) };
}

/** A matmul case's inputs after x and W: bias [n] and residual [batch, n] where asked, then y filled with NaN. */
export function caseRest(rng: Rng, s: { n: number; batch: number; bias?: boolean; residual?: boolean }): Uint8Array[] {
  return [
    ...(s.bias ? [bytes(rng.f32(s.n))] : []),
    ...(s.residual ? [bytes(rng.f32(s.batch * s.n))] : []),
    bytes(new Float32Array(s.batch * s.n).fill(NaN)),
  ];
}
