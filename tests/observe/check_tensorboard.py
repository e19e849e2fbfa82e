#!/usr/bin/env python3
"""TensorBoard's own reader sees every number tetra's metrics lines hold.

Trains a tiny model on one rank and on tensor 2 x pipeline 2 interleaved (so
every group's comm_exposed_s_* field, the bubble and virtual stages exist)
with log.tensorboard_dir and log.metrics_path, reads the event file with
TensorBoard's EventAccumulator, and checks that for every step each numeric
field of the metrics line (all but the step itself: the run's layout on the
first line too), whatever its name, is a scalar there with the same value
(TensorBoard stores float32: 1e-6 relative); a field added to the record is
checked without a change here.
Needs tensorboard (scripts/setup.sh installs it into build/pyenv).
usage: check_tensorboard.py TETRA_BINARY
"""
import os
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import Checker, train  # noqa: E402

TETRA = sys.argv[1]
check = Checker()


def numeric_fields(line):
    """The line's fields whose values are numbers, but the step (TensorBoard's x axis)."""
    return {k for k, v in line.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


with tempfile.TemporaryDirectory() as tmp:
    for name, ranks, sets in (("single", 1, ["model.num_hidden_layers=2"]),
                              ("tp2_pp2", 4, ["parallel.tensor=2", "parallel.pipeline=2", "parallel.virtual_stages=2",
                                              "model.num_hidden_layers=4"])):
        out = f"{tmp}/{name}"
        os.makedirs(out)
        lines = train(TETRA, out, ranks, sets + ["train.steps=3",
                                                 "train.global_batch_size=8", "train.micro_batch_size=2",
                                                 "train.seq_length=16", "train.threads=1",
                                                 f"log.tensorboard_dir={out}/tb"])
        events = event_accumulator.EventAccumulator(f"{out}/tb", size_guidance={event_accumulator.SCALARS: 0})
        events.Reload()
        tags = set(events.Tags()["scalars"])
        fields = set().union(*(numeric_fields(line) for line in lines))
        check(fields <= tags, f"{name}: metrics fields missing from TensorBoard: {sorted(fields - tags) or 'none'}")
        check(tags <= fields, f"{name}: TensorBoard tags not in the metrics: {sorted(tags - fields) or 'none'}")
        for field in sorted(fields & tags):
            written = {line["step"]: line[field] for line in lines if field in line}
            read = {e.step: e.value for e in events.Scalars(field)}
            ok = written.keys() == read.keys() and all(
                abs(read[s] - v) <= 1e-6 * max(abs(v), 1e-30) for s, v in written.items())
            check(ok, f"{name}: {field} at steps {sorted(written)} reads back from TensorBoard")
        for field in ("comm_exposed_s_tp", "comm_exposed_s_pp", "param_bytes", "optimizer_bytes",
                      "virtual_stages", "world_size"):
            if name == "tp2_pp2" or field.endswith("bytes") or field == "world_size":
                check(field in tags, f"{name}: {field} is a TensorBoard scalar")

check.exit("TensorBoard reads every per-step metric")
