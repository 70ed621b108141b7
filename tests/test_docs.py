"""Every Python block of the README and docs/ runs, as written, in one namespace per file.

A block may be preceded by ``<!-- setup: CODE -->`` (run first, unseen by the reader: the
inputs a signature synopsis leaves undefined) or by ``<!-- not run: REASON -->``, whose reason
names the test that covers it instead.  Blocks of ``>>>`` lines are doctests: their output must
match (``# doctest: +SKIP`` for output that is not reproducible, such as torch's own tie order).
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_BLOCK = re.compile(r"(?:^<!-- (setup|not run): (.*?) -->\n)?^```python\n(.*?)^```", re.S | re.M)

_RUNNER = r"""
import doctest, json, sys
blocks = json.load(sys.stdin)
ns = {"__name__": "__main__"}
for line, setup, code in blocks:
    if setup:
        exec(compile(setup, f"{sys.argv[1]}:{line} (setup)", "exec"), ns)
    if code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(code, ns, f"{sys.argv[1]}:{line}",
                                                   sys.argv[1], line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test, clear_globs=False)
        assert not runner.failures, f"{sys.argv[1]}:{line}: doctest failed"
    else:
        exec(compile(code, f"{sys.argv[1]}:{line}", "exec"), ns)
print("ran", len(blocks))
"""


def _blocks(path):
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text[:m.start(3)].count("\n")
        out.append((line, m.group(1), m.group(2), m.group(3)))
    return out


def test_every_file_has_its_blocks_found():
    assert sum(len(_blocks(p)) for p in FILES) >= 12


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_skipped_blocks_say_which_test_covers_them(path):
    for line, kind, reason, _ in _blocks(path):
        if kind == "not run":
            named = re.findall(r"tests/[\w/]+\.py", reason)
            assert named and all((ROOT / n).exists() for n in named), (path.name, line, reason)


@pytest.mark.parametrize("path", [p for p in FILES if any(k != "not run" for _, k, _, _ in _blocks(p))],
                         ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path):
    import json
    blocks = [(line, reason if kind == "setup" else "", code)
              for line, kind, reason, code in _blocks(path) if kind != "not run"]
    res = subprocess.run([sys.executable, "-c", _RUNNER, str(path.relative_to(ROOT))],
                         input=json.dumps(blocks), cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0 and f"ran {len(blocks)}" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
