#!/usr/bin/env python3
"""tools/data/prepare.py against Megatron-Core's writer, transformers' tokenizer
and tetra.

Two model directories are made here with the tokenizers library from one
byte-level BPE trained on a fixed text: "bos" as Llama 3 holds one (a
TemplateProcessing post-processor prepends <|begin_of_text|>; config.json
names the EOS id; a few hundred tokens, uint16) and "wide", without a BOS and
with 70000 added tokens (int32 Megatron tokens, uint32 llm.c shards; its EOS comes
from tokenizer_config.json). Inputs: a .jsonl (unicode, an empty document, a
blank line, the EOS's text, several worker batches), a .txt and a .parquet
of several row groups. For each model:
  1. the Megatron .bin/.idx equal byte for byte megatron-core 0.9.0's
     IndexedDatasetBuilder fed transformers' AutoTokenizer(text).input_ids
     plus the EOS per document (as preprocess_data.py --append-eod, which
     gives a document that encodes to nothing neither tokens nor EOS);
  2. --workers 1 and 2 write identical files, in both formats;
  3. llm.c shards have llm.c's header, at most --shard-tokens tokens each, and
     hold the reference tokens in order; a later run into the same prefix
     with fewer shards removes the earlier run's extra ones;
  4. tetra trains 2 steps on both outputs with the `--set`s prepare.py prints,
     logging finite losses.
Then the documented walk-through (docs/data.md, "Training on your own text":
tests/tools/check_readme_commands.py OWN_TEXT) runs with the "bos" model and
text; bad inputs exit 1 with one sentence and leave no file; the EOS id's
sources rank as documented. Prints prepare.py's throughput on a few MB with
2 workers (not checked: speed depends on the machine).
usage: check_prepare.py TETRA_BINARY
"""
import json
import math
import os
import random
import re
import shutil
import shlex
import struct
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pyarrow
import pyarrow.parquet
import tokenizers
import torch
import transformers

warnings.filterwarnings("ignore", category=FutureWarning)  # megatron-core's torch.cuda.amp decorators
from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PREPARE = os.path.join(ROOT, "tools", "data", "prepare.py")
TINY_DENSE = os.path.join(ROOT, "configs", "tiny_dense.textproto")
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "data"))
import prepare  # noqa: E402
from check_readme_commands import OWN_TEXT, documents  # noqa: E402
from tetra_runs import ENV, Checker  # noqa: E402

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
WIDE_EXTRA_TOKENS = 70000  # past Megatron's 65500 and uint16's 65536
SHARD_TOKENS = 1000
BPE_TEXT = """Byte-level BPE learns merges from a fixed text: the quick brown fox jumps over the lazy dog,
and the lazy dog sleeps while the fox runs through the forest of tall trees. Données, naïve café,
über straße, 中文 文本, 日本語のテキスト, emoji 😀🚀 and e\u0301 combining marks keep it unicode.
Training runs split one model over tensor, pipeline, expert and data parallel ranks."""
WORDS = ("the model trains on tokens of text from many documents while the loss falls "
         "naïve café 中文 données über 😀 fox dog forest tree rank pipeline tensor expert").split()


