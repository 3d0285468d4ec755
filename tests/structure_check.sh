#!/usr/bin/env bash
# The house's structural rules that grep can hold (docs/architecture.md; issue 53's checks), so a
# change that breaks one fails the suite instead of waiting for a reader:
#   1. nothing outside attention/ compares a backend's name (the selector and the descriptors
#      decide; a backend's properties are descriptor flags or backend methods);
#   2. generate/ compares no pipeline or model class name (a pipeline's registration says);
#   3. one file in pipeline/ steps a scheduler (the denoise loop);
#   4. attention/cuda/ holds shared kernels only: a backend's or the paged family's CUDA code
#      lives in its own folder;
#   5. one attention contract: models and pipelines reach attention through attention::Layer
#      (attention/layer.h) only, never a backend object, a GPU backend's kernel interface
#      (SparseSelfAttentionCuda, SelfAttentionCall) or a backend factory; the one builder
#      (pipeline/attention_layers.cpp) makes the layers, and `mmgen attention` (which times one
#      backend alone) builds its backend itself.
# Usage: structure_check.sh SOURCE_DIR
set -u
source=$1
cd "$source" || exit 2
status=0
fail() {
  echo "FAIL: $1"
  echo "$2" | sed 's/^/  /'
  status=1
}

# Every backend name the catalogue and the descriptors define.
names=$(grep -ho '\.name = "[a-z0-9_]*"' attention/catalogue.cpp attention/backends/*/*.cpp |
  sed 's/.*"\(.*\)"/\1/' | sort -u | paste -sd'|')
[ -n "$names" ] || { echo "FAIL: found no backend names"; exit 1; }
compares="([=!]= *\"($names)\"|\"($names)\" *[=!]=)"
hits=$(grep -rnE --include='*.cpp' --include='*.h' "$compares" models pipeline generate)
[ -z "$hits" ] || fail "a backend name compared outside attention/" "$hits"

classes='"[A-Za-z0-9]*(Pipeline|Model|Transformer[A-Za-z0-9]*|AutoencoderKL[A-Za-z0-9]*)"'
hits=$(grep -rnE --include='*.cpp' --include='*.h' "([=!]= *$classes|$classes *[=!]=)" generate)
[ -z "$hits" ] || fail "a model class name compared in generate/" "$hits"

steppers=$(grep -rlE --include='*.cpp' '(\.|->)step\(' pipeline | grep -v '^pipeline/schedulers/')
[ "$(echo "$steppers" | grep -c .)" = 1 ] ||
  fail "more than one file in pipeline/ steps a scheduler" "$steppers"

hits=$(ls attention/cuda | grep -E '^(sla|svg2|vmoba|vsa|sta|sage|paged)_')
[ -z "$hits" ] || fail "a backend's kernel in attention/cuda/" "$hits"

hits=$(grep -rnE --include='*.cpp' --include='*.h' \
  'SparseSelfAttentionCuda|SelfAttentionCall|sparse_self_attention_cuda\.h|make_dit_backend|attention::AttentionBackend' \
  models pipeline generate | grep -v '^pipeline/attention_layers\.cpp:' |
  grep -v '^generate/attention_command\.cpp:')
[ -z "$hits" ] || fail "attention reached outside attention::Layer" "$hits"

[ $status = 0 ] && echo "structure: all five rules hold"
exit $status
