// Tensor parallelism on NVIDIA GPUs (one CUDA context and stream per GPU, backends/group.ts with PtxDevices;
// the NCCL device path where libnccl opens, else the host path): the llama and qwen2 fixtures at tp 2 (and 4
// with four GPUs) within the unsharded oracle's tier-2 bound, and stories260K's greedy tokens through
// `open({ backend: "ptx", tp })` equal llama2.c's. Skips (saying why) without libcuda or with fewer GPUs than a
// size needs: every machine but nvidia-h200-x2/x4. NOT RUN YET (tests/tp/nccl.test.ts holds the device path's
// one-GPU checks, which have run).
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import { openRankGroup } from "../../backends/group.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { open } from "../../llm/open.ts";
import { checkGroup, gpuCount } from "./helpers.ts";

const gpus = gpuCount();
const skipFor = (tp: number) => typeof gpus === "string" ? gpus : gpus < tp ? `tp ${tp} needs ${tp} GPUs, this machine has ${gpus}` : false;

for (const tp of [2, 4]) {
  for (const family of ["llama", "qwen2"]) {
    test(`${family} on ${tp} GPUs (ptx) equals the unsharded oracle within tier 2`, { skip: skipFor(tp), timeout: 300_000 }, async () => {
      await checkGroup(family, [tp], (_n, plan) => openRankGroup("ptx", plan, { compile: compileGraph }));
    });
  }
  test(`stories260K at tp ${tp} on ptx: greedy tokens equal llama2.c's`, { skip: skipFor(tp), timeout: 300_000 }, async () => {
    const ref = JSON.parse(readFileSync(new URL("../../models/stories260K/reference_greedy.json", import.meta.url), "utf8")) as {
      cases: { prompt_ids: number[]; steps: number; generated_ids: number[] }[];
    };
    const d = await open({ model: fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)), backend: "ptx", tp, ctx: 256 });
    try {
      for (const c of ref.cases) {
        const r = await d.generate(c.prompt_ids, { maxTokens: c.steps - c.prompt_ids.length + 1 });
        assert.deepEqual(r.generatedIds, c.generated_ids);
      }
    } finally {
      await d.close();
    }
  });
}
