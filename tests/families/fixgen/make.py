# Writes tiny random-weight Hugging Face checkpoints of every family poot supports, with transformers itself,
# and transformers' fp32 greedy outputs for a few prompts and conversations (tests/families/*.test.ts read them).
# Run on a machine with torch + transformers 5.x:  python3 make.py OUTDIR
# Each family gets OUTDIR/<family>/ with config.json, safetensors (single or sharded), tokenizer.json,
# tokenizer_config.json, chat template, and expected.json.
import json, math, os, sys, traceback
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors, AddedToken
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

OUT = sys.argv[1]
STEPS = 48
TEXT = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt"), encoding="utf-8").read()

PROMPTS = ["Once upon a time, there was a little", "The cat sat on the mat and", "Hello world! 123 + 456 = 579."]
CHATS = [
    [{"role": "user", "content": "Tell me a story about a brave little dog."}],
    [
        {"role": "system", "content": "You are a kind helper."},
        {"role": "user", "content": "What is the sun?"},
        {"role": "assistant", "content": "The sun is a big star."},
        {"role": "user", "content": "Why is it hot?"},
    ],
]

LLAMA3_T = ("{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
            " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
            "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
MISTRAL_T = ("{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] + '\\n\\n' %}"
             "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
             "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if loop.first %}"
             "{{- '[INST] ' + system + message['content'] + '[/INST]' }}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
             "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}"
             "{%- else %}{{- raise_exception('Only user and assistant roles are supported!') }}{%- endif %}{%- endfor %}")
CHATML_T = ("{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
            "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
GEMMA_T = ("{{ bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set first = messages[0]['content'] + '\\n\\n' %}"
           "{%- set loop_messages = messages[1:] %}{%- else %}{%- set first = '' %}{%- set loop_messages = messages %}{%- endif %}"
           "{%- for message in loop_messages %}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
           "{{ '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}{%- endfor %}"
           "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}")
PHI3_T = ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
          "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
          "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")

# family -> (model_type, config kwargs, tokenizer: (specials, bos, eos, eot, template, add_bos), storage dtype, shard, template file)
L = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
         max_position_embeddings=256, rms_norm_eps=1e-5)
