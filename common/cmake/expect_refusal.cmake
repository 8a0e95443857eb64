# cmake -D PROGRAM=... -D NAME=chNN -D ARGS="a;b" [-D EXPECT=text] [-D EXIT=1] -P expect_refusal.cmake
# Passes when PROGRAM ARGS exits with EXIT (default 2, the workbook's code for refused input;
# 1 is a failure such as a file it cannot write), prints nothing on stdout and exactly one
# line on stderr: "NAME: error: ..." containing EXPECT (a plain substring; default: the
# --bench refusal, "--bench needs ").
if(NOT DEFINED EXPECT)
  set(EXPECT "--bench needs ")
endif()
if(NOT DEFINED EXIT)
  set(EXIT 2)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE "\n" "\\n" shown "${err}")
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines lines)
string(FIND "${err}" "${EXPECT}" at)
# The first of the checks that fails is the one reported.
if(NOT rc EQUAL EXIT)
  set(failure "expected exit code ${EXIT}, got '${rc}'; stderr: ${shown}")
elseif(NOT out STREQUAL "")
  set(failure "expected nothing on stdout, got:\n${out}")
elseif(NOT lines EQUAL 1 OR NOT err MATCHES "^${NAME}: error: ")
  set(failure "expected one line '${NAME}: error: ...' on stderr, got: ${shown}")
elseif(at EQUAL -1)
  set(failure "expected '${EXPECT}' in the error line, got: ${shown}")
endif()
if(DEFINED failure)
  message(FATAL_ERROR "${failure}")
endif()
message(STATUS "refused in one line: ${err}")
