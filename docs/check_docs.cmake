# ctest -L docs: builds the docs target (Doxygen warnings fail it) and checks the result:
# the main page, the simulator, exercises, rungs and benchmarks pages and every chapter page
# exist, and each chapter page holds display formulas that load MathJax from the local copy
# (offline) and shows a figure the build drew; then a headless browser (BROWSER) renders every
# page.
# In parallel: the docs target runs the chapter programs' profiles for the figures.
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target docs --parallel ${cores}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "docs build failed:\n${out}\n${err}")
endif()
string(REPLACE "," ";" chapters "${CHAPTER_PAGES}")
foreach(page index simulator exercises rungs benchmarks ${chapters})
  if(NOT EXISTS ${HTML_DIR}/${page}.html)
    message(FATAL_ERROR "docs: ${page}.html was not generated")
  endif()
endforeach()
if(NOT EXISTS ${HTML_DIR}/mathjax/MathJax.js)
  message(FATAL_ERROR "docs: html/mathjax/MathJax.js does not resolve to the local MathJax")
endif()
foreach(page IN LISTS chapters)
  file(READ ${HTML_DIR}/${page}.html html)
  if(NOT html MATCHES "src=\"mathjax/MathJax.js")
    message(FATAL_ERROR "docs: ${page}.html does not load the local mathjax/MathJax.js")
  endif()
  if(NOT html MATCHES "\\\\\\[")
    message(FATAL_ERROR "docs: ${page}.html holds no display formula")
  endif()
  # Every chapter page shows a figure the build drew from the chapter's records, and
  # every image a page shows is there.
  string(REGEX MATCHALL "<img src=\"[^\"]+\"" images "${html}")
  set(drawn 0)
  foreach(img IN LISTS images)
    string(REGEX REPLACE "<img src=\"([^\"]+)\"" "\\1" file "${img}")
    if(NOT EXISTS ${HTML_DIR}/${file})
      message(FATAL_ERROR "docs: ${page}.html shows ${file}, which is not in ${HTML_DIR}")
    endif()
    # The traffic figures (chapters 01-11), chapter 12's load per rank, drawn from the ring's
    # own records (docs/figures/ring_figures.py).
    if(file MATCHES "_traffic\\.png$|^io_|^ch12_balance\\.png$")
      math(EXPR drawn "${drawn} + 1")
    endif()
  endforeach()
  if(drawn EQUAL 0)
    message(FATAL_ERROR "docs: ${page}.html shows no generated figure")
  endif()
endforeach()
# Then as a reader sees them: every page in a headless browser (docs/check_pages.html), once
# MathJax has typeset it. Every image decodes, no formula fails, and a chapter page renders
# formulas and shows at least one image.
file(COPY ${CHECK_PAGES} DESTINATION ${HTML_DIR})
list(JOIN chapters "," chapter_list)
set(all_pages "index,simulator,exercises,rungs,benchmarks,${chapter_list}")
execute_process(
  COMMAND ${BROWSER} --no-sandbox --disable-gpu --allow-file-access-from-files
          --virtual-time-budget=120000 --dump-dom "file://${HTML_DIR}/check_pages.html?pages=${all_pages}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE dom ERROR_QUIET TIMEOUT 300)
if(NOT rc EQUAL 0 OR NOT dom MATCHES "<pre id=\"report\">checked\n([^<]*)</pre>")
  message(FATAL_ERROR "docs: the headless browser (${BROWSER}) did not finish the page check "
                      "(exit ${rc})")
endif()
string(REPLACE "\n" ";" lines "${CMAKE_MATCH_1}")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([a-z0-9_]+): images ([0-9]+)/([0-9]+) decoded, formulas ([0-9]+) rendered, ([0-9]+) math errors$")
    message(FATAL_ERROR "docs: unexpected page check line: ${line}")
  endif()
  list(FIND chapters "${CMAKE_MATCH_1}" chapter_index)
  if(NOT CMAKE_MATCH_2 EQUAL CMAKE_MATCH_3 OR NOT CMAKE_MATCH_5 EQUAL 0)
    message(FATAL_ERROR "docs: in the browser, ${line}")
  endif()
  if(chapter_index GREATER -1 AND (CMAKE_MATCH_3 EQUAL 0 OR CMAKE_MATCH_4 EQUAL 0))
    message(FATAL_ERROR "docs: in the browser, ${line}: a chapter page shows figures and formulas")
  endif()
  message(STATUS "docs: browser: ${line}")
endforeach()
message(STATUS "docs: built without warnings; ${CHAPTER_PAGES}, simulator, exercises, rungs, local MathJax and the generated figures in place and rendered")
