"""Positive control for `soakgate audit` on a CUDA device (run on the H200 machine).

    PYTHONPATH=src python scripts/gpu_audit_control.py [--device cuda]
        [--backends aot_eager,inductor]

Registers stand-in custom ops with the dangerous schema shapes (a `-> ()` op writing an out
buffer, a gemv writing `output` and returning it while the caller ignores the result, an
in-place residual add), each with a fake impl, under the original (unannotated) schemas and
under the schemas `soakgate audit --fix` produces; compiles callers with fullgraph=True and
prints, per variant, whether the compiled result matches eager and whether the op survived in
the AOT forward graph. Needs only torch (2.11+) and CUDA; always exits 0 and prints a summary.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time


def main() -> int:
    """Run the control and print a table and a one-line verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--backends", default="aot_eager,inductor")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to control")
        return 0
    from soakgate.audit.control import (
        UNANNOTATED,
        control_as_expected,
        fixed_schemas,
        render_control,
        run_control,
    )

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor()
    print(f"torch {torch.__version__} on {device} ({name}), python {sys.version.split()[0]}")
    print("schemas (unannotated -> as fixed by `soakgate audit --fix`):")
    fixed = fixed_schemas()
    for op, text in UNANNOTATED.items():
        print(f"  {text}\n    -> {fixed[op]}")
    summary_ok = True
    for backend in args.backends.split(","):
        start = time.perf_counter()
        results = run_control(device, (backend.strip(),))
        elapsed = time.perf_counter() - start
        print(f"\n[{backend}] {elapsed:.1f} s")
        print(render_control(results), end="")
        wrong = sum(not r.correct for r in results if r.variant == "unannotated")
        right = sum(r.correct for r in results if r.variant == "fixed")
        print(f"unannotated wrong: {wrong}/3   fixed right: {right}/3")
        summary_ok = summary_ok and control_as_expected(results)
    verdict = "AS EXPECTED" if summary_ok else "NOT AS EXPECTED (see rows above)"
    print(
        f"\nSUMMARY: positive control {verdict}: unannotated schemas give wrong results "
        "under torch.compile, fixed schemas give the eager result."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
