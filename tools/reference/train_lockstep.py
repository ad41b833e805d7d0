#!/usr/bin/python3
"""Lock-step comparison of `tformer train` with PyTorch from the same start on the same data.

Question it answers: when tformer's final validation loss differs from PyTorch's on the same recipe,
is that tformer's arithmetic or just a different random start and data order? This script removes
the randomness: PyTorch (1.13, float32, bench/train_torch.py's Decoder, torch.optim.AdamW, torch's
clip_grad_norm_, nanoGPT's schedule) trains from tformer's initial weights (a file written by
`tformer init` with the run's seed: the same init_gpt2(seed) `tformer train` starts from) on exactly
the windows tformer's sampler draws: this file re-implements tformer's xoshiro256** generator
(src/core/rng.{h,cpp}: splitmix64 seeding, rejection-sampled below()), and BatchSampler draws, per
window, a start uniform in [0, n_train - T) and takes T + 1 tokens. It then compares:
  * the training loss at every step with tformer's (`tformer train --log-every 1` plain lines,
    6 decimals): equal steps start equal and drift apart only as float32 rounding is amplified;
  * both final models on the same validation data: --eval-batches random (B, T) windows of the
    validation split drawn once (the same windows for both models) and the whole split in
    consecutive non-overlapping T-token windows (deterministic).

Character level: the vocabulary is the sorted distinct bytes of the file (tformer's `char`
tokenizer); the validation split is the last --val-fraction of the bytes (floor(n * (1 - f))).

  tools/reference/train_lockstep.py --data FILE --init INIT.safetensors --seed S \
      --tformer-log LOG --tformer-model DIR/model.safetensors [recipe flags as tformer train's]

bench/train_seeds.sh runs tformer, PyTorch and this script on nanoGPT's Tiny Shakespeare recipe per seed.
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from train_torch import Decoder, lr_at  # noqa: E402

MASK = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256ss:
    """tformer's Rng: xoshiro256** seeded with four splitmix64 outputs."""

    def __init__(self, seed):
        self.s = []
        x = seed & MASK
        for _ in range(4):
            self.s.append(mix64(x))
            x = (x + 0x9E3779B97F4A7C15) & MASK

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        limit = MASK - MASK % n
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name}: dtype {info['dtype']}, expected F32")
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + a:base + b]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).clone()
    return out, header.get("__metadata__", {})


def checkpoint_name(torch_name):
    """bench/train_torch.py's module names -> tformer's checkpoint names (docs/checkpoint-format.md)."""
    n = re.sub(r"^blocks\.(\d+)\.", r"layers.\1.", torch_name)
    return n.replace(".norm1.", ".attn_norm.").replace(".norm2.", ".ffn_norm.")


def load_into(model, path):
    tensors, _ = read_safetensors(path)
    own = {checkpoint_name(n): p for n, p in model.named_parameters()}
    expected = {n for n in own}
    got = set(tensors)
    if expected != got:
        raise SystemExit(f"{path}: tensors differ from the torch model: missing {sorted(expected - got)}, "
                         f"extra {sorted(got - expected)}")
    with torch.no_grad():
        for n, p in own.items():
            if tuple(tensors[n].shape) != tuple(p.shape):
                raise SystemExit(f"{path}: {n} has shape {list(tensors[n].shape)}, torch expects {list(p.shape)}")
            p.copy_(tensors[n])


