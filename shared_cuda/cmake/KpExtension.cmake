# kp_add_extension(<target> [MODULE_NAME <name>] [CUTLASS] SOURCES <files...> [SM90A_SOURCES <files...>]
#                  INSTALL_DIR <python package dir>)
#
# The one way a kp package builds its native module. <target> is the CMake target, unique across
# the monorepo's combined build (kp_norm_C); MODULE_NAME the Python module's name (default _C):
# a pybind11 module of CUDA + C++ sources that links the CUDA runtime statically and NOT libtorch,
# so one wheel serves every torch version.
#
# CUTLASS (opt-in): the module's sources may include the CUTLASS 3.x / CuTe headers (kp/gemm/*.cuh
# builds on them). They come from the PyPI wheel `nvidia-cutlass` (headers only are used: its
# cutlass_library/source/include), which the package pins in its build-system.requires; found
# through the build's Python (no import: the wheel's Python deps need not be installed), or from
# KP_CUTLASS_INCLUDE_DIR (environment variable, else CMake cache variable: a folder holding cute/
# and cutlass/, e.g. a CUTLASS checkout's include/). Added as system includes (their warnings are
# not ours). See kp_find_cutlass below.
#
# SOURCES hold no arch-specific code (no wgmma, setmaxnreg, or CuTe's TMA atoms, which CUTLASS
# enables only under sm_90a): an arch-specific entry of the list ("90a") gives them the machine code
# of its base arch (sm_90), which is the same SASS (every kernel of kp-norm, kp-fused-mlp and
# kp-attention compared, 2026-11-29) and runs on the same GPUs, and comes from the same device pass
# as the compute_90 PTX: two passes of a file for the default list instead of three (a pass is a
# whole cicc run, ~80 s for one of kp-attention's backward files; ptxas takes 2-3 s of it). The
# comparison was of sm_90 and sm_90a; other arch-specific entries (100a) are treated alike.
#
# SM90A_SOURCES: sources whose kernels have bodies only for sm_90a (wgmma, TMA, setmaxnreg; the
# CUTLASS sm90 instantiations): where the build has 90a they are compiled for 90a alone, one device
# pass instead of one per arch (each pass parses and instantiates CUTLASS again, for empty bodies on
# the other archs); without 90a, for the build's archs like SOURCES, so the host code links. The
# host must never launch them elsewhere (kp/gemm/sm90_gemm.h's device checks). A module reports
# "90a" among compiled_arch_names() only when it has such sources, compiled for 90a.
#
# GPU architectures come from KP_CUDA_ARCHS (environment variable, else CMake cache variable), a
# ';' or ',' separated list. An entry "80" or "90a" means machine code (SASS) for that SM (for
# SOURCES, of its base arch: see above); an entry "90-virtual" means PTX for compute_90, which the
# driver JIT-compiles for newer GPUs. Default:
# "80;90a;90-virtual". No sm_86 / sm_89 machine code by default: sm_80's runs on every GPU of major 8
# (CUDA's binary compatibility within a major version), the kernels choose their tiles from the
# device's shared memory at run time, and each extra arch is a whole device pass of every TU (two
# of five passes of the release build; FlashAttention ships 80 + 90 likewise). KP_CUDA_ARCHS=89
# builds Ada's own. CI and local builds narrow it, e.g. KP_CUDA_ARCHS=90a (one arch, no PTX).
#
# manylinux: KP_GLIBC_STUBS (environment variable, else CMake cache variable) names a folder of glibc
# stub libraries made by `python tools/manylinux.py stubs DIR` (glibc 2.28 by default). The module
# then links against them instead of the build machine's glibc, so it needs the glibc symbol
# versions a build on glibc 2.28 would need; it links libstdc++ statically, with the symbols of every
# static library it takes in hidden, exports nothing but PyInit_<name> (module_exports.map), and
# gets glibc_compat.cpp. `tools/manylinux.py repair` checks and tags the wheel. docs/release.md,
# "manylinux wheels", says why and how.
include_guard(GLOBAL)

