# Writes tiny random-weight LlavaForConditionalGeneration checkpoints with transformers itself, and what
# transformers makes of the committed test images (tests/vlm/images/cat.png, grid.png, noise.png): the processor's
# pixel_values, the vision tower's selected rows, the projector's rows, the prompt ids and fp32 greedy tokens
# (tests/vlm/transformers.test.ts reads them).
# Run on the GPU machine (torch + transformers 5.x + Pillow), from the repo root, in one command:
#     python3 tests/vlm/fixgen.py tests/vlm/fixtures
# Each model gets OUT/<name>/: config.json, model.safetensors (f32), tokenizer.json, tokenizer_config.json,
# preprocessor_config.json, the chat template, and expected.json. Then commit tests/vlm/fixtures/ with a SOURCE.md
# (transformers and torch versions, this command, the date), as tests/encoders/fixtures/SOURCE.md does.
#   llava-siglip: SigLIP tower (patch bias, no class token, gelu_pytorch_tanh, eps 1e-6), strategy "full",
#                 vision_feature_layer -2, bilinear resize to a square; llama text model (llama3 rope scaling).
#   llava-clip:   CLIP tower (class token, pre_layrnorm, quick_gelu, no patch bias), strategy "default" (class row
#                 dropped), vision_feature_layer -2, shortest-edge bicubic resize + center crop, CLIP mean/std.
import json, os, sys, traceback
import torch
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors, AddedToken
from transformers import (AutoProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor,
                          PreTrainedTokenizerFast, SiglipVisionConfig)
try:  # the PIL ("slow") processors: what poot's preprocessing follows byte for byte
    from transformers import CLIPImageProcessor, SiglipImageProcessor
except ImportError:  # a transformers without them: the torchvision ones (pixels may differ from PIL's by a step)
    from transformers import CLIPImageProcessorFast as CLIPImageProcessor, SiglipImageProcessorFast as SiglipImageProcessor

OUT = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = open(os.path.join(HERE, "..", "families", "fixgen", "corpus.txt"), encoding="utf-8").read()
IMAGES = ["cat.png", "grid.png", "noise.png"]
STEPS = 12
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<image>", "<|eot_id|>"]
# A LLaVA-1.5-style template over content parts (images first), as llava-hf's processors carry.
TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'].upper() + ': ' }}"
            "{% for c in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}"
            "{% for c in message['content'] | selectattr('type', 'equalto', 'text') %}{{ c['text'] }}{% endfor %}"
            "{{ '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}")
PROMPT = "USER: <image>\nWhat is in the picture? ASSISTANT:"
CHAT = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Tell me about this image."}]}]
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=32))
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, image_size=32, patch_size=8)
MODELS = {
    "llava-siglip": (SiglipVisionConfig(**VISION, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6), "full", 0,
                     lambda: SiglipImageProcessor(size={"height": 32, "width": 32}, resample=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])),
    "llava-clip": (CLIPVisionConfig(**VISION, hidden_act="quick_gelu", layer_norm_eps=1e-5), "default", 1,
                   lambda: CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, do_center_crop=True, resample=3)),
}


def make_tokenizer():
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(s, special=True, normalized=False) for s in SPECIALS], show_progress=False)
    tk.train_from_iterator([CORPUS], trainer)
    bos = SPECIALS[0]
    tk.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tk.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token="<|end_of_text|>", extra_special_tokens={"image_token": "<image>"})


def scale_weights(model):
    g = torch.Generator().manual_seed(1234)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "class_embedding" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "position_embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif "patch_embedding" in name:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))


def greedy(model, ids, pv, steps, suppress):
    # `suppress` (the <image> placeholder) is never picked: a generated placeholder would need image rows the next
    # step does not have (transformers refuses it). poot's side passes it a logit bias of -100.
    ids = list(ids)
    out, margins = [], []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=torch.tensor([ids]), pixel_values=pv).logits[0, -1].float()
            logits[suppress] = -float("inf")
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(out[-1])
    return out, margins


