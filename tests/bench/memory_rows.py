#!/usr/bin/env python3
"""fsdp-bench memory, briefly: a row for every mode and precision, and memory that follows the
arithmetic of mixed precision.

  memory_rows.py --mpiexec M --bench B --ranks N

Runs `fsdp-bench memory --json` on N ranks (N >= 3) with 12 square layers of 128 and checks,
never a time:
  * a row for every mode (full_shard, shard_grad_op, shard_optimizer, no_shard) in fp32, bf16
    and fp16;
  * the model state the tracker measured equals what the estimate's bytes per element say: fp32
    masters, gradient pieces and Adam state in pieces (full_shard), whole fp32 parameters
    (shard_grad_op, and fp32 gradients too for shard_optimizer) in fp32, fp32 pieces kept apart
    under 16 bits;
  * the tracked peak is the estimate's (persistent bytes and working set) within 10%, and the
    buffer pool's idle buffers, which the estimate leaves out;
  * in bf16 and fp16, shard_grad_op and shard_optimizer peak below their fp32 rows: their whole
    parameters are held in 2 bytes from forward to backward, which at 3 or more ranks outweighs
    the fp32 pieces kept apart;
  * the fp16 rows hold what the bf16 rows hold;
  * with --grad-dtype bf16 (a second run, bf16 rows), the gradients kept are 2 bytes per element
    in the model state, the peak follows the estimate, and every mode peaks below its bf16 row
    with fp32 gradients.

Exits 0 when everything holds ("all checks passed"), 1 with a message otherwise.
"""
import argparse
import json
import subprocess
import sys

HIDDEN, LAYERS = 128, 12
MODES = ["full_shard", "shard_grad_op", "shard_optimizer", "no_shard"]
PRECISIONS = ["fp32", "bf16", "fp16"]
# The buffer pool's idle buffers, which the estimate leaves out: at most its default capacity,
# twice the largest unit's fp32 bytes.
POOL = 2 * 4 * (HIDDEN * HIDDEN + HIDDEN)


def fail(message):
    print("memory_rows: FAIL: " + message, flush=True)
    sys.exit(1)


def check_rows(args, precisions, grad_dtype):
    """Runs fsdp-bench memory for these precisions, the 16-bit rows keeping gradients in
    grad_dtype, checks each row's model state and peak, and returns the rows by (mode,
    precision)."""
    n = args.ranks
    command = [args.mpiexec, "-n", str(n), args.bench, "--json", "memory", "--hidden",
               str(HIDDEN), "--layers", str(LAYERS), "--precision", ",".join(precisions),
               "--grad-dtype", grad_dtype]
    print("$ " + " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    print(result.stdout, flush=True)
    if result.returncode != 0:
        fail("exit code %d: %s" % (result.returncode, result.stderr))
    rows = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[(row["mode"], row["precision"])] = row
    elements = LAYERS * (HIDDEN * HIDDEN + HIDDEN)
    per_rank = elements / n
    for mode in MODES:
        for precision in precisions:
            row = rows.get((mode, precision))
            if row is None:
                fail("no row for %s %s" % (mode, precision))
            if row["ranks"] != n:
                fail("%s %s: %d ranks" % (mode, precision, row["ranks"]))
            half = precision != "fp32"
            # Bytes per element of the model state: in pieces 4 (master) + g (gradient) + 8
            # (Adam); whole where the mode keeps it whole, in fp32. g is 4, or 2 for the 16-bit
            # rows keeping bf16 gradients.
            g = 2 if half and grad_dtype == "bf16" else 4
            if row["grad_dtype"] != ("bf16" if g == 2 else "fp32"):
                fail("%s %s: grad_dtype %s" % (mode, precision, row["grad_dtype"]))
            if mode == "full_shard":
                state = (12 + g) * per_rank
            elif mode == "shard_grad_op":
                state = (12 + g) * per_rank if half else 12 * per_rank + 4 * elements
            elif mode == "shard_optimizer":
                state = 12 * per_rank + g * elements if half else 8 * per_rank + 8 * elements
            else:
                state = (12 + g) * elements
            measured = row["model_state_bytes"]
            if abs(measured - state) > 0.01 * state + 4 * 64 * n:  # padding of uneven pieces
                fail("%s %s: model state %d bytes, %d by the bytes per element" %
                     (mode, precision, measured, state))
            peak, estimate = row["peak_bytes"], row["estimate_bytes"]
            if not 0.9 * estimate <= peak <= 1.1 * estimate + POOL:
                fail("%s %s: tracked peak %d bytes, the estimate %d (and a pool of %d)" %
                     (mode, precision, peak, estimate, POOL))
            print("%-16s %-5s grads %-4s state %9d (by hand %9d)  peak %9d  estimate %9d" %
                  (mode, precision, grad_dtype if half else "fp32", measured, state, peak,
                   estimate), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--ranks", type=int, required=True)
    args = parser.parse_args()
    if args.ranks < 3:
        fail("needs 3 or more ranks, where 16-bit whole parameters save memory")
    rows = check_rows(args, PRECISIONS, "fp32")
    kept16 = check_rows(args, ["bf16"], "bf16")
    for mode in MODES:
        if kept16[(mode, "bf16")]["peak_bytes"] >= rows[(mode, "bf16")]["peak_bytes"]:
            fail("%s: the peak with bf16 gradients %d is not below fp32 gradients' %d" %
                 (mode, kept16[(mode, "bf16")]["peak_bytes"], rows[(mode, "bf16")]["peak_bytes"]))
    for mode in ("shard_grad_op", "shard_optimizer"):
        for precision in ("bf16", "fp16"):
            if rows[(mode, precision)]["peak_bytes"] >= rows[(mode, "fp32")]["peak_bytes"]:
                fail("%s: the %s peak %d is not below fp32's %d" %
                     (mode, precision, rows[(mode, precision)]["peak_bytes"],
                      rows[(mode, "fp32")]["peak_bytes"]))
    for mode in MODES:
        for key in ("peak_bytes", "model_state_bytes", "estimate_bytes"):
            if rows[(mode, "fp16")][key] != rows[(mode, "bf16")][key]:
                fail("%s: fp16 %s %d, bf16 %d" % (mode, key, rows[(mode, "fp16")][key],
                                                   rows[(mode, "bf16")][key]))
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
