-- A small, hand-built stand-in for `nsys export --type sqlite` output (one process, one GPU).
--
-- Where each table comes from (public documents):
--   * StringIds, PROCESSES, TARGET_INFO_GPU, TARGET_INFO_CUDA_DEVICE, TARGET_INFO_CUDA_STREAM,
--     META_DATA_EXPORT, ENUM_NSYS_EVENT_TYPE, CUPTI_ACTIVITY_KIND_KERNEL,
--     CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
--     NVTX_EVENTS: NVIDIA Nsight Systems Post-Collection Analysis Guide, "SQLite Schema
--     Reference" (docs.nvidia.com/nsight-systems/AnalysisGuide/), column names and types as
--     documented there (schema 3.x; older columns such as deprecatedSrcId are kept).
--   * copyKind values: CUPTI's CUpti_ActivityMemcpyKind (1 = HtoD, 2 = DtoH, 8 = DtoD, ...),
--     docs.nvidia.com/cupti/ (the ENUM_CUDA_MEMCPY_OPER ids).
--   * ENUM_NSYS_EVENT_TYPE ids 33/34/39/59/60/75/76 (NvtxCategory, NvtxMark, NvtxThread,
--     NvtxPushPopRange, NvtxStartEndRange, NvtxDomainCreate, NvtxDomainDestroy): the ids the
--     exporter writes, as used by the Nsight Systems SQLite examples. Labels are left out.
--   * globalPid / globalTid: "Serialized GlobalId"; pid = globalTid / 0x1000000 % 0x1000000,
--     tid = globalTid % 0x1000000 (Nsight Systems User Guide, SQLite examples).
--   * NCCL NVTX ranges: NCCL registers a domain "NCCL" and names each API range after the
--     function (ncclAllReduce, ncclGroupEnd, ...); its extended payload entries are named
--     "NCCL communicator ID", "Message size [bytes]" (older NCCL: "Bytes"), "Peer rank",
--     "Root", "No. of ranks", "Rank" (NCCL src/include/nvtx_payload_schemas.h,
--     src/collectives.cc). Here the payload is the JSON object in NVTX_EVENTS.jsonText.
--
-- Workload (times in ns): process 4242 on GPU 0, main thread 4242, second thread 4250;
-- streams 7 (compute) and 13 (NCCL); 10 kernels (2 GEMM, 2 elementwise, 6 NCCL), 2 memcpys,
-- 1 memset, 14 runtime calls, 16 NVTX rows (13 closed ranges, 1 domain, 1 mark, 1 open range).
-- globalPid = 2^48 + 4242 * 2^24 (a non-zero upper id part, as real exports have).

