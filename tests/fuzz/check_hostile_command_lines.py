#!/usr/bin/python3
"""Hostile command lines through the real `tetra` binary: the command-line
level regression test for issue 32 item 6, whose re-run of ~4,200 malformed
inputs found four defects (fixed in 3a09120):

  1. an output path naming a device, pipe or directory was replaced by a
     regular file (renamed over it);
  2. a FIFO as an output path hung at start-up;
  3. a weights file with finite but absurd values (every q_proj weight 3e38)
     loaded silently;
  4. `tetra checkpoint inspect` accepted a step directory whose name
     disagreed with its manifest's step.

Each class is replayed in several variants (log.metrics_path, log.trace_path,
log.tensorboard_dir, export_path, `tetra export --out`, checkpoint.dir; one
weight of 3e38, -1e30 or 7e4, just past float16's 65504, or a whole q_proj of
3e38, through `train` and `export`; a step directory renamed up or down,
through inspect, export and resume), with other hostile invocations: a config
that is a directory, a FIFO or /dev/zero, an empty or garbled config, `--set`
with 100 kB fields and values, `tetra launch` with bad flags or a hostfile
that is a directory or a FIFO.

Every case must follow the house rule: a non-zero exit (never a signal), no
hang (each run has 120 s; a timeout is a failure, nothing else depends on
speed), stderr exactly "tetra: error: <one sentence>" then "hint: <fix>" and
under 4 KiB, no Python or C++ backtrace or sanitizer report, no training step
run, and nothing lost: the FIFO, directory, /dev/null (still the character
device 1,3), weights files and checkpoint directories named in the case are
the same kind of file with the same contents afterwards (hashed before and
after). Two controls (weights of exactly +-65504, the genuine checkpoint)
must be accepted, so the refusals are not blanket ones.

Two defects it found are fixed: a FIFO among export_path's files was found
only after the last step (now at start-up, and `tetra export` checks every
file before it writes the first), and a 100 kB output path was quoted whole
in its error (now cut as core/user_error.h's UserPath says). A case marked
KNOWN DEFECT states what tetra does wrong; it fails until the defect is
fixed, then says to drop the mark.
Standard library only. usage: check_hostile_command_lines.py TETRA_BINARY
"""
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "testing"))
from tetra_runs import ENV, Checker, metrics_so_far, run_tetra  # noqa: E402

TETRA = sys.argv[1]
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "tiny_dense.textproto")
TIMEOUT_S = 120  # generous: a run here takes well under a second; only a hang reaches it
MAX_STDERR = 4096  # one sentence and a hint; user text is quoted cut (core/user_error.h)
SETS = ["train.steps=2", "train.micro_batch_size=2", "train.global_batch_size=2",
        "train.seq_length=16", "train.threads=1", "log.interval=1000",
        "model.hidden_size=32", "model.intermediate_size=64"]
# What a crash, an abort or a sanitizer leaves in the output.
BACKTRACE = re.compile(
    r"Traceback \(most recent call last\)|Sanitizer|runtime error:|terminate called|what\(\):|"
    r"Segmentation fault|Aborted|core dumped|Check failed|#\d+ +0x[0-9a-f]+|MPI_ABORT|"
    r"\[libprotobuf (FATAL|ERROR)")


def sets_args(sets):
    return [arg for s in sets for arg in ("--set", s)]


def shown(args, work):
    """The command as one short line: the tiny model's --sets as "<tiny>",
    the scratch directory as $WORK, a 100 kB argument cut."""
    text = " ".join(shlex.quote(a if len(a) <= 90 else f"{a[:60]}...({len(a)} bytes)") for a in args)
    text = text.replace(" ".join(sets_args(SETS)), "<tiny>").replace(CONFIG, "tiny_dense.textproto")
    return "tetra " + text.replace(work, "$WORK")


