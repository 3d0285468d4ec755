#!/bin/sh
# Builds the startup probes: dynamic and static variants.
set -e
cd "$(dirname "$0")"
B=../../build-measure
O="-O2 -std=c++20"
g++ $O none.cpp -o none
g++ $O icu_nfc.cpp -o icu_nfc_dyn -licuuc -licudata
g++ $O icu_nfc.cpp -o icu_nfc_static -static-libstdc++ -Wl,-Bstatic -licuuc -licudata -Wl,-Bdynamic -ldl -lpthread
g++ $O pcre2_jit.cpp -o pcre2_dyn -lpcre2-8
g++ $O pcre2_jit.cpp -o pcre2_static -Wl,-Bstatic -lpcre2-8 -Wl,-Bdynamic
g++ $O -I../.. ours_regex.cpp -o ours_regex $B/libtokenizers_only.a -lfmt
ls -l none icu_nfc_dyn icu_nfc_static pcre2_dyn pcre2_static ours_regex
g++ -O2 -std=c++20 icu_all.cpp -o icu_all_dyn -licuuc -licudata
g++ -O2 -std=c++20 icu_all.cpp -o icu_all_static -static-libstdc++ -Wl,-Bstatic -licuuc -licudata -Wl,-Bdynamic -ldl -lpthread
