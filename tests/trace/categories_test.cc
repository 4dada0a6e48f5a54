// The kernel-category table and NCCL kernel-name parsing, pinned on real kernel names.
#include <gtest/gtest.h>

#include "trace/categories.h"

namespace braid {
namespace {

TEST(Categories, TableOfRealKernelNames) {
  struct Case {
    const char* name;
    Category want;
  };
  const Case cases[] = {
      {"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", Category::CommAllReduce},
      {"ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", Category::CommAllReduce},
      {"ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Category::CommAllGather},
      {"ncclDevKernel_ReduceScatter_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", Category::CommReduceScatter},
      {"ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", Category::CommBroadcast},
      {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", Category::CommSendRecv},
      {"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", Category::CommSendRecv},
      {"sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", Category::Gemm},
      {"ampere_sgemm_128x64_tn", Category::Gemm},
      {"void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)", Category::Gemm},
      {"nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", Category::Gemm},
      {"void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)", Category::Attention},
      {"fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t>::Params)", Category::Attention},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", Category::Elementwise},
      {"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)", Category::Elementwise},
      {"void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)", Category::Elementwise},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)", Category::Elementwise},
      {"Memcpy DtoD (Device -> Device)", Category::Memory},
      {"void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", Category::Memory},
      {"void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", Category::Memory},
      {"my_custom_kernel", Category::Other},
  };
  for (const auto& c : cases) EXPECT_EQ(classify_kernel(c.name), c.want) << c.name;
}

TEST(Categories, ParsesTheThreeNcclKernelNameForms) {
  auto old = parse_nccl_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->op, CollOp::AllReduce);
  EXPECT_EQ(old->algo, "RING");
  EXPECT_EQ(old->proto, "LL");
  EXPECT_EQ(old->redop, "Sum");
  EXPECT_EQ(old->dtype, "float32");
  auto mid = parse_nccl_kernel_name(
      "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)");
  ASSERT_TRUE(mid);
  EXPECT_EQ(mid->op, CollOp::SendRecv);
  EXPECT_EQ(mid->proto, "SIMPLE");
  EXPECT_EQ(mid->dtype, "int8");
  auto dev = parse_nccl_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->op, CollOp::AllGather);
  EXPECT_EQ(dev->algo, "RING");
  EXPECT_EQ(dev->proto, "LL");
  EXPECT_EQ(dev->dtype, "");
  EXPECT_FALSE(parse_nccl_kernel_name("gemm_kernel"));
  // NCCL 2.19+ reduction kernels put the reduction and type before the algorithm.
  auto red = parse_nccl_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  ASSERT_TRUE(red);
  EXPECT_EQ(red->op, CollOp::AllReduce);
  EXPECT_EQ(red->algo, "RING");
  EXPECT_EQ(red->proto, "LL");
  EXPECT_EQ(red->redop, "Sum");
  EXPECT_EQ(red->dtype, "bfloat16");
  auto nvls = parse_nccl_kernel_name("ncclDevKernel_ReduceScatter_Sum_f32_NVLS_SIMPLE(ncclDevKernelArgsStorage<4096ul>)");
  ASSERT_TRUE(nvls);
  EXPECT_EQ(nvls->algo, "NVLS");
  EXPECT_EQ(nvls->proto, "SIMPLE");
  EXPECT_EQ(nvls->dtype, "float32");
}

TEST(Categories, FrameworkOpNames) {
  EXPECT_EQ(coll_op_from_framework_name("nccl:all_reduce"), CollOp::AllReduce);
  EXPECT_EQ(coll_op_from_framework_name("c10d::allreduce_"), CollOp::AllReduce);
  EXPECT_EQ(coll_op_from_framework_name("nccl:_all_gather_base"), CollOp::AllGather);
  EXPECT_EQ(coll_op_from_framework_name("_allgather_base"), CollOp::AllGather);
  EXPECT_EQ(coll_op_from_framework_name("nccl:_reduce_scatter_base"), CollOp::ReduceScatter);
  EXPECT_EQ(coll_op_from_framework_name("c10d::alltoall_base_"), CollOp::AllToAll);
  EXPECT_EQ(coll_op_from_framework_name("nccl:all_to_all"), CollOp::AllToAll);
  EXPECT_EQ(coll_op_from_framework_name("broadcast"), CollOp::Broadcast);
  EXPECT_EQ(coll_op_from_framework_name("nccl:send"), CollOp::Send);
  EXPECT_EQ(coll_op_from_framework_name("nccl:recv"), CollOp::Recv);
  EXPECT_EQ(coll_op_from_framework_name("wait"), CollOp::Unknown);
}

TEST(Categories, DtypeNormalization) {
  EXPECT_EQ(normalize_dtype("Float"), "float32");
  EXPECT_EQ(normalize_dtype("BFloat16"), "bfloat16");
  EXPECT_EQ(normalize_dtype("c10::BFloat16"), "bfloat16");
  EXPECT_EQ(normalize_dtype("Long"), "int64");
  EXPECT_EQ(normalize_dtype("Half"), "float16");
  EXPECT_EQ(dtype_size("bfloat16"), 2);
  EXPECT_EQ(dtype_size("int64"), 8);
  EXPECT_EQ(dtype_size("mystery"), 0);
}

}  // namespace
}  // namespace braid
