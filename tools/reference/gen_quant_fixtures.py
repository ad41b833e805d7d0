#!/usr/bin/env python3
"""Writes tests/fixtures/quant/quant_blocks.json: rows of float32 values and their Q8_0, Q4_0 and
BF16 encodings, computed here from ggml's published block formats independently of tformer (numpy
float32 arithmetic; numpy's float16 conversion, round to nearest even, for the scales).

The rules (ggml's reference quantizer, ggml-quants.c quantize_row_q8_0_ref / q4_0_ref):
  Q8_0: d = max|x| / 127, id = 1/d (0 if d == 0), scale fp16(d), q = roundf(x * id) (ties away from 0)
  Q4_0: m = first value of largest |x|, d = m / -8, id = 1/d (0 if d == 0), scale fp16(d),
        q = min(15, trunc(float32(x * id) + 8.5f)); byte j = q[j] | q[j + 16] << 4
  BF16: top 16 bits of the float32 rounded to nearest even (NaN excluded here)
x * id, 1/d, m / -8, max/127 and the + 8.5 are float32 operations, as in C.

    /usr/bin/python3 tools/reference/gen_quant_fixtures.py
"""
import json
import math
import os

import numpy as np

F = np.float32
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "quant", "quant_blocks.json")


def fp16_bits(v):
    return int(np.array([v], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def round_away(v):
    # C's roundf on a float32 value, computed exactly in float64.
    a = math.floor(abs(float(v)) + 0.5)
    return int(math.copysign(a, float(v)))


def q8_0(block):
    amax = F(0)
    for v in block:
        amax = max(amax, F(abs(v)))
    d = F(amax / F(127))
    idv = F(F(1) / d) if d != 0 else F(0)
    qs = [round_away(F(v * idv)) for v in block]
    assert all(-127 <= q <= 127 for q in qs)
    data = fp16_bits(d).to_bytes(2, "little") + bytes((q & 0xFF) for q in qs)
    return data


def q4_0(block):
    amax, m = F(0), F(0)
    for v in block:
        if amax < F(abs(v)):
            amax, m = F(abs(v)), F(v)
    d = F(m / F(-8))
    idv = F(F(1) / d) if d != 0 else F(0)

    def q(v):
        shifted = F(F(v * idv) + F(8.5))
        return min(15, int(math.trunc(float(shifted))))

    data = bytearray(fp16_bits(d).to_bytes(2, "little"))
    for j in range(16):
        data.append(q(block[j]) | (q(block[j + 16]) << 4))
    return bytes(data)


def bf16(values):
    out = bytearray()
    for v in values:
        u = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
        out += ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 & 0xFFFF).to_bytes(2, "little")
    return bytes(out)


def rows():
    rng = np.random.default_rng(20261201)
    out = []
    # Random rows at scales from tiny (fp16 subnormal scales) to large.
    for scale in [1e-6, 3e-3, 0.02, 0.5, 1.0, 7.0, 300.0, 6e4]:
        out.append(("normal_scale_%g" % scale, (rng.standard_normal(96) * scale).astype(F)))
    # Values on exact halves of the quantization grid (ties), both signs.
    out.append(("q8_halves", np.array([127.0] + [k + 0.5 for k in range(-15, 16)], dtype=F)))
    out.append(("q4_halves", np.array([-8.0] + [k / 2 for k in range(-15, 16)], dtype=F)))
    # The largest magnitude negative, positive, and both with equal magnitude (the first decides).
    out.append(("largest_negative", np.array([-3.0] + list(np.linspace(-2.9, 2.9, 31)), dtype=F)))
    out.append(("largest_positive", np.array([3.0] + list(np.linspace(-2.9, 2.9, 31)), dtype=F)))
    out.append(("equal_magnitudes_positive_first", np.array([2.0, -2.0] + [0.25] * 30, dtype=F)))
    out.append(("equal_magnitudes_negative_first", np.array([-2.0, 2.0] + [0.25] * 30, dtype=F)))
    out.append(("all_zero", np.zeros(32, dtype=F)))
    out.append(("one_nonzero", np.array([0.0] * 31 + [-1e-3], dtype=F)))
    out.append(("negative_zeros", np.array([-0.0] * 32, dtype=F)))
    # Heavy-tailed rows like real weights (one outlier per block).
    t = rng.standard_t(3, 128).astype(F) * F(0.05)
    out.append(("heavy_tailed", t))
    return out


def main():
    cases = []
    for name, x in rows():
        x = np.asarray(x, dtype=F)
        assert len(x) % 32 == 0, name
        blocks = [x[i:i + 32] for i in range(0, len(x), 32)]
        cases.append({
            "name": name,
            "values_f32_hex": x.tobytes().hex(),
            "q8_0_hex": b"".join(q8_0(b) for b in blocks).hex(),
            "q4_0_hex": b"".join(q4_0(b) for b in blocks).hex(),
            "bf16_hex": bf16(x).hex(),
        })
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tools/reference/gen_quant_fixtures.py", "cases": cases}, f, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), os.path.relpath(OUT)))


if __name__ == "__main__":
    main()
