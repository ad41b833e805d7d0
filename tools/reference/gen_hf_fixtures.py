#!/usr/bin/python3
"""Hugging Face model folders for tformer's importer (src/model/hf_import.h), written in the exact
layout transformers saves, with float64 reference logits.

No `transformers` package is reachable here, so this script follows transformers' own modeling
files; each layout decision cites the lines it follows (huggingface/transformers, the commit given):

  G  = src/transformers/models/gpt2/modeling_gpt2.py        @ c44b2d9976e8eafbdcb89cb2710141b2bc9b138f
  GC = src/transformers/models/gpt2/configuration_gpt2.py   @ 01ae98ae2414210efd0d9ac1ffe78ff21588f1f7
  PU = src/transformers/pytorch_utils.py                    @ 3009a8a4b92d0d63b18d11575a413a4b78a55776
  A  = src/transformers/activations.py                      @ d60525f3595f8214576d6b8f1c54ac7cd0b5c42c
  L  = src/transformers/models/llama/modeling_llama.py      @ 5dd4a63548857797727ae73eeb6a6e886ea02a3e
  LC = src/transformers/models/llama/configuration_llama.py @ 4bdeeced9ce971bed8cca7ab203c3b70cffab4ca
  R  = src/transformers/modeling_rope_utils.py              @ ef46806472a64b0013ed413781e3afed82bfa047
  U  = src/transformers/utils/__init__.py                   @ 2dfcc46f55719b873b35f4adad44d4d3f40ab144
  HH = huggingface/huggingface_hub src/huggingface_hub/serialization/_base.py @ 122aa5cc086c89643b30efe845398d54505f7866
  TK = huggingface/tokenizers src/models/bpe/serialization.rs @ 3ba8ad0061a885baf052bbb7bbd22857e73e0c4e

GPT-2 (GPT2LMHeadModel):
  * Conv1D stores weight [nx, nf] = [in, out] and computes y = addmm(b, x, W) = x W + b (PU L94-104).
  * c_attn = Conv1D(3 E, E); its output splits into query, key, value in that order
    (`.split(self.split_size, dim=2)`, G L312; split_size = embed_dim, G L139); heads are
    view(..., num_heads, head_dim) of each part (G L274-280). Scores / sqrt(head_dim) (G L185-188).
  * MLP: c_fc -> ACT2FN[activation_function] -> c_proj (G L564-575); "gelu_new" is
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (A L26-30); the default (GC L145).
  * Block: x + attn(ln_1(x)), then + mlp(ln_2(.)) (G L613-653); ln_f at the end (G L1155);
    h0 = wte(ids) + wpe(positions) (G L1027-1029); lm_head tied to wte (G L1186-1191).
  * State-dict names: transformer.wte/wpe/h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}/ln_f
    (base_model_prefix "transformer", G L671); the causal buffers are persistent=False (G L127-134):
    not saved. A tied checkpoint has no lm_head.weight (save_pretrained drops tied duplicates).
  * config.json keys n_embd, n_layer, n_head, n_positions, n_inner, activation_function,
    layer_norm_epsilon (GC L139-161).
Llama (LlamaForCausalLM):
  * RMSNorm: x * rsqrt(mean(x^2) + eps), times weight (L70-74).
  * RoPE: inv_freq = 1 / theta^(arange(0, d, 2) / d) (R L59-67); emb = cat(freqs, freqs) (L132-135);
    q * cos + rotate_half(q) * sin with rotate_half(x) = cat(-x2, x1) (L144-174): pairs (i, i + d/2).
  * Attention: q/k/v/o_proj nn.Linear ([out, in]) with bias = attention_bias (L245-255);
    head_dim = hidden_size / num_attention_heads (L239); repeat_kv: kv head j serves query heads
    j*n_rep .. j*n_rep + n_rep - 1 (L194-203); scores * head_dim^-0.5 (L241, L219).
  * MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), bias = mlp_bias (L184-190).
  * Layer: input_layernorm, attention, residual, post_attention_layernorm, mlp, residual (L316-353);
    model.norm at the end (L505, L611); lm_head (L761), tied when tie_word_embeddings (default False, LC L163).
  * State-dict names model.embed_tokens / model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
    post_attention_layernorm, mlp.{gate,up,down}_proj} / model.norm / lm_head (L488-761).
Sharded weights: model.safetensors.index.json = {"metadata": {"total_size": bytes}, "weight_map":
  {tensor: file}} (U L188; transformers' save_pretrained), shards model-00001-of-00002.safetensors (HH L26, L158).
Tokenizers: vocab.json + merges.txt (GPT-2's files); tokenizer.json with "model": {"type": "BPE",
  "vocab", "merges"} where merges are pairs [["a", "b"]] (TK L33-40; older files "a b" strings, both read),
  "added_tokens" [{"id", "content", ..., "special"}], "pre_tokenizer" {"type": "ByteLevel",
  "add_prefix_space": false, "trim_offsets": true, "use_regex": true}. tokenizer_config.json "chat_template".

The folders (tests/fixtures/hf/):
  gpt2_tiny      GPT2LMHeadModel, F32, n_inner set, gelu_new, tied; vocab.json + merges.txt
  llama_tiny     LlamaForCausalLM, BF16 weights, GQA (4 heads, 2 kv), untied, rope_theta 500;
                 tokenizer.json (pair merges), tokenizer_config.json with a chat template
  llama_sharded  LlamaForCausalLM, F16 weights in two shards with the index, MQA, tied,
                 attention_bias true and mlp_bias false; tokenizer.json (string merges)
  llama_spm      LlamaForCausalLM, F16, MHA, untied, vocabulary 900: SentencePiece's tokenizer.model
                 (tests/fixtures/sentencepiece/llamaish.model, run gen_sentencepiece_fixtures.py first)
Each has expected.json: token ids and the float64 logits computed here from the stored (rounded)
weights. Run with Debian's python3-torch:  /usr/bin/python3 tools/reference/gen_hf_fixtures.py
"""
import json
import math
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "hf")
torch.set_default_dtype(torch.float64)


