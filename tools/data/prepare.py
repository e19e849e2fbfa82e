#!/usr/bin/env python3
"""Raw text to the token files tetra trains on, with a model's own tokenizer.

A document is a .txt file, a .jsonl line (its text under --json-key) or a
.parquet row (that column). Each is encoded with MODEL_DIR/tokenizer.json as
transformers' AutoTokenizer(text).input_ids (special tokens included) and ends
with the model's EOS id, as in Megatron-LM's preprocess_data.py --append-eod.
Writes PREFIX.bin + PREFIX.idx byte for byte as megatron-core's
IndexedDatasetBuilder does (--format megatron) or llm.c shards
PREFIX_000000.bin, ... (--format llmc): the same files for any --workers, and
none under their final names unless the run completes.
usage: prepare.py --tokenizer MODEL_DIR --input FILE... --output PREFIX
                  [--format megatron|llmc] [--workers N] [--json-key KEY] [--shard-tokens N]
"""
import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import os
import re
import shlex
import signal
import struct
import sys
import time

import numpy as np
import pyarrow
import pyarrow.parquet
import tokenizers

BATCH_BYTES = 256 << 10  # .jsonl text per worker task
PROGRESS_SECONDS = 2.0
MEGATRON_INDEX_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {"<u2": 8, "<i4": 4}  # megatron.core.datasets.indexed_dataset.DType
LLMC_HEADER_BYTES = 1024
LLMC_MAGIC_VERSION = {"<u2": (20240520, 1), "<u4": (20240801, 7)}
TEMP_SUFFIX = ".tmp"


class PrepareError(Exception):
    """Bad input or settings; the message says what is wrong and how to fix it."""


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, metavar="MODEL_DIR",
                        help="Hugging Face model directory holding tokenizer.json")
    parser.add_argument("--input", required=True, nargs="+", metavar="FILE",
                        help=".jsonl, .txt or .parquet files, read in the order given")
    parser.add_argument("--output", required=True, metavar="PREFIX",
                        help="writes PREFIX.bin and PREFIX.idx, or PREFIX_000000.bin, ... for llmc")
    parser.add_argument("--format", choices=("megatron", "llmc"), default="megatron",
                        help="Megatron-LM indexed data set (default) or llm.c shards")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count(), metavar="N",
                        help=f"tokenising processes (default: every core, {os.cpu_count()})")
    parser.add_argument("--json-key", default="text", metavar="KEY",
                        help="the key (.jsonl) or column (.parquet) of the text (default: text)")
    parser.add_argument("--shard-tokens", type=positive_int, default=100_000_000, metavar="N",
                        help="most tokens in an llm.c shard (default: 100000000, at most 2^31 - 1)")
    args = parser.parse_args(argv)
    if args.shard_tokens > 2**31 - 1:
        parser.error("--shard-tokens must be at most 2147483647, the llm.c header's int32 count")
    return args


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


# --- the model directory -------------------------------------------------------


def load_tokenizer(model_dir):
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        raise PrepareError(f"{model_dir} holds no tokenizer.json; pass --tokenizer a Hugging Face model "
                           "directory with a fast tokenizer (AutoTokenizer.from_pretrained(DIR)"
                           ".save_pretrained(DIR) writes one)")
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as err:  # tokenizers raises bare Exceptions for bad files
        raise PrepareError(f"{path} is not a tokenizer the tokenizers library can read ({err}); "
                           "download the model's tokenizer.json again") from err


PROBE_TEXT = "Hello, world!  It's 2026:\n\tnaïve café — 東京 1234567 <|im_end|> #tetra"


def check_encodes_as_transformers(model_dir, tokenizer):
    """tokenizer.json alone must encode as transformers' AutoTokenizer does:
    a tokenizer_config.json setting transformers applies on loading (a
    Llama-2 add_eos_token, a GPT-2 add_prefix_space) would change every
    document's tokens."""
    try:
        import transformers  # noqa: PLC0415 (heavy; only for this check)
        transformers.logging.set_verbosity_error()  # its loading notes are not this tool's output
        reference = transformers.AutoTokenizer.from_pretrained(model_dir)
    except Exception as err:  # a tokenizer class transformers cannot load here
        print(f"prepare.py: note: AutoTokenizer cannot load {model_dir} ({type(err).__name__}); encoding with "
              "its tokenizer.json alone", file=sys.stderr)
        return
    expected = reference(PROBE_TEXT).input_ids
    got = tokenizer.encode(PROBE_TEXT).ids
    if got != expected:
        raise PrepareError(f"{model_dir}/tokenizer.json encodes a probe text as {got[:8]}... but transformers' "
                           f"AutoTokenizer, with the directory's tokenizer_config.json, as {expected[:8]}...; "
                           "save the tokenizer as transformers loads it (AutoTokenizer.from_pretrained(DIR)"
                           ".save_pretrained(DIR)) and run again")


