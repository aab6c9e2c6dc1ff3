"""The model under bisection and its inputs: a Hugging Face directory, or `module:function`.

A directory is loaded with `transformers` from that path only (no hub access), in float32 on
CPU unless told otherwise, and its inputs are the tokenized prompt; `module:function` (a module
name or a `.py` file) returns `(model, example_inputs)` itself. Modules named by `--import` are
imported first, so a plugin can patch model classes before they are built (the dropped-op
control patches transformers' LlamaModel that way).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.errors import BisectError


@dataclass(slots=True)
class Subject:
    """A model in eval mode and the inputs it is run on, eager and compiled alike."""

    model: Any
    """A torch.nn.Module."""
    args: tuple[Any, ...]
    """Positional inputs."""
    kwargs: dict[str, Any]
    """Keyword inputs (`input_ids`, `use_cache=False` for a Hugging Face model)."""
    name: str
    """What was loaded, for the finding."""
    prompt_tokens: int | None = None
    """With a stored generation appended to `input_ids` (teacher forcing): the prompt's length."""
    decode: Callable[[int], str] | None = None
    """A token id's text (a model directory's tokenizer)."""

    def __call__(self, model: Any = None) -> Any:
        """Run `model` (default: the eager one) on the inputs, without gradients."""
        import torch

        with torch.no_grad():
            return (self.model if model is None else model)(*self.args, **self.kwargs)


def import_modules(names: Sequence[str]) -> None:
    """Import each module (or `.py` file) named by `--import`, in order."""
    for name in names:
        _import(name)


def load_subject(
    spec: str, prompt: str, layers: int | None = None, dtype: str = "float32",
    generated: Generated | None = None,
) -> Subject:  # fmt: skip
    """The model and inputs named by `spec`: a Hugging Face directory or `module:function`;
    `generated` (a stored generation, for a directory) is appended to the prompt's tokens."""
    path = Path(spec)
    if path.is_dir():
        return _huggingface(path, prompt, layers, dtype, generated)
    if generated is not None:
        raise BisectError("a stored generation's tokens need a model directory, not "
                          "module:function")  # fmt: skip
    module_name, sep, function = spec.rpartition(":")
    if not sep or not module_name or not function:
        raise BisectError(
            f"{spec!r} is neither a model directory nor module:function (a function that "
            "returns a model and example inputs)"
        )
    made = getattr(_import(module_name), function, None)
    if not callable(made):
        raise BisectError(f"{module_name} has no function {function!r}")
    return _subject_of(made(), spec)


def load_backend(spec: str) -> Any:
    """A compiler backend named `module:name` (or `file.py:name`): a callable torch.compile takes
    as its `backend`, e.g. one that hands the graph to inductor with passes of its own."""
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        raise BisectError(f"--backend {spec!r} must be module:name (or file.py:name)")
    found = getattr(_import(module_name), name, None)
    if not callable(found):
        raise BisectError(f"{module_name} has no callable {name!r} to compile with")
    return found


def _subject_of(made: Any, name: str) -> Subject:
    import torch

    if not isinstance(made, tuple) or len(made) != 2:
        raise BisectError(f"{name} must return (model, example_inputs), not {type(made).__name__}")
    model, inputs = made
    if not isinstance(model, torch.nn.Module):
        raise BisectError(f"{name} returned a {type(model).__name__}, not a torch.nn.Module")
    if isinstance(inputs, Mapping):
        return Subject(model.eval(), (), dict(inputs), name)
    if isinstance(inputs, torch.Tensor):
        return Subject(model.eval(), (inputs,), {}, name)
    return Subject(model.eval(), tuple(inputs), {}, name)


@dataclass(frozen=True, slots=True)
class Generated:
    """A stored generation to teacher-force: its token ids where the soak stored them, else its
    text (tokenized here, after the prompt: the server's own tokenization may differ)."""

    text: str
    token_ids: tuple[int, ...] | None = None


def _huggingface(
    path: Path, prompt: str, layers: int | None, dtype: str, generated: Generated | None
) -> Subject:
    """A causal LM from a local directory (never the hub), on the tokenized prompt."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        import transformers as hf
    except ImportError as exc:
        raise BisectError(
            f"a model directory needs transformers ({exc.name} is missing): "
            "pip install -e '.[transformers]'"
        ) from None
    transformers: Any = hf  # untyped: its loaders are called through Any
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        if layers is not None:
            config.num_hidden_layers = min(layers, config.num_hidden_layers)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, config=config, dtype=getattr(torch, dtype), local_files_only=True
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise BisectError(f"cannot load the model in {path}: {exc}") from None
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    model.eval()
    if generated is None:
        return Subject(model, (), {"input_ids": input_ids, "use_cache": False}, str(path))
    prompt_tokens = int(input_ids.shape[1])
    ids = list(generated.token_ids or _continuation(tokenizer, prompt, generated.text))
    if not ids:
        raise BisectError("the stored generation has no tokens to check")
    full = torch.cat([input_ids, torch.tensor([ids], dtype=input_ids.dtype)], dim=1)
    return Subject(model, (), {"input_ids": full, "use_cache": False}, str(path), prompt_tokens,
                   lambda token: str(tokenizer.decode([token])))  # fmt: skip


def _continuation(tokenizer: Any, prompt: str, text: str) -> list[int]:
    """The ids of `text` as it continues `prompt`: from tokenizing both together where the
    prompt's own ids are a prefix of that, else `text` alone."""
    alone: list[int] = tokenizer(prompt).input_ids
    both: list[int] = tokenizer(prompt + text).input_ids
    if both[: len(alone)] == alone:
        return both[len(alone) :]
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def _import(name: str) -> Any:
    """A module by name, or a `.py` file by path (its folder goes on sys.path first)."""
    try:
        if name.endswith(".py"):
            file = Path(name).resolve()
            if not file.is_file():
                raise BisectError(f"no file {name}")
            sys.path.insert(0, str(file.parent))
            spec = importlib.util.spec_from_file_location(file.stem, file)
            if spec is None or spec.loader is None:
                raise BisectError(f"cannot import {name}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[file.stem] = module
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(name)
    except ImportError as exc:
        raise BisectError(f"cannot import {name}: {exc}") from None


def leaves(value: Any) -> list[Any]:
    """The tensors of an output, in a stable order (tuples, lists, dicts, ModelOutputs)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for key in value for t in leaves(value[key])]
    if isinstance(value, list | tuple):
        return [t for item in value for t in leaves(item)]
    return []
