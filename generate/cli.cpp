#include "generate/cli.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "core/system_memory.h"
#include "core/text.h"
#include "generate/attention_command.h"
#include "generate/backends_command.h"
#include "generate/convert_command.h"
#include "generate/encode_command.h"
#include "generate/environment_check.h"
#include "generate/error_line.h"
#include "generate/foreign_names.h"
#include "generate/generate_command.h"
#include "generate/inspect_command.h"
#include "generate/options_reference.h"

namespace mmgen {
namespace {

constexpr const char* kUsage =
    "mmgen: generate images and videos with diffusion transformers\n\n"
    "Usage: mmgen <command> [options]\n\n"
    "Commands:\n"
    "  generate   run a pipeline on a prompt (mmgen generate --help)\n"
    "  inspect    show a model's components, sizes, attention backends and the memory a request\n"
    "             needs (mmgen inspect --help)\n"
    "  encode     write the prompt embeddings of the text encoder (mmgen encode --help)\n"
    "  convert    write a component's weights as GGUF (q8_0, q4_k, ...) or FP8 safetensors\n"
    "  options    every generate option, its type, default and meaning (--markdown, --json)\n"
    "  backends   list the attention backends and whether each runs here (--json, --markdown)\n"
    "  attention  run one attention backend on q, k, v .npy files (mmgen attention --help)\n\n"
    "Run `mmgen <command> --help` for a command's options; `mmgen --version` (-V) prints the\n"
    "version.\n";

void setup_logging() {
  // Logs go to stderr so that stdout carries only results (the dry-run JSON).
  auto logger = spdlog::stderr_color_mt("mmgen");
  logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  spdlog::set_default_logger(logger);
}

bool wants_help(const std::vector<std::string>& arguments) {
  for (const auto& argument : arguments)
    if (argument == "--help" || argument == "-h") return true;
  return false;
}

}  // namespace

int run_cli(int argc, char** argv) {
  std::vector<std::string> arguments(argv + 1, argv + argc);
  keep_freed_host_memory();
  try {
    setup_logging();
    cli::check_environment();
    if (arguments.empty() || arguments[0] == "--help" || arguments[0] == "-h" ||
        arguments[0] == "help") {
      std::cout << kUsage;
      return arguments.empty() ? 2 : 0;
    }
    // --version (or -V) anywhere: `mmgen generate ... --version` answers too, as --help does.
    if (std::any_of(arguments.begin(), arguments.end(),
                    [](const std::string& a) { return a == "--version" || a == "-V"; })) {
      std::cout << "mmgen 0.1.0\n";
      return 0;
    }
    const std::string command = arguments[0];
    arguments.erase(arguments.begin());
    if (command == "generate") {
      if (wants_help(arguments)) {
        std::cout << cli::generate_help(arguments);
        return 0;
      }
      return cli::run_generate(arguments);
    }
    if (command == "backends") return cli::run_backends(arguments);
    if (command == "options") return cli::run_options(arguments);
    if (command == "inspect") {
      if (wants_help(arguments)) {
        std::cout << cli::inspect_help();
        return 0;
      }
      return cli::run_inspect(arguments);
    }
    if (command == "encode") return cli::run_encode(arguments);
    if (command == "convert") return cli::run_convert(arguments);
    if (command == "attention") {
      if (wants_help(arguments)) {
        std::cout << cli::attention_help();
        return 0;
      }
      return cli::run_attention(arguments);
    }
    if (const auto hint = cli::foreign_command_hint(command))
      fail("unknown command '{}': {}", command, *hint);
    fail("unknown command '{}'; run `mmgen --help` for the list", command);
  } catch (const Error& e) {
    // Messages quote names and values from untrusted files: control bytes (a terminal escape, a
    // newline) are shown escaped, quoted values and a runaway message are cut, so it stays one
    // readable line of at most kMaxErrorLine bytes (docs/security.md).
    cli::print_error_line("", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "mmgen: error: out of memory; try a smaller --height/--width/--num-frames\n");
    return 1;
  } catch (const fs::filesystem_error& e) {
    // A link loop, a name too long, a permission: the file and the system's reason.
    cli::print_error_line("", filesystem_error_line(e));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mmgen: internal error: %s (please report it)\n", e.what());
    return 70;
  }
}

}  // namespace mmgen
