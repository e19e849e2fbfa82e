#!/usr/bin/python3
"""Every command README.md shows runs as written (on this 2-core machine, as
root the way CI runs: OMPI_ALLOW_RUN_AS_ROOT set).

Commands are every line of README.md's fenced code blocks and every inline
code span whose first word is a command (tetra, build/..., mpirun, srun,
bash, ctest, python3, or a path under tools/ or scripts/); `a && b` is split
into its parts. Each part meets the first rule that matches:
  - SYNOPSIS (listed verbatim below): the usage synopsis, whose placeholders
    (FILE.textproto, DIR, N, ...) are not runnable: skipped;
  - NAMES (listed verbatim below): a program or subcommand named in prose
    (`tetra plan`), and folders (ending in "/"): skipped;
  - OWN_TEXT (listed verbatim below): the walk-through from a user's text to
    a run, whose MODEL_DIR, TEXT.txt and VOCAB stand for the user's model
    directory, text and vocabulary size: skipped here, and
    tests/data/check_prepare.py runs these lines with a tokenizer and text of
    its own;
  - `bash scripts/setup.sh`: installs packages and builds; CI runs it: skipped;
  - `ctest ...`: the suite this test is part of: skipped;
  - `tools/gpu/run_gpu_checks.sh --emulated ...`: the GPU checks on the
    emulated GPU, which ctest's emu.gpu_checks runs: skipped;
  - `tools/gpu/...`: needs a GPU machine; `tools/bench/...` and the
    `build/*_benchmark` binaries: benchmarks that run for minutes and print
    figures, with nothing to pass or fail: skipped; `tools/fuzz/run.sh`: a
    libFuzzer campaign of minutes per parser with a clang build of its own
    (CI runs the same targets' deterministic corpus in tests/fuzz/): skipped;
    `bash tools/sanitizer/run_tests.sh`: the unit tests in a sanitizer
    build of their own, about 15 minutes: skipped;
  - `tetra ...`, `build/tetra ...`, `mpirun ... tetra ...`: run with bash in
    a scratch directory holding configs/ and build/tetra, `tetra` on PATH,
    both the binary under test, and build/tetra_emu, the emulated GPU's
    (commands that run it are skipped when it is not given); `tetra train` shortened to 2 steps with 1
    warm-up step (recipes warm up for more) on one thread per rank (with a
    core taken by another job, two OpenMP threads stall at every barrier);
  - anything else: an error, so a new kind of command gets a rule here and is
    never skipped silently.
Fails naming every command that failed, with its output.
usage: check_readme_commands.py TETRA_BINARY [TETRA_EMU_BINARY]
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SYNOPSIS = {
    "tetra train  --config FILE.textproto [--set path.to.field=value ...]",
    "tetra export --config FILE.textproto --out DIR [--dtype f32|bf16]",
    "tetra plan   --config FILE.textproto --world N [--json] [--gpus-per-node G]",
    "tetra plan   --config FILE.textproto --cluster CLUSTER.textproto [--world N] [--json]",
    "tetra report --out DIR [--config F --cluster C] RUN.jsonl ...",
    "tetra checkpoint inspect DIR | export DIR --out MODEL_DIR [--dtype f32|bf16]",
    "mpirun -np N tetra commbench [--op all_reduce|reduce_scatter|all_gather|all_to_all|broadcast|send_recv|all]",
}
NAMES = {"tetra", "mpirun", "tetra train", "tetra export", "tetra plan", "tetra commbench", "tetra report",
         "tetra checkpoint inspect", "build/tetra_emu", "build/tetra_gpu_tests_emu", "tools/data/prepare.py"}
# In the order they run.
OWN_TEXT = (
    "build/pyenv/bin/python tools/data/prepare.py --tokenizer MODEL_DIR --input TEXT.txt --output data/TEXT",
    "build/tetra train --config configs/tiny_dense.textproto --set data.format=MEGATRON --set data.path=data/TEXT "
    "--set model.vocab_size=VOCAB",
)
COMMAND_WORDS = {"tetra", "mpirun", "srun", "bash", "ctest", "python3"}
# Shortened as a user shortens a recipe (DESIGN.md: --set train.steps=N), on one thread.
SHORTEN_TRAIN = " --set train.steps=2 --set train.threads=1"


def readme_commands(text):
    """The README's command strings, in order: code block lines, then the
    inline code spans that start with a command."""
    commands = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        commands += [line.strip() for line in block.splitlines() if line.strip()]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        first = span.split()[0]
        if first in COMMAND_WORDS or first.startswith(("build/", "tools/", "scripts/")):
            commands.append(span.strip())
    return commands


def classify(part):
    """(action, reason): action "run", "skip" or "error"."""
    words = part.split()
    if part in SYNOPSIS:
        return "skip", "usage synopsis with placeholders"
    if part in NAMES or part.endswith("/"):
        return "skip", "a name in prose, not a command"
    if part in OWN_TEXT:
        return "skip", "placeholders for a user's model and text; tests/data/check_prepare.py runs it with its own"
    if part == "bash scripts/setup.sh":
        return "skip", "set-up (installs and builds); CI runs it"
    if words[0] == "ctest":
        return "skip", "the test suite this test belongs to"
    if words[0] == "tools/gpu/run_gpu_checks.sh" and "--emulated" in words:
        return "skip", "the GPU checks on the emulated GPU: ctest's emu.gpu_checks runs them"
    if words[0].startswith("tools/gpu/"):
        return "skip", "needs a GPU machine"
    if words[0].startswith("tools/bench/") or re.fullmatch(r"build/\w+_benchmark", words[0]):
        return "skip", "a benchmark: long, prints figures, nothing to pass or fail"
    if words[0] == "tools/fuzz/run.sh":
        return "skip", "a libFuzzer campaign (minutes per parser, its own clang build); tests/fuzz/ runs in CI"
    if part == "bash tools/sanitizer/run_tests.sh":
        return "skip", "the unit tests in a sanitizer build of their own (about 15 minutes)"
    if words[0] in ("tetra", "build/tetra", "build/tetra_emu") or (
            words[0] == "mpirun" and {"tetra", "build/tetra", "build/tetra_emu"} & set(words)):
        return "run", ""
    return "error", "no rule for this command: add one to tests/tools/check_readme_commands.py"


def shortened(part):
    words = shlex.split(part)
    binary = next(i for i, w in enumerate(words) if w in ("tetra", "build/tetra", "build/tetra_emu"))
    is_train = binary + 1 < len(words) and words[binary + 1] == "train"
    return part + SHORTEN_TRAIN if is_train else part


def main():
    tetra = os.path.abspath(sys.argv[1])
    tetra_emu = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    with open(os.path.join(ROOT, "README.md")) as f:
        commands = readme_commands(f.read())
    failures, ran = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(os.path.join(ROOT, "configs"), os.path.join(scratch, "configs"))
        for folder in ("build", "bin"):
            os.mkdir(os.path.join(scratch, folder))
            os.symlink(tetra, os.path.join(scratch, folder, "tetra"))
        if tetra_emu:
            os.symlink(tetra_emu, os.path.join(scratch, "build", "tetra_emu"))
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PATH=os.path.join(scratch, "bin") + os.pathsep + os.environ["PATH"])
        for command in commands:
            for part in (p.strip() for p in command.split("&&")):
                action, reason = classify(part)
                if action == "skip":
                    print(f"skip {part}: {reason}")
                    continue
                if action == "error":
                    failures.append(f"{part}\n  {reason}")
                    print(f"FAIL {part}: {reason}")
                    continue
                if "build/tetra_emu" in part.split() and not tetra_emu:
                    print(f"skip {part}: no emulated GPU build given")
                    continue
                run = shortened(part)
                done = subprocess.run(["bash", "-c", run], cwd=scratch, env=env, capture_output=True,
                                      text=True, timeout=600)
                ran += 1
                print(f"{'ok  ' if done.returncode == 0 else 'FAIL'} {run}")
                if done.returncode != 0:
                    failures.append(f"{run}\n  exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    if failures:
        sys.exit(f"{len(failures)} README commands failed:\n" + "\n".join(failures))
    if ran == 0:
        sys.exit("found no README command to run: has the extraction broken?")
    print(f"all {ran} runnable README commands ran")


if __name__ == "__main__":
    main()