def read_model_json(model_dir, name):
    """A model directory's JSON file as a dict; {} when it is absent."""
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (OSError, ValueError) as err:
        raise PrepareError(f"cannot read {path} ({err}); fix or remove the file") from err
    if not isinstance(content, dict):
        raise PrepareError(f"{path} holds no JSON object; fix or remove the file")
    return content


def eos_token_id(model_dir, tokenizer, id_bound):
    """The id appended after each document: generation_config.json's or
    config.json's eos_token_id (the first of a list), else tokenizer_config.json's
    eos_token looked up in the tokenizer."""
    for name in ("generation_config.json", "config.json"):
        eos = read_model_json(model_dir, name).get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if eos is not None:
            if not isinstance(eos, int) or not 0 <= eos < id_bound:
                raise PrepareError(f"{os.path.join(model_dir, name)}: eos_token_id {eos} is not a token id "
                                   f"of the tokenizer (0 to {id_bound - 1}); set it to the tokenizer's "
                                   "end-of-sequence id")
            return eos
    token = read_model_json(model_dir, "tokenizer_config.json").get("eos_token")
    if isinstance(token, dict):  # an AddedToken as transformers saves it
        token = token.get("content")
    eos = tokenizer.token_to_id(token) if isinstance(token, str) else None
    if eos is None:
        raise PrepareError(f"{model_dir} names no end-of-sequence token (no eos_token_id in "
                           "generation_config.json or config.json, and no eos_token of the tokenizer in "
                           "tokenizer_config.json); add \"eos_token_id\": ID to its config.json")
    return eos


def token_dtype(out_format, vocab_size, id_bound):
    """Megatron's DType.optimal_dtype(len(tokenizer)), or llm.c's uint16 when
    every id fits, else uint32 (little-endian numpy type strings)."""
    if out_format == "megatron":
        dtype = "<u2" if vocab_size < 65500 else "<i4"
    else:
        dtype = "<u2" if id_bound <= 1 << 16 else "<u4"
    if id_bound - 1 > np.iinfo(dtype).max:
        raise PrepareError(f"the tokenizer has ids up to {id_bound - 1}, more than {dtype} tokens hold, "
                           f"with only {vocab_size} tokens; use --format llmc, whose width follows the ids")
    return dtype


# --- splitting the inputs into batches (in the main process) --------------------------
# A batch is a small message naming what a worker reads: ("jsonl", path, first
# byte, end byte) of whole lines, ("txt", path) or ("parquet", path, row group,
# number of its first row). Workers read the data themselves, so the pool's
# task queue never holds more than a pipe's buffer (a full one keeps
# ProcessPoolExecutor from shutting down after a worker dies, in Python 3.11).


def check_inputs(paths, key):
    """Every input exists and has a known type; Parquet files have the text column."""
    for path in paths:
        if not os.path.isfile(path):
            raise PrepareError(f"{path}: no such file; check the --input paths")
        extension = os.path.splitext(path)[1].lower()
        if extension not in BATCHES:
            raise PrepareError(f"{path}: unknown input type \"{extension}\"; give .jsonl (one JSON object "
                               "per line), .txt (one document per file) or .parquet files")
        if extension == ".parquet":
            parquet_file(path, key)


def batches(paths, key):
    """(batch, input bytes it covers) over every input, in order."""
    for path in paths:
        yield from BATCHES[os.path.splitext(path)[1].lower()](path, key)


def jsonl_batches(path, key):
    size, start = os.path.getsize(path), 0
    with open(path, "rb") as f:
        while start < size:
            f.seek(min(start + BATCH_BYTES, size) - 1)
            f.readline()  # on to the end of the line
            yield ("jsonl", path, start, f.tell()), f.tell() - start
            start = f.tell()


def txt_batches(path, key):
    yield ("txt", path), os.path.getsize(path)


