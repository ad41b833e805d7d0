#!/usr/bin/python3
"""Fixtures for tformer's whole decoder, computed by a float64 PyTorch implementation of the model
as docs/checkpoint-format.md (tensor names, shapes, config keys) and src/model/layer.h (the block's
formulas) define it.

Random tiny models cover every value of every config option: not the full product but a pairwise
covering set (every pair of option values appears together in at least one model), chosen by a
deterministic greedy algorithm and checked here. Options:

    norm            layernorm | rmsnorm
    norm_placement  pre | post
    positions       learned | sinusoidal | rope | none
    rope_pairing    adjacent | halves      (only meaningful with rope: paired with rope models only)
    rope_base       10000 | 500            (likewise)
    activation      gelu | gelu_tanh | swiglu
    bias            true | false
    tied_embeddings true | false
    attention       mha (n_kv_heads = n_heads) | gqa (n_kv_heads = n_heads / 2) | mqa (n_kv_heads = 1)

The reference uses torch's own modules where torch has them: F.layer_norm (nn.LayerNorm's function),
F.gelu (exact and approximate="tanh"), F.silu, F.linear (nn.Linear's [out, in] weights), F.softmax.
Where a model's block is one nn.TransformerEncoderLayer can express (layernorm, bias, MHA, no RoPE,
gelu or gelu_tanh), its blocks are ALSO run through nn.TransformerEncoderLayer (norm_first for
pre-LN, batch_first, dropout 0, causal additive mask) loaded with the same weights; this script
asserts the two agree to 1e-12, which ties the hand-written block to torch's module, and the fixture
records the TransformerEncoderLayer's result for those models.

Weights are drawn in float64, rounded to float32 (what the checkpoint stores) and the float64
reference is computed from the rounded values, so the C++ float32 model sees exactly these weights.
Weights have std 0.2 (embeddings 0.1; not GPT-2's 0.02) so the logits vary strongly with the input;
norm gains are 1 + noise and biases are non-zero (see MATRIX_STD for why not larger).

Run with Debian's python3-torch:  /usr/bin/python3 tools/reference/gen_model_fixtures.py
Writes tests/fixtures/models/<name>.safetensors (config in the header's __metadata__, all 17 keys;
no tokenizer) and tests/fixtures/models/cases.json (per case: file, config, batch, T, token ids
[batch * T], torch's float64 logits [batch, T, vocab] flattened). Deterministic: fixed seeds.
"""
import itertools
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "models")

# ---------------------------------------------------------------------------------------------
# The pairwise covering set.

OPTIONS = [
    ("norm", ["layernorm", "rmsnorm"]),
    ("norm_placement", ["pre", "post"]),
    ("positions", ["learned", "sinusoidal", "rope", "none"]),
    ("rope_pairing", ["adjacent", "halves"]),
    ("rope_base", [10000.0, 500.0]),
    ("activation", ["gelu", "gelu_tanh", "swiglu"]),
    ("bias", [True, False]),
    ("tied_embeddings", [True, False]),
    ("attention", ["mha", "gqa", "mqa"]),
]
ROPE_ONLY = {"rope_pairing", "rope_base"}  # meaningful (and paired) only when positions = rope
NAMES = [k for k, _ in OPTIONS]


def pair_applies(cfg, a, b):
    """Whether a config's values of options a and b count as a covered pair."""
    if (a in ROPE_ONLY or b in ROPE_ONLY) and cfg["positions"] != "rope":
        return False
    return True


def required_pairs():
    req = set()
    for (a, va), (b, vb) in itertools.combinations(OPTIONS, 2):
        for x in va:
            for y in vb:
                if (a in ROPE_ONLY and b == "positions" and y != "rope") or (
                        b in ROPE_ONLY and a == "positions" and x != "rope"):
                    continue
                req.add((a, x, b, y))
    return req


