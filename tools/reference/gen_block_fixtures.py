#!/usr/bin/python3
"""Fixtures for tformer's reference transformer block, computed by PyTorch's own modules.

torch.nn.TransformerEncoderLayer is the original transformer block: norm_first=False is post-LN
(LayerNorm(x + F(x))), norm_first=True is pre-LN (x + F(LayerNorm(x))). We run it in float64 with
a causal mask on small asymmetric random weights and record weights, input and output, mapped to
tformer's tensor names (wq, wk, wv are the three row blocks of torch's in_proj_weight).

Run with Debian's python3-torch:  /usr/bin/python3 tools/reference/gen_block_fixtures.py
Writes tests/fixtures/block_torch.json (deterministic: fixed seed, fixed torch version's kernels).
"""
import json
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "block_torch.json")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def case(name, norm_first, activation, seed, batch=2, T=5, d=8, heads=2, d_ff=12):
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=d, nhead=heads, dim_feedforward=d_ff, dropout=0.0, activation=activation,
        batch_first=True, norm_first=norm_first, layer_norm_eps=1e-5)
    # Asymmetric weights with non-trivial norm gains and biases (defaults are 1 and 0).
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.rand(p.shape, generator=g) * 0.8 - 0.4)
        layer.norm1.weight.add_(1.0)
        layer.norm2.weight.add_(1.0)
    layer.eval()
    x = torch.rand(batch, T, d, generator=g) * 2 - 1
    causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)  # additive: -inf = not allowed
    y = layer(x, src_mask=causal)
    ipw, ipb = layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias
    weights = {
        "attn_norm.weight": flat(layer.norm1.weight), "attn_norm.bias": flat(layer.norm1.bias),
        "attn.wq.weight": flat(ipw[0:d]), "attn.wk.weight": flat(ipw[d:2 * d]), "attn.wv.weight": flat(ipw[2 * d:]),
        "attn.wq.bias": flat(ipb[0:d]), "attn.wk.bias": flat(ipb[d:2 * d]), "attn.wv.bias": flat(ipb[2 * d:]),
        "attn.wo.weight": flat(layer.self_attn.out_proj.weight), "attn.wo.bias": flat(layer.self_attn.out_proj.bias),
        "ffn_norm.weight": flat(layer.norm2.weight), "ffn_norm.bias": flat(layer.norm2.bias),
        "ffn.w1.weight": flat(layer.linear1.weight), "ffn.w1.bias": flat(layer.linear1.bias),
        "ffn.w2.weight": flat(layer.linear2.weight), "ffn.w2.bias": flat(layer.linear2.bias),
    }
    return {"name": name, "norm_placement": "pre" if norm_first else "post",
            "activation": "gelu" if activation == "gelu" else "gelu_tanh",
            "batch": batch, "T": T, "d_model": d, "n_heads": heads, "d_ff": d_ff, "norm_eps": 1e-5,
            "weights": weights, "x": flat(x), "y": flat(y)}


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


cases = [
    case("post_ln_gelu", False, "gelu", 1),
    case("pre_ln_gelu", True, "gelu", 2),
    case("pre_ln_gelu_tanh", True, gelu_tanh, 3),
    case("post_ln_gelu_tanh_one_token", False, gelu_tanh, 4, batch=1, T=1),
]
with open(OUT, "w") as f:
    json.dump({"generator": "tools/reference/gen_block_fixtures.py", "torch": torch.__version__, "cases": cases}, f)
print("wrote", OUT)
