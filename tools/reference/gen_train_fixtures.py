#!/usr/bin/python3
"""Fixtures for tformer's training: every parameter's gradient of the loss for tiny models, and a
few steps of torch.optim.AdamW and torch.nn.utils.clip_grad_norm_.

1. Gradients (tests/fixtures/train/g<idx>_*.safetensors and cases.json). For every model config of
   the pairwise covering set of gen_model_fixtures.py (every pair of option values appears in some
   model: norm, placement, positions, RoPE pairing and base, activation, bias, tied embeddings,
   MHA/GQA/MQA), a tiny model (vocab 11-15, d_model 8 or 16, 2 layers, 4 heads, context 8) with the
   same float32-rounded random weights as gen_model_fixtures.py draws them, a batch of 2 sequences
   of T = 6 random ids and random targets, two of which are -100 (ignored). In float64 with torch
   autograd, through the same model_forward that tests/test_reference_model.cpp checks the C++
   forward against:
       loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-100)
   (the mean over the non-ignored targets), and the gradient of every parameter. With tied
   embeddings the output projection IS tok_embeddings.weight, so its gradient is the sum of the
   embedding lookup's and the projection's (autograd adds them). Dropout is 0 in every config.
   This script also checks a few coordinates of each gradient against central differences in
   float64, and records how far torch's OWN float32 gradients are from the float64 ones
   ("torch_float32_grad_max_abs_err"), the accuracy a float32 implementation can hope for.

   <name>.safetensors holds each parameter under its checkpoint name (F32, exactly the values the
   gradient was computed at) and its gradient under "grad.<name>" (F32, rounded from float64), with
   the config JSON in __metadata__["config"] (all 17 keys). Note: the grad.* tensors make it a file
   that load_model() rejects (it holds tensors a model does not declare); read it with
   SafetensorsFile::read_f32 tensor by tensor. cases.json: {"generator", "torch", "cases": [{"name",
   "file", "config" (17 keys, as in models/cases.json), "batch", "T", "inputs" [B*T], "targets"
   [B*T] (-100 = ignored), "loss" (float64), "n_ignored", "torch_float32_grad_max_abs_err",
   "torch_float32_loss_abs_err"}]}.

2. The optimizer (tests/fixtures/train/adamw.json). Five small tensors named like real parameters
   (two that decay by tformer's rule -- rank >= 2 except pos_embeddings.weight -- and three that
   do not: a bias, a norm gain and the position table), float32-representable initial values and 3
   steps of float32-representable gradients (some elements tiny, so eps matters; some zero) and
   learning rates. torch.optim.AdamW runs in float32 with two parameter groups (weight_decay 0.1 /
   0.0), betas (0.9, 0.99), eps 1e-8; after every step the parameters and the moments exp_avg and
   exp_avg_sq are recorded. Keys: "optimizer" {beta1, beta2, eps, weight_decay}, "tensors" [{name,
   shape, decays, initial}], "steps" [{lr, grads {name: [...]}, params {...}, exp_avg {...},
   exp_avg_sq {...}}] (values row-major, flattened), and "clip_grad_norm": [{max_norm, grads {name:
   [...]}, shapes {name: shape}, total_norm (torch's float32 result), total_norm_f64, clipped
   {name: [...]}, clipped_applied}] -- one case that clips and one that does not.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tools/reference/gen_train_fixtures.py
Deterministic: fixed seeds. A regenerated set replaces the old one (stale g*.safetensors removed).
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_model_fixtures import covering_set, model_forward, random_parameters, write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "train")
IGNORE = -100

# ---------------------------------------------------------------------------------------------
# 1. Gradients of the loss.


def model_config(idx, opt):
    """A tiny config for covering-set entry idx: all 17 keys, in the documented order."""
    kv = {"mha": 4, "gqa": 2, "mqa": 1}
    # RoPE models need head width 4 (with 2, the adjacent and halves pairings are the same pair).
    d_model = 16 if (opt["positions"] == "rope" or idx % 2 == 0) else 8
    return {
        "vocab_size": 11 + 2 * (idx % 3),  # 11, 13, 15
        "context_length": 8,
        "d_model": d_model,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": kv[opt["attention"]],
        "d_ff": 20,
        "norm": opt["norm"],
        "norm_placement": opt["norm_placement"],
        "positions": opt["positions"],
        "rope_base": opt["rope_base"],
        "rope_pairing": opt["rope_pairing"],
        "activation": opt["activation"],
        "bias": opt["bias"],
        "tied_embeddings": opt["tied_embeddings"],
        "dropout": 0.0,
        "norm_eps": 1e-5 if idx % 4 != 3 else 1e-6,
    }


def loss_of(p, ids, targets, cfg):
    logits = model_forward(ids, p, cfg)
    return F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1), ignore_index=IGNORE)


def gradients(p, ids, targets, cfg, dtype):
    """(loss, {name: grad}) with every parameter in `dtype` (the default dtype follows, so the
    sinusoidal table and the mask are built in it too)."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        q = {n: t.detach().to(dtype).clone().requires_grad_(True) for n, t in p.items()}
        loss = loss_of(q, ids, targets, cfg)
        loss.backward()
        return loss.item(), {n: t.grad.detach().double() for n, t in q.items()}
    finally:
        torch.set_default_dtype(saved)


