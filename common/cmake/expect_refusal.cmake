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
if(NOT rc EQUAL EXIT)
  message(FATAL_ERROR "expected exit code ${EXIT}, got '${rc}'; stderr: ${shown}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got:\n${out}")
endif()
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines lines)
if(NOT lines EQUAL 1 OR NOT err MATCHES "^${NAME}: error: ")
  message(FATAL_ERROR "expected one line '${NAME}: error: ...' on stderr, got: ${shown}")
endif()
string(FIND "${err}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected '${EXPECT}' in the error line, got: ${shown}")
endif()
message(STATUS "refused in one line: ${err}")
