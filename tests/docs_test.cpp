// The documentation stays true: docs/configuration.md is what `mmgen options --markdown` prints
// (MMGEN_UPDATE_DOCS=1 rewrites it), and every relative link in docs/, README.md and
// examples/README.md points at a file that exists.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "generate/options.h"
#include "generate/options_reference.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Docs, ConfigurationReferenceIsGeneratedFromTheOptionTable) {
  const fs::path path = testing::source_dir() / "docs/configuration.md";
  const std::string generated = cli::configuration_markdown();
  if (const char* update = std::getenv("MMGEN_UPDATE_DOCS"); update && std::string(update) == "1")
    std::ofstream(path) << generated;
  ASSERT_TRUE(fs::exists(path)) << "run `mmgen options --markdown > docs/configuration.md`";
  EXPECT_EQ(slurp(path), generated)
      << path << " is stale; run `mmgen options --markdown > docs/configuration.md`";
  for (const auto& option : cli::generate_options())
    EXPECT_NE(generated.find(fmt::format("| `--{}` |", option.name)), std::string::npos)
        << option.name;
  // The binary prints the same.
  const auto printed =
      testing::run_command(testing::mmgen_binary().string() + " options --markdown");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(printed.out, generated);
}

TEST(Docs, RelativeLinksPointAtFilesThatExist) {
  std::vector<fs::path> pages = {testing::source_dir() / "README.md",
                                 testing::source_dir() / "examples/README.md"};
  for (const auto& entry : fs::directory_iterator(testing::source_dir() / "docs"))
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  const std::regex link(R"(\]\(([^)#\s]+)(#[^)]*)?\))");
  size_t checked = 0;
  for (const auto& page : pages) {
    const std::string text = slurp(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link);
         it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1];
      if (target.find("://") != std::string::npos || target.starts_with("mailto:")) continue;
      EXPECT_TRUE(fs::exists(page.parent_path() / target))
          << page.filename() << " links to " << target << ", which does not exist";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10u);
}

}  // namespace
}  // namespace mmgen
