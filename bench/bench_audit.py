"""Benchmark: audit a generated tree of 1,000 source files and print the timings.

    python bench/bench_audit.py [--files 1000] [--repeat 3] [--macros]

The tree mimics a large kernel repository: a few bindings files, one implementation file per
op with a kernel, headers, Python wrappers, and many unrelated sources the prefilter skips.
With `--macros` every implementation launches its kernel through a function-like macro
defined in a shared header, so every implementation file goes through the C preprocessor.
"""

from __future__ import annotations

import argparse
import statistics
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


def main() -> None:
    """Generate the tree once, audit it a few times, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--macros", action="store_true", help="launch every kernel via a macro")
    args = parser.parse_args()
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
