#!/usr/bin/env bash
# Builds the libFuzzer targets (cmake --preset fuzz: clang, ASan + UBSan) and runs each for SECONDS
# (default 60) with a seed corpus made from the fixtures and examples. The corpus grows in
# fuzz-corpus/<target>/ from run to run; findings (crash-*, leak-*, timeout-*, oom-*) and each
# run's log land in fuzz-findings/<target>/. A table of executions, speed, corpus size and findings
# per target closes the run; the exit status is 1 if any target found something.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# Each target mutates with its dictionary (fuzz/dict/<target>.dict: the parsers' keys and the
# format's syntax). Environment:
#   MMGEN_FUZZ_FORK=N       N worker processes per target (libFuzzer -fork; default: one process)
#   MMGEN_FUZZ_PREBUILT=1   use the build-fuzz/ binaries as they are (a machine without the
#                           toolchain: build here, carry build-fuzz/fuzz and the libraries)
#   MMGEN_FUZZ_MINIMISE=DIR after each run, merge the corpus into DIR/<target> (libFuzzer -merge:
#                           the fewest inputs that keep every coverage feature)
# A finding is replayed with `build-fuzz/fuzz/<target> FILE`; once fixed, it belongs under
# tests/data/fuzz/<target>/ (tests/fuzz_regression_test.cpp replays those).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
prebuilt="${MMGEN_FUZZ_PREBUILT:-0}"
[ "$prebuilt" = 1 ] || ./scripts/setup.sh
# The fuzz preset builds with clang and links libFuzzer (compiler-rt), which setup.sh leaves out.
fuzzer_lib="/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a"
if [ "$prebuilt" != 1 ] && { ! command -v clang++ > /dev/null || ! compgen -G "$fuzzer_lib" > /dev/null; }; then
  echo "fuzz.sh: installing clang and libclang-rt-dev (libFuzzer)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends clang libclang-rt-dev
fi
[ "$prebuilt" = 1 ] || [ -f build-fuzz/build.ninja ] || cmake --preset fuzz
all=(fuzz_safetensors fuzz_lora fuzz_model_index fuzz_config_yaml fuzz_backend_config fuzz_tokenizer_json
  fuzz_tokenize fuzz_sta_mask fuzz_npy fuzz_chat_template fuzz_gguf fuzz_added_tokens fuzz_config_fields)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
[ "$prebuilt" = 1 ] || cmake --build build-fuzz -j "${MMGEN_FUZZ_JOBS:-2}" --target "${targets[@]}"

shared=../shared
fixtures="$shared/fixtures"
have_python=0
command -v python3 > /dev/null && have_python=1

seed_name() {  # seed_name PATH: the path as one file name ("examples/a/b.json" -> examples-a-b.json)
  local name="${1#../}"
  echo "${name//\//-}"
}

seed() {  # seed TARGET FILE...: copies the files that exist (fixtures are read-only: cat, not cp)
  local target="$1"
  shift
  mkdir -p "fuzz-corpus/$target"
  for f in "$@"; do
    [ -f "$f" ] || continue
    local dest
    dest="fuzz-corpus/$target/seed-$(seed_name "$f")"
    rm -f "$dest"
    cat "$f" > "$dest"
  done
}

seed_text() {  # seed_text TARGET NAME TEXT
  mkdir -p "fuzz-corpus/$1"
  printf '%s' "$3" > "fuzz-corpus/$1/seed-$2"
}

