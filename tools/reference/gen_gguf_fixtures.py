#!/usr/bin/python3
"""GGUF files for tformer's importer, written by this script from the format description (not by
tformer's exporter), with float64 reference logits.

The GGUF layout, as llama.cpp's gguf.cpp and its docs describe it (ggml/src/gguf.cpp @ the llama.cpp
tree node-llama-cpp 3.21.1 ships): little-endian; "GGUF", u32 version 3, u64 tensor count, u64
key/value count; each key a u64-length string, a u32 value type (4 u32, 5 i32, 6 f32, 7 bool,
8 string, 9 array of element type + u64 count), the value; each tensor info a string name, u32
n_dims, u64 ne[n_dims] innermost first, u32 ggml type (0 F32, 1 F16), u64 offset; padding to
general.alignment (32); the data, each tensor at an offset that is the previous one's end rounded
up to the alignment.

The models are the Hugging Face fixtures' (gen_hf_fixtures.py draws the weights; its references
compute the logits), laid out as llama.cpp's converter lays them out:
  gpt2_tiny.gguf      architecture gpt2, F32: attn_qkv is c_attn's Conv1D weight [in, out] transposed to
                      [out, in] (ne = [in, out]: ggml's ne[0] is the row length), no output.weight
                      (tied), tokens spelled in GPT-2's byte alphabet with the merges, pre "gpt-2".
  llama_tiny.gguf     architecture llama, F16 matrices (F32 norms): q_proj and k_proj rows permuted per
                      head from rotate-half order to llama.cpp's adjacent pairs (what
                      convert_hf_to_gguf.py's LlamaModel.permute does: reshape(n_head, 2, hd/2, in),
                      swap the middle axes), GQA, untied output.weight, rope.freq_base 500.
The llama reference is computed from the F16-rounded weights. Writes tests/fixtures/gguf_outside/
<name>.gguf and <name>.expected.json (ids, float64 logits).
Run with Debian's python3-torch:  /usr/bin/python3 tools/reference/gen_gguf_fixtures.py
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_hf_fixtures as hf  # noqa: E402  (the weights and the float64 references)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "gguf_outside")
ALIGN = 32


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(v):
    """(type, python value) -> the bytes of the value's type and the value."""
    kind, x = v
    if kind == "u32":
        return struct.pack("<I", 4) + struct.pack("<I", x)
    if kind == "f32":
        return struct.pack("<I", 6) + struct.pack("<f", x)
    if kind == "bool":
        return struct.pack("<I", 7) + struct.pack("<B", 1 if x else 0)
    if kind == "str":
        return struct.pack("<I", 8) + gguf_string(x)
    if kind == "str[]":
        return struct.pack("<IIQ", 9, 8, len(x)) + b"".join(gguf_string(s) for s in x)
    if kind == "i32[]":
        return struct.pack("<IIQ", 9, 5, len(x)) + b"".join(struct.pack("<i", i) for i in x)
    raise ValueError(kind)


