# The chapter's exercise, for wb_add_chapter (WbChapter.cmake): its stub and learner binaries.
include_guard(GLOBAL)

# The chapter's kernels with the exercise file swapped for `exercise_header`: a sim library,
# and a cuda one when nvcc is there. The untouched stub only has to fail its sim checks
# (exercise-stub-fails runs the sim suite): its cuda side is the reference kernels, which
# saves CI an nvcc build of every chapter's kernels; a learner's file gets both.
# `kernels` are all the chapter's kernel files, `units` those compiled on their own
# (_wb_kernel_units). An exercise file that the chapter's other kernel files include (a helper
# every rung calls, chapter 08's warp_tile.cuh) is swapped where they include it: every unit
# is compiled again, with a folder first on the include path that holds `exercise_header`
# under the exercise file's own path (`rel`, from the project's root).
function(_wb_exercise_kernels ch suffix kernels units exercise_kernel exercise_header rel)
  set(headers ${units})
  list(TRANSFORM headers REPLACE "^${exercise_kernel}$" "${exercise_header}")
  set(shadow)
  foreach(kernel IN LISTS kernels)
    file(STRINGS ${kernel} includes_it REGEX "#include \"${rel}\"")
    if(includes_it)
      set(shadow ${CMAKE_CURRENT_BINARY_DIR}/exercise_${suffix}_include)
    endif()
  endforeach()
  if(shadow)
    get_filename_component(shadow_dir ${shadow}/${rel} DIRECTORY)
    file(MAKE_DIRECTORY ${shadow_dir})
    file(CREATE_LINK ${exercise_header} ${shadow}/${rel} SYMBOLIC)
    _wb_kernel_library(${ch}_sim_${suffix} CXX sim_${suffix} "${headers}")
    target_include_directories(${ch}_sim_${suffix} BEFORE PRIVATE ${shadow})
    set(compiled ${ch}_sim_${suffix})
  elseif(TARGET ${ch}_sim_shared)  # only the exercise's file compiled again
    _wb_kernel_library(${ch}_sim_${suffix}_file CXX sim_${suffix} "${exercise_header}")
    add_library(${ch}_sim_${suffix} INTERFACE)
    _wb_link_kernel_group(${ch}_sim_${suffix} ${ch}_sim_${suffix}_file ${ch}_sim_shared)
    set(compiled ${ch}_sim_${suffix}_file)
  else()
    _wb_kernel_library(${ch}_sim_${suffix} CXX sim_${suffix} "${headers}")
    set(compiled ${ch}_sim_${suffix})
  endif()
  set(libs ${ch}_sim_${suffix})
  if(WB_HAVE_CUDA AND suffix STREQUAL "stub")
    list(APPEND libs ${ch}_cuda)
  elseif(WB_HAVE_CUDA)
    _wb_kernel_library(${ch}_cuda_${suffix} CUDA cuda_${suffix} "${headers}")
    if(shadow)
      target_include_directories(${ch}_cuda_${suffix} BEFORE PRIVATE ${shadow})
    endif()
    # A stub leaves variables the missing lines would use: nvcc's "declared but never
    # referenced" (177) is expected there.
    target_compile_options(${ch}_cuda_${suffix} PRIVATE -diag-suppress=177)
    list(APPEND libs ${ch}_cuda_${suffix})
  endif()
  if(TARGET ${ch}_exercise_${suffix})  # the generated stub must exist before these compile
    foreach(lib IN LISTS libs compiled)
      if(lib MATCHES "_${suffix}(_file)?$")  # not the reference kernels a stub borrows
        get_target_property(type ${lib} TYPE)
        if(NOT type STREQUAL "INTERFACE_LIBRARY")
          add_dependencies(${lib} ${ch}_exercise_${suffix})
        endif()
      endif()
    endforeach()
  endif()
  set(exercise_compiled ${compiled} PARENT_SCOPE)
  set(exercise_libs ${libs} PARENT_SCOPE)
endfunction()

# The chapter's exercise (exercises/hints.txt, and `// [exercise]` markers in one kernel file):
# - test_NN_name_stub: the tests against the untouched stub, generated from the reference.
#   CTest entry NN_name/exercise-stub-fails passes only when some check FAILS with wrong
#   values (a `[FAIL]` line, no exception or simulator fault): a stub that passes is a bug.
# - test_NN_name_learner (not built by default): the tests against the learner's copy,
#   exercises/NN_name/<file>, built and run by `./wb exercise check NN`.
# The kernel file with `// [exercise]` markers among `kernels`, or "" (into `out`).
function(_wb_exercise_kernel kernels out)
  set(exercise_kernel)
  foreach(kernel IN LISTS kernels)
    file(STRINGS ${kernel} markers REGEX "// \\[exercise\\]")
    if(markers)
      set(exercise_kernel ${kernel})
    endif()
  endforeach()
  set(${out} "${exercise_kernel}" PARENT_SCOPE)
endfunction()

function(_wb_add_chapter_exercise chapter ch test_sources kernels units)
  _wb_exercise_kernel("${kernels}" exercise_kernel)
  if(NOT exercise_kernel)
    return()
  endif()
  get_filename_component(name ${exercise_kernel} NAME)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${exercise_kernel})
  set(stub ${CMAKE_CURRENT_BINARY_DIR}/exercise_stub/${name})
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/exercise_stub)
  set(hints ${PROJECT_SOURCE_DIR}/exercises/hints.txt)
  set(make_stub ${PROJECT_SOURCE_DIR}/exercises/make_stub.awk)
  add_custom_command(OUTPUT ${stub}
    COMMAND sh -c "awk -v chapter=${chapter} -f '${make_stub}' '${hints}' '${rel}' > '${stub}'"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    DEPENDS ${exercise_kernel} ${hints} ${make_stub}
    COMMENT "exercise ${chapter}: stub from ${rel}" VERBATIM)
  add_custom_target(${ch}_exercise_stub DEPENDS ${stub})

  _wb_exercise_kernels(${ch} stub "${kernels}" "${units}" ${exercise_kernel} ${stub} ${rel})
  add_executable(test_${chapter}_stub ${test_sources})
  target_link_libraries(test_${chapter}_stub PRIVATE ${ch}_base ${exercise_libs} wb_test_main wb_warnings)
  add_test(NAME ${chapter}/exercise-stub-fails
           COMMAND test_${chapter}_stub --test-suite=sim --reporters=wb-check --abort-after=1)
  set_tests_properties(${chapter}/exercise-stub-fails PROPERTIES LABELS "sim;exercise"
    PASS_REGULAR_EXPRESSION "\\[FAIL\\]" FAIL_REGULAR_EXPRESSION "exception:")

  _wb_exercise_kernels(${ch} learner "${kernels}" "${units}" ${exercise_kernel}
                       ${PROJECT_SOURCE_DIR}/exercises/${chapter}/${name} ${rel})
  add_executable(test_${chapter}_learner EXCLUDE_FROM_ALL ${test_sources})
  target_link_libraries(test_${chapter}_learner PRIVATE ${ch}_base ${exercise_libs} wb_test_main)
  foreach(lib IN LISTS exercise_libs exercise_compiled)
    set_target_properties(${lib} PROPERTIES EXCLUDE_FROM_ALL ON)
  endforeach()
endfunction()
