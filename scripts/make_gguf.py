#!/usr/bin/env python3
"""Convert the shared tiny Llama (bf16 safetensors + tokenizer.json) to GGUF for llama.cpp.

Uses only numpy and the `gguf` package (no torch, no llama.cpp checkout), so CI can build the
model llama.cpp serves in a second. Written by hand because llama.cpp's own converter needs
torch, transformers and a checkout; this model is plain Llama, so the mapping is short.

    python scripts/make_gguf.py OUT.gguf [--model DIR] [--outtype f32|f16]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

DEFAULT_MODEL = Path(__file__).resolve().parent.parent.parent / "shared/models/tiny-llama-8k"

# HF Llama tensor name suffix -> GGUF name suffix (per layer); llama.cpp's names.
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def read_safetensors(path: Path) -> Iterator[tuple[str, npt.NDArray[np.float32]]]:
    """Yield (name, float32 array) for every tensor of one safetensors file."""
    with path.open("rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(header_len))
        base = 8 + header_len
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            handle.seek(base + start)
            raw = np.frombuffer(handle.read(end - start), dtype=_DTYPES[info["dtype"]])
            if info["dtype"] == "BF16":
                # bf16 is the top half of a float32: widen by shifting into the high 16 bits
                values = (raw.astype(np.uint32) << 16).view(np.float32)
            else:
                values = raw.astype(np.float32)
            yield name, values.reshape(info["shape"])


def permute_qk(weights: npt.NDArray[np.float32], n_head: int) -> npt.NDArray[np.float32]:
    """Undo HF's rotary half-split layout of q/k rows (llama.cpp expects interleaved pairs)."""
    rows = weights.shape[0]
    return (
        weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def gguf_name(hf_name: str) -> str:
    """The llama.cpp tensor name for an HF Llama tensor name."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    prefix, layer, rest = hf_name.split(".", 3)[1:]
    if prefix != "layers" or rest not in _LAYER_NAMES:
        raise ValueError(f"unexpected tensor {hf_name}")
    return f"blk.{layer}.{_LAYER_NAMES[rest]}"


def add_hparams(writer: gguf.GGUFWriter, config: dict[str, Any], file_type: int) -> None:
    """Model hyper-parameters under llama.cpp's `llama.*` keys."""
    n_head = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    rope = config.get("rope_parameters") or {}
    writer.add_name(Path(config.get("_name_or_path") or "tiny-llama-8k").name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(config.get("num_key_value_heads", n_head))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(file_type)


def add_tokenizer(writer: gguf.GGUFWriter, model_dir: Path, vocab_size: int) -> None:
    """Byte-level BPE vocabulary, merges, special ids and the ChatML template."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    by_id: dict[int, str] = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    special = {t["id"]: t["content"] for t in tokenizer["added_tokens"]}
    by_id.update(special)
    tokens: list[str] = []
    types: list[int] = []
    for token_id in range(vocab_size):
        # the embedding is padded past the tokenizer (8256 rows, 8195 tokens): mark rows unused
        if token_id in special:
            tokens.append(special[token_id])
            types.append(gguf.TokenType.CONTROL)
        elif token_id in by_id:
            tokens.append(by_id[token_id])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{token_id}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    ids = {content: token_id for token_id, content in special.items()}
    writer.add_tokenizer_model("gpt2")
    # the HF ByteLevel pre-tokenizer with use_regex is GPT-2's split regex
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(ids[config["bos_token"]])
    writer.add_eos_token_id(ids[config["eos_token"]])
    writer.add_pad_token_id(ids[config.get("pad_token") or config["eos_token"]])
    if "<|im_end|>" in ids:
        writer.add_eot_token_id(ids["<|im_end|>"])
    writer.add_add_bos_token(bool(config.get("add_bos_token", False)))
    writer.add_add_eos_token(False)
    if config.get("chat_template"):
        writer.add_chat_template(config["chat_template"])


def convert(model_dir: Path, out: Path, outtype: str = "f32") -> Path:
    """Write `out` (GGUF) from the HF Llama checkpoint in `model_dir`; returns `out`."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "llama":
        raise ValueError(f"{model_dir} is {config.get('model_type')!r}, not llama")
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    file_type = gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(tmp, "llama")
    add_hparams(writer, config, int(file_type))
    add_tokenizer(writer, model_dir, config["vocab_size"])
    for shard in sorted(model_dir.glob("*.safetensors")):
        for name, values in read_safetensors(shard):
            if name == "lm_head.weight" and config.get("tie_word_embeddings"):
                continue
            if name.endswith("q_proj.weight"):
                values = permute_qk(values, n_head)
            elif name.endswith("k_proj.weight"):
                values = permute_qk(values, n_kv)
            # llama.cpp wants 1-D tensors (norms) in f32 whatever the file type
            keep_f32 = outtype == "f32" or values.ndim == 1
            writer.add_tensor(gguf_name(name), values if keep_f32 else values.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)  # atomic: a half-written file never sits at `out`
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output .gguf path")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="HF model folder")
    parser.add_argument("--outtype", choices=("f32", "f16"), default="f32")
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"make_gguf: no model at {args.model}", file=sys.stderr)
        return 2
    path = convert(args.model, args.out, args.outtype)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