def pairs_of(cfg):
    out = set()
    for a, b in itertools.combinations(NAMES, 2):
        if pair_applies(cfg, a, b):
            out.add((a, cfg[a], b, cfg[b]))
    return out


def candidates():
    """Every distinct option assignment, in a fixed order (non-rope models keep the defaults for the
    rope-only options, which they ignore)."""
    seen, out = set(), []
    for values in itertools.product(*[v for _, v in OPTIONS]):
        cfg = dict(zip(NAMES, values))
        if cfg["positions"] != "rope":
            cfg["rope_pairing"], cfg["rope_base"] = "halves", 10000.0
        key = tuple(cfg[n] for n in NAMES)
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def covering_set():
    # Seeds: two models nn.TransformerEncoderLayer can express, one pre-LN (norm_first) and one
    # post-LN, so the module cross-check covers both placements and both GELUs.
    chosen = [
        dict(norm="layernorm", norm_placement="pre", positions="learned", rope_pairing="halves", rope_base=10000.0,
             activation="gelu", bias=True, tied_embeddings=True, attention="mha"),
        dict(norm="layernorm", norm_placement="post", positions="sinusoidal", rope_pairing="halves",
             rope_base=10000.0, activation="gelu_tanh", bias=True, tied_embeddings=False, attention="mha"),
    ]
    uncovered = required_pairs()
    for c in chosen:
        uncovered -= pairs_of(c)
    cands = candidates()
    while uncovered:
        # Greedy: the candidate covering the most uncovered pairs; ties go to the first in order.
        best, best_gain = None, 0
        for c in cands:
            gain = len(pairs_of(c) & uncovered)
            if gain > best_gain:
                best, best_gain = c, gain
        assert best is not None
        chosen.append(best)
        uncovered -= pairs_of(best)
    # The covering property, checked independently of the greedy loop.
    covered = set()
    for c in chosen:
        covered |= pairs_of(c)
    missing = required_pairs() - covered
    assert not missing, f"pairs not covered: {sorted(missing)}"
    return chosen


# ---------------------------------------------------------------------------------------------
# The model, in float64.

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def norm(x, p, prefix, cfg):
    if cfg["norm"] == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), p[prefix + ".weight"], p[prefix + ".bias"], cfg["norm_eps"])
    return rms_norm(x, p[prefix + ".weight"], cfg["norm_eps"])


def sinusoidal(n_positions, d):
    pe = torch.zeros(n_positions, d)
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(torch.tensor(10000.0), i2 / d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def rope(x, base, pairing):
    """x: [B, heads, T, hd], positions 0..T-1. Pair i rotates by pos * base^(-2i/hd)."""
    T, hd = x.shape[2], x.shape[3]
    half = hd // 2
    theta = torch.pow(torch.tensor(base), -2.0 * torch.arange(half, dtype=torch.float64) / hd)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]  # [T, half]
    c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    if pairing == "adjacent":
        a_idx = torch.arange(0, hd, 2)
        b_idx = a_idx + 1
    else:
        a_idx = torch.arange(half)
        b_idx = a_idx + half
    a, b = x[..., a_idx], x[..., b_idx]
    out = x.clone()
    out[..., a_idx] = a * c - b * s
    out[..., b_idx] = a * s + b * c
    return out


def causal_mask(T):
    return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # additive: -inf = not allowed


def attention(u, p, pre, cfg):
    B, T, _ = u.shape
    H, Hkv = cfg["n_heads"], cfg["n_kv_heads"]
    hd = cfg["d_model"] // H
    g = lambda n: p.get(pre + n)  # noqa: E731
    q = F.linear(u, g("attn.wq.weight"), g("attn.wq.bias")).view(B, T, H, hd).transpose(1, 2)
    k = F.linear(u, g("attn.wk.weight"), g("attn.wk.bias")).view(B, T, Hkv, hd).transpose(1, 2)
    v = F.linear(u, g("attn.wv.weight"), g("attn.wv.bias")).view(B, T, Hkv, hd).transpose(1, 2)
    if cfg["positions"] == "rope":
        q = rope(q, cfg["rope_base"], cfg["rope_pairing"])
        k = rope(k, cfg["rope_base"], cfg["rope_pairing"])
    # GQA: query head h reads kv head h // (H / Hkv).
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + causal_mask(T)
    o = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
    return F.linear(o, g("attn.wo.weight"), g("attn.wo.bias"))