def state(path):
    """What is at `path`, to compare before and after: its kind, a device's
    numbers, a file's hash, a directory's entries recursively (links not
    followed)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return ("file", hashlib.sha256(open(path, "rb").read()).hexdigest())
    if stat.S_ISDIR(mode):
        return ("directory", tuple((name, state(os.path.join(path, name)))
                                   for name in sorted(os.listdir(path))))
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return ("device", stat.S_IFMT(mode), os.major(info.st_rdev), os.minor(info.st_rdev))
    if stat.S_ISLNK(mode):
        return ("link", os.readlink(path))
    return ("other", stat.S_IFMT(mode))  # FIFO, socket


def run(args):
    """(exit code or None on a hang, stdout, stderr) of `tetra args`, in its
    own session so that a hang is ended with everything it started."""
    proc = subprocess.Popen([TETRA] + args, env=ENV, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace")


def problems_of_refusal(code, out, err, expect):
    """What breaks the house rule in one refused run."""
    found = []
    if code is None:
        return [f"hung: no exit within {TIMEOUT_S} s (killed)"]
    if code < 0:
        found.append(f"killed by signal {-code}")
    elif code == 0:
        found.append("exited 0: the input was accepted")
    elif code >= 128:
        found.append(f"exit code {code} (a signal's)")
    if BACKTRACE.search(out + err):
        found.append(f"backtrace or sanitizer output: {BACKTRACE.search(out + err).group(0)!r}")
    lines = err.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not (len(lines) == 2 and re.fullmatch(r"tetra: error: \S.*", lines[0])
            and re.fullmatch(r"hint: \S.*", lines[1])):
        found.append(f"stderr is not one 'tetra: error:' line and one 'hint:' line: {err[:300]!r}")
    if len(err) > MAX_STDERR:
        found.append(f"stderr is {len(err)} bytes (user text quoted whole, not cut)")
    for text in expect:
        if text not in (lines[0] if lines else ""):
            found.append(f"the error does not say {text!r}")
    return found


class Cases:
    """Runs the cases, one ok/FAIL line each."""

    def __init__(self, work):
        self.work = work
        self.check = Checker()
        self.count = 0

    def refused(self, name, args, keep=(), expect=(), metrics=None, defect=None):
        """`tetra args` must be refused by the house rule, with everything in
        `keep` unchanged and, for a run with `metrics`, no step trained."""
        before = {path: state(path) for path in keep}
        code, out, err = run(args)
        found = problems_of_refusal(code, out, err, expect)
        for path in keep:
            if state(path) != before[path]:
                found.append(f"{path} changed: {str(before[path])[:80]} -> {str(state(path))[:80]}")
        if metrics is not None and (metrics_so_far(metrics) or re.search(r"^step \d+/", out, re.M)):
            found.append("steps were trained before the refusal (its output is lost at the end)")
        self.report(name, args, found, defect)

    def accepted(self, name, args, keep=()):
        """A control: `tetra args` must succeed, leaving `keep` unchanged."""
        before = {path: state(path) for path in keep}
        code, out, err = run(args)
        found = [] if code == 0 else [f"exit {code}: {err[-300:]!r}"]
        found += [f"{p} changed" for p in keep if state(p) != before[p]]
        self.report(name, args, found, None)

    def report(self, name, args, found, defect):
        self.count += 1
        what = f"{name}: {shown(args, self.work)}"
        if defect and found:
            what = f"KNOWN DEFECT ({defect}) {what}"
        elif defect:
            what += f" [marked KNOWN DEFECT ({defect}) but it passes: drop the mark]"
        self.check(not found, what + "".join(f"\n       {f}" for f in found))

    def scratch(self, name):
        path = os.path.join(self.work, name)
        os.makedirs(path)
        return path


def train_args(cases, case, sets, metrics_path=True):
    """`train` of the tiny model with `sets`; metrics to a fresh file in the
    case's directory unless the case names log.metrics_path itself."""
    metrics = os.path.join(cases.work, f"{case}.metrics.jsonl")
    extra = [f"log.metrics_path={metrics}"] if metrics_path else []
    return ["train", "--config", CONFIG] + sets_args(SETS + extra + sets), metrics


