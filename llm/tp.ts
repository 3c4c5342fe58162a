// The tensor-parallel plan of a decoder family (Megatron-LM's split), from its config: which weight roles are
// split how over `tp` ranks. graph/passes/tp.ts shards the family's graph by it, graph/shard.ts slices each
// rank's weights by it. Every decoder family here (llama, mistral, qwen2/3, gemma 2/3, phi3) names its roles the
// same way, so one plan serves them all.
//
//   column-parallel (rows split, axis 0): attn.q, attn.k, attn.v (+ biases), ffn.gate, ffn.up, output
//   row-parallel    (columns split, axis 1): attn.o, ffn.down — each followed by one all_reduce
//   K/V heads: split tp ways when tp divides them; when kv_heads < tp and divides tp, each head is replicated
//   on tp/kv_heads ranks (vLLM's choice: K/V memory per rank stays one head, no error for Llama-3-70B's 8 heads
//   at tp 16); anything else is refused.
//   The head: split over the vocab when tp divides it, then one all_gather of the logits so the sampler sees
//   whole rows; a tied embedding is also kept whole for the token lookup (vocab·dim more per rank).
//   The token embedding itself is replicated (a gather needs no collective).
import type { ShardPlan } from "../graph/shard.ts";
import type { TpPlan } from "../graph/passes/tp.ts";
import { InvalidArgumentError } from "./errors.ts";
import type { ModelConfig } from "./families/family.ts";

/** A group size that does not fit the model: names the dimension that does not divide. */
export class TpError extends InvalidArgumentError {
  /** Builds the error for argument `tp` and its one-line message. */
  constructor(problem: string) {
    super("tp", problem);
    this.name = "TpError";
  }
}

/**
 * The plan for `tp` ranks, or a TpError naming the dimension that does not split. tp 1: nothing split, unless
 * `collectives` asks for the sharded graph of a group of one (every split one way, every collective over one
 * rank: the NCCL path checked on one GPU).
 */
export function tpPlan(c: ModelConfig, tp: number, opts: { collectives?: boolean } = {}): TpPlan {
  if (!Number.isInteger(tp) || tp < 1) throw new TpError(`${String(tp)} is not a positive integer`);
  if (tp === 1 && !opts.collectives) return { tp, roles: {} };
  if (c.encoder) throw new TpError("tensor parallelism is for decoder models; this is an encoder");
  if (c.heads % tp !== 0) throw new TpError(`${c.heads} attention heads do not split over ${tp} ranks`);
  if (c.hidden % tp !== 0) throw new TpError(`the FFN width ${c.hidden} does not split over ${tp} ranks`);
  let kv: number;
  if (c.kvHeads % tp === 0) kv = tp;
  else if (tp % c.kvHeads === 0) kv = c.kvHeads;
  else throw new TpError(`${c.kvHeads} K/V heads neither split over ${tp} ranks nor divide ${tp} (replication)`);
  const roles: ShardPlan = {
    "attn.q": { axis: 0, count: tp }, "attn.q.bias": { axis: 0, count: tp },
    "attn.k": { axis: 0, count: kv }, "attn.k.bias": { axis: 0, count: kv },
    "attn.v": { axis: 0, count: kv }, "attn.v.bias": { axis: 0, count: kv },
    "attn.o": { axis: 1, count: tp },
    "ffn.gate": { axis: 0, count: tp }, "ffn.up": { axis: 0, count: tp }, "ffn.down": { axis: 1, count: tp },
  };
  // A vocab tp does not divide keeps the head whole on every rank (correct, no gather, more memory).
  if (c.vocab % tp === 0) roles[c.tiedEmbeddings ? "tok_embd" : "output"] = { axis: 0, count: tp, whole: c.tiedEmbeddings };
  return { tp, roles };
}
