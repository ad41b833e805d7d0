#!/usr/bin/python3
"""PyTorch 1.13 baseline for bench/train.sh: the same GPT decoder tformer trains, in plain torch.

The model equals tformer's for the settings bench/train.sh uses: pre-LN (LayerNorm with bias,
eps 1e-5), learned positions, exact GELU, a bias on every linear layer, tied embeddings (the output
projection is the token table), causal softmax attention, no dropout; initialised with GPT-2's
scheme (weights and both tables normal(0, 0.02), the residual projections attn.wo and ffn.w2
normal(0, 0.02 / sqrt(2 n_layers)), biases 0, norm gains 1). Optimiser: AdamW, torch 1.13's default
implementation (not fused: 1.13's AdamW has no fused kernel, and on CPU it runs the per-tensor loop,
as nanoGPT gets on a CPU), weight decay on every 2-D tensor except the position table; nanoGPT's learning-rate schedule (linear
warmup lr * (it + 1) / (warmup + 1), then cosine to min_lr at --decay, min_lr after); global
gradient-norm clipping.

Data: character level, the vocabulary being the sorted distinct bytes of the whole file; the first
90% of the bytes train, the last 10% validate (nanoGPT's shakespeare_char split); each batch is
--batch random windows of --seq + 1 tokens. With --vocab V the tokens are random ids in [0, V)
instead (only the speed matters then).

Prints progress, then as its last line:
  RESULT ms_per_iter=<median> tokens_per_s=<batch*seq/median> val_loss=<mean of --eval-iters val batches>
The median leaves out the first 3 iterations when --iters > 10, else the first one (warm-up).
val_loss is nan when --eval-iters is 0.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.wo = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.n_head
        split = lambda y: y.view(b, t, h, d // h).transpose(1, 2)  # (b, h, t, hd)
        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h)) + mask[:t, :t]
        y = torch.softmax(scores, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w1 = nn.Linear(d, 4 * d)
        self.w2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, n_head)
        self.norm2 = nn.LayerNorm(d, eps=1e-5)
        self.ffn = FeedForward(d)

    def forward(self, x, mask):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, vocab, context, d, n_layer, n_head):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.pos_embeddings = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.norm = nn.LayerNorm(d, eps=1e-5)
        self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1), persistent=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() == 1:
                    p.fill_(1.0)  # norm gains
                elif name.endswith("attn.wo.weight") or name.endswith("ffn.w2.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok_embeddings(idx) + self.pos_embeddings.weight[:t]
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.norm(x) @ self.tok_embeddings.weight.t()  # tied output projection
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(it, a):
    if it < a.warmup:
        return a.lr * (it + 1) / (a.warmup + 1)
    if it > a.decay:
        return a.min_lr
    ratio = (it - a.warmup) / max(1, a.decay - a.warmup)
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="text file (character level); not needed with --vocab")
    p.add_argument("--vocab", type=int, default=0, help="random token ids in [0, V) instead of --data")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block", type=int, default=64, help="context_length: rows of the position table")
    p.add_argument("--seq", type=int, default=0, help="tokens per training sequence (0 = --block)")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--decay", type=int, default=2000)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-iters", type=int, default=200)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--log-every", type=int, default=100)
    a = p.parse_args()
    seq = a.seq or a.block
    if seq > a.block:
        p.error("--seq must be <= --block")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    if a.vocab > 0:
        vocab = a.vocab
        train = torch.randint(vocab, (1_000_000,))
        val = torch.randint(vocab, (100_000,))
    else:
        if not a.data:
            p.error("--data or --vocab is required")
        raw = open(a.data, "rb").read()
        alphabet = sorted(set(raw))
        vocab = len(alphabet)
        lut = torch.zeros(256, dtype=torch.long)
        lut[torch.tensor(alphabet)] = torch.arange(vocab)
        ids = lut[torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()]
        cut = int(len(raw) * 0.9)
        train, val = ids[:cut], ids[cut:]

    def batch(split):
        src = train if split == "train" else val
        start = torch.randint(len(src) - seq, (a.batch,))
        w = torch.stack([src[s:s + seq + 1] for s in start.tolist()])
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    model = Decoder(vocab, a.block, a.n_embd, a.n_layer, a.n_head)
    n_params = sum(q.numel() for q in model.parameters())
    decay = [q for n, q in model.named_parameters() if q.dim() == 2 and n != "pos_embeddings.weight"]
    no_decay = [q for n, q in model.named_parameters() if not (q.dim() == 2 and n != "pos_embeddings.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    print(f"torch {torch.__version__}: {torch.get_num_threads()} torch threads; model {n_params} parameters, "
          f"vocab {vocab}, {a.n_layer} layers, d {a.n_embd}, {a.n_head} heads; batch {a.batch} x {seq}", flush=True)

    times = []
    model.train()
    for it in range(a.iters):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(it, a)
        x, y = batch("train")
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        times.append(time.perf_counter() - t0)
        if (it + 1) % a.log_every == 0 or it == 0 or it + 1 == a.iters:
            print(f"iter {it + 1}: loss {loss.item():.4f}, {times[-1] * 1e3:.1f} ms", flush=True)

    val_loss = float("nan")
    if a.eval_iters > 0:
        model.eval()
        with torch.no_grad():
            val_loss = sum(model(*batch("val")).item() for _ in range(a.eval_iters)) / a.eval_iters
    skip = 3 if a.iters > 10 else min(1, a.iters - 1)
    kept = sorted(times[skip:])
    n = len(kept)
    med = kept[n // 2] if n % 2 else 0.5 * (kept[n // 2 - 1] + kept[n // 2])
    print(f"RESULT ms_per_iter={med * 1e3:.2f} tokens_per_s={a.batch * seq / med:.0f} val_loss={val_loss:.4f}",
          flush=True)


if __name__ == "__main__":
    main()
