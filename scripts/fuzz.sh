#!/usr/bin/env bash
# Builds the libFuzzer targets (cmake --preset fuzz) and runs each for SECONDS (default 60) with a
# seed corpus made from the fixtures and examples. Findings land in fuzz-findings/<target>/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"; shift || true
./scripts/setup.sh
[ -f build-fuzz/build.ninja ] || cmake --preset fuzz
cmake --build build-fuzz
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_safetensors fuzz_model_index fuzz_config_yaml fuzz_backend_config
                                     fuzz_tokenizer_json fuzz_tokenize fuzz_sta_mask fuzz_npy)
shared=../shared
seed() {  # seed TARGET FILE...
  mkdir -p "fuzz-corpus/$1"
  shift
  for f in "$@"; do [ -f "$f" ] && cp "$f" "fuzz-corpus/$target/$(basename "$(dirname "$f")")-$(basename "$f")"; done
  return 0
}
for target in "${targets[@]}"; do
  case "$target" in
    fuzz_safetensors) seed "$target" examples/models/wan-tiny/*/*.safetensors ;;
    fuzz_model_index) seed "$target" examples/models/*/model_index.json examples/models/*/*/config.json ;;
    fuzz_config_yaml) seed "$target" configs/*.yaml examples/*.yaml ;;
    fuzz_backend_config) mkdir -p fuzz-corpus/$target
      printf 'sparsity=0.9' > fuzz-corpus/$target/kv; printf '{"sta_mode": "STA_tuning"}' > fuzz-corpus/$target/json
      printf 'moba_config.st_topk=3,spatial_chunk_size=[3,4],x="a,b"' > fuzz-corpus/$target/nested ;;
    fuzz_tokenizer_json) seed "$target" examples/models/wan-tiny/tokenizer/tokenizer.json \
                           "$shared"/fixtures/qwen3-tiny/model/tokenizer/tokenizer.json ;;
    fuzz_tokenize) mkdir -p fuzz-corpus/$target
      printf 'a red fox running through snow' > fuzz-corpus/$target/plain
      printf 'html &amp; entities &lt;b&gt; 東京 🦊' > fuzz-corpus/$target/mixed ;;
    fuzz_sta_mask) mkdir -p fuzz-corpus/$target; printf '{"1_0_0": [1, 2, 3], "2_1_1": [3, 3, 3]}' > fuzz-corpus/$target/mask ;;
    fuzz_npy) seed "$target" ;;
  esac
  mkdir -p "fuzz-findings/$target"
  echo "== $target for ${seconds}s"
  "build-fuzz/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 \
    -artifact_prefix="fuzz-findings/$target/" "fuzz-corpus/$target" 2>&1 | grep -E "^(#[0-9]+.*(DONE|pulse)|Done|==|SUMMARY)" | tail -3
done
