"""Benchmark: audit a generated tree of 1,000 source files, or real kernel trees, and print the
timings.

    python bench/bench_audit.py [--files 1000] [--repeat 3] [--macros]
    python bench/bench_audit.py --real [--cache DIR] [--profile 15]

The generated tree mimics a large kernel repository: a few bindings files, one implementation
file per op with a kernel, headers, Python wrappers, and many unrelated sources the prefilter
skips. With `--macros` every implementation launches its kernel through a function-like macro
defined in a shared header, so every implementation file goes through the C preprocessor.

A generated tree flatters the audit (issue 32: ~2,500 files/s there, 160-175 on whole real
checkouts). `--real` audits every whole source distribution of the audit corpus (the sdists
`fetch_audit_corpus.py` keeps in its cache, every file of each, not only the corpus's
selection), one at a time in the same process, and prints files scanned, ops, CPU seconds
(`time.process_time`) and files per CPU-second for each and in all; `--profile N` adds the N
functions with the most CPU time of their own (cProfile) over all of them: where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from soakgate.audit.scan import audit_paths

KERNEL = """#include <torch/all.h>
namespace lib{n} {{
template <typename T>
__global__ void op{n}_kernel(T* __restrict__ out, const T* __restrict__ x, int n) {{
  for (int i = threadIdx.x; i < n; i += blockDim.x) {{ out[i] = x[i] * T(2); }}
}}
}}
void op{n}(torch::Tensor& out, torch::Tensor const& x) {{
  lib{n}::op{n}_kernel<float><<<1, 256>>>(out.data_ptr<float>(), x.data_ptr<float>(), x.numel());
}}
"""
KERNEL_MACRO = """#include <torch/all.h>
#include "launch.h"
namespace lib{n} {{
template <typename T>
__global__ void op{n}_kernel(T* __restrict__ out, const T* __restrict__ x, int n) {{
  for (int i = threadIdx.x; i < n; i += blockDim.x) {{ out[i] = x[i] * T(2); }}
}}
}}
void op{n}(torch::Tensor& out, torch::Tensor const& x) {{
  BENCH_DISPATCH(x.scalar_type(), [&] {{
    BENCH_LAUNCH(lib{n}::op{n}_kernel, out, x);
  }});
}}
"""
LAUNCH_H = """#pragma once
#define BENCH_LAUNCH(K, OUT, IN) \\
  K<float><<<1, 256>>>(OUT.data_ptr<float>(), IN.data_ptr<float>(), IN.numel())
#define BENCH_DISPATCH(TYPE, ...) \\
  switch (TYPE) {{ case 0: {{ __VA_ARGS__(); break; }} }}
"""
UNRELATED = """#include <vector>
// Utility code with no operator registrations.
static int helper_{n}(const std::vector<int>& v) {{
  int total = 0;
  for (int x : v) {{ total += x * {n}; }}
  return total;
}}
"""
PYTHON = """import torch


def op{n}(out, x):
    torch.ops.benchlib.op{n}(out, x)
"""


def make_tree(root: Path, files: int, macros: bool = False) -> int:
    """Write `files` source files under root; returns the number of ops defined."""
    ops = files // 4
    (root / "csrc").mkdir(parents=True)
    (root / "python").mkdir()
    (root / "third_party").mkdir()
    written = 0
    for chunk in range(0, ops, 50):
        defs = "".join(
            f'  m.def("op{n}(Tensor{"(a!)" if n % 2 else ""} out, Tensor x) -> ()");\n'
            f'  m.impl("op{n}", torch::kCUDA, &op{n});\n'
            for n in range(chunk, min(chunk + 50, ops))
        )
        (root / "csrc" / f"bindings_{chunk}.cpp").write_text(
            f"TORCH_LIBRARY_FRAGMENT(benchlib, m) {{\n{defs}}}\n"
        )
        written += 1
    if macros:
        (root / "csrc" / "launch.h").write_text(LAUNCH_H.format())
        written += 1
    for n in range(ops):
        (root / "csrc" / f"op{n}.cu").write_text((KERNEL_MACRO if macros else KERNEL).format(n=n))
        (root / "python" / f"op{n}.py").write_text(PYTHON.format(n=n))
        written += 2
    n = 0
    while written < files:
        suffix = (".cpp", ".h", ".py")[n % 3]
        text = UNRELATED.format(n=n) if suffix != ".py" else f"VALUE_{n} = {n}\n"
        (root / "third_party" / f"util{n}{suffix}").write_text(text)
        written += 1
        n += 1
    return ops


def _real(cache: Path | None, profile: int) -> None:
    """Audit every whole sdist of the corpus cache; print the figures per tree and in all."""
    import cProfile
    import pstats

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fetch_audit_corpus import default_cache

    archives = sorted(((cache or default_cache()) / "sdists").glob("*.tar.gz"))
    if not archives:
        print(
            f"no sdists in {(cache or default_cache()) / 'sdists'}: run bench/fetch_audit_corpus.py"
        )
        raise SystemExit(2)
    profiler = cProfile.Profile() if profile else None
    total_files = total_cpu = 0.0
    print(f"{'tree':40} {'files':>6} {'parsed':>6} {'ops':>5} {'CPU s':>7} {'files/CPU-s':>11}")
    for archive in archives:
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            start = time.process_time()
            if profiler is not None:
                profiler.enable()
            result = audit_paths([tmp])
            if profiler is not None:
                profiler.disable()
            cpu = time.process_time() - start
        name = archive.name.removesuffix(".tar.gz")
        rate = result.files_scanned / cpu if cpu > 0 else float("inf")
        print(f"{name:40} {result.files_scanned:>6} {result.files_parsed:>6} "
              f"{len(result.ops):>5} {cpu:>7.2f} {rate:>11.0f}")  # fmt: skip
        total_files += result.files_scanned
        total_cpu += cpu
    print(f"{'all':40} {int(total_files):>6} {'':>6} {'':>5} {total_cpu:>7.2f} "
          f"{total_files / total_cpu:>11.0f}")  # fmt: skip
    if profiler is not None:
        print(f"\nwhere the time goes: the {profile} functions with the most CPU time of their own")
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(profile)


def main() -> None:
    """Generate the tree once (or take the real ones), audit, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--macros", action="store_true", help="launch every kernel via a macro")
    parser.add_argument("--real", action="store_true", help="audit the corpus's whole sdists")
    parser.add_argument("--cache", type=Path, default=None, help="the corpus cache (--real)")
    parser.add_argument("--profile", type=int, default=0, help="with --real: top N functions")
    args = parser.parse_args()
    if args.real:
        _real(args.cache, args.profile)
        return
    with tempfile.TemporaryDirectory() as tmp:
        ops = make_tree(Path(tmp), args.files, args.macros)
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = audit_paths([tmp])
            timings.append(time.perf_counter() - start)
        findings = len(result.findings)
        print(
            f"files scanned: {result.files_scanned}  parsed: {result.files_parsed}"
            f"  ops: {len(result.ops)}"
            f" (expected {ops})  findings: {findings}"
        )
        print(
            f"audit time (s): min {min(timings):.2f}  median {statistics.median(timings):.2f}"
            f"  max {max(timings):.2f}  over {args.repeat} runs; target < 5 s"
        )


if __name__ == "__main__":
    main()
