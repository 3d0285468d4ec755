#include "tests/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace mmgen::testing {

fs::path shared_dir() {
  fs::path path = MMGEN_SHARED_DIR;
  return fs::exists(path / "fixtures") ? path : fs::path();
}

fs::path source_dir() {
  return MMGEN_SOURCE_DIR;
}
fs::path mmgen_binary() {
  return MMGEN_BINARY;
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_string(actual.shape()), shape_string(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  Tensor a = actual.to(DType::F64), e = expected.to(DType::F64);
  const double* pa = a.data<double>();
  const double* pe = e.data<double>();
  double difference = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    difference += (pa[i] - pe[i]) * (pa[i] - pe[i]);
    norm += pe[i] * pe[i];
  }
  return norm == 0 ? std::sqrt(difference) : std::sqrt(difference / norm);
}

double max_abs_diff(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(shape_string(actual.shape()), shape_string(expected.shape()));
  if (actual.shape() != expected.shape()) return INFINITY;
  Tensor a = actual.to(DType::F64), e = expected.to(DType::F64);
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::abs(a.data<double>()[i] - e.data<double>()[i]));
  return worst;
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

fs::path scratch_dir(const std::string& name) {
  fs::path path = fs::temp_directory_path() / ("mmgen-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(path);
  fs::create_directories(path);
  static struct Cleanup {
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(fs::temp_directory_path() / ("mmgen-test-" + std::to_string(::getpid())),
                     ignored);
    }
  } cleanup;
  return path;
}

CommandResult run_command(const std::string& command) {
  fs::path dir = scratch_dir("command-" + std::to_string(std::rand()));
  const std::string full = command + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  int status = std::system(full.c_str());
  auto slurp = [](const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
}

fs::path copy_of_wan_tiny(const std::string& name) {
  const fs::path copy = scratch_dir(name) / "model";
  fs::copy(source_dir() / "examples/models/wan-tiny", copy, fs::copy_options::recursive);
  return copy;
}

void write_json_file(const fs::path& path, const nlohmann::json& value) {
  std::ofstream(path, std::ios::trunc) << value.dump(2);
}

void set_component_class(const fs::path& model, const std::string& component,
                         const std::string& library, const std::string& class_name) {
  const fs::path path = model / "model_index.json";
  nlohmann::json index = read_json_object(path);
  index[component] = {library, class_name};
  write_json_file(path, index);
}

}  // namespace mmgen::testing
