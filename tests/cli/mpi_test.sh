#!/usr/bin/env bash
# Data-parallel training under Open MPI on loopback (ctest "cli.mpi", label cli; docs/distributed.md):
#   * mpirun -np 2 and -np 4 with --grad-accum 4, dropout and clipping active: every step's loss, the
#     final model and the checkpoint's tensors equal one process's, bit for bit; -np 2 and -np 3 with
#     --grad-accum 6 (blocks of 3 and 2: nodes of the tree that are not powers of two) likewise;
#     the reduction overlapped with the backward pass where each block is a power of two, and
#     --overlap 0 (reduced after it) the same bits;
#   * 2 processes x 1 thread equal 1 process x 2 threads; --threads 0 divides the cores;
#   * a 2-process checkpoint resumed with 1 and with 4 processes continues exactly;
#   * --zero 1 (AdamW's moments sharded) on 2 and 4 processes equals one process, and its checkpoint
#     resumes with 1 process and with 4 sharded ones;
#   * --grad-accum not a multiple of N, and ranks given other options, or files of the same name
#     holding other data or another config, refused by name;
#   * a rank killed with SIGKILL ends the job within seconds, non-zero, naming the rank; a rank
#     stopped with SIGSTOP is named by tformer's own watchdog (TFORMER_MPI_TIMEOUT) and the job
#     ends; in both cases the last checkpoint is intact and --resume continues from it;
#   * two hosts, as two network namespaces on a bridge, equal one process (skipped, saying why,
#     where namespaces cannot be made).
# Exit 77 (ctest: skipped) when mpirun is missing or tformer was built without MPI.
#   tests/cli/mpi_test.sh PATH/TO/tformer
set -uo pipefail
tf="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"  # absolute: some ranks start in other folders (-wdir)
here="$(cd "$(dirname "$0")/.." && pwd)"   # tests/
command -v mpirun > /dev/null || { echo "mpi_test: skipped: no mpirun (scripts/install-deps.sh installs openmpi-bin)"; exit 77; }
tmp="${TFORMER_TEST_TMP:-$(mktemp -d)}"
[[ -n "${TFORMER_TEST_TMP:-}" ]] || trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo)
passed=0
failed=0
check() {  # check NAME COMMAND...: the command must succeed
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}

