#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/ (fuzz/corpus/<target>/): small valid GGUF and safetensors files,
laid out by hand from the published formats (no tformer code involved), and near-valid ones that
each break one rule. Run from anywhere: python3 fuzz/make_seeds.py. The files are committed."""
import json
import os
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


if __name__ == "__main__":
    main()