npy_seed() {  # npy_seed TARGET NAME DESCR SHAPE DATA_BYTES: a version-1 .npy of zero bytes
  local header
  header="{'descr': '$3', 'fortran_order': False, 'shape': $4, }"
  # numpy pads the header with spaces so that the data starts on a 64-byte boundary.
  local padded=$(((10 + ${#header} + 1 + 63) / 64 * 64 - 10 - 1))
  mkdir -p "fuzz-corpus/$1"
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $(((padded + 1) % 256)))\\x$(printf %02x $(((padded + 1) / 256)))"
    printf '%-*s\n' "$padded" "$header"
    head -c "$5" /dev/zero
  } > "fuzz-corpus/$1/seed-$2"
}

# Safetensors files cut down to their few smallest tensors (header rewritten), so that a seed
# fits -max_len and mutations reach both the header and the data.
small_safetensors() {  # small_safetensors TARGET FILE...
  local target="$1"
  shift
  mkdir -p "fuzz-corpus/$target"
  python3 - "fuzz-corpus/$target" "$@" << 'EOF'
import json, os, struct, sys
out = sys.argv[1]
for path in sys.argv[2:]:
    if not os.path.isfile(path):
        continue
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    names = sorted(header, key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
    by_dtype = {}
    for k in names:
        by_dtype.setdefault(header[k]["dtype"], []).append(k)
    keep = sorted({v[0] for v in by_dtype.values()} | set(names[:3]))
    new, blob = {}, b""
    if meta:
        new["__metadata__"] = meta
    for k in keep:
        b, e = header[k]["data_offsets"]
        new[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"],
                  "data_offsets": [len(blob), len(blob) + e - b]}
        blob += data[b:e]
    text = json.dumps(new).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    name = path.removeprefix("../").replace("/", "-")
    with open(os.path.join(out, "seed-small-" + name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)
EOF
}

for target in "${targets[@]}"; do
  # The committed minimised corpus (fuzz/corpus/<target>.tar.xz: the inputs of the device
  # campaign that keep every coverage feature, docs/security.md) seeds each run too.
  if [ -f "fuzz/corpus/$target.tar.xz" ]; then
    mkdir -p fuzz-corpus
    tar xJf "fuzz/corpus/$target.tar.xz" -C fuzz-corpus
  fi
  case "$target" in
    fuzz_safetensors)
      if [ "$have_python" = 1 ]; then
        small_safetensors "$target" examples/models/wan-tiny/*/*.safetensors \
          "$fixtures"/wan-tiny/model/*/*.safetensors "$fixtures"/qwen3-tiny/model/*/*.safetensors \
          "$fixtures"/*/reference/reference.safetensors
      else
        seed "$target" examples/models/wan-tiny/text_encoder/model.safetensors
      fi
      ;;
    fuzz_gguf)
      seed "$target" tests/data/gguf/types.gguf
      ;;
    fuzz_lora)
      # The fixture's two LoRAs (diffusers/peft names; original Wan names with alpha and diff_b).
      seed "$target" tests/fixtures/wan-tiny-lora/a_diffusers.safetensors \
        tests/fixtures/wan-tiny-lora/b_original.safetensors
      ;;
    fuzz_model_index)
      seed "$target" examples/models/*/model_index.json examples/models/*/*/config.json \
        examples/models/*/scheduler/scheduler_config.json "$fixtures"/*/model/model_index.json \
        "$fixtures"/*/model/*/config.json "$fixtures"/*/model/scheduler/scheduler_config.json
      ;;
    fuzz_config_yaml)
      seed "$target" configs/*.yaml examples/*/*.yaml examples/config-json/config.json
      ;;
    fuzz_backend_config)
      # SPEC strings as the examples and docs pass them: a file, a JSON object, key=value pairs.
      seed_text "$target" file examples/sta/sta.json
      seed_text "$target" yaml-file examples/vmoba/vmoba.yaml
      seed "$target" examples/sta/sta.json
      seed_text "$target" object '{"topk": 0.25, "block_q": 64, "block_k": 32, "feature_map": "softmax"}'
      seed_text "$target" kv 'sparsity=0.75'
      seed_text "$target" nested 'moba_config.st_topk=3,spatial_chunk_size=[3,4],x="a,b"'
      seed_text "$target" typed 'sta_mode=STA_tuning,skip_time_steps=-2,tile_size=[1, 4, 4],y=1e-3'
      ;;
    fuzz_tokenizer_json)
      seed "$target" "$fixtures"/qwen3-tiny/model/tokenizer/tokenizer.json \
        examples/models/wan-tiny/tokenizer/tokenizer.json
      if [ "$have_python" = 1 ]; then  # and a small one without that table
        python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
t["normalizer"]["normalizers"] = [n for n in t["normalizer"]["normalizers"] if n["type"] != "Precompiled"]
t["model"]["vocab"] = t["model"]["vocab"][:400]
t["added_tokens"] = t["added_tokens"][:8]
json.dump(t, open(sys.argv[2], "w"))' examples/models/wan-tiny/tokenizer/tokenizer.json \
          "fuzz-corpus/$target/seed-wan-small-tokenizer.json"
      fi
      ;;
    fuzz_tokenize)
      seed_text "$target" plain 'a red fox running through snow'
      seed_text "$target" mixed 'html &amp; entities &lt;b&gt; 東京 🦊'
      if [ "$have_python" = 1 ] && [ -f "$fixtures/wan-tiny/reference/tokenizer.json" ]; then
        # The reference prompts: empty, unicode, extra whitespace, HTML entities, emoji, long.
        python3 -c 'import json, sys
