#!/usr/bin/env python3
"""Seeds for the token_cache and metrics_jsonl fuzz targets (fuzz/fuzz_token_cache.cpp,
fuzz/fuzz_metrics_jsonl.cpp), from the formats of src/train/data.h alone:

    python3 fuzz/make_seeds_train.py

token_cache: byte 0 picks the mode of the target (0: the whole file; 1: patches to the valid file;
2: the id bytes under the valid header). metrics_jsonl: lines as `tformer train` writes them, and
the damage a killed run or a hand edit leaves.
"""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def header(width=2, key=0x1234, count=3, size=43, mtime=0, content=0, tok=0, begin=0, end=43, special=0,
           vocab=20):
    h = b"TFTOKENS" + struct.pack("<II", 2, width) + struct.pack("<QQQqQQQQ", key, count, size, mtime, content, tok,
                                                                  begin, end)
    h += struct.pack("<II", special, vocab)
    return h + b"\0" * 8  # a checksum the target does not recompute in mode 0


# Mode 0: whole files.
put("token_cache", "empty", b"\0")
put("token_cache", "magic-only", b"\0TFTOKENS")
put("token_cache", "header-no-ids", b"\0" + header(count=0))
put("token_cache", "header-ids", b"\0" + header() + struct.pack("<HHH", 1, 2, 3) + b"\0" * 8)
put("token_cache", "wide", b"\0" + header(width=4, count=2) + struct.pack("<II", 1, 70000) + b"\0" * 8)
put("token_cache", "old-version", b"\0TFTOKENS" + struct.pack("<II", 1, 4) + b"\0" * 40)
put("token_cache", "huge-count", b"\0" + header(count=2**62) + b"\0" * 16)
# Mode 1: (offset, xor) pairs on the valid file, then resealed.
for name, pairs in {
    "width": [(12, 6)],
    "count-up": [(24, 1)],
    "count-huge": [(31, 0x40)],
    "size": [(32, 1)],
    "mtime": [(40, 1)],
    "tokenizer": [(56, 1)],
    "range": [(64, 1), (72, 1)],
    "special": [(80, 1)],
    "vocab-small": [(84, 0x7f)],
    "key": [(16, 1)],
    "id": [(100, 0x7f)],
    "id-high": [(101, 0xff)],
}.items():
    put("token_cache", "patch-" + name, b"\x01" + bytes(b for p in pairs for b in p))
# Mode 2: id bytes under the valid header.
put("token_cache", "ids-valid", b"\x02" + struct.pack("<HHHH", 0, 1, 2, 3))
put("token_cache", "ids-outside", b"\x02" + struct.pack("<HH", 1, 0xffff))
put("token_cache", "ids-odd", b"\x02" + b"\x01\x00\x02")
put("token_cache", "ids-none", b"\x02")

# metrics.jsonl
rec = [
    '{"step":0,"train_loss":4.1147,"val_loss":4.1128,"lr":0,"grad_norm":0,"tokens_per_s":0,"elapsed_s":0}',
    '{"step":10,"train_loss":3.5,"val_loss":3.6,"lr":0.001,"grad_norm":1.5,"tokens_per_s":12000,"elapsed_s":0.5}',
    '{"step":20,"train_loss":3.1,"val_loss":null,"lr":0.0009,"grad_norm":1.2,"tokens_per_s":12500,"elapsed_s":1.0}',
]
put("metrics_jsonl", "run", ("\n".join(rec) + "\n").encode())
put("metrics_jsonl", "unfinished-last-line", ("\n".join(rec) + "\n" + rec[0][:30]).encode())
put("metrics_jsonl", "bad-middle-line", (rec[0] + "\nnot json\n" + rec[1] + "\n").encode())
put("metrics_jsonl", "no-step", b'{"event":"start","config":{"d_model":64}}\n' + (rec[1] + "\n").encode())
put("metrics_jsonl", "array-line", b"[1,2,3]\n")
put("metrics_jsonl", "blank-lines", b"\n\n  \n" + (rec[2] + "\r\n").encode())
put("metrics_jsonl", "strings", b'{"step":"ten","train_loss":"low","val_loss":1e999}\n')
put("metrics_jsonl", "negative-steps", b'{"step":-5,"train_loss":2}\n{"step":1e308,"val_loss":-1}\n')
put("metrics_jsonl", "empty", b"")
