# The larger check of issue 13, on the GPU machine: each family at a realistic width (hidden 2048, 4 layers, GQA,
# the real vocabulary size), random weights stored in bf16, written by transformers; the reference is
# transformers' greedy continuation of a fixed 8-token prompt for 64 steps, computed in float64 on
# exactly the stored bf16 weights, with the full logits of every step (teacher-forced comparison in compare.ts).
# Also, with --8b, a Llama-3-8B-shaped bf16 checkpoint (16 GB, sharded) for the peak-host-memory measurement.
# Usage: python3 make_large.py OUTDIR [--8b] [families...]
import json, os, shutil, sys
import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
OUT = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")
STEPS = 64
W = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
         head_dim=128, max_position_embeddings=4096)
FAMILIES = {
    "llama": ("llama", dict(W, vocab_size=128256, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192))),
    "mistral": ("mistral", dict(W, vocab_size=32768, tie_word_embeddings=False, sliding_window=32, rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    "qwen2": ("qwen2", dict(W, vocab_size=151936, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    "qwen3": ("qwen3", dict(W, vocab_size=151936, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1e6))),
    "gemma2": ("gemma2", dict(W, head_dim=128, vocab_size=256000, tie_word_embeddings=False, sliding_window=32, query_pre_attn_scalar=144,
               attn_logit_softcapping=50.0, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
               layer_types=["sliding_attention", "full_attention"] * 2, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
    "gemma3": ("gemma3_text", dict(W, vocab_size=262144, tie_word_embeddings=False, sliding_window=32, query_pre_attn_scalar=128,
               hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, layer_types=["sliding_attention"] * 3 + ["full_attention"],
               rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                "full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1e6)})),
    "phi3": ("phi3", dict(W, vocab_size=32064, tie_word_embeddings=False, sliding_window=None, pad_token_id=0, rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
}


def scale(model, gemma):
    g = torch.Generator(device="cpu").manual_seed(7)
    for name, p in model.named_parameters():
        with torch.no_grad():
            r = torch.randn(p.shape, generator=g)
            if "norm" in name: p.copy_((0.0 if gemma else 1.0) + 0.1 * r)
            elif name.endswith("bias"): p.copy_(0.1 * r)
            elif "embed_tokens" in name: p.copy_((0.05 if gemma else 1.0) * r)
            else: p.copy_(r / p.shape[-1] ** 0.5)


def make(family):
    mt, kw = FAMILIES[family]
    d = os.path.join(OUT, family)
    os.makedirs(d, exist_ok=True)
    cfg = AutoConfig.for_model(mt, bos_token_id=1, eos_token_id=2, attn_implementation="eager", **kw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
    scale(model, family.startswith("gemma"))
    with torch.no_grad():
        for p in model.parameters(): p.copy_(p.to(torch.bfloat16).float())
    model.to(torch.bfloat16).save_pretrained(d, max_shard_size="2GB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIX, family, f), d)
    # The reference is read back from the saved folder in float64. Not the in-memory model: `.to(bfloat16)` also
    # rounded its rope inv_freq buffer to bf16, which moved the reference's logits by ~0.3% of their rms.
    del model
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").cuda().eval()
    ids = [int(x) for x in torch.randint(3, 300, (8,), generator=torch.Generator().manual_seed(11))]
    logits = []
    with torch.no_grad():
        for _ in range(STEPS):
            lg = model(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu()
            logits.append(lg.numpy())
            ids.append(int(lg.argmax()))
    np.stack(logits).astype("<f4").tofile(os.path.join(d, "ref_logits.f32"))
    json.dump({"prompt": ids[:8], "ids": ids, "steps": STEPS, "vocab": cfg.vocab_size}, open(os.path.join(d, "ref.json"), "w"))
    print(family, "distinct greedy tokens", len(set(ids[8:])), flush=True)
    del model
    torch.cuda.empty_cache()


def make_8b():
    d = os.path.join(OUT, "llama-3-8b")
    cfg = AutoConfig.for_model("llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, tie_word_embeddings=False,
                               rope_parameters=dict(rope_type="default", rope_theta=500000.0))
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(d, max_shard_size="5GB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIX, "llama", f), d)
    print("8b written", sorted(os.listdir(d)), flush=True)


if __name__ == "__main__":
    args = sys.argv[2:]
    if "--8b" in args:
        args.remove("--8b")
        make_8b()
    for f in args or list(FAMILIES):
        make(f)
