# FgPackage.cmake - libfg, the one library other programs link, and its installation.
#
# libfg is made of the objects of every module library (core, format, quant, store, pager, text,
# convert, compute, engine), compiled once: the module libraries stay what the tools and tests
# link, and libfg reuses their objects ($<TARGET_OBJECTS:...>), so the modules are compiled as
# position-independent code (with -fno-semantic-interposition, so calls inside a module compile
# as they did).
#
# Exported names: only fg_-prefixed symbols leave the library. The modules call one another
# through over a hundred global helpers without the prefix (io_fail, cat_get, ...); they are bound
# inside libfg without renaming anything:
#   - libfg.so: a linker version script (cmake/fg.map: global fg_*, local everything else);
#   - libfg.a: all objects are linked into one relocatable object (ld -r), where the helpers'
#     references are already resolved, and objcopy then makes every defined global that does
#     not start with fg_ local (--wildcard --keep-global-symbol=fg_*); the archive holds that
#     single object.
# tests/install/symbols.sh checks both with nm (ctest install_symbols).
#
# Installed: bin/ (fg-convert, fg-infer, fg-inspect, fg-sample, fg-tokenize),
# lib/libfg.so.MAJOR.MINOR.PATCH (+ soname link libfg.so.MAJOR and libfg.so),
# lib/libfg.a, include/fg/<public headers>, lib/pkgconfig/fg.pc, lib/cmake/fg/ (fgConfig.cmake,
# fgConfigVersion.cmake, fgTargets*.cmake: targets fg::fg and fg::fg_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FG_MODULE_LIBS fg_core fg_format fg_quant fg_store fg_pager fg_text fg_compute fg_model
    fg_prefix fg_convert fg_engine fg_policy fg_jobs fg_runner)
if(TARGET fg_cudadev)
  list(INSERT FG_MODULE_LIBS 1 fg_cudadev)
endif()
# A module library that one of these links must be in the list too (a new module added to the
# build and not here would leave libfg with undefined references).
foreach(lib IN LISTS FG_MODULE_LIBS)
  get_target_property(deps ${lib} LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    if(TARGET ${dep} AND dep MATCHES "^fg_")
      get_target_property(type ${dep} TYPE)
      if(type STREQUAL "STATIC_LIBRARY" AND NOT dep IN_LIST FG_MODULE_LIBS)
        message(FATAL_ERROR "${lib} links ${dep}: add it to FG_MODULE_LIBS in ${CMAKE_CURRENT_LIST_FILE}")
      endif()
    endif()
  endforeach()
endforeach()
set_target_properties(${FG_MODULE_LIBS} PROPERTIES POSITION_INDEPENDENT_CODE ON)
include(CheckCCompilerFlag)
check_c_compiler_flag(-fno-semantic-interposition FG_HAVE_NO_SEMANTIC_INTERPOSITION)
if(FG_HAVE_NO_SEMANTIC_INTERPOSITION)
  foreach(lib IN LISTS FG_MODULE_LIBS)
    target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:C>:-fno-semantic-interposition>)
  endforeach()
endif()

# The public headers: each module's API, plus what they include (engine.h includes model.h,
# plan.h, policy.h, sample.h and stage.h; model.h includes backend.h). They include one another by bare name, which resolves
# next to the including file in include/fg/; programs write #include <fg/engine.h>.
# tests/install/install.sh checks that each compiles alone (C, and C++ when there is a C++
# compiler) and that none includes a header missing from include/fg/.
set(FG_PUBLIC_HEADERS core/fg_error.h core/fg_device.h core/fg_version.h format/fgt.h quant/quant.h store/store.h pager/pager.h
    text/tokenizer.h text/chat.h compute/backend.h compute/sample.h model/model.h model/model_open.h engine/policy.h
    engine/plan.h engine/plan_model.h engine/stage.h engine/engine.h prefix/prefix.h
    jobs/jobs.h jobs/request.h jobs/openai.h runner/runner.h runner/runner_follow.h
    runner/session.h
    policy/policy_search.h)
# The same layout in the build tree (build/include/fg/), for the in-tree examples.
set(FG_BUILD_INCLUDE ${CMAKE_BINARY_DIR}/include)
foreach(h IN LISTS FG_PUBLIC_HEADERS)
  get_filename_component(name ${h} NAME)
  configure_file(${h} ${FG_BUILD_INCLUDE}/fg/${name} COPYONLY)
endforeach()

set(FG_OBJECTS)
foreach(lib IN LISTS FG_MODULE_LIBS)
  list(APPEND FG_OBJECTS $<TARGET_OBJECTS:${lib}>)
endforeach()

# What libfg needs from the system (the union of the modules' link lines).
set(FG_DEP_LIBS PkgConfig::XXHASH PkgConfig::LMDB ${URING_LIB} PkgConfig::OPENBLAS
    PkgConfig::JANSSON PkgConfig::PCRE2 PkgConfig::UTF8PROC ${GLPK_LIB} m Threads::Threads)
set(FG_DEP_INSTALL fg::dep_xxhash fg::dep_lmdb fg::dep_uring fg::dep_openblas fg::dep_jansson
    fg::dep_pcre2 fg::dep_utf8proc fg::dep_glpk m Threads::Threads)