get_filename_component(KP_SHARED_CUDA_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(KP_SHARED_CUDA_DIR "${KP_SHARED_CUDA_DIR}" CACHE INTERNAL "shared_cuda root")
set(KP_CUDA_ARCHS_DEFAULT "80;90a;90-virtual")

# kp_enable_cuda(<package>): call at file scope, before kp_add_extension. Enables the CUDA language
# and sets KP_HAVE_CUDA; without a CUDA compiler (or with KP_SKIP_CUDA_BUILD=1) it sets KP_HAVE_CUDA
# to OFF and says, once, what is missing: the package then installs its Triton and reference
# levels only. (A macro: enable_language must run at file scope.)
macro(kp_enable_cuda package)
  set(KP_HAVE_CUDA OFF)
  if("$ENV{KP_SKIP_CUDA_BUILD}" MATCHES "^(1|ON|on|true|TRUE|yes)$" OR KP_SKIP_CUDA_BUILD)
    message(WARNING "kp: KP_SKIP_CUDA_BUILD is set: ${package} is built without its CUDA level "
                    "(the Triton and reference levels work; `python -m kp_core` says which level runs).")
  else()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      enable_language(CUDA)
      set(KP_HAVE_CUDA ON)
    else()
      message(WARNING "kp: no CUDA compiler (nvcc) found: ${package} is installed without its CUDA level "
                      "(the Triton and reference levels work). For the CUDA kernels, install a CUDA 12.x/13.x "
                      "toolkit, put its nvcc on PATH (or name it in CUDACXX) and reinstall; without a system "
                      "toolkit, `KP_CUDA=pypi-13.0 nox -s build` builds wheels with NVIDIA's compiler from PyPI. "
                      "docs/install.md has the details.")
    endif()
  endif()
endmacro()

function(kp_add_extension target)
  cmake_parse_arguments(ARG "CUTLASS" "INSTALL_DIR;MODULE_NAME" "SOURCES;SM90A_SOURCES" ${ARGN})
  if(NOT ARG_MODULE_NAME)
    set(ARG_MODULE_NAME _C)
  endif()
  if(NOT ARG_SOURCES OR NOT ARG_INSTALL_DIR)
    message(FATAL_ERROR "kp_add_extension(${target}) needs SOURCES and INSTALL_DIR")
  endif()

  find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG REQUIRED)  # scikit-build-core / pip's pybind11 provide the config
  find_package(CUDAToolkit REQUIRED)      # headers for the C++ (bindings) sources

  # --- architectures ------------------------------------------------------------------------------
  if(DEFINED ENV{KP_CUDA_ARCHS} AND NOT "$ENV{KP_CUDA_ARCHS}" STREQUAL "")
    set(archs "$ENV{KP_CUDA_ARCHS}")
  elseif(KP_CUDA_ARCHS)
    set(archs "${KP_CUDA_ARCHS}")
  else()
    set(archs "${KP_CUDA_ARCHS_DEFAULT}")
  endif()
  string(REPLACE "," ";" archs "${archs}")
  set(has_90a_real OFF) # the list asks for sm_90a machine code: SM90A_SOURCES compile for it alone
  set(sass "")          # numbers for compiled_archs(): 90a -> 90
  set(ptx "")
  set(portable_archs "")  # for SOURCES: "90a-real" -> "90-real", "90a-virtual" -> "90-virtual" (top of this file)
  foreach(a IN LISTS archs)
    string(STRIP "${a}" a)
    if(a STREQUAL "")
      continue()
    elseif(a MATCHES "^([0-9]+[af]?)-virtual$")
      string(REGEX REPLACE "[af]$" "" n "${CMAKE_MATCH_1}")
      list(APPEND portable_archs "${n}-virtual")  # base-arch PTX: the JIT can take it to newer GPUs
      list(APPEND ptx "${n}")
    elseif(a MATCHES "^([0-9]+[af]?)(-real)?$")
      if(CMAKE_MATCH_1 STREQUAL "90a")
        set(has_90a_real ON)
      endif()
      string(REGEX REPLACE "[af]$" "" n "${CMAKE_MATCH_1}")
      list(APPEND portable_archs "${n}-real")
      list(APPEND sass "${n}")
    else()
      message(FATAL_ERROR "KP_CUDA_ARCHS: cannot read '${a}' (want e.g. 80, 90a, 90-virtual)")
    endif()
  endforeach()
  if(NOT portable_archs)
    message(FATAL_ERROR "KP_CUDA_ARCHS ('${archs}') lists no arch (want e.g. 80;90a;90-virtual)")
  endif()
  list(REMOVE_DUPLICATES sass)
  list(REMOVE_DUPLICATES portable_archs)
  list(REMOVE_DUPLICATES ptx)
  string(REPLACE ";" "," sass_csv "${sass}")
  string(REPLACE ";" "," ptx_csv "${ptx}")
  # One name a number: "90a" where the module has SM90A_SOURCES compiled for it (its other kernels
  # are sm_90, the same code), else the number.
  set(sass_names "")
  foreach(n IN LISTS sass)
    if(n STREQUAL "90" AND ARG_SM90A_SOURCES AND has_90a_real)
      list(APPEND sass_names "90a")
    else()
      list(APPEND sass_names "${n}")
    endif()
  endforeach()
  list(TRANSFORM sass_names PREPEND "\"")
  list(TRANSFORM sass_names APPEND "\"")
  string(REPLACE ";" "," sass_names_csv "${sass_names}")  # "80","90a": an initializer list
  message(STATUS "kp: ${target} for CUDA archs ${portable_archs}")

  # --- the module -----------------------------------------------------------------------------------
  # NO_EXTRAS: no -flto (nvcc objects don't take part) and no strip (keep -lineinfo symbols for ncu).
  pybind11_add_module(${target} MODULE NO_EXTRAS ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME "${ARG_MODULE_NAME}"
    CUDA_RUNTIME_LIBRARY Static)         # no libcudart.so at run time: only the driver is needed
  set(cutlass_include "")
  if(ARG_CUTLASS)
    kp_find_cutlass(${target} cutlass_include)
  endif()
  # The arch lists for kp/py_module.h, as a generated header: a comma list passed as -D reaches
  # nvcc's own option parser, which splits it at the commas (80,86 -> "macro names must be
  # identifiers"). Written only when it changes, so a reconfigure rebuilds nothing.
  set(gen "${CMAKE_CURRENT_BINARY_DIR}/${target}_include")
  file(CONFIGURE OUTPUT "${gen}/kp/archs.h" CONTENT
    "// Generated by kp_add_extension(): the archs this module was compiled for.\n#pragma once\n#define KP_SASS_ARCHS ${sass_csv}\n#define KP_PTX_ARCHS ${ptx_csv}\n#define KP_SASS_ARCH_NAMES ${sass_names_csv}\n")
  set(objects ${target})
  if(ARG_SM90A_SOURCES)
    add_library(${target}_sm90a OBJECT ${ARG_SM90A_SOURCES})
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${target}_sm90a>)
    list(APPEND objects ${target}_sm90a)
  endif()
  foreach(t IN LISTS objects)
    _kp_compile_settings(${t} "${portable_archs}" "${gen}" "${cutlass_include}")
  endforeach()
  if(ARG_SM90A_SOURCES AND has_90a_real)
    set_target_properties(${target}_sm90a PROPERTIES CUDA_ARCHITECTURES "90a-real")
    message(STATUS "kp: ${target}'s sm90a-only sources for CUDA arch 90a-real alone")
  endif()
  kp_manylinux_link(${target})
  install(TARGETS ${target} LIBRARY DESTINATION "${ARG_INSTALL_DIR}")
