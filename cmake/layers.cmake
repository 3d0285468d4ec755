# The layers of mmgen as libraries the build holds to the rules of docs/architecture.md.
#
# mmgen_layer(NAME FOLDER [LOWER_LIBRARY]) makes mmgen_NAME from FOLDER/**.cpp, linked to the layer
# below it. Each layer compiles against an include view, ${MMGEN_LAYER_VIEWS}/FOLDER, that holds
# links to its own folder and the folders of the layers declared before it, and nothing else: an
# `#include "pipeline/..."` in attention/ finds no such file and the build stops there. (Include
# the source root instead, and a wrong include would compile and link quietly.)
#
# CUDA-only code (needs nvcc, built with -DMMGEN_CUDA=ON): .cu files, anything under a cuda/
# folder, and files named *_cuda.cpp. Each joins the library of the layer it lives in.
set(MMGEN_LAYER_VIEWS ${CMAKE_BINARY_DIR}/layers)
set(MMGEN_LAYER_FOLDERS "")

# The headers nearly every file includes, through core/ and pipeline/ headers, precompiled
# (MMGEN_PCH) once per optimisation level (mmgen_layer): nlohmann/json.hpp alone is 133k
# preprocessed lines, spdlog 98k, fmt 70k, <filesystem> 59k, so each of the executable's 240 files
# spent most of its compile time parsing them again (docs/performance-history.md, "Build time").
# C++ only: .cu files build without.
set(MMGEN_PCH_HEADERS algorithm filesystem functional map memory optional string vector
    fmt/format.h nlohmann/json.hpp spdlog/spdlog.h)
# mmgen_precompile(TARGET [HEADER...]): those headers and the extra ones (names as in <...>).
function(mmgen_precompile target)
  if(MMGEN_PCH)
    set(entries "")
    foreach(header ${MMGEN_PCH_HEADERS} ${ARGN})
      # $<ANGLE-R>: a bare '>' would end the generator expression.
      list(APPEND entries "$<$<COMPILE_LANGUAGE:CXX>:<${header}$<ANGLE-R>>")
    endforeach()
    target_precompile_headers(${target} PRIVATE ${entries})
  endif()
endfunction()

# mmgen_layer(NAME FOLDER [GLUE] LOWER...): the library mmgen_NAME of FOLDER's files, linking the
# layers below. GLUE marks a layer with no inner loop that matters beside a transformer's
# (pipeline/: plans, estimates, schedulers, output; generate/: the CLI): at -O1 its files compile in
# two thirds of -O3's time (docs/performance-history.md, "Build time"), and IEEE arithmetic (no
# fast-math, no contraction) gives the same numbers at every level.
function(mmgen_layer name folder)
  cmake_parse_arguments(PARSE_ARGV 2 layer "GLUE" "" "")
  set(lower ${layer_UNPARSED_ARGUMENTS})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${folder}/*.cpp
       ${CMAKE_SOURCE_DIR}/${folder}/*.cu)
  list(FILTER sources EXCLUDE REGEX "/generate/main\\.cpp$")
  if(NOT MMGEN_CUDA)
    list(FILTER sources EXCLUDE REGEX "(/cuda/|_cuda\\.cpp$|\\.cu$)")
  endif()
  if(NOT MMGEN_OPENCV)
    # (output_no_opencv.cpp stays: it holds the stand-ins that say how to get a picture anyway.)
    list(FILTER sources EXCLUDE REGEX "/output_opencv\\.cpp$")
  endif()

  # The view: this layer's folder and every lower one.
  set(folders ${MMGEN_LAYER_FOLDERS} ${folder})
  set(MMGEN_LAYER_FOLDERS ${folders} PARENT_SCOPE)
  set(view ${MMGEN_LAYER_VIEWS}/${folder})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(allowed ${folders})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${allowed} ${view}/${allowed} SYMBOLIC)
  endforeach()

  add_library(mmgen_${name} STATIC ${sources})
  # A static library links nothing: its files need not wait for the layers below to be archived,
  # so on 2 cores the layers' batches overlap instead of running one layer at a time.
  set_target_properties(mmgen_${name} PROPERTIES OPTIMIZE_DEPENDENCIES ON)
  target_include_directories(mmgen_${name} PRIVATE ${view})
  if(layer_GLUE)
    target_compile_options(mmgen_${name}
                           PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O1>)
    set(group GLUE)
  else()
    set(group FAST)
  endif()
  # One precompiled header per optimisation level, made by the lowest layer of the level and
  # reused by the others: each further copy cost about 5 s of a core. Not one for all: GCC takes
  # an -O3 header in an -O1 file (-Winvalid-pch stays quiet), but in a whole build the pipeline
  # layer's files then took 50 s instead of 31 s, as if the header's inline code kept its -O3.
  if(MMGEN_PCH)
    if(MMGEN_PCH_OWNER_${group})
      target_precompile_headers(mmgen_${name} REUSE_FROM ${MMGEN_PCH_OWNER_${group}})
    else()
      mmgen_precompile(mmgen_${name})
      set(MMGEN_PCH_OWNER_${group} mmgen_${name} PARENT_SCOPE)
    endif()
  endif()
  if(MMGEN_UNITY)
    # A unity build: the C++ files of a layer compile 16 to a translation unit, so the headers
    # every file includes are parsed once per batch (the executable's build on 2 cores: 2 min 40 s
    # instead of about 3 min 50 s). File-local names must therefore be distinct within a layer
    # (the build says which collide). -DMMGEN_UNITY=OFF rebuilds single files faster while
    # editing.
    set_target_properties(mmgen_${name} PROPERTIES UNITY_BUILD ON
                          UNITY_BUILD_BATCH_SIZE ${MMGEN_UNITY_BATCH})
    # The CUDA build's files (cuBLASLt plans, kernel launchers, the .cu kernels wherever they
    # live) stay single: only the test command compiles them, each keeps its own file-local names,
    # and a CMake that batches CUDA too (the device's does) would join the backends' kernels.
    set(cuda_sources ${sources})
    list(FILTER cuda_sources INCLUDE REGEX "(/cuda/|_cuda\\.cpp$|\\.cu$)")
    if(cuda_sources)
      set_source_files_properties(${cuda_sources} TARGET_DIRECTORY mmgen_${name}
                                  PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endif()
  if(lower)
    target_link_libraries(mmgen_${name} PUBLIC ${lower})
  endif()
  if(MMGEN_CUDA)
    # The .cu files are C++17 (CMake 3.25 knows no CUDA20), built for Hopper (cmake/cuda.cmake);
    # position-independent, as bench/cuda links them into a shared library.
    set_target_properties(mmgen_${name} PROPERTIES CUDA_ARCHITECTURES OFF CUDA_STANDARD 17
                          CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
    target_compile_options(mmgen_${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${MMGEN_CUDA_FLAGS}>)
  endif()
endfunction()
