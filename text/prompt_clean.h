// Wan's prompt cleaning (diffusers pipeline_wan.prompt_clean) without ftfy, which the reference
// environment does not have: HTML unescape twice (Python html.unescape), strip, every run of
// white space collapsed to one space, strip.
#pragma once

#include <string>
#include <string_view>

namespace mmgen::tokenizers {

std::string clean_prompt(std::string_view text);

// Python's html.unescape: named references (HTML5 table, with and without ';', longest prefix
// for unknown names) and numeric ones (&#65; &#x41;, with the HTML5 fix-ups).
std::string html_unescape(std::string_view text);

}  // namespace mmgen::tokenizers
