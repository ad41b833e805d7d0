#!/usr/bin/env python3
"""Writes tests/fixtures/kernels.json: PyTorch's outputs and gradients for tformer's reference kernels.

An independent oracle for the kernels' tests (each tests/test_kernels_<kernel>.cpp checks its own
entry through its op table): small, asymmetric inputs drawn from a seeded torch generator in
float64, each operation computed with torch (softmax, log_softmax, layer_norm, an RMSNorm in torch
ops, gelu exact/tanh, silu(a) * b, embedding, cross_entropy) and its gradients taken with
torch.autograd as the backward of loss = sum(r * y) for a fixed random r (for cross-entropy, of
dloss * mean loss).

Rerunnable and deterministic (same torch -> byte-identical file). Run from anywhere:
    /usr/bin/python3 tools/reference/gen_kernel_fixtures.py
Encoding: plain JSON (no NaN/Infinity); doubles are written with Python's repr, which round-trips
exactly. Masked softmax entries (-inf) are given as a 0/1 "masked" list beside finite "x" values.
"""
import json
import os

import torch
import torch.nn.functional as F

SEED = 20240611
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "kernels.json")

torch.use_deterministic_algorithms(True)
gen = torch.Generator().manual_seed(SEED)


def uniform(*shape, lo=-1.0, hi=1.0):
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float64)


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def leaf(t):
    return t.clone().detach().requires_grad_(True)


def softmax_case(log):
    rows, cols = 4, 6
    x = uniform(rows, cols, lo=-3.0, hi=3.0)
    # Row 0 unmasked; row 1 causal-like (last three masked); row 2 a single allowed entry;
    # row 3 masks the two entries that would be largest.
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    mask[1, 3:] = True
    mask[2, [0, 2, 3, 4, 5]] = True
    mask[2, 1] = False
    x[3, 1] = 5.0
    x[3, 4] = 4.5
    mask[3, [1, 4]] = True
    r = uniform(rows, cols, lo=-2.0, hi=2.0)
    xm = leaf(x.masked_fill(mask, float("-inf")))
    if log:
        y = torch.log_softmax(xm, dim=-1)
        # Masked outputs are -inf constants: leave them out of the loss (their dy cannot reach x).
        loss = torch.where(mask, torch.zeros_like(y), r * y).sum()
    else:
        y = torch.softmax(xm, dim=-1)
        loss = (r * y).sum()
    loss.backward()
    # y at masked positions: 0 (softmax) or -inf (log-softmax, not representable in JSON -> 0 here,
    # the C++ test checks those entries separately).
    y_out = torch.where(mask, torch.zeros_like(y), y)
    return {"rows": rows, "cols": cols, "x": flat(x), "masked": [int(v) for v in mask.reshape(-1).tolist()],
            "r": flat(r), "y": flat(y_out), "dx": flat(xm.grad)}


def layer_norm_case():
    rows, cols, eps = 4, 7, 1e-5
    x = uniform(rows, cols, lo=-2.0, hi=3.0)
    x[2] = 1.0 + 0.004 * uniform(cols)  # variance ~5e-6: comparable to eps, so eps matters
    x[3] = 50.0 + 10.0 * uniform(cols)  # large offset
    w = uniform(cols, lo=0.5, hi=1.5)
    b = uniform(cols, lo=-0.5, hi=0.5)
    r = uniform(rows, cols, lo=-2.0, hi=2.0)
    xl, wl, bl = leaf(x), leaf(w), leaf(b)
    y = F.layer_norm(xl, (cols,), weight=wl, bias=bl, eps=eps)
    (r * y).sum().backward()
    mean = x.mean(dim=-1)
    rstd = torch.rsqrt(x.var(dim=-1, unbiased=False) + eps)
    return {"rows": rows, "cols": cols, "eps": eps, "x": flat(x), "weight": flat(w), "bias": flat(b),
            "r": flat(r), "y": flat(y), "mean": flat(mean), "rstd": flat(rstd), "dx": flat(xl.grad),
            "dweight": flat(wl.grad), "dbias": flat(bl.grad)}


