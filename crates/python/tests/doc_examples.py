#!/usr/bin/env python3
"""Runs the examples of a Markdown page word for word, in order, from the repository root.

    python crates/python/tests/doc_examples.py docs/python.md

Fenced blocks, as written on the page (a block with a word after its language, such as ```sh install,
is not an example and is skipped: installing is done by whoever runs this, scripts/test installs the
wheel):

- ```sh blocks: one bash session (``set -e``) gets them all in order, so that an ``export`` in one holds in
  the next; each python block runs after the sh blocks above it have finished;
- ```python blocks: each is run by this interpreter as a script, in a fresh process;
- a ```text block right after a python block (with only a line such as "It prints:" between) is what that
  block must print, compared line for line.

Exits non-zero, naming the block and its line on the page, at the first block that fails or prints
something else.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)


def blocks(text):
    """(info string, code, line number, text between the previous block's end and this block)."""
    out, last = [], 0
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append((m.group(1).strip(), m.group(2), line, text[last : m.start()]))
        last = m.end()
    return out


def main() -> int:
    page = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "python.md")
    text = page.read_text()
    found = blocks(text)
    bash = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=ROOT, text=True)
    ran = 0

    def run_sh(code, line):
        # The block's output is passed on until the marker echoed after it: blocks run in page order.
        marker = f"--- end of the block at line {line} ---"
        bash.stdin.write("set -e\n" + code + f"\necho '{marker}'\n")
        bash.stdin.flush()
        for out in bash.stdout:
            if out.rstrip("\n") == marker:
                return
            sys.stdout.write(out)
        raise SystemExit(f"{page}:{line}: sh block failed (exit {bash.wait()})")

    try:
        for i, (info, code, line, before) in enumerate(found):
            words = info.split()
            lang = words[0] if words else ""
            if len(words) > 1:
                print(f"{page}:{line}: ```{info} block skipped", flush=True)
                continue
            if lang == "sh":
                print(f"{page}:{line}: sh", flush=True)
                run_sh(code, line)
                ran += 1
            elif lang == "python":
                print(f"{page}:{line}: python", flush=True)
                r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                   timeout=600)
                if r.returncode:
                    sys.stderr.write(r.stdout + r.stderr)
                    raise SystemExit(f"{page}:{line}: python block failed")
                ran += 1
                nxt = found[i + 1] if i + 1 < len(found) else None
                if nxt and nxt[0] == "text" and len(nxt[3].strip().splitlines()) <= 1:
                    want = nxt[1].rstrip("\n").splitlines()
                    got = r.stdout.rstrip("\n").splitlines()
                    if got != want:
                        raise SystemExit(f"{page}:{line}: printed\n" + "\n".join(got) + "\nnot, as the page says,\n"
                                         + "\n".join(want))
                    print(f"{page}:{nxt[2]}: output as on the page", flush=True)
    finally:
        bash.stdin.close()
        bash.wait(timeout=600)
    print(f"{page}: {ran} examples ran word for word")
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
