#!/usr/bin/env bash
# Starts a private one-node SLURM cluster, runs fsdp-bench through srun and through the sbatch
# script, checks their output, and stops the cluster whatever happens.
# Then a chain of training jobs (slurm/train-chain.sbatch) that must end where one unchained run
# ends, and slurm/local-cluster/stop, which must stop the cluster's munged and no other.
# Usage: run_under_slurm.sh <source-dir> <fsdp-bench> <fsdp-train> <python with h5py> [epochs]
#        (exit 77 = skipped: no SLURM or not root; epochs of the chained training, default 60)
set -euo pipefail
source_dir=$1
bench=$2
trainer=$3
python=$4
chain_epochs=${5:-60}

if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  echo "SKIPPED: needs root and slurm-wlm + munge (scripts/install-deps --with-slurm)"
  exit 77
fi

# expect_results <what> <count> <output>: the output holds <count> JSON results over 4 ranks.
expect_results() {
  local found
  found=$(grep -c '"ranks":4' <<< "$3" || true)
  if [[ $found -ne $2 ]]; then
    echo "FAILED: expected $2 results over 4 ranks from $1, got $found"
    exit 1
  fi
}

state=$(mktemp -d /tmp/fsdp-slurm-test.XXXXXX)
cleanup() {
  local code=$?
  # A failure shows what the daemons logged: a step that never launched says why only there.
  if ((code != 0 && code != 77)); then
    for log in "$state"/log/*.log; do
      echo "== tail of $log"
      tail -n 40 "$log"
    done
  fi
  "$source_dir/slurm/local-cluster/stop" "$state" > /dev/null
  rm -rf "$state"
}
trap cleanup EXIT

FSDP_SLURM_PORT=${FSDP_SLURM_PORT:-16817} "$source_dir/slurm/local-cluster/start" "$state"
export SLURM_CONF=$state/slurm.conf
export OMPI_MCA_mpi_yield_when_idle=1

echo "== srun --mpi=pmix -n 4 fsdp-bench collectives"
out=$(timeout 120 srun --mpi=pmix -n 4 "$bench" collectives --max-bytes 65536 --json)
echo "$out"
expect_results srun 6 "$out"

echo "== sbatch --wait slurm/collectives.sbatch"
cd "$state"
timeout 180 sbatch --wait --export="ALL,FSDP_BIN=$(dirname "$bench")" \
  "$source_dir/slurm/collectives.sbatch" --max-bytes 16384 --json
job_out=$(cat "$state"/fsdp-collectives-*.out)
echo "$job_out"
expect_results "the batch job" 4 "$job_out"

echo "== sbatch --wait slurm/train.sbatch"
timeout 180 sbatch --wait --export="ALL,FSDP_BIN=$(dirname "$trainer")" \
  "$source_dir/slurm/train.sbatch" --epochs 2 --json
train_out=$(cat "$state"/fsdp-train-*.out)
echo "$train_out"
if ! grep -q '"type":"summary"' <<< "$train_out" || ! grep -q '"ranks":4' <<< "$train_out" ||
  ! grep -q '"pass":true' <<< "$train_out"; then
  echo "FAILED: the training batch job did not end with a 4-rank summary and a passing check"
  exit 1
fi
echo "== srun --mpi=pmix -n 4 fsdp-train --check, without OMPI_MCA_mpi_yield_when_idle"
# srun does not tell Open MPI that 4 ranks share 2 cores; fsdp's own waits back off (spin, yield,
# sleep) so the run still takes seconds (24.6 s before they did; docs/performance.md).
started=$(date +%s%N)
out=$(env -u OMPI_MCA_mpi_yield_when_idle timeout 120 srun --mpi=pmix -n 4 "$trainer" --check --json)
echo "took $((($(date +%s%N) - started) / 1000000)) ms"
if ! grep -q '"pass":true' <<< "$out"; then
  echo "$out"
  echo "FAILED: fsdp-train under srun without yield_when_idle did not pass its check"
  exit 1
fi

echo "== sbatch slurm/train.sbatch without FSDP_BIN and without fsdp-train on PATH"
if timeout 120 sbatch --wait --export="NONE,PATH=/usr/bin:/bin" "$source_dir/slurm/train.sbatch" \
  > /dev/null 2>&1; then
  echo "FAILED: the job ran without finding fsdp-train"
  exit 1
fi
missing_out=$(cat "$state"/fsdp-train-*.out | grep 'set FSDP_BIN' || true)
echo "$missing_out"
if [[ -z $missing_out ]]; then
  echo "FAILED: the job without FSDP_BIN did not say to set FSDP_BIN"
  exit 1
fi

echo "== a chain of jobs: slurm/train-chain.sbatch, links of one minute"
# Each link may train for half as long as the unchained run took (its minute less
# FSDP_TIME_MARGIN_S), so that the chain needs two links or more whatever the machine's speed:
# 60 epochs took 20 s on one VM and 8 s on a faster one (the sanitizer build, 10 times slower,
# trains 6).
chain_args=(--dtype fp64 --hidden 256,256 --epochs "$chain_epochs" --json)
timeout 300 srun --mpi=pmix -n 4 "$trainer" "${chain_args[@]}" \
  --checkpoint-dir "$state/unchained" > "$state/unchained.out"
# srun exits 0 when its step fails to launch; the run must have trained to its summary.
if ! grep -q '"type":"summary"' "$state/unchained.out"; then
  echo "FAILED: the unchained run did not end with a summary (slurmd.log below says why)"
  exit 1
fi
link_s=$("$python" -c 'import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
summary = [l for l in lines if l.get("type") == "summary"][-1]
print(max(2, min(10, int(summary["total_seconds"] / 2))))' "$state/unchained.out")
echo "the unchained run took $(grep -o '"total_seconds":[0-9.]*' "$state/unchained.out"); links train for $link_s s"
timeout 60 sbatch --time=00:01:00 \
  --export="ALL,FSDP_BIN=$(dirname "$trainer"),FSDP_CHECKPOINT_DIR=$state/chain,FSDP_TIME_MARGIN_S=$((60 - link_s))" \
  "$source_dir/slurm/train-chain.sbatch" "${chain_args[@]}"
for _ in $(seq 600); do
  if grep -qv ' exit 4$' "$state/chain/chain.log" 2> /dev/null; then break; fi
  sleep 1
done
echo "chain.log:"
cat "$state/chain/chain.log"
cat "$state"/fsdp-chain-*.out
links=$(wc -l < "$state/chain/chain.log")
if ! tail -n 1 "$state/chain/chain.log" | grep -q ' exit 0$' || ((links < 2)); then
  echo "FAILED: the chain did not finish in two links or more (chain.log above)"
  exit 1
fi
"$python" "$source_dir/tests/train/checkpoint_runs.py" compare --exact "$state/unchained" \
  "$state/chain"
# A link that hands over (fsdp-train's exit 4) is no error: srun's report of it is filtered out.
if grep -h 'Exited with exit code 4' "$state"/fsdp-chain-*.out; then
  echo "FAILED: the chain's normal hand-over (exit 4) printed as an srun error (above)"
  exit 1
fi

echo "== slurm/local-cluster/stop stops the cluster's own munged, and no other"
munged_pid=$(cat "$state/run/munged.pid")
# Another munged on the machine (the system's, another cluster's): not this cluster's to stop.
other=$(mktemp -d /tmp/fsdp-other-munged.XXXXXX)
chmod a+x "$other"
(umask 077 && head -c 128 /dev/urandom > "$other/key")
/usr/sbin/munged --socket="$other/socket" --key-file="$other/key" --pid-file="$other/pid" \
  --log-file="$other/log" --seed-file="$other/seed"
"$source_dir/slurm/local-cluster/stop" "$state" > /dev/null
other_alive=0
if kill -0 "$(cat "$other/pid")" 2> /dev/null; then other_alive=1; fi
kill "$(cat "$other/pid")" 2> /dev/null || true
rm -rf "$other"
if kill -0 "$munged_pid" 2> /dev/null; then
  echo "FAILED: munged $munged_pid, started by slurm/local-cluster/start, still runs after stop"
  exit 1
fi
if ((other_alive == 0)); then
  echo "FAILED: slurm/local-cluster/stop stopped a munged that its start did not begin"
  exit 1
fi
echo "PASSED: srun and sbatch ran fsdp-bench and fsdp-train on 4 ranks; a $links-link chain of jobs ended where one run ends, without srun errors at its hand-overs; stop stopped the cluster's munged only"