CREATE TABLE StringIds (
    id                          INTEGER   NOT NULL   PRIMARY KEY,
    value                       TEXT      NOT NULL
);
CREATE TABLE PROCESSES (
    globalPid                   INTEGER,
    pid                         INTEGER,
    name                        TEXT
);
CREATE TABLE META_DATA_EXPORT (
    name                        TEXT      NOT NULL,
    value                       TEXT
);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (
    id                          INTEGER   NOT NULL   PRIMARY KEY,
    name                        TEXT,
    label                       TEXT
);
CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,
    id                          INTEGER   NOT NULL,
    name                        TEXT,
    busLocation                 TEXT,
    isDiscrete                  INTEGER,
    l2CacheSize                 INTEGER,
    totalMemory                 INTEGER,
    memoryBandwidth             INTEGER,
    clockRate                   INTEGER,
    smCount                     INTEGER,
    pwGpuId                     INTEGER,
    uuid                        TEXT,
    luid                        INTEGER,
    chipName                    TEXT,
    cuDevice                    INTEGER,
    ctxswDevPath                TEXT,
    ctrlDevPath                 TEXT,
    revision                    INTEGER,
    nodeMask                    INTEGER,
    constantMemory              INTEGER,
    maxIPC                      INTEGER,
    maxRegistersPerBlock        INTEGER,
    maxShmemPerBlock            INTEGER,
    maxShmemPerBlockOptin       INTEGER,
    maxShmemPerSm               INTEGER,
    maxRegistersPerSm           INTEGER,
    threadsPerWarp              INTEGER,
    asyncEngines                INTEGER,
    maxWarpsPerSm               INTEGER,
    maxBlocksPerSm              INTEGER,
    maxThreadsPerBlock          INTEGER,
    maxBlockDimX                INTEGER,
    maxBlockDimY                INTEGER,
    maxBlockDimZ                INTEGER,
    maxGridDimX                 INTEGER,
    maxGridDimY                 INTEGER,
    maxGridDimZ                 INTEGER,
    computeMajor                INTEGER,
    computeMinor                INTEGER,
    smMajor                     INTEGER,
    smMinor                     INTEGER,
    numaNodeId                  INTEGER
);
CREATE TABLE TARGET_INFO_CUDA_DEVICE (
    gpuId                       INTEGER,
    cudaId                      INTEGER   NOT NULL,
    pid                         INTEGER   NOT NULL,
    uuid                        TEXT,
    numMultiprocessors          INTEGER
);
CREATE TABLE TARGET_INFO_CUDA_STREAM (
    streamId                    INTEGER   NOT NULL,
    hwId                        INTEGER   NOT NULL,
    vmId                        INTEGER   NOT NULL,
    processId                   INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    priority                    INTEGER   NOT NULL,
    flag                        INTEGER   NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    deviceId                    INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    greenContextId              INTEGER,
    streamId                    INTEGER   NOT NULL,
    correlationId               INTEGER,
    globalPid                   INTEGER,
    demangledName               INTEGER   NOT NULL,
    shortName                   INTEGER   NOT NULL,
    mangledName                 INTEGER,
    launchType                  INTEGER,
    cacheConfig                 INTEGER,
    registersPerThread          INTEGER   NOT NULL,
    gridX                       INTEGER   NOT NULL,
    gridY                       INTEGER   NOT NULL,
    gridZ                       INTEGER   NOT NULL,
    blockX                      INTEGER   NOT NULL,
    blockY                      INTEGER   NOT NULL,
    blockZ                      INTEGER   NOT NULL,
    staticSharedMemory          INTEGER   NOT NULL,
    dynamicSharedMemory         INTEGER   NOT NULL,
    localMemoryPerThread        INTEGER   NOT NULL,
    localMemoryTotal            INTEGER   NOT NULL,
    gridId                      INTEGER   NOT NULL,
    sharedMemoryExecuted        INTEGER,
    graphNodeId                 INTEGER,
    sharedMemoryLimitConfig     INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    deviceId                    INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    greenContextId              INTEGER,
    streamId                    INTEGER   NOT NULL,
    correlationId               INTEGER,
    globalPid                   INTEGER,
    bytes                       INTEGER   NOT NULL,
    copyKind                    INTEGER   NOT NULL,
    deprecatedSrcId             INTEGER,
    srcKind                     INTEGER,
    dstKind                     INTEGER,
    srcDeviceId                 INTEGER,
    srcContextId                INTEGER,
    dstDeviceId                 INTEGER,
    dstContextId                INTEGER,
    migrationCause              INTEGER,
    graphNodeId                 INTEGER,
    virtualAddress              INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    deviceId                    INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    greenContextId              INTEGER,
    streamId                    INTEGER   NOT NULL,
    correlationId               INTEGER,
    globalPid                   INTEGER,
    value                       INTEGER   NOT NULL,
    bytes                       INTEGER   NOT NULL,
    graphNodeId                 INTEGER,
    memKind                     INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    eventClass                  INTEGER   NOT NULL,
    globalTid                   INTEGER,
    correlationId               INTEGER,
    nameId                      INTEGER   NOT NULL,
    returnValue                 INTEGER   NOT NULL,
    callchainId                 INTEGER
);
CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,
    end                         INTEGER,
    eventType                   INTEGER   NOT NULL,
    rangeId                     INTEGER,
    category                    INTEGER,
    color                       INTEGER,
    text                        TEXT,
    globalTid                   INTEGER,
    endGlobalTid                INTEGER,
    textId                      INTEGER,
    domainId                    INTEGER,
    uint64Value                 INTEGER,
    int64Value                  INTEGER,
    doubleValue                 REAL,
    uint32Value                 INTEGER,
    int32Value                  INTEGER,
    floatValue                  REAL,
    jsonTextId                  INTEGER,
    jsonText                    TEXT,
    binaryData                  TEXT,
    eventId                     INTEGER   NOT NULL   PRIMARY KEY
);

INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1');

