#include "core/json.h"

#include "core/error.h"
#include "core/file.h"

namespace mmgen {

using json = nlohmann::json;

json parse_json(std::string_view text, const std::string& where, std::string_view fix) {
  const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
    check(depth <= kMaxJsonDepth, "{}: JSON nested deeper than {} levels; {}", where, kMaxJsonDepth,
          fix);
    return true;
  };
  try {
    return json::parse(text, limit_depth);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." or, for a number
    // past double's range, "[json.exception.out_of_range.406] number overflow parsing '1e999'".
    std::string reason = e.what();
    if (const size_t at = reason.find("] ");
        reason.starts_with("[json.") && at != std::string::npos)
      reason.erase(0, at + 2);
    fail("{}: malformed JSON ({}); {}", where, reason, fix);
  }
}

json read_json_object(const std::filesystem::path& path) {
  const json value =
      parse_json(read_text_file(path), path.string(), "fix the file or download it again");
  check(value.is_object(), "{}: expected a JSON object at the top level", path.string());
  return value;
}

}  // namespace mmgen
