// The two commands of the README: scripts/demo.sh builds the mmgen executable alone (a first
// picture should not wait for every test and benchmark to compile), scripts/test.sh builds
// everything. Each script runs in a copy of scripts/ with cmake, ctest and the built mmgen
// replaced by stand-ins that record how they were called.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/file.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;

void write_script(const fs::path& path, const std::string& body) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "#!/usr/bin/env bash\n" << body;
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
}

// A checkout with the real scripts/demo.sh, test.sh and build.sh; setup.sh and build_cuda.sh (which
// install packages and look for nvcc) do nothing; cmake, ctest and build/mmgen append their
// arguments to calls.log. `configured`: build/build.ninja exists already.
fs::path fake_checkout(const std::string& name, bool configured) {
  const fs::path root = testing::scratch_dir(name);
  fs::create_directories(root / "scripts");
  for (const char* script : {"demo.sh", "test.sh", "build.sh"})
    fs::copy_file(testing::source_dir() / "scripts" / script, root / "scripts" / script);
  write_script(root / "scripts/setup.sh", "exit 0\n");
  write_script(root / "scripts/build_cuda.sh", "exit 0\n");
  const std::string record =
      "echo \"$(basename \"$0\") $*\" >> " + (root / "calls.log").string() + "\n";
  write_script(root / "bin/cmake", record);
  write_script(root / "bin/ctest", record);
  write_script(root / "build/mmgen", record);
  if (configured) std::ofstream(root / "build/build.ninja") << "";
  for (const char* script : {"demo.sh", "test.sh", "build.sh"})
    fs::permissions(root / "scripts" / script, fs::perms::owner_exec, fs::perm_options::add);
  return root;
}

std::vector<std::string> calls(const fs::path& root) {
  std::vector<std::string> lines;
  std::istringstream in(read_text_file(root / "calls.log"));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

testing::CommandResult run_script(const fs::path& root, const std::string& script) {
  return testing::run_command("PATH=" + (root / "bin").string() + ":$PATH " +
                              (root / "scripts" / script).string());
}

TEST(Scripts, DemoBuildsOnlyTheMmgenExecutable) {
  const fs::path root = fake_checkout("scripts-demo", /*configured=*/false);
  const auto result = run_script(root, "demo.sh");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 3u) << read_text_file(root / "calls.log");
  // A fresh checkout is configured first (Release, Ninja), then only the mmgen target is built.
  EXPECT_EQ(log[0], "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release");
  EXPECT_TRUE(log[1].starts_with("cmake --build build --parallel ")) << log[1];
  EXPECT_TRUE(log[1].ends_with(" --target mmgen")) << log[1];
  EXPECT_EQ(log[1].find("--target"), log[1].rfind("--target")) << "one target: " << log[1];
  EXPECT_TRUE(log[2].starts_with("mmgen generate --model-path examples/models/wan-shapes"))
      << log[2];
  EXPECT_NE(log[2].find("--num-frames 1 "), std::string::npos) << log[2];
}

TEST(Scripts, TestBuildsEverythingAndRunsCtest) {
  const fs::path root = fake_checkout("scripts-test", /*configured=*/true);
  const auto result = run_script(root, "test.sh");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 2u) << read_text_file(root / "calls.log");
  // Configured already: no configure step; every target (no --target) is built.
  EXPECT_TRUE(log[0].starts_with("cmake --build build --parallel ")) << log[0];
  EXPECT_EQ(log[0].find("--target"), std::string::npos) << log[0];
  EXPECT_TRUE(log[1].starts_with("ctest --output-on-failure")) << log[1];
}

TEST(Scripts, BuildTakesTargets) {
  const fs::path root = fake_checkout("scripts-build", /*configured=*/true);
  const auto result =
      testing::run_command("PATH=" + (root / "bin").string() + ":$PATH " +
                           (root / "scripts/build.sh").string() + " mmgen cli_test");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 1u) << read_text_file(root / "calls.log");
  EXPECT_TRUE(log[0].ends_with(" --target mmgen --target cli_test")) << log[0];
}

}  // namespace
}  // namespace mmgen
