/* Preloaded only into the sanitized build's tests that start MPI ranks or a GL context
 * (tests/CMakeLists.txt, BRAID_TEST_KEEP_LOADED).
 *
 * OpenMPI dlcloses its MCA components and Mesa its DRI driver before the process exits, so the
 * allocations they keep for the life of the process show up in LeakSanitizer's report with
 * "<unknown module>" frames, which no suppression can name. Here dlclose keeps every module
 * mapped, so the frames carry the module's name and scripts/sanitize.supp suppresses exactly those
 * third-party libraries. Braid's own code is linked in, never dlopened, in these tests. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}

/* Some of OpenMPI's strings are allocated by vasprintf, whose libc frames have no frame pointers:
 * the fast unwinder stops there and the stack never reaches the OpenMPI library that asked. Full
 * unwinding on malloc (only in these tests: it is slower) reaches it. LSAN_OPTIONS still
 * overrides this default. */
const char* __lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }
