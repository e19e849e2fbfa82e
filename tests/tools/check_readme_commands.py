#!/usr/bin/python3
"""Every command README.md and docs/*.md show runs as written (on this
2-core machine, as root the way CI runs: OMPI_ALLOW_RUN_AS_ROOT set).

The documents are README.md, then docs/*.md in name order. Their commands are
every line of their fenced code blocks that hold commands (a block with no
language, or "sh" or "bash"; "text" and "textproto" blocks hold config text
and diagrams, and any other language is an error), and every inline code
span whose first word is a command (tetra, build/..., mpirun, srun, bash,
ctest, python3, or a path under tools/ or scripts/); `a && b` is split into
its parts. A part shown in several documents (the README's examples are also
in docs/) runs once. Each part meets the first rule that matches:
  - SYNOPSIS (listed verbatim below): the usage synopsis, whose placeholders
    (FILE.textproto, DIR, N, ...) are not runnable: skipped;
  - NAMES (listed verbatim below): a program or subcommand named in prose
    (`tetra plan`), and folders (ending in "/"): skipped;
  - OWN_TEXT (listed verbatim below): the walk-through from a user's text to
    a run (docs/data.md, "Training on your own text"), whose MODEL_DIR,
    TEXT.txt and VOCAB stand for the user's model directory, text and
    vocabulary size: skipped here, and tests/data/check_prepare.py runs these
    lines with a tokenizer and text of its own; each must be a whole line of
    a document (both tests check);
  - `bash scripts/setup.sh`: installs packages and builds; CI runs it: skipped;
  - `ctest ...`: the suite this test is part of: skipped;
  - `cmake ...` and `ninja ...`: a build of its own (docs/gpus.md's portable
    build for a GPU machine), minutes of compiling: skipped;
  - `tools/format.sh ...`: rewrites the tracked C++ files in place (ctest's
    structure.clang_format runs its --check): skipped;
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
    (commands that run it are skipped when it is not given); `tetra train`
    (and the job of `tetra launch ... -- train`) shortened to 2 steps (a
    recipe's longer warmup then warns and runs) on
    one thread per rank (with a core taken by another job, two OpenMP
    threads stall at every barrier);
  - anything else: an error, so a new kind of command gets a rule here and is
    never skipped silently.
Keep the commands that run few and short (this test's ctest TIMEOUT is 900 s
and CI must stay under 30 minutes): move an example between documents
rather than add one.
Fails naming every command that failed, with its document and output.
usage: check_readme_commands.py TETRA_BINARY [TETRA_EMU_BINARY]
"""
import glob
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
    "tetra launch --np N [--min-np M] [--hostfile F | --host-discovery-script S "
    "[--discovery-interval-s T]] [--max-restarts K] -- train --config FILE [--set ...]",
    "mpirun -np N tetra commbench [--op all_reduce|reduce_scatter|all_gather|all_to_all|broadcast|send_recv|all]",
}
NAMES = {"tetra", "mpirun", "tetra train", "tetra export", "tetra plan", "tetra commbench", "tetra report",
         "tetra launch", "srun", "srun --exclude",
         "tetra checkpoint", "tetra checkpoint inspect", "tetra checkpoint export", "build/tetra",
         "build/tetra_emu", "build/tetra_gpu_tests_emu", "tools/data/prepare.py", "tools/check_moe_balance.py"}
# In the order they run.
OWN_TEXT = (
    "build/pyenv/bin/python tools/data/prepare.py --tokenizer MODEL_DIR --input TEXT.txt --output data/TEXT",
    "build/tetra train --config configs/tiny_dense.textproto --set data.format=MEGATRON --set data.path=data/TEXT "
    "--set model.vocab_size=VOCAB",
)
COMMAND_WORDS = {"tetra", "mpirun", "srun", "bash", "ctest", "python3"}
# Fenced code blocks by language: which hold commands, which config text or diagrams.
COMMAND_BLOCKS = {"", "sh", "bash"}
TEXT_BLOCKS = {"text", "textproto"}
# Shortened as a user shortens a recipe (docs/using.md: --set train.steps=N), on one thread.
SHORTEN_TRAIN = " --set train.steps=2 --set train.threads=1"
FENCED_BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)


