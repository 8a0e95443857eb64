# The nvcc/sass check on planted input (this folder): planted.sass, a listing in cuobjdump -sass's
# form standing for chapter 08's rungs 2 and 3, and sass_page.md, whose text states a count the
# listing does not give, names a kernel that does not exist and a column that is none. The main
# loop of the ldmatrix kernel is its inner loop (the two MMAs, as in the outer loop, in fewer
# instructions), not its divergence path's jump back (a range holding an EXIT). All must be
# reported, and the check must fail.
#   cmake -D PYTHON=... -D SCRIPT=.../sass_mix.py -D SOURCE_DIR=the repository -D DIR=this folder
#         -P this file
execute_process(
  COMMAND ${PYTHON} ${SCRIPT} --sass-text ${DIR}/planted.sass --source-dir ${SOURCE_DIR}
          --chapter 08_fa2_at_speed 2_fa2_mma.cuda.cu.o 3_fa2_ldmatrix.cuda.cu.o
          --csv ${CMAKE_CURRENT_BINARY_DIR}/planted_sass.csv
  RESULT_VARIABLE status OUTPUT_VARIABLE table ERROR_VARIABLE table)
message("${table}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "sass_mix.py failed on the planted listing")
endif()
execute_process(
  COMMAND ${PYTHON} ${SCRIPT} --from-csv ${CMAKE_CURRENT_BINARY_DIR}/planted_sass.csv --quiet
          --page-claims ${DIR}/sass_page.md --nvcc-version 13.0
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
foreach(expected
    "fa2_ldmatrix: ch08::planted_ldmatrix on sm_90, 0x0040-0x0090"
    "error: sass_page.md: states 8 LDSM in the loop of fa2_ldmatrix on sm_90, nvcc 13.0 gives \\[2\\]"
    "error: sass_page.md: states 2 HMMA in the loop of no_such_kernel on sm_90, nvcc 13.0 gives no such kernel"
    "error: sass_page.md: 'LDSMX' is no column"
    "sass_page.md: 3 of 6 SASS counts in the text agree with nvcc 13.0")
  if(NOT "${table}${out}" MATCHES "${expected}")
    message(FATAL_ERROR "missing from the report: ${expected}")
  endif()
endforeach()
if(status EQUAL 0)
  message(FATAL_ERROR "the check passed a page whose counts the listing does not give")
endif()
