#!/usr/bin/env python3
"""fsdp-bench step, briefly: a row for every way of training, and the bytes sent per step.

  step_rows.py --mpiexec M --bench B --ranks N [--shard-group-size G] [--model gpt]
               [--network BANDWIDTH,LATENCY]

Runs `fsdp-bench step --json` on N ranks with a small MLP (3 layers of 64, every parameter's
size divisible by N and by G), or with --model gpt a small GPT-2 (2 blocks of hidden 32, 2 heads,
8 tokens; the output head tied to wte.weight, so the embedding unit stays gathered from its
forward to its backward like the last unit), and checks, never a time:
  * a row for every mode (full_shard with and without prefetch, shard_grad_op, shard_optimizer,
    no_shard), for every mode again hybrid-sharded as N/G x G when G is given, each in fp32, bf16
    and fp16 (the units' param_dtype and reduce_dtype), and for one rank in fp32;
  * the bytes each rank sent in every step (counted from the collectives the units issued, as
    ring algorithms move them) equal what the estimate's formula says for the row's precision
    (fp32 or mixed), less the backward gather of the last unit (the runtime keeps that unit
    gathered), and equal the ring arithmetic done here from the layer sizes alone: 2 bytes per
    element gathered and reduced in bf16 and fp16, half the fp32 row's, and 4 bytes per element
    averaged over the replicas (the units average their fp32 gradient pieces);
  * hybrid no_shard, the one known difference: the units all-reduce whole gradients over the
    replicas where the formula counts each rank's piece, G times fewer bytes;
  * fp16 rows: the loss scaler's overflow check is one all-reduce of an int over the shard group
    per step, counted apart from the units' bytes;
  * the model state per rank the tracker measured equals the formula's (no padding here);
  * with --network, full_shard's rows under the dialled link in every precision: reductions
    waited, network off, and (but in fp16, whose loss scaler needs every gradient first) the
    optimizer in backward, flagged as such in its row alone, all sending full_shard's bytes.

Exits 0 when everything holds ("all checks passed"), 1 with a message otherwise.
"""
import argparse
import json
import subprocess
import sys

WIDTH, LAYERS = 64, 3
GPT_HIDDEN, GPT_LAYERS, GPT_SEQ, VOCAB = 32, 2, 8, 256
PRECISIONS = ["fp32", "bf16", "fp16"]
FP32, HALF, INT = 4, 2, 4


def fail(message):
    print("step_rows: FAIL: " + message, flush=True)
    sys.exit(1)