def check_by_differences(p, ids, targets, cfg, grads, gen, n_coords=4, h=1e-6):
    """Central differences in float64 at a few random coordinates agree with autograd."""
    names = sorted(p)
    for _ in range(n_coords):
        name = names[int(torch.randint(0, len(names), (1,), generator=gen))]
        flat = p[name].view(-1)
        i = int(torch.randint(0, flat.numel(), (1,), generator=gen))
        saved = flat[i].item()
        with torch.no_grad():
            flat[i] = saved + h
            up = loss_of(p, ids, targets, cfg).item()
            flat[i] = saved - h
            down = loss_of(p, ids, targets, cfg).item()
            flat[i] = saved
        numeric = (up - down) / (2 * h)
        analytic = grads[name].view(-1)[i].item()
        assert abs(numeric - analytic) <= 1e-8 + 1e-5 * abs(analytic), \
            f"{cfg}: {name}[{i}]: autograd {analytic} vs differences {numeric}"


def case_name(idx, cfg, opt):
    return "g{:02d}_{}_{}_{}_{}_{}{}{}".format(
        idx, "ln" if cfg["norm"] == "layernorm" else "rms", cfg["norm_placement"], cfg["positions"],
        cfg["activation"], opt["attention"], "" if cfg["positions"] != "rope" else "_" + cfg["rope_pairing"],
        "_tied" if cfg["tied_embeddings"] else "")


def gradient_cases():
    cases = []
    for idx, opt in enumerate(covering_set()):
        gen = torch.Generator().manual_seed(5000 + idx)
        cfg = model_config(idx, opt)
        batch, T = 2, 6
        p = random_parameters(cfg, gen)
        ids = torch.randint(0, cfg["vocab_size"], (batch, T), generator=gen)
        targets = torch.randint(0, cfg["vocab_size"], (batch, T), generator=gen)
        # Two ignored targets, one in each sequence, at different positions.
        a, b = torch.randperm(T, generator=gen)[:2].tolist()
        targets[0, a] = IGNORE
        targets[1, b] = IGNORE

        loss, grads = gradients(p, ids, targets, cfg, torch.float64)
        check_by_differences(p, ids, targets, cfg, grads, gen)
        loss32, grads32 = gradients(p, ids, targets, cfg, torch.float32)
        f32_err = max((grads32[n] - grads[n]).abs().max().item() for n in p)
        gmax = max(g.abs().max().item() for g in grads.values())
        assert gmax > 1e-2, f"case {idx}: gradients nearly zero"
        if cfg["tied_embeddings"]:
            assert "output.weight" not in p
        if cfg["positions"] == "learned":  # rows past T are never used
            assert grads["pos_embeddings.weight"][T:].abs().max().item() == 0.0

        name = case_name(idx, cfg, opt)
        file = name + ".safetensors"
        tensors = dict(p)
        for n, g in grads.items():
            tensors["grad." + n] = g
        write_safetensors(os.path.join(OUT_DIR, file), tensors, json.dumps(cfg))
        cases.append({
            "name": name, "file": file, "config": cfg, "batch": batch, "T": T,
            "inputs": [int(v) for v in ids.reshape(-1).tolist()],
            "targets": [int(v) for v in targets.reshape(-1).tolist()],
            "loss": loss, "n_ignored": 2,
            "torch_float32_grad_max_abs_err": f32_err,
            "torch_float32_loss_abs_err": abs(loss32 - loss),
        })
        print(f"{name:48s} V {cfg['vocab_size']} d {cfg['d_model']:2d} loss {loss:.6f} |grad| max {gmax:.3e} "
              f"torch-f32 grad err {f32_err:.1e}")
    return cases


# ---------------------------------------------------------------------------------------------
# 2. AdamW and gradient clipping, in float32.

def decays(name, shape):
    """tformer's weight-decay rule (src/train/optimizer.h)."""
    return len(shape) >= 2 and name != "pos_embeddings.weight"


def f32_list(t):
    return [float(v) for v in t.detach().float().double().reshape(-1).tolist()]


