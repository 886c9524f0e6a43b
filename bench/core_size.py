#!/usr/bin/env python3
"""The size of the house at a git ref (issue 36's before and after):
function prototypes declared in include/ (file-scope declarations ending
in ");", static inline definitions not counted), headers in include/, and
lines of code (.c .h .cu .cuh) and of all tracked text outside tests/.

Usage: bench/core_size.py [REF ...]   (default: HEAD)"""
import re
import subprocess
import sys

CODE = (".c", ".h", ".cu", ".cuh")


def files(ref):
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref], capture_output=True, text=True, check=True)
    return out.stdout.split()


def show(ref, path):
    return subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, check=True).stdout.decode(
        "utf-8", "replace")


def prototypes(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)  # extern "C" { ... }
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)  # preprocessor lines
    n, depth, stmt = 0, 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
            stmt = ""
        elif ch == "}":
            depth -= 1
            stmt = ""
        elif depth == 0:
            stmt += ch
            if ch == ";":
                s = " ".join(stmt.split())
                stmt = ""
                if s.startswith(("typedef", "#", "static", "extern \"C\"")) or "(" not in s:
                    continue
                if re.match(r"^[A-Za-z_][\w\s\*]*\b\w+\s*\(.*\)\s*;$", s) and not re.match(r"^\w+\s*\(", s):
                    n += 1
    return n


def measure(ref):
    fs = files(ref)
    inc = [f for f in fs if f.startswith("include/") and f.endswith(".h")]
    outside = [f for f in fs if not f.startswith("tests/")]
    code_lines = sum(show(ref, f).count("\n") for f in outside if f.endswith(CODE))
    text_lines = 0
    for f in outside:
        if f.endswith((".bin", ".png")) or f.startswith("data/kjv"):
            continue
        text_lines += show(ref, f).count("\n")
    protos = sum(prototypes(show(ref, f)) for f in inc)
    return {"ref": ref, "prototypes_in_include": protos, "headers_in_include": len(inc),
            "code_lines_outside_tests": code_lines, "text_lines_outside_tests": text_lines}


if __name__ == "__main__":
    for ref in sys.argv[1:] or ["HEAD"]:
        m = measure(ref)
        print(" ".join(f"{k}={v}" for k, v in m.items()))
