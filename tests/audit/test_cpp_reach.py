"""Which same-named C++ definition a call reaches (issue 32 item 2)."""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.audit.cpp_reach import device_of, include_reach, key_device, pick


@dataclass
class _Def:
    path: str


def test_devices_from_suffixes_and_folders() -> None:
    assert [device_of(p) for p in ("a/b.cu", "csrc/cpu/x.cpp", "csrc/x_cpu.cpp",
                                   "csrc/xpu/k.cpp", "csrc/ops.cpp", "k.cuh")] == [
        "gpu", "cpu", "cpu", "gpu", "", "gpu",
    ]  # fmt: skip
    assert [key_device(k) for k in ("CUDA", "CPU", "XPU", "CompositeExplicitAutograd", None)] == [
        "gpu", "cpu", "gpu", "", "",
    ]  # fmt: skip


def test_own_file_then_includes_then_the_callers_device() -> None:
    contents = {
        "t/a.cu": b'#include "util.cuh"\n', "t/util.cuh": b'#include "../deep.h"\n',
        "deep.h": b"", "t/cpu/a.cpp": b"", "t/b.cpp": b"",
    }  # fmt: skip
    reach = include_reach(contents)
    assert reach("t/a.cu") == {"t/util.cuh", "deep.h"}
    own, header, deep = _Def("t/a.cu"), _Def("t/util.cuh"), _Def("deep.h")
    cpu, other = _Def("t/cpu/a.cpp"), _Def("t/b.cpp")
    assert pick([own, header, cpu], "t/a.cu", reach) == [own]
    assert pick([deep, cpu, other], "t/a.cu", reach) == [deep]
    assert pick([cpu, other], "t/a.cu", reach) == [other]  # no GPU file: the either-device one
    assert pick([cpu, other], "t/bind.cpp", reach, "CPU") == [cpu]
    assert pick([cpu, other], "t/bind.cpp", reach) == [cpu, other]  # nothing tells them apart
    assert pick([cpu, other], "t/b.cpp", reach, "CPU") == [other]  # its own file first