INSERT INTO ENUM_NSYS_EVENT_TYPE (id, name) VALUES
  (33, 'NvtxCategory'), (34, 'NvtxMark'), (39, 'NvtxThread'), (59, 'NvtxPushPopRange'),
  (60, 'NvtxStartEndRange'), (75, 'NvtxDomainCreate'), (76, 'NvtxDomainDestroy');

INSERT INTO StringIds VALUES
  (1, 'cudaLaunchKernel_v7000'),
  (2, 'cudaMemcpyAsync_v3020'),
  (3, 'cudaMemsetAsync_v3020'),
  (4, 'cudaStreamSynchronize_v3020'),
  (10, 'ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn'),
  (11, 'void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)'),
  (12, 'vectorized_elementwise_kernel'),
  (13, 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas'),
  (14, 'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)'),
  (15, 'vectorized_layer_norm_kernel'),
  (16, 'ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)'),
  (17, 'ncclKernel_AllReduce_RING_LL_Sum_float'),
  (18, 'ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)'),
  (19, 'ncclDevKernel_AllGather_RING_LL'),
  (20, 'ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)'),
  (21, 'ncclDevKernel_SendRecv'),
  (30, 'ncclCommInitRank'),
  (31, 'ncclAllReduce'),
  (32, 'ncclAllGather'),
  (33, 'ncclAlltoAll'),
  (34, 'ncclGroupEnd'),
  (35, 'ncclSend'),
  (36, 'ncclGroupStart'),
  (37, 'ncclRecv');

INSERT INTO PROCESSES VALUES (281546145660928, 4242, 'python3');

INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, totalMemory, smCount,
                             uuid, chipName, cuDevice, computeMajor, computeMinor)
VALUES (0, 0, 'NVIDIA H100 80GB HBM3', '0000:19:00.0', 1, 85520809984, 132,
        'GPU-5d8a2c1e-0000-0000-0000-000000000000', 'GH100', 0, 9, 0);
INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES
  (0, 0, 4242, 'GPU-5d8a2c1e-0000-0000-0000-000000000000', 132);

INSERT INTO TARGET_INFO_CUDA_STREAM VALUES
  (7, 0, 0, 4242, 1, 0, 1),
  (13, 0, 0, 4242, 1, -1, 1);

-- Kernels. Columns after globalPid: demangled, short, mangled names, then launch geometry.
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
  (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName,
   shortName, mangledName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ,
   staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId)
VALUES
  (1000120000, 1000300000, 0, 1, 7, 101, 281546145660928, 10, 10, NULL, 232, 64, 8, 1, 256, 1, 1, 0, 73728, 0, 0, 1),
  (1000300000, 1000350000, 0, 1, 7, 102, 281546145660928, 11, 12, NULL, 28, 4096, 1, 1, 128, 1, 1, 0, 0, 0, 0, 2),
  (1000350000, 1000500000, 0, 1, 7, 103, 281546145660928, 13, 13, NULL, 168, 132, 1, 1, 384, 1, 1, 0, 232448, 0, 0, 3),
  (1000500000, 1000600000, 0, 1, 13, 104, 281546145660928, 16, 17, NULL, 96, 24, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 4),
  (1000600000, 1000620000, 0, 1, 7, 105, 281546145660928, 14, 15, NULL, 40, 2048, 1, 1, 128, 1, 1, 0, 0, 0, 0, 5),
  (1000620000, 1000700000, 0, 1, 13, 106, 281546145660928, 18, 19, NULL, 96, 24, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 6),
  (1000700000, 1000800000, 0, 1, 13, 107, 281546145660928, 20, 21, NULL, 96, 16, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 7),
  (1000800000, 1000820000, 0, 1, 13, 108, 281546145660928, 20, 21, NULL, 96, 1, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 8),
  (1000820000, 1000850000, 0, 1, 13, 109, 281546145660928, 20, 21, NULL, 96, 2, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 9),
  (1000850000, 1000860000, 0, 1, 13, 110, 281546145660928, 20, 21, NULL, 96, 1, 1, 1, 512, 1, 1, 4224, 0, 0, 0, 10);

INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY
  (start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, copyKind,
   srcKind, dstKind)
VALUES
  (1000620000, 1000680000, 0, 1, 7, 111, 281546145660928, 8388608, 1, 2, 1),
  (1000680000, 1000690000, 0, 1, 7, 112, 281546145660928, 4096, 2, 1, 2);

INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET
  (start, end, deviceId, contextId, streamId, correlationId, globalPid, value, bytes, memKind)
