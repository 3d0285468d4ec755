// The bad-input matrix: broken model directories, files, flags and output places given to the
// real executable. Each must end with exit code 1, one line on stderr that says what is wrong,
// nothing on stdout, and no file (partial or not) in the output folder. Runs are --quiet, so the
// error is all that stderr holds even for the cases that fail only after generating.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/file.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

fs::path wan_tiny() {
  return testing::source_dir() / "examples/models/wan-tiny";
}

// A private copy of wan-tiny to break.
fs::path copy_of_wan_tiny(const std::string& name) {
  const fs::path copy = testing::scratch_dir("bad-input-" + name) / "model";
  fs::copy(wan_tiny(), copy, fs::copy_options::recursive);
  return copy;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
void replace_once(const fs::path& path, const std::string& from, const std::string& to) {
  std::string text = read_file(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  text.replace(at, from.size(), to);
  write_file(path, text);
}

struct BadInput {
  std::string name;
  // Breaks something and returns the mmgen arguments after "mmgen"; `out` is the output folder.
  std::function<std::string(const fs::path& out)> make;
  std::string expected;           // a fragment of the one error line
  std::string shell_prefix = "";  // e.g. a ulimit for the disk-full case
};

std::string generate_args(const fs::path& model, const fs::path& out,
                          const std::string& extra = "") {
  return "generate --model-path " + model.string() +
         " --prompt 'a red fox' --height 32 --width 48" +
         " --num-frames 1 --num-inference-steps 2 --quiet --output-path " + out.string() + " " +
         extra;
}

const fs::path& transformer_weights(const fs::path& model) {
  static fs::path path;
  path = model / "transformer/diffusion_pytorch_model.safetensors";
  return path;
}

std::vector<BadInput> bad_inputs() {
  return {
      {"truncated weights",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("truncated");
         const fs::path weights = transformer_weights(model);
         fs::resize_file(weights, fs::file_size(weights) - 1000);
         return generate_args(model, out);
       },
       "(file truncated?)"},
      {"wrong dtype",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("dtype");
         // Same header length, so every offset stays valid: only the dtype lies.
         replace_once(transformer_weights(model), R"("blocks.0.attn1.to_k.weight":{"dtype":"F32")",
                      R"("blocks.0.attn1.to_k.weight":{"dtype":"I32")");
         return generate_args(model, out);
       },
       "tensor 'blocks.0.attn1.to_k.weight' is i32, expected f32, bf16, f16 or f8_e4m3"},
      {"shape lie in config.json",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("shape");
         replace_once(model / "transformer/config.json", "\"ffn_dim\": 64", "\"ffn_dim\": 96");
         return generate_args(model, out);
       },
       "config.json implies"},
      {"shape lie in the header",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("header-shape");
         // 48x48 floats claimed as 96x48: the byte range no longer matches the shape.
         replace_once(transformer_weights(model),
                      R"("blocks.0.attn1.to_k.weight":{"dtype":"F32","shape":[48,48])",
                      R"("blocks.0.attn1.to_k.weight":{"dtype":"F32","shape":[96,48])");
         return generate_args(model, out);
       },
       "blocks.0.attn1.to_k.weight"},
      {"missing tokenizer",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("tokenizer");
         fs::remove(model / "tokenizer/tokenizer.json");
         fs::remove(model / "tokenizer/spiece.model");
         return generate_args(model, out);
       },
       "tokenizer"},
      {"tokenizer.json is a FIFO",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("fifo");
         fs::remove(model / "tokenizer/tokenizer.json");
         EXPECT_EQ(run_command("mkfifo " + (model / "tokenizer/tokenizer.json").string()).exit_code,
                   0);
         return generate_args(model, out);
       },
       "is not a regular file"},
      {"weights linked to /dev/urandom",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("urandom");
         fs::remove(transformer_weights(model));
         fs::create_symlink("/dev/urandom", transformer_weights(model));
         return generate_args(model, out);
       },
       "is not a regular file"},
      {"component key that leaves the model folder",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("key");
         replace_once(model / "model_index.json", "\"vae\": [", "\"../vae\": [");
         return generate_args(model, out);
       },
       "is not a plain folder name"},
      {"scheduler class mmgen does not implement",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("ddim");
         replace_once(model / "model_index.json", "\"UniPCMultistepScheduler\"",
                      "\"DDIMScheduler\"");
         return generate_args(model, out);
       },
       "scheduler class 'DDIMScheduler' is not supported by WanPipeline (supported schedulers: "
       "FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler)"},
      {"malformed model_index.json",
       [](const fs::path& out) {
         const fs::path model = copy_of_wan_tiny("index-json");
         write_file(model / "model_index.json", "{\"_class_name\": \"WanPipeline\",");
         return generate_args(model, out);
       },
       "model_index.json"},
      {"empty prompt file",
       [](const fs::path& out) {
         const fs::path prompts = out.parent_path() / "empty-prompts.txt";
         write_file(prompts, "# only a comment\n\n");
         return "generate --model-path " + wan_tiny().string() + " --prompt-file-path " +
                prompts.string() + " --output-path " + out.string();
       },
       "holds no prompt"},
      {"bad config value",
       [](const fs::path& out) {
         const fs::path config = out.parent_path() / "bad.yaml";
         write_file(config, "height: banana\n");
         return generate_args(wan_tiny(), out, "--config " + config.string());
       },
       "height"},
      {"unknown config key",
       [](const fs::path& out) {
         const fs::path config = out.parent_path() / "typo.json";
         write_file(config, "{\"num_inference_stepz\": 4}");
         return generate_args(wan_tiny(), out, "--config " + config.string());
       },
       "num-inference-steps"},
      {"unknown attention backend",
       [](const fs::path& out) {
         return generate_args(wan_tiny(), out, "--attention-backend flash_attn_9");
       },
       "flash_attn_9"},
      {"request beyond the bounds",
       [](const fs::path& out) {
         return generate_args(wan_tiny(), out, "--max-sequence-length 99999999");
       },
       "--max-sequence-length must be from 1 to 65536 (got 99999999)"},
      {"several GPUs on the CPU",
       [](const fs::path& out) { return generate_args(wan_tiny(), out, "--device cpu --gpus 2"); },
       "--gpus 2 spreads a generation over GPUs, but the device is cpu"},
      {"CFG parallel on an odd GPU count",
       [](const fs::path& out) {
         return generate_args(wan_tiny(), out, "--device cpu --gpus 1 --cfg-parallel");
       },
       "--cfg-parallel runs the two guidance branches on two halves of the GPUs"},
      {"NaN guidance",
       [](const fs::path& out) { return generate_args(wan_tiny(), out, "--guidance-scale nan"); },
       "--guidance-scale"},
      {"latents of the wrong shape",
       [](const fs::path& out) {
         const fs::path latents = out.parent_path() / "latents.npy";
         EXPECT_EQ(run_command(testing::mmgen_binary().string() + " " +
                               generate_args(wan_tiny(), out.parent_path() / "latents-source",
                                             "--output-format npy --output-file-name latents.npy"))
                       .exit_code,
                   0);
         fs::rename(out.parent_path() / "latents-source/latents.npy", latents);
         return generate_args(wan_tiny(), out, "--latents " + latents.string());
       },
       "--latents has shape"},
      {"output folder under a file",
       [](const fs::path& out) {
         const fs::path file = out.parent_path() / "a-file";
         write_file(file, "x");
         return generate_args(wan_tiny(), file / "outputs");
       },
       "a-file"},
      {"disk full while writing npy",
       [](const fs::path& out) {
         return generate_args(wan_tiny(), out, "--output-format npy --output-file-name x.npy");
       },
       "disk full",
       // The file size limit makes write() fail with EFBIG, as a full disk fails it with ENOSPC;
       // SIGXFSZ is ignored (inherited through exec) so the write returns the error.
       "trap '' XFSZ; ulimit -f 8;"},
      {"disk full while writing mp4",
       [](const fs::path& out) {
         return "generate --model-path " + wan_tiny().string() +
                " --prompt x --height 32 --width 48 --num-frames 5 --num-inference-steps 2 --quiet "
                "--output-format mp4 --output-path " +
                out.string();
       },
       // 2 KiB: the video (about 2.6 KiB) is cut short while its 1.2 KiB sidecar would fit, so
       // only the check of the video's boxes stands between a truncated file and the output name.
       "the video is incomplete", "trap '' XFSZ; ulimit -f 2;"},
      {"disk full while writing png",
       [](const fs::path& out) { return generate_args(wan_tiny(), out, "--output-format png"); },
       "disk full", "trap '' XFSZ; ulimit -f 1;"},
  };
}

