# Writes tiny random-weight encoder checkpoints with transformers itself, and transformers' fp32 outputs for a
# few texts (tests/encoders/*.test.ts read them). Run on a machine with torch + transformers 5.x:
#   python3 make.py OUTDIR [NAME ...]
# OUTDIR/<name>/ gets config.json, model.safetensors, tokenizer.json, tokenizer_config.json, the
# sentence-transformers files (modules.json, 1_Pooling/config.json) where the model is an embedder, and expected.json.
#   bert-embed   BertModel, WordPiece, sentence-transformers mean pooling + Normalize
#   bert-cls     BertModel, WordPiece, sentence-transformers CLS pooling, no Normalize module
#   bert-rerank  BertForSequenceClassification, one label (cross-encoder)
#   xlmr-rerank  XLMRobertaForSequenceClassification, one label (the bge-reranker layout)
#   xlmr-embed   XLMRobertaModel, Unigram tokenizer (SentencePiece-style), mean pooling + Normalize
#   qwen3-embed  Qwen3Model, byte-level BPE with <|endoftext|> appended, last-token pooling + Normalize
# `--bench OUTFILE` (anywhere in the arguments) also times PyTorch eager BertModel (BERT-base shape) at batch 1/32/256.
import json, os, sys, time, traceback
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, trainers, processors, AddedToken
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = open(os.path.join(HERE, "..", "..", "families", "fixgen", "corpus.txt"), encoding="utf-8").read()

# Subwords, an unknown script, accents (stripped when lowercasing), CJK (split per character), punctuation, digits.
TEXTS = [
    "Once upon a time, there was a little dog.",
    "The cat sat on the mat and looked at the sun!",
    "Héllo wörld: 123 + 456 = 579?",
    "zyzzyva qwxj \u0416\u0443\u043a \u4f60\u597d\u4e16\u754c",
    "a",
    "The little dog ran to the park, and the cat stayed at home because it was raining very hard outside today.",
]
QUERY = "Where did the little dog go?"
DOCS = [
    "The little dog ran to the park.",
    "The cat sat on the mat.",
    "Hello world! 123 + 456 = 579.",
    "Once upon a time, there was a little dog who went to the park every day.",
    "\u4f60\u597d",
]
BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=128,
            type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def wordpiece_tokenizer():
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                        initial_alphabet=list("\u4f60\u597d\u4e16\u754c"))
    tk.train_from_iterator([TEXT], trainer)
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    # transformers 5's generic fast tokenizer returns no token_type_ids unless named here (BERT's pairs need them).
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=128,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def unigram_tokenizer():
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tk = Tokenizer(models.Unigram())
    tk.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC()])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>", show_progress=False)
    tk.train_from_iterator([TEXT], trainer)
    s, e = tk.token_to_id("<s>"), tk.token_to_id("</s>")
    tk.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                      special_tokens=[("<s>", s), ("</s>", e)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                                   cls_token="<s>", sep_token="</s>", mask_token="<mask>", model_max_length=126,
                                   model_input_names=["input_ids", "attention_mask"])


