// JSON text from untrusted files and flags, parsed with one set of rules: malformed text, numbers
// past double's range and nesting deeper than kMaxJsonDepth are mmgen::Errors that name the
// source. nlohmann's parser is iterative, but copying, comparing and printing a value recurse once
// per level, so a file of 60 000 nested brackets overflowed the stack later on.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/limits.h"

namespace mmgen {

// Deeper documents are refused (core/limits.h).
constexpr int kMaxJsonDepth = Limits::kMaxJsonDepth;

// Parses `text`. Errors read "<where>: malformed JSON (<reason>); <fix>".
nlohmann::json parse_json(std::string_view text, const std::string& where, std::string_view fix);

// Parses a JSON file into an object, with one-line errors naming the file and the position.
nlohmann::json read_json_object(const std::filesystem::path& path);

}  // namespace mmgen