def rows(t):
    return [round(float(v), 7) for v in t.reshape(-1).tolist()]


def make(name):
    vcfg, strategy, extra, make_ip = MODELS[name]
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok = make_tokenizer()
    image_id = tok.convert_tokens_to_ids("<image>")
    cfg = LlavaConfig(vision_config=vcfg, text_config=LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **TEXT),
                      image_token_index=image_id, projector_hidden_act="gelu", vision_feature_select_strategy=strategy, vision_feature_layer=-2)
    for k in ("image_token_id", "image_token_index"):
        try:
            setattr(cfg, k, image_id)
        except Exception:
            pass
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(cfg).eval().float()
    scale_weights(model)
    ip = make_ip()
    proc = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=VISION["patch_size"], vision_feature_select_strategy=strategy,
                          num_additional_image_tokens=extra, chat_template=TEMPLATE)
    base = getattr(model, "model", model)
    expected = {"name": name, "image_token": image_id, "suppressed": image_id, "steps": STEPS, "prompt": PROMPT, "images": [], "chat": None,
                "image_processor": type(ip).__name__}
    for img_name in IMAGES:
        img = Image.open(os.path.join(HERE, "images", img_name)).convert("RGB")
        enc = proc(text=PROMPT, images=img, return_tensors="pt")
        pv = enc["pixel_values"].float()
        with torch.no_grad():
            hs = base.vision_tower(pv, output_hidden_states=True).hidden_states[-2]
            frames = hs[:, 1:] if strategy == "default" else hs
            embeds = base.multi_modal_projector(frames)
        ids = [int(i) for i in enc["input_ids"][0]]
        gen, margins = greedy(model, ids, pv, STEPS, image_id)
        expected["images"].append({"file": img_name, "pixel_values": rows(pv[0]), "frames": rows(frames[0]), "embeds": rows(embeds[0]),
                                   "ids": ids, "greedy": gen, "margins": margins, "decoded": tok.decode(gen)})
        print(name, img_name, "image rows", ids.count(image_id), "greedy", gen, "min margin", min(margins), flush=True)
    text = proc.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    img = Image.open(os.path.join(HERE, "images", IMAGES[0])).convert("RGB")
    # as apply_chat_template(tokenize=True) does: the template writes BOS, the tokenizer adds none
    enc = proc(text=text, images=img, return_tensors="pt", add_special_tokens=False)
    ids = [int(i) for i in enc["input_ids"][0]]
    gen, margins = greedy(model, ids, enc["pixel_values"].float(), STEPS, image_id)
    expected["chat"] = {"messages": CHAT, "image": IMAGES[0], "text": text, "ids": ids, "greedy": gen, "margins": margins}
    model.save_pretrained(d)
    proc.save_pretrained(d)
    # transformers must read back what it wrote, the same way.
    m2 = LlavaForConditionalGeneration.from_pretrained(d, dtype=torch.float32).eval()
    p2 = AutoProcessor.from_pretrained(d)
    e0 = expected["images"][0]
    enc2 = p2(text=PROMPT, images=Image.open(os.path.join(HERE, "images", IMAGES[0])).convert("RGB"), return_tensors="pt")
    assert [int(i) for i in enc2["input_ids"][0]] == e0["ids"], (name, "reloaded processor changed ids")
    g2, _ = greedy(m2, e0["ids"], enc2["pixel_values"].float(), 6, image_id)
    assert g2 == e0["greedy"][:6], (name, "reloaded model differs", g2, e0["greedy"][:6])
    json.dump(expected, open(os.path.join(d, "expected.json"), "w"))
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    print(name, "files:", sorted(os.listdir(d)), "tensor names e.g.", keys[:3], keys[-3:], flush=True)
    print(open(os.path.join(d, "config.json")).read(), flush=True)


if __name__ == "__main__":
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    bad = []
    for n in sys.argv[2:] or list(MODELS):
        try:
            make(n)
        except Exception:
            traceback.print_exc()
            bad.append(n)
    if bad:
        print("FAILED:", bad, flush=True)
        sys.exit(1)
