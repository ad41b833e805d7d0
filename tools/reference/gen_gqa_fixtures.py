#!/usr/bin/python3
"""Fixtures for `tformer convert --kv-heads K` (src/model/gqa_convert.h): multi-head models, their
key/value heads pooled here in PyTorch, and the float64 logits of the pooled models.

The pooling is Ainslie et al. (2023), section 2.1 ("the key and value projection matrices of each
group are mean-pooled"): with H key/value heads and K target heads, group j is heads j*H/K ..
(j+1)*H/K - 1, and each of wk, wv (and their biases) becomes, per group, the mean of its heads'
[head_dim, d_model] blocks; "first" keeps each group's first head instead. Written here with torch's
view/mean on the [H, head_dim, cols] reshaping of each projection, independently of the C++ loop.

The model's forward pass is tools/reference/gen_model_fixtures.py's float64 reference (itself
checked against nn.TransformerEncoderLayer), run with n_kv_heads = K on the pooled weights: query
head h reads kv head h // (n_heads / K), as in tformer.

Run with Debian's python3-torch:  /usr/bin/python3 tools/reference/gen_gqa_fixtures.py
Writes tests/fixtures/gqa/<name>.safetensors (the multi-head source) and tests/fixtures/gqa/cases.json
(per model: file, config, ids [T], and for each (kv_heads, pool) the pooled model's float64 logits
[T, vocab] flattened). Deterministic: fixed seeds.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as gm  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "gqa")


def pool(p, cfg, K, how):
    """The parameters of the model with K key/value heads."""
    H, hd = cfg["n_kv_heads"], cfg["d_model"] // cfg["n_heads"]
    out = dict(p)
    for name, t in p.items():
        if not any(name.endswith(s) for s in (".attn.wk.weight", ".attn.wk.bias", ".attn.wv.weight", ".attn.wv.bias")):
            continue
        cols = t.shape[1] if t.dim() == 2 else 1
        heads = t.reshape(K, H // K, hd, cols)  # [group, member, row, col]
        pooled = heads.mean(dim=1) if how == "mean" else heads[:, 0]
        out[name] = pooled.reshape(K * hd, cols) if t.dim() == 2 else pooled.reshape(K * hd)
    return out


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    base = {"vocab_size": 37, "context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 8, "n_kv_heads": 8,
            "d_ff": 48, "norm_placement": "pre", "rope_base": 10000.0, "rope_pairing": "halves", "dropout": 0.0,
            "norm_eps": 1e-5}
    models = [
        ("rms_rope_halves_swiglu_bias_untied", {"norm": "rmsnorm", "positions": "rope", "activation": "swiglu",
                                                "bias": True, "tied_embeddings": False}),
        ("rms_rope_adjacent_swiglu_tied", {"norm": "rmsnorm", "positions": "rope", "rope_pairing": "adjacent",
                                           "activation": "swiglu", "bias": False, "tied_embeddings": True,
                                           "rope_base": 500.0}),
        ("ln_learned_gelu_bias_tied", {"norm": "layernorm", "positions": "learned", "activation": "gelu",
                                       "bias": True, "tied_embeddings": True}),
    ]
    cases = []
    for idx, (name, opts) in enumerate(models):
        cfg = {**base, **opts}
        cfg = {k: cfg[k] for k in ["vocab_size", "context_length", "d_model", "n_layers", "n_heads", "n_kv_heads",
                                   "d_ff", "norm", "norm_placement", "positions", "rope_base", "rope_pairing",
                                   "activation", "bias", "tied_embeddings", "dropout", "norm_eps"]}
        gen = torch.Generator().manual_seed(4000 + idx)
        p = gm.random_parameters(cfg, gen)
        T = 12
        ids = torch.randint(0, cfg["vocab_size"], (1, T), generator=gen)
        gm.write_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), p, json.dumps(cfg))
        results = []
        for K, how in [(8, "mean"), (4, "mean"), (2, "mean"), (1, "mean"), (2, "first")]:
            kcfg = dict(cfg, n_kv_heads=K)
            with torch.no_grad():
                logits = gm.model_forward(ids, pool(p, cfg, K, how), kcfg)[0]
            results.append({"kv_heads": K, "pool": how, "logits": [float(v) for v in logits.reshape(-1).tolist()]})
            print(f"{name:38s} K {K} {how:5s} |logit| max {logits.abs().max().item():.3f} "
                  f"std {logits.std().item():.3f}")
        # The pooled models differ from the original and from each other (the fixture can tell).
        full = torch.tensor(results[0]["logits"])
        for r in results[1:]:
            assert (torch.tensor(r["logits"]) - full).abs().max() > 1e-2, (name, r["kv_heads"], r["pool"])
        cases.append({"name": name, "file": name + ".safetensors", "config": cfg,
                      "ids": [int(v) for v in ids.reshape(-1).tolist()], "results": results})
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        json.dump({"generator": "tools/reference/gen_gqa_fixtures.py", "torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} models to {OUT_DIR}")


if __name__ == "__main__":
    main()
