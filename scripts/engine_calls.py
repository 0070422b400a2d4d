#!/usr/bin/env python3
"""engine_calls.py - what opening the engine visits (issue 39's note, item 1).

Reads the C sources of the library folders (cmake/floors.txt), finds every function definition
and the names each body calls (text: comments and strings removed, a name followed by "(";
statics resolve within their file first; calls through function pointers are not followed),
then walks the calls from a root (fg_engine_open) and prints:
  files      the files whose functions it reaches (static inline functions in headers count
             as their header's),
  climbs     the call edges (caller function -> callee function, counted once each) whose callee
             lives on a floor above the caller's: by cmake/floors.txt between folders, and
             inside engine/ by the files' order (ENGINE_ORDER below, engine.c's top comment),
  circles    groups of files that call each other in a circle (strongly connected components
             of the reached file graph with more than one file), order-independent.
Three walks: from fg_engine_open (what opening the engine visits), from every function
engine/'s files export (the whole engine), and the calls among engine/'s own files (the
circle issue 39 names: engine.c, engine_dev.c, stage.c, schedule.c, prefix_kv.c).
Usage: scripts/engine_calls.py [SOURCE_DIR] [--rev COMMIT] [--root FUNCTION] [-v]
  --rev reads the commit's files (git show) instead of the work tree, with the floors of the
  work tree's cmake/floors.txt (so an older commit is judged by today's floors: issue 39's
  before is --rev 7bc1445). -v lists the files and every climbing edge. Needs only Python 3.
"""
import os
import re
import subprocess
import sys

# engine/'s files top to bottom (each calls only files below it); files not listed sit below
ENGINE_ORDER = ["schedule.c", "prefix_kv.c", "engine.c", "engine_int.h", "engine_dev.c", "stage.c",
                "trace.c", "plan_model.c", "plan.c"]

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "do", "else",
            "case", "_Alignof", "alignof", "_Static_assert", "__attribute__", "typeof",
            "__typeof__", "offsetof", "va_arg"}


def floors(src):
    rank = {}
    with open(os.path.join(src, "cmake", "floors.txt")) as f:
        n = 0
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            for d in line.split():
                rank[d] = n
            n += 1
    return rank


def strip(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    return re.sub(r"^[ \t]*#[^\n]*(\\\n[^\n]*)*", "", text, flags=re.M)


def functions(raw):
    """[(name, is_static, body)] of the top-level function definitions in the C text raw."""
    text = strip(raw)
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "{":
            if depth == 0:
                head = text[start:i]
                m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
                body_start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if m and not re.search(r"=\s*$", head):
                    decl = head[max(head.rfind(";"), head.rfind("}")) + 1:]
                    out.append((m.group(1), bool(re.search(r"\bstatic\b", decl)),
                                text[body_start:i]))
                start = i + 1
        elif c == ";" and depth == 0:
            start = i + 1
        i += 1
    return out


def sources(src, rev, rank):
    """{folder/file: text} of the library folders' .c and .h: the tree at src, or commit rev."""
    out = {}
    if rev:
        names = subprocess.run(["git", "-C", src, "ls-tree", "-r", "--name-only", rev],
                               check=True, capture_output=True, text=True).stdout.split()
        for rel in names:
            d, _, fn = rel.partition("/")
            if d in rank and "/" not in fn and fn.endswith((".c", ".h")):
                out[rel] = subprocess.run(["git", "-C", src, "show", rev + ":" + rel],
                                          check=True, capture_output=True,
                                          text=True, errors="replace").stdout
        return out
    for d in rank:
        p = os.path.join(src, d)
        for fn in sorted(os.listdir(p)) if os.path.isdir(p) else []:
            if fn.endswith((".c", ".h")):
                with open(os.path.join(p, fn), errors="replace") as f:
                    out[d + "/" + fn] = f.read()
    return out


def graph(src, rev, rank):
    defs, glob = {}, {}
    for rel, text in sorted(sources(src, rev, rank).items()):
        for name, static, body in functions(text):
            defs[(rel, name)] = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", body)) - KEYWORDS
            if not static or rel.endswith(".h"):
                glob.setdefault(name, rel)
    return defs, glob


def resolve(defs, glob, rel, name):
    if (rel, name) in defs:
        return (rel, name)
    if name in glob:
        return (glob[name], name)
    # a static inline function of a header the file includes
    return None


def level(rank, rel):
    d, fn = rel.split("/", 1)
    sub = ENGINE_ORDER.index(fn) if d == "engine" and fn in ENGINE_ORDER else len(ENGINE_ORDER)
    return (rank[d], sub if d == "engine" else 0)


def sccs(nodes, edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def walk(defs, glob, rank, roots):
    """Functions reached from roots, the climbing edges met, the file graph."""
    seen, todo, climbs, fedges = set(roots), list(roots), set(), {}
    while todo:
        f = todo.pop()
        for c in sorted(defs[f]):
            g = resolve(defs, glob, f[0], c)
            if not g:
                continue
            if g[0] != f[0]:
                fedges.setdefault(f[0], set()).add(g[0])
                if level(rank, g[0]) < level(rank, f[0]):
                    climbs.add((f, g))
            if g not in seen:
                seen.add(g)
                todo.append(g)
    return seen, climbs, fedges


def report(label, seen, climbs, fedges, verbose):
    files = sorted({f for f, _ in seen})
    circles = [c for c in sccs(files, fedges) if len(c) > 1]
    print("%s: %d functions, %d files, %d climbs, %d circles %s" %
          (label, len(seen), len(files), len(climbs), len(circles),
           " ".join("{" + ", ".join(c) + "}" for c in circles)))
    if verbose:
        for f in files:
            print("  file", f)
        for (f, g) in sorted(climbs):
            print("  climb %s:%s -> %s:%s" % (f[0], f[1], g[0], g[1]))


def main():
    argv = sys.argv[1:]
    verbose = "-v" in argv
    root = rev = None
    if "--rev" in argv:
        rev = argv[argv.index("--rev") + 1]
        argv.remove("--rev")
        argv.remove(rev)
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
        argv.remove("--root")
        argv.remove(root)
    args = [a for a in argv if not a.startswith("-")]
    src = args[0] if args else "."
    rank = floors(src)
    defs, glob = graph(src, rev, rank)
    if root:
        start = resolve(defs, glob, "", root)
        if not start:
            sys.exit("engine_calls: no function " + root)
        report("root " + root, *walk(defs, glob, rank, [start]), verbose)
        return
    # opening the engine; then the whole engine: every function engine/'s files export
    report("open (fg_engine_open)", *walk(defs, glob, rank, [("engine/engine.c", "fg_engine_open")]),
           verbose)
    api = [k for k in defs if k[0].startswith("engine/") and k[0].endswith(".c") and
           glob.get(k[1]) == k[0]]
    report("engine (%d functions engine/ exports)" % len(api), *walk(defs, glob, rank, api),
           verbose)
    # the engine's own files: the calls between them, from every function they define
    own = [k for k in defs if k[0].startswith("engine/")]
    seen, climbs, fedges = walk(defs, glob, rank, own)
    inner = {k: {g for g in v if g.startswith("engine/")} for k, v in fedges.items()
             if k.startswith("engine/")}
    report("engine/ files among themselves", {k for k in seen if k[0].startswith("engine/")},
           {(f, g) for f, g in climbs if f[0].startswith("engine/") and g[0].startswith("engine/")},
           inner, verbose)


main()
