"""`soakgate bisect`: eager against torch.compile for an in-process PyTorch model."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from soakgate.cli import exits
from soakgate.cli.args import positive_float, positive_int
from soakgate.cli.metrics import add_progress_argument

DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog."


def register(subparsers: Any) -> None:
    """Add the `bisect` command."""
    parser = subparsers.add_parser(
        "bisect",
        help="where torch.compile departs from eager: first divergent module, first failing "
        "compiler stage, missing custom op",
        description="Run a PyTorch model eager and under torch.compile on the same inputs and "
        "print one finding: the first module whose output diverges (forward hooks), the first "
        "failing compiler stage (PyTorch's CompilerBisector: eager, aot_eager, "
        "aot_eager_decomp_partition, inductor and its passes) and any custom op the compiled "
        "graph lost. Exit 1 when compiled diverges (a finding), 0 when it matches, 2 when the "
        "model cannot be loaded or run.",
    )  # fmt: skip
    parser.add_argument(
        "model", metavar="MODEL",
        help="a Hugging Face model directory, or module:function (or file.py:function) "
        "returning (model, example_inputs)",
    )  # fmt: skip
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the input of a model directory")
    parser.add_argument(
        "--from-db", metavar="DB",
        help="a stored generation (with --request): its prompt, and its tokens teacher-forced "
        "(the first position where compiled's top token leaves eager's is bisected)",
    )  # fmt: skip
    parser.add_argument("--request", metavar="ID", help="the stored generation's request id")
    parser.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import this module (or file.py) first, e.g. a plugin that patches model classes",
    )  # fmt: skip
    parser.add_argument(
        "--layers", type=positive_int, help="keep only the first N layers of a model directory"
    )
    parser.add_argument(
        "--backend", metavar="MODULE:NAME",
        help="compile with this backend (a callable, e.g. one that runs inductor with its own "
        "passes, as vLLM's does) and keep it at the bisector's inductor stage, so its passes are "
        "bisected (default: torch.compile's own)",
    )  # fmt: skip
    parser.add_argument(
        "--repro", metavar="FILE",
        help="when a stage fails, write PyTorch's repro of it there (Dynamo's graph run under "
        "the failing backend with an accuracy check; `python FILE minify` shrinks it)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
        help="the dtype a model directory is loaded in",
    )  # fmt: skip
    parser.add_argument(
        "--rtol", type=positive_float,
        help="relative tolerance (default: the model dtype's: float32 1e-3, bfloat16 1.6e-2, "
        "float16 1e-2)",
    )  # fmt: skip
    parser.add_argument("--atol", type=positive_float, help="absolute tolerance (default: as rtol)")
    parser.add_argument("--verbose", action="store_true", help="show the bisector's steps")
    add_progress_argument(parser, always=True)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Bisect and print the finding line; exit 1 when compiled diverges from eager."""
    from soakgate.errors import BisectError, UsageError

    if importlib.util.find_spec("torch") is None:
        raise BisectError("bisect needs torch: pip install -e '.[torch]'")
    from soakgate.bisect import bisect_model
    from soakgate.bisect.compare import Tolerance
    from soakgate.bisect.model import import_modules, load_backend, load_subject
    from soakgate.bisect.stages import StepLog

    if (args.from_db is None) != (args.request is None):
        raise UsageError("--from-db and --request go together")
    prompt, generated = args.prompt, None
    if args.from_db:
        prompt, generated = _stored(Path(args.from_db), args.request)
    import_modules(args.imports)
    subject = load_subject(args.model, prompt, args.layers, args.dtype, generated)
    log = StepLog(args.verbose, args.progress_every)
    tolerance = None
    if args.rtol is not None or args.atol is not None:
        given = args.rtol if args.rtol is not None else args.atol
        tolerance = Tolerance(args.rtol or given, args.atol or given)
    backend = load_backend(args.backend) if args.backend else "inductor"
    finding = bisect_model(subject, tolerance, log, backend)
    print(finding.line())
    print(finding.tolerance_line())
    if args.repro and finding.stage.backend is not None:
        from soakgate.bisect.repro import write_repro

        if not isinstance(backend, str) and finding.stage.backend == "inductor":
            print("no repro written: the failure is inside the custom backend's compile")
        else:
            try:
                print(write_repro(subject, finding.stage.backend, Path(args.repro), args.imports))
            except OSError as exc:
                raise UsageError(f"cannot write {args.repro}: {exc.strerror}") from None
    return exits.FINDING if finding.diverges else exits.OK


def _stored(db: Path, request_id: str) -> tuple[str, Any]:
    """The prompt text a stored generation was sent with, and the generation (its token ids
    where the soak stored them, else its text)."""
    from soakgate.bisect.model import Generated
    from soakgate.errors import UsageError
    from soakgate.probes.replayable import known_prompts, stored_request
    from soakgate.report.api import existing_store

    with existing_store(db) as store:
        row = store.generation(request_id)
        if row is None:
            raise UsageError(f"no generation with request id {request_id!r} in {db}")
        run = next(r for r in store.runs() if r.run_id == row.run_id)
        request = stored_request(run, row, known_prompts(run, store.prompts(run.run_id)))
    if row.error_class is not None or row.text is None:
        raise UsageError(f"generation {request_id!r} has no answer to check ({row.error_class})")
    ids = tuple(row.token_ids) if row.token_ids else None
    return request.prompt.text, Generated(row.text, ids)
