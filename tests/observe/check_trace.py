#!/usr/bin/env python3
"""Validates log.trace_path's Chrome/Perfetto trace of tiny CPU runs.

Runs `tetra train` under mpirun at 1, 2 and 4 ranks (a tensor x pipeline x data
layout at 4) with log.trace_steps "2-3", then checks the file against the
trace-event format (docs: "Trace Event Format", Google): per phase the keys it
requires and their JSON types; one process per rank, named; every track named;
spans on one track nested or disjoint; every forward/backward inside a step
span of its rank; exactly the chosen steps traced.

usage: check_trace.py TETRA_BINARY [MPIEXEC]
"""
import json
import os
import subprocess
import sys
import tempfile

NUMBER = (int, float)
# Required keys and their types for the phases tetra writes.
REQUIRED = {
    "X": {"name": str, "ph": str, "ts": NUMBER, "dur": NUMBER, "pid": int, "tid": int},
    "M": {"name": str, "ph": str, "pid": int, "tid": int, "args": dict},
}
METADATA_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}
# Spans end and start within a microsecond of each other when nested exactly
# (the writer prints 3 decimals of microseconds).
SLACK_US = 0.002
LAYOUTS = {1: [], 2: ["parallel.tensor=2"], 4: ["parallel.tensor=2", "parallel.pipeline=2"]}
STEPS = (2, 3)


def fail(message):
    raise AssertionError(message)


def check_schema(event):
    ph = event.get("ph")
    if ph not in REQUIRED:
        fail(f"unexpected phase {ph!r} in {event}")
    for key, kind in REQUIRED[ph].items():
        if key not in event:
            fail(f"{ph} event lacks {key!r}: {event}")
        if not isinstance(event[key], kind) or isinstance(event[key], bool):
            fail(f"{ph} event's {key!r} is {type(event[key]).__name__}: {event}")
    if ph == "X" and event["dur"] < 0:
        fail(f"negative duration: {event}")
    if ph == "M" and event["name"] not in METADATA_NAMES:
        fail(f"unknown metadata event {event['name']!r}")


def check_trace(trace, ranks):
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail("the trace is not an object with a traceEvents array")
    events = trace["traceEvents"]
    for e in events:
        check_schema(e)
    spans = [e for e in events if e["ph"] == "X"]
    process_names = [e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    if sorted(process_names) != list(range(ranks)):
        fail(f"process_name pids {sorted(process_names)}, expected one per rank 0..{ranks - 1}")
    if sorted({e["pid"] for e in spans}) != list(range(ranks)):
        fail(f"span pids {sorted({e['pid'] for e in spans})} for {ranks} ranks")
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in spans:
        if (e["pid"], e["tid"]) not in named:
            fail(f"track (pid {e['pid']}, tid {e['tid']}) has no thread_name")
    # Nesting: on each track, a span starting inside another ends inside it.
    tracks = {}
    for e in spans:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, track in tracks.items():
        stack = []
        for e in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - SLACK_US:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + SLACK_US:
                fail(f"track {key}: {e} overlaps {stack[-1]} without nesting")
            stack.append(e)
    for pid in range(ranks):
        steps = [e for e in spans if e["pid"] == pid and e["name"] == "step"]
        if sorted(e["args"]["step"] for e in steps) != list(range(STEPS[0], STEPS[1] + 1)):
            fail(f"rank {pid} traced steps {[e['args']['step'] for e in steps]}, asked {STEPS}")
        work = [e for e in spans if e["pid"] == pid and e["name"] in ("forward", "backward")]
        if not work:
            fail(f"rank {pid} has no forward/backward spans")
        for e in work:
            if not any(s["ts"] - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + SLACK_US
                       for s in steps):
                fail(f"rank {pid}: {e} lies outside every step span")
    return len(spans)


def main():
    tetra = sys.argv[1]
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as out:
        for ranks, layout in LAYOUTS.items():
            path = f"{out}/trace_{ranks}.json"
            sets = ["model.num_hidden_layers=2", "train.steps=4", "optimizer.warmup_steps=0",
                    "train.global_batch_size=8", "train.micro_batch_size=2", "train.seq_length=32",
                    f"log.trace_path={path}", f"log.trace_steps={STEPS[0]}-{STEPS[1]}"] + layout
            command = [mpiexec, "--oversubscribe", "-np", str(ranks), tetra, "train", "--config",
                       os.path.join(os.path.dirname(__file__), "../../configs/tiny_dense.textproto")]
            for s in sets:
                command += ["--set", s]
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
            with open(path) as f:
                spans = check_trace(json.load(f), ranks)
            print(f"{ranks} ranks: {spans} spans, schema, tracks and nesting ok")


if __name__ == "__main__":
    main()