set(FG_PC_REQUIRES_PRIVATE "libxxhash, lmdb, liburing, openblas, jansson, libpcre2-8, libutf8proc")
set(FG_PC_LIBS_PRIVATE "-lglpk -lm -pthread") # GLPK has no pkg-config file
# libfg.a's users link the static CUDA runtime: a program that never touches a GPU then needs no
# libcudart.so at run time (cudart_static opens the driver only when first called, and reports
# "no device" where there is none). libfg.so keeps the shared runtime (the tests' emulated CUDA
# runtime stands in for it).
set(FG_STATIC_DEP_LIBS ${FG_DEP_LIBS})
set(FG_STATIC_DEP_INSTALL ${FG_DEP_INSTALL})
if(FG_HAVE_CUDA) # nvcc's host code also needs the C++ runtime (static guards, unwinding)
  list(APPEND FG_DEP_LIBS CUDA::cudart ${CMAKE_DL_LIBS} stdc++)
  list(APPEND FG_STATIC_DEP_LIBS CUDA::cudart_static ${CMAKE_DL_LIBS} rt stdc++)
  list(APPEND FG_STATIC_DEP_INSTALL CUDA::cudart_static ${CMAKE_DL_LIBS} rt stdc++)
  set(FG_PC_LIBS_PRIVATE
      "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt -lstdc++ ${FG_PC_LIBS_PRIVATE}")
endif()

# ---- libfg.so
add_library(fg SHARED ${FG_OBJECTS})
set_target_properties(fg PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR} LINKER_LANGUAGE C
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/fg.map)
if(FG_HAVE_CUDA) # the CUDA runtime may lie outside the loader's paths
  set_target_properties(fg PROPERTIES INSTALL_RPATH ${CUDAToolkit_LIBRARY_DIR})
endif()
target_link_options(fg PRIVATE "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/fg.map")
if(NOT FG_SANITIZE AND NOT FG_FUZZ)
  target_link_options(fg PRIVATE "LINKER:-z,defs") # every dependency is on the link line
endif()
target_link_libraries(fg PRIVATE ${FG_DEP_LIBS})
target_include_directories(fg INTERFACE $<BUILD_INTERFACE:${FG_BUILD_INCLUDE}>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_dependencies(fg ${FG_MODULE_LIBS})

# ---- libfg.a: one relocatable object with only fg_ names global
if(NOT CMAKE_LINKER OR NOT CMAKE_OBJCOPY)
  message(FATAL_ERROR "libfg.a needs ld and objcopy (binutils): CMAKE_LINKER '${CMAKE_LINKER}', "
                      "CMAKE_OBJCOPY '${CMAKE_OBJCOPY}'")
endif()
set(FG_STATIC_OBJ ${CMAKE_CURRENT_BINARY_DIR}/fg_static.o)
add_custom_command(
  OUTPUT ${FG_STATIC_OBJ}
  COMMAND ${CMAKE_LINKER} -r -o ${FG_STATIC_OBJ}.tmp ${FG_OBJECTS}
  COMMAND ${CMAKE_OBJCOPY} --wildcard --keep-global-symbol=fg_* ${FG_STATIC_OBJ}.tmp
          ${FG_STATIC_OBJ}
  COMMAND ${CMAKE_COMMAND} -E remove ${FG_STATIC_OBJ}.tmp
  DEPENDS ${FG_MODULE_LIBS} ${FG_OBJECTS}
  COMMAND_EXPAND_LISTS VERBATIM
  COMMENT "Linking the objects of libfg.a into one, fg_ names global")
add_library(fg_static STATIC ${FG_STATIC_OBJ})
set_target_properties(fg_static PROPERTIES OUTPUT_NAME fg LINKER_LANGUAGE C EXPORT_NAME fg_static)
foreach(dep IN LISTS FG_STATIC_DEP_LIBS)
  target_link_libraries(fg_static INTERFACE $<BUILD_INTERFACE:${dep}>)
endforeach()
foreach(dep IN LISTS FG_STATIC_DEP_INSTALL)
  target_link_libraries(fg_static INTERFACE $<INSTALL_INTERFACE:${dep}>)
endforeach()
target_include_directories(fg_static INTERFACE $<BUILD_INTERFACE:${FG_BUILD_INCLUDE}>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# ---- install
install(TARGETS fg fg_static EXPORT fgTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${FG_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fg)
# The tools, linked against the module libraries (no libfg.so at run time); with CUDA they load
# the CUDA runtime, which may lie outside the loader's paths.
set(FG_TOOLS fg-convert fg-infer fg-inspect fg-sample fg-tokenize)
if(FG_HAVE_CUDA)
  set_target_properties(${FG_TOOLS} PROPERTIES INSTALL_RPATH ${CUDAToolkit_LIBRARY_DIR})
endif()
install(TARGETS ${FG_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(FG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fg)
install(EXPORT fgTargets NAMESPACE fg:: DESTINATION ${FG_CMAKE_DIR})
configure_package_config_file(cmake/fgConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/fgConfig.cmake
                              INSTALL_DESTINATION ${FG_CMAKE_DIR})
# 0.x: a new minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fgConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fgConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/fgConfigVersion.cmake DESTINATION ${FG_CMAKE_DIR})
# fg.pc finds its prefix from its own directory (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH FG_PC_RELPREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" FG_PC_RELPREFIX "${FG_PC_RELPREFIX}")
configure_file(cmake/fg.pc.in ${CMAKE_CURRENT_BINARY_DIR}/fg.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fg.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
