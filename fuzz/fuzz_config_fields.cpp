// The typed config.json readers (core/config_fields.h) and the message rule (core/text.h): any
// JSON value under any key is read as an integer, a string, a boolean, a positive float32 and a
// list of integers, and quoted in a message, with nothing but mmgen::Error; a value read is in its
// range; a message quotes no control byte and stays within its cap, and so does the line the CLI
// prints around it.
#include <array>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/config_fields.h"
#include "core/json.h"
#include "core/text.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgen;
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The rule for quoted bytes, on the raw input: no control byte or invalid UTF-8 gets through.
  const std::string shown = text_for_message(text, 120);
  if (invalid_utf8_offset(shown) != std::string::npos) std::abort();
  for (const char c : shown)
    if ((static_cast<unsigned char>(c) < 0x20 || c == 0x7F)) std::abort();
  if (shown.size() > 120 * 8 + 32) std::abort();  // a C1 control shows as 8 characters
  // The printed line (core/text.h's message_line): the same, within its byte cap, at any cap.
  const size_t cap = 16 + size % 2000;
  const std::string line = message_line(text, cap);
  if (line.size() > cap || invalid_utf8_offset(line) != std::string::npos) std::abort();
  for (const char c : line)
    if ((static_cast<unsigned char>(c) < 0x20 || c == 0x7F)) std::abort();

  return fuzz::expect_only_errors([&] {
    const nlohmann::json config = parse_json(text, "fuzz/config.json", "fix it");
    if (!config.is_object()) return;
    for (auto it = config.begin(); it != config.end(); ++it) {
      const std::string key = it.key();
      try {
        const int64_t value = config_integer(config, key.c_str(), 7, "fuzz/config.json", 1);
        if (value < 1 || value > Limits::kMaxConfigInteger) std::abort();
      } catch (const Error&) {
      }
      try {
        (void)config_string(config, key.c_str(), "", "fuzz/config.json");
      } catch (const Error&) {
      }
      try {
        (void)config_boolean(config, key.c_str(), false, "fuzz/config.json");
      } catch (const Error&) {
      }
      try {
        const float value =
            config_float(config, key.c_str(), 1.0f, "fuzz/config.json", NumberRule::Positive);
        if (!(value > 0.0f) || !std::isfinite(value)) std::abort();
      } catch (const Error&) {
      }
      try {
        std::array<int64_t, 3> values{};
        config_integers(config, key.c_str(), values, "fuzz/config.json", "fuzzed", 1);
        for (const int64_t v : values)
          if (v != 0 && (v < 1 || v > Limits::kMaxConfigInteger)) std::abort();
      } catch (const Error&) {
      }
      (void)json_for_message(*it);
    }
  });
}
