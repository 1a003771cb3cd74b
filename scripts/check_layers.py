#!/usr/bin/env python3
"""Checks tdist's layer rules from the sources' #include lines and environment reads.

Each folder of src/ is a layer and may include only the folders below it
(docs/architecture.md, "Layers"); every layer may include the public headers (tdist/...).
The rules that matter most:
  - collectives include nothing above transport (algorithms never see a backend);
  - no backend includes another backend (backends/builtin.* lists them all; cuda_ipc is a
    comm group with a CUDA device, so it builds on backends/comm);
  - the launcher and tools include only public headers, diag/, net/ (sockets) and cli/
    (tools/cli: what the command-line programs share around CLI11);
  - the environment is read only through the settings registry: no getenv() outside
    src/core/settings.cc, and no header reads a setting (settings are resolved where a
    process, group or server is made and passed down, never in a default member
    initialiser).
Run by ctest (layer_rules) and by hand: python3 scripts/check_layers.py [ROOT].
Prints each violation as FILE:LINE: what, and exits 1 when there is any.
"""
import pathlib
import re
import sys

# Folder (longest prefix wins) -> the src/ folders it may include, besides itself and tdist/.
BASE = ["core"]
ALLOWED = {
    "src/core": [],
    "src/net": BASE,
    "src/transport": BASE + ["net"],
    "src/store": BASE + ["net"],
    "src/rendezvous": BASE + ["net", "store"],
    "src/collectives": BASE + ["transport"],
    "src/diag": BASE,
    "src/cuda": BASE,
    "src/pg": BASE + ["diag", "rendezvous", "backends/builtin.h"],
    "src/backends/builtin": BASE + ["rendezvous", "backends"],
    "src/backends/comm": BASE + ["transport", "collectives", "diag", "pg"],
    "src/backends/mpi": BASE + ["net", "transport", "collectives", "diag", "pg", "rendezvous"],
    "src/backends/nccl": BASE + ["diag", "pg", "cuda"],
    "src/backends/cuda_ipc": BASE + ["transport", "collectives", "diag", "pg", "cuda",
                                     "backends/comm"],
    "src/torch": BASE + ["diag"],
    "src/python": BASE + ["diag"],
    "tools": ["diag", "net", "cli"],
}
# Folders whose own subfolders are separate layers (a file may not include a sibling's).
OWN_IS_SUBFOLDER = {"src/backends"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
GETENV = re.compile(r"\b(secure_)?getenv\s*\(")
SETTINGS_SOURCE = "src/core/settings.cc"
SETTING_READ = re.compile(r"\b(setting_(string|int|double|bool|seconds|is_set|is_present)|"
                          r"env_string)\s*\(")
SETTINGS_HEADER = "include/tdist/settings.h"


def layer_of(rel):
    """The ALLOWED key that governs `rel` (a path relative to the root), or None."""
    best = None
    for key in ALLOWED:
        if rel == key or rel.startswith(key + "/") or rel.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    return best


def own_prefixes(rel, layer):
    """The include prefixes that are the file's own layer."""
    if layer == "tools":
        return [rel.split("/")[1] + "/"] if rel.count("/") >= 2 else []
    return [layer[len("src/"):] + "/", layer[len("src/"):] + "."]


def allowed(include, rel, layer):
    if include.startswith("tdist/"):
        return True
    for prefix in own_prefixes(rel, layer):
        if include.startswith(prefix):
            return True
    for folder in ALLOWED[layer]:
        if include == folder or include.startswith(folder + "/"):
            return True
    return False


def check(root):
    problems = []
    paths = [*root.glob("src/**/*"), *root.glob("tools/**/*"), *root.glob("include/**/*.h")]
    for path in sorted(paths):
        if path.suffix not in (".h", ".cc", ".cu") or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        layer = layer_of(rel)
        if layer is None and rel.startswith("src/backends/"):
            problems.append(f"{rel}: a file of src/backends outside the folders the rules know")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if GETENV.search(line) and rel != SETTINGS_SOURCE and not line.lstrip().startswith("//"):
                problems.append(f"{rel}:{number}: reads the environment with getenv(); use "
                                f"the settings registry (tdist/settings.h)")
            if (path.suffix == ".h" and rel != SETTINGS_HEADER and SETTING_READ.search(line)
                    and not line.lstrip().startswith("//")):
                problems.append(f"{rel}:{number}: a header reads a setting; resolve it where "
                                f"the object is made (a .cc) and pass it down")
            m = INCLUDE.match(line)
            if m is None or layer is None:
                continue
            include = m.group(1)
            if "/" not in include:  # a header next to the file (the tools' own)
                continue
            if not allowed(include, rel, layer):
                problems.append(f"{rel}:{number}: includes \"{include}\", which {layer} may not "
                                f"(it may include: tdist/, its own folder, "
                                f"{', '.join(ALLOWED[layer]) or 'nothing else'})")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    problems = check(root.resolve())
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} violation(s) of the layer rules "
              f"(docs/architecture.md, \"Layers\")")
        return 1
    print("check_layers: every include and environment read follows the layer rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