def output_cases(cases):
    """Class 1 and 2: outputs that name a FIFO, a directory, a device or a
    regular file where a directory is written."""
    where = cases.scratch("outputs")
    fifo, directory, regular = (os.path.join(where, n) for n in ("fifo", "directory", "regular"))
    os.mkfifo(fifo)
    os.makedirs(directory)
    open(regular, "w").write("a file that must survive\n")
    link = os.path.join(where, "link_to_fifo")
    os.symlink(fifo, link)
    keep = [fifo, directory, regular, link, "/dev/null"]
    for field, path, extra, expect in [
            ("log.metrics_path", fifo, [], "is a FIFO (named pipe), not a regular file"),
            ("log.metrics_path", directory, [], "is a directory, not a regular file"),
            ("log.metrics_path", "/dev/null", [], "is a character device, not a regular file"),
            ("log.metrics_path", link, [], "is a FIFO (named pipe), not a regular file"),
            ("log.trace_path", fifo, ["log.trace_steps=1"], "is a FIFO (named pipe)"),
            ("log.trace_path", "/dev/null", ["log.trace_steps=1"], "is a character device"),
            ("log.trace_path", directory, ["log.trace_steps=1"], "is a directory"),
            ("log.tensorboard_dir", regular, [], "cannot be written"),
            ("log.tensorboard_dir", "/dev/null", [], "cannot be written"),
            ("export_path", regular, [], "cannot be written"),
            ("export_path", "/dev/null", [], "cannot be written")]:
        own_metrics = field == "log.metrics_path"
        args, metrics = train_args(cases, f"out{cases.count}", [f"{field}={path}"] + extra,
                                   metrics_path=not own_metrics)
        cases.refused(f"output {field} = {os.path.basename(path)}", args, keep,
                      [f"{field} {path} {expect}"], metrics=None if own_metrics else metrics)
    # The files written into an output directory.
    for name in ("model.safetensors", "config.json"):
        out = cases.scratch(f"export_out_{name}")
        os.mkfifo(os.path.join(out, name))
        cases.refused(f"tetra export --out holding a FIFO {name}",
                      ["export", "--config", CONFIG, "--out", out] + sets_args(SETS),
                      [os.path.join(out, name)], [f"{out}/{name} is a FIFO (named pipe)"])
        out = cases.scratch(f"export_path_{name}")
        os.mkfifo(os.path.join(out, name))
        args, metrics = train_args(cases, f"export_path_{name}", [f"export_path={out}"])
        cases.refused(f"train export_path holding a FIFO {name}", args, [os.path.join(out, name)],
                      [f"{out}/{name} is a FIFO (named pipe)"], metrics=metrics)
    cases.refused("tetra export --out /dev/null",
                  ["export", "--config", CONFIG, "--out", "/dev/null"] + sets_args(SETS),
                  ["/dev/null"], ["/dev/null"])
    for path in ("/dev/null", regular):
        args, metrics = train_args(cases, f"ckpt{cases.count}",
                                   [f"checkpoint.dir={path}", "checkpoint.interval=1"])
        cases.refused(f"checkpoint.dir = {os.path.basename(path)}", args, keep,
                      [f"checkpoint.dir {path}: Not a directory"], metrics=metrics)
        args, metrics = train_args(cases, f"local{cases.count}",
                                   [f"checkpoint.dir={cases.scratch(f'local_ckpt{cases.count}')}",
                                    f"checkpoint.local_dir={path}", "checkpoint.local_interval=1"])
        cases.refused(f"checkpoint.local_dir = {os.path.basename(path)}", args, keep,
                      [f"checkpoint.local_dir {path} cannot be written"], metrics=metrics)
    ckpt = cases.scratch("ckpt_with_fifo_step")
    os.mkfifo(os.path.join(ckpt, "step_00000002"))
    args, metrics = train_args(cases, "ckpt_fifo", [f"checkpoint.dir={ckpt}", "checkpoint.interval=1"])
    cases.refused("checkpoint.dir holding a FIFO step_00000002", args, [ckpt],
                  [f"{ckpt}/step_00000002 is not a readable directory"], metrics=metrics)
    cases.refused("tetra checkpoint inspect /dev/null", ["checkpoint", "inspect", "/dev/null"],
                  ["/dev/null"], ["/dev/null"])
    if state("/dev/null") != ("device", stat.S_IFCHR, 1, 3):
        cases.check(False, f"/dev/null is no longer the character device 1,3: {state('/dev/null')}")


