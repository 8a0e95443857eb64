# The nvcc/registers check on planted input (this folder): a kernel that spills, a page table
# that disagrees with ptxas and a page whose text states a count ptxas does not give must all be
# reported, and the check must fail.
#   cmake -D PYTHON=... -D SCRIPT=.../kernel_resources.py -D DIR=this folder -P this file
execute_process(
  COMMAND ${PYTHON} ${SCRIPT} ${DIR} --check --page-table ${DIR}/page.md --page-claims ${DIR}/page.md
          --nvcc-version 13.0
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
foreach(expected
    "error: planted_kernel on sm_90 \\(stack 8, spills 8/8\\): local memory"
    "error: page.md: fa2_mma at D = 64 states 128 registers on sm_90, nvcc 13.0 gives \\[130\\]"
    "error: page.md: fa2_mma at D = 128 states 167 registers on sm_90, nvcc 13.0 gives nothing"
    "error: page.md: states 254 registers for planted_kernel on sm_90, nvcc 13.0 gives \\[255\\]"
    "error: page.md: states 96 registers for no_such_kernel on sm_90, nvcc 13.0 gives no such kernel"
    "page.md: 1 of 3 register counts in the text agree with nvcc 13.0")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "missing from the report: ${expected}")
  endif()
endforeach()
if(status EQUAL 0)
  message(FATAL_ERROR "the check passed planted local memory and a wrong page table")
endif()
