"""Prompt loading and assignment."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.errors import ConfigError
from soakgate.prompts import Prompt, PromptPicker, builtin_prompts, load_prompts


def test_builtin_set_is_varied_and_stable() -> None:
    prompts = builtin_prompts()
    assert len(prompts) == 300 and len({p.prompt_id for p in prompts}) == 300
    lengths = sorted(len(p.text) for p in prompts)
    assert lengths[0] < 60 and lengths[-1] > 300


def test_jsonl_prompts_and_messages(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"id": "a", "prompt": "hello"}\n\n'
        '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}\n'
    )
    first, second = load_prompts(path)
    assert first == Prompt("a", "hello")
    assert second.prompt_id == "p-3" and second.system == "be brief"
    assert second.messages() == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
    ]  # fmt: skip


@pytest.mark.parametrize("content", ["", "not json\n", "[1]\n", '{"prompt": 1}\n'])
def test_bad_files_name_the_problem(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"bad\.jsonl"):
        load_prompts(path)


def test_picker_round_robin_and_seeded_random() -> None:
    prompts = [Prompt(str(i), str(i)) for i in range(5)]
    robin = PromptPicker(prompts)
    assert [robin.pick(s).prompt_id for s in range(7)] == ["0", "1", "2", "3", "4", "0", "1"]
    randomly = PromptPicker(prompts, "random", seed=3)
    picks = [randomly.pick(s).prompt_id for s in range(200)]
    assert picks == [PromptPicker(prompts, "random", seed=3).pick(s).prompt_id for s in range(200)]
    assert set(picks) == {"0", "1", "2", "3", "4"}
    with pytest.raises(ConfigError):
        PromptPicker(prompts, "shuffled")


def test_two_different_prompts_under_one_id_are_refused(tmp_path: Path) -> None:
    from soakgate.errors import ConfigError

    file = tmp_path / "p.jsonl"
    file.write_text('{"id": "a", "prompt": "one"}\n{"id": "a", "prompt": "two"}\n')
    with pytest.raises(ConfigError, match="id 'a' names two different prompts"):
        load_prompts(file)
    file.write_text('{"id": "a", "prompt": "one"}\n{"id": "a", "prompt": "one"}\n')
    assert len(load_prompts(file)) == 2  # the same prompt twice is no conflict


def test_a_prompt_with_another_text_keeps_every_other_field() -> None:
    """`with_text` (a canary's prompt, built on every request) names the fields by hand: a field
    added to Prompt and not carried over fails here."""
    import dataclasses

    from soakgate.prompts.source import Structure

    prompt = Prompt("p", "t", "s", Structure("regex", "a+"))
    assert all(
        getattr(prompt, f.name) != getattr(Prompt("x", "y"), f.name)
        for f in dataclasses.fields(Prompt)
    )  # every field set apart from the defaults
    assert prompt.with_text("other") == dataclasses.replace(prompt, text="other")
