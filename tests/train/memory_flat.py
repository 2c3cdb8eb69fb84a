#!/usr/bin/env python3
"""fsdp-train's resident memory stays flat over a long run (issue: 1.2 KB per epoch per rank
once grew without bound, every epoch's record kept).

  memory_flat.py --mpiexec M --train T [--epochs N]

Trains a tiny model for N epochs (default 10,000; one step each) on 1 rank and reads the
largest rank's VmRSS from each epoch's JSON line (rss_bytes_per_rank_max). Memory is allowed
to settle during the first tenth of the run; from there to the end it may grow by at most
GROWTH_LIMIT bytes, a tenth of what the old leak added over the same epochs. Prints the figures;
exits 0 when the memory is flat, 1 otherwise.

One rank, because what grew was each epoch's bookkeeping, the same on every rank, and because 2
ranks sharing a core of a loaded machine wait milliseconds for each other in every collective:
10,000 epochs then took longer than the test's limit (CI), where 1 rank takes 2 s.
"""
import argparse
import json
import os
import subprocess
import sys

GROWTH_LIMIT = 1 << 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--epochs", type=int, default=10000)
    args = parser.parse_args()
    command = [args.mpiexec, "-n", "1", args.train, "--samples", "10", "--batch-size", "8",
               "--hidden", "4", "--epochs", str(args.epochs), "--json"]
    print("memory_flat: " + " ".join(command), flush=True)
    # In the sanitizer build, AddressSanitizer keeps freed memory in quarantine (256 MB) to catch
    # uses after free: resident memory would grow until it is full. Without it, the run measures
    # the program's own memory, as in any other build (the option means nothing elsewhere).
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(
        filter(None, [env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=0",
                      "thread_local_quarantine_size_kb=0"]))
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=600, env=env)
    if run.returncode != 0:
        print(run.stdout[-2000:])
        print(f"memory_flat: FAIL: fsdp-train exited {run.returncode}")
        return 1
    rss = {}
    for line in run.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "epoch":
            rss[record["epoch"]] = record["rss_bytes_per_rank_max"]
    settled = max(1, args.epochs // 10)
    if len(rss) != args.epochs or settled not in rss:
        print(f"memory_flat: FAIL: {len(rss)} epoch lines with a resident size, "
              f"{args.epochs} expected")
        return 1
    growth = rss[args.epochs] - rss[settled]
    print(f"memory_flat: VmRSS (largest rank) at epoch 1: {rss[1] / 2**20:.2f} MiB, "
          f"at epoch {settled}: {rss[settled] / 2**20:.2f} MiB, at epoch {args.epochs}: "
          f"{rss[args.epochs] / 2**20:.2f} MiB; growth over the last {args.epochs - settled} "
          f"epochs {growth / 1024:.0f} KiB (limit {GROWTH_LIMIT / 1024:.0f} KiB)")
    if growth > GROWTH_LIMIT:
        print("memory_flat: FAIL: resident memory grows with the epochs")
        return 1
    print("memory_flat: memory is flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