data="$here/fixtures/tinyshakespeare_100k.txt"
cat > "$tmp/tiny.json" <<'JSON'
{"context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 4, "dropout": 0.1}
JSON
base=(--data "$data" --val-fraction 0.1 --tokenizer char --config "$tmp/tiny.json" --batch 2 --context 32
      --lr 3e-3 --grad-clip 0.5 --eval-every 8 --eval-steps 2 --log-every 1 --seed 5)
# Built without MPI: tformer refuses to run under mpirun, saying so.
"${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 2 --steps 1 --out "$tmp/probe" > "$tmp/probe.log" 2>&1
if grep -q "built without MPI" "$tmp/probe.log"; then
  echo "mpi_test: skipped: this tformer was built without MPI"; exit 77
fi
steps_of() { grep -o '^step [0-9]*/[0-9]* loss [0-9.]*' "$1" | sed 's|/[0-9]* | |' | sort -n -k2 -u; }
tensors() {  # the data buffer of a safetensors file (the header names the run folder, which differs)
  local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  tail -c +$((9 + n)) "$1"
}
same_run() {  # same_run NAME A B: equal losses, models and checkpoint tensors
  check "$1: every step's loss equal" cmp -s <(steps_of "$2.log") <(steps_of "$3.log")
  check "$1: the final model is byte-identical" cmp -s "$2/model.safetensors" "$3/model.safetensors"
  check "$1: the checkpoint's tensors are byte-identical" \
    cmp -s <(tensors "$2/checkpoint.safetensors") <(tensors "$3/checkpoint.safetensors")
}

for k in 4 6; do
  "$tf" train "${base[@]}" --grad-accum $k --steps 24 --decay-steps 24 --threads 1 --out "$tmp/one$k" > "$tmp/one$k.log" 2>&1
  check "K=$k: one process exits 0" test $? -eq 0
done
for case in "4 2" "4 4" "6 2" "6 3"; do
  read -r k n <<< "$case"
  "${mpi[@]}" -np $n "$tf" train "${base[@]}" --grad-accum $k --steps 24 --decay-steps 24 --threads 1 --out "$tmp/np$n-$k" \
    > "$tmp/np$n-$k.log" 2>&1
  check "K=$k, $n processes: exit 0" test $? -eq 0
  check "K=$k, $n processes: the log says so" grep -q "1 threads in each of $n processes ($((k / n)) micro-batches each)" "$tmp/np$n-$k.log"
  same_run "K=$k, $n processes against one" "$tmp/one$k" "$tmp/np$n-$k"
  # The reduction overlaps the last backward when a process's block is a power of two (2, 1, 2).
  if [[ "$case" == "6 2" ]]; then
    check "K=6, 2 processes (blocks of 3): not overlapped" bash -c "! grep -q 'overlapped with the backward' '$tmp/np$n-$k.log'"
  else
    check "K=$k, $n processes: overlapped with the backward pass" grep -q "overlapped with the backward pass" "$tmp/np$n-$k.log"
  fi
done
"${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 4 --steps 24 --decay-steps 24 --threads 1 --overlap 0 \
  --out "$tmp/ov0" > "$tmp/ov0.log" 2>&1
check "--overlap 0: not overlapped" bash -c "! grep -q 'overlapped with the backward' '$tmp/ov0.log'"
same_run "K=4, 2 processes, --overlap 0, against one" "$tmp/one4" "$tmp/ov0"
check "only rank 0 prints: one progress line per step" test "$(grep -c '^step [0-9]*/24 loss' "$tmp/np4-4.log")" -eq 24

# Threads: 1 process x 2 threads, 2 processes x --threads 0 (the cores divided: 1 each here).
"$tf" train "${base[@]}" --grad-accum 4 --steps 24 --decay-steps 24 --threads 2 --out "$tmp/t2" > "$tmp/t2.log" 2>&1
same_run "1 process x 2 threads against 1 x 1" "$tmp/one4" "$tmp/t2"
"${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 4 --steps 24 --decay-steps 24 --threads 0 --out "$tmp/t0" > "$tmp/t0.log" 2>&1
check "--threads 0 under mpirun -np 2 on $(nproc) cores: $(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1)) each" \
  grep -q "$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1)) threads in each of 2 processes" "$tmp/t0.log"
same_run "2 processes x --threads 0 against 1 x 1" "$tmp/one4" "$tmp/t0"

# Resume a 2-process checkpoint (step 12) with 1 and with 4 processes.
"${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 4 --steps 12 --decay-steps 24 --threads 1 --out "$tmp/r1" > "$tmp/r.log" 2>&1
check "the 2-process half exits 0" test $? -eq 0
cp -r "$tmp/r1" "$tmp/r4"
"$tf" train --resume "$tmp/r1" --steps 24 > "$tmp/r1.log" 2>&1
check "resumed with 1 process: exit 0" test $? -eq 0
cat "$tmp/r.log" >> "$tmp/r1.log"
same_run "2 processes then 1, against one" "$tmp/one4" "$tmp/r1"
"${mpi[@]}" -np 4 "$tf" train --resume "$tmp/r4" --steps 24 > "$tmp/r4.log" 2>&1
check "resumed with 4 processes: exit 0" test $? -eq 0
cat "$tmp/r.log" >> "$tmp/r4.log"
same_run "2 processes then 4, against one" "$tmp/one4" "$tmp/r4"

# ZeRO-1: AdamW's moments sharded; the same bits, and its checkpoint (gathered whole) resumes with
# 1 process and with 4 sharded ones.
for n in 2 4; do
  "${mpi[@]}" -np $n "$tf" train "${base[@]}" --grad-accum 4 --steps 24 --decay-steps 24 --threads 1 --zero 1 \
    --out "$tmp/z$n" > "$tmp/z$n.log" 2>&1
  check "--zero 1, $n processes: exit 0" test $? -eq 0
  same_run "--zero 1, $n processes against one" "$tmp/one4" "$tmp/z$n"
  check "--zero 1, $n processes: reduced after the backward (not overlapped)" \
    bash -c "! grep -q 'overlapped with the backward' '$tmp/z$n.log'"
done
"${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 4 --steps 12 --decay-steps 24 --threads 1 --zero 1 \
  --out "$tmp/zr1" > "$tmp/zr.log" 2>&1
cp -r "$tmp/zr1" "$tmp/zr4"
"$tf" train --resume "$tmp/zr1" --steps 24 > "$tmp/zr1.log" 2>&1
cat "$tmp/zr.log" >> "$tmp/zr1.log"
same_run "--zero 1 on 2 processes, then 1 process, against one" "$tmp/one4" "$tmp/zr1"
"${mpi[@]}" -np 4 "$tf" train --resume "$tmp/zr4" --steps 24 > "$tmp/zr4.log" 2>&1
cat "$tmp/zr.log" >> "$tmp/zr4.log"
same_run "--zero 1 on 2 processes, then on 4, against one" "$tmp/one4" "$tmp/zr4"

# Refusals.
"${mpi[@]}" -np 3 "$tf" train "${base[@]}" --grad-accum 4 --steps 4 --out "$tmp/bad" > "$tmp/bad.log" 2>&1
check "--grad-accum 4 under -np 3: non-zero exit" test $? -ne 0
check "... naming both numbers" grep -q -- "--grad-accum 4 is not a multiple of the 3 processes" "$tmp/bad.log"
"${mpi[@]}" -np 1 "$tf" train "${base[@]}" --grad-accum 2 --steps 4 --out "$tmp/mm" : \
  -np 1 "$tf" train "${base[@]}" --grad-accum 2 --steps 4 --min-lr 1e-5 --out "$tmp/mm" > "$tmp/mm.log" 2>&1
check "ranks with other options: non-zero exit" test $? -ne 0
check "... naming the rank" grep -q "process 1 has other options than process 0" "$tmp/mm.log"
# The same flags, naming files that differ from host to host (each rank in its own folder, -wdir):
# other data (the same bytes in another order: the same alphabet, other tokens), another config.
for w in wa wb; do
  mkdir -p "$tmp/$w"
  cp "$tmp/tiny.json" "$tmp/$w/c.json"
done
cp "$data" "$tmp/wa/data.txt"
tac "$data" > "$tmp/wb/data.txt"
rel=(--data data.txt --val-fraction 0.1 --tokenizer char --config c.json --batch 2 --context 32 --grad-accum 2 --steps 4
     --eval-every 0 --out run)
"${mpi[@]}" -np 1 -wdir "$tmp/wa" "$tf" train "${rel[@]}" : -np 1 -wdir "$tmp/wb" "$tf" train "${rel[@]}" \
  > "$tmp/md.log" 2>&1
check "ranks with other data under the same name: non-zero exit" test $? -ne 0
check "... naming the rank and the data" grep -q "process 1 has other training data than process 0" "$tmp/md.log"
cp "$data" "$tmp/wb/data.txt"
sed 's/"dropout": 0.1/"dropout": 0.3/' "$tmp/tiny.json" > "$tmp/wb/c.json"
rm -rf "$tmp/wa/run" "$tmp/wb/run"
"${mpi[@]}" -np 1 -wdir "$tmp/wa" "$tf" train "${rel[@]}" : -np 1 -wdir "$tmp/wb" "$tf" train "${rel[@]}" \
  > "$tmp/mc.log" 2>&1
check "ranks with another config under the same name: non-zero exit" test $? -ne 0
check "... naming the rank and the config" grep -q "process 1 has other model config than process 0" "$tmp/mc.log"

# A rank killed, a rank stopped: the job ends, naming it; the last checkpoint resumes.
rank_pid() {  # the pid of the tformer of rank $1 under the mpirun $2
  local p
  for p in $(pgrep -f "tformer train.*$2"); do
    grep -qz "^OMPI_COMM_WORLD_RANK=$1$" "/proc/$p/environ" 2> /dev/null && { echo "$p"; return; }
  done
}
for how in KILL STOP; do
  d="$tmp/fail-$how"
  TFORMER_MPI_TIMEOUT=3 "${mpi[@]}" -np 2 "$tf" train "${base[@]}" --grad-accum 4 --steps 100000 --decay-steps 100000 \
    --checkpoint-every 20 --threads 1 --out "$d" > "$d.log" 2>&1 &
  job=$!
  for _ in $(seq 1 200); do [[ -s "$d/checkpoint.safetensors" ]] && break; sleep 0.05; done
  sleep 0.3
  victim=$(rank_pid 1 "$d")
  kill -"$how" "$victim"
  t0=$(date +%s%N)
  wait "$job"
  rc=$?
  secs=$((($(date +%s%N) - t0) / 1000000000))
  kill -9 "$victim" 2> /dev/null
  check "SIG$how of rank 1: the job ends non-zero ($rc) within 10 s ($secs s)" test "$rc" -ne 0 -a "$secs" -le 10
  if [[ $how == KILL ]]; then
    check "... mpirun names rank 1" grep -q "process rank 1 .*exited on signal 9" "$d.log"
  else
    check "... tformer's watchdog names rank 1" grep -q "rank 1 stopped answering" "$d.log"
  fi
  "$tf" train --resume "$d" --steps "$(($(grep -o '"step":[0-9]*' "$d/metrics.jsonl" | tail -1 | cut -d: -f2) + 30))" \
    > "$d.resume.log" 2>&1
  check "... the last checkpoint resumes" test $? -eq 0
done

# Two hosts: two network namespaces on a bridge (the root side holds 10.77.0.1, where the remote
# daemons reach mpirun), each a host named hosta / hostb with its own address; mpirun starts the
# remote daemons through an rsh agent that runs them under `ip netns exec`. The two-host run equals
# one process bit for bit.
ns_a="tfa$$" ns_b="tfb$$" br="tfbr$$"
cleanup_net() {
  ip netns del "$ns_a" 2> /dev/null
  ip netns del "$ns_b" 2> /dev/null
  ip link del "$br" 2> /dev/null
  return 0
}
trap 'cleanup_net; [[ -n "${TFORMER_TEST_TMP:-}" ]] || rm -rf "$tmp"' EXIT
net_up() {
  ip netns add "$ns_a" && ip netns add "$ns_b" || return 1
  ip link add "$br" type bridge && ip addr add 10.77.0.1/24 dev "$br" && ip link set "$br" up || return 1
  local h ns addr
  for h in a b; do
    ns="tf$h$$"
    addr=$([[ $h == a ]] && echo 10.77.0.2 || echo 10.77.0.3)
    ip link add "tfv$h$$" type veth peer name "tfp$h$$" || return 1
    ip link set "tfp$h$$" master "$br" && ip link set "tfp$h$$" up || return 1
    ip link set "tfv$h$$" netns "$ns" || return 1
    ip netns exec "$ns" ip addr add "$addr/24" dev "tfv$h$$" && ip netns exec "$ns" ip link set "tfv$h$$" up &&
      ip netns exec "$ns" ip link set lo up || return 1
  done
}
if net_up 2> "$tmp/netns.err"; then
  cat > "$tmp/agent.sh" <<AGENT
#!/bin/bash
# mpirun's rsh agent: HOST COMMAND... -> COMMAND inside that host's network namespace
host="\$1"; shift
case "\$host" in hosta) ns=$ns_a ;; hostb) ns=$ns_b ;; *) echo "no host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
  chmod 755 "$tmp/agent.sh"
  printf 'hosta slots=1\nhostb slots=1\n' > "$tmp/hosts"
  # A launch that fails before tformer starts (Open MPI's daemons not yet reaching mpirun over the
  # fresh link: "ORTE ... daemon") is retried, at most twice; tformer's own failures are not.
  for try in 1 2 3; do
    rm -rf "$tmp/hosts2"
    timeout 120 mpirun --hostfile "$tmp/hosts" -np 2 --bind-to none --mca plm_rsh_agent "$tmp/agent.sh" \
      --mca routed direct --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 --mca btl self,tcp \
      "$tf" train "${base[@]}" --grad-accum 4 --steps 24 --decay-steps 24 --threads 1 --out "$tmp/hosts2" \
      > "$tmp/hosts2.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && grep -q "ORTE" "$tmp/hosts2.log" && ! grep -q "^step 1/" "$tmp/hosts2.log" || break
    echo "mpi_test: two hosts: Open MPI's launch failed (try $try); retrying"
    sleep 1
  done
  check "two hosts (network namespaces): exit 0" test $rc -eq 0
  same_run "two hosts against one process" "$tmp/one4" "$tmp/hosts2"
  cleanup_net
else
  cleanup_net
  echo "mpi_test: the two-host case is skipped: network namespaces cannot be made here ($(head -c 200 "$tmp/netns.err"))"
fi

echo "mpi_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
