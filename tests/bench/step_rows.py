#!/usr/bin/env python3
"""fsdp-bench step, briefly: a row for every way of training, and the bytes sent per step.

  step_rows.py --mpiexec M --bench B --ranks N [--shard-group-size G]

Runs `fsdp-bench step --json` on N ranks with a small MLP (3 layers of 64, every parameter's
size divisible by N and by G) and checks, never a time:
  * a row for every mode (full_shard with and without prefetch, shard_grad_op, shard_optimizer,
    no_shard), for every mode again hybrid-sharded as N/G x G when G is given, and for one rank;
  * the bytes each rank sent in every step (counted from the collectives the units issued, as
    ring algorithms move them) equal what the estimate's formula says, less the backward gather
    of the last unit (the runtime keeps that unit gathered), and equal the ring arithmetic done
    here from the layer sizes alone;
  * hybrid no_shard, the one known difference: the units all-reduce whole gradients over the
    replicas where the formula counts each rank's piece, G times fewer bytes.

Exits 0 when everything holds ("all checks passed"), 1 with a message otherwise.
"""
import argparse
import json
import subprocess
import sys

WIDTH, LAYERS, FLOAT = 64, 3, 4


def fail(message):
    print("step_rows: FAIL: " + message, flush=True)
    sys.exit(1)


def ceil_div(a, b):
    return -(-a // b)


def ring_bytes(mode, ranks, group):
    """What one rank sends per step by the ring arithmetic of docs/plans.md, from the layer sizes:
    gather, gradient, replica_gradient."""
    sizes = [WIDTH * WIDTH, WIDTH] * LAYERS  # weight and bias of each layer
    replicas = ranks // group
    one_gather = sum((group - 1) * ceil_div(n, group) for n in sizes)
    if mode == "full_shard":  # forward and backward, the last unit kept gathered in between
        gather = one_gather * (2 * LAYERS - 1) // LAYERS
    elif mode in ("shard_grad_op", "shard_optimizer"):
        gather = one_gather
    else:
        gather = 0
    if mode == "no_shard":
        gradient = sum(2 * (group - 1) * ceil_div(n, group) for n in sizes)
        held = sizes  # whole gradients, all-reduced over the replicas as they are
    else:
        gradient = sum((group - 1) * ceil_div(n, group) for n in sizes)
        held = [ceil_div(n, group) for n in sizes]  # each rank's reduce-scattered piece
    replica = sum(2 * (replicas - 1) * ceil_div(n, replicas) for n in held)
    return [FLOAT * gather, FLOAT * gradient, FLOAT * replica]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--shard-group-size", type=int, default=0)
    args = parser.parse_args()
    n, g = args.ranks, args.shard_group_size
    command = [args.mpiexec, "-n", str(n), args.bench, "step", "--json", "--width", str(WIDTH),
               "--layers", str(LAYERS), "--local-batch", "4", "--steps", "2"]
    if g:
        command += ["--shard-group-size", str(g)]
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=300)
    print(result.stdout, flush=True)
    if result.returncode != 0:
        fail("exit code %d" % result.returncode)
    rows = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["name"]] = row

    modes = ["full_shard", "shard_grad_op", "shard_optimizer", "no_shard"]
    expected = {m: (m, n) for m in modes}
    expected["full_shard no prefetch"] = ("full_shard", n)
    if g and g < n:
        expected.update({"%s %dx%d" % (m, n // g, g): (m, g) for m in modes})
    expected["one_rank"] = ("full_shard", 1)
    if sorted(rows) != sorted(expected):
        fail("rows %s, expected %s" % (sorted(rows), sorted(expected)))

    for name, (mode, group) in expected.items():
        row = rows[name]
        ranks = 1 if name == "one_rank" else n
        if row["shard_group_size"] != group or row["ranks"] != ranks:
            fail("%s: group %s of %s ranks, expected %d of %d" %
                 (name, row["shard_group_size"], row["ranks"], group, ranks))
        sent = row["sent_bytes_per_step"]
        formula = row["formula_send_bytes_per_step"]
        measured = [sent["gather"], sent["gradient"], sent["replica_gradient"]]
        from_formula = [formula["forward_gather"] + formula["backward_gather"] -
                        formula["last_unit_backward_gather"], formula["gradient"],
                        formula["replica_gradient"]]
        by_hand = ring_bytes(mode, ranks, group)
        print("%-24s sent %s, formula less the kept unit %s, by hand %s" %
              (name, measured, from_formula, by_hand))
        if not row["sent_same_every_step"]:
            fail(name + ": the steps sent different bytes")
        if measured != by_hand:
            fail("%s: sent %s, but the ring arithmetic gives %s" % (name, measured, by_hand))
        if mode == "no_shard" and 1 < group < ranks:
            # Known: whole gradients cross between replicas, the formula counts pieces.
            if measured[:2] != from_formula[:2] or measured[2] != group * from_formula[2]:
                fail("%s: sent %s, formula %s; expected the formula but G = %d times its "
                     "replica bytes" % (name, measured, from_formula, group))
            if row["sent_equals_formula_less_kept_unit"]:
                fail(name + ": reported equal to the formula")
        else:
            if measured != from_formula or not row["sent_equals_formula_less_kept_unit"]:
                fail("%s: sent %s, formula less the kept unit %s" % (name, measured, from_formula))
            if mode != "full_shard" and formula["total"] != sent["total"]:
                fail("%s: sent %d, formula %d" % (name, sent["total"], formula["total"]))
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