def ffn(u, p, pre, cfg):
    g = lambda n: p.get(pre + n)  # noqa: E731
    a = F.linear(u, g("ffn.w1.weight"), g("ffn.w1.bias"))
    if cfg["activation"] == "swiglu":
        act = F.silu(a) * F.linear(u, g("ffn.w3.weight"), g("ffn.w3.bias"))
    elif cfg["activation"] == "gelu":
        act = F.gelu(a)
    else:
        act = F.gelu(a, approximate="tanh")
    return F.linear(act, g("ffn.w2.weight"), g("ffn.w2.bias"))


def block(x, p, i, cfg):
    pre = f"layers.{i}."
    if cfg["norm_placement"] == "pre":
        h = x + attention(norm(x, p, pre + "attn_norm", cfg), p, pre, cfg)
        return h + ffn(norm(h, p, pre + "ffn_norm", cfg), p, pre, cfg)
    h = norm(x + attention(x, p, pre, cfg), p, pre + "attn_norm", cfg)
    return norm(h + ffn(h, p, pre, cfg), p, pre + "ffn_norm", cfg)


def torch_layer_expressible(cfg):
    return (cfg["norm"] == "layernorm" and cfg["bias"] and cfg["n_kv_heads"] == cfg["n_heads"]
            and cfg["positions"] != "rope" and cfg["activation"] in ("gelu", "gelu_tanh"))


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def encoder_layer(p, i, cfg):
    """nn.TransformerEncoderLayer holding layer i's weights."""
    d = cfg["d_model"]
    layer = torch.nn.TransformerEncoderLayer(
        d_model=d, nhead=cfg["n_heads"], dim_feedforward=cfg["d_ff"], dropout=0.0,
        activation="gelu" if cfg["activation"] == "gelu" else gelu_tanh, batch_first=True,
        norm_first=cfg["norm_placement"] == "pre", layer_norm_eps=cfg["norm_eps"])
    g = lambda n: p[f"layers.{i}." + n]  # noqa: E731
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([g("attn.wq.weight"), g("attn.wk.weight"), g("attn.wv.weight")]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([g("attn.wq.bias"), g("attn.wk.bias"), g("attn.wv.bias")]))
        layer.self_attn.out_proj.weight.copy_(g("attn.wo.weight"))
        layer.self_attn.out_proj.bias.copy_(g("attn.wo.bias"))
        layer.norm1.weight.copy_(g("attn_norm.weight"))
        layer.norm1.bias.copy_(g("attn_norm.bias"))
        layer.norm2.weight.copy_(g("ffn_norm.weight"))
        layer.norm2.bias.copy_(g("ffn_norm.bias"))
        layer.linear1.weight.copy_(g("ffn.w1.weight"))
        layer.linear1.bias.copy_(g("ffn.w1.bias"))
        layer.linear2.weight.copy_(g("ffn.w2.weight"))
        layer.linear2.bias.copy_(g("ffn.w2.bias"))
    layer.eval()
    return layer


