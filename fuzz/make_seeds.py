#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/ (fuzz/corpus/<target>/): small valid files of every format a
target reads, laid out by hand from the published formats (no tformer code involved), and
near-valid ones that each break one rule. Run from anywhere: python3 fuzz/make_seeds.py. The files
are committed. The GPT-2 and tiktoken seeds are cut from the vocabularies scripts/fetch-gpt2-vocab.sh
and scripts/fetch-tiktoken-vocab.sh put in build-data/ (skipped when those are missing)."""
import json
import os
import base64
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


# GGUF value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array,
# 10 u64, 11 i64, 12 f64.
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_value(t, v):
    if t == 8:
        return gguf_str(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, alignment=32, version=3):
    """tensors: (name, ne innermost first, ggml type, data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gguf_str(k) + struct.pack("<I", t) + gguf_value(t, v)
    offset, blobs = 0, []
    for name, ne, typ, data in tensors:
        out += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", typ, offset)
        blobs.append((offset, data))
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    body = bytearray(offset)
    for o, d in blobs:
        body[o:o + len(d)] = d
    return out + bytes(body)


def f32(*xs):
    return struct.pack(f"<{len(xs)}f", *xs)


def safetensors(entries, metadata=None, data=b"", pad=True):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    header.update(entries)
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    q8 = struct.pack("<e", 0.5) + bytes(range(32))                     # one Q8_0 block
    q4 = struct.pack("<e", 0.25) + bytes((i * 37) & 0xFF for i in range(16))  # one Q4_0 block
    kvs = [("general.architecture", 8, "llama"), ("general.name", 8, "seed"),
           ("llama.context_length", 4, 16), ("llama.embedding_length", 4, 8),
           ("llama.rope.freq_base", 6, 10000.0), ("flag", 7, True), ("small", 0, 7), ("neg", 1, -3),
           ("u16", 2, 65535), ("i16", 3, -2), ("i32", 5, -7), ("u64", 10, 1 << 40), ("i64", 11, -(1 << 40)),
           ("f64", 12, 0.125), ("tokenizer.ggml.model", 8, "gpt2"),
           ("tokenizer.ggml.tokens", 9, (8, ["a", "b", "ab", "<|endoftext|>"])),
           ("tokenizer.ggml.scores", 9, (6, [0.0, -1.0, -2.0, 0.0])),
           ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 3])),
           ("tokenizer.ggml.merges", 9, (8, ["a b"])), ("nested", 9, (9, [(4, [1, 2]), (8, ["x"])]))]
    tensors = [("token_embd.weight", [3, 2], 0, f32(1, 2, 3, 4, 5, 6)),
               ("blk.0.attn_q.weight", [32, 1], 8, q8), ("blk.0.ffn_up.weight", [32, 1], 2, q4),
               ("output_norm.weight", [4], 1, struct.pack("<4e", 1, 2, 3, 4)),
               ("bf", [2], 30, struct.pack("<2H", 0x3F80, 0xC000))]
    write("gguf", "valid_all_types.gguf", gguf(kvs, tensors))
    write("gguf", "valid_aligned_64.gguf", gguf([("general.alignment", 4, 64)], tensors[:2], alignment=64))
    write("gguf", "valid_empty.gguf", gguf([], []))
    write("gguf", "valid_v2.gguf", gguf(kvs[:3], tensors[:1], version=2))
    good = gguf(kvs[:4], tensors[:2])
    write("gguf", "near_truncated.gguf", good[:len(good) - 7])
    write("gguf", "near_bad_magic.gguf", b"GGUG" + good[4:])
    write("gguf", "near_unknown_type.gguf", gguf(kvs[:2], [("t", [4], 99, f32(1, 2, 3, 4))]))
    write("gguf", "near_bad_alignment.gguf", gguf([("general.alignment", 4, 48)], tensors[:1]))
    write("gguf", "near_duplicate_key.gguf", gguf([kvs[0], kvs[0]], tensors[:1]))
    write("gguf", "near_huge_count.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))

    data = f32(1, 2, 3, 4, 5, 6) + struct.pack("<2H", 0x3F80, 0x4000) + struct.pack("<q", -5) + b"\x01"
    entries = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
               "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
               "i": {"dtype": "I64", "shape": [], "data_offsets": [28, 36]},
               "m": {"dtype": "BOOL", "shape": [1], "data_offsets": [36, 37]},
               "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [37, 37]}}
    meta = {"format": "pt", "tformer.config": json.dumps({"d_model": 8, "n_layers": 1}), "plain": "text"}
    write("safetensors", "valid_types.safetensors", safetensors(entries, meta, data))
    write("safetensors", "valid_no_metadata.safetensors", safetensors({"w": entries["w"]}, None, data[:24]))
    write("safetensors", "valid_empty.safetensors", safetensors({}, None))
    write("safetensors", "near_overlap.safetensors",
          safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, None, data[:12]))
    write("safetensors", "near_short_data.safetensors", safetensors(entries, meta, data[:30]))
    write("safetensors", "near_wrong_size.safetensors",
          safetensors({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]}}, None, data[:24]))
    write("safetensors", "near_header_too_long.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    write("safetensors", "near_bad_json.safetensors", struct.pack("<Q", 8) + b'{"w":{  ')


# ---- model files, configs and training checkpoints ------------------------------------------------


def config_tensors(c):
    """The tensors of a tformer model config (model/params.h), in checkpoint order."""
    d, V, L = c["d_model"], c["vocab_size"], c.get("n_layers", 4)
    h = c.get("n_heads", 4)
    kv = c.get("n_kv_heads", h)
    hd = d // h
    ff = c.get("d_ff", 4 * d)
    ln = c.get("norm", "layernorm") == "layernorm"
    bias = c.get("bias", True)
    out = [("tok_embeddings.weight", [V, d])]
    if c.get("positions", "learned") == "learned":
        out.append(("pos_embeddings.weight", [c.get("context_length", 256), d]))
    for i in range(L):
        p = f"layers.{i}."

        def lin(name, o, n):
            out.append((p + name + ".weight", [o, n]))
            if bias:
                out.append((p + name + ".bias", [o]))
        out.append((p + "attn_norm.weight", [d]))
        if ln:
            out.append((p + "attn_norm.bias", [d]))
        lin("attn.wq", h * hd, d)
        lin("attn.wk", kv * hd, d)
        lin("attn.wv", kv * hd, d)
        lin("attn.wo", d, h * hd)
        out.append((p + "ffn_norm.weight", [d]))
        if ln:
            out.append((p + "ffn_norm.bias", [d]))
        lin("ffn.w1", ff, d)
        lin("ffn.w2", d, ff)
        if c.get("activation", "gelu") == "swiglu":
            lin("ffn.w3", ff, d)
    if c.get("norm_placement", "pre") == "pre":
        out.append(("norm.weight", [d]))
        if ln:
            out.append(("norm.bias", [d]))
    if not c.get("tied_embeddings", True):
        out.append(("output.weight", [V, d]))
    return out


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def f32_tensors(tensors, dtype="F32"):
    """(entries, data) of safetensors F32 tensors filled with small deterministic values."""
    entries, data = {}, b""
    for k, (name, shape) in enumerate(tensors):
        n = numel(shape)
        vals = [((i * 7 + k * 3) % 11 - 5) * 0.01 for i in range(n)]
        blob = f32(*vals) if dtype == "F32" else struct.pack(f"<{n}e", *vals)
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    return entries, data


TINY = {"vocab_size": 4, "context_length": 4, "d_model": 4, "n_layers": 1, "n_heads": 1}
CHAR4 = {"kind": "char", "version": 1, "bytes": [10, 97, 98, 99]}


def model_file(config, tokenizer=CHAR4, tensors=None, extra_meta=None, dtype="F32"):
    entries, data = f32_tensors(config_tensors(config) if tensors is None else tensors, dtype)
    meta = {"config": json.dumps(config)}
    if tokenizer is not None:
        meta["tokenizer"] = json.dumps(tokenizer)
    meta.update(extra_meta or {})
    return safetensors(entries, meta, data)


def model_seeds():
    llama = dict(TINY, n_heads=2, n_kv_heads=1, norm="rmsnorm", positions="rope", activation="swiglu",
                 bias=False, tied_embeddings=False, d_ff=8)
    variants = {
        "valid_gpt2_like": TINY,
        "valid_llama_like": llama,
        "valid_post_ln_sinusoidal": dict(TINY, norm_placement="post", positions="sinusoidal", activation="gelu_tanh"),
        "valid_no_positions_adjacent": dict(TINY, positions="rope", rope_pairing="adjacent", n_heads=2),
        "valid_two_layers": dict(TINY, n_layers=2, d_ff=4, dropout=0.1, norm_eps=1e-6),
    }
    for name, c in variants.items():
        write("model", name + ".safetensors", model_file(c))
    write("model", "valid_no_tokenizer.safetensors", model_file(TINY, tokenizer=None))
    write("model", "valid_chat_template.safetensors", model_file(TINY, extra_meta={"chat_template": "{{ x }}"}))
    bpe = {"kind": "byte-bpe", "version": 1, "pattern": "gpt2", "bytes": list(range(256)), "merges": [[97, 98]],
           "special_tokens": {"<|endoftext|>": 257}}
    write("model", "valid_byte_bpe.safetensors", model_file(dict(TINY, vocab_size=258), tokenizer=bpe))
    ts = config_tensors(TINY)
    write("model", "near_missing_tensor.safetensors", model_file(TINY, tensors=ts[:-1]))
    write("model", "near_extra_tensor.safetensors", model_file(TINY, tensors=ts + [("extra.weight", [2])]))
    write("model", "near_wrong_shape.safetensors",
          model_file(TINY, tensors=[(ts[0][0], [4, 3])] + ts[1:]))
    write("model", "near_f16.safetensors", model_file(TINY, dtype="F16"))
    write("model", "near_vocab_mismatch.safetensors", model_file(TINY, tokenizer=dict(CHAR4, bytes=[97, 98, 99])))
    write("model", "near_unknown_key.safetensors", model_file(dict(TINY, colour="blue")))
    write("model", "near_bad_heads.safetensors", model_file(dict(TINY, n_heads=3)))
    write("model", "near_config_not_json.safetensors",
          safetensors(f32_tensors(ts)[0], {"config": "{\"d_model\": 4", "tokenizer": json.dumps(CHAR4)},
                      f32_tensors(ts)[1]))
    write("model", "near_no_config.safetensors", safetensors(*[f32_tensors(ts)[0]], {"tokenizer": json.dumps(CHAR4)},
                                                            data=f32_tensors(ts)[1]))
    # A config far larger than the tensors the file holds (its weights would take 4 GB).
    write("model", "near_huge_config.safetensors",
          model_file(dict(TINY, vocab_size=4, d_model=4096, n_layers=16, n_heads=32), tensors=ts))

    configs = {
        "valid_defaults.json": {},
        "valid_tiny.json": TINY,
        "valid_llama.json": llama,
        "valid_every_key.json": {"vocab_size": 100, "context_length": 64, "d_model": 32, "n_layers": 2,
                                 "n_heads": 4, "n_kv_heads": 2, "d_ff": 48, "norm": "rmsnorm",
                                 "norm_placement": "pre", "positions": "rope", "rope_base": 500000.0,
                                 "rope_pairing": "adjacent", "activation": "swiglu", "bias": False,
                                 "tied_embeddings": False, "dropout": 0.1, "norm_eps": 1e-6},
        "valid_sinusoidal_post.json": {"positions": "sinusoidal", "norm_placement": "post", "activation": "gelu_tanh"},
        "near_unknown_key.json": {"d_model": 64, "colour": 1},
        "near_wrong_type.json": {"d_model": "64"},
        "near_float_size.json": {"d_model": 64.5},
        "near_negative.json": {"n_layers": -1},
        "near_indivisible.json": {"d_model": 10, "n_heads": 3},
        "near_kv_indivisible.json": {"n_heads": 4, "n_kv_heads": 3},
        "near_odd_rope.json": {"d_model": 12, "n_heads": 4, "positions": "rope"},
        "near_bad_enum.json": {"norm": "batchnorm"},
        "near_dropout_one.json": {"dropout": 1.0},
        "near_huge_vocab.json": {"vocab_size": 1 << 40},
        "near_huge_sizes.json": {"d_model": 1 << 40, "n_layers": 1 << 40, "n_heads": 1},
        "near_eps_zero.json": {"norm_eps": 0},
        "near_rope_base_one.json": {"rope_base": 1, "positions": "rope"},
    }
    for name, c in configs.items():
        write("model_config", name, json.dumps(c).encode())
    write("model_config", "near_array.json", b"[1, 2]")
    write("model_config", "near_null.json", b"null")


def checkpoint_seeds():
    ts = config_tensors(TINY)
    everything = ts + [("optimizer.m." + n, s) for n, s in ts] + [("optimizer.v." + n, s) for n, s in ts]
    options = {"data": "train.txt", "tokenizer": "char", "steps": 10, "batch": 2, "lr": 0.001, "seed": 7,
               "eval_every": 5, "attention": "tiled"}
    state = {"step": 3, "optimizer_steps": 3, "sampler_state": [1, 2, 3, 4], "options": options}

    def ckpt(name, tensors=everything, st=state, config=TINY, tok=CHAR4, meta=None):
        m = {"train_state": json.dumps(st)}
        m.update(meta or {})
        write("checkpoint", name, model_file(config, tokenizer=tok, tensors=tensors, extra_meta=m))
    ckpt("valid.safetensors")
    ckpt("valid_chat_template.safetensors", meta={"chat_template": "{{ messages }}"})
    ckpt("valid_all_options.safetensors", st=dict(state, options=dict(options, val_fraction=0.0, grad_accum=2,
                                                                        min_lr=1e-5, warmup=2, weight_decay=0.0)))
    ckpt("near_missing_moment.safetensors", tensors=everything[:-1])
    ckpt("near_moment_shape.safetensors", tensors=everything[:-1] + [(everything[-1][0], [3])])
    ckpt("near_no_sampler_state.safetensors", st={k: v for k, v in state.items() if k != "sampler_state"})
    ckpt("near_sampler_state_3.safetensors", st=dict(state, sampler_state=[1, 2, 3]))
    ckpt("near_unknown_option.safetensors", st=dict(state, options=dict(options, colour="red")))
    ckpt("near_option_type.safetensors", st=dict(state, options=dict(options, steps="ten")))
    ckpt("near_bad_option_value.safetensors", st=dict(state, options=dict(options, batch=0)))
    ckpt("near_no_options.safetensors", st={k: v for k, v in state.items() if k != "options"})
    ckpt("near_vocab_mismatch.safetensors", tok=dict(CHAR4, bytes=[97, 98]))
    ckpt("near_weights_only.safetensors", tensors=ts)
    write("checkpoint", "near_no_train_state.safetensors", model_file(TINY))


# ---- tokenizer files ---------------------------------------------------------------------------


def gpt2_alphabet():
    """GPT-2's bytes_to_unicode: byte -> the character that spells it in encoder.json and vocab.bpe."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_files_seeds(root):
    enc_path, bpe_path = os.path.join(root, "build-data/gpt2/encoder.json"), os.path.join(root, "build-data/gpt2/vocab.bpe")
    if not (os.path.exists(enc_path) and os.path.exists(bpe_path)):
        print("make_seeds: no build-data/gpt2 (scripts/fetch-gpt2-vocab.sh); gpt2_files seeds skipped")
        return
    enc = json.load(open(enc_path, encoding="utf-8"))
    merges = open(bpe_path, encoding="utf-8").read().split("\n")[1:]

    def pair(n, encoder=None, vocab=None):
        if encoder is None:
            inv = sorted((i, t) for t, i in enc.items() if i < 256 + n)
            encoder = {t: i for i, t in inv}
            encoder["<|endoftext|>"] = 256 + n
        if vocab is None:
            vocab = "#version: 0.2\n" + "".join(m + "\n" for m in merges[:n])
        e = encoder if isinstance(encoder, bytes) else json.dumps(encoder, ensure_ascii=False).encode()
        return e + b"\0" + (vocab if isinstance(vocab, bytes) else vocab.encode())
    write("gpt2_files", "valid_40_merges", pair(40))
    write("gpt2_files", "valid_no_merges", pair(0))
    inv = {i: t for t, i in enc.items()}
    small = {inv[i]: i for i in range(256 + 12)}
    small["<|endoftext|>"] = 268
    write("gpt2_files", "valid_12_merges_crlf", pair(12, vocab="#version: 0.2\r\n" + "".join(m + "\r\n" for m in merges[:12])))
    write("gpt2_files", "near_no_header", pair(12, vocab="".join(m + "\n" for m in merges[:12])))
    write("gpt2_files", "near_unknown_part", pair(12, vocab="#version: 0.2\n" + "".join(m + "\n" for m in merges[:11]) + "zz qq\n"))
    write("gpt2_files", "near_duplicate_merge", pair(12, vocab="#version: 0.2\n" + "".join(m + "\n" for m in merges[:11]) + merges[0] + "\n"))
    write("gpt2_files", "near_merge_three_parts", pair(12, vocab="#version: 0.2\n" + "".join(m + "\n" for m in merges[:11]) + "a b c\n"))
    gap = dict(small)
    gap["<|endoftext|>"] = 300
    write("gpt2_files", "near_id_gap", pair(12, encoder=gap))
    wrong = dict(small)
    wrong[inv[256]], wrong[inv[257]] = 257, 256
    write("gpt2_files", "near_ids_swapped", pair(12, encoder=wrong))
    write("gpt2_files", "near_bad_json", pair(12, encoder=json.dumps(small, ensure_ascii=False).encode()[:-9]))
    write("gpt2_files", "near_no_nul", json.dumps(small, ensure_ascii=False).encode())
    stray = dict(small)
    stray["notatoken"] = 269
    write("gpt2_files", "near_stray_token", pair(12, encoder=stray))
    write("gpt2_files", "near_not_object", pair(12, encoder=b"[1, 2, 3]"))


def tiktoken_seeds(root):
    for enc in ("cl100k_base", "o200k_base"):
        path = os.path.join(root, f"build-data/tiktoken/{enc}.json")
        if not os.path.exists(path):
            print(f"make_seeds: no build-data/tiktoken/{enc}.json (scripts/fetch-tiktoken-vocab.sh); skipped")
            return
        j = json.load(open(path))
        words = j["bpe_ranks"].split(" ")
        # "! 0" and the first 256 + 40 tokens.
        head = words[:2 + 256 + 40]

        def file(ranks, specials=None, pat=j["pat_str"]):
            return json.dumps({"pat_str": pat, "special_tokens": {"<|endoftext|>": 296} if specials is None else specials,
                               "bpe_ranks": " ".join(ranks)}).encode()
        short = enc.split("_")[0]
        write("tiktoken", f"valid_{short}_296.json", file(head))
        if enc == "o200k_base":
            continue
        write("tiktoken", "valid_two_runs.json", file(head[:2 + 260] + ["!", "260"] + head[2 + 260:]))
        write("tiktoken", "valid_no_specials.json", file(head[:2 + 256], specials={}))
        write("tiktoken", "near_run_offset.json", file(head[:2 + 260] + ["!", "250"] + head[2 + 260:]))
        write("tiktoken", "near_duplicate_rank.json", file(head + [head[2 + 256]]))
        write("tiktoken", "near_not_a_merge.json", file(head + [base64.b64encode(b"zqx!").decode()]))
        write("tiktoken", "near_only_255.json", file(head[:2 + 255], specials={}))
        write("tiktoken", "near_other_pattern.json", file(head, pat="\\s+"))
        write("tiktoken", "near_special_gap.json", file(head, specials={"<|endoftext|>": 400}))
        write("tiktoken", "near_special_string.json", file(head, specials={"<|endoftext|>": "296"}))
        write("tiktoken", "near_bad_base64.json", file(head + ["@@@="]))
        write("tiktoken", "near_empty_token.json", file(head + ["="]))


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb(field, wire, payload):
    key = varint(field << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    if wire == 5:
        return key + payload
    raise ValueError(wire)


def spm_piece(text, score, typ=1):
    return pb(1, 2, pb(1, 2, text.encode()) + pb(2, 5, struct.pack("<f", score)) + pb(3, 0, typ))


def spm_model(pieces, model_type=2, byte_fallback=False, norm=None, trainer_extra=b""):
    out = b"".join(spm_piece(*p) for p in pieces)
    out += pb(2, 2, pb(3, 0, model_type) + (pb(35, 0, 1) if byte_fallback else b"") + trainer_extra)
    if norm is not None:
        out += pb(3, 2, norm)
    return out


def sentencepiece_seeds():
    base = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    words = [("\u2581t", -1.0), ("he", -2.0), ("\u2581the", -3.0), ("\u2581a", -4.0), ("in", -5.0)]
    chars = [(c, -10.0 - i) for i, c in enumerate("\u2581theainsrdo")]
    bytes_ = [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    ident = pb(1, 2, b"identity") + pb(3, 0, 1) + pb(4, 0, 0) + pb(5, 0, 1)
    write("sentencepiece", "valid_bpe.model", spm_model(base + [(*w, 1) for w in words + chars], norm=ident))
    write("sentencepiece", "valid_byte_fallback.model",
          spm_model(base + bytes_ + [(*w, 1) for w in words + chars], byte_fallback=True, norm=ident))
    write("sentencepiece", "valid_user_defined_unused.model",
          spm_model(base + [("<sep>", 0.0, 4), ("\u2581th", -0.5, 5)] + [(*w, 1) for w in words + chars],
                    norm=pb(1, 2, b"identity") + pb(3, 0, 0)))
    write("sentencepiece", "valid_suffix_unk_surface.model",
          spm_model(base + [(*w, 1) for w in words + chars],
                    trainer_extra=pb(24, 0, 1) + pb(44, 2, "?".encode())))
    good = spm_model(base + [(*w, 1) for w in words + chars], norm=ident)
    write("sentencepiece", "near_truncated.model", good[:-5])
    write("sentencepiece", "near_unigram.model", spm_model(base + [(*w, 1) for w in words], model_type=1))
    write("sentencepiece", "near_no_trainer_spec.model", b"".join(spm_piece(*p) for p in base))
    write("sentencepiece", "near_no_pieces.model", pb(2, 2, pb(3, 0, 2)))
    write("sentencepiece", "near_piece_type_9.model", spm_model(base + [("x", 0.0, 9)]))
    write("sentencepiece", "near_score_wire_type.model",
          pb(1, 2, pb(1, 2, b"x") + pb(2, 0, 5)) + pb(2, 2, pb(3, 0, 2)))
    write("sentencepiece", "near_length_past_end.model", b"\x0a\xff\xff\x03" + good)
    write("sentencepiece", "near_group_wire_type.model", b"\x0b" + good)
    write("sentencepiece", "near_duplicate_piece.model", spm_model(base + [("he", -1.0, 1), ("he", -2.0, 1)]))
    write("sentencepiece", "near_no_unk.model", spm_model([("he", -1.0, 1), ("h", -2.0, 1)]))
    write("sentencepiece", "near_bad_charsmap.model",
          spm_model(base + [(*w, 1) for w in words + chars],
                    norm=pb(1, 2, b"nmt_nfkc") + pb(2, 2, struct.pack("<I", 1 << 20) + b"\0" * 8)))
    write("sentencepiece", "near_small_charsmap.model",
          spm_model(base + [(*w, 1) for w in words + chars],
                    norm=pb(1, 2, b"nmt_nfkc") + pb(2, 2, struct.pack("<I", 8) + struct.pack("<2I", 0, 0) + b"a\0")))


def gguf_tokenizer_seeds():
    alpha = gpt2_alphabet()
    toks = [alpha[b] for b in range(256)] + ["\u0120t", "he", "\u0120the", "<|endoftext|>"]
    types = [1] * 259 + [3]
    merges = ["\u0120 t", "h e", "\u0120t he"]
    gpt2 = [("general.architecture", 8, "gpt2"), ("tokenizer.ggml.model", 8, "gpt2"),
            ("tokenizer.ggml.pre", 8, "gpt-2"), ("tokenizer.ggml.tokens", 9, (8, toks)),
            ("tokenizer.ggml.token_type", 9, (5, types)), ("tokenizer.ggml.merges", 9, (8, merges)),
            ("tokenizer.ggml.bos_token_id", 4, 259), ("tokenizer.ggml.eos_token_id", 4, 259),
            ("tokenizer.ggml.add_bos_token", 7, False)]
    write("gguf_tokenizer", "valid_gpt2.gguf", gguf(gpt2, []))
    write("gguf_tokenizer", "valid_gpt2_default_pre.gguf",
          gguf([kv if kv[0] != "tokenizer.ggml.pre" else ("tokenizer.ggml.pre", 8, "default") for kv in gpt2], []))
    write("gguf_tokenizer", "valid_char.gguf", gguf(gpt2[:3] + [("tokenizer.ggml.tokens", 9, (8, toks[:256])),
                                                              ("tokenizer.ggml.token_type", 9, (5, [1] * 256)),
                                                              ("tokenizer.ggml.merges", 9, (8, []))], []))
    write("gguf_tokenizer", "valid_none.gguf", gguf(gpt2[:1], []))
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581t", "he", "\u2581the", "t", "h", "e", "\u2581"]
    ptypes = [2, 3, 3] + [6] * 256 + [1] * 7
    scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]
    llama = [("general.architecture", 8, "llama"), ("tokenizer.ggml.model", 8, "llama"),
             ("tokenizer.ggml.tokens", 9, (8, pieces)), ("tokenizer.ggml.scores", 9, (6, scores)),
             ("tokenizer.ggml.token_type", 9, (5, ptypes)), ("tokenizer.ggml.bos_token_id", 4, 1),
             ("tokenizer.ggml.eos_token_id", 4, 2), ("tokenizer.ggml.unknown_token_id", 4, 0),
             ("tokenizer.ggml.add_bos_token", 7, True), ("tokenizer.ggml.add_space_prefix", 7, True)]
    write("gguf_tokenizer", "valid_llama.gguf", gguf(llama, []))
    write("gguf_tokenizer", "valid_llama_no_bytes.gguf",
          gguf(llama[:2] + [("tokenizer.ggml.tokens", 9, (8, pieces[:3] + pieces[259:])),
                            ("tokenizer.ggml.scores", 9, (6, scores[:3] + scores[259:])),
                            ("tokenizer.ggml.token_type", 9, (5, ptypes[:3] + ptypes[259:])),
                            ("tokenizer.ggml.add_space_prefix", 7, False)], []))

    def swap(kvs, key, t, v):
        return [(k, t, v) if k == key else (k, tt, vv) for k, tt, vv in kvs]
    write("gguf_tokenizer", "near_unknown_model.gguf", gguf(swap(gpt2, "tokenizer.ggml.model", 8, "bert"), []))
    write("gguf_tokenizer", "near_unknown_pre.gguf", gguf(swap(gpt2, "tokenizer.ggml.pre", 8, "falcon"), []))
    write("gguf_tokenizer", "near_merge_unknown.gguf", gguf(swap(gpt2, "tokenizer.ggml.merges", 9, (8, ["x y"])), []))
    write("gguf_tokenizer", "near_types_short.gguf", gguf(swap(gpt2, "tokenizer.ggml.token_type", 9, (5, [1] * 10)), []))
    write("gguf_tokenizer", "near_eos_out_of_range.gguf", gguf(swap(gpt2, "tokenizer.ggml.eos_token_id", 4, 5000), []))
    write("gguf_tokenizer", "near_tokens_not_strings.gguf", gguf(swap(gpt2, "tokenizer.ggml.tokens", 9, (4, [1, 2])), []))
    write("gguf_tokenizer", "near_scores_short.gguf", gguf(swap(llama, "tokenizer.ggml.scores", 9, (6, [0.0])), []))
    write("gguf_tokenizer", "near_type_7.gguf", gguf(swap(llama, "tokenizer.ggml.token_type", 9, (5, [7] * len(pieces))), []))
    write("gguf_tokenizer", "near_bos_out_of_range.gguf", gguf(swap(llama, "tokenizer.ggml.bos_token_id", 4, 9999), []))
    write("gguf_tokenizer", "near_add_bos_not_bool.gguf", gguf(swap(llama, "tokenizer.ggml.add_bos_token", 4, 1), []))


# ---- Hugging Face folders (the fixed files are fuzz/fuzz_hf_util.h's) --------------------------------

GPT2_TENSORS = ["transformer.wte.weight", "transformer.wpe.weight"] + [
    "transformer.h.0." + n for n in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                     "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
] + ["transformer.ln_f.weight", "transformer.ln_f.bias"]
LLAMA_TENSORS = ["model.embed_tokens.weight"] + ["model.layers.0." + n for n in [
    "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight"]] + ["model.norm.weight", "lm_head.weight"]


def hf_seeds(root):
    gpt2 = {"model_type": "gpt2", "vocab_size": 260, "n_embd": 4, "n_layer": 1, "n_head": 1, "n_positions": 4}
    llama = {"model_type": "llama", "vocab_size": 260, "hidden_size": 4, "num_hidden_layers": 1,
             "num_attention_heads": 1, "intermediate_size": 8}
    configs = {
        "valid_gpt2.json": gpt2,
        "valid_gpt2_full.json": dict(gpt2, architectures=["GPT2LMHeadModel"], activation_function="gelu",
                                     layer_norm_epsilon=1e-5, n_inner=None, tie_word_embeddings=True,
                                     scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False),
        "valid_llama.json": llama,
        "valid_llama_full.json": dict(llama, num_key_value_heads=1, max_position_embeddings=16, rope_theta=500000.0,
                                      rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
                                      attention_bias=False, mlp_bias=False, rope_scaling=None, head_dim=4),
        "near_gpt2_untied.json": dict(gpt2, tie_word_embeddings=False),
        "near_gpt2_activation.json": dict(gpt2, activation_function="relu"),
        "near_gpt2_inverse_layer_idx.json": dict(gpt2, scale_attn_by_inverse_layer_idx=True),
        "near_gpt2_missing.json": {k: v for k, v in gpt2.items() if k != "n_head"},
        "near_gpt2_negative.json": dict(gpt2, n_embd=-4),
        "near_gpt2_string.json": dict(gpt2, n_layer="1"),
        "near_gpt2_heads.json": dict(gpt2, n_head=3),
        "near_llama_rope_scaling.json": dict(llama, rope_scaling={"type": "linear", "factor": 2.0}),
        "near_llama_head_dim.json": dict(llama, head_dim=2),
        "near_llama_act.json": dict(llama, hidden_act="gelu"),
        "near_llama_bias.json": dict(llama, attention_bias=True),
        "near_llama_sliding.json": dict(llama, sliding_window=4),
        "near_bert.json": {"model_type": "bert", "vocab_size": 260},
        # Sizes whose weights (about 1 GB) the folder does not hold.
        "near_gpt2_huge.json": dict(gpt2, n_embd=2048, n_layer=8, n_head=16, n_positions=2048),
    }
    for name, c in configs.items():
        write("hf_config", name, json.dumps(c).encode())
    write("hf_config", "near_not_object.json", b"[]")
    write("hf_config", "near_not_json.json", b"{\"model_type\": ")

    alpha = gpt2_alphabet()
    vocab = {alpha[b]: i for i, b in enumerate(range(256))}
    vocab.update({"\u0120t": 256, "he": 257, "\u0120the": 258})
    tok = {"version": "1.0", "added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": True}],
           "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": ["\u0120 t", "h e", "\u0120t he"]}}

    def tj(name, t):
        write("hf_tokenizer", name, json.dumps(t, ensure_ascii=False).encode())
    tj("valid_string_merges.json", tok)
    tj("valid_pair_merges.json", dict(tok, model=dict(tok["model"], merges=[["\u0120", "t"], ["h", "e"], ["\u0120t", "he"]])))
    tj("near_normalizer.json", dict(tok, normalizer={"type": "NFC"}))
    tj("near_wordpiece.json", dict(tok, model=dict(tok["model"], type="WordPiece")))
    tj("near_prefix_space.json", dict(tok, pre_tokenizer=dict(tok["pre_tokenizer"], add_prefix_space=True)))
    tj("near_metaspace.json", dict(tok, pre_tokenizer={"type": "Metaspace"}))
    tj("near_merge_number.json", dict(tok, model=dict(tok["model"], merges=["\u0120 t", 7])))
    tj("near_merge_unknown.json", dict(tok, model=dict(tok["model"], merges=["\u0120 t", "q z", "\u0120t he"])))
    tj("near_vocab_array.json", dict(tok, model=dict(tok["model"], vocab=[1, 2])))
    tj("near_vocab_size_mismatch.json", dict(tok, added_tokens=[]))
    tj("near_added_id_gap.json", dict(tok, added_tokens=[{"id": 300, "content": "<|endoftext|>"}]))
    write("hf_tokenizer", "near_not_json.json", b"{\"model\": {\"type\": \"BPE\"")

    def index(name, wm, extra=None):
        j = {"metadata": {"total_size": 5000}, "weight_map": wm}
        j.update(extra or {})
        write("shard_index", name, json.dumps(j).encode())
    for kind, names in (("gpt2", GPT2_TENSORS), ("llama", LLAMA_TENSORS)):
        wm = {n: f"model-0000{1 if i < 4 else 2}-of-00002.safetensors" for i, n in enumerate(names)}
        index(f"valid_{kind}.json", wm)
        if kind == "llama":
            continue
        index("near_wrong_shard.json", dict(wm, **{names[0]: "model-00002-of-00002.safetensors"}))
        index("near_missing_entry.json", {n: f for n, f in wm.items() if n != names[-1]})
        index("near_missing_file.json", dict(wm, **{names[-1]: "model-00003-of-00003.safetensors"}))
        index("near_path_in_name.json", dict(wm, **{names[-1]: "../model-00002-of-00002.safetensors"}))
        index("near_not_a_string.json", dict(wm, **{names[-1]: 2}))
        index("near_config_as_shard.json", dict(wm, **{"extra": "config.json"}))
        index("near_extra_entry.json", dict(wm, **{"lm_head.weight": "model-00002-of-00002.safetensors"}))
    write("shard_index", "near_no_weight_map.json", b'{"metadata": {}}')
    write("shard_index", "near_weight_map_array.json", b'{"weight_map": []}')
    write("shard_index", "near_not_json.json", b'{"weight_map": {"a": ')


# ---- the server, chat templates and token ids ----------------------------------------------------


def serve_seeds():
    reqs = {
        "valid_completion": ("/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0}),
        "valid_completion_ids": ("/v1/completions", {"prompt": [72, 101, 108], "max_tokens": 3, "seed": 5,
                                                     "top_k": 3, "top_p": 0.9, "logprobs": 2, "n": 2, "stop": ["l"]}),
        "valid_completion_stream": ("/v1/completions", {"prompt": ["Hi"], "max_tokens": 5, "stream": True,
                                                        "stream_options": {"include_usage": True}}),
        "valid_completion_empty": ("/completions", {"prompt": "", "max_tokens": 2, "model": "tiny"}),
        "valid_chat": ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hi"}],
                                                "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 2}),
        "valid_chat_parts": ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "stream": True, "max_tokens": 3,
            "stop": "x"}),
        "valid_tokenize": ("/tokenize", {"content": "Hello, world", "add_special": False}),
        "valid_detokenize": ("/detokenize", {"tokens": [72, 105, 33]}),
        "near_prompt_too_long": ("/v1/completions", {"prompt": "x" * 20}),
        "near_max_tokens_over": ("/v1/completions", {"prompt": "Hi", "max_tokens": 15}),
        "near_temperature_string": ("/v1/completions", {"prompt": "Hi", "temperature": "hot"}),
        "near_top_p_zero": ("/v1/completions", {"prompt": "Hi", "top_p": 0}),
        "near_n_too_many": ("/v1/completions", {"prompt": "Hi", "n": 9}),
        "near_stop_empty": ("/v1/completions", {"prompt": "Hi", "stop": [""]}),
        "near_stop_too_many": ("/v1/completions", {"prompt": "Hi", "stop": list("abcdefghi")}),
        "near_prompt_id_range": ("/v1/completions", {"prompt": [300]}),
        "near_seed_huge": ("/v1/completions", {"prompt": "Hi", "seed": 18446744073709551615}),
        "near_wrong_model": ("/v1/completions", {"prompt": "Hi", "model": "other"}),
        "near_messages_empty": ("/v1/chat/completions", {"messages": []}),
        "near_message_image": ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]}),
        "near_role_number": ("/v1/chat/completions", {"messages": [{"role": 1, "content": "x"}]}),
        "near_stream_options": ("/v1/completions", {"prompt": "Hi", "stream_options": True}),
        "near_tokenize_number": ("/tokenize", {"content": 5}),
        "near_detokenize_float": ("/detokenize", {"tokens": [1.5]}),
        "near_detokenize_range": ("/detokenize", {"tokens": [-1]}),
    }
    for name, (path, body) in reqs.items():
        write("serve_request", name, (path + "\n" + json.dumps(body)).encode())
    write("serve_request", "near_not_json", b"/v1/completions\n{\"prompt\": ")
    write("serve_request", "near_array_body", b"/v1/chat/completions\n[1]")
    write("serve_request", "near_deep", b"/tokenize\n" + b"[" * 40 + b"]" * 40)
    write("serve_request", "near_no_route", b"/v2/everything\n{}")

    heads = {
        "valid_post": "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 2\r\n\r\n{}",
        "valid_get_query": "GET /v1/models?x=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "valid_expect": "POST /tokenize HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n"
                        "Authorization:   Bearer k \t\r\n\r\n",
        "valid_close": "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
        "near_version": "GET / HTTP/2.0\r\n\r\n",
        "near_target": "GET v1 HTTP/1.1\r\n\r\n",
        "near_request_line": "GET /  HTTP/1.1\r\n\r\n",
        "near_header_space": "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        "near_header_colon": "GET / HTTP/1.1\r\n: x\r\n\r\n",
        "near_chunked": "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "near_length_text": "POST / HTTP/1.1\r\nContent-Length: 12a\r\n\r\n",
        "near_length_huge": "POST / HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\n",
        "near_too_many_headers": "GET / HTTP/1.1\r\n" + "".join(f"h{i}: v\r\n" for i in range(70)) + "\r\n",
        "near_long_line": "GET /" + "a" * 8200 + " HTTP/1.1\r\n\r\n",
    }
    for name, text in heads.items():
        write("http_request", name, text.encode())

    templates = {
        "valid_plain.txt": "message: {role}: {content}\\n\ngeneration: assistant:\nstop: \\nuser:\n",
        "valid_chatml.txt": "# ChatML\nprefix: \nmessage: <|im_start|>{role}\\n{content}<|im_end|>\\n\n"
                            "generation: <|im_start|>assistant\\n\nstop: <|im_end|>\nstop: <|im_start|>\n",
        "valid_roles.txt": "prefix: <s>\nmessage: [{role}] {content}\\n\nmessage.system: <<SYS>>{content}<</SYS>>\\s\n"
                           "message.user: [INST] {content} [/INST]\ngeneration:\\t\r\nstop: </s>\r\n",
        "near_no_content.txt": "message: {role}\ngeneration: a:\n",
        "near_no_generation.txt": "message: {content}\n",
        "near_unknown_key.txt": "message: {content}\ngeneration: a\nsuffix: x\n",
        "near_bad_escape.txt": "message: {content}\\q\ngeneration: a\n",
        "near_trailing_backslash.txt": "message: {content}\\\ngeneration: a\n",
        "near_empty_stop.txt": "message: {content}\ngeneration: a\nstop:\n",
        "near_no_colon.txt": "message {content}\ngeneration: a\n",
    }
    for name, text in templates.items():
        write("chat_template", name, text.encode())

    ids = {
        "valid_two": "15496 995",
        "valid_whitespace": "\t1\n2\r\n3\f4\v 5  ",
        "valid_empty": "",
        "valid_max": "2147483647 0 00012",
        "near_negative": "1 -2 3",
        "near_over_int32": "2147483648",
        "near_plus": "+5",
        "near_word": "12 abc",
        "near_hex": "0x10",
        "near_float": "1.5",
        "near_huge": "9" * 40,
    }
    for name, text in ids.items():
        write("token_ids", name, text.encode())


if __name__ == "__main__":
    main()
    root = os.path.dirname(HERE)
    model_seeds()
    checkpoint_seeds()
    gpt2_files_seeds(root)
    tiktoken_seeds(root)
    sentencepiece_seeds()
    gguf_tokenizer_seeds()
    hf_seeds(root)
    serve_seeds()
