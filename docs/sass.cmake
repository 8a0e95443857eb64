# The pages' SASS tables: each chapter's chNN_sass.csv, which the build disassembled from the
# kernel objects nvcc made (common/cmake/WbSass.cmake, common/cmake/sass_mix.py), redrawn as
# generated/chNN_sass.html for the page's \htmlinclude, and as generated/chNN_sass.png, the main
# loops' mix as bars beside the traffic figures (docs/figures/sass_figures.py, matplotlib). A
# build with no tables (no nvcc, or no cuobjdump) writes, for every chapter with a ladder, a table
# and a figure that say why instead, so the pages build alike.
# Included by docs/CMakeLists.txt after its figures' checks (WB_DOCS_PYTHON, WB_DOCS_GENERATED,
# `programs`) and before the docs target, whose `generated` list it appends to.
get_property(sass_csvs GLOBAL PROPERTY WB_SASS_CSVS)
set(sass_script ${PROJECT_SOURCE_DIR}/common/cmake/sass_mix.py)
set(sass_figures ${CMAKE_CURRENT_LIST_DIR}/figures/sass_figures.py)
set(sass_outputs)
set(sass_missing)
foreach(p IN LISTS programs)
  if(TARGET ${p}_sass)
    list(APPEND sass_outputs ${WB_DOCS_GENERATED}/${p}_sass.html ${WB_DOCS_GENERATED}/${p}_sass.png)
  elseif(TARGET ${p}_instrumented)  # a chapter with a ladder (not chapter 12)
    list(APPEND sass_missing ${p})
  endif()
endforeach()
if(sass_outputs)
  add_custom_command(OUTPUT ${sass_outputs}
    COMMAND ${WB_DOCS_PYTHON} ${sass_script} --from-csv ${sass_csvs} --html ${WB_DOCS_GENERATED}
            --quiet
    COMMAND ${WB_DOCS_PYTHON} ${sass_figures} ${WB_DOCS_GENERATED} ${sass_csvs}
    DEPENDS ${sass_csvs} ${sass_script} ${sass_figures} VERBATIM
    COMMENT "docs: the SASS tables and figures (sass_mix.py, matplotlib)")
  list(APPEND generated ${sass_outputs})
endif()
if(sass_missing)
  if(NOT WB_HAVE_CUDA)
    set(why "this build has no nvcc: its kernels run on the simulator only")
  else()
    set(why "${WB_SASS_MISSING}")
  endif()
  set(stamp ${WB_DOCS_GENERATED}/sass_missing.stamp)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${WB_DOCS_PYTHON} ${sass_figures} ${WB_DOCS_GENERATED} --missing ${sass_missing}
            --why ${why}
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${sass_figures} VERBATIM
    COMMENT "docs: no SASS tables in this build (${why})")
  list(APPEND generated ${stamp})
endif()