TEST(BadInput, EachGetsOneLineAnErrorExitAndNoFile) {
  for (const BadInput& bad : bad_inputs()) {
    SCOPED_TRACE(bad.name);
    const fs::path out = testing::scratch_dir("bad-input-out") / "outputs";
    const std::string arguments = bad.make(out);
    const auto result =
        run_command(bad.shell_prefix + " " + testing::mmgen_binary().string() + " " + arguments);
    EXPECT_EQ(result.exit_code, 1) << arguments << "\n" << result.err;
    EXPECT_EQ(result.err.rfind("mmgen: error: ", 0), 0u) << result.err;
    EXPECT_NE(result.err.find(bad.expected), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
    if (fs::is_directory(out))
      for (const auto& entry : fs::directory_iterator(out))
        ADD_FAILURE() << "left behind: " << entry.path();
  }
}

// The Hugging Face cache keeps a snapshot as symlinks into a blobs folder: that layout must load
// and give the same output as the plain folder.
TEST(BadInput, HuggingFaceCacheSymlinksStillWork) {
  const fs::path root = testing::scratch_dir("hf-cache");
  const fs::path blobs = root / "blobs", snapshot = root / "snapshots/abc123";
  fs::create_directories(blobs);
  int counter = 0;
  for (const auto& entry : fs::recursive_directory_iterator(wan_tiny())) {
    const fs::path relative = fs::relative(entry.path(), wan_tiny());
    if (entry.is_directory()) {
      fs::create_directories(snapshot / relative);
      continue;
    }
    const fs::path blob = blobs / ("blob" + std::to_string(counter++));
    fs::copy_file(entry.path(), blob);
    fs::create_directories((snapshot / relative).parent_path());
    fs::create_symlink(fs::relative(blob, (snapshot / relative).parent_path()),
                       snapshot / relative);
  }
  const fs::path out = root / "outputs";
  const std::string common = " --output-format npy --negative-prompt '' --seed 3";
  const auto linked =
      run_command(testing::mmgen_binary().string() + " " +
                  generate_args(snapshot, out, "--output-file-name linked.npy" + common));
  ASSERT_EQ(linked.exit_code, 0) << linked.err;
  const auto plain =
      run_command(testing::mmgen_binary().string() + " " +
                  generate_args(wan_tiny(), out, "--output-file-name plain.npy" + common));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(read_file(out / "linked.npy"), read_file(out / "plain.npy"));
}

}  // namespace
}  // namespace mmgen
