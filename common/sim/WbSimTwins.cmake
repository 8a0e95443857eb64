# Twins of simulator test binaries: the same sources rebuilt with compiler instrumentation.
#
# Race mode (ThreadSanitizer over the simulator's fibers):
# wb_sim_race_variant(<target> [OUTPUT_VARIABLE <var>])
#   Adds <target>_race: the executable <target> rebuilt with -fsanitize=thread, together with
#   every static library in its link tree that links wb_sim directly (the libraries holding
#   kernels), which are rebuilt as <lib>_race. wb_sim itself is not instrumented: it tells
#   ThreadSanitizer about fibers and barriers through the runtime's API. <var> receives the
#   new target's name, or is empty when race mode is unavailable (then nothing is added):
#   under another sanitizer (WB_SANITIZE, -fsanitize= in CMAKE_CXX_FLAGS), with a compiler
#   that cannot link -fsanitize=thread, or with -DWB_SIM_RACE_MODE=OFF. The custom target
#   wb_race_tests depends on every <target>_race.
#
# wb_sim_add_race_test(NAME <name> COMMAND <command>... [EXPECT_RACE <regex>] [LABELS <l>...])
#   Registers a CTest test for a race binary, labelled `sim;race`, with TSAN_OPTIONS that make
#   a race report fail the program (exit code 66). With EXPECT_RACE the test instead passes
#   only if the output matches <regex> (a planted race that must be reported).
#
# Per-access instrumentation (memcheck, initcheck and profile mode, common/sim/access.hpp):
# wb_sim_instrumented_variant(<target> [INSTRUMENT_SOURCES] [OUTPUT_VARIABLE <var>])
#   Adds <target>_instrumented: <target> rebuilt against <lib>_instrumented twins of its kernel
#   libraries, compiled with GCC's -fsanitize=thread instrumentation but linked without
#   ThreadSanitizer's runtime: wb_sim_hooks answers the calls, so every load and store of a
#   kernel reaches the simulator. With INSTRUMENT_SOURCES the executable's own sources are
#   instrumented too (kernels defined in a test file); otherwise only the kernel libraries are,
#   so host code runs at full speed. Everything is compiled with WB_SIM_INSTRUMENTED=1.
#   <var> is empty when unavailable (not GCC, another sanitizer, -DWB_SIM_INSTRUMENTED_TWINS=OFF).
#
# wb_sim_instrument(<target>)
#   Instruments <target>'s own sources in place and links wb_sim_hooks (call only when
#   the global property WB_SIM_INSTRUMENTED_AVAILABLE is ON).
#
# Example (a chapter's sim tests):
#   wb_sim_race_variant(test_01_safe_softmax OUTPUT_VARIABLE race_exe)
#   if(race_exe)
#     wb_sim_add_race_test(NAME 01_safe_softmax/sim-race COMMAND ${race_exe} --test-suite=sim)
#   endif()
include_guard(GLOBAL)

option(WB_SIM_RACE_MODE "Build ThreadSanitizer (race-mode) twins of the simulator tests" ON)
set(WB_SIM_TSAN_OPTIONS "halt_on_error=1:exitcode=66:history_size=4"
    CACHE STRING "TSAN_OPTIONS for race-mode tests")

