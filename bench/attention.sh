#!/usr/bin/env bash
# Attention benchmark in one go: the tiled kernel and the reference (bench_attention), PyTorch 1.13
# on the same shapes (attention_torch.py), then the ratios.
#   bench/attention.sh [build-dir]     (default: build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$build"/bench/bench_attention --benchmark_out="$out/cpp.json" --benchmark_out_format=json
/usr/bin/python3 "$here/attention_torch.py" 1024 4096 | tee "$out/torch.txt"

/usr/bin/python3 - "$out/cpp.json" "$out/torch.txt" <<'PY'
import json, re, sys
cpp = {b["name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
torch = {}
for line in open(sys.argv[2]):
    m = re.match(r"torch (\w+) N=(\d+) ms=([\d.]+)", line)
    if m:
        torch[(m.group(1), int(m.group(2)))] = float(m.group(3))

def ms(name):
    b = cpp.get(name)
    if b is None:
        return None
    scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6}[b["time_unit"]]
    return b["real_time"] * scale

sgemm = next((b["GFLOPs"] for n, b in cpp.items() if n.startswith("BM_SgemmRate")), float("nan"))
print(f"\nsgemm (n=1024, 2 threads) in this run: {sgemm:.1f} GFLOP/s")
print(f"{'N':>6} {'pass':>7} {'tiled ms':>10} {'GFLOP/s':>8} {'/sgemm':>7} {'ref ms':>10} {'torch ms':>10}"
      f" {'ref/tiled':>9} {'torch/tiled':>11} {'tiled bytes':>12} {'ref bytes':>12}")
for n in (1024, 4096, 16384):
    for bwd, label in ((0, "fwd"), (1, "fwdbwd")):
        suffix = f"/N:{n}/bwd:{bwd}"
        t = next((k for k in cpp if k.startswith("BM_FlashAttention" + suffix)), None)
        r = next((k for k in cpp if k.startswith("BM_ReferenceAttention" + suffix)), None)
        if t is None:
            continue
        tm, rm, pm = ms(t), ms(r) if r else None, torch.get((label, n))
        f = lambda x: f"{x:10.1f}" if x is not None else f"{'-':>10}"
        ratio = lambda x: f"{x / tm:9.2f}" if x is not None else f"{'-':>9}"
        print(f"{n:>6} {label:>7} {tm:10.1f} {cpp[t]['GFLOPs']:8.1f} {cpp[t]['frac_sgemm']:7.2f} {f(rm)} {f(pm)}"
              f" {ratio(rm)} {ratio(pm):>11} {int(cpp[t]['extra_bytes']):>12}"
              f" {int(cpp[r]['extra_bytes']) if r else '-':>12}")
print("\npeak extra bytes of one forward+backward (BM_ExtraMemory):")
for k, b in cpp.items():
    if k.startswith("BM_ExtraMemory"):
        print(f"  {k.split('/')[1]:>8}: tiled {int(b['tiled_bytes']):>14,}  reference {int(b['reference_bytes']):>16,}")
print("\ndecode step (one token, 8 heads, hd 64):")
for cache in (1024, 8192, 32768):
    t, r = ms(f"BM_Decode/cache:{cache}/ref:0/real_time"), ms(f"BM_Decode/cache:{cache}/ref:1/real_time")
    if t is not None:
        print(f"  cache {cache:>6}: tiled {t * 1e3:9.1f} us  reference {r * 1e3:9.1f} us  ratio {r / t:5.2f}")
PY
