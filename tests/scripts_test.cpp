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
// install packages and look for nvcc) do nothing; setup.sh, cmake, ctest and build/mmgen append
// their arguments to calls.log. `configured`: build/build.ninja exists already.
fs::path fake_checkout(const std::string& name, bool configured) {
  const fs::path root = testing::scratch_dir(name);
  fs::create_directories(root / "scripts");
  for (const char* script : {"demo.sh", "test.sh", "build.sh"})
    fs::copy_file(testing::source_dir() / "scripts" / script, root / "scripts" / script);
  write_script(root / "scripts/build_cuda.sh", "exit 0\n");
  const std::string record =
      "echo \"$(basename \"$0\") $*\" >> " + (root / "calls.log").string() + "\n";
  write_script(root / "scripts/setup.sh", record);
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
  ASSERT_EQ(log.size(), 4u) << read_text_file(root / "calls.log");
  // Only the executable's packages; a fresh checkout is configured (Release, Ninja, without the
  // tests and benchmarks), then only the mmgen target is built.
  EXPECT_EQ(log[0], "setup.sh --executable");
  EXPECT_EQ(log[1],
            "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMMGEN_TESTS=OFF "
            "-DMMGEN_BENCH=OFF");
  EXPECT_TRUE(log[2].starts_with("cmake --build build --parallel ")) << log[2];
  EXPECT_TRUE(log[2].ends_with(" --target mmgen")) << log[2];
  EXPECT_EQ(log[2].find("--target"), log[2].rfind("--target")) << "one target: " << log[2];
  // The model's own settings come from its folder's mmgen.yaml: the bare command.
  EXPECT_EQ(log[3],
            "mmgen generate --model-path examples/models/wan-shapes --prompt a red circle on a "
            "blue background --seed 1 --output-path outputs");
}

TEST(Scripts, TestBuildsEverythingAndRunsCtest) {
  const fs::path root = fake_checkout("scripts-test", /*configured=*/true);
  const auto result = run_script(root, "test.sh");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 3u) << read_text_file(root / "calls.log");
  // Configured already: no configure step; every target (no --target) is built.
  EXPECT_EQ(log[0], "setup.sh ");
  EXPECT_TRUE(log[1].starts_with("cmake --build build --parallel ")) << log[1];
  EXPECT_EQ(log[1].find("--target"), std::string::npos) << log[1];
  EXPECT_TRUE(log[2].starts_with("ctest --output-on-failure")) << log[2];
}

// After demo.sh, the test command turns the tests and benchmarks on in the same build folder.
TEST(Scripts, TestAfterDemoAddsTheTestsToItsBuild) {
  const fs::path root = fake_checkout("scripts-demo-then-test", /*configured=*/true);
  std::ofstream(root / "build/CMakeCache.txt") << "MMGEN_TESTS:BOOL=OFF\nMMGEN_BENCH:BOOL=OFF\n";
  const auto result = run_script(root, "test.sh");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 4u) << read_text_file(root / "calls.log");
  EXPECT_EQ(log[1], "cmake -S . -B build -DMMGEN_TESTS=ON -DMMGEN_BENCH=ON");
  EXPECT_TRUE(log[2].starts_with("cmake --build build --parallel ")) << log[2];
}

TEST(Scripts, BuildTakesTargets) {
  const fs::path root = fake_checkout("scripts-build", /*configured=*/true);
  const auto result =
      testing::run_command("PATH=" + (root / "bin").string() + ":$PATH " +
                           (root / "scripts/build.sh").string() + " mmgen cli_test");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const std::vector<std::string> log = calls(root);
  ASSERT_EQ(log.size(), 2u) << read_text_file(root / "calls.log");
  EXPECT_EQ(log[0], "setup.sh ");
  EXPECT_TRUE(log[1].ends_with(" --target mmgen --target cli_test")) << log[1];
}

}  // namespace
}  // namespace mmgen
