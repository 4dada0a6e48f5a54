// The catalogue bench/gen_kineto.cc draws from: its random numbers, the H100 kernels it names,
// the streams and process groups it writes, and the collectives' shapes (internal to the
// generator; split from it to keep each file short).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trace/model.h"

namespace braid::bench::kineto_gen {

using std::string_view;

// xoshiro256** seeded through splitmix64: fast, and the same sequence on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  int64_t in(int64_t lo, int64_t hi) {  // uniform in [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

enum class KKind : uint8_t { Gemm, Attention, Elementwise };

struct KernelSpec {
  string_view name;
  KKind kind;
  int64_t dur_lo, dur_hi;  // ns
  int grid, block, regs, smem;
};

// Names as PyTorch/cuBLAS/FlashAttention kernels show up in real H100 traces. None contains
// a character that JSON needs escaped (checked at compile time below).
// clang-format off
inline constexpr KernelSpec kGemmQkv{
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    KKind::Gemm, 180'000, 260'000, 396, 128, 168, 213'248};
inline constexpr KernelSpec kGemmOut{"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", KKind::Gemm, 60'000,
                              90'000, 264, 384, 168, 206'848};
inline constexpr KernelSpec kGemmFc{
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    KKind::Gemm, 240'000, 340'000, 528, 384, 168, 213'248};
inline constexpr KernelSpec kGemmDgrad{
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    KKind::Gemm, 230'000, 330'000, 528, 384, 168, 213'248};
inline constexpr KernelSpec kGemmWgrad{
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_on_kernel__5x_cublas",
    KKind::Gemm, 250'000, 360'000, 132, 128, 168, 213'248};
inline constexpr KernelSpec kFlashFwd{
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    KKind::Attention, 150'000, 210'000, 512, 128, 255, 49'152};
inline constexpr KernelSpec kFlashBwd{
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, "
    "64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>(pytorch_flash::"
    "Flash_bwd_params)",
    KKind::Attention, 380'000, 520'000, 1024, 256, 255, 114'688};
inline constexpr KernelSpec kLayerNorm{
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
    "float*, c10::BFloat16*)",
    KKind::Elementwise, 12'000, 20'000, 8192, 256, 40, 0};
inline constexpr KernelSpec kLayerNormBwd{
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::"
    "BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)",
    KKind::Elementwise, 20'000, 32'000, 8192, 256, 48, 0};
inline constexpr KernelSpec kAdd{
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, "
    "3ul>)",
    KKind::Elementwise, 9'000, 14'000, 16384, 128, 26, 0};
inline constexpr KernelSpec kGelu{
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
    "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::"
    "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::"
    "GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() "
    "const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
    KKind::Elementwise, 18'000, 26'000, 32768, 128, 30, 0};
inline constexpr KernelSpec kGeluBwd{
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::"
    "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::"
    "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, "
    "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
    "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16, "
    "c10::BFloat16)#1}, std::array<char*, 3ul>)",
    KKind::Elementwise, 24'000, 34'000, 32768, 128, 32, 0};
inline constexpr KernelSpec kReduce{
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
    "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::"
    "ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, "
    "4>)",
    KKind::Elementwise, 10'000, 16'000, 264, 512, 32, 16},
    kSoftmax{
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
        "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::"
        "BFloat16 const*, int)",
        KKind::Elementwise, 40'000, 60'000, 8192, 1024, 38, 0},
    kAdam{
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
        "<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, "
        "double, double, bool, double*, double*>(at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::"
        "BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, "
        "double, bool, double*, double*)",
        KKind::Elementwise, 90'000, 140'000, 320, 512, 72, 0};

// clang-format on

constexpr bool json_safe(string_view s) {
  for (char c : s)
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}
static_assert(json_safe(kGemmQkv.name) && json_safe(kFlashFwd.name) && json_safe(kFlashBwd.name) &&
              json_safe(kGelu.name) && json_safe(kGeluBwd.name) && json_safe(kReduce.name) &&
              json_safe(kAdam.name) && json_safe(kLayerNormBwd.name) && json_safe(kSoftmax.name));

inline constexpr int kSms = 132;  // H100 SXM
inline constexpr int kComputeStream = 7, kTpStream = 20, kDpStream = 24;

struct PG {
  std::string name, desc, ranks;  // ranks as Kineto writes them: "[0, 1, 2]"
  int size = 1;
  int stream = 0;
};

struct Coll {
  CollOp op;
  string_view c10d, coll_name, annotation, kernel, dtype;
  int64_t in_nelems, out_nelems;
  int elem_bytes;
};

}  // namespace braid::bench::kineto_gen
