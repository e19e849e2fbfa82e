#!/usr/bin/python3
"""Compares tetra's metrics JSONL with a reference.json from llama_reference.py.

  compare_losses.py REFERENCE_JSON METRICS_JSONL [--rtol 1e-4] [--grad-rtol 1e-3]
                    [--step1-rtol RTOL]

Every reference step must appear in the metrics (one JSON object per line with
"step", "loss", "grad_norm", "lr"); loss and lr must agree within --rtol and
grad_norm within --grad-rtol, all relative to the reference value, and so must
mtp_loss and aux_loss (within --rtol) where the reference has them. Step 1's
loss, mtp_loss and aux_loss must agree within --step1-rtol (default --rtol): a
mixture of experts matches step 1 closely, while later steps may see a
near-tied router choice flip under round-off. Prints a table; exits 0 when all
agree, 1 on a mismatch, 2 when a file is unusable.
"""

import argparse
import json
import math
import sys

# lr is a formula of the step, so it may differ only by round-off; the floor
# keeps a min_lr of 0 from demanding an exact zero.
LR_ATOL = 1e-12


def load_reference(path):
    with open(path) as f:
        ref = json.load(f)
    missing = [k for k in ("loss", "grad_norm", "lr") if k not in ref]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}; expected reference.json from "
                         f"llama_reference.py")
    if not len(ref["loss"]) == len(ref["grad_norm"]) == len(ref["lr"]):
        raise ValueError(f"{path}: loss, grad_norm and lr have different lengths")
    return ref


def load_metrics(path):
    """step -> metrics object; later lines for a step (a resumed run) win."""
    by_step = {}
    with open(path) as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no} is not JSON ({e})") from e
            if "step" in record and "loss" in record:
                by_step[record["step"]] = record
    return by_step


def close(got, want, rtol, atol=0.0):
    return (got is not None and math.isfinite(got)
            and abs(got - want) <= rtol * abs(want) + atol)


def rel(got, want):
    if got is None:
        return float("nan")
    return abs(got - want) / abs(want) if want else abs(got - want)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference_json")
    ap.add_argument("metrics_jsonl")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of loss and lr")
    ap.add_argument("--grad-rtol", type=float, default=1e-3,
                    help="relative tolerance of grad_norm (looser: a norm of fp32 gradients)")
    ap.add_argument("--step1-rtol", type=float, default=None,
                    help="relative tolerance of step 1's losses (default: --rtol)")
    a = ap.parse_args(argv)
    step1_rtol = a.rtol if a.step1_rtol is None else a.step1_rtol
    try:
        ref = load_reference(a.reference_json)
        metrics = load_metrics(a.metrics_jsonl)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    steps = len(ref["loss"])
    absent = [s for s in range(1, steps + 1) if s not in metrics]
    if absent:
        print(f"error: {a.metrics_jsonl} has no loss for step(s) {absent[:10]}"
              f"{' ...' if len(absent) > 10 else ''} of the reference's {steps}; "
              f"hint: did the run finish, with log.metrics_path set?", file=sys.stderr)
        return 2

    print(f"{'step':>4}  {'ref loss':>11} {'tetra loss':>11} {'rel':>8}  "
          f"{'ref gnorm':>10} {'tetra gnorm':>11} {'rel':>8}  {'ref lr':>10} {'tetra lr':>10}")
    failures = []
    # The objective's other terms, where the reference trains them.
    extra = [k for k in ("mtp_loss", "aux_loss") if k in ref]
    for s in range(1, steps + 1):
        m = metrics[s]
        want = {k: ref[k][s - 1] for k in ("loss", "grad_norm", "lr", *extra)}
        got = {k: m.get(k) for k in want}
        loss_rtol = step1_rtol if s == 1 else a.rtol
        bad = [k for k, ok in (("loss", close(got["loss"], want["loss"], loss_rtol)),
                               ("grad_norm", close(got["grad_norm"], want["grad_norm"],
                                                   a.grad_rtol)),
                               ("lr", close(got["lr"], want["lr"], a.rtol, LR_ATOL)),
                               *((k, close(got[k], want[k], loss_rtol)) for k in extra)) if not ok]
        fmt = lambda v, spec: "missing" if v is None else format(v, spec)
        print(f"{s:>4}  {want['loss']:>11.6f} {fmt(got['loss'], '>11.6f')} "
              f"{rel(got['loss'], want['loss']):>8.1e}  "
              f"{want['grad_norm']:>10.5f} {fmt(got['grad_norm'], '>11.5f')} "
              f"{rel(got['grad_norm'], want['grad_norm']):>8.1e}  "
              f"{want['lr']:>10.4g} {fmt(got['lr'], '>10.4g')}"
              f"{'  <- ' + ', '.join(bad) if bad else ''}")
        failures += [(s, k, got[k], want[k]) for k in bad]

    if failures:
        s, k, got, want = failures[0]
        tol = a.grad_rtol if k == "grad_norm" else step1_rtol if s == 1 and k != "lr" else a.rtol
        print(f"FAIL: {len(failures)} value(s) outside tolerance; first at step {s}: {k} "
              f"{got} vs reference {want} (relative error {rel(got, want):.2e} > {tol:g})",
              file=sys.stderr)
        return 1
    terms = ", ".join(["loss", *extra, "lr"])
    print(f"OK: {steps} steps agree ({terms} within {a.rtol:g}, step 1's within {step1_rtol:g}, "
          f"grad_norm within {a.grad_rtol:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
