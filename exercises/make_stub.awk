# Writes an exercise stub: the reference kernel file with the lines between each pair of
# `// [exercise]` markers replaced by the chapter's todo lines from hints.txt: `todo = ` lines
# for the first pair, `todo2 = ` lines for the second, and so on.
#   awk -v chapter=01_safe_softmax -f make_stub.awk exercises/hints.txt <reference .cuh>
NR == FNR {  # hints.txt
  if ($0 ~ /^\[/) { section = substr($0, 2, index($0, "]") - 2); next }
  if (section == chapter && match($0, /^todo[0-9]* = /)) {
    region = substr($0, 5, RLENGTH - 7)
    if (region == "") region = 1
    todo[region, ++ntodo[region]] = substr($0, RLENGTH + 1)
  }
  next
}
FNR == 1 {
  print "// Exercise " chapter ": generated from " FILENAME " by ./wb exercise."
  print "// Write the lines marked TODO, then run: ./wb exercise check " substr(chapter, 1, 2)
}
/\/\/ \[exercise\]/ {
  if (!inside) {
    ++region_seen
    indent = $0
    sub(/\/\/.*/, "", indent)
    if (!ntodo[region_seen]) {
      print "make_stub.awk: no todo" (region_seen > 1 ? region_seen : "") " for " chapter > "/dev/stderr"
      failed = 1
      exit 1
    }
    for (i = 1; i <= ntodo[region_seen]; ++i)
      print indent "// " (i == 1 ? "TODO: " : "      ") todo[region_seen, i]
  }
  inside = !inside
  next
}
!inside { print }
END { if (!failed && !region_seen) { print "make_stub.awk: no // [exercise] markers in " FILENAME > "/dev/stderr"; exit 1 } }