set(WB_SIM_RACE_AVAILABLE OFF)
if(WB_SIM_RACE_MODE)
  if(NOT "${WB_SANITIZE}" STREQUAL "" OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    message(STATUS "wb_sim: race mode off (the build already uses a sanitizer)")
  elseif(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(STATUS "wb_sim: race mode off (needs GCC or Clang)")
  else()
    include(CheckCXXSourceCompiles)
    set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
    set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
    check_cxx_source_compiles([[
      #include <sanitizer/tsan_interface.h>
      int main() { return __tsan_create_fiber(0) == nullptr; }
    ]] WB_SIM_TSAN_LINKS)
    unset(CMAKE_REQUIRED_FLAGS)
    unset(CMAKE_REQUIRED_LINK_OPTIONS)
    if(WB_SIM_TSAN_LINKS)
      set(WB_SIM_RACE_AVAILABLE ON)
    else()
      message(STATUS "wb_sim: race mode off (-fsanitize=thread with fibers does not link)")
    endif()
  endif()
endif()

option(WB_SIM_INSTRUMENTED_TWINS
       "Build instrumented twins (memcheck, initcheck, profile mode) of simulator binaries" ON)
set(WB_SIM_INSTRUMENTED_AVAILABLE OFF)
if(WB_SIM_INSTRUMENTED_TWINS)
  if(NOT "${WB_SANITIZE}" STREQUAL "" OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    message(STATUS "wb_sim: instrumented twins off (the build already uses a sanitizer)")
  elseif(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    message(STATUS "wb_sim: instrumented twins off (they use GCC's -fsanitize=thread calls)")
  else()
    set(WB_SIM_INSTRUMENTED_AVAILABLE ON)
  endif()
endif()
set_property(GLOBAL PROPERTY WB_SIM_INSTRUMENTED_AVAILABLE ${WB_SIM_INSTRUMENTED_AVAILABLE})
# Every load and store becomes a call, function entries and exits do not. No vectorizing:
# the host compiler would merge a thread's scalar accesses into vectors nvcc does not make,
# and the counts must be the kernel's own. Debug information names the source lines.
set_property(GLOBAL PROPERTY WB_SIM_INSTRUMENTED_FLAGS
  -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -fno-tree-vectorize
  -fno-tree-slp-vectorize -fno-tree-sra -g)

# Kept as global properties: the functions run in other directories' scopes.
set_property(GLOBAL PROPERTY WB_SIM_RACE_AVAILABLE ${WB_SIM_RACE_AVAILABLE})
# A race report must name the kernel's file and line in every build type, so the race twins
# always carry debug information (-g, with its records of inlined calls) and frame pointers,
# whatever CMAKE_BUILD_TYPE adds: Release and MinSizeRel would otherwise leave ThreadSanitizer
# nothing to symbolize but `<null>`. The flags follow the build type's, so they win.
set_property(GLOBAL PROPERTY WB_SIM_RACE_FLAGS
  -fsanitize=thread -g -fno-omit-frame-pointer -fno-optimize-sibling-calls)
set_property(GLOBAL PROPERTY WB_SIM_TSAN_OPTIONS "${WB_SIM_TSAN_OPTIONS}")

# `wb_race_tests` builds every race twin and nothing else: what `ctest -L race` runs. (The
# release-race preset builds only the simulator's own, test_sim_race, in Release.)
add_custom_target(wb_race_tests)

# Copies the build properties of <from> to <to>, rewriting link items for twin kind <kind>
# (race or instrumented).
function(_wb_sim_twin_copy_properties kind from to)
  foreach(prop INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES COMPILE_DEFINITIONS
               INTERFACE_COMPILE_DEFINITIONS COMPILE_OPTIONS INTERFACE_COMPILE_OPTIONS
               COMPILE_FEATURES INTERFACE_COMPILE_FEATURES LINK_OPTIONS INTERFACE_LINK_OPTIONS
               CXX_STANDARD CXX_STANDARD_REQUIRED CXX_EXTENSIONS)
    get_target_property(value ${from} ${prop})
    if(value)
      set_property(TARGET ${to} PROPERTY ${prop} "${value}")
    endif()
  endforeach()
  foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(items ${from} ${prop})
    if(items)
      set(rewritten)
      foreach(item IN LISTS items)
        _wb_sim_twin_item(${kind} "${item}" new_item)
        list(APPEND rewritten "${new_item}")
      endforeach()
      set_property(TARGET ${to} PROPERTY ${prop} "${rewritten}")
    endif()
  endforeach()
endfunction()

# The sources of <target> as absolute paths.
function(_wb_sim_race_sources target out)
  get_target_property(sources ${target} SOURCES)
  get_target_property(dir ${target} SOURCE_DIR)
  set(result)
  foreach(s IN LISTS sources)
    if(NOT IS_ABSOLUTE "${s}" AND NOT s MATCHES "^\\$<")
      set(s "${dir}/${s}")
    endif()
    list(APPEND result "${s}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# True when <target> (a library) must be rebuilt for a twin: it links wb_sim directly, or it
# is an INTERFACE library whose link items must be rebuilt.
function(_wb_sim_race_needed target out)
  get_property(known GLOBAL PROPERTY _WB_SIM_RACE_NEEDED_${target} SET)
  if(known)
    get_property(needed GLOBAL PROPERTY _WB_SIM_RACE_NEEDED_${target})
    set(${out} ${needed} PARENT_SCOPE)
    return()
  endif()
  set(needed OFF)
  get_target_property(imported ${target} IMPORTED)
  get_target_property(type ${target} TYPE)
  if(NOT imported AND NOT target STREQUAL "wb_sim")
    if(type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(items ${target} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(items ${target} LINK_LIBRARIES)
    endif()
    # A library that links one rebuilt for the twin is rebuilt too: a chapter's kernels may
    # call an earlier chapter's launchers (wb_add_chapter's KERNELS_FROM).
    # A link group's members count as items of their own.
    string(REGEX REPLACE "\\$<LINK_GROUP:RESCAN,([^>]+)>" "\\1" items "${items}")
    string(REPLACE "," ";" items "${items}")
    foreach(item IN LISTS items)
      if(item STREQUAL "wb_sim" AND type STREQUAL "STATIC_LIBRARY")
        set(needed ON)
      elseif(TARGET "${item}")
        _wb_sim_race_needed(${item} sub)
        if(sub)
          set(needed ON)
        endif()
      endif()
    endforeach()
  endif()
  set_property(GLOBAL PROPERTY _WB_SIM_RACE_NEEDED_${target} ${needed})
  set(${out} ${needed} PARENT_SCOPE)
endfunction()

# <item> for twin kind <kind>: the twin of a library that needs one (created on first use).
function(_wb_sim_twin_item kind item out)
  # A link group (the kernel libraries of a chapter whose files call each other): each member
  # twinned, the group kept.
  if(item MATCHES "^\\$<LINK_GROUP:RESCAN,([^>]+)>$")
    string(REPLACE "," ";" members "${CMAKE_MATCH_1}")
    set(twinned)
    foreach(member IN LISTS members)
      _wb_sim_twin_item(${kind} "${member}" twin_member)
      list(APPEND twinned "${twin_member}")
    endforeach()
    list(JOIN twinned "," joined)
    set(${out} "$<LINK_GROUP:RESCAN,${joined}>" PARENT_SCOPE)
    return()
  endif()
  set(result "${item}")
  set(inner "${item}")
  set(wrap OFF)
  if(item MATCHES "^\\$<LINK_ONLY:([^>]+)>$")
    set(inner "${CMAKE_MATCH_1}")
    set(wrap ON)
  endif()
  if(TARGET "${inner}")
    _wb_sim_race_needed(${inner} needed)
    if(needed)
      set(twin ${inner}_${kind})
      if(NOT TARGET ${twin})
        get_target_property(type ${inner} TYPE)
        if(type STREQUAL "INTERFACE_LIBRARY")
          add_library(${twin} INTERFACE)
        else()
          _wb_sim_race_sources(${inner} sources)
          add_library(${twin} STATIC ${sources})
          _wb_sim_twin_compile(${kind} ${twin})
        endif()
        _wb_sim_twin_copy_properties(${kind} ${inner} ${twin})
        if(kind STREQUAL "instrumented")
          # After the library on the link line: the hooks answer its instrumentation's calls.
          set_property(TARGET ${twin} APPEND PROPERTY INTERFACE_LINK_LIBRARIES wb_sim_hooks)
        endif()
      endif()
      set(result ${twin})
      if(wrap)
        set(result "$<LINK_ONLY:${twin}>")
      endif()
    endif()
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# The compile flags and definitions of twin kind <kind> on <target>.
function(_wb_sim_twin_compile kind target)
  if(kind STREQUAL "race")
    get_property(flags GLOBAL PROPERTY WB_SIM_RACE_FLAGS)
    target_compile_options(${target} PRIVATE ${flags})
    target_compile_definitions(${target} PRIVATE WB_SIM_RACE_MODE=1)
  else()
    get_property(flags GLOBAL PROPERTY WB_SIM_INSTRUMENTED_FLAGS)
    target_compile_options(${target} PRIVATE ${flags})
    target_compile_definitions(${target} PRIVATE WB_SIM_INSTRUMENTED=1)
  endif()
endfunction()

function(wb_sim_race_variant target)
  cmake_parse_arguments(arg "" "OUTPUT_VARIABLE" "" ${ARGN})
  set(race "")
  get_property(available GLOBAL PROPERTY WB_SIM_RACE_AVAILABLE)
  if(available)
    set(race ${target}_race)
    _wb_sim_race_sources(${target} sources)
    add_executable(${race} ${sources})
    _wb_sim_twin_copy_properties(race ${target} ${race})
    _wb_sim_twin_compile(race ${race})
    target_link_options(${race} PRIVATE -fsanitize=thread)
    add_dependencies(wb_race_tests ${race})
  endif()
  if(arg_OUTPUT_VARIABLE)
    set(${arg_OUTPUT_VARIABLE} "${race}" PARENT_SCOPE)
  endif()
endfunction()

function(wb_sim_add_race_test)
  cmake_parse_arguments(arg "" "NAME;EXPECT_RACE" "COMMAND;LABELS" ${ARGN})
  add_test(NAME ${arg_NAME} COMMAND ${arg_COMMAND})
  get_property(tsan_options GLOBAL PROPERTY WB_SIM_TSAN_OPTIONS)
  set(labels sim race ${arg_LABELS})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${arg_NAME} PROPERTIES
    LABELS "${labels}"
    ENVIRONMENT "TSAN_OPTIONS=${tsan_options}")
  if(arg_EXPECT_RACE)
    set_tests_properties(${arg_NAME} PROPERTIES PASS_REGULAR_EXPRESSION "${arg_EXPECT_RACE}")
  endif()
endfunction()

# Compiles all of <target>'s own sources with the per-access instrumentation and links the
# hooks (a test binary whose kernels are its own).
function(wb_sim_instrument target)
  _wb_sim_twin_compile(instrumented ${target})
  target_link_libraries(${target} PRIVATE wb_sim_hooks)
endfunction()

function(wb_sim_instrumented_variant target)
  cmake_parse_arguments(arg "INSTRUMENT_SOURCES" "OUTPUT_VARIABLE" "" ${ARGN})
  set(twin "")
  get_property(available GLOBAL PROPERTY WB_SIM_INSTRUMENTED_AVAILABLE)
  if(available)
    set(twin ${target}_instrumented)
    _wb_sim_race_sources(${target} sources)
    add_executable(${twin} ${sources})
    _wb_sim_twin_copy_properties(instrumented ${target} ${twin})
    if(arg_INSTRUMENT_SOURCES)
      _wb_sim_twin_compile(instrumented ${twin})
    else()
      target_compile_definitions(${twin} PRIVATE WB_SIM_INSTRUMENTED=1)
    endif()
    target_link_libraries(${twin} PRIVATE wb_sim_hooks)
  endif()
  if(arg_OUTPUT_VARIABLE)
    set(${arg_OUTPUT_VARIABLE} "${twin}" PARENT_SCOPE)
  endif()
endfunction()