VALUES
  (1000690000, 1000691000, 0, 1, 7, 113, 281546145660928, 0, 1024, 1);

-- Runtime API calls; globalTid 281546145665170 is thread 4242, ...5178 is thread 4250.
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
  (start, end, eventClass, globalTid, correlationId, nameId, returnValue)
VALUES
  (1000110000, 1000115000, 1, 281546145665170, 101, 1, 0),
  (1000120000, 1000124000, 1, 281546145665170, 102, 1, 0),
  (1000130000, 1000134000, 1, 281546145665170, 103, 1, 0),
  (1000215000, 1000225000, 1, 281546145665170, 104, 1, 0),
  (1000240000, 1000244000, 1, 281546145665170, 105, 1, 0),
  (1000255000, 1000265000, 1, 281546145665170, 106, 1, 0),
  (1000305000, 1000315000, 1, 281546145665170, 107, 1, 0),
  (1000345000, 1000355000, 1, 281546145665170, 108, 1, 0),
  (1000385000, 1000392000, 1, 281546145665170, 109, 1, 0),
  (1000216000, 1000222000, 1, 281546145665178, 110, 1, 0),
  (1000400000, 1000405000, 1, 281546145665170, 111, 2, 0),
  (1000410000, 1000415000, 1, 281546145665170, 112, 2, 0),
  (1000420000, 1000423000, 1, 281546145665170, 113, 3, 0),
  (1000430000, 1000860000, 1, 281546145665170, 114, 4, 0);

-- NVTX: domain 1 is NCCL's. eventType 59 = push/pop, 60 = start/end, 34 = mark, 75 = domain.
INSERT INTO NVTX_EVENTS
  (eventId, start, end, eventType, rangeId, text, globalTid, endGlobalTid, textId, domainId,
   jsonText)
VALUES
  (1, 1000000000, NULL, 75, NULL, 'NCCL', 281546145665170, NULL, NULL, 1, NULL),
  (2, 1000001000, 1000050000, 59, NULL, NULL, 281546145665170, NULL, 30, 1,
   '{"NCCL communicator ID":7377214405313347,"No. of ranks":4,"Rank":2,"CUDA device":0}'),
  (3, 1000100000, 1001000000, 60, 1, 'step 0', 281546145665170, 281546145665170, NULL, 0, NULL),
  (4, 1000100000, 1000200000, 59, NULL, 'forward', 281546145665170, NULL, NULL, 0, NULL),
  (5, 1000210000, 1000230000, 59, NULL, NULL, 281546145665170, NULL, 31, 1,
   '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":4194304,"Reduction operation":"ncclSum"}'),
  (6, 1000250000, 1000270000, 59, NULL, NULL, 281546145665170, NULL, 32, 1,
   '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":1048576}'),
  (7, 1000280000, 1000320000, 59, NULL, NULL, 281546145665170, NULL, 33, 1,
   '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":2097152}'),
  (8, 1000300000, 1000318000, 59, NULL, NULL, 281546145665170, NULL, 34, 1, NULL),
  (9, 1000330000, 1000360000, 59, NULL, NULL, 281546145665170, NULL, 35, 1,
   '{"NCCL communicator ID":7377214405313347,"Bytes":65536,"Peer rank":3}'),
  (10, 1000340000, 1000358000, 59, NULL, NULL, 281546145665170, NULL, 34, 1, NULL),
  (11, 1000370000, 1000371000, 59, NULL, NULL, 281546145665170, NULL, 36, 1, NULL),
  (12, 1000372000, 1000375000, 59, NULL, NULL, 281546145665170, NULL, 35, 1,
   '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":32768,"Peer rank":1}'),
  (13, 1000376000, 1000379000, 59, NULL, NULL, 281546145665170, NULL, 37, 1,
   '{"NCCL communicator ID":7377214405313347,"Message size [bytes]":32768,"Peer rank":1}'),
  (14, 1000380000, 1000395000, 59, NULL, NULL, 281546145665170, NULL, 34, 1, NULL),
  (15, 1000900000, NULL, 34, NULL, 'checkpoint', 281546145665170, NULL, NULL, 0, NULL),
  (16, 1000950000, NULL, 59, NULL, 'dangling', 281546145665170, NULL, NULL, 0, NULL);
UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start=-9223372036854775808 WHERE correlationId=101;
UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end=9223372036854775807 WHERE correlationId=102;
UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start=9223372036854775807, end=-9223372036854775808;