def ceil_div(a, b):
    return -(-a // b)


def unit_sizes(model):
    """The parameter sizes of every unit, in forward order, and the units kept gathered from
    their forward to their backward scope (one gather a step instead of two)."""
    if model == "gpt":
        c = GPT_HIDDEN
        block = [c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c]
        units = [[VOCAB * c, GPT_SEQ * c]] + [block] * GPT_LAYERS + [[c, c]]
        return units, {0, len(units) - 1}  # the tied wte's owner, and the last unit
    units = [[WIDTH * WIDTH, WIDTH]] * LAYERS  # weight and bias of each layer
    return units, {LAYERS - 1}


def ring_bytes(model, mode, ranks, group, precision):
    """What one rank sends per step by the ring arithmetic of docs/plans.md, from the layer sizes:
    gather, gradient, replica_gradient. In bf16 and fp16 the units gather and reduce 16-bit
    elements; the replicas average fp32 pieces in every precision."""
    units, kept = unit_sizes(model)
    sizes = [n for unit in units for n in unit]
    replicas = ranks // group
    one_gather = sum((group - 1) * ceil_div(n, group) for n in sizes)
    if mode == "full_shard":  # forward and backward, the kept units gathered once
        gather = one_gather + sum((group - 1) * ceil_div(n, group)
                                  for u, unit in enumerate(units) if u not in kept for n in unit)
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
    moved = FP32 if precision == "fp32" else HALF
    return [moved * gather, moved * gradient, FP32 * replica]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--shard-group-size", type=int, default=0)
    parser.add_argument("--model", default="mlp", choices=["mlp", "gpt"])
    parser.add_argument("--network")
    args = parser.parse_args()
    n, g = args.ranks, args.shard_group_size
    command = [args.mpiexec, "-n", str(n), args.bench, "step", "--json", "--local-batch", "4",
               "--steps", "2"]
    if args.model == "gpt":
        command += ["--model", "gpt", "--width", str(GPT_HIDDEN), "--layers", str(GPT_LAYERS),
                    "--heads", "2", "--seq", str(GPT_SEQ)]
    else:
        command += ["--width", str(WIDTH), "--layers", str(LAYERS)]
    if g:
        command += ["--shard-group-size", str(g)]
    if args.network:
        command += ["--network", args.network]
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
            rows[(row["name"], row["precision"])] = row

    modes = ["full_shard", "shard_grad_op", "shard_optimizer", "no_shard"]
    ways = {m: (m, n) for m in modes}
    ways["full_shard no prefetch"] = ("full_shard", n)
    if g and g < n:
        ways.update({"%s %dx%d" % (m, n // g, g): (m, g) for m in modes})
    if args.network:
        ways["full_shard reductions waited"] = ("full_shard", n)
        ways["full_shard network off"] = ("full_shard", n)
    expected = {(name, p): way for name, way in ways.items() for p in PRECISIONS}
    expected[("one_rank", "fp32")] = ("full_shard", 1)
    in_backward = "full_shard optimizer in backward"
    if args.network:
        expected.update({(in_backward, p): ("full_shard", n) for p in PRECISIONS if p != "fp16"})
    if sorted(rows) != sorted(expected):
        fail("rows %s, expected %s" % (sorted(rows), sorted(expected)))

    for (name, precision), (mode, group) in expected.items():
        row = rows[(name, precision)]
        label = "%s %s" % (name, precision)
        ranks = 1 if name == "one_rank" else n
        if row["shard_group_size"] != group or row["ranks"] != ranks:
            fail("%s: group %s of %s ranks, expected %d of %d" %
                 (label, row["shard_group_size"], row["ranks"], group, ranks))
        if row["optimizer_in_backward"] != (name == in_backward):
            fail("%s: optimizer_in_backward %s" % (label, row["optimizer_in_backward"]))
        if row["max_gathered_units"] != 2:  # the runtime's default
            fail("%s: max_gathered_units %s" % (label, row["max_gathered_units"]))
        if row["formula_precision"] != ("fp32" if precision == "fp32" else "mixed"):
            fail("%s: estimated as %s" % (label, row["formula_precision"]))
        if row["model_state_bytes_per_rank"] != row["formula_model_state_bytes_per_rank"]:
            fail("%s: model state %d bytes per rank, formula %d" %
                 (label, row["model_state_bytes_per_rank"],
                  row["formula_model_state_bytes_per_rank"]))
        sent = row["sent_bytes_per_step"]
        formula = row["formula_send_bytes_per_step"]
        measured = [sent["gather"], sent["gradient"], sent["replica_gradient"]]
        from_formula = [formula["forward_gather"] + formula["backward_gather"] -
                        formula["kept_units_backward_gather"], formula["gradient"],
                        formula["replica_gradient"]]
        by_hand = ring_bytes(args.model, mode, ranks, group, precision)
        print("%-29s sent %s, formula less the kept unit %s, by hand %s" %
              (label, measured, from_formula, by_hand))
        if not row["sent_same_every_step"]:
            fail(label + ": the steps sent different bytes")
        if measured != by_hand:
            fail("%s: sent %s, but the ring arithmetic gives %s" % (label, measured, by_hand))
        if precision != "fp32":
            fp32 = rows[(name, "fp32")]["sent_bytes_per_step"]
            if [2 * sent["gather"], 2 * sent["gradient"]] != [fp32["gather"], fp32["gradient"]]:
                fail("%s: gathered and reduced %s bytes, not half of fp32's %s" %
                     (label, [sent["gather"], sent["gradient"]], [fp32["gather"], fp32["gradient"]]))
        scaler = 2 * (group - 1) * INT if precision == "fp16" and ranks > 1 else 0
        if sent["loss_scaler"] != scaler:
            fail("%s: the loss scaler sent %d bytes, expected %d" %
                 (label, sent["loss_scaler"], scaler))
        if mode == "no_shard" and 1 < group < ranks:
            # Known: whole gradients cross between replicas, the formula counts pieces.
            if measured[:2] != from_formula[:2] or measured[2] != group * from_formula[2]:
                fail("%s: sent %s, formula %s; expected the formula but G = %d times its "
                     "replica bytes" % (label, measured, from_formula, group))
            if row["sent_equals_formula_less_kept_units"]:
                fail(label + ": reported equal to the formula")
        else:
            if measured != from_formula or not row["sent_equals_formula_less_kept_units"]:
                fail("%s: sent %s, formula less the kept unit %s" % (label, measured, from_formula))
            if mode != "full_shard" and formula["total"] != sent["total"]:
                fail("%s: sent %d, formula %d" % (label, sent["total"], formula["total"]))
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
