#!/usr/bin/env bash
# The build's layer rule holds (cmake/layers.cmake): each layer's include view lets it include its
# own folder and the layers below, and a higher layer's header is not found. Compiles one-line
# files against each view with the build's compiler; also checks that no layer source reaches a
# higher layer through a relative path ("../pipeline/..."), which the views cannot see.
# Then checks the build's own compile commands: each layer's sources compile against its view and
# never against the source root (which would let any include through).
# Usage: layer_views_check.sh CXX VIEWS_DIR SOURCE_DIR COMPILE_COMMANDS_JSON
set -u
cxx=$1 views=$2 source=$3 commands=$4
layers=(core text attention models pipeline generate)
headers=(core/error.h text/tokenizer.h attention/catalogue.h models/dit/wan/wan_transformer_config.h
  pipeline/request.h generate/options.h)
status=0
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
for i in "${!layers[@]}"; do
  for j in "${!layers[@]}"; do
    if (cd "$empty" && echo "#include \"${headers[$j]}\"" |
      "$cxx" -std=c++20 -E -I "$views/${layers[$i]}" -x c++ - > /dev/null 2>&1); then
      found=yes
    else
      found=no
    fi
    expected=$([ "$j" -le "$i" ] && echo yes || echo no)
    if [ "$found" != "$expected" ]; then
      echo "FAIL: ${layers[$i]}/ including ${headers[$j]}: found=$found, expected $expected"
      status=1
    fi
  done
done
if grep -rnE '#include +"(\.\./)+(core|text|attention|models|pipeline|generate)/' \
  "$source"/{core,text,attention,models,pipeline,generate}; then
  echo "FAIL: the includes above reach another layer by a relative path"
  status=1
fi
# compile_commands.json: a "command" line, then its "file" line. A unity build (MMGEN_UNITY)
# compiles a layer's sources through CMakeFiles/mmgen_<library>.dir/Unity/unity_N_cxx.cxx files,
# each including up to 16 of them: such a file counts as the sources it includes, in the layer its
# library is (mmgen_cli is generate/), and may include no other layer's source.
checked=$(awk -v views="$views" -v source="$source" '
  /"command":/ { command = $0 " " }
  /"file":/ {
    match($0, /"file": "[^"]*"/); file = substr($0, RSTART + 9, RLENGTH - 10)
    count = 1
    if (file ~ /\/CMakeFiles\/mmgen_[a-z]+\.dir\/Unity\/unity_[0-9]+_cxx\.cxx$/) {
      layer = file; sub(/.*\/CMakeFiles\/mmgen_/, "", layer); sub(/\.dir\/.*/, "", layer)
      if (layer == "cli") layer = "generate"
      build = file; sub(/\/CMakeFiles\/.*/, "", build)
      count = 0
      while ((getline line < file) > 0)
        if (line ~ /^#include "/) {
          count++
          # (a generated source, such as the embedded configs, lives in the build folder,
          # which may itself be inside the source tree)
          if (index(line, "\"" source "/") == 10 && index(line, "\"" build "/") != 10 &&
              index(line, "\"" source "/" layer "/") != 10)
            { print "FAIL: " file " includes a source outside " layer "/: " line; bad++ }
        }
      close(file)
    } else {
      if (index(file, source "/") != 1) next
      layer = substr(file, length(source) + 2); sub(/\/.*/, "", layer)
    }
    if (layer !~ /^(core|text|attention|models|pipeline|generate)$/ || file ~ /\/main\.cpp$/) next
    n += count
    if (index(command, " -I" source " ") || index(command, " -I" source "/ "))
      { print "FAIL: " file " compiles against the source root"; bad++ }
    else if (!index(command, " -I" views "/" layer " "))
      { print "FAIL: " file " does not compile against its view " views "/" layer; bad++ }
  }
  END { print n + 0; exit bad > 0 }' "$commands") || status=1
echo "$checked" | grep FAIL
[ "$(echo "$checked" | tail -1)" -gt 100 ] || { echo "FAIL: too few layer sources in $commands"; status=1; }
[ "$status" = 0 ] && echo "layer views: every layer sees itself and the layers below, nothing above; $(echo "$checked" | tail -1) layer sources compile against their views"
exit "$status"
