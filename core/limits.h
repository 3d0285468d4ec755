// Every bound mmgen puts on what it reads from untrusted input, in one place: model directories
// and the files in them, config and prompt files, and the request a user asks for. A value past
// a bound is refused with a clear error before any work that depends on it, so no file or flag
// can make mmgen allocate without bound or overflow a size computation. docs/security.md lists
// them and says why each is where it is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mmgen {

struct Limits {
  // Files.
  static constexpr size_t kMaxTextFile = 256ull << 20;            // JSON / YAML / tokenizer files
  static constexpr size_t kMaxSafetensorsHeader = 100ull << 20;   // as the safetensors crate
  static constexpr uint64_t kMaxGgufEntries = uint64_t(1) << 20;  // GGUF tensors, metadata keys
  static constexpr uint64_t kMaxGgufArray = uint64_t(1) << 24;    // elements of a metadata array
  static constexpr size_t kMaxPromptFile = 64ull << 20;           // --prompt-file-path
  // numpy's own max_header_size; std::regex recursion on longer ones overflowed the stack.
  static constexpr size_t kMaxNpyHeader = 10000;

  // Structure: nesting depth of JSON (serde_json, which Hugging Face's tokenizers read
  // tokenizer.json with, stops at the same depth; real files use under 10), values of a YAML file
  // once its aliases are expanded (a few lines of aliases can stand for billions of values; a
  // config file holds a few dozen), and group nesting of a tokenizer's regex.
  static constexpr int kMaxJsonDepth = 128;
  static constexpr size_t kMaxYamlValues = size_t(1) << 20;
  static constexpr int kMaxRegexGroupDepth = 256;
  // Matching a tokenizer's regex: recursion depth (a repeated group recurses per repetition; real
  // patterns repeat single characters, which do not recurse; 4096 levels stay well inside an 8 MB
  // stack), and backtracking steps per search, linear in the text (Qwen3's pattern took 2 to 20
  // per character on 100 000-character prompts; (a+)+b backtracks exponentially).
  static constexpr int kMaxRegexMatchDepth = 4096;
  static constexpr size_t kRegexStepsPerCharacter = 1000;
  static constexpr size_t kRegexBaseSteps = size_t(1) << 20;

  // Rendering a tokenizer's chat template (text/jinja_*), a small program from the
  // model folder: nesting of its statements and expressions (real templates nest under 10), the
  // statements and expressions being evaluated at once, macro calls included (the evaluator
  // recurses; 1000 levels stay well inside an 8 MB stack under ASan), evaluation steps (one per
  // statement, expression, loop iteration and item of a list a function makes; a template over
  // hundreds of messages takes tens of thousands), and the size of any string (the output
  // included) and list it builds (no prompt comes near; doubling a string in a loop would
  // otherwise exhaust memory).
  static constexpr int kMaxTemplateNesting = 128;
  static constexpr int kMaxTemplateEvalDepth = 1000;
  static constexpr int64_t kMaxTemplateSteps = 2'000'000;
  static constexpr size_t kMaxTemplateStringBytes = 64ull << 20;
  static constexpr size_t kMaxTemplateListItems = size_t(1) << 20;

  // Integers in a component's config.json (layers, widths, heads, vocabulary sizes): generous for
  // any real model, small enough that the product of two never overflows 64 bits.
  static constexpr int64_t kMaxConfigInteger = int64_t(1) << 24;

  // Requests: far beyond any model's use (Wan2.1 is trained up to 1280x720, 81 frames, 50 steps,
  // 512 tokens) yet small enough that no product of them overflows 64 bits. The memory estimate
  // then refuses what cannot fit this machine.
  static constexpr int64_t kMaxImageSide = 16384;         // --height, --width (pixels)
  static constexpr int64_t kMaxFrames = 4097;             // --num-frames
  static constexpr int64_t kMaxInferenceSteps = 10000;    // --num-inference-steps
  static constexpr int64_t kMaxSequenceLength = 1 << 16;  // --max-sequence-length (tokens)
  static constexpr double kMaxGuidanceScale = 1000.0;     // --guidance-scale
  static constexpr double kMaxFps = 1000.0;               // --fps
  // libx264 refuses a time base past 1/1000 s per frame (--fps 0.001 failed only at the write,
  // after the whole run); one frame per 100 s is slower than any real video.
  static constexpr double kMinFps = 0.01;
  static constexpr int64_t kMaxThreads = 4096;           // --threads
  static constexpr int64_t kMaxGpus = 64;                // --gpus (ranks of one generation)
  static constexpr int64_t kMaxPromptsPerFile = 100000;  // lines of --prompt-file-path
  // One prompt's bytes: text encoders keep at most a few thousand tokens, so this only stops
  // megabytes of text from being tokenized only to be cut.
  static constexpr size_t kMaxPromptBytes = 1ull << 20;
};

}  // namespace mmgen
