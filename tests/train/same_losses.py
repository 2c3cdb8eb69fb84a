#!/usr/bin/env python3
"""fsdp-train trains bit for bit alike with and without an option that must not change the numbers.

  same_losses.py --mpiexec M --train T --ranks N --option OPTION [fsdp-train options...]

Runs the same training twice, once with --OPTION added, and compares every epoch's training and
evaluation loss as JSON prints them (17 significant digits): they must be equal, not close.
OPTIONs: activation-checkpointing (each block recomputed inside its backward scope from its
saved input), where the recomputing run must also hold fewer activation bytes per rank; and
optimizer-in-backward (each unit's optimizer step as its gradient reduction lands). Exits 0
when everything holds, 1 otherwise.
"""
import argparse
import json
import subprocess
import sys


def run(args, extra):
    command = [args.mpiexec, "-n", str(args.ranks), args.train, *args.options, "--json", *extra]
    print("same_losses: " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        print(result.stdout)
        sys.exit("same_losses: fsdp-train exited %d" % result.returncode)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    config = next(line for line in lines if line["type"] == "config")
    epochs = [(line["loss"], line["eval_loss"]) for line in lines if line["type"] == "epoch"]
    return config["activation_bytes_per_rank"], epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--option", required=True,
                        choices=["activation-checkpointing", "optimizer-in-backward"])
    args, options = parser.parse_known_args()
    args.options = options
    plain_bytes, plain = run(args, [])
    optioned_bytes, optioned = run(args, ["--" + args.option])
    print("losses (train, eval) per epoch:\n  without --%s %s\n  with              %s" %
          (args.option, plain, optioned))
    failed = False
    if not plain or plain != optioned:
        print("same_losses: the losses differ (or no epoch ran)")
        failed = True
    if args.option == "activation-checkpointing":
        print("activations per rank: %d bytes kept, %d with checkpointing" %
              (plain_bytes, optioned_bytes))
        if not optioned_bytes < plain_bytes:
            print("same_losses: checkpointing did not reduce the activation bytes")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