# ---- GPT-2's byte alphabet and a tiny byte-level BPE vocabulary ---------------------------------

def bytes_to_unicode():
    """GPT-2's table: printable bytes stand for themselves, the others get U+0100 onwards."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs])), bs


def tiny_vocab():
    """256 byte tokens in GPT-2's order, a few merges, <|endoftext|>."""
    table, order = bytes_to_unicode()
    vocab = {table[b]: i for i, b in enumerate(order)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("o", "u"), ("e", "r"), ("Ġ", "s")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, merges


# ---- safetensors, written from the format description (8-byte length, JSON header, data) --------

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.float32 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ---- the references ------------------------------------------------------------------------------

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def causal_attention(q, k, v):
    """q [H, T, D], k/v [H, T, D] -> [T, H*D]."""
    H, T, D = q.shape
    scores = q @ k.transpose(1, 2) / math.sqrt(D)
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(T, H * D)


def gpt2_reference(sd, cfg, ids):
    E, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D = E // H
    T = len(ids)
    g = lambda n: sd["transformer." + n].double()
    h = g("wte.weight")[ids] + g("wpe.weight")[torch.arange(T)]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(h, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x W + b
        q, k, v = qkv.split(E, dim=1)
        heads = lambda x: x.view(T, H, D).transpose(0, 1)
        o = causal_attention(heads(q), heads(k), heads(v))
        h = h + o @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = layer_norm(h, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        u = m @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias")
        u = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))  # gelu_new
        h = h + u @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    h = layer_norm(h, g("ln_f.weight"), g("ln_f.bias"), eps)
    return h @ g("wte.weight").T


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama_reference(sd, cfg, ids):
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D, T, eps = E // H, len(ids), cfg["rms_norm_eps"]
    g = lambda n: sd[n].double()
    maybe = lambda n: sd[n].double() if n in sd else 0.0
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, D]
    h = g("model.embed_tokens.weight")[ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(h, g(p + "input_layernorm.weight"), eps)
        lin = lambda x, n: x @ g(p + n + ".weight").T + maybe(p + n + ".bias")  # nn.Linear
        q = lin(a, "self_attn.q_proj").view(T, H, D).transpose(0, 1)
        k = lin(a, "self_attn.k_proj").view(T, KV, D).transpose(0, 1)
        v = lin(a, "self_attn.v_proj").view(T, KV, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)  # repeat_kv
        h = h + lin(causal_attention(q, k, v), "self_attn.o_proj")
        m = rms_norm(h, g(p + "post_attention_layernorm.weight"), eps)
        gate, up = lin(m, "mlp.gate_proj"), lin(m, "mlp.up_proj")
        h = h + lin(torch.nn.functional.silu(gate) * up, "mlp.down_proj")
    h = rms_norm(h, g("model.norm.weight"), eps)
    out = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["model.embed_tokens.weight"]
    return h @ out.double().T


# ---- the folders ---------------------------------------------------------------------------------

def draw(shape, gen, std=0.3):
    return torch.randn(*shape, generator=gen) * std


def write_folder(name, config, weights, dtype, tokenizer_files, ids, reference, shards=1):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    stored = {n: t.to(dtype) for n, t in weights.items()}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), stored, {"format": "pt"})
    else:
        names = sorted(stored)
        per = (len(names) + shards - 1) // shards
        weight_map, total = {}, 0
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: stored[n] for n in names[s * per:(s + 1) * per]}
            write_safetensors(os.path.join(folder, file), part, {"format": "pt"})
            for n, t in part.items():
                weight_map[n] = file
                total += t.numel() * t.element_size()
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
            f.write("\n")
    for file, text in tokenizer_files.items():
        with open(os.path.join(folder, file), "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
    # The reference runs on exactly the stored values.
    logits = reference({n: t.to(torch.float64) for n, t in stored.items()}, config, torch.tensor(ids))
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"ids": ids, "logits": [round(x, 12) for x in logits.flatten().tolist()]}, f)
        f.write("\n")
    print(f"{name}: {len(stored)} tensors, logits [{len(ids)}, {logits.shape[1]}], max |logit| {logits.abs().max():.3f}")