def model_forward(ids, p, cfg, use_torch_layer=False):
    """ids [B, T] -> logits [B, T, vocab]."""
    T = ids.shape[1]
    x = F.embedding(ids, p["tok_embeddings.weight"])  # not scaled
    if cfg["positions"] == "learned":
        x = x + p["pos_embeddings.weight"][:T]
    elif cfg["positions"] == "sinusoidal":
        x = x + sinusoidal(T, cfg["d_model"])
    for i in range(cfg["n_layers"]):
        if use_torch_layer:
            x = encoder_layer(p, i, cfg)(x, src_mask=causal_mask(T))
        else:
            x = block(x, p, i, cfg)
    if cfg["norm_placement"] == "pre":
        x = norm(x, p, "norm", cfg)
    out_w = p["tok_embeddings.weight"] if cfg["tied_embeddings"] else p["output.weight"]
    return F.linear(x, out_w)


# ---------------------------------------------------------------------------------------------
# Parameters and the checkpoint file.

def parameter_shapes(cfg):
    """(name, shape, kind) in the order tformer declares them; kind: matrix | bias | gain."""
    d, hd = cfg["d_model"], cfg["d_model"] // cfg["n_heads"]
    out = [("tok_embeddings.weight", [cfg["vocab_size"], d], "matrix")]
    if cfg["positions"] == "learned":
        out.append(("pos_embeddings.weight", [cfg["context_length"], d], "matrix"))

    def norm_p(name):
        out.append((name + ".weight", [d], "gain"))
        if cfg["norm"] == "layernorm":
            out.append((name + ".bias", [d], "bias"))

    def linear(name, o, i, with_bias):
        out.append((name + ".weight", [o, i], "matrix"))
        if with_bias:
            out.append((name + ".bias", [o], "bias"))

    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        norm_p(pre + "attn_norm")
        linear(pre + "attn.wq", cfg["n_heads"] * hd, d, cfg["bias"])
        linear(pre + "attn.wk", cfg["n_kv_heads"] * hd, d, cfg["bias"])
        linear(pre + "attn.wv", cfg["n_kv_heads"] * hd, d, cfg["bias"])
        linear(pre + "attn.wo", d, cfg["n_heads"] * hd, cfg["bias"])
        norm_p(pre + "ffn_norm")
        linear(pre + "ffn.w1", cfg["d_ff"], d, cfg["bias"])
        linear(pre + "ffn.w2", d, cfg["d_ff"], cfg["bias"])
        if cfg["activation"] == "swiglu":
            linear(pre + "ffn.w3", cfg["d_ff"], d, cfg["bias"])
    if cfg["norm_placement"] == "pre":
        norm_p("norm")
    if not cfg["tied_embeddings"]:
        out.append(("output.weight", [cfg["vocab_size"], d], "matrix"))
    return out


# Scales. Large enough that attention is far from uniform and the logits spread (std ~0.45 over the
# vocabulary, so a wrong token, position, mask or pairing moves them by ~0.1, not 1e-6), small enough
# that float32 rounding stays inside the test's 1e-6 absolute tolerance on near-zero logits: with
# every matrix at std 0.3, torch's OWN float32 forward of these models is up to 2e-6 off its float64
# result, which a float32 implementation cannot be expected to beat. With these values torch-float32
# stays within half the tolerance on every model.
MATRIX_STD, EMBEDDING_STD, BIAS_STD, GAIN_STD = 0.2, 0.1, 0.1, 0.2


def random_parameters(cfg, gen):
    p = {}
    for name, shape, kind in parameter_shapes(cfg):
        z = torch.randn(shape, generator=gen)
        if kind == "matrix" and name in ("tok_embeddings.weight", "pos_embeddings.weight", "output.weight"):
            t = EMBEDDING_STD * z
        elif kind == "matrix":
            t = MATRIX_STD * z
        elif kind == "bias":
            t = BIAS_STD * z
        else:
            t = 1.0 + GAIN_STD * z
        p[name] = t.float().double()  # float32-representable: exactly what the file holds
    return p


def write_safetensors(path, p, cfg_json):
    header, chunks, offset = {"__metadata__": {"config": cfg_json}}, [], 0
    for name, t in p.items():
        data = t.float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------------------------------------

