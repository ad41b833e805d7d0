#!/usr/bin/env bash
# Data-parallel training over a link of known bandwidth (docs/distributed.md), against the ring
# all-reduce model. Two hosts are two network namespaces on a bridge (as tests/cli/mpi_test.sh
# makes them); each host's side of the link is throttled with tc's token bucket (tbf) to RATE, and
# 2 processes x 1 thread train nanoGPT's bigger shape and (with GPT-2's vocabulary fetched) the
# GPT-2 124M shape for a few steps. Printed per shape and rate: the time each step spends in
# collectives (tformer's own count, rank 0), and what the ring model predicts for it:
#     max(bytes sent per step / bandwidth, the unthrottled run's time in collectives)
# where bytes per step = 2 (N - 1) / N x 4 P for N = 2, the payload tformer counts, and the floor
# is what the step spends in collectives without a throttle (latency, copies, and waiting for the
# slower rank's compute on this noisy machine). These runs reduce after the backward pass
# (--overlap 0), so that the time in collectives is the communication's; each is followed by the
# same run with --overlap 1 (the default), which prints its median step, the ratio of the two, and
# the share of the step it still waited for communication (the rest hidden behind the backward).
#
#   bench/distributed_links.sh [BUILD_DIR]      (root; env RATES="1gbit 10gbit" STEPS=4)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
tf="$build/tformer"
rates="${RATES:-1gbit 10gbit}"
steps="${STEPS:-4}"
[[ -x "$tf" ]] || { echo "no tformer binary at $tf (build first)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
ns_a="tla$$" ns_b="tlb$$" br="tlbr$$"
cleanup() {
  ip netns del "$ns_a" 2> /dev/null || true
  ip netns del "$ns_b" 2> /dev/null || true
  ip link del "$br" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$br" type bridge
ip addr add 10.78.0.1/24 dev "$br"
ip link set "$br" up
for h in a b; do
  ns="tl$h$$"
  ip link add "tlv$h$$" type veth peer name "tlp$h$$"
  ip link set "tlp$h$$" master "$br"
  ip link set "tlp$h$$" up
  ip link set "tlv$h$$" netns "$ns"
  ip netns exec "$ns" ip addr add "10.78.0.$([[ $h == a ]] && echo 2 || echo 3)/24" dev "tlv$h$$"
  ip netns exec "$ns" ip link set "tlv$h$$" up
  ip netns exec "$ns" ip link set lo up
done
cat > "$work/agent.sh" <<AGENT
#!/bin/bash
host="\$1"; shift
case "\$host" in hosta) ns=$ns_a ;; hostb) ns=$ns_b ;; *) exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod 755 "$work/agent.sh"
printf 'hosta slots=1\nhostb slots=1\n' > "$work/hosts"
# throttle RATE: each host's outgoing traffic limited (both directions of the link), or none.
throttle() {
  local h ns
  for h in a b; do
    ns="tl$h$$"
    ip netns exec "$ns" tc qdisc del dev "tlv$h$$" root 2> /dev/null || true
    [[ "$1" == none ]] || ip netns exec "$ns" tc qdisc add dev "tlv$h$$" root tbf rate "$1" burst 4mb latency 200ms
  done
}
bits_per_s() {  # 1gbit -> 1e9
  awk -v r="$1" 'BEGIN { n = r + 0; u = substr(r, length(n "") + 1);
    m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; print n * m }'
}
data="$here/../shared/data/tinyshakespeare.txt"
[[ -f "$data" ]] || data="$here/tests/fixtures/tinyshakespeare_100k.txt"
cat > "$work/bigger.json" <<'JSON'
{"context_length": 256, "d_model": 384, "n_layers": 6, "n_heads": 6}
JSON
cat > "$work/gpt2.json" <<'JSON'
{"context_length": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12}
JSON

# launch FLAGS...: tformer train FLAGS on the two hosts into $work/run, log $work/run.log. A launch
# that fails before tformer starts (Open MPI's daemons not reaching mpirun: "ORTE ...") is retried.
launch() {
  local try rc
  for try in 1 2 3 4; do
    rm -rf "$work/run"
    rc=0
    timeout 1200 mpirun --hostfile "$work/hosts" -np 2 --bind-to none --mca plm_rsh_agent "$work/agent.sh" \
      --mca routed direct --mca oob_tcp_if_include 10.78.0.0/24 --mca btl_tcp_if_include 10.78.0.0/24 --mca btl self,tcp \
      "$tf" train "$@" --out "$work/run" > "$work/run.log" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] && return 0
    grep -q "ORTE" "$work/run.log" && ! grep -q "^step 1/" "$work/run.log" || break
    sleep 1
  done
  tail -5 "$work/run.log"
  exit 1
}

shape() {  # shape NAME CONFIG TOKENIZER BATCH CONTEXT
  local name="$1" flags base_s=0 rate
  flags=(--data "$data" --tokenizer "$3" --config "$2" --batch "$4" --context "$5" --grad-accum 2 --steps "$steps"
         --eval-every 0 --eval-steps 1 --log-every 1000 --seed 1 --threads 1)
  echo "$name (2 processes on two namespace hosts, $steps steps):"
  for rate in none $rates; do
    throttle "$rate"
    launch "${flags[@]}" --overlap 0
    local line mib share med comm_s
    line=$(grep '^communication (rank 0)' "$work/run.log")
    mib=$(sed -n 's/.*: \([0-9.]*\) MiB sent per step.*/\1/p' <<< "$line")
    share=$(sed -n 's/.*step, \([0-9.]*\)% of the step.*/\1/p' <<< "$line")
    med=$(sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p' "$work/run.log")
    comm_s=$(awk -v m="$med" -v s="$share" 'BEGIN { printf "%.3f", m * s / 100 / 1000 }')
    if [[ "$rate" == none ]]; then
      base_s=$comm_s
      printf '  %-8s median step %8s ms, %8s MiB sent per step, %6s s in collectives\n' "loopback" "$med" "$mib" "$comm_s"
    else
      local predicted
      predicted=$(awk -v b="$mib" -v r="$(bits_per_s "$rate")" -v l="$base_s" \
        'BEGIN { t = b * 1048576 * 8 / r; printf "%.3f", (t > l ? t : l) }')
      printf '  %-8s median step %8s ms, %6s s in collectives; the model predicts %6s s (%s)\n' "$rate" "$med" \
        "$comm_s" "$predicted" "$(awk -v a="$comm_s" -v p="$predicted" 'BEGIN { printf "measured / predicted %.2f", a / p }')"
    fi
    launch "${flags[@]}" --overlap 1
    local med1 waited
    med1=$(sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p' "$work/run.log")
    waited=$(sed -n 's/.*backward pass: \([0-9.]*\)% waited for.*/\1/p' "$work/run.log")
    printf '  %-8s with --overlap 1: median step %8s ms (%s x the step without), %s s waited for communication\n' "" \
      "$med1" "$(awk -v a="$med1" -v b="$med" 'BEGIN { printf "%.2f", a / b }')" \
      "$(awk -v m="$med1" -v s="$waited" 'BEGIN { printf "%.3f", m * s / 100 / 1000 }')"
  done
  throttle none
}

shape bigger "$work/bigger.json" char 8 256
if [[ -f "$here/build-data/gpt2/encoder.json" ]]; then
  shape gpt2 "$work/gpt2.json" gpt2 4 64
else
  echo "gpt2: skipped (no build-data/gpt2: bash scripts/fetch-gpt2-vocab.sh)"
fi