def adamw_case():
    gen = torch.Generator().manual_seed(77)
    shapes = [("layers.0.attn.wq.weight", [3, 4]), ("layers.0.attn.wq.bias", [3]),
              ("layers.0.attn_norm.weight", [4]), ("pos_embeddings.weight", [5, 4]),
              ("tok_embeddings.weight", [6, 4])]
    beta1, beta2, eps, wd = 0.9, 0.99, 1e-8, 0.1
    lrs = [float(torch.tensor(v, dtype=torch.float32).item()) for v in (0.02, 0.05, 0.01)]

    params = {n: torch.randn(s, generator=gen).float() for n, s in shapes}
    params["layers.0.attn_norm.weight"] += 1.0  # a norm gain near 1
    grads = []
    for step in range(3):
        g = {}
        for n, s in shapes:
            t = torch.randn(s, generator=gen) * (0.5 + step)  # a different scale each step
            if n == "layers.0.attn.wq.bias":
                t = t * 1e-7  # |g| ~ 1e-7: eps = 1e-8 is a visible part of the denominator
            g[n] = t.float()
        g["tok_embeddings.weight"][2].zero_()  # a row no token used this step
        if step == 1:
            g["pos_embeddings.weight"][4].zero_()
        grads.append(g)

    torch_params = {n: params[n].clone().requires_grad_(True) for n, _ in shapes}
    decay_group = [torch_params[n] for n, s in shapes if decays(n, s)]
    other_group = [torch_params[n] for n, s in shapes if not decays(n, s)]
    assert len(decay_group) == 2 and len(other_group) == 3
    opt = torch.optim.AdamW([{"params": decay_group, "weight_decay": wd},
                             {"params": other_group, "weight_decay": 0.0}],
                            lr=lrs[0], betas=(beta1, beta2), eps=eps)
    steps = []
    for step in range(3):
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        for n, _ in shapes:
            torch_params[n].grad = grads[step][n].clone()
        opt.step()
        st = opt.state
        steps.append({
            "lr": lrs[step],
            "grads": {n: f32_list(grads[step][n]) for n, _ in shapes},
            "params": {n: f32_list(torch_params[n]) for n, _ in shapes},
            "exp_avg": {n: f32_list(st[torch_params[n]]["exp_avg"]) for n, _ in shapes},
            "exp_avg_sq": {n: f32_list(st[torch_params[n]]["exp_avg_sq"]) for n, _ in shapes},
        })
        assert int(st[torch_params[shapes[0][0]]]["step"]) == step + 1
    return {
        "optimizer": {"beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": wd},
        "tensors": [{"name": n, "shape": s, "decays": decays(n, s), "initial": f32_list(params[n])}
                    for n, s in shapes],
        "steps": steps,
    }


def clip_cases():
    gen = torch.Generator().manual_seed(78)
    shapes = {"layers.0.ffn.w1.weight": [4, 3], "layers.0.ffn.w1.bias": [4], "norm.weight": [3]}
    grads = {n: (torch.randn(s, generator=gen) * 0.7).float() for n, s in shapes.items()}
    total64 = math.sqrt(sum((g.double() ** 2).sum().item() for g in grads.values()))
    out = []
    for max_norm in (float(torch.tensor(total64 / 3, dtype=torch.float32).item()), 100.0):
        ts = {n: torch.zeros(s, dtype=torch.float32, requires_grad=True) for n, s in shapes.items()}
        for n in shapes:
            ts[n].grad = grads[n].clone()
        total = torch.nn.utils.clip_grad_norm_(list(ts.values()), max_norm)
        out.append({
            "max_norm": max_norm, "shapes": shapes,
            "grads": {n: f32_list(grads[n]) for n in shapes},
            "total_norm": float(total.item()), "total_norm_f64": total64,
            "clipped": {n: f32_list(ts[n].grad) for n in shapes},
            "clipped_applied": max_norm < total64,
        })
    assert out[0]["clipped_applied"] and not out[1]["clipped_applied"]
    return out


# ---------------------------------------------------------------------------------------------

def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    cases = gradient_cases()
    written = {c["file"] for c in cases}
    for f in os.listdir(OUT_DIR):
        if f.endswith(".safetensors") and f not in written:
            os.remove(os.path.join(OUT_DIR, f))
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        json.dump({"generator": "tools/reference/gen_train_fixtures.py", "torch": torch.__version__,
                   "cases": cases}, f)
    adamw = adamw_case()
    adamw["clip_grad_norm"] = clip_cases()
    adamw["generator"] = "tools/reference/gen_train_fixtures.py"
    adamw["torch"] = torch.__version__
    with open(os.path.join(OUT_DIR, "adamw.json"), "w") as f:
        json.dump(adamw, f, indent=1)
    total = sum(os.path.getsize(os.path.join(OUT_DIR, f)) for f in os.listdir(OUT_DIR))
    print(f"wrote {len(cases)} gradient cases, adamw.json ({len(adamw['steps'])} steps, "
          f"{len(adamw['clip_grad_norm'])} clip cases) to {OUT_DIR}: {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
