#!/usr/bin/python3
"""Fixture for tformer's whole training loop: PyTorch's loss, gradient norm and weights along 60
optimizer steps of a small nanoGPT-style model, started from given weights on given windows.

The unit fixtures (gen_train_fixtures.py) check one gradient and one AdamW step at a time; this one
checks their composition as `tformer train` runs it, step after step: the learning-rate schedule
(warmup, cosine, floor), gradient accumulation over 2 micro-batches, global-norm clipping (active
on some steps, not on others), AdamW's two parameter groups, the tied output projection, and the
sampler's windows. tests/test_train_trajectory.cpp builds a TrainSession with the same options,
overwrites its initial weights with this file's, and must follow PyTorch's losses step by step.

Model: bench/train_torch.py's Decoder (pre-LN LayerNorm, learned positions, exact GELU, biases,
tied embeddings), vocab = the sorted distinct bytes of tests/fixtures/tinyshakespeare_100k.txt,
context 16, d_model 32, 2 layers, 4 heads; GPT-2 initialisation from torch.manual_seed(INIT_SEED).
Data: the first size * 9 // 10 bytes train (the test's split). Windows: tformer's BatchSampler
seeded with SEED (train_lockstep.Xoshiro256ss re-implements its generator): per micro-batch, BATCH
starts uniform in [0, n_train - T), each window T + 1 tokens. Step s (0-based) uses lr_at(s) and
the mean of the two micro-batches' losses (each micro-batch's loss / 2 is back-propagated).
Float32 throughout, torch.optim.AdamW (weight decay on every 2-D tensor except the position table),
torch.nn.utils.clip_grad_norm_.

Writes tests/fixtures/train/trajectory.safetensors (the initial weights under their checkpoint
names, the weights after the last step under "final.<name>"), trajectory.json: {"generator",
"torch", "corpus", "config" (model config keys), "options" {steps, batch, context, grad_accum, lr,
min_lr, warmup, decay_steps, beta1, beta2, eps, weight_decay, grad_clip, seed}, "steps": [{"loss",
"grad_norm" (before clipping), "lr", "clipped"}], "eval": {max_tokens, loss, tokens_scored}}, and
trajectory_model.safetensors: the trained model as a tformer model file (config and char tokenizer
in __metadata__), with what `tformer eval --max-tokens 3001` must print for it on the corpus
("eval": the first 3001 tokens in consecutive windows of 17, the last one shorter).
"""
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_lockstep import Xoshiro256ss, checkpoint_name  # noqa: E402
from train_torch import Decoder, lr_at  # noqa: E402  (train_lockstep put bench/ on the path)

ROOT = os.path.join(HERE, "..", "..")
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tinyshakespeare_100k.txt")
OUT = os.path.join(ROOT, "tests", "fixtures", "train")

INIT_SEED = 2024
SEED = 11
EVAL_TOKENS = 3001  # 187 full windows of 16 + one of 8 scored tokens
CONFIG = {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 4}
OPTIONS = {"steps": 60, "batch": 4, "context": 16, "grad_accum": 2, "lr": 3e-3, "min_lr": 3e-4, "warmup": 5,
           "decay_steps": 50, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0,
           "seed": SEED}


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def main():
    o = OPTIONS
    text = open(CORPUS, "rb").read()
    alphabet = sorted(set(text))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(alphabet)] = torch.arange(len(alphabet))
    ids = lut[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    train = ids[:len(text) * 9 // 10]
    T, B = o["context"], o["batch"]

    torch.manual_seed(INIT_SEED)
    model = Decoder(len(alphabet), CONFIG["context_length"], CONFIG["d_model"], CONFIG["n_layers"], CONFIG["n_heads"])
    initial = {checkpoint_name(n): p.detach().clone() for n, p in model.named_parameters()}
    named = list(model.named_parameters())
    decays = lambda n, q: q.dim() == 2 and n != "pos_embeddings.weight"
    opt = torch.optim.AdamW(
        [{"params": [q for n, q in named if decays(n, q)], "weight_decay": o["weight_decay"]},
         {"params": [q for n, q in named if not decays(n, q)], "weight_decay": 0.0}],
        lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])

    class Sched:
        lr, min_lr, warmup, decay = o["lr"], o["min_lr"], o["warmup"], o["decay_steps"]

    rng = Xoshiro256ss(SEED)
    steps = []
    for s in range(o["steps"]):
        lr = lr_at(s, Sched)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(o["grad_accum"]):
            starts = [rng.below(len(train) - T) for _ in range(B)]
            w = torch.stack([train[p:p + T + 1] for p in starts])
            loss = model(w[:, :-1], w[:, 1:])
            (loss / o["grad_accum"]).backward()
            total += loss.item() / o["grad_accum"]
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"]))
        opt.step()
        steps.append({"loss": total, "grad_norm": norm, "lr": lr, "clipped": norm > o["grad_clip"]})

    # `tformer eval` on the trained model: the file's first EVAL_TOKENS tokens in consecutive
    # windows of context_length + 1 (stride context_length), the last one shorter; every token but
    # the first scored once: the sum of each window's mean loss times its length, over the count.
    model.eval()
    ev = ids[:EVAL_TOKENS]
    Tm = CONFIG["context_length"]
    total, count = 0.0, 0
    with torch.no_grad():
        for s0 in range(0, len(ev) - 1, Tm):
            w = ev[s0:s0 + Tm + 1]
            t = w.shape[0] - 1
            total += float(model(w[:-1].unsqueeze(0), w[1:].unsqueeze(0))) * t  # the window's mean * t
            count += t
    eval_result = {"max_tokens": EVAL_TOKENS, "loss": total / count, "tokens_scored": count}
    meta = {"config": json.dumps(dict(CONFIG, vocab_size=len(alphabet))),
            "tokenizer": json.dumps({"kind": "char", "version": 1, "bytes": alphabet})}
    write_safetensors(os.path.join(OUT, "trajectory_model.safetensors"),
                      {checkpoint_name(n): p for n, p in model.named_parameters()}, meta)

    n_clipped = sum(st["clipped"] for st in steps)
    if not 0 < n_clipped < len(steps):
        raise SystemExit(f"clipping acted on {n_clipped} of {len(steps)} steps: pick a grad_clip that splits them")
    tensors = dict(initial)
    tensors.update({"final." + checkpoint_name(n): p for n, p in model.named_parameters()})
    write_safetensors(os.path.join(OUT, "trajectory.safetensors"), tensors)
    doc = {"generator": "tools/reference/gen_trajectory_fixture.py", "torch": torch.__version__,
           "corpus": "tests/fixtures/tinyshakespeare_100k.txt", "config": CONFIG, "options": o, "steps": steps,
           "eval": eval_result}
    with open(os.path.join(OUT, "trajectory.json.tmp"), "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(os.path.join(OUT, "trajectory.json.tmp"), os.path.join(OUT, "trajectory.json"))
    print(f"wrote {OUT}/trajectory.{{safetensors,json}}: {len(steps)} steps, loss {steps[0]['loss']:.4f} -> "
          f"{steps[-1]['loss']:.4f}, clipping on {n_clipped} steps")


if __name__ == "__main__":
    main()
