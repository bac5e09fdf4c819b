#!/usr/bin/env python3
"""Functions longer than --max lines (default 120) in crates/ and kernels/,
outside tests and generated protobuf code (issue 31: "functions a reader
can hold"). Prints `lines path:line name`, longest first; exits 1 when any
is found (scripts/checks.d/05-fn-lengths.sh runs it in CI).

A function runs from its `fn` line to the brace that closes its body,
counted by brace depth (braces inside strings count too: Rust's format
strings balance them). Functions nested in a reported one are not listed
again. A file's `#[cfg(test)]` modules are skipped (the rest of the file
after them is read), and so are test files and generated protobuf code
(a file whose first lines say it is generated).

    python3 scripts/fn-lengths.py [--max N]
"""
import argparse
import os
import re
import sys

FN = re.compile(r"\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def skipped(path):
    name = os.path.basename(path)
    if "/tests/" in path or name == "tests.rs" or name.endswith("_tests.rs"):
        return True
    head = open(path, encoding="utf-8").read(2000).lower()
    return "generated" in head and "protobuf" in head


def block_end(lines, i):
    """The index of the line that closes the brace block opened at or after
    line i (the last line when it never closes), and whether one opened."""
    depth, started, j = 0, False, i
    while j < len(lines):
        for ch in lines[j]:
            if ch == "{":
                depth, started = depth + 1, True
            elif ch == "}":
                depth -= 1
        if started and depth == 0:
            return j, True
        if not started and lines[j].rstrip().endswith(";"):
            return j, False
        j += 1
    return len(lines) - 1, started


def long_functions(path, limit):
    lines = open(path, encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
            # The test module (or item) it marks: skipped to its end.
            i = block_end(lines, i + 1)[0] + 1
            continue
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        j, started = block_end(lines, i)
        n = j - i + 1
        if started and n > limit:
            found.append((n, f"{path}:{i + 1}", m.group(6)))
        i = j + 1 if started else i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, default=120)
    args = ap.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    found = []
    for top in ("crates", "kernels"):
        for root, _, files in os.walk(top):
            for f in files:
                p = os.path.join(root, f)
                if f.endswith(".rs") and not skipped(p):
                    found += long_functions(p, args.max)
    for n, where, name in sorted(found, reverse=True):
        print(n, where, name)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