def write_gguf(path, metadata, tensors):
    """tensors: (name, torch tensor with row-major shape, ggml type 0 F32 / 1 F16)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for k, v in metadata:
        head += gguf_string(k) + gguf_value(v)
    blobs, offset = [], 0
    for name, t, ggml_type in tensors:
        ne = list(reversed(t.shape))
        head += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", ggml_type, offset)
        data = (t.to(torch.float32) if ggml_type == 0 else t.to(torch.float16)).contiguous()
        raw = data.numpy().tobytes() if ggml_type == 0 else data.view(torch.int16).numpy().tobytes()
        blobs.append(raw)
        offset += len(raw)
        offset += (-offset) % ALIGN
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for raw in blobs:
            f.write(raw)
            f.write(b"\0" * ((-len(raw)) % ALIGN))


def tokenizer_metadata(vocab, merges):
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    types = [3 if t == "<|endoftext|>" else 1 for t in tokens]
    eot = vocab["<|endoftext|>"]
    return [("tokenizer.ggml.model", ("str", "gpt2")), ("tokenizer.ggml.pre", ("str", "gpt-2")),
            ("tokenizer.ggml.tokens", ("str[]", tokens)), ("tokenizer.ggml.token_type", ("i32[]", types)),
            ("tokenizer.ggml.merges", ("str[]", [f"{a} {b}" for a, b in merges])),
            ("tokenizer.ggml.bos_token_id", ("u32", eot)), ("tokenizer.ggml.eos_token_id", ("u32", eot))]


def permute_to_adjacent(w, n_head):
    """Rotate-half rows -> adjacent pairs, per head: new row 2i = old row i, 2i+1 = old i + hd/2."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def main():
    os.makedirs(OUT, exist_ok=True)
    vocab, merges = hf.tiny_vocab()
    V = len(vocab)
    ids = [vocab["Ġthe"], 5, 77, vocab["in"], 264, 120, 3, 250, 18, 200, 31, 7]
    E, L, H, FF, P = 32, 2, 4, 48, 16

    # gpt2, F32.
    gen = torch.Generator().manual_seed(11)
    sd = {"transformer.wte.weight": hf.draw((V, E), gen), "transformer.wpe.weight": hf.draw((P, E), gen, 0.2),
          "transformer.ln_f.weight": 1 + hf.draw((E,), gen, 0.2), "transformer.ln_f.bias": hf.draw((E,), gen, 0.1)}
    for i in range(L):
        p = f"transformer.h.{i}."
        sd.update({p + "ln_1.weight": 1 + hf.draw((E,), gen, 0.2), p + "ln_1.bias": hf.draw((E,), gen, 0.1),
                   p + "attn.c_attn.weight": hf.draw((E, 3 * E), gen), p + "attn.c_attn.bias": hf.draw((3 * E,), gen, 0.1),
                   p + "attn.c_proj.weight": hf.draw((E, E), gen), p + "attn.c_proj.bias": hf.draw((E,), gen, 0.1),
                   p + "ln_2.weight": 1 + hf.draw((E,), gen, 0.2), p + "ln_2.bias": hf.draw((E,), gen, 0.1),
                   p + "mlp.c_fc.weight": hf.draw((E, FF), gen), p + "mlp.c_fc.bias": hf.draw((FF,), gen, 0.1),
                   p + "mlp.c_proj.weight": hf.draw((FF, E), gen), p + "mlp.c_proj.bias": hf.draw((E,), gen, 0.1)})
    sd = {n: t.to(torch.float32).to(torch.float64) for n, t in sd.items()}
    cfg = {"n_embd": E, "n_head": H, "n_layer": L, "layer_norm_epsilon": 1e-5}
    g = lambda n: sd["transformer." + n]
    # ggml's ne[0] is the fastest axis: a row-major [out, in] matrix has ne = [in, out], which is
    # what llama.cpp's gpt2 expects; Conv1D stores [in, out], so its weights are transposed first.
    T = lambda w: w.T.contiguous()
    tensors = [("token_embd.weight", g("wte.weight"), 0), ("position_embd.weight", g("wpe.weight"), 0)]
    for i in range(L):
        p = f"h.{i}."
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", g(p + "ln_1.weight"), 0), (b + "attn_norm.bias", g(p + "ln_1.bias"), 0),
                    (b + "attn_qkv.weight", T(g(p + "attn.c_attn.weight")), 0),
                    (b + "attn_qkv.bias", g(p + "attn.c_attn.bias"), 0),
                    (b + "attn_output.weight", T(g(p + "attn.c_proj.weight")), 0),
                    (b + "attn_output.bias", g(p + "attn.c_proj.bias"), 0),
                    (b + "ffn_norm.weight", g(p + "ln_2.weight"), 0), (b + "ffn_norm.bias", g(p + "ln_2.bias"), 0),
                    (b + "ffn_up.weight", T(g(p + "mlp.c_fc.weight")), 0), (b + "ffn_up.bias", g(p + "mlp.c_fc.bias"), 0),
                    (b + "ffn_down.weight", T(g(p + "mlp.c_proj.weight")), 0),
                    (b + "ffn_down.bias", g(p + "mlp.c_proj.bias"), 0)]
    tensors += [("output_norm.weight", g("ln_f.weight"), 0), ("output_norm.bias", g("ln_f.bias"), 0)]
    md = [("general.architecture", ("str", "gpt2")), ("general.name", ("str", "outside-writer gpt2")),
          ("gpt2.context_length", ("u32", P)), ("gpt2.embedding_length", ("u32", E)), ("gpt2.block_count", ("u32", L)),
          ("gpt2.feed_forward_length", ("u32", FF)), ("gpt2.attention.head_count", ("u32", H)),
          ("gpt2.attention.layer_norm_epsilon", ("f32", 1e-5))] + tokenizer_metadata(vocab, merges)
    write_gguf(os.path.join(OUT, "gpt2_tiny.gguf"), md, tensors)
    logits = hf.gpt2_reference(sd, cfg, torch.tensor(ids))
    save_expected("gpt2_tiny", ids, logits)

    # llama, F16 matrices, GQA, untied.
    gen = torch.Generator().manual_seed(12)
    KV, theta = 2, 500.0
    D = E // H
    sd = {"model.embed_tokens.weight": hf.draw((V, E), gen), "model.norm.weight": 1 + hf.draw((E,), gen, 0.2),
          "lm_head.weight": hf.draw((V, E), gen)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1 + hf.draw((E,), gen, 0.2)
        sd[p + "post_attention_layernorm.weight"] = 1 + hf.draw((E,), gen, 0.2)
        for proj, rows, cols in (("self_attn.q_proj", H * D, E), ("self_attn.k_proj", KV * D, E),
                                 ("self_attn.v_proj", KV * D, E), ("self_attn.o_proj", E, H * D),
                                 ("mlp.gate_proj", FF, E), ("mlp.up_proj", FF, E), ("mlp.down_proj", E, FF)):
            sd[p + proj + ".weight"] = hf.draw((rows, cols), gen)
    # Matrices are stored as F16: the reference sees the rounded values; norms stay F32.
    sd = {n: (t.to(torch.float16) if t.dim() == 2 else t.to(torch.float32)).to(torch.float64) for n, t in sd.items()}
    tensors = [("token_embd.weight", sd["model.embed_tokens.weight"], 1)]
    for i in range(L):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", sd[p + "input_layernorm.weight"], 0),
                    (b + "attn_q.weight", permute_to_adjacent(sd[p + "self_attn.q_proj.weight"], H), 1),
                    (b + "attn_k.weight", permute_to_adjacent(sd[p + "self_attn.k_proj.weight"], KV), 1),
                    (b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"], 1),
                    (b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"], 1),
                    (b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], 0),
                    (b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], 1),
                    (b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"], 1),
                    (b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"], 1)]
    tensors += [("output_norm.weight", sd["model.norm.weight"], 0), ("output.weight", sd["lm_head.weight"], 1)]
    md = [("general.architecture", ("str", "llama")), ("general.name", ("str", "outside-writer llama")),
          ("general.alignment", ("u32", ALIGN)),
          ("llama.context_length", ("u32", P)), ("llama.embedding_length", ("u32", E)), ("llama.block_count", ("u32", L)),
          ("llama.feed_forward_length", ("u32", FF)), ("llama.attention.head_count", ("u32", H)),
          ("llama.attention.head_count_kv", ("u32", KV)), ("llama.attention.layer_norm_rms_epsilon", ("f32", 1e-6)),
          ("llama.rope.freq_base", ("f32", theta)), ("llama.rope.dimension_count", ("u32", D))]
    md += tokenizer_metadata(vocab, merges)
    md += [("tokenizer.chat_template", ("str", "{{ messages[0]['content'] }}"))]
    write_gguf(os.path.join(OUT, "llama_tiny.gguf"), md, tensors)
    cfg = {"hidden_size": E, "num_attention_heads": H, "num_key_value_heads": KV, "rms_norm_eps": 1e-6,
           "rope_theta": theta, "num_hidden_layers": L}
    # rms_norm_eps and rope_theta as the file states them: f32 values.
    cfg["rms_norm_eps"] = struct.unpack("<f", struct.pack("<f", 1e-6))[0]
    logits = hf.llama_reference(sd, cfg, torch.tensor(ids))
    save_expected("llama_tiny", ids, logits)


def save_expected(name, ids, logits):
    with open(os.path.join(OUT, name + ".expected.json"), "w") as f:
        json.dump({"ids": ids, "logits": [round(x, 12) for x in logits.flatten().tolist()]}, f)
        f.write("\n")
    print(f"{name}: logits [{len(ids)}, {logits.shape[1]}], max |logit| {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
