#!/usr/bin/env python3
"""Every function of the libraries and tools (the folders of the layer table,
and emulator/) is under 60 lines, from the first line of its signature to its
closing brace, so each reads as one step at one level of abstraction. Fails
naming each longer one with its length.

A function is a brace block at namespace or class scope whose head (the text
since the previous ';', '{' or '}') has a parameter list; strings, characters,
comments and preprocessor lines are blanked first, so braces in them do not
count. Lambdas and blocks inside a function count towards it."""
import pathlib
import re
import sys

FOLDERS = ["core", "kernels", "comm", "parallel", "moe", "model", "pipeline", "optimizer", "data",
           "checkpoint", "observe", "plan", "train", "launch", "tools", "emulator"]
LIMIT = 60
TOKEN = re.compile(r'R"([a-z]*)\((.*?)\)\1"|"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])\'|//[^\n]*|/\*.*?\*/',
                   re.S)


def blank(text):
    """text with every string, character and comment emptied (newlines kept),
    in one pass so a "//" inside a string is no comment, and with
    preprocessor lines emptied."""
    def keep_lines(match):
        quote = match.group(0)[0]
        kept = '""' if quote in 'R"' else "''" if quote == "'" else ""
        return kept + "\n" * match.group(0).count("\n")
    return re.sub(r"^[ \t]*#[^\n]*", "", TOKEN.sub(keep_lines, text), flags=re.M)


def functions(text):
    """(first line, lines) of each function of `text`."""
    text = blank(text)
    scopes, head_start, line = [], 0, 1
    for index, char in enumerate(text):
        if char == "\n":
            line += 1
        if char not in ";{}":
            continue
        if char == "{":
            head = text[head_start:index]
            outer = all(kind in ("namespace", "type") for kind, _ in scopes)
            if re.search(r'\b(namespace|extern\s*"")', head):
                kind = "namespace"
            elif re.search(r"\b(class|struct|enum|union)\b[^()]*$", head):
                kind = "type"
            elif outer and ")" in head and not re.search(r"=\s*\[", head):
                kind = "function"
            else:
                kind = "block"
            scopes.append((kind, line - head.lstrip().count("\n")))
        elif char == "}" and scopes:
            kind, first = scopes.pop()
            if kind == "function":
                yield first, line - first + 1
        head_start = index + 1


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    long = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".h", ".cc", ".cu", ".cuh"):
                for first, lines in functions(path.read_text()):
                    if lines >= LIMIT:
                        long.append(f"{path.relative_to(root)}:{first}: a function of {lines} lines")
    for entry in long:
        print(entry)
    if long:
        print(f"{len(long)} function(s) of {LIMIT} lines or more: split each into named steps")
        sys.exit(1)
    print(f"ok: every function under {LIMIT} lines in {', '.join(FOLDERS)}")


if __name__ == "__main__":
    main()
