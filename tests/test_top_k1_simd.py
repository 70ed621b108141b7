"""top_k1's C++ CPU kernel on each SIMD path it selects at run time (portable, AVX2, AVX-512:
csrc/top_k1.cpp), each in its own process with TORCH_DML_OPS_CPU_ISA capping the level, against
the loop oracle (reference.top_k1_ref): every dtype, both directions, rows around the block,
word and lane sizes, k around the min/max network, the sorted/buffered switch and the group
bound, rows that take the two-pass bound (more than one block, at most kTwoPassMax; from
kWordPassMin elements with the word pass, whose last word may be short), NaN in a later block
(the native pass hands such a block to the key pass; a two-pass row goes back to one pass),
+-0.0, +-inf, ties, denormals with flush-to-zero on, rows that defeat the two-pass bound's
sample (its fallback to every group maximum), and many rows on one thread for the guessed pass
(rows alike, jumping, alternating, equal, ties, NaN/inf late; the tie pass)."""
import os
import subprocess
import sys

import pytest
import torch

from torch_dml_ops._library import extension_loaded

pytestmark = pytest.mark.skipif(not extension_loaded(), reason="the C++ extension is not built")

ORDER = ["scalar", "avx2", "avx512"]
HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = r"""
import random, sys
import numpy as np
import torch
import torch_dml_ops as tdo
from reference import to_bits, top_k1_ref

want = sys.argv[1]
have = torch.ops.torch_dml_ops._cpu_isa()
assert have == want, (have, want)
rng = random.Random(1234)
torch.manual_seed(1234)
DTYPES = [torch.float32, torch.int32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
          torch.int16, torch.int8, torch.uint8, torch.bool, torch.uint16, torch.uint32,
          torch.uint64]
SPECIAL = [float("nan"), -float("nan"), 0.0, -0.0, float("inf"), -float("inf")]

def data(n, rows, dtype, kind):
    if dtype == torch.bool:
        return torch.rand(rows, n) < 0.5
    if dtype.is_floating_point:
        x = torch.randn(rows, n, dtype=torch.float64)
        if kind == "ties":
            x = (x * 1.5).round()
        if kind == "denormal":
            x = x * 1e-42 if dtype == torch.float32 else x
        x = x.to(dtype)
        if kind in ("special", "late_nan"):
            f = x.view(-1)
            lo = f.numel() // 2 if kind == "late_nan" else 0
            for _ in range(max(1, f.numel() // 40)):
                f[rng.randrange(lo, f.numel())] = rng.choice(SPECIAL)
        return x
    hi = {torch.int8: 127, torch.uint8: 255, torch.int16: 30000, torch.uint16: 60000}.get(dtype, 2**31 - 1)
    span = 3 if kind == "ties" else hi
    lo = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -span
    return torch.randint(lo, span, (rows, n), dtype=torch.int64).to(dtype)

cases = 0
def check(x, k, direction, where, flush=False):
    global cases
    torch.set_flush_denormal(flush)
    v, i = tdo.top_k1(x, k, -1, direction)
    torch.set_flush_denormal(False)
    wb, wi = top_k1_ref(x, k, 1, direction == "decreasing")
    np.testing.assert_array_equal(i.numpy(), wi, err_msg=str((want,) + where))
    np.testing.assert_array_equal(to_bits(v), wb, err_msg=str((want,) + where))
    cases += 1

for n, rows in [(1, 3), (15, 4), (16, 4), (17, 4), (63, 2), (64, 2), (65, 2), (255, 2), (256, 2),
                (257, 2), (1024, 3), (2047, 1), (2048, 1), (2049, 1), (4097, 2), (5000, 1),
                (9000, 1), (65536, 1), (70000, 1)]:
    for dtype in DTYPES:
        for kind in ("random", "ties", "special", "late_nan", "denormal"):
            if kind in ("special", "late_nan", "denormal") and not dtype.is_floating_point:
                continue
            if n >= 2047 and dtype not in (torch.float32, torch.int32, torch.float64, torch.uint8):
                continue
            if n >= 5000 and kind == "denormal":
                continue
            ks = sorted({1, min(n, 2), min(n, 8), min(n, 9), min(n, 15), min(n, 16), min(n, 17),
                         min(n, 40), min(n, 48), min(n, 49), n})
            if n > 2049:  # 48 and 49: a two-pass span of 3 blocks has 48 group maxima
                ks = [k for k in ks if k in (1, 8, 16, 17, 40, 48, 49)]
            x = data(n, rows, dtype, kind)
            for k in ks:
                for direction in ("decreasing", "increasing"):
                    for flush in ((False, True) if kind == "denormal" else (False,)):
                        check(x, k, direction, (n, rows, str(dtype), kind, k, direction, flush),
                              flush)

# The two-pass bound's sampled selection (kth_largest: every 8th group maximum, lanes 0 and 8 of
# each word or block): rows whose sampled lanes are shifted up (the sample's bound then sits
# above all but a few groups: the fallback to every group) or down (it lets most groups through).
for n, ks in [(1024, (32, 64)), (20000, (50, 100))]:
    for dtype in (torch.float32, torch.int32):
        for shift in (10, -10):
            x = torch.randn(3, n, dtype=torch.float64) * 2
            lanes = torch.arange(n) % 16
            x[:, (lanes == 0) | (lanes == 8)] += shift
            x = x.to(dtype) if dtype.is_floating_point else (x * 100).round().to(dtype)
            for k in ks:
                for direction in ("decreasing", "increasing"):
                    check(x, k, direction, ("sampled bound", n, str(dtype), shift, k, direction))
# The guessed pass (guessed_rows): many rows of one call on one thread, each row's threshold
# guessed from the row before.  Rows that stay alike (the guess holds), whose scale jumps up
# (the guess is too high: fewer than k reach it) or down (too low: more candidates than it
# takes), all-equal rows (every element reaches the guess), rows of ties, NaN/inf rows after
# the guess is made, +-0.0 as the best, the values 0..15 (more ties at the best than the pass
# collects; NaN past them), the tie pass (ties across the k-th value with fewer than k above,
# the values 0..99, ties and random rows by turns, a best value repeated over many words, ties
# at +-0.0 next to denormals with and without flush-to-zero), tails (rows not a multiple of
# 64), both directions, k up to the network's 16 (and 17: not taken), even and odd numbers of
# rows (the rows run in pairs); then rows that keep defeating the guess (the part stops
# guessing).
torch.set_num_threads(1)
def guessed_rows(n, rows, dtype, kind):
    x = torch.randn(rows, n, dtype=torch.float64)
    if kind == "jumps":
        x = x * torch.tensor([10.0 ** rng.randint(-3, 3) for _ in range(rows)])[:, None]
        x = x + torch.tensor([rng.choice([0.0, 0.0, 50.0, -50.0]) for _ in range(rows)])[:, None]
    if kind == "alternate":
        x = x + torch.tensor([(-1) ** r * 100.0 for r in range(rows)])[:, None]
    if kind == "equal":
        x[rows // 3 : rows // 2] = 1.0
        x[rows // 2 : rows // 2 + 2] = -2.0
    if kind == "ties":
        x = (x * 2).round()
    if kind in ("values", "values_nan"):  # 0..15: about n/16 ties at the best, often > the cap
        x = torch.randint(0, 16, (rows, n)).double()
        x[1:rows:5, : n // 2] = 15.0       # far more than the cap, all equal
    if kind == "above_ties":  # 0..15, and fewer than k above them: the tie pass takes both
        x = torch.randint(0, 16, (rows, n)).double()
        for r in range(rows):
            for _ in range(rng.randint(0, 7)):
                x[r, rng.randrange(n)] = rng.choice([16.0, 17.0, 18.0, 40.0])
    if kind == "hundred":  # 0..99: about n/100 of each value, the k best sometimes all equal
        # to the best, sometimes not: the tie pass with at least k above its threshold (no equal
        # ones needed), and with fewer (its equal ones, collected only while they may be needed)
        x = torch.randint(0, 100, (rows, n)).double()
    if kind == "mixed":  # ties and random rows by turns: the tie pass switched on and off
        x[0::2] = torch.randint(0, 16, ((rows + 1) // 2, n)).double()
        x[3::4] *= 100.0
    if kind == "sparse_ties":  # the best value a few times, spread: equal ones over many words
        for r in range(rows):
            for _ in range(rng.randint(2, 24)):
                x[r, rng.randrange(n)] = 9.0 if r % 3 else -9.0
    if dtype == torch.int32:
        return (x * 1000).round().clamp(-2**31, 2**31 - 1).to(torch.int32)
    if kind == "zero_ties":  # mostly +-0.0, a few (sub)normals of each sign: ties at 0, where
        # compares are exact only while denormals are not read as zero (checked both ways)
        x = torch.zeros(rows, n, dtype=torch.float64)
        x.view(-1)[torch.randperm(rows * n)[: rows * n // 2]] = -0.0
        x = x.to(dtype)
        for r in range(rows):
            for _ in range(rng.randint(0, 12)):
                x[r, rng.randrange(n)] = rng.choice([1e-45, -1e-45, 3e-40, -3e-40, 1e-30, -2.0])
        return x
    x = x.to(dtype)
    if kind in ("zeros", "zeros_up"):  # the best are +0.0 and -0.0, equal (the lower index wins)
        x = x.abs() if kind == "zeros_up" else -x.abs()
        for r in range(rows):
            for _ in range(rng.randint(4, 24)):
                x[r, rng.randrange(n)] = rng.choice([0.0, -0.0])
    if kind == "special":
        for r in range(rows // 2, rows, 3):
            for _ in range(rng.randint(1, 12)):
                x[r, rng.randrange(n)] = rng.choice(SPECIAL)
        x[rows - 2] = float("nan")
        x[rows - 1, : n // 2] = -float("inf")
    if kind == "values_nan":  # a NaN (the greatest, decreasing) past the ties the pass collects
        x[2::4, n - 3] = float("nan")
        x[3::8, 5] = float("nan")
    return x

torch.manual_seed(99)
for n in (256, 300, 1024, 1041):
    for dtype in (torch.float32, torch.int32):
        for kind in ("alike", "jumps", "alternate", "equal", "ties", "special", "zeros",
                     "zeros_up", "values", "values_nan", "above_ties", "hundred", "mixed",
                     "sparse_ties", "zero_ties"):
            if kind in ("special", "zeros", "zeros_up", "values_nan", "zero_ties") and \
                    dtype == torch.int32:
                continue
            # an odd number of rows for two of the lengths: the guessed rows run in pairs
            # (their nets at once), and the last may be left alone
            x = guessed_rows(n, 48 if n % 2 == 0 else 47, dtype, kind)
            for k in (2, 8, 9, 16, 17):
                for direction in ("decreasing", "increasing"):
                    for flush in ((False, True) if kind == "zero_ties" else (False,)):
                        check(x, k, direction, ("guessed", n, str(dtype), kind, k, direction,
                                                flush), flush)
print("cases", cases)
"""


