// Tier 2 for tensor parallelism on the CPU oracle: each family's graph, sharded for tp = 2 and 4
// (graph/passes/tp.ts) and evaluated as a group of ranks (graph/stages.ts evalGroup: every rank's shard,
// collectives combined between them), equals the unsharded oracle within its tier-2 bound on every element of
// the logits and of every layer's K/V State (the ranks' parts joined), over a 5-row prefill and three decodes.
// The transformers fixtures cover each family's quirks: qwen2's q/k/v biases and tied head, qwen3's q/k norms,
// gemma2's soft-capping and post-norms, gemma3's sliding window and local rope, phi3's fused qkv file layout.
// With 2 K/V heads, tp 4 replicates each K/V head on two ranks (llm/tp.ts), and the replicas must agree bit for bit.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Storage } from "../../graph/dtype.ts";
import { constsFromStore } from "../../graph/eval.ts";
import { shardGraph } from "../../graph/passes/tp.ts";
import { rankWeights } from "../../graph/shard.ts";
import { evalGroup } from "../../graph/stages.ts";
import { validate } from "../../graph/validate.ts";
import { tpPlan } from "../../llm/tp.ts";
import { FAMILY_DIRS } from "../families/fixtures.ts";
import { assertStep, fixture, joinState, reference, STEPS, stepGraph } from "./helpers.ts";

for (const family of FAMILY_DIRS) {
  test(`${family}: sharded graphs at tp 2 and 4 equal the unsharded oracle within tier 2 (logits and K/V State)`, { timeout: 120_000 }, async () => {
    const m = fixture(family);
    try {
      const graphs = STEPS.map((s) => stepGraph(m, s.rows, 16));
      const ref = reference(m, graphs);
      for (const tp of [2, 4]) {
        const plan = tpPlan(m.config, tp);
        const sharded = graphs.map((g) => validate(shardGraph(g, plan)));
        // Megatron's count: one all_reduce after o and one after down per layer, one all_gather of the logits.
        const count = (op: string) => sharded[0].nodes.filter((n) => n.op === op).length;
        assert.equal(count("all_reduce"), 2 * m.config.layers, `tp ${tp}: all_reduce count`);
        assert.equal(count("all_gather"), 1, `tp ${tp}: all_gather count`);
        const consts = Array.from({ length: tp }, (_, r) => {
          const w = rankWeights(m.store, m.map, plan.roles, r, tp);
          return constsFromStore(w.store, w.map);
        });
        let states: Record<string, Storage>[] = Array.from({ length: tp }, () => ({}));
        for (let i = 0; i < STEPS.length; i++) {
          const s = STEPS[i];
          const slots = { token: Int32Array.from(s.tokens), pos: new Int32Array([s.pos]) };
          const res = await evalGroup(sharded[i], tp, (r) => ({ consts: consts[r], slots, state: states[r] }));
          states = res.map((x) => x.state);
          for (let r = 1; r < tp; r++) assert.deepEqual(res[r].output.logits, res[0].output.logits, "every rank sees the same whole logits");
          const joined: Record<string, Storage> = {};
          for (const [name, decl] of Object.entries(sharded[i].states)) {
            const whole = graphs[i].states[name].shape;
            const axis = decl.shape.findIndex((d, k) => d !== whole[k]);
            assert.ok(axis >= 0, `${name} is split`);
            joined[name] = joinState(name, states.map((st) => st[name]), decl.shape, axis, whole[axis] / decl.shape[axis]);
          }
          assertStep(`${family} tp ${tp} step ${i}`, res[0].output.logits, joined, ref[i]);
        }
      }
    } finally {
      m.close();
    }
  });
}
