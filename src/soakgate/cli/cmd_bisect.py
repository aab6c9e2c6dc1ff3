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
        "--from-db", metavar="DB", help="take the prompt of a stored generation (with --request)"
    )
    parser.add_argument("--request", metavar="ID", help="the stored generation's request id")
    parser.add_argument(
        "--import", dest="imports", action="append", default=[], metavar="MODULE",
        help="import this module (or file.py) first, e.g. a plugin that patches model classes",
    )  # fmt: skip
    parser.add_argument(
        "--layers", type=positive_int, help="keep only the first N layers of a model directory"
    )
    parser.add_argument("--rtol", type=positive_float, default=1e-3, help="relative tolerance")
    parser.add_argument("--atol", type=positive_float, default=1e-3, help="absolute tolerance")
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
    from soakgate.bisect.model import import_modules, load_subject
    from soakgate.bisect.stages import StepLog

    if (args.from_db is None) != (args.request is None):
        raise UsageError("--from-db and --request go together")
    prompt = _stored_prompt(Path(args.from_db), args.request) if args.from_db else args.prompt
    import_modules(args.imports)
    subject = load_subject(args.model, prompt, args.layers)
    log = StepLog(args.verbose, args.progress_every)
    finding = bisect_model(subject, Tolerance(args.rtol, args.atol), log)
    print(finding.line())
    return exits.FINDING if finding.diverges else exits.OK


def _stored_prompt(db: Path, request_id: str) -> str:
    """The prompt text a stored generation was sent with."""
    from soakgate.errors import UsageError
    from soakgate.probes.replayable import known_prompts, stored_request
    from soakgate.report.api import existing_store

    with existing_store(db) as store:
        row = store.generation(request_id)
        if row is None:
            raise UsageError(f"no generation with request id {request_id!r} in {db}")
        run = next(r for r in store.runs() if r.run_id == row.run_id)
        request = stored_request(run, row, known_prompts(run, store.prompts(run.run_id)))
    return request.prompt.text