def bpe_eos_tokenizer():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials], show_progress=False)
    tk.train_from_iterator([TEXT], trainer)
    eos = tk.token_to_id("<|endoftext|>")
    tk.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>",
                                                      special_tokens=[("<|endoftext|>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>", padding_side="left",
                                   model_input_names=["input_ids", "attention_mask"])


def scale_weights(model):
    # transformers' init (std 0.02) makes every text's embedding nearly the same; wider weights make them differ.
    g = torch.Generator().manual_seed(1234)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if "LayerNorm" in name or "norm" in name:
                p.copy_((0.0 if name.endswith("bias") else 1.0) + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embeddings" in name or "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def r6(t):
    return [round(float(v), 6) for v in t.flatten().tolist()]


def pool(hidden, mask, mode):
    if mode == "mean":
        m = mask.unsqueeze(-1).float()
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":  # left padding: the last column is every row's last real token
        return hidden[:, -1]
    raise ValueError(mode)


def sentence_transformers_files(d, mode, normalize, dim):
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        os.makedirs(os.path.join(d, "2_Normalize"), exist_ok=True)
    json.dump(mods, open(os.path.join(d, "modules.json"), "w"), indent=2)
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    keys = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "lasttoken": "pooling_mode_lasttoken"}
    cfg = {"word_embedding_dimension": dim, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
           "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
           "pooling_mode_lasttoken": False, "include_prompt": True}
    cfg[keys[mode]] = True
    json.dump(cfg, open(os.path.join(d, "1_Pooling", "config.json"), "w"), indent=2)


def embedder(name, mt, ckw, tok, mode, normalize):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    cfg = AutoConfig.for_model(mt, vocab_size=len(tok), pad_token_id=tok.pad_token_id, **ckw)
    torch.manual_seed(0)
    model = AutoModel.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
    scale_weights(model)
    exp = {"name": name, "model_type": mt, "pooling": mode, "normalize": normalize, "texts": []}
    with torch.no_grad():
        for text in TEXTS:
            enc = tok(text, return_tensors="pt")
            h = model(**enc).last_hidden_state
            e = {"text": text, "ids": enc["input_ids"][0].tolist(), "hidden": r6(h[0])}
            if "token_type_ids" in enc: e["type_ids"] = enc["token_type_ids"][0].tolist()
            for m in ("mean", "cls", "lasttoken"):
                if m == "lasttoken" and mt != "qwen3": continue
                v = pool(h, enc["attention_mask"], m)
                e[m] = r6(v)
                e[m + "_l2"] = r6(torch.nn.functional.normalize(v, dim=-1))
            v = pool(h, enc["attention_mask"], mode)
            e["embedding"] = r6(torch.nn.functional.normalize(v, dim=-1) if normalize else v)
            exp["texts"].append(e)
        # One padded batch of all texts must give the same embeddings (the padding mask works in transformers too).
        enc = tok(TEXTS, return_tensors="pt", padding=True)
        v = pool(model(**enc).last_hidden_state, enc["attention_mask"], mode)
        v = torch.nn.functional.normalize(v, dim=-1) if normalize else v
        exp["batched"] = [r6(x) for x in v]
        single = torch.tensor([t["embedding"] for t in exp["texts"]])
        print(name, "batched vs single max diff", float((v - single).abs().max()), flush=True)
        cos = torch.nn.functional.normalize(single, dim=-1) @ torch.nn.functional.normalize(single, dim=-1).T
        print(name, "pairwise cosines (want spread):", [round(float(x), 3) for x in cos[0]], flush=True)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    sentence_transformers_files(d, mode, normalize, cfg.hidden_size)
    check_reload(d, exp)
    json.dump(exp, open(os.path.join(d, "expected.json"), "w"))
    print(name, "files:", sorted(os.listdir(d)), "reload_ok", exp.get("reload_ok"), flush=True)
    print(open(os.path.join(d, "config.json")).read(), flush=True)
    print(name, "tensors:", sorted(model.state_dict().keys())[:8], flush=True)


def check_reload(d, exp):
    # A warning, not a failure: the ids recorded are those of the tokenizer object that wrote tokenizer.json.
    try:
        tok2 = AutoTokenizer.from_pretrained(d)
        for t in exp["texts"]:
            got = tok2(t["text"])["input_ids"]
            if got != t["ids"]:
                print("WARNING", d, "AutoTokenizer reload gives other ids for", repr(t["text"]), got, t["ids"], flush=True)
                exp["reload_ok"] = False
                return
        exp["reload_ok"] = True
    except Exception as e:
        print("WARNING", d, "AutoTokenizer reload failed:", e, flush=True)
        exp["reload_ok"] = False


def reranker(name, mt, ckw, tok):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    cfg = AutoConfig.for_model(mt, vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1, **ckw)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
    scale_weights(model)
    exp = {"name": name, "model_type": mt, "query": QUERY, "pairs": []}
    with torch.no_grad():
        for doc in DOCS:
            enc = tok(QUERY, doc, return_tensors="pt")
            logit = model(**enc).logits[0, 0]
            types = enc["token_type_ids"][0].tolist() if "token_type_ids" in enc else [0] * enc["input_ids"].shape[1]
            exp["pairs"].append({"document": doc, "ids": enc["input_ids"][0].tolist(), "type_ids": types, "score": round(float(logit), 6)})
        enc = tok([QUERY] * len(DOCS), DOCS, return_tensors="pt", padding=True)
        batched = model(**enc).logits[:, 0]
        exp["batched"] = r6(batched)
        print(name, "scores", [p["score"] for p in exp["pairs"]], "batched", exp["batched"], flush=True)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    try:
        tok2 = AutoTokenizer.from_pretrained(d)
        exp["reload_ok"] = all(tok2(QUERY, p["document"])["input_ids"] == p["ids"] for p in exp["pairs"])
    except Exception as e:
        print("WARNING", name, "AutoTokenizer reload failed:", e, flush=True)
        exp["reload_ok"] = False
    print(name, "reload_ok", exp["reload_ok"], flush=True)
    json.dump(exp, open(os.path.join(d, "expected.json"), "w"))
    print(name, "files:", sorted(os.listdir(d)), flush=True)
    print(open(os.path.join(d, "config.json")).read(), flush=True)


def bench(path):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = AutoConfig.for_model("bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # BERT-base: 768 x 12, 30522 vocab
    model = AutoModel.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval().to(dev)
    lines = [f"# PyTorch {torch.__version__} eager BertModel (bert-base shape), {dev} {torch.cuda.get_device_name() if dev == 'cuda' else ''}",
             "dtype batch seq ms_per_batch texts_per_s"]
    for dtype in (torch.float32, torch.float16):
        m = model.to(dtype)
        for batch in (1, 32, 256):
            for seq in (128,):
                ids = torch.randint(1000, 30000, (batch, seq), device=dev)
                mask = torch.ones_like(ids)
                with torch.no_grad():
                    for _ in range(3): m(input_ids=ids, attention_mask=mask)
                    if dev == "cuda": torch.cuda.synchronize()
                    n, t0 = 0, time.perf_counter()
                    while n < 5 or time.perf_counter() - t0 < 0.5:
                        m(input_ids=ids, attention_mask=mask); n += 1
                    if dev == "cuda": torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) / n * 1e3
                lines.append(f"{str(dtype).split('.')[-1]} {batch} {seq} {ms:.3f} {batch / ms * 1e3:.1f}")
                print(lines[-1], flush=True)
                open(path, "w").write("\n".join(lines) + "\n")  # each row at once: a timeout keeps the rows so far


if __name__ == "__main__":
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    args = sys.argv[1:]
    bench_to = None
    if "--bench" in args:
        i = args.index("--bench"); bench_to = args[i + 1]; del args[i:i + 2]
    OUT = args[0]
    QWEN3 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
    XLMR = dict(BERT, type_vocab_size=1, max_position_embeddings=130, layer_norm_eps=1e-5)
    JOBS = {
        "bert-embed": lambda: embedder("bert-embed", "bert", BERT, wordpiece_tokenizer(), "mean", True),
        "bert-cls": lambda: embedder("bert-cls", "bert", BERT, wordpiece_tokenizer(), "cls", False),
        "bert-rerank": lambda: reranker("bert-rerank", "bert", BERT, wordpiece_tokenizer()),
        "xlmr-rerank": lambda: reranker("xlmr-rerank", "xlm-roberta", XLMR, unigram_tokenizer()),
        "xlmr-embed": lambda: embedder("xlmr-embed", "xlm-roberta", XLMR, unigram_tokenizer(), "mean", True),
        "qwen3-embed": lambda: embedder("qwen3-embed", "qwen3", QWEN3, bpe_eos_tokenizer(), "lasttoken", True),
    }
    bad = []
    for n in args[1:] or list(JOBS):
        try:
            JOBS[n]()
        except Exception:
            traceback.print_exc()
            bad.append(n)
    print("FAILED:", bad, flush=True)
    if bench_to:
        try:
            bench(bench_to)
        except Exception:
            traceback.print_exc()
