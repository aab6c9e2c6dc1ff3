"""Write inference from implementation bodies; names never decide."""

from __future__ import annotations

from soakgate.audit.extract_cpp import FunctionNode, extract_cpp
from soakgate.audit.model import Confidence
from soakgate.audit.writes import FunctionWrites, infer_writes


def _writes(source: str, name: str) -> FunctionWrites:
    unit = extract_cpp(source.encode(), "x.cu")
    index: dict[str, list[FunctionNode]] = {}
    for fn in unit.functions:
        index.setdefault(fn.name, []).append(fn)
    target = index[name][0]
    return infer_writes(target, lambda n: index.get(n, []))


KERNELS = """
template <typename T>
__global__ void add_kernel(T* __restrict__ residual, const T* __restrict__ x, int n) {
  residual[threadIdx.x] += x[threadIdx.x];
}
template <typename T>
__global__ void norm_kernel(T* __restrict__ out, const T* __restrict__ x,
                            const T* __restrict__ residual, int n) {
  out[threadIdx.x] = x[threadIdx.x] + residual[threadIdx.x];
}
"""


def test_residual_written_in_one_op_read_only_in_the_next() -> None:
    source = (
        KERNELS
        + """
void add_residual(torch::Tensor& residual, torch::Tensor const& x) {
  add_kernel<float><<<1, 256>>>(residual.data_ptr<float>(), x.data_ptr<float>(), 4);
}
void norm_residual(torch::Tensor& out, torch::Tensor& x, torch::Tensor& residual) {
  norm_kernel<float><<<1, 256>>>(out.data_ptr<float>(), x.data_ptr<float>(),
                                residual.data_ptr<float>(), 4);
}
"""
    )
    assert set(_writes(source, "add_residual").writes) == {0}
    assert set(_writes(source, "norm_residual").writes) == {0}


def test_a_parameter_named_out_that_is_only_read_is_not_written() -> None:
    source = (
        KERNELS
        + """
void consume(torch::Tensor& out, torch::Tensor& dst) {
  norm_kernel<float><<<1, 256>>>(dst.data_ptr<float>(), out.data_ptr<float>(),
                                out.data_ptr<float>(), 4);
}
"""
    )
    assert set(_writes(source, "consume").writes) == {1}


def test_inplace_methods_out_calls_and_accessor_stores() -> None:
    source = """
void f(at::Tensor a, at::Tensor b, at::Tensor c, at::Tensor d, at::Tensor e) {
  a.index_put_({idx}, v);
  at::matmul_out(b, d, d);
  auto acc = c.accessor<float, 2>();
  acc[0][1] = 3.0f;
  auto view = e.view({-1});
  view.fill_(0);
  auto n = d.numel();
  d.requires_grad_(false);
}
"""
    result = _writes(source, "f")
    assert set(result.writes) == {0, 1, 2, 4}
    kinds = {i: result.writes[i][0].kind for i in result.writes}
    assert kinds == {0: "inplace-method", 1: "out-call", 2: "store", 4: "inplace-method"}


def test_const_pointer_and_local_pointer_aliases() -> None:
    source = """
__global__ void k(float* dst, const float* src) { *(dst + 1) = src[0]; }
void g(at::Tensor x, at::Tensor y) {
  const float* xs = x.data_ptr<float>();
  float* ys = y.mutable_data_ptr<float>();
  k<<<1, 1>>>(ys, xs);
}
"""
    result = _writes(source, "g")
    assert set(result.writes) == {1}
    assert result.writes[1][0].kind == "kernel-store"
    assert result.writes[1][0].confidence == Confidence.HIGH


def test_unresolved_callee_gives_graded_confidence() -> None:
    source = """
void h(at::Tensor a, at::Tensor b, at::Tensor c) {
  launch_elsewhere(a.mutable_data_ptr<float>(), b.data_ptr<float>(), c.const_data_ptr<float>());
}
"""
    result = _writes(source, "h")
    assert result.writes[0][0].confidence == Confidence.MEDIUM
    assert result.writes[1][0].confidence == Confidence.LOW
    assert 2 not in result.writes


def test_tensor_passed_to_a_function_that_writes_it_and_returned_params() -> None:
    source = """
void helper(at::Tensor& t, const at::Tensor& s) { t.copy_(s); }
at::Tensor outer(at::Tensor src, at::Tensor dst) {
  helper(dst, src);
  return dst;
}
"""
    result = _writes(source, "outer")
    assert set(result.writes) == {1}
    assert result.writes[1][0].kind == "mutating-call"
    assert result.returned[0][0] == 1