def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    kv = {"mha": 4, "gqa": 2, "mqa": 1}
    cases, n_torch_layer = [], 0
    for idx, opt in enumerate(covering_set()):
        gen = torch.Generator().manual_seed(1000 + idx)
        d_model = 16 if idx % 2 == 0 else 24
        cfg = {  # all 17 keys, in the documented order
            "vocab_size": 23 + (idx * 7) % 19,  # 23..41
            "context_length": 12,
            "d_model": d_model,
            "n_layers": 2,
            "n_heads": 4,
            "n_kv_heads": kv[opt["attention"]],
            "d_ff": 40,
            "norm": opt["norm"],
            "norm_placement": opt["norm_placement"],
            "positions": opt["positions"],
            "rope_base": opt["rope_base"],
            "rope_pairing": opt["rope_pairing"],
            "activation": opt["activation"],
            "bias": opt["bias"],
            "tied_embeddings": opt["tied_embeddings"],
            "dropout": 0.1 if idx % 3 == 1 else 0.0,  # dropout is training only: must not change logits
            "norm_eps": 1e-5 if idx % 4 != 3 else 1e-6,
        }
        assert len(cfg) == 17
        batch, T = 2, 7 + idx % 4  # 7..10
        p = random_parameters(cfg, gen)
        ids = torch.randint(0, cfg["vocab_size"], (batch, T), generator=gen)
        with torch.no_grad():
            logits = model_forward(ids, p, cfg)
        module_note = ""
        if torch_layer_expressible(cfg):
            via_module = model_forward(ids, p, cfg, use_torch_layer=True).detach()
            diff = (via_module - logits).abs().max().item()
            assert diff <= 1e-12, f"case {idx}: TransformerEncoderLayer and the hand-written block differ by {diff}"
            logits = via_module
            module_note = f" (nn.TransformerEncoderLayer vs hand-written: {diff:.1e})"
            n_torch_layer += 1
        spread = logits.std().item()
        assert spread > 0.25, f"case {idx}: logits nearly constant (std {spread})"
        name = "m{:02d}_{}_{}_{}_{}_{}{}".format(
            idx, "ln" if cfg["norm"] == "layernorm" else "rms", cfg["norm_placement"], cfg["positions"],
            cfg["activation"], opt["attention"], "" if cfg["positions"] != "rope" else "_" + cfg["rope_pairing"])
        file = name + ".safetensors"
        write_safetensors(os.path.join(OUT_DIR, file), p, json.dumps(cfg))
        cases.append({
            "name": name, "file": file, "attention": opt["attention"], "config": cfg,
            "batch": batch, "T": T, "ids": [int(v) for v in ids.reshape(-1).tolist()],
            "logits": [float(v) for v in logits.reshape(-1).tolist()],
            "checked_against_transformer_encoder_layer": torch_layer_expressible(cfg),
        })
        print(f"{name:45s} vocab {cfg['vocab_size']:2d} d {d_model} kv {cfg['n_kv_heads']} "
              f"bias {int(cfg['bias'])} tied {int(cfg['tied_embeddings'])} base {cfg['rope_base']:g} T {T} "
              f"|logit| max {logits.abs().max().item():.3f} std {spread:.3f}{module_note}")
    assert n_torch_layer >= 2
    written = {c["file"] for c in cases}
    for f in os.listdir(OUT_DIR):  # a regenerated set replaces the old one entirely
        if f.endswith(".safetensors") and f not in written:
            os.remove(os.path.join(OUT_DIR, f))
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        json.dump({"generator": "tools/reference/gen_model_fixtures.py", "torch": torch.__version__,
                   "options": {k: v for k, v in OPTIONS}, "rope_only_options": sorted(ROPE_ONLY),
                   "cases": cases}, f)
    print(f"wrote {len(cases)} models ({n_torch_layer} also through nn.TransformerEncoderLayer) to {OUT_DIR}")


if __name__ == "__main__":
    main()
