#!/usr/bin/env python3
"""fsdp-train's transformer trains bit for bit alike with and without activation checkpointing.

  gpt_checkpointing.py --mpiexec M --train T --ranks N [fsdp-train options...]

Runs the same training twice, once with --activation-checkpointing (each block recomputed inside
its backward scope from its saved input), and compares every epoch's training and evaluation loss
as JSON prints them (17 significant digits): they must be equal, not close. Also checks that the
recomputing run holds fewer activation bytes per rank. Exits 0 when both hold, 1 otherwise.
"""
import argparse
import json
import subprocess
import sys


def run(args, extra):
    command = [args.mpiexec, "-n", str(args.ranks), args.train, *args.options, "--json", *extra]
    print("gpt_checkpointing: " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        print(result.stdout)
        sys.exit("gpt_checkpointing: fsdp-train exited %d" % result.returncode)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    config = next(line for line in lines if line["type"] == "config")
    epochs = [(line["loss"], line["eval_loss"]) for line in lines if line["type"] == "epoch"]
    return config["activation_bytes_per_rank"], epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--ranks", type=int, default=2)
    args, options = parser.parse_known_args()
    args.options = options
    kept_bytes, kept = run(args, [])
    recomputed_bytes, recomputed = run(args, ["--activation-checkpointing"])
    print("activations per rank: %d bytes kept, %d with checkpointing" %
          (kept_bytes, recomputed_bytes))
    print("losses (train, eval) per epoch:\n  kept       %s\n  recomputed %s" % (kept, recomputed))
    failed = False
    if not kept or kept != recomputed:
        print("gpt_checkpointing: the losses differ (or no epoch ran)")
        failed = True
    if not recomputed_bytes < kept_bytes:
        print("gpt_checkpointing: checkpointing did not reduce the activation bytes")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
