"""A newcomer who clones tetra has only the repository: every relative link in
its Markdown files names a file or folder that exists (and an #anchor a
heading of that file), and no tracked text file points to a document outside
the repository (the design document tetra grew from, ../shared/)."""
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared/")
LINK = re.compile(r"\]\(([^)\s]+)\)")
TEXT_SUFFIXES = {".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".cmake", ".proto",
                 ".textproto", ".json", ".toml", ".yaml", ".yml", ""}
THIS_FILE = pathlib.Path(__file__).resolve()


def tracked_files():
    names = subprocess.run(["git", "-C", str(root), "ls-files"], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    return [root / name for name in names if name and (root / name).is_file()]


def anchor_of(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    return {anchor_of(line.lstrip("#")) for line in path.read_text().splitlines()
            if line.startswith("#")}


def link_problems(path):
    problems = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}"
            if root not in linked.parents and linked != root:
                problems.append(f"{where}: {target} is outside the repository")
            elif not linked.exists():
                problems.append(f"{where}: {target} does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{where}: {target}: no heading gives #{anchor}")
    return problems


problems = []
for path in tracked_files():
    if path.suffix not in TEXT_SUFFIXES or path.resolve() == THIS_FILE:
        continue
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        continue
    for number, line in enumerate(text.splitlines(), 1):
        if OUTSIDE.search(line):
            problems.append(f"{path.relative_to(root)}:{number}: points outside the repository: "
                            f"{line.strip()[:100]}")
    if path.suffix == ".md":
        problems += link_problems(path)
for problem in problems:
    print(problem)
if problems:
    sys.exit(1)
print("ok: every Markdown link resolves inside the repository, and nothing cites a document "
      "outside it")