FAMILIES = {
    "llama": ("llama", dict(L, tie_word_embeddings=False, rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
              low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32)),
              (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|end_of_text|>", LLAMA3_T, True), "float32", "60KB", "config"),
    "mistral": ("mistral", dict(L, num_hidden_layers=2, tie_word_embeddings=False, sliding_window=8,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
                (["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>", MISTRAL_T, True), "float32", None, "jinja"),
    "qwen2": ("qwen2", dict(L, num_hidden_layers=2, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
              (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", CHATML_T, False), "bfloat16", None, "config"),
    "qwen3": ("qwen3", dict(L, head_dim=32, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
              (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", CHATML_T, False), "float32", None, "jinja"),
    "gemma2": ("gemma2", dict(L, head_dim=16, num_hidden_layers=3, tie_word_embeddings=False, sliding_window=8, query_pre_attn_scalar=24,
               attn_logit_softcapping=5.0, final_logit_softcapping=15.0, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
               rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
               (["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", GEMMA_T, True), "float16", None, "config"),
    "gemma3": ("gemma3_text", dict(L, head_dim=32, num_hidden_layers=3, tie_word_embeddings=False, sliding_window=8, query_pre_attn_scalar=24,
               hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, final_logit_softcapping=None, attn_logit_softcapping=None,
               layer_types=["sliding_attention", "sliding_attention", "full_attention"],
               rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=1000000.0)}),
               (["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", GEMMA_T, True), "float32", None, "jinja"),
    "phi3": ("phi3", dict(L, num_hidden_layers=2, tie_word_embeddings=False, sliding_window=None, pad_token_id=0,
             rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
             (["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"], "<s>", "<|endoftext|>", PHI3_T, True),
             "float32", None, "config"),
}


def make_tokenizer(specials, bos, eos, add_bos):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials], show_progress=False)
    tk.train_from_iterator([TEXT], trainer)
    if add_bos:
        tk.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                          special_tokens=[(bos, tk.token_to_id(bos))])
    else:
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
    kw = dict(tokenizer_object=tk, eos_token=eos)
    if bos: kw["bos_token"] = bos
    if "<pad>" in specials: kw["pad_token"] = "<pad>"
    if "<unk>" in specials: kw["unk_token"] = "<unk>"
    return PreTrainedTokenizerFast(**kw)


def scale_weights(model, gemma):
    g = torch.Generator().manual_seed(1234)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if "norm" in name:
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_((0.3 if gemma == "untied" else 1.0) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def greedy(model, ids, steps, eog):
    ids = list(ids)
    out, margins, first = [], [], None
    with torch.no_grad():
        for i in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            if i == 0: first = logits
            top = torch.topk(logits, 2)
            t = int(top.indices[0])
            margins.append(float(top.values[0] - top.values[1]))
            out.append(t)
            ids.append(t)
    return out, margins, first


def make(family):
    mt, ckw, (specials, bos, eos, template, add_bos), sdtype, shard, where = FAMILIES[family]
    d = os.path.join(OUT, family)
    os.makedirs(d, exist_ok=True)
    tok = make_tokenizer(specials, bos, eos, add_bos)
    tok.chat_template = template
    cfg = AutoConfig.for_model(mt, vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                               attn_implementation="eager", **ckw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
    # Gemma norms are (1 + w): w around 0. A tied Gemma head needs a wider embedding for varied tokens.
    scale_weights(model, ("untied" if not cfg.tie_word_embeddings else "tied") if family.startswith("gemma") else False)
    st = getattr(torch, sdtype)
    if sdtype != "float32":  # the reference runs fp32 on exactly the weights the file stores
        with torch.no_grad():
            for p in model.parameters(): p.copy_(p.to(st).float())
    expected = {"family": family, "model_type": mt, "storage_dtype": sdtype, "steps": STEPS, "prompts": [], "chats": []}
    eog = [tok.convert_tokens_to_ids(t) for t in specials if t in ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "</s>", "<eos>", "<|end_of_text|>", "<|endoftext|>")]
    for text in PROMPTS:
        ids = tok(text)["input_ids"]
        gen, margins, first = greedy(model, ids, STEPS, eog)
        e = {"text": text, "ids": ids, "greedy": gen, "margins": margins, "decoded": tok.decode(gen)}
        if not expected["prompts"]: e["logits"] = [round(float(v), 6) for v in first]
        expected["prompts"].append(e)
    for msgs in CHATS:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
        ids = enc["input_ids"] if not isinstance(enc, list) else enc
        if ids and isinstance(ids[0], list): ids = ids[0]
        ids = [int(i) for i in ids]
        gen, margins, _ = greedy(model, ids, STEPS, eog)
        expected["chats"].append({"messages": msgs, "text": text, "ids": ids, "greedy": gen, "margins": margins, "decoded": tok.decode(gen)})
    variety = [len(set(p["greedy"])) for p in expected["prompts"] + expected["chats"]]
    print(family, "distinct tokens per sequence:", variety, "min margin:", min(min(p["margins"]) for p in expected["prompts"] + expected["chats"]), flush=True)
    model = model.to(st)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, **kw)
    tok.save_pretrained(d)
    # Where the template lives: tokenizer_config.json `chat_template` or chat_template.jinja (both as transformers reads).
    tc_path = os.path.join(d, "tokenizer_config.json")
    tc = json.load(open(tc_path))
    jpath = os.path.join(d, "chat_template.jinja")
    if where == "config":
        tc["chat_template"] = template
        if os.path.exists(jpath): os.remove(jpath)
    else:
        tc.pop("chat_template", None)
        open(jpath, "w").write(template)
    if add_bos: tc["add_bos_token"] = True
    json.dump(tc, open(tc_path, "w"), indent=2)
    # transformers must read back what we wrote, the same way (the ids above are its ids).
    tok2 = AutoTokenizer.from_pretrained(d)
    for p in expected["prompts"]:
        assert tok2(p["text"])["input_ids"] == p["ids"], (family, "reload changed prompt ids", tok2(p["text"])["input_ids"], p["ids"])
    for c in expected["chats"]:
        assert tok2.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=True) == c["text"], (family, "reload changed chat text")
    m2 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    g2, _, _ = greedy(m2, expected["prompts"][0]["ids"], 8, eog)
    assert g2 == expected["prompts"][0]["greedy"][:8], (family, "reloaded model differs", g2)
    expected["eog_ids"] = eog
    json.dump(expected, open(os.path.join(d, "expected.json"), "w"))
    print(family, "files:", sorted(os.listdir(d)), flush=True)
    print(open(os.path.join(d, "config.json")).read(), flush=True)


if __name__ == "__main__":
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    only = sys.argv[2:] or list(FAMILIES)
    bad = []
    for f in only:
        try:
            make(f)
        except Exception:
            traceback.print_exc()
            bad.append(f)
    print("FAILED:", bad, flush=True)