endfunction()

# The compile settings of every object of a module: its own sources and its sm90a-only object
# library (the same standard, visibility, includes and flags, so their objects link as one).
function(_kp_compile_settings tgt cuda_archs gen cutlass_include)
  set_target_properties(${tgt} PROPERTIES
    CUDA_ARCHITECTURES "${cuda_archs}"
    POSITION_INDEPENDENT_CODE ON
    CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${tgt} PRIVATE "${KP_SHARED_CUDA_DIR}/include" ${CUDAToolkit_INCLUDE_DIRS} "${gen}")
  if(cutlass_include)
    target_include_directories(${tgt} SYSTEM PRIVATE "${cutlass_include}")
  endif()
  target_compile_options(${tgt} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo --expt-relaxed-constexpr>
    $<$<COMPILE_LANGUAGE:CXX>:-O3>)
endfunction()

# kp_find_cutlass(<target> <out_var>): the include folder of the CUTLASS 3.x / CuTe headers, or a
# FATAL_ERROR that says what to install. KP_CUTLASS_INCLUDE_DIR (environment, else cache variable)
# wins; else the `nvidia-cutlass` wheel of the build's Python (pip's build environment, or the
# environment of a --no-build-isolation build), located with importlib.util.find_spec: importing
# cutlass_library would run its generator modules and need the wheel's Python dependencies.
set(KP_CUTLASS_MIN_VERSION 3.5)  # sm90 CollectiveBuilders with epilogue visitor trees
function(kp_find_cutlass target out_var)
  if(DEFINED ENV{KP_CUTLASS_INCLUDE_DIR} AND NOT "$ENV{KP_CUTLASS_INCLUDE_DIR}" STREQUAL "")
    set(dir "$ENV{KP_CUTLASS_INCLUDE_DIR}")
    set(from "KP_CUTLASS_INCLUDE_DIR")
  elseif(KP_CUTLASS_INCLUDE_DIR)
    set(dir "${KP_CUTLASS_INCLUDE_DIR}")
    set(from "KP_CUTLASS_INCLUDE_DIR")
  else()
    set(find [=[
import importlib.util, os
spec = importlib.util.find_spec("cutlass_library")
if spec and spec.submodule_search_locations:
    print(os.path.join(list(spec.submodule_search_locations)[0], "source", "include"), end="")
]=])
    execute_process(COMMAND "${Python_EXECUTABLE}" -c "${find}" OUTPUT_VARIABLE dir ERROR_VARIABLE err
                    RESULT_VARIABLE rc)
    set(from "the nvidia-cutlass wheel of ${Python_EXECUTABLE}")
  endif()
  if(NOT dir OR NOT EXISTS "${dir}/cute/tensor.hpp" OR NOT EXISTS "${dir}/cutlass/version.h")
    message(FATAL_ERROR
      "kp: ${target} needs the CUTLASS 3.x / CuTe headers and found none (${from}: '${dir}'). "
      "Install NVIDIA's PyPI package `nvidia-cutlass` (the version this package pins in its pyproject.toml "
      "build-system.requires, e.g. `pip install --no-deps nvidia-cutlass==4.2.0.0`) into the Python that builds "
      "(pip's isolated builds install it themselves; --no-build-isolation builds need it installed), or set "
      "KP_CUTLASS_INCLUDE_DIR to a folder holding cute/ and cutlass/.")
  endif()
  file(STRINGS "${dir}/cutlass/version.h" lines REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) [0-9]+")
  set(version "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "CUTLASS_${part} ([0-9]+)" _ "${lines}")
    list(APPEND version "${CMAKE_MATCH_1}")
  endforeach()
  string(REPLACE ";" "." version "${version}")
  if(version VERSION_LESS KP_CUTLASS_MIN_VERSION)
    message(FATAL_ERROR "kp: ${target} needs CUTLASS >= ${KP_CUTLASS_MIN_VERSION}, found ${version} in ${dir} "
                        "(${from}); install the nvidia-cutlass version this package pins")
  endif()
  message(STATUS "kp: ${target} uses CUTLASS ${version} from ${dir}")
  set(${out_var} "${dir}" PARENT_SCOPE)
endfunction()

# The manylinux link of a module (KP_GLIBC_STUBS, see the top of this file); nothing without it.
function(kp_manylinux_link target)
  if(DEFINED ENV{KP_GLIBC_STUBS} AND NOT "$ENV{KP_GLIBC_STUBS}" STREQUAL "")
    set(stubs "$ENV{KP_GLIBC_STUBS}")
  elseif(KP_GLIBC_STUBS)
    set(stubs "${KP_GLIBC_STUBS}")
  else()
    return()
  endif()
  get_filename_component(stubs "${stubs}" ABSOLUTE)
  if(NOT EXISTS "${stubs}/libc.so" OR NOT EXISTS "${stubs}/GLIBC_VERSION")
    message(FATAL_ERROR "KP_GLIBC_STUBS=${stubs}: no glibc stubs there; make them with "
                        "`python tools/manylinux.py stubs ${stubs}` (needs `pip install ziglang`)")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
    message(FATAL_ERROR "KP_GLIBC_STUBS: the manylinux link needs gcc or clang (not ${CMAKE_CXX_COMPILER_ID})")
  endif()
  file(STRINGS "${stubs}/GLIBC_VERSION" glibc LIMIT_COUNT 1)
  message(STATUS "kp: ${target} links against the glibc stubs in ${stubs} (${glibc}), libstdc++ static")
  # -L first: -lc, -lpthread, -ldl, -lrt, -lm find the stubs' linker scripts before the system's.
  # libgcc stays shared (libgcc_s.so.1, which manylinux allows): gcc 12's static unwinder
  # (libgcc_eh.a) calls glibc 2.35's _dl_find_object.
  # module_exports.map: PyInit_<name> is the only symbol the module exports.
  target_sources(${target} PRIVATE "${KP_SHARED_CUDA_DIR}/cmake/glibc_compat.cpp")
  target_link_options(${target} PRIVATE "-L${stubs}" -static-libstdc++ "LINKER:--exclude-libs,ALL"
                      "LINKER:--version-script=${KP_SHARED_CUDA_DIR}/cmake/module_exports.map")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${KP_SHARED_CUDA_DIR}/cmake/module_exports.map")
endfunction()