def set_weight(model_dir, tensor, value, every=False):
    """Writes `value` into element 5 (or every element) of F32 `tensor` of
    model_dir/model.safetensors, in place."""
    path = os.path.join(model_dir, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    size = struct.unpack("<Q", data[:8])[0]
    entry = json.loads(data[8:8 + size])[tensor]
    assert entry["dtype"] == "F32", entry
    start, end = (8 + size + o for o in entry["data_offsets"])
    for at in range(start, end, 4) if every else [start + 4 * 5]:
        data[at:at + 4] = struct.pack("<f", value)
    open(path, "wb").write(bytes(data))


def weights_cases(cases):
    """Class 3: finite weights no trained model holds, as init_from."""
    base = os.path.join(cases.work, "weights")
    run_tetra([TETRA, "export", "--config", CONFIG, "--out", base] + sets_args(SETS))
    q0 = "model.layers.0.self_attn.q_proj.weight"
    for tensor, value, every, shown_value in [
            (q0, 3e38, True, "3e+38 at element 0"),
            ("model.layers.1.self_attn.q_proj.weight", 3e38, False, "3e+38 at element 5"),
            ("model.embed_tokens.weight", -1e30, False, "-1e+30 at element 5"),
            ("lm_head.weight", 7e4, False, "70000 at element 5"),
            ("model.layers.1.mlp.down_proj.weight", -65520.0, False, "-65520 at element 5")]:
        weights = os.path.join(cases.work, f"weights_{cases.count}")
        shutil.copytree(base, weights)
        set_weight(weights, tensor, value, every)
        expect = [f"weights in {weights}: tensor {tensor} holds {shown_value}",
                  "beyond float16's range (65504)"]
        args, metrics = train_args(cases, f"w{cases.count}", [f"init_from={weights}"])
        cases.refused(f"init_from with {tensor} = {value:g}{' everywhere' if every else ''}",
                      args, [weights], expect, metrics=metrics)
    out = os.path.join(cases.work, "export_of_absurd")  # the last weights above
    cases.refused(f"tetra export --set init_from with {tensor} = {value:g}",
                  ["export", "--config", CONFIG, "--out", out] +
                  sets_args(SETS + [f"init_from={weights}"]), [weights, out], expect)
    # Control: the largest float16 magnitude is a weight.
    edge = os.path.join(cases.work, "weights_edge")
    shutil.copytree(base, edge)
    set_weight(edge, q0, 65504.0, every=True)
    set_weight(edge, "lm_head.weight", -65504.0)
    args, _ = train_args(cases, "edge", [f"init_from={edge}"])
    cases.accepted("control: init_from with weights of +-65504 trains", args, [edge])


def checkpoint_cases(cases):
    """Class 4: a step directory whose name disagrees with its manifest."""
    genuine = os.path.join(cases.work, "ckpt")
    args, _ = train_args(cases, "ckpt_setup", [f"checkpoint.dir={genuine}", "checkpoint.interval=1"])
    run_tetra([TETRA] + args)
    renamed = os.path.join(cases.work, "ckpt_renamed_up")  # step 2's saved as step 5
    shutil.copytree(os.path.join(genuine, "step_00000001"), os.path.join(renamed, "step_00000001"))
    shutil.copytree(os.path.join(genuine, "step_00000002"), os.path.join(renamed, "step_00000005"))
    swapped = os.path.join(cases.work, "ckpt_swapped")  # steps 1 and 2 trade names
    shutil.copytree(os.path.join(genuine, "step_00000002"), os.path.join(swapped, "step_00000001"))
    shutil.copytree(os.path.join(genuine, "step_00000001"), os.path.join(swapped, "step_00000002"))
    up = "is named for step 5 but its manifest says step 2"
    keep = [genuine, renamed, swapped]
    step5 = os.path.join(renamed, "step_00000005")
    for target in (renamed, step5, step5 + "/"):
        cases.refused("inspect a step renamed up", ["checkpoint", "inspect", target], keep, [up])
    cases.refused("inspect swapped steps (newest)", ["checkpoint", "inspect", swapped], keep,
                  ["is named for step 2 but its manifest says step 1"])
    cases.refused("inspect a step renamed down",
                  ["checkpoint", "inspect", os.path.join(swapped, "step_00000001")], keep,
                  ["is named for step 1 but its manifest says step 2"])
    out = os.path.join(cases.work, "export_of_renamed")
    cases.refused("checkpoint export of a renamed step",
                  ["checkpoint", "export", step5, "--out", out], keep + [out], [up])
    args, metrics = train_args(cases, "resume_renamed", [f"checkpoint.dir={renamed}", "train.steps=6"])
    cases.refused("resume from a renamed step", args, keep, [up],
                  metrics=metrics)
    cases.accepted("control: inspect the genuine checkpoint", ["checkpoint", "inspect", genuine], keep)


def other_cases(cases):
    """Configs, --set values and launch flags no user means."""
    where = cases.scratch("others")
    fifo, directory = os.path.join(where, "fifo"), os.path.join(where, "directory")
    os.mkfifo(fifo)
    os.makedirs(directory)
    empty, garbled = os.path.join(where, "empty.textproto"), os.path.join(where, "garbled.textproto")
    open(empty, "w").close()
    open(garbled, "wb").write(bytes(range(1, 256)) * 8 + b"model {\n")
    keep = [fifo, directory, "/dev/null"]
    for path, expect in [(directory, "is a directory, not a regular file"),
                         (fifo, "is a FIFO (named pipe), not a regular file"),
                         ("/dev/zero", "is a character device, not a regular file")]:
        cases.refused(f"--config {os.path.basename(path)}", ["train", "--config", path], keep,
                      [f"config file {path} {expect}"])
    cases.refused("empty config, train.steps=0",
                  ["train", "--config", empty, "--set", "train.steps=0"], keep, ["train.steps"])
    cases.refused("garbled config", ["train", "--config", garbled], keep, [garbled])
    cases.refused("--config with no value", ["train", "--config"], keep, ["--config needs a value"])
    metrics = os.path.join(where, "metrics.jsonl")
    big = 100_000
    for what, assignment, expect in [
            ("a 100 kB field name", "x" * big + "=1", "(100000 bytes)"),
            ("a 100 kB integer", "model.hidden_size=" + "9" * big, "(100000 bytes)"),
            ("a 100 kB string", "data.path=" + "\u00e9" * (big // 2), "(100000 bytes)"),
            ("a 100 kB output path", f"log.trace_path={where}/" + "a" * big, "log.trace_path")]:
        cases.refused(f"--set with {what}",
                      ["train", "--config", CONFIG] + sets_args(SETS) +
                      ["--set", f"log.metrics_path={metrics}",
                       "--set", "log.trace_steps=1", "--set", assignment], keep, [expect],
                      metrics=metrics)
    job = ["train", "--config", CONFIG]
    for what, args, expect in [
            ("--np 0", ["--np", "0", "--"] + job, '--np "0" is not a whole number'),
            ("--np abc", ["--np", "abc", "--"] + job, '--np "abc" is not a whole number'),
            ("no --", ["--np", "2"] + job, 'needs the job after "--"'),
            ("nothing after --", ["--np", "2", "--"], 'needs the job after "--"'),
            ("--min-np 5 --np 2", ["--min-np", "5", "--np", "2", "--"] + job, "--min-np 5 exceeds --np 2"),
            ("a hostfile that is a directory", ["--np", "2", "--hostfile", directory, "--"] + job,
             f"hostfile {directory} is a directory"),
            ("a hostfile that is a FIFO", ["--np", "2", "--hostfile", fifo, "--"] + job,
             f"hostfile {fifo} is a FIFO")]:
        cases.refused(f"launch with {what}", ["launch"] + args, keep, [expect])


def main():
    work = tempfile.mkdtemp(prefix="tetra_hostile_")
    cases = Cases(work)
    try:
        output_cases(cases)
        weights_cases(cases)
        checkpoint_cases(cases)
        other_cases(cases)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cases.check.exit(f"all {cases.count} hostile command lines refused by the house rule")


if __name__ == "__main__":
    main()
