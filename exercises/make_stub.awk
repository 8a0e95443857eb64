# Writes an exercise stub: the reference kernel file with the lines between its two
# `// [exercise]` markers replaced by the chapter's `todo =` lines from hints.txt.
#   awk -v chapter=01_safe_softmax -f make_stub.awk exercises/hints.txt <reference .cuh>
NR == FNR {  # hints.txt
  if ($0 ~ /^\[/) { section = substr($0, 2, index($0, "]") - 2); next }
  if (section == chapter && $0 ~ /^todo = /) todo[++ntodo] = substr($0, 8)
  next
}
FNR == 1 {
  print "// Exercise " chapter ": generated from " FILENAME " by ./wb exercise."
  print "// Write the lines marked TODO, then run: ./wb exercise check " substr(chapter, 1, 2)
}
/\/\/ \[exercise\]/ {
  if (!inside) {
    indent = $0
    sub(/\/\/.*/, "", indent)
    for (i = 1; i <= ntodo; ++i) print indent "// " (i == 1 ? "TODO: " : "      ") todo[i]
  }
  inside = !inside
  next
}
!inside { print }
END { if (ntodo == 0) { print "make_stub.awk: no todo for " chapter > "/dev/stderr"; exit 1 } }