for i, case in enumerate(json.load(open(sys.argv[1]))):
    open(f"{sys.argv[2]}/seed-reference-{i}", "w").write(case["text"])' \
          "$fixtures/wan-tiny/reference/tokenizer.json" "fuzz-corpus/$target" || true
      fi
      ;;
    fuzz_sta_mask)
      seed "$target" examples/sta/mask-strategy-wan-tiny.json
      seed_text "$target" mask '{"1_0_0": [1, 2, 3], "2_1_1": [3, 3, 3]}'
      ;;
    fuzz_npy)
      seed "$target" examples/*/*.npy
      npy_seed "$target" f4-2x3.npy '<f4' '(2, 3)' 24
      npy_seed "$target" f8-scalar.npy '<f8' '()' 8
      npy_seed "$target" f2-4.npy '<f2' '(4,)' 8
      npy_seed "$target" i8-1x2x2.npy '<i8' '(1, 2, 2)' 32
      npy_seed "$target" u1-3.npy '|u1' '(3,)' 3
      npy_seed "$target" b1-0.npy '|b1' '(0, 5)' 0
      ;;
    fuzz_chat_template)
      # The real Qwen3 template, and small ones using loops, namespaces, macros and slicing.
      seed "$target" "$fixtures"/*/model/tokenizer/chat_template.jinja
      seed_text "$target" loop '{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role|upper }}{% endfor %}'
      seed_text "$target" namespace '{%- set ns = namespace(n=0) %}{% for m in messages if m.content is string %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}'
      seed_text "$target" macro '{% macro r(x) %}{{ x|tojson(indent=2) }}{% endmacro %}{{ r(messages[2]) }}{{ raise_exception("x") if false }}'
      seed_text "$target" methods "{{ messages[1].content.split('\n')[0].strip().startswith('a') }}"
      ;;
    fuzz_added_tokens)
      # The first line lists the tokens ('|' between them), the rest is the text.
      seed_text "$target" chat $'<|im_start|>|<|im_end|>|<|endoftext|>\n<|im_start|>user\nhi<|im_end|>'
      seed_text "$target" overlap $'<|<||<|im|<|im_start|>\n<<|<|im_start|<|im_start|>>'
      seed_text "$target" prefix $'a|ab|abc|b|bc\nabcabcab cbcba'
      ;;
    fuzz_config_fields)
      seed "$target" examples/models/*/*/config.json "$fixtures"/*/model/*/config.json \
        examples/models/*/scheduler/scheduler_config.json
      seed_text "$target" wrong-types '{"num_layers": "2", "heads": true, "dim": null, "ffn": [64], "big": 1e30}'
      ;;
    *)
      echo "fuzz.sh: unknown target $target (known: ${all[*]})" >&2
      exit 2
      ;;
  esac
done

# UB counts as a finding: stop at the first report, with a stack.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export OMP_NUM_THREADS=1
summary=()
status=0
for target in "${targets[@]}"; do
  max_len=65536
  # Wan's tokenizer.json is 360 KB (its Precompiled normalizer's table): let it in whole.
  [ "$target" = fuzz_tokenizer_json ] && max_len=400000
  [ "$target" = fuzz_safetensors ] && [ "$have_python" = 0 ] && max_len=262144
  findings="fuzz-findings/$target"
  mkdir -p "$findings"
  echo "== $target for ${seconds}s"
  start=$(date +%s)
  # -timeout: an input that takes longer is a hang; -rss_limit_mb / -malloc_limit_mb: unbounded
  # allocation is a finding too.
  # libFuzzer stops at the first finding and exits non-zero.
  rc=0
  extra=()
  [ -f "fuzz/dict/$target.dict" ] && extra+=(-dict="fuzz/dict/$target.dict")
  [ -n "${MMGEN_FUZZ_FORK:-}" ] && extra+=(-fork="$MMGEN_FUZZ_FORK" -ignore_crashes=0)
  "build-fuzz/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len="$max_len" -print_final_stats=1 "${extra[@]}" \
    -artifact_prefix="$findings/" "fuzz-corpus/$target" > "$findings/last-run.log" 2>&1 || rc=$?
  elapsed=$(($(date +%s) - start))
  log="$findings/last-run.log"
  grep -E "^(==[0-9]+==ERROR|SUMMARY|.*runtime error|unexpected exception|artifact_prefix|Test unit written)" \
    "$log" | head -8 || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # -fork's driver reports running totals ("#1234567: cov: ... exec/s 8910 ...") instead.
  [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
  [ -n "$speed" ] || speed=$(grep -oE 'exec/s:? [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  if [ -n "${MMGEN_FUZZ_MINIMISE:-}" ]; then
    mkdir -p "$MMGEN_FUZZ_MINIMISE/$target"
    "build-fuzz/fuzz/$target" -merge=1 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -max_len="$max_len" "$MMGEN_FUZZ_MINIMISE/$target" "fuzz-corpus/$target" \
      > "$findings/merge.log" 2>&1 || true
  fi
  new=0
  if [ "$rc" -ne 0 ]; then
    new=1
    status=1
  fi
  corpus=$(find "fuzz-corpus/$target" -type f | wc -l)
  summary+=("$(printf '%-20s %12s %9s %8s %8s %9s' "$target" "${execs:-?}" "${speed:-?}" "$corpus" \
    "$elapsed" "$new")")
done
echo
printf '%-20s %12s %9s %8s %8s %9s\n' target executions exec/s corpus seconds findings
printf '%s\n' "${summary[@]}"
exit "$status"