def parquet_batches(path, key):
    metadata = parquet_file(path, key).metadata
    size, rows, first = os.path.getsize(path), max(metadata.num_rows, 1), 1
    for group in range(metadata.num_row_groups):
        count = metadata.row_group(group).num_rows
        yield ("parquet", path, group, first), size * count / rows
        first += count


def parquet_file(path, key):
    """The opened file, checked to hold a string column `key`."""
    try:
        table = pyarrow.parquet.ParquetFile(path)
    except (OSError, pyarrow.ArrowException) as err:
        raise PrepareError(f"{path} is not a Parquet file pyarrow can read ({err}); check the --input paths") from err
    schema = table.schema_arrow
    if key not in schema.names:
        raise PrepareError(f"{path} has no column \"{key}\" (its columns: {', '.join(schema.names)}); "
                           "pass --json-key with the column that holds the text")
    column_type = schema.field(key).type
    if not (pyarrow.types.is_string(column_type) or pyarrow.types.is_large_string(column_type)):
        raise PrepareError(f"{path}: column \"{key}\" holds {column_type}, not strings; pass --json-key "
                           "with the column that holds the text")
    return table


BATCHES = {".jsonl": jsonl_batches, ".txt": txt_batches, ".parquet": parquet_batches}


# --- reading and tokenising (in the worker processes) ------------------------------------

worker = {}


def start_worker(tokenizer_path, eos, dtype, key):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the main process, which ends the pool
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker
    worker.update(tokenizer=tokenizers.Tokenizer.from_file(tokenizer_path), eos=eos, dtype=dtype, key=key)


def encode_batch(batch):
    """(tokens, per-document token counts) of a batch, EOS appended to every
    document that encodes to at least one token."""
    kind, path, *where = batch
    tokens, lengths = [], []
    for encoding in worker["tokenizer"].encode_batch_fast(TEXTS[kind](path, *where)):
        ids = encoding.ids
        if ids:
            ids.append(worker["eos"])
            tokens.extend(ids)
        lengths.append(len(ids))
    return np.array(tokens, dtype=worker["dtype"]), np.array(lengths, dtype=np.int64)


def jsonl_texts(path, start, end):
    """The texts of the lines in bytes [start, end); blank lines are skipped."""
    with open(path, "rb") as f:
        f.seek(start)
        lines = f.read(end - start).split(b"\n")
    key, texts = worker["key"], []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:  # a JSONDecodeError, or a UnicodeDecodeError for bytes that are not UTF-8
            reason = f"{err.msg} at character {err.pos + 1}" if isinstance(err, json.JSONDecodeError) else err
            raise PrepareError(f"{path} line {line_number(path, start, index)} is not JSON ({reason}); each "
                               "line of a .jsonl file must be one JSON object") from err
        if not isinstance(record, dict):
            raise PrepareError(f"{path} line {line_number(path, start, index)} is a JSON "
                               f"{type(record).__name__}, not an object; each line of a .jsonl file must be "
                               "one JSON object")
        if key not in record:
            raise PrepareError(f"{path} line {line_number(path, start, index)} has no \"{key}\" key (its keys: "
                               f"{', '.join(record) or 'none'}); pass --json-key with the key that holds the text")
        if not isinstance(record[key], str):
            raise PrepareError(f"{path} line {line_number(path, start, index)}: \"{key}\" holds a "
                               f"{type(record[key]).__name__}, not a string; pass --json-key with the key that "
                               "holds the text")
        texts.append(record[key])
    return texts


def line_number(path, start, index):
    """The number of the line `index` lines past byte `start`, for an error
    message (it counts the lines before `start`)."""
    number = index + 1
    with open(path, "rb") as f:
        while f.tell() < start:
            number += f.read(min(1 << 24, start - f.tell())).count(b"\n")
    return number


