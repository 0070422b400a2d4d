#!/usr/bin/env python3
"""house_metrics.py - the house's size figures at a git revision (issue 39's note): files and
lines per top-level folder, the 10 largest files, C function lengths (p90 and max) per folder.

    scripts/house_metrics.py [REV]    (default HEAD; reads the commit, not the work tree)

Counted: source files (.c .h .cu .cuh .cc .py .sh .cmake, CMakeLists.txt) outside tests/fixtures
and data/; Markdown counted apart. A function is a line "{" at column 0 after its signature, up
to the next "}" at column 0 (the repository's style, STYLE.md); its length is the lines from
the signature's first line to the closing brace.
"""
import subprocess
import sys
from collections import defaultdict

SRC = ('.c', '.h', '.cu', '.cuh', '.cc', '.py', '.sh', '.cmake')


def git(*a):
    return subprocess.run(('git',) + a, check=True, capture_output=True).stdout


def files(rev):
    out = git('ls-tree', '-r', '--name-only', rev).decode().split('\n')
    keep = []
    for p in out:
        if not p or p.startswith(('tests/fixtures/', 'data/', 'fuzz/corpus')):
            continue
        if p.endswith(SRC) or p.endswith('CMakeLists.txt') or p.endswith('.md'):
            keep.append(p)
    return keep


def functions(lines):
    """Lengths of the C functions in lines (see the top comment)."""
    out, i = [], 0
    while i < len(lines):
        if lines[i] == '{' and i > 0 and lines[i - 1].rstrip().endswith(')'):
            s = i - 1
            while s > 0 and lines[s - 1].strip() and not lines[s - 1].startswith(('}', '#', '/*', ' *', '//')) \
                    and not lines[s - 1].rstrip().endswith((';', '*/')):
                s -= 1
            e = i + 1
            while e < len(lines) and lines[e] != '}':
                e += 1
            out.append(e - s + 1)
            i = e
        i += 1
    return out


def pct(v, q):
    if not v:
        return 0
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else 'HEAD'
    per = defaultdict(lambda: [0, 0, []])
    sizes, md = [], [0, 0]
    for p in files(rev):
        text = git('show', f'{rev}:{p}').decode('utf-8', 'replace').split('\n')
        n = len(text) - (1 if text and text[-1] == '' else 0)
        if p.endswith('.md'):
            md[0] += 1
            md[1] += n
            continue
        top = p.split('/')[0] + '/' if '/' in p else '.'
        per[top][0] += 1
        per[top][1] += n
        if p.endswith(('.c', '.h', '.cu', '.cuh', '.cc')):
            per[top][2] += functions(text)
        sizes.append((n, p))
    print(f'revision {git("rev-parse", "--short", rev).decode().strip()}')
    print(f'{"folder":<10} {"files":>5} {"lines":>7} {"funcs":>5} {"p90":>4} {"max":>4}')
    allf = []
    for top in sorted(per):
        f, n, fl = per[top]
        allf += fl
        print(f'{top:<10} {f:>5} {n:>7} {len(fl):>5} {pct(fl, .9):>4} {max(fl) if fl else 0:>4}')
    tot = sum(v[1] for v in per.values())
    print(f'{"all":<10} {sum(v[0] for v in per.values()):>5} {tot:>7} {len(allf):>5} '
          f'{pct(allf, .9):>4} {max(allf):>4}')
    print(f'markdown: {md[0]} files, {md[1]} lines')
    print('largest files:')
    for n, p in sorted(sizes, reverse=True)[:10]:
        print(f'  {n:>5} {p}')


if __name__ == '__main__':
    main()
