# Installing Braid (docs/install.md): `cmake --install build --prefix P` and the Debian package
# (`cpack -G DEB` in the build directory) put, under P (the package: /usr):
#   bin/braid, bin/braid-view
#   lib/braid/libbraid_capture.so        the capture agent, which is also NCCL's profiler plugin,
#   lib/braid/libnccl-profiler-braid.so  under the name NCCL gives plugins (NCCL_PROFILER_PLUGIN=braid)
#   lib/systemd/system/braid-daemon.service  the node daemon's unit (docs/daemon.md), ExecStart
#                                            naming P/bin/braid
#   share/braid/assets                   the samples `braid demo` runs on
#   share/doc/braid                      README.md and docs/
# The layout is relocatable: braid finds the agent from its own executable
# (capture/CMakeLists.txt, BRAID_AGENT_FROM_EXE) and its assets likewise (app/braid/cli.cc), so
# the tree works wherever it is put or moved. Included at the end of the top-level CMakeLists.txt.

# Libraries found outside the build tree (the CUDA runtime, NCCL and CUPTI under
# /usr/local/cuda) stay on the installed binaries' run path; LD_LIBRARY_PATH still comes first.
set_target_properties(braid PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS braid RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET braid-view)
  set_target_properties(braid-view PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS braid-view RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
if(TARGET braid_capture)
  install(TARGETS braid_capture LIBRARY DESTINATION ${BRAID_INSTALL_AGENT_DIR})
  install(CODE "
    set(_dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${BRAID_INSTALL_AGENT_DIR}\")
    message(STATUS \"Installing: \${_dir}/libnccl-profiler-braid.so -> libbraid_capture.so\")
    file(CREATE_LINK libbraid_capture.so \"\${_dir}/libnccl-profiler-braid.so\" SYMBOLIC)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_dir}/libnccl-profiler-braid.so\")")
endif()

# The daemon's unit, made at install time: its ExecStart names the braid of this prefix.
set(_unit_in ${CMAKE_SOURCE_DIR}/capture/daemon/braid-daemon.service.in)
install(CODE "
  set(BRAID_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  set(_unit \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/braid-daemon.service\")
  message(STATUS \"Installing: \${_unit}\")
  configure_file(\"${_unit_in}\" \"\${_unit}\" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_unit}\")")

install(DIRECTORY ${CMAKE_SOURCE_DIR}/assets/ DESTINATION ${BRAID_INSTALL_ASSETS_DIR})
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The Debian package: `cpack -G DEB` in the build directory (offline). Its dependencies are the
# Debian packages of the shared libraries the binaries load, found by dpkg-shlibdeps; the CUDA
# runtime, NCCL and CUPTI come with the CUDA toolkit or driver, not from Debian, and are left out.
set(CPACK_PACKAGE_NAME braid)
set(CPACK_PACKAGE_VENDOR "Braid")
set(CPACK_PACKAGE_CONTACT "Braid maintainers <braid@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Profiler and schedule explorer for multi-GPU training jobs (CLI, GUI, capture agent, node daemon)")
set(CPACK_GENERATOR DEB)
# Installed into a staging DESTDIR with the package's own prefix, so the unit's ExecStart names
# /usr/bin/braid (without DESTDIR, CPack's install prefix is the staging folder itself).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
include(CPack)