def _hardware_best() -> str:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DML_OPS_CPU_ISA"}
    out = subprocess.run([sys.executable, "-c", "import torch, torch_dml_ops; "
                          "print(torch.ops.torch_dml_ops._cpu_isa())"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def hardware_best():
    return _hardware_best()


@pytest.mark.parametrize("isa", ORDER)
def test_top_k1_each_simd_path_matches_the_oracle(isa, hardware_best):
    if ORDER.index(isa) > ORDER.index(hardware_best):
        pytest.skip(f"this CPU runs {hardware_best} at best")
    env = dict(os.environ, TORCH_DML_OPS_CPU_ISA=isa, PYTHONPATH=os.pathsep.join(
        [HERE, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", SCRIPT, isa], env=env, capture_output=True,
                         text=True, cwd=HERE, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "cases" in res.stdout


def test_unknown_cpu_isa_value_is_ignored(hardware_best):
    env = dict(os.environ, TORCH_DML_OPS_CPU_ISA="sse9")
    out = subprocess.run([sys.executable, "-c", "import torch, torch_dml_ops; "
                          "print(torch.ops.torch_dml_ops._cpu_isa())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == hardware_best


def test_the_level_in_use_is_reported():
    assert torch.ops.torch_dml_ops._cpu_isa() in ORDER