def txt_texts(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return [data.decode("utf-8")]
    except UnicodeDecodeError as err:
        raise PrepareError(f"{path} is not UTF-8 text (byte {err.start} is not valid); convert it to UTF-8, "
                           "e.g. with iconv -t UTF-8") from err


def parquet_texts(path, group, first_row):
    texts = pyarrow.parquet.ParquetFile(path).read_row_group(group, columns=[worker["key"]]).column(0).to_pylist()
    for row, text in enumerate(texts, first_row):
        if text is None:
            raise PrepareError(f"{path} row {row}: column \"{worker['key']}\" is null; drop the row or fill "
                               "in its text")
    return texts


TEXTS = {"jsonl": jsonl_texts, "txt": txt_texts, "parquet": parquet_texts}


def tokenized_in_order(executor, work, depth):
    """(encode_batch's result, input bytes) for each of `work`'s batches, in
    order, with at most `depth` batches in flight."""
    pending = collections.deque()
    for batch, size in work:
        pending.append((executor.submit(encode_batch, batch), size))
        if len(pending) >= depth:
            future, size = pending.popleft()
            yield future.result(), size
    while pending:
        future, size = pending.popleft()
        yield future.result(), size


# --- writing ------------------------------------------------------------------------


class Outputs:
    """Files written under temporary names and renamed into place together."""

    def __init__(self):
        self.paths = []

    def open(self, path):
        self.paths.append(path)
        return open(path + TEMP_SUFFIX, "wb")

    def commit(self):
        for path in self.paths:
            os.replace(path + TEMP_SUFFIX, path)

    def discard(self):
        for path in self.paths:
            if os.path.exists(path + TEMP_SUFFIX):
                os.remove(path + TEMP_SUFFIX)


class MegatronWriter:
    """PREFIX.bin and PREFIX.idx (data/megatron_dataset.h): every non-empty
    document one sequence, an empty one a document of no sequences, as
    IndexedDatasetBuilder.add_document(ids, [len(ids)] or []) records them."""

    def __init__(self, outputs, prefix, dtype):
        self.outputs, self.prefix, self.dtype = outputs, prefix, dtype
        self.data = outputs.open(prefix + ".bin")
        self.lengths = []  # arrays of per-document token counts

    def write(self, tokens, lengths):
        self.data.write(tokens.tobytes())
        self.lengths.append(lengths)

    def finish(self):
        self.data.close()
        lengths = np.concatenate(self.lengths)
        sequences = lengths[lengths > 0]
        if sequences.size and sequences.max() > 2**31 - 1:
            raise PrepareError(f"a document of {sequences.max()} tokens does not fit Megatron's int32 "
                               "sequence length; split it into several documents")
        pointers = (np.cumsum(sequences) - sequences) * np.dtype(self.dtype).itemsize
        documents = np.concatenate(([0], np.cumsum(lengths > 0)))
        with self.outputs.open(self.prefix + ".idx") as index:
            index.write(MEGATRON_INDEX_MAGIC + struct.pack("<QB", 1, MEGATRON_DTYPE_CODES[self.dtype]))
            index.write(struct.pack("<QQ", sequences.size, documents.size))
            for table, dtype in ((sequences, "<i4"), (pointers, "<i8"), (documents, "<i8")):
                index.write(table.astype(dtype).tobytes())

    def train_sets(self):
        return ["data.format=MEGATRON", f"data.path={self.prefix}"]


class LlmcWriter:
    """llm.c shards PREFIX_000000.bin, ... (data/llmc_shard.h) of at most
    `shard_tokens` tokens; every shard but the last is full."""

    def __init__(self, outputs, prefix, dtype, shard_tokens):
        self.outputs, self.prefix, self.dtype, self.shard_tokens = outputs, prefix, dtype, shard_tokens
        self.shards, self.file, self.count = 0, None, 0

    def write(self, tokens, lengths):
        while tokens.size:
            if self.file is None:
                self.file = self.outputs.open(f"{self.prefix}_{self.shards:06d}.bin")
                self.file.write(bytes(LLMC_HEADER_BYTES))
                self.shards, self.count = self.shards + 1, 0
            take = min(tokens.size, self.shard_tokens - self.count)
            self.file.write(tokens[:take].tobytes())
            self.count += take
            tokens = tokens[take:]
            if self.count == self.shard_tokens:
                self.close_shard()

    def close_shard(self):
        magic, version = LLMC_MAGIC_VERSION[self.dtype]
        self.file.seek(0)
        self.file.write(struct.pack("<3i", magic, version, self.count))
        self.file.close()
        self.file = None

    def finish(self):
        if self.file is not None:
            self.close_shard()

    def train_sets(self):
        return ["data.format=LLMC", f"data.path={self.prefix}_*.bin"]


def remove_stale_shards(prefix, shards):
    """Deletes PREFIX_NNNNNN.bin shards numbered `shards` or above, left by an
    earlier, longer run, which tetra's glob would read as part of the data."""
    folder, name = os.path.split(prefix)
    pattern = re.compile(re.escape(name) + r"_(\d{6})\.bin")
    for entry in sorted(os.listdir(folder or ".")):
        match = pattern.fullmatch(entry)
        if match and int(match.group(1)) >= shards:
            os.remove(os.path.join(folder, entry))
            print(f"prepare.py: removed {os.path.join(folder, entry)}, left by an earlier run", file=sys.stderr)


# --- progress -------------------------------------------------------------------------


class Progress:
    """Documents, tokens, tokens/s and an ETA from the input bytes read, on
    stderr every PROGRESS_SECONDS and at the end."""

    def __init__(self, total_bytes):
        self.total_bytes, self.bytes_read = max(total_bytes, 1), 0
        self.documents, self.tokens = 0, 0
        self.start = self.last = time.monotonic()

    def add(self, documents, tokens, input_bytes):
        self.documents += documents
        self.tokens += tokens
        self.bytes_read += input_bytes
        if time.monotonic() - self.last >= PROGRESS_SECONDS:
            self.report()

    def report(self, done=False):
        self.last = time.monotonic()
        elapsed = max(self.last - self.start, 1e-9)
        fraction = min(self.bytes_read / self.total_bytes, 1.0)
        if done:
            tail = f"done in {elapsed:.1f} s"
        elif fraction > 0:
            tail = f"{100 * fraction:.0f}% of the input read, ETA {elapsed * (1 - fraction) / fraction:.0f} s"
        else:
            tail = "ETA unknown"
        print(f"prepare.py: {self.documents:,} documents, {self.tokens:,} tokens, "
              f"{self.tokens / elapsed:,.0f} tokens/s, {tail}", file=sys.stderr, flush=True)


# --- the whole run ----------------------------------------------------------------------


def prepare(args, outputs):
    """Tokenises every input into the output files; returns the summary lines."""
    check_inputs(args.input, args.json_key)
    tokenizer = load_tokenizer(args.tokenizer)
    check_encodes_as_transformers(args.tokenizer, tokenizer)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)  # len(AutoTokenizer), Megatron's vocab_size
    id_bound = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    eos = eos_token_id(args.tokenizer, tokenizer, id_bound)
    dtype = token_dtype(args.format, vocab_size, id_bound)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    writer = (MegatronWriter(outputs, args.output, dtype) if args.format == "megatron"
              else LlmcWriter(outputs, args.output, dtype, args.shard_tokens))
    progress = Progress(sum(os.path.getsize(path) for path in args.input))
    # Spawned, not forked: pyarrow's threads must not be copied into a worker mid-operation.
    with concurrent.futures.ProcessPoolExecutor(
            args.workers, multiprocessing.get_context("spawn"), initializer=start_worker,
            initargs=(os.path.join(args.tokenizer, "tokenizer.json"), eos, dtype, args.json_key)) as executor:
        for (tokens, lengths), size in tokenized_in_order(executor, batches(args.input, args.json_key),
                                                          2 * args.workers):
            writer.write(tokens, lengths)
            progress.add(lengths.size, tokens.size, size)
    if progress.tokens == 0:
        raise PrepareError(f"the inputs hold no text ({progress.documents} documents, all empty); check the "
                           "input files and --json-key")
    writer.finish()
    progress.report(done=True)
    sets = " ".join("--set " + shlex.quote(s) for s in writer.train_sets())
    paths = outputs.paths if len(outputs.paths) <= 2 else [outputs.paths[0], "...", outputs.paths[-1]]
    return [f"wrote {', '.join(paths)}: {progress.documents:,} documents, {progress.tokens:,} tokens "
            f"({np.dtype(dtype).name}, EOS id {eos})",
            f"train on it: tetra train --config FILE.textproto {sets} --set model.vocab_size={id_bound}",
            f"(model.vocab_size must be at least {id_bound}, the tokenizer's ids; a model from init_from "
            "or the recipe that has that many needs no --set)"]


def main(argv=None):
    args = parse_args(argv)
    outputs = Outputs()
    try:
        summary = prepare(args, outputs)
        outputs.commit()
        if args.format == "llmc":
            remove_stale_shards(args.output, len(outputs.paths))
    except PrepareError as err:
        sys.exit(f"prepare.py: error: {err}")
    except OSError as err:
        sys.exit(f"prepare.py: error: {err.filename or args.output}: {err.strerror}; check the path, its "
                 "permissions and the free disk space")
    except concurrent.futures.process.BrokenProcessPool:
        sys.exit("prepare.py: error: a worker process died before finishing its batch; if the machine ran out "
                 "of memory (see dmesg), pass fewer --workers")
    finally:
        outputs.discard()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
