"""The build's TORCH_EXTENSION_NAME, read from `setup.py` and CMake files (issue 32 item 3)."""

from __future__ import annotations

from pathlib import Path

from soakgate.audit.build_names import (
    cmake_extensions,
    extension_name,
    extensions,
    setup_extensions,
)


def test_setup_py_names_the_last_part_and_a_literal_flag_wins(tmp_path: Path) -> None:
    source = b"""
from torch.utils.cpp_extension import CppExtension, CUDAExtension
NAME = "pkg"
exts = [
    CUDAExtension(f"{NAME}.ops", ["./src/a.cu", "src/b.cpp"]),
    CppExtension(name="other", sources=["src/c.cpp"],
                 extra_compile_args=["-O3", "-DTORCH_EXTENSION_NAME=poker"]),
    CUDAExtension(name=computed(), sources=["src/d.cu"]),
]
"""
    found = setup_extensions(source, tmp_path.as_posix())
    assert [(e.name, e.sources) for e in found] == [
        ("ops", ("./src/a.cu", "src/b.cpp")), ("poker", ("src/c.cpp",)),
    ]  # fmt: skip
    for name in ("a.cu", "b.cpp", "c.cpp", "d.cu"):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / name).write_text("")
    names = [extension_name(found, str(tmp_path / "src" / n)) for n in ("a.cu", "c.cpp", "d.cu")]
    assert names == ["ops", "poker", None]  # two extensions, d.cu listed by neither


def test_cmake_targets_expand_their_source_variables() -> None:
    text = """
set(SRC "csrc/a.cu" # a comment (with parentheses)
    csrc/b.cu)
list(APPEND SRC "csrc/c.cu")
set(ALL ${SRC} csrc/d.cu)
define_gpu_extension_target(_C DESTINATION pkg LANGUAGE CUDA SOURCES ${ALL} USE_SABI 3)
add_compile_definitions(TORCH_EXTENSION_NAME=spelled)
"""
    found = cmake_extensions(text, "/r")
    assert [(e.name, e.sources) for e in found] == [
        ("_C", ("csrc/a.cu", "csrc/b.cu", "csrc/c.cu", "csrc/d.cu")), ("spelled", ()),
    ]  # fmt: skip


def test_a_build_file_names_only_files_below_it(tmp_path: Path) -> None:
    """A build file in one subtree says nothing about another subtree's files."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    setup = tmp_path / "a" / "setup.py"
    setup.write_bytes(b'CUDAExtension("a._A", ["x.cu"])\n')
    found = extensions({str(setup): setup.read_bytes()})
    assert extension_name(found, str(tmp_path / "a" / "y.cu")) == "_A"  # its only extension
    assert extension_name(found, str(tmp_path / "b" / "x.cu")) is None