def documents():
    """{path relative to the repository: text}: README.md, then docs/*.md in name order."""
    paths = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    texts = {}
    for path in paths:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            texts[path] = f.read()
    return texts


def document_commands(text):
    """A document's command strings, in order: the lines of its command
    blocks, then the inline code spans that start with a command; and the
    languages of its fenced blocks that are neither commands nor text."""
    commands, unknown = [], []
    for language, block in FENCED_BLOCK.findall(text):
        language = language.strip()
        if language in COMMAND_BLOCKS:
            commands += [line.strip() for line in block.splitlines() if line.strip()]
        elif language not in TEXT_BLOCKS:
            unknown.append(language)
    prose = FENCED_BLOCK.sub("", text)
    for span in re.findall(r"`([^`\n]+)`", prose):
        first = span.split()[0]
        if first in COMMAND_WORDS or first.startswith(("build/", "tools/", "scripts/")):
            commands.append(span.strip())
    return commands, unknown


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
    if words[0] in ("cmake", "ninja"):
        return "skip", "a build of its own (minutes of compiling)"
    if words[0] == "tools/format.sh":
        return "skip", "rewrites the tracked C++ files; ctest's structure.clang_format runs its --check"
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
    job = binary + 1
    if job < len(words) and words[job] == "launch" and "--" in words:  # tetra launch ... -- train
        job = words.index("--") + 1
    is_train = job < len(words) and words[job] == "train"
    return part + SHORTEN_TRAIN if is_train else part


def main():
    tetra = os.path.abspath(sys.argv[1])
    tetra_emu = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    texts = documents()
    failures, ran, seen = [], 0, {}
    lines = {line.strip() for text in texts.values() for line in text.splitlines()}
    for line in OWN_TEXT:
        if line not in lines:
            failures.append(f"{line}\n  OWN_TEXT line in no document (tests/data/check_prepare.py runs it from there)")
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(os.path.join(ROOT, "configs"), os.path.join(scratch, "configs"))
        for folder in ("build", "bin"):
            os.mkdir(os.path.join(scratch, folder))
            os.symlink(tetra, os.path.join(scratch, folder, "tetra"))
        if tetra_emu:
            os.symlink(tetra_emu, os.path.join(scratch, "build", "tetra_emu"))
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PATH=os.path.join(scratch, "bin") + os.pathsep + os.environ["PATH"])
        for path, text in texts.items():
            commands, unknown = document_commands(text)
            for language in unknown:
                failures.append(f"{path}: a ```{language} code block\n  neither commands ({sorted(COMMAND_BLOCKS)}) "
                                f"nor text ({sorted(TEXT_BLOCKS)}): add its language to one of them")
                print(f"FAIL {path}: ```{language} code block of no known kind")
            for command in commands:
                for part in (p.strip() for p in command.split("&&")):
                    if part in seen:
                        continue
                    seen[part] = path
                    action, reason = classify(part)
                    if action == "skip":
                        print(f"skip {path}: {part}: {reason}")
                        continue
                    if action == "error":
                        failures.append(f"{path}: {part}\n  {reason}")
                        print(f"FAIL {path}: {part}: {reason}")
                        continue
                    if "build/tetra_emu" in part.split() and not tetra_emu:
                        print(f"skip {path}: {part}: no emulated GPU build given")
                        continue
                    run = shortened(part)
                    done = subprocess.run(["bash", "-c", run], cwd=scratch, env=env, capture_output=True,
                                          text=True, timeout=600)
                    ran += 1
                    print(f"{'ok  ' if done.returncode == 0 else 'FAIL'} {path}: {run}")
                    if done.returncode != 0:
                        failures.append(f"{path}: {run}\n  exit {done.returncode}\n"
                                        f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    if failures:
        sys.exit(f"{len(failures)} documented commands failed:\n" + "\n".join(failures))
    if ran == 0:
        sys.exit("found no documented command to run: has the extraction broken?")
    print(f"all {ran} runnable commands of {len(texts)} documents ran")

if __name__ == "__main__":
    main()