def rms_norm_case():
    rows, cols, eps = 3, 8, 1e-5
    x = uniform(rows, cols, lo=-2.0, hi=3.0)
    x[1] = 0.003 * uniform(cols)  # mean square ~3e-6: comparable to eps
    w = uniform(cols, lo=0.5, hi=1.5)
    r = uniform(rows, cols, lo=-2.0, hi=2.0)
    xl, wl = leaf(x), leaf(w)
    rstd = torch.rsqrt(xl.pow(2).mean(dim=-1, keepdim=True) + eps)
    y = xl * rstd * wl
    (r * y).sum().backward()
    return {"rows": rows, "cols": cols, "eps": eps, "x": flat(x), "weight": flat(w), "r": flat(r), "y": flat(y),
            "rstd": flat(rstd), "dx": flat(xl.grad), "dweight": flat(wl.grad)}


def gelu_case(approximate):
    n = 17
    x = uniform(n, lo=-4.0, hi=4.0)
    x[0], x[1], x[2] = 0.0, 1.0, -1.0
    r = uniform(n, lo=-2.0, hi=2.0)
    xl = leaf(x)
    y = F.gelu(xl, approximate=approximate)
    (r * y).sum().backward()
    return {"n": n, "x": flat(x), "r": flat(r), "y": flat(y), "dx": flat(xl.grad)}


def swiglu_case():
    n = 15
    a = uniform(n, lo=-6.0, hi=6.0)
    b = uniform(n, lo=-2.0, hi=2.0)
    a[0] = 0.0
    a[1] = -30.0  # sigmoid underflow side
    a[2] = 30.0
    r = uniform(n, lo=-2.0, hi=2.0)
    al, bl = leaf(a), leaf(b)
    y = F.silu(al) * bl
    (r * y).sum().backward()
    return {"n": n, "a": flat(a), "b": flat(b), "r": flat(r), "y": flat(y), "da": flat(al.grad), "db": flat(bl.grad)}


def embedding_case():
    n, vocab, d = 7, 6, 5
    ids = torch.tensor([3, 0, 3, 5, 1, 3, 0])  # repeated ids: 3 three times, 0 twice; 2 and 4 unused
    table = uniform(vocab, d)
    r = uniform(n, d, lo=-2.0, hi=2.0)
    tl = leaf(table)
    y = F.embedding(ids, tl)
    (r * y).sum().backward()
    return {"n": n, "vocab": vocab, "d": d, "ids": ids.tolist(), "table": flat(table), "r": flat(r), "y": flat(y),
            "dtable": flat(tl.grad)}


def cross_entropy_case():
    rows, vocab, dloss = 5, 7, 0.7
    logits = uniform(rows, vocab, lo=-4.0, hi=4.0)
    logits[4] += 100.0  # large logits: needs the max-shifted log-sum-exp
    targets = torch.tensor([2, -100, 6, 0, 3])  # row 1 ignored
    ll = leaf(logits)
    loss = F.cross_entropy(ll, targets, ignore_index=-100, reduction="mean")
    (dloss * loss).backward()
    row_loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="none")
    return {"rows": rows, "vocab": vocab, "logits": flat(logits), "targets": targets.tolist(), "dloss": dloss,
            "loss": float(loss), "row_loss": flat(row_loss), "count": int((targets != -100).sum()),
            "dlogits": flat(ll.grad)}


def main():
    fixture = {
        "about": "PyTorch reference values for tformer kernels; generated by tools/reference/gen_kernel_fixtures.py",
        "torch_version": torch.__version__.split("+")[0],
        "seed": SEED,
        "softmax": softmax_case(log=False),
        "log_softmax": softmax_case(log=True),
        "layer_norm": layer_norm_case(),
        "rms_norm": rms_norm_case(),
        "gelu_exact": gelu_case("none"),
        "gelu_tanh": gelu_case("tanh"),
        "swiglu": swiglu_case(),
        "embedding": embedding_case(),
        "cross_entropy": cross_entropy_case(),
    }
    text = json.dumps(fixture, indent=1, allow_nan=False) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {os.path.normpath(OUT)} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