def gpt2_files(vocab, merges):
    return {"vocab.json": json.dumps(vocab, ensure_ascii=False),
            "merges.txt": "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)}


def tokenizer_json(vocab, merges, pair_merges):
    eot = vocab["<|endoftext|>"]
    plain = {t: i for t, i in vocab.items() if t != "<|endoftext|>"}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": True, "special": True}],
         "normalizer": None, "pre_tokenizer": byte_level, "post_processor": dict(byte_level, trim_offsets=False),
         "decoder": byte_level,
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                   "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                   "vocab": plain,
                   "merges": [[a, b] for a, b in merges] if pair_merges else [f"{a} {b}" for a, b in merges]}}
    return json.dumps(j, ensure_ascii=False, indent=1)


def main():
    vocab, merges = tiny_vocab()
    V = len(vocab)
    ids = [vocab["Ġthe"], 5, 77, vocab["in"], 300 - 36, 120, 3, 250, vocab["<|endoftext|>"], 64, 18, 200]

    gen = torch.Generator().manual_seed(1)
    E, L, H, FF, P = 32, 2, 4, 48, 16
    gcfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": E, "n_layer": L,
            "n_head": H, "n_positions": P, "n_inner": FF, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "bos_token_id": V - 1, "eos_token_id": V - 1, "tie_word_embeddings": True}
    w = {"transformer.wte.weight": draw((V, E), gen), "transformer.wpe.weight": draw((P, E), gen, 0.2),
         "transformer.ln_f.weight": 1 + draw((E,), gen, 0.2), "transformer.ln_f.bias": draw((E,), gen, 0.1)}
    for i in range(L):
        p = f"transformer.h.{i}."
        w.update({p + "ln_1.weight": 1 + draw((E,), gen, 0.2), p + "ln_1.bias": draw((E,), gen, 0.1),
                  p + "attn.c_attn.weight": draw((E, 3 * E), gen), p + "attn.c_attn.bias": draw((3 * E,), gen, 0.1),
                  p + "attn.c_proj.weight": draw((E, E), gen), p + "attn.c_proj.bias": draw((E,), gen, 0.1),
                  p + "ln_2.weight": 1 + draw((E,), gen, 0.2), p + "ln_2.bias": draw((E,), gen, 0.1),
                  p + "mlp.c_fc.weight": draw((E, FF), gen), p + "mlp.c_fc.bias": draw((FF,), gen, 0.1),
                  p + "mlp.c_proj.weight": draw((FF, E), gen), p + "mlp.c_proj.bias": draw((E,), gen, 0.1)})
    write_folder("gpt2_tiny", gcfg, w, torch.float32, gpt2_files(vocab, merges), ids, gpt2_reference)

    def llama(name, heads, kv, tied, attention_bias, mlp_bias, theta, dtype, pair_merges, shards, seed, extra,
              V=V, files=None):
        gen = torch.Generator().manual_seed(seed)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": E,
               "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": heads,
               "num_key_value_heads": kv, "hidden_act": "silu", "max_position_embeddings": P, "rms_norm_eps": 1e-6,
               "rope_theta": theta, "rope_scaling": None, "attention_bias": attention_bias, "mlp_bias": mlp_bias,
               "head_dim": E // heads, "tie_word_embeddings": tied, "pretraining_tp": 1, "bos_token_id": V - 1,
               "eos_token_id": V - 1}
        D = E // heads
        w = {"model.embed_tokens.weight": draw((V, E), gen), "model.norm.weight": 1 + draw((E,), gen, 0.2)}
        if not tied:
            w["lm_head.weight"] = draw((V, E), gen)
        for i in range(L):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = 1 + draw((E,), gen, 0.2)
            w[p + "post_attention_layernorm.weight"] = 1 + draw((E,), gen, 0.2)
            for proj, rows, cols, bias in (("self_attn.q_proj", heads * D, E, attention_bias),
                                           ("self_attn.k_proj", kv * D, E, attention_bias),
                                           ("self_attn.v_proj", kv * D, E, attention_bias),
                                           ("self_attn.o_proj", E, heads * D, attention_bias),
                                           ("mlp.gate_proj", FF, E, mlp_bias), ("mlp.up_proj", FF, E, mlp_bias),
                                           ("mlp.down_proj", E, FF, mlp_bias)):
                w[p + proj + ".weight"] = draw((rows, cols), gen)
                if bias:
                    w[p + proj + ".bias"] = draw((rows,), gen, 0.1)
        if files is None:
            files = {"tokenizer.json": tokenizer_json(vocab, merges, pair_merges)}
        files = dict(files, **extra)
        write_folder(name, cfg, w, dtype, files, ids, llama_reference, shards)

    chat = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|endoftext|>\n{% endfor %}"
    llama("llama_tiny", 4, 2, False, False, False, 500.0, torch.bfloat16, True, 1, 2,
          {"tokenizer_config.json": json.dumps({"chat_template": chat, "model_max_length": P}, indent=1)})
    llama("llama_sharded", 4, 1, True, True, False, 10000.0, torch.float16, False, 2, 3, {})
    # SentencePiece's tokenizer.model (Llama's own tokenizer file): the SentencePiece fixture
    # llamaish.model (gen_sentencepiece_fixtures.py; 900 pieces) as the folder's tokenizer.
    spm_model = os.path.join(OUT, "..", "sentencepiece", "llamaish.model")
    with open(spm_model, "rb") as f:
        model_bytes = f.read()
    llama("llama_spm", 4, 4, False, False, False, 10000.0, torch.float16, True, 1, 4, {}, V=900,
          files={"tokenizer.model": model_bytes})


if __name__ == "__main__":
    main()
