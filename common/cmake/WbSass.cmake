# The SASS view: each chapter's kernel objects disassembled (cuobjdump -sass) into the table of
# its rungs' main-loop instruction mix, chNN_sass.csv beside the chapter program, which
# `chNN --sass` prints, the docs draw (docs/sass.cmake) and the nvcc/sass test holds the pages'
# counts to (common/cmake/sass_mix.py says how a rung's kernel and its main loop are found).
# It reads the objects nvcc already made: nothing is compiled again.
#
# cuobjdump and the nvdisasm it calls come with a full CUDA toolkit; a toolkit put together from
# pip's wheels lacks them, and `./wb deps` installs them the same way (nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, into .deps/cuda-tools/nvidia/cuNN/bin), where this file looks too. The tables need sm_90 code: CMAKE_CUDA_ARCHITECTURES must name 90 (its default).
include_guard(GLOBAL)

set(_wb_sass_script ${CMAKE_CURRENT_LIST_DIR}/sass_mix.py)
set(WB_SASS_MISSING "")  # why there are no tables, when there are none; else empty
if(WB_HAVE_CUDA)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  string(REGEX MATCH "^[0-9]+" _wb_cuda_major "${CMAKE_CUDA_COMPILER_VERSION}")
  # nvcc's folder, then where ./wb installs them (.deps/cuda-tools), then a python3's
  # site-packages (pip install without --target).
  set(_wb_sass_hints ${CUDAToolkit_BIN_DIR}
                     ${PROJECT_SOURCE_DIR}/.deps/cuda-tools/nvidia/cu${_wb_cuda_major}/bin)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c
                            "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                    OUTPUT_VARIABLE _wb_purelib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    list(APPEND _wb_sass_hints ${_wb_purelib}/nvidia/cu${_wb_cuda_major}/bin)
  endif()
  find_program(WB_CUOBJDUMP cuobjdump HINTS ${_wb_sass_hints}
               DOC "cuobjdump, for the SASS view (python3 -m pip install nvidia-cuda-cuobjdump)")
  find_program(WB_NVDISASM nvdisasm HINTS ${_wb_sass_hints}
               DOC "nvdisasm, which cuobjdump -sass runs (python3 -m pip install nvidia-cuda-nvdisasm)")
  set(_wb_sass_install "./wb deps installs them (python3 -m pip install --target .deps/cuda-tools 'nvidia-cuda-cuobjdump==${_wb_cuda_major}.*' 'nvidia-cuda-nvdisasm==${_wb_cuda_major}.*')")
  if(NOT Python3_Interpreter_FOUND)
    set(WB_SASS_MISSING "no python3 was found to run common/cmake/sass_mix.py")
  elseif(NOT WB_CUOBJDUMP OR NOT WB_NVDISASM)
    set(WB_SASS_MISSING "cuobjdump or nvdisasm was not found when the build was configured: ${_wb_sass_install}")
  elseif(NOT CMAKE_CUDA_ARCHITECTURES MATCHES "(^|;)90")
    set(WB_SASS_MISSING "the kernels are not compiled for sm_90 (CMAKE_CUDA_ARCHITECTURES is ${CMAKE_CUDA_ARCHITECTURES}), whose code the tables show")
  endif()
  if(WB_SASS_MISSING)
    message(WARNING "SASS view: ${WB_SASS_MISSING}; no chNN_sass.csv tables, and the nvcc/sass test fails")
  endif()
endif()

# chNN_sass.csv for chapter `chapter` (program `ch`), from its kernel objects and those of the
# earlier chapters `kernels_from` whose rungs it names again; `shown` are instances its rows show
# instead of the script's rule (wb_add_chapter's SASS_SHOWN). Built with the program.
function(_wb_sass_table chapter ch rung_files kernels_from shown)
  if(NOT WB_HAVE_CUDA OR WB_SASS_MISSING OR NOT TARGET ${ch}_cuda)
    return()
  endif()
  set(csv ${CMAKE_CURRENT_BINARY_DIR}/${ch}_sass.csv)
  set(args --chapter ${chapter} $<TARGET_OBJECTS:${ch}_cuda>)
  set(depends ${ch}_cuda)
  foreach(dep IN LISTS kernels_from)
    string(SUBSTRING ${dep} 0 2 number)
    if(TARGET ch${number}_cuda)
      list(APPEND args --chapter ${dep} $<TARGET_OBJECTS:ch${number}_cuda>)
      list(APPEND depends ch${number}_cuda)
      file(GLOB dep_rungs ${PROJECT_SOURCE_DIR}/chapters/${dep}/rungs/*.cuh)
      list(APPEND depends ${dep_rungs})
    endif()
  endforeach()
  if(shown)
    list(APPEND args --shown ${shown})
  endif()
  get_filename_component(nvdisasm_dir ${WB_NVDISASM} DIRECTORY)
  add_custom_command(OUTPUT ${csv}
    COMMAND ${CMAKE_COMMAND} -E env NVDISASM_PATH=${nvdisasm_dir}
            ${Python3_EXECUTABLE} ${_wb_sass_script} ${args} --cuobjdump ${WB_CUOBJDUMP}
            --source-dir ${PROJECT_SOURCE_DIR} --csv ${csv} --quiet
    DEPENDS ${depends} ${rung_files} ${_wb_sass_script}
            ${PROJECT_SOURCE_DIR}/common/cmake/kernel_resources.py
    COMMAND_EXPAND_LISTS VERBATIM
    COMMENT "SASS view: ${ch}_sass.csv (cuobjdump -sass of ${ch}'s kernels)")
  add_custom_target(${ch}_sass DEPENDS ${csv})
  add_dependencies(${ch} ${ch}_sass)
  set_property(GLOBAL APPEND PROPERTY WB_SASS_CSVS ${csv})
endfunction()