def tformer_losses(path):
    """step -> loss from tformer's plain progress lines ('step 12/2000 loss 3.141593 lr ...')."""
    out = {}
    pat = re.compile(r"^step (\d+)/\d+ loss ([0-9.eE+-]+|nan|inf) ")
    with open(path) as f:
        for line in f:
            m = pat.match(line)
            if m:
                out[int(m.group(1))] = float(m.group(2))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--init", required=True, help="tformer init output for the run's seed and config")
    p.add_argument("--seed", type=int, required=True, help="the --seed of the tformer run")
    p.add_argument("--tformer-log", help="stdout of `tformer train --log-every 1` (plain lines)")
    p.add_argument("--tformer-model", help="the tformer run's final model.safetensors")
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--decay-steps", type=int, default=2000)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-batches", type=int, default=200)
    p.add_argument("--save", help="write the torch run's per-step losses and final figures here (JSON)")
    a = p.parse_args()
    torch.manual_seed(0)  # only the evaluation windows use torch's generator

    raw = open(a.data, "rb").read()
    alphabet = sorted(set(raw))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(alphabet)] = torch.arange(len(alphabet))
    ids = lut[torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()]
    cut = math.floor(len(raw) * (1.0 - a.val_fraction))
    train, val = ids[:cut], ids[cut:]
    T, B = a.context, a.batch

    model = Decoder(len(alphabet), T, a.n_embd, a.n_layer, a.n_head)
    load_into(model, a.init)
    names = [n for n, _ in model.named_parameters()]
    decays = lambda n, q: q.dim() == 2 and n != "pos_embeddings.weight"  # tformer's rule (adamw_decays)
    params = dict(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [params[n] for n in names if decays(n, params[n])], "weight_decay": a.weight_decay},
         {"params": [params[n] for n in names if not decays(n, params[n])], "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)

    class Sched:  # lr_at reads these names
        lr, min_lr, warmup, decay = a.lr, a.min_lr, a.warmup, a.decay_steps

    rng = Xoshiro256ss(a.seed)
    ref = tformer_losses(a.tformer_log) if a.tformer_log else {}
    losses = []
    model.train()
    print(f"lock-step: torch {torch.__version__}, {len(alphabet)} symbols, train {len(train)} / val {len(val)} "
          f"tokens, seed {a.seed}, {a.steps} steps of {B} x {T}", flush=True)
    for step in range(1, a.steps + 1):
        starts = [rng.below(len(train) - T) for _ in range(B)]
        w = torch.stack([train[s:s + T + 1] for s in starts])
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, Sched)
        loss = model(w[:, :-1], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        losses.append(loss.item())
        if step in (1, 2, 10, 100, 500, 1000, 1500, 2000) or step == a.steps:
            extra = f"  tformer {ref[step]:.6f}  diff {ref[step] - losses[-1]:+.2e}" if step in ref else ""
            print(f"step {step}: torch {losses[-1]:.6f}{extra}", flush=True)

    summary = {"seed": a.seed, "steps": a.steps, "torch_losses": losses}
    if ref:
        for upto in sorted({min(u, a.steps) for u in (10, 100, 500, 1000, 2000, a.steps)}):
            d = [abs(ref[s] - losses[s - 1]) for s in range(1, min(upto, a.steps) + 1) if s in ref]
            if d:
                print(f"max |tformer - torch| training loss over steps 1..{min(upto, a.steps)}: {max(d):.2e}")
        # Mean over windows of 100 steps: the trajectories' statistics, beyond single-step noise.
        last = [s for s in range(max(1, a.steps - 99), a.steps + 1) if s in ref]
        if last:
            mt = sum(ref[s] for s in last) / len(last)
            mp = sum(losses[s - 1] for s in last) / len(last)
            print(f"mean training loss, last {len(last)} steps: tformer {mt:.4f}, torch {mp:.4f}")

    # Evaluation on the same data for both models.
    model.eval()
    starts = torch.randint(len(val) - T, (a.eval_batches * B,)).tolist()
    full = [(s, s + T) for s in range(0, len(val) - T, T)]

    def evaluate(m):
        with torch.no_grad():
            rnd = 0.0
            for k in range(a.eval_batches):
                w = torch.stack([val[s:s + T + 1] for s in starts[k * B:(k + 1) * B]])
                rnd += m(w[:, :-1], w[:, 1:]).item()
            tot, cnt = 0.0, 0
            for i in range(0, len(full), 64):
                chunk = full[i:i + 64]
                w = torch.stack([val[s:e + 1] for s, e in chunk])
                tot += m(w[:, :-1], w[:, 1:]).item() * w.shape[0] * T
                cnt += w.shape[0] * T
        return rnd / a.eval_batches, tot / cnt

    r_t, f_t = evaluate(model)
    summary.update({"torch_val_random": r_t, "torch_val_full": f_t})
    print(f"torch   final model: val loss {r_t:.4f} ({a.eval_batches} random batches), {f_t:.4f} (whole split, "
          f"{len(full)} windows of {T})")
    if a.tformer_model:
        tm = Decoder(len(alphabet), T, a.n_embd, a.n_layer, a.n_head)
        load_into(tm, a.tformer_model)
        tm.eval()
        r_f, f_f = evaluate(tm)
        summary.update({"tformer_val_random": r_f, "tformer_val_full": f_f})
        print(f"tformer final model: val loss {r_f:.4f} ({a.eval_batches} random batches), {f_f:.4f} (whole split)")
        print(f"RESULT seed={a.seed} torch_val={r_t:.4f} tformer_val={r_f:.4f} torch_full={f_t:.4f} "
              f"tformer_full={f_f:.4f}")
    if a.save:
        with open(a.save, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
