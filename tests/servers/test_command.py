"""Command templates and device pinning."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from soakgate.errors import ConfigError
from soakgate.servers import Device, check_template, free_port, render_command

VALUES = {
    "model": "/models/My Model", "port": "8001", "flags": "--enforce-eager --x 'a b'",
    "device": "1", "python": sys.executable, "log_dir": "/tmp/logs", "campaign_dir": "/tmp",
    "label": "eager", "instance": "cuda:1", "host": "127.0.0.1",
}  # fmt: skip


def test_render_splits_template_then_fills_so_values_with_spaces_stay_one_argument() -> None:
    argv = render_command("vllm serve {model} --port {port} --dtype float16 {flags}", VALUES)
    assert argv == [
        "vllm", "serve", "/models/My Model", "--port", "8001", "--dtype", "float16",
        "--enforce-eager", "--x", "a b",
    ]  # fmt: skip


def test_flags_may_use_placeholders_and_empty_flags_vanish() -> None:
    values = {**VALUES, "flags": "--die-once-file {log_dir}/die-{instance} --seed {device}"}
    argv = render_command("{python} -m srv --port={port} {flags}", values)
    assert argv == [sys.executable, "-m", "srv", "--port=8001",
                    "--die-once-file", "/tmp/logs/die-cuda:1", "--seed", "1"]  # fmt: skip
    assert render_command("srv {flags}", {**VALUES, "flags": ""}) == ["srv"]


@pytest.mark.parametrize(
    ("template", "message"),
    [("", "is empty"), ("srv --port {prot}", "{prot}"), ("srv 'unclosed", "cannot be parsed")],
)
def test_bad_templates_are_config_errors(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_template(template)


def test_flags_cannot_nest_flags() -> None:
    with pytest.raises(ConfigError, match="flags of config"):
        render_command("srv {flags}", {**VALUES, "flags": "--a {flags}"})


@pytest.mark.parametrize(
    ("text", "variable", "name"),
    [
        ("cuda:0", "CUDA_VISIBLE_DEVICES", "cuda:0"),
        ("nvidia:3", "CUDA_VISIBLE_DEVICES", "cuda:3"),
        ("xpu:1", "ZE_AFFINITY_MASK", "xpu:1"),
        ("rocm:2", "HIP_VISIBLE_DEVICES", "rocm:2"),
        ("cpu:0", None, "cpu:0"),
    ],
)
def test_device_pinning_per_vendor(text: str, variable: str | None, name: str) -> None:
    device = Device.parse(text)
    assert device.name == name
    assert device.env() == ({} if variable is None else {variable: text.split(":")[1]})


@pytest.mark.parametrize("text", ["cuda", "tpu:0", "cuda:", "cuda:0 1"])
def test_bad_devices_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="VENDOR:INDEX"):
        Device.parse(text)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_values_in_a_shell_script_word_are_quoted_and_run_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    values = {**VALUES, "label": f"x$(touch {marker})", "log_dir": str(tmp_path / "a b"),
              "flags": "--say 'two words' --port={port}"}  # fmt: skip
    argv = render_command("sh -c 'echo {label} {flags} > {log_dir}.out' # {label}", values)
    assert argv[:2] == ["sh", "-c"]
    subprocess.run(argv, check=True, timeout=10)
    assert not marker.exists()  # the label was echoed, not executed
    written = (tmp_path / "a b.out").read_text().strip()
    assert written == f"x$(touch {marker}) --say two words --port=8001"
    # outside a shell script a value is one argument as before, unquoted
    assert render_command("srv --label {label}", values)[-1] == values["label"]


def test_a_port_another_process_holds_is_never_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two launchers on one host (a campaign's Ray actors) once got the same port: free_port's
    socket closes before the server binds, and the OS may hand the number out again."""
    import subprocess
    import sys

    from soakgate.servers import ports

    monkeypatch.setattr(ports.tempfile, "gettempdir", lambda: str(tmp_path))
    taken = free_port()
    assert not ports.reserve(taken)  # this process holds it already
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, tempfile; tempfile.gettempdir = lambda: sys.argv[1]; "
         "from soakgate.servers import ports; port = ports.free_port(); print(port, flush=True);"
         " sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        offered = iter([held, held, taken])
        monkeypatch.setattr(ports, "_candidate", lambda host: next(offered))
        with pytest.raises(StopIteration):  # the other process's port, then this one's: skipped
            free_port()
    finally:
        holder.communicate("")
    offered = iter([held])
    assert free_port() == held  # its holder exited: the kernel dropped the lock
