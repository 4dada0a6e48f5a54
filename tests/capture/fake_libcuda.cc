// A stand-in for the CUDA driver's libcuda.so.1 with the three calls `braid record` probes before
// it injects the agent (capture::capture_unavailable_reason): cuInit succeeds and one device is
// visible. On LD_LIBRARY_PATH it lets the documentation tests run `braid record` on a CPU machine
// around the fake CUDA job (fake_cuda_job.cc), whose CUDA runtime is fake_cupti.cc's and never
// loads a driver.
#define FAKE extern "C" __attribute__((visibility("default")))

FAKE int cuInit(unsigned) { return 0; }
FAKE int cuDeviceGetCount(int* n) {
  *n = 1;
  return 0;
}
FAKE int cuGetErrorName(int, const char** name) {
  *name = "CUDA_SUCCESS";
  return 0;
}
