/* Preloaded only into the sanitized build's tests that start MPI ranks or a GL context
 * (tests/CMakeLists.txt, BRAID_TEST_KEEP_LOADED). Built twice: libbraid_keep_loaded.so for the
 * MPI suites, libbraid_keep_loaded_gl.so (BRAID_KEEP_LOADED_GL) for the GL suites.
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
#ifndef BRAID_KEEP_LOADED_GL
const char* __lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }
#endif
/* Not in the GL suites: Mesa's software rasterizer allocates on every frame, and full unwinding
 * of each of those makes braid-view too slow to draw its frames in the tests' time (300 s); the
 * caller frame the fast unwinder always records is already inside the kept-mapped driver or
 * libGLX, which scripts/sanitize.supp names. */
