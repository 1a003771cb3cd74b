#!/usr/bin/env python3
"""clang's lock checks over the LibTorch part: src/torch and src/python.

The annotations of include/tdist/thread_annotations.h are checked by clang only, and the
trees that build src/torch and src/python use g++ (the clang trees leave LibTorch out). This
parses every .cc of each folder with clang++ -fsyntax-only -Wthread-safety
-Wthread-safety-beta -Werror, one translation unit per folder that includes them all (the
LibTorch headers are parsed once per folder: about 20 s each; the folders run in parallel).

Usage (ctest thread_safety_torch, tests/torch/CMakeLists.txt):
    check_thread_safety.py --compiler CLANGXX --flags FILE [--libtorch1]

FILE, written by CMake from the targets' properties, holds one "key value" per line:
    group NAME DIR     a folder whose *.cc form one unit; the lines after it are its flags:
    std STD            the language standard (c++20)
    project DIR        this project's include folders (and those below): -I; others -isystem
    implicit DIR       the compiler's own include folders (left out, as CMake does)
    include DIR, define NAME[=VALUE], option OPTION   (options that start -W are left out:
                       the warnings are this check's)
    python_headers interpreter   Python's headers are those of the interpreter running
                       this (a tree that does not build the extension names none); without
                       them the group is left out, and said so

--libtorch1: LibTorch 1.x's headers are not C++20 that clang takes with libstdc++ (a
std::vector<c10::IValue> is used before c10::IValue is complete, which libstdc++'s C++20
constexpr vector makes clang instantiate at once; LibTorch 2 fixed it). Those headers are
then parsed with libstdc++'s C++20 constexpr switched off (_GLIBCXX20_CONSTEXPR empty) and,
because std::string's literal operator is constexpr regardless, with its pre-C++11 string
(_GLIBCXX_USE_CXX11_ABI=0). Neither changes what the lock checks see in tdist's code.

Exit status: 0 clean, 1 a diagnostic (printed), 77 no clang++ (ctest reports a skip).
"""

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

WARNINGS = ["-Wthread-safety", "-Wthread-safety-beta", "-Werror"]
LIBTORCH1 = ["-D_GLIBCXX20_CONSTEXPR=", "-D_GLIBCXX_USE_CXX11_ABI=0"]


def read_groups(path):
    """The flags file's groups: dicts of the keys above."""
    groups = []
    for line in Path(path).read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if not key:
            continue
        if key == "group":
            name, _, folder = value.partition(" ")
            groups.append({"name": name, "dir": Path(folder), "std": "c++20", "project": [],
                           "implicit": [], "include": [], "define": [], "option": [],
                           "python_headers": ""})
        elif not groups:
            sys.exit(f"check_thread_safety: {path}: '{key}' before any group")
        elif key in ("std", "python_headers"):
            groups[-1][key] = value
        elif key in ("project", "implicit", "include", "define", "option"):
            if value:  # an empty list leaves the key alone
                groups[-1][key].append(value)
        else:
            sys.exit(f"check_thread_safety: {path}: unknown key '{key}'")
    return groups


def include_args(group):
    """-I/-isystem for the group's include folders, each once, in order."""
    project = [Path(p).resolve() for p in group["project"]]
    seen = {Path(p).resolve() for p in group["implicit"]}
    args = []
    for folder in group["include"]:
        path = Path(folder).resolve()
        if path in seen:
            continue
        seen.add(path)
        ours = any(path == p or p in path.parents for p in project)
        args += ["-I" if ours else "-isystem", str(path)]
    return args


def command(compiler, group, unit, libtorch1):
    args = [compiler, "-fsyntax-only", f"-std={group['std']}"] + WARNINGS + include_args(group)
    args += ["-D" + d for d in group["define"]]
    for option in group["option"]:
        if option.startswith("-W"):
            continue
        if libtorch1 and option.startswith("-D_GLIBCXX_USE_CXX11_ABI"):
            continue  # LIBTORCH1 sets it
        args.append(option)
    if libtorch1:
        args += LIBTORCH1
    return args + [str(unit)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiler", default="clang++")
    parser.add_argument("--flags", required=True)
    parser.add_argument("--libtorch1", action="store_true")
    args = parser.parse_args()
    compiler = shutil.which(args.compiler) if args.compiler else None
    if compiler is None:
        print(f"check_thread_safety: no clang++ ('{args.compiler}'); skipped")
        return 77
    groups = read_groups(args.flags)
    if not groups:
        sys.exit(f"check_thread_safety: {args.flags} names no folder")
    with tempfile.TemporaryDirectory(prefix="tdist_thread_safety_") as tmp:
        runs = []
        for i, group in enumerate(groups):
            if group["python_headers"] == "interpreter":
                headers = sysconfig.get_paths()["include"]
                if not (Path(headers) / "Python.h").is_file():
                    print(f"{group['name']}: left out: no Python.h for {sys.executable} "
                          f"(in {headers}; Debian: apt-get install python3-dev)")
                    continue
                group["include"].append(headers)
            sources = sorted(group["dir"].glob("*.cc"))
            if not sources:
                sys.exit(f"check_thread_safety: no .cc in {group['dir']}")
            unit = Path(tmp) / f"unit{i}.cc"
            unit.write_text("".join(f'#include "{s}"\n' for s in sources))
            cmd = command(compiler, group, unit, args.libtorch1)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            runs.append((group, sources, cmd, proc, time.monotonic()))
        status = 0
        for group, sources, cmd, proc, start in runs:
            output, _ = proc.communicate()
            seconds = time.monotonic() - start
            what = f"{group['name']}: {len(sources)} sources"
            if proc.returncode == 0 and not output.strip():
                print(f"{what}: clean ({seconds:.0f} s)")
                continue
            status = 1
            print(f"{what}: FAILED (exit {proc.returncode}, {seconds:.0f} s)\n"
                  f"  sources: {' '.join(s.name for s in sources)}\n  {' '.join(cmd)}")
            print(output, end="" if output.endswith("\n") else "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
