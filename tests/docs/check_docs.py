#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Docs that run: every C code block in README.md and docs/*.md says what
it is, on the line before its fence, and the claim is checked.

  <!-- doc: file PATH -->      the block is the whole of PATH (a file the
                               build compiles: docs/examples/)
  <!-- doc: excerpt PATH -->   the block's lines stand together in PATH
  <!-- doc: output NAME -->    the block (any language) is what the built
                               example NAME prints
  <!-- doc: sketch -->         a fragment, not meant to compile on its own

Usage: check_docs.py SOURCE_ROOT [NAME=PROGRAM]...; exit 1 naming each
block that is unmarked or not what it claims."""

import glob
import os
import re
import subprocess
import sys

MARK = re.compile(r"^\s*<!-- doc: (file|excerpt|output|sketch)(?: (\S+))? -->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


def blocks(path):
    """(line, language, marker, text) of each fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i, out = 0, []
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            ln = lines[i]
            body.append(ln[len(indent):] if ln.startswith(indent) else ln.lstrip())
            i += 1
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mark = MARK.match(lines[j]) if j >= 0 else None
        out.append((start + 1, lang, mark, "\n".join(body) + "\n"))
        i += 1
    return out


def main():
    root = sys.argv[1]
    progs = dict(a.split("=", 1) for a in sys.argv[2:])
    outputs = {}
    bad = 0
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    counts = {"file": 0, "excerpt": 0, "output": 0, "sketch": 0}
    for path in docs:
        rel = os.path.relpath(path, root)
        for line, lang, mark, text in blocks(path):
            where = f"{rel}:{line}"
            if not mark:
                if lang == "c":
                    print(f"{where}: a C block with no <!-- doc: file|excerpt|output|sketch --> line "
                          f"before it")
                    bad += 1
                continue
            kind, arg = mark.group(1), mark.group(2)
            counts[kind] += 1
            if kind in ("file", "excerpt"):
                src = os.path.join(root, arg or "")
                if not arg or not os.path.isfile(src):
                    print(f"{where}: {kind} {arg}: no such file")
                    bad += 1
                    continue
                want = open(src, encoding="utf-8").read()
                ok = text == want if kind == "file" else text in want
                if not ok:
                    print(f"{where}: the block is not {'' if kind == 'file' else 'in '}{arg} as it "
                          f"is now")
                    bad += 1
            elif kind == "output":
                if arg not in progs:
                    print(f"{where}: output {arg}: no such example program given to the test")
                    bad += 1
                    continue
                if arg not in outputs:
                    r = subprocess.run([progs[arg]], capture_output=True, text=True, timeout=60)
                    outputs[arg] = r.stdout if r.returncode == 0 else None
                    if r.returncode:
                        print(f"{where}: {arg} exited {r.returncode}: {r.stderr.strip()}")
                if outputs[arg] is None or outputs[arg] != text:
                    if outputs[arg] is not None:
                        print(f"{where}: the block is not what {arg} prints now")
                    bad += 1
    print(f"docs: {counts['file']} files, {counts['excerpt']} excerpts, {counts['output']} "
          f"outputs checked; {counts['sketch']} sketches; {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