def make_model_dir(path, bos):
    """A model directory: tokenizer.json (byte-level BPE, with a BOS
    post-processor if `bos`, else with WIDE_EXTRA_TOKENS added tokens),
    tokenizer_config.json and config.json (eos_token_id only with the BOS)."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=600, special_tokens=[BOS, EOS], show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([BPE_TEXT] * 4, trainer)
    byte_level = tokenizers.processors.ByteLevel(trim_offsets=False)
    if bos:
        tokenizer.post_processor = tokenizers.processors.Sequence([byte_level, tokenizers.processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))])])
    else:
        tokenizer.post_processor = byte_level
        tokenizer.add_tokens([f"<w{i}>" for i in range(WIDE_EXTRA_TOKENS)])
    os.makedirs(path)
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    write_json(os.path.join(path, "tokenizer_config.json"),
               {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                "model_max_length": 131072, "clean_up_tokenization_spaces": True})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True)}
    if bos:
        config.update(bos_token_id=tokenizer.token_to_id(BOS), eos_token_id=tokenizer.token_to_id(EOS))
    write_json(os.path.join(path, "config.json"), config)
    return path


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)


def generated_text(rng, words, wide_tokens):
    """`words` random words, with some of the wide model's added tokens."""
    picks = [rng.choice(WORDS) for _ in range(words)]
    if wide_tokens:
        picks += [f"<w{rng.randrange(WIDE_EXTRA_TOKENS)}>" for _ in range(words // 10)]
        rng.shuffle(picks)
    return " ".join(picks)


def write_inputs(folder, wide_tokens):
    """The three inputs and the documents they hold, in order."""
    rng = random.Random(1234)
    jsonl_docs = ["Unicode: naïve café — 中文 😀 e\u0301 \u200b tab\tend", "", f"ends with the EOS text {EOS}",
                  "  "] + [generated_text(rng, 80, wide_tokens) for _ in range(1500)]  # > 3 worker batches
    lines = [json.dumps({"id": i, "text": doc}, ensure_ascii=i % 2 == 0) for i, doc in enumerate(jsonl_docs)]
    lines.insert(2, "")  # a blank line is no document
    paths = [os.path.join(folder, name) for name in ("docs.jsonl", "book.txt", "rows.parquet")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    book = "A book in one file.\r\nSecond line: 中文 données.\n\n" + generated_text(rng, 2000, wide_tokens)
    with open(paths[1], "w", encoding="utf-8", newline="") as f:
        f.write(book)
    rows = [generated_text(rng, rng.randrange(1, 60), wide_tokens) for _ in range(300)]
    pyarrow.parquet.write_table(pyarrow.table({"id": list(range(len(rows))), "text": rows}), paths[2],
                                row_group_size=70)
    return paths, jsonl_docs + [book] + rows


def run_prepare(*args):
    return subprocess.run([sys.executable, PREPARE, *args], capture_output=True, text=True, timeout=600)


def megatron_reference(prefix, token_lists, vocab_size):
    """megatron-core's builder as preprocess_data.py drives it: a document of
    tokens is one item; one that encodes to nothing is an empty document."""
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.optimal_dtype(vocab_size))
    for ids in token_lists:
        if ids:
            builder.add_item(torch.tensor(ids))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def file_bytes(*paths):
    return [open(path, "rb").read() for path in paths]


def llmc_shards(prefix):
    """(magic, version, count, tokens) of each shard PREFIX_NNNNNN.bin, in order."""
    folder, name = os.path.split(prefix)
    shards = []
    for entry in sorted(os.listdir(folder)):
        if re.fullmatch(re.escape(name) + r"_\d{6}\.bin", entry):
            data = open(os.path.join(folder, entry), "rb").read()
            magic, version, count = struct.unpack("<3i", data[:12])
            shards.append((magic, version, count, np.frombuffer(data[1024:], "<u2" if magic == 20240520 else "<u4")))
    return shards


def printed_command(stdout, tetra):
    """The `tetra train` command prepare.py prints, on tiny_dense."""
    line = next(line for line in stdout.splitlines() if line.startswith("train on it: "))
    words = {"tetra": tetra, "FILE.textproto": TINY_DENSE}
    return [words.get(w, w) for w in shlex.split(line[len("train on it: "):])]


def check_tetra_trains(check, cmd, what, cwd):
    """`cmd`, a `tetra train` command, shortened to 2 steps of 2 samples on one
    thread, exits 0 and logs 2 finite losses."""
    metrics = os.path.join(cwd, "metrics.jsonl")
    for s in ["train.steps=2", "train.threads=1", "train.global_batch_size=2", "train.micro_batch_size=2",
              f"log.metrics_path={metrics}"]:
        cmd = cmd + ["--set", s]
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    losses = [json.loads(line)["loss"] for line in open(metrics)] if done.returncode == 0 else None
    check(losses is not None and len(losses) == 2 and all(math.isfinite(x) for x in losses),
          f"{what}: {shlex.join(cmd)} exits {done.returncode} with losses {losses}"
          + ("" if done.returncode == 0 else f"\n{done.stdout[-2000:]}{done.stderr[-2000:]}"))


def check_model(check, tetra, tmp, name, bos):
    model = make_model_dir(os.path.join(tmp, name, "model"), bos)
    inputs, documents = write_inputs(os.path.join(tmp, name), wide_tokens=not bos)
    auto = transformers.AutoTokenizer.from_pretrained(model)
    eos = auto.convert_tokens_to_ids(EOS)
    token_lists = [ids + [eos] if ids else [] for ids in (auto(doc).input_ids for doc in documents)]
    reference = os.path.join(tmp, name, "reference")
    megatron_reference(reference, token_lists, len(auto))
    flat = np.array([t for ids in token_lists for t in ids], dtype=np.int64)

    outputs, prepared = {}, True
    for fmt in ("megatron", "llmc"):
        for workers in (1, 2):
            prefix = os.path.join(tmp, name, f"{fmt}_w{workers}", "out")
            done = run_prepare("--tokenizer", model, "--input", *inputs, "--output", prefix, "--format", fmt,
                               "--workers", str(workers), "--shard-tokens", str(SHARD_TOKENS))
            check(done.returncode == 0, f"{name}: prepare.py --format {fmt} --workers {workers} exits "
                                        f"{done.returncode} {done.stderr.strip()[-2000:] if done.returncode else ''}")
            outputs[fmt, workers] = (prefix, done.stdout)
            prepared &= done.returncode == 0
    if not prepared:
        check.exit("")  # the comparisons below need every output
    megatron = outputs["megatron", 2][0]
    ours, theirs = file_bytes(megatron + ".bin", megatron + ".idx"), file_bytes(reference + ".bin", reference + ".idx")
    for part, mine, builders in zip((".bin", ".idx"), ours, theirs):
        check(mine == builders, f"{name}: {part} equals IndexedDatasetBuilder's ({len(mine)}, {len(builders)} bytes)")
    expected_code = 8 if bos else 4
    check(ours[1][17] == expected_code, f"{name}: dtype code {ours[1][17]}, expected {expected_code} "
                                        f"({'uint16' if bos else 'int32'}) for {len(auto)} tokens")
    check(file_bytes(outputs["megatron", 1][0] + ".bin", outputs["megatron", 1][0] + ".idx") == ours,
          f"{name}: Megatron files are identical for --workers 1 and 2")
    if bos:
        check(all(ids[0] == auto.convert_tokens_to_ids(BOS) for ids in token_lists),
              f"{name}: transformers prepends the BOS to every document, so the comparison covers it")
    else:
        check(flat.max() >= 1 << 16 and any(not ids for ids in token_lists),
              f"{name}: ids up to {flat.max()} (past uint16) and an empty document are compared")

    shards = {w: llmc_shards(outputs["llmc", w][0]) for w in (1, 2)}
    magic_version = (20240520, 1) if bos else (20240801, 7)
    check(len(shards[2]) > 1 and all((m, v) == magic_version for m, v, _, _ in shards[2]),
          f"{name}: {len(shards[2])} llm.c shards with magic and version {magic_version}")
    counts = [c for _, _, c, tokens in shards[2] if c == len(tokens)]
    check(len(counts) == len(shards[2]) and all(c == SHARD_TOKENS for c in counts[:-1]) and counts[-1] <= SHARD_TOKENS,
          f"{name}: every shard's count matches its size, {SHARD_TOKENS} tokens but the last ({counts[-1:]})")
    check(np.array_equal(np.concatenate([t for *_, t in shards[2]]), flat),
          f"{name}: the llm.c shards hold the reference tokens in order ({flat.size})")
    check([s[:3] for s in shards[1]] == [s[:3] for s in shards[2]] and
          all(np.array_equal(a[3], b[3]) for a, b in zip(shards[1], shards[2])),
          f"{name}: llm.c shards are identical for --workers 1 and 2")

    for fmt in ("megatron", "llmc"):
        prefix, stdout = outputs[fmt, 2]
        check_tetra_trains(check, printed_command(stdout, tetra), f"{name} {fmt} data", os.path.dirname(prefix))

    done = run_prepare("--tokenizer", model, "--input", *inputs, "--output", outputs["llmc", 1][0], "--format", "llmc")
    rerun = llmc_shards(outputs["llmc", 1][0])
    check(done.returncode == 0 and len(rerun) == 1 and np.array_equal(rerun[0][3], flat),
          f"{name}: a run into the same prefix with one shard leaves {len(rerun)} of the {len(shards[1])} "
          "shards an earlier run wrote there (tetra's glob would read them all)")
    return model, inputs[1], len(auto)


def check_readme_walkthrough(check, tetra, tmp, model, text, vocab):
    """The documented walk-through's lines (README.md or docs/*.md), run as
    written in a scratch folder, with this test's model, text and vocabulary
    for MODEL_DIR, TEXT.txt and VOCAB."""
    shown = {line.strip() for doc in documents().values() for line in doc.splitlines()}
    check(all(line in shown for line in OWN_TEXT), "README.md or docs/*.md shows the walk-through lines of OWN_TEXT")
    scratch = os.path.join(tmp, "readme")
    os.makedirs(scratch)
    os.symlink(os.path.join(ROOT, "configs"), os.path.join(scratch, "configs"))
    words = {"build/pyenv/bin/python": sys.executable, "tools/data/prepare.py": PREPARE, "build/tetra": tetra,
             "MODEL_DIR": model, "TEXT.txt": text, "model.vocab_size=VOCAB": f"model.vocab_size={vocab}"}
    prepare_line, train_line = ([words.get(w, w) for w in shlex.split(line)] for line in OWN_TEXT)
    done = subprocess.run(prepare_line, cwd=scratch, capture_output=True, text=True, timeout=600)
    check(done.returncode == 0, f"docs: {shlex.join(prepare_line)} exits {done.returncode} "
                                f"{done.stderr.strip()[-2000:] if done.returncode else ''}")
    check_tetra_trains(check, train_line, "docs", scratch)


def check_bad_inputs(check, tmp, model, good_inputs):
    """Each bad case exits 1 with one sentence naming the problem, leaving no file."""
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    missing_key = os.path.join(bad, "missing_key.jsonl")
    with open(missing_key, "w") as f:
        f.write('{"text": "one"}\n{"text": "two"}\n{"content": "three"}\n')
    not_json = os.path.join(bad, "not_json.jsonl")
    with open(not_json, "w") as f:
        f.write('{"text": "one"}\n{"text": "two",\n')
    csv = os.path.join(bad, "table.csv")
    open(csv, "w").write("text\nhello\n")
    null_row = os.path.join(bad, "null.parquet")
    pyarrow.parquet.write_table(pyarrow.table({"text": ["a", "b", None]}), null_row)
    no_tokenizer = os.path.join(bad, "no_tokenizer")
    os.makedirs(no_tokenizer)
    no_eos = os.path.join(bad, "no_eos")
    os.makedirs(no_eos)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        config = json.load(open(os.path.join(model, file)))
        config.pop("eos_token", None)
        write_json(os.path.join(no_eos, file), config)
    # Llama's fast tokenizer rebuilds its post-processor from add_bos_token
    # and add_eos_token on loading: tokenizer.json alone would encode otherwise.
    rebuilt = os.path.join(bad, "rebuilt")
    os.makedirs(rebuilt)
    for file in ("tokenizer.json", "config.json"):
        shutil.copy(os.path.join(model, file), rebuilt)
    write_json(os.path.join(rebuilt, "tokenizer_config.json"),
               {"tokenizer_class": "LlamaTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                "add_bos_token": False, "add_eos_token": True})
    cases = [  # (what, --tokenizer, inputs and flags, the message must contain)
        ("a line without the key, after a worker batch of good text", model, good_inputs + [missing_key],
         f'{missing_key} line 3 has no "text" key'),
        ("a line that is not JSON", model, [not_json], f"{not_json} line 2 is not JSON"),
        ("an unknown extension", model, [csv], f'{csv}: unknown input type ".csv"'),
        ("a missing input", model, [os.path.join(bad, "absent.txt")], "absent.txt: no such file"),
        ("a parquet file without the column", model, [null_row, "--json-key", "body"], 'has no column "body"'),
        ("a null parquet value", model, [null_row], f"{null_row} row 3"),
        ("a model directory without tokenizer.json", no_tokenizer, good_inputs, "holds no tokenizer.json"),
        ("a model directory naming no EOS", no_eos, good_inputs, "names no end-of-sequence token"),
        ("a tokenizer_config.json that changes the encoding", rebuilt, good_inputs,
         "but transformers' AutoTokenizer, with the directory's tokenizer_config.json"),
    ]
    for what, tokenizer, args, message in cases:
        out = os.path.join(tmp, "bad_out", what.replace(" ", "_"))
        done = run_prepare("--tokenizer", tokenizer, "--output", os.path.join(out, "data"), "--workers", "2",
                           "--input", *args)
        lines = done.stderr.strip().splitlines()
        progress = [line for line in lines[:-1] if re.match(r"prepare\.py: [\d,]+ documents", line)]
        one_sentence = lines and lines[-1].startswith("prepare.py: error: ") and len(progress) == len(lines) - 1
        left = sorted(os.listdir(out)) if os.path.isdir(out) else []
        check(done.returncode == 1 and one_sentence and message in lines[-1] and not left,
              f"{what}: exit {done.returncode}, {lines[-1] if lines else 'no message'!r}, files left {left}")


def check_eos_sources(check, tmp, model):
    """generation_config.json's first eos_token_id beats config.json's, which
    beats tokenizer_config.json's eos_token."""
    folder = os.path.join(tmp, "eos")
    os.makedirs(folder)
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    write_json(os.path.join(folder, "tokenizer_config.json"), {"eos_token": BOS})
    found = [prepare.eos_token_id(folder, tokenizer, 100)]
    write_json(os.path.join(folder, "config.json"), {"eos_token_id": 7})
    found.append(prepare.eos_token_id(folder, tokenizer, 100))
    write_json(os.path.join(folder, "generation_config.json"), {"eos_token_id": [9, 7]})
    found.append(prepare.eos_token_id(folder, tokenizer, 100))
    expected = [tokenizer.token_to_id(BOS), 7, 9]
    check(found == expected, f"EOS ids from tokenizer_config, config, generation_config: {found} (expected {expected})")


def measure_throughput(tmp, model):
    rng = random.Random(5)
    path = os.path.join(tmp, "throughput.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(8000):
            f.write(json.dumps({"text": generated_text(rng, 100, False)}) + "\n")
    start = time.monotonic()
    done = run_prepare("--tokenizer", model, "--input", path, "--output", os.path.join(tmp, "throughput", "out"),
                       "--workers", "2")
    seconds = time.monotonic() - start
    tokens = int(re.search(r"([\d,]+) tokens", done.stdout).group(1).replace(",", ""))
    print(f"throughput (not checked): {os.path.getsize(path) / 1e6:.1f} MB of .jsonl, {tokens:,} tokens in "
          f"{seconds:.1f} s with 2 workers, {tokens / seconds:,.0f} tokens/s end to end")


def main():
    tetra = os.path.abspath(sys.argv[1])
    check = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        model, text, vocab = check_model(check, tetra, tmp, "bos", bos=True)
        check_model(check, tetra, tmp, "wide", bos=False)
        check_readme_walkthrough(check, tetra, tmp, model, text, vocab)
        check_bad_inputs(check, tmp, model, [text])
        check_eos_sources(check, tmp, model)
        measure_throughput(tmp, model)
    check.exit("prepare.py matches megatron-core's builder and transformers' tokenizer, and tetra trains on it")


if __name__ == "__main__":
    main()
