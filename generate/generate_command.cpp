#include "generate/generate_command.h"

#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>

#include "attention/backend_config.h"
#include "core/error.h"
#include "core/file.h"
#include "core/gemm_cpu.h"
#include "core/interrupt.h"
#include "core/thread_placement.h"
#ifdef MMGEN_HAVE_CUDA
#include "core/cuda/device_memory.h"
#endif
#include "core/system_memory.h"
#include "core/text.h"
#include "generate/error_line.h"
#include "generate/memory_check.h"
#include "generate/model_folder_defaults.h"
#include "generate/multi_gpu.h"
#include "generate/options.h"
#include "generate/pipeline_defaults.h"
#include "generate/prompt_file.h"
#include "generate/settings.h"
#include "pipeline/component_loras.h"
#include "pipeline/hub_cache.h"
#include "pipeline/output.h"
#include "pipeline/progress.h"

namespace mmgen::cli {

using json = nlohmann::json;

ResolvedGenerate resolve_generate(const std::vector<std::string>& arguments) {
  const SettingsLayer command_line = parse_arguments(Command::Generate, arguments);
  SettingsLayer config_file = json::object();
  if (command_line.contains("config")) {
    const fs::path config_path = command_line["config"].get<std::string>();
    config_file = load_config_file(config_path);
    // The backend settings (a file named there, a mask file named in them) are read from the
    // config file's folder, not the current one.
    if (config_file.contains("attention-backend-config"))
      config_file["attention-backend-config"] = attention::parse_backend_config_spec(
          config_file["attention-backend-config"],
          fmt::format("--config {}: attention_backend_config", config_path.string()),
          config_path.parent_path().empty() ? fs::path(".") : config_path.parent_path());
  }

  // The model path decides the pipeline, whose defaults sit below the config file and the flags.
  const SettingsLayer upper = merge_layers({config_file, command_line});
  check(upper.contains("model-path"),
        "generate: no model; pass --model-path DIR (a folder with model_index.json)");
  const bool batch = upper.contains("prompt-file-path");
  check(!batch || !upper.contains("prompt"),
        "generate: both --prompt and --prompt-file-path are given; pass one of them");
  check(batch || upper.contains("prompt") || upper.contains("prompt-embeds"),
        "generate: no prompt; pass --prompt TEXT, --prompt-file-path FILE or --prompt-embeds FILE");
  check(!batch || !upper.contains("prompt-embeds"),
        "generate: --prompt-embeds holds one prompt; it cannot go with --prompt-file-path");

  std::map<std::string, fs::path> component_paths;
  if (upper.contains("component-paths"))
    for (auto it = upper["component-paths"].begin(); it != upper["component-paths"].end(); ++it)
      component_paths[it.key()] = it->is_string() ? it->get<std::string>() : std::string();

  ResolvedGenerate resolved;
  if (batch) {
    const std::string file = upper["prompt-file-path"].get<std::string>();
    resolved.batch_prompts = read_prompt_file(file);
    check(!resolved.batch_prompts.empty(),
          "--prompt-file-path {}: the file holds no prompt (blank lines and lines starting with # "
          "are skipped); put one prompt per line",
          file);
  }
  const fs::path model_path = resolve_model_path(
      upper["model-path"].get<std::string>(),
      upper.contains("revision") ? std::optional<std::string>(upper["revision"].get<std::string>())
                                 : std::nullopt);
  if (!component_paths.empty()) {
    // --<component>-path exists only for this model's components: read its index first.
    const ModelIndex plain = load_model_index(model_path);
    check_component_paths(command_line, plain.component_names(), plain.absent);
    check_component_paths(config_file, plain.component_names(), plain.absent,
                          command_line.contains("config")
                              ? command_line["config"].get<std::string>()
                              : std::string());
  }
  resolved.index = load_model_index(model_path, component_paths);
  resolved.spec =
      &find_pipeline(resolved.index.class_name, resolved.index.root / "model_index.json");
  // The component classes first: nothing below (defaults, validation, memory) reads a config of a
  // class the pipeline cannot load.
  check_components(*resolved.spec, resolved.index);
  const PipelineDefaults pipeline_defaults = load_pipeline_defaults(*resolved.spec, resolved.index);
  resolved.defaults_variant = pipeline_defaults.variant;
  const ModelFolderDefaults folder_defaults = load_model_folder_defaults(resolved.index.root);
  resolved.model_defaults_file = folder_defaults.file;

  const std::string config_source = command_line.contains("config")
                                        ? "--config " + command_line["config"].get<std::string>()
                                        : std::string();
  const std::vector<std::pair<const SettingsLayer*, std::string>> layers = {
      {&command_line, "command line"},
      {&config_file, config_source},
      {&folder_defaults.layer, folder_defaults.file.string()},
      {&pipeline_defaults.layer, "configs/" + resolved.spec->defaults_file},
  };
  SettingsLayer merged = merge_layers({builtin_defaults(), pipeline_defaults.layer,
                                       folder_defaults.layer, config_file, command_line});
  merged.erase("config");
  for (auto it = merged.begin(); it != merged.end(); ++it) {
    std::string source = "built-in";
    for (const auto& [layer, name] : layers)
      if (layer->contains(it.key())) {
        source = name;
        break;
      }
    if (source == "configs/" + resolved.spec->defaults_file &&
        pipeline_defaults.variant_keys.count(it.key()))
      source += " (" + pipeline_defaults.variant + ")";
    std::string key = it.key();
    std::replace(key.begin(), key.end(), '-', '_');
    resolved.setting_sources[key] = source;
  }
  resolved.request = request_from_settings(merged);
  resolved.request.model_path = resolved.index.root;  // the folder an id resolved to
  for (std::string& warning :
       attach_loras(resolved.index, resolved.request.loras, resolved.request.lora_mode))
    resolved.warnings.push_back(std::move(warning));
  if (!resolved.request.loras.empty())
    resolved.loras = loras_metadata(resolved.index, resolved.request.loras);
  for (auto it = config_file.begin(); it != config_file.end(); ++it)
    if (!command_line.contains(it.key())) resolved.request.from_config_file.insert(it.key());
  for (const SettingsLayer* layer : std::initializer_list<const SettingsLayer*>{
           &command_line, &config_file, &folder_defaults.layer})
    for (auto it = layer->begin(); it != layer->end(); ++it)
      resolved.request.given.insert(it.key());
  if (command_line.contains("config")) resolved.request.settings["config"] = command_line["config"];
  resolved.spec->validate(resolved.request, resolved.index);
  if (const std::string warning = stills_warning(folder_defaults, resolved.request.num_frames);
      !warning.empty())
    resolved.warnings.push_back(warning);
  if (resolved.spec->unused_settings)
    for (const auto& note : resolved.spec->unused_settings(resolved.request))
      resolved.warnings.push_back(note);
  resolved.latent_shape = resolved.spec->latent_shape(resolved.request, resolved.index);
  resolved.attention = plan_attention(resolved.index, resolved.request);
  const std::string flow_shift_source =
      command_line.contains("flow-shift")
          ? "--flow-shift"
          : "--config " + upper.value("config", std::string("file"));
  resolved.flow_shift = flow_shift_choice(resolved.request, resolved.index,
                                          pipeline_defaults.flow_shift_presets, flow_shift_source);
  return resolved;
}

json dry_run_json(const ResolvedGenerate& resolved, const json& memory_plan) {
  json components = json::object();
  for (const auto& [name, entry] : resolved.index.components) {
    json component = {
        {"class", entry.class_name},
        {"library", entry.library},
        {"path", entry.path.string()},
        // A component given as one file: the file (path is then where its config is read).
        {"weights_file", entry.weights_file.empty() ? json() : json(entry.weights_file.string())}};
    component.update(resolved.attention.component_json(name));
    if (!entry.loras.empty()) component["loras"] = loras_json(entry);
    components[name] = component;
  }
  json out = {
      {"pipeline", resolved.index.class_name},
      {"model_path", resolved.index.root.string()},
      {"request", resolved.request.settings},
      {"device", {{"device", resolved.request.device}, {"reason", resolved.request.device_reason}}},
      {"latent_shape", resolved.latent_shape},
      {"components", components},
      {"attention_backend_config", resolved.attention.config_json()}};
  if (!resolved.batch_prompts.empty()) out["prompts"] = resolved.batch_prompts;
  out["defaults_variant"] =
      resolved.defaults_variant.empty() ? json() : json(resolved.defaults_variant);
  out["flow_shift"] = resolved.flow_shift ? resolved.flow_shift->to_json() : json();
  out["model_defaults_file"] =
      resolved.model_defaults_file.empty() ? json() : json(resolved.model_defaults_file.string());
  out["setting_sources"] = resolved.setting_sources;
  out["warnings"] = resolved.warnings;
  out["memory"] = memory_plan;
  // The GPU's share (--device cuda): what --max-gpu-memory is held against.
  if (resolved.request.device == "cuda")
    out["gpu_weights"] = gpu_weights_json(*resolved.spec, resolved.request, resolved.index,
                                          take_inventory(resolved.index));
  return out;
}

Request batch_request(const ResolvedGenerate& resolved, size_t index) {
  Request request = resolved.request;
  request.prompt = resolved.batch_prompts.at(index);
  request.settings["prompt"] = request.prompt;
  return request;
}

json output_settings(const ResolvedGenerate& resolved, const Request& request) {
  json settings = request.settings;
  settings.erase("dry_run");
  settings["pipeline"] = resolved.index.class_name;
  settings["generator"] = "mmgen 0.1.0";
  json backends = json::object();
  for (const auto& [name, entry] : resolved.index.components) {
    const json fields = resolved.attention.component_json(name);
    if (fields["attention_backend"].is_null()) continue;  // no attention layers
    backends[name] = {{"backend", fields["attention_backend"]},
                      {"source", fields["attention_backend_source"]}};
  }
  settings["attention_backends"] = backends;
  // What ran, not what was asked: the device --device auto chose (request.settings has it), the
  // scheduler class model_index.json names, the flow shift in force wherever it came from, and the
  // validated backend settings (defaults filled in, file paths resolved) instead of the SPEC text.
  settings["device"] = request.device;
  if (resolved.index.components.count("scheduler"))
    settings["scheduler"] = resolved.index.component("scheduler").class_name;
  settings["flow_shift"] = resolved.flow_shift ? json(resolved.flow_shift->value) : json();
  settings["attention_backend_config"] = resolved.attention.config_json();
  settings["setting_sources"] = resolved.setting_sources;
  if (!resolved.loras.empty()) settings["loras"] = resolved.loras;
  return settings;
}

namespace {

// What this build and this CPU can do: checked by the run and the dry run alike.
void check_runtime_support(const Request& request) {
  check(!request.cpu_bf16_products || cpu::bf16_products_available(),
        "--cpu-matmul-precision bf16 needs a CPU with AVX-512 BF16 and an mmgen built on it "
        "(-DMMGEN_NATIVE=ON, the default); this build has none: leave it at fp32");
}

void apply_runtime_settings(const Request& request) {
  spdlog::set_level(request.quiet ? spdlog::level::err
                                  : spdlog::level::from_str(request.log_level));
  if (request.threads > 0) omp_set_num_threads(int(request.threads));
  cpu::set_product_precision(request.cpu_bf16_products ? cpu::ProductPrecision::BF16
                                                       : cpu::ProductPrecision::F32);
}

// Runs one request on the loaded pipeline and writes its output to `path`; the files written are
// added to `kept`.
void generate_one(const PipelineRunner& run, const ResolvedGenerate& resolved,
                  const Request& request, const fs::path& path, std::vector<fs::path>& kept) {
  const Tensor frames = run(request);
  if (request.parallel && !request.parallel->leader()) return;  // the leader writes
  // The file may have appeared while this request ran (another mmgen writing the same name).
  check(request.overwrite || !fs::exists(path),
        "{} appeared while generating; pass --overwrite to replace it", path.string());
  Progress write("write", 1);
  for (const auto& written : write_frames(frames, request.output_format, path,
                                          output_settings(resolved, request), request.fps)) {
    spdlog::info("wrote {}", written.string());
    kept.push_back(written);
  }
  write.finish();
}

// The prompt as a failure line quotes it: at most 60 characters.
std::string short_prompt(const std::string& prompt) {
  return prompt.size() <= 60 ? prompt : prompt.substr(0, 57) + "...";
}

// Prompts of a batch whose embeddings are encoded together, ahead of their runs: one pass of the
// text encoder instead of one per prompt, with the embeddings of this many prompts held at once
// (8 MiB each for Wan2.1's 512 x 4096).
constexpr size_t kEncodeAhead = 32;

// Encodes prompts [first, first + kEncodeAhead) of the batch in one pass. When that fails (a
// prompt the tokenizer refuses), each prompt is encoded by its own run instead, so the failure is
// reported for that prompt alone.
void encode_chunk_ahead(const PipelineRunner& run, const ResolvedGenerate& resolved, size_t first) {
  if (!run.encode_ahead) return;
  std::vector<Request> chunk;
  for (size_t i = first; i < std::min(first + kEncodeAhead, resolved.batch_prompts.size()); ++i)
    chunk.push_back(batch_request(resolved, i));
  try {
    run.encode_ahead(chunk);
  } catch (const Error& e) {
    spdlog::warn("encode: the batch could not be encoded together ({}); encoding prompt by prompt",
                 e.what());
  } catch (const std::bad_alloc&) {
    spdlog::warn(
        "encode: not enough memory to encode {} prompts together; encoding prompt by "
        "prompt",
        chunk.size());
  }
}

// Every prompt of the file through the pipeline loaded once; a failure is reported on one line
// and the batch goes on. Returns the number of failed prompts.
size_t generate_batch(const PipelineRunner& run, const ResolvedGenerate& resolved,
                      std::vector<fs::path>& kept) {
  const size_t count = resolved.batch_prompts.size();
  size_t failed = 0;
  for (size_t i = 0; i < count; ++i) {
    stop_if_requested();
    if (i % kEncodeAhead == 0) encode_chunk_ahead(run, resolved, i);
    const Request request = batch_request(resolved, i);
    spdlog::info("prompt {} of {}: {}", i + 1, count, request.prompt);
    std::string problem;
    try {
      generate_one(run, resolved, request, output_file_path(request, i), kept);
    } catch (const Error& e) {
      problem = e.what();
    } catch (const std::bad_alloc&) {
      problem = "out of memory; try a smaller --height/--width/--num-frames";
    } catch (const fs::filesystem_error& e) {
      problem = filesystem_error_line(e);
    } catch (const std::exception& e) {
      problem = std::string("internal error: ") + e.what() + " (please report it)";
    }
    if (problem.empty()) continue;
    // Several ranks: a failure on one would leave the others waiting in a collective; the run
    // stops (the leader reports it).
    if (request.parallel) fail("prompt {} of {}: {}", i + 1, count, problem);
    ++failed;
    print_error_line(fmt::format("prompt {} of {} (\"{}\"): ", i + 1, count,
                                 text_for_message(short_prompt(request.prompt))),
                     problem);
  }
  if (!resolved.request.parallel || resolved.request.parallel->leader())
    std::cout << fmt::format("generate: {} of {} prompt(s) written to {}, {} failed",
                             count - failed, count, resolved.request.output_path.string(), failed)
              << std::endl;
  return failed;
}

// Refuses, before anything is loaded, a request whose memory estimate exceeds the free memory.
// Returns the plan it checked (the dry run prints it).
json check_memory(const ResolvedGenerate& resolved) {
  const Request& request = resolved.request;
  const ModelInventory inventory = take_inventory(resolved.index);
  if (request.device == "cuda") {
    const GpuOffload offload =
        planned_gpu_offload(*resolved.spec, request, resolved.index, inventory);
    if (offload.blocks)
      spdlog::info(
          "gpu offload: blocks (the text encoder and the transformer each leave the GPU after "
          "their stage; the transformer's blocks stream in from page-locked host memory, two on "
          "the GPU at a time)");
    else if (offload.stages)
      spdlog::info(
          "gpu offload: stages (the text encoder and the transformer each leave the GPU after "
          "their stage)");
  }
  // --max-gpu-memory: the weights resident on the GPU at once must fit under the limit.
  if (const auto refusal =
          gpu_weights_refusal(*resolved.spec, request, resolved.index, inventory)) {
    if (!request.skip_memory_check) fail("generate: {}", *refusal);
    spdlog::warn("gpu memory: {}", *refusal);
  }
  const MemoryCheck memory =
      check_request_memory(*resolved.spec, request, resolved.index, inventory, available_memory());
  json plan = {{"estimate", memory.estimate.to_json()},
               {"needed_bytes", memory.estimate.total()},
               {"available_bytes", memory.available ? json(memory.available->bytes) : json()},
               {"available_source", memory.available ? json(memory.available->source) : json()},
               {"fits", memory.fits()},
               {"checked", memory.available.has_value()}};
  if (!memory.available) {
    spdlog::warn("memory: cannot read the free memory here; not checking the request's {}",
                 format_bytes(memory.estimate.total()));
    return plan;
  }
  spdlog::debug("memory: the request needs about {} ({} is free, {})",
                format_bytes(memory.estimate.total()), format_bytes(memory.available->bytes),
                memory.available->source);
  if (memory.fits()) return plan;
  if (request.skip_memory_check) {
    spdlog::warn("memory: {}", memory_refusal(memory, request));
    return plan;
  }
  fail("generate: {}", memory_refusal(memory, request));
}

// The one line printed when a signal stopped the run: what was kept, and that nothing partial is.
std::string interruption_message(const Interrupted& stop, const std::vector<fs::path>& kept) {
  std::string text = fmt::format("stopped by {}{}; ", signal_description(stop.signal_number),
                                 stop.where.empty() ? "" : " " + stop.where);
  if (kept.empty()) return text + "nothing was written (no partial output is left)";
  constexpr size_t kListed = 4;
  std::string names;
  for (size_t i = 0; i < kept.size() && i < kListed; ++i)
    names += (i ? ", " : "") + kept[i].string();
  if (kept.size() > kListed) names += fmt::format(" and {} more", kept.size() - kListed);
  return text + fmt::format("kept {} finished file(s): {} (no partial output is left)", kept.size(),
                            names);
}

int run_resolved(ResolvedGenerate resolved) {
  const auto start = std::chrono::steady_clock::now();
  // Before the settings take effect, so that the run refuses as the dry run does, in its words.
  check_runtime_support(resolved.request);
  apply_runtime_settings(resolved.request);
  // --gpus N: the leader starts the other ranks and all join; the others log warnings only.
  JoinedRanks ranks;
  if (resolved.request.gpus > 1) {
    // The ranks meet in collectives inside each forward: they stop together at a step boundary.
    set_stop_between_blocks(false);
    ranks = join_ranks(resolved.request, *resolved.spec);
    resolved.request.parallel = ranks.run;
    // Each rank runs one host thread per CPU of its share (join_ranks gave every rank its own),
    // unless --threads or OMP_NUM_THREADS says otherwise.
    if (resolved.request.threads == 0 && !std::getenv("OMP_NUM_THREADS"))
      omp_set_num_threads(std::max(1, int(allowed_cpus().size())));
    if (!ranks.run->leader() && spdlog::get_level() < spdlog::level::warn)
      spdlog::set_level(spdlog::level::warn);
    spdlog::info(
        "parallel: {} GPUs, {} sequence parallel (Ulysses) x {} guidance branch(es); rank 0 on "
        "CPUs {} with {} host threads",
        resolved.request.gpus, ranks.run->layout.sequence_degree(), ranks.run->layout.cfg_degree,
        cpu_list(allowed_cpus()), omp_get_max_threads());
  }
  const Request& request = resolved.request;
  preflight(resolved);
  const fs::path path = output_file_path(request);
  for (const auto& warning : resolved.warnings) spdlog::warn("{}", warning);
  spdlog::info("{} on {}: {}x{}, {} frame(s), {} steps, {}, seed {}", resolved.index.class_name,
               resolved.index.root.string(), request.width, request.height, request.num_frames,
               request.num_inference_steps,
               resolved.spec->guidance_summary ? resolved.spec->guidance_summary(request)
                                               : fmt::format("guidance {}", request.guidance_scale),
               request.seed);
  if (!resolved.model_defaults_file.empty())
    spdlog::info("defaults: {} (the model folder's own)", resolved.model_defaults_file.string());
  if (request.settings.value("seed_was_random", false))
    spdlog::info("seed: {} drawn at random for --seed -1; pass --seed {} to repeat this output",
                 request.seed, request.seed);
  if (!resolved.defaults_variant.empty())
    spdlog::info("defaults: configs/{} for {}", resolved.spec->defaults_file,
                 resolved.defaults_variant);
  spdlog::info("device: {} ({})", request.device, request.device_reason);
  if (request.cpu_bf16_products && request.device == "cpu")
    spdlog::info(
        "cpu products: bf16 (--cpu-matmul-precision bf16: inputs and weights rounded to bfloat16, "
        "float32 sums; not diffusers' float32 numbers)");
  else if (request.cpu_bf16_products)
    spdlog::info("cpu products: --cpu-matmul-precision bf16 has no effect on --device {}",
                 request.device);
  if (request.gpu_fp8_products && request.device == "cuda")
    spdlog::info(
        "gpu products: fp8 (--gpu-matmul-precision fp8: the transformer blocks' linear layers in "
        "e4m3 with per-channel and per-token scales; not diffusers' bf16 numbers)");
  else if (request.gpu_fp8_products)
    spdlog::info("gpu products: --gpu-matmul-precision fp8 has no effect on --device {}",
                 request.device);
  if (request.max_gpu_memory && request.device == "cuda")
    spdlog::info("gpu memory: at most {} (--max-gpu-memory){}",
                 format_bytes(request.max_gpu_memory),
                 resolved.spec->stage_offload ? "" : "; every component stays resident");
  else if (request.max_gpu_memory)
    spdlog::info("gpu memory: --max-gpu-memory has no effect on --device {}", request.device);
#ifdef MMGEN_HAVE_CUDA
  if (request.device == "cuda")
    cuda::CachingAllocator::instance().set_limit(request.max_gpu_memory);
#endif
  if (resolved.flow_shift) spdlog::info("scheduler: {}", resolved.flow_shift->explanation);
  log_attention_plan(resolved.attention);
  // From here a Ctrl-C or SIGTERM stops after the current block (core/interrupt.h).
  install_stop_handlers();
  std::vector<fs::path> kept;
  try {
    // The components are loaded once; every prompt of a batch runs on them.
    const PipelineRunner run = resolved.spec->load(resolved.index, resolved.attention);
    const auto summary = [&](size_t outputs) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::string gpu;
#ifdef MMGEN_HAVE_CUDA
      // What the caching allocator handed out at most (torch's max_memory_allocated).
      if (request.device == "cuda")
        gpu = ", peak GPU memory " +
              format_bytes(cuda::CachingAllocator::instance().peak_bytes_in_use());
#endif
      spdlog::info("done: {} output(s) in {:.2f} s, peak memory {}{}", outputs, seconds,
                   format_bytes(peak_resident_bytes()), gpu);
    };
    // The leader's exit code also says whether every other rank finished well. Its communicators
    // go first: NCCL tears a communicator down with every rank taking part.
    const auto ranks_ok = [&] {
      if (!ranks.others) return true;
      resolved.request.parallel.reset();
      ranks.run.reset();
      return ranks.others->wait_all();
    };
    if (resolved.batch_prompts.empty()) {
      stop_if_requested();
      generate_one(run, resolved, request, path, kept);
      // A stop asked for while the output was written: the file is kept and the run says so.
      stop_if_requested();
      summary(1);
      return ranks_ok() ? 0 : 1;
    }
    const size_t failed = generate_batch(run, resolved, kept);
    stop_if_requested();
    summary(resolved.batch_prompts.size() - failed);
    return ranks_ok() && failed == 0 ? 0 : 1;
  } catch (const Interrupted& stop) {
    std::fprintf(stderr, "mmgen: %s\n", interruption_message(stop, kept).c_str());
    return 128 + stop.signal_number;
  }
}

}  // namespace

json preflight(const ResolvedGenerate& resolved) {
  const Request& request = resolved.request;
  check_runtime_support(request);
  // --output-file-name (and that it would not replace a file) before any work; a batch checks
  // here only that its longest name (the last index) is a valid name, and each prompt's name for
  // a taken file when it comes to it, so one taken name fails only that prompt. The folder must
  // take a file now, not after load, encode, denoise and decode.
  if (!request.parallel || request.parallel->leader()) {
    if (resolved.batch_prompts.empty()) {
      output_file_path(request);
    } else {
      Request last = batch_request(resolved, resolved.batch_prompts.size() - 1);
      last.overwrite = true;  // names only: whether a file is taken is asked per prompt
      output_file_path(last, resolved.batch_prompts.size() - 1);
    }
    check_output_folder_writable(request.output_path);
    // A config file is not trusted: where it sends the output is said before anything is written.
    for (const char* key : {"output_path", "output_file_name"}) {
      const std::string source = resolved.setting_sources.value(key, std::string("built-in"));
      if (source != "command line" && source != "built-in")
        spdlog::info("output: {} {} is set by {}", key,
                     key == std::string("output_path") ? request.output_path.string()
                                                       : request.output_file_name.value_or(""),
                     source);
    }
  }
  return check_memory(resolved);
}

int run_generate(const std::vector<std::string>& arguments) {
  if (is_started_rank()) {
    // A rank the leader started: its GPU before any other CUDA call; a failure ends the process
    // at once (nothing waits for peers that will not answer), and the leader stops the run.
    prepare_started_rank();
    try {
      return run_resolved(resolve_generate(arguments));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mmgen: error: rank %s: %s\n", std::getenv("MMGEN_RANK"), e.what());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  ResolvedGenerate resolved = resolve_generate(arguments);
  if (resolved.request.dry_run) {
    spdlog::set_level(resolved.request.quiet ? spdlog::level::err
                                             : spdlog::level::from_str(resolved.request.log_level));
    log_attention_notes(resolved.attention);
    for (const auto& warning : resolved.warnings) spdlog::warn("{}", warning);
    const json memory_plan = preflight(resolved);
    std::cout << dry_run_json(resolved, memory_plan).dump(2) << std::endl;
    return 0;
  }
  return run_resolved(std::move(resolved));
}

namespace {

// The value after `--flag` (or in `--flag=value`) among the arguments; nullopt when not given.
std::optional<std::string> argument_value(const std::vector<std::string>& arguments,
                                          const std::string& flag) {
  std::optional<std::string> value;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == flag && i + 1 < arguments.size()) value = arguments[i + 1];
    if (arguments[i].starts_with(flag + "=")) value = arguments[i].substr(flag.size() + 1);
  }
  return value;
}

// The "Options:" part for one model: each default that model takes and the file it comes from.
// Throws Error when the model cannot be read.
std::string model_options_help(const std::string& model_path,
                               const std::optional<std::string>& revision) {
  const ModelIndex index = load_model_index(resolve_model_path(model_path, revision));
  // The path as a named value: GCC 13 takes a reference returned beside a temporary argument for
  // a dangling one (-Wdangling-reference), though the spec lives in the registry.
  const fs::path index_file = index.root / "model_index.json";
  const PipelineSpec& spec = find_pipeline(index.class_name, index_file);
  check_components(spec, index);
  const PipelineDefaults pipeline = load_pipeline_defaults(spec, index);
  const ModelFolderDefaults folder = load_model_folder_defaults(index.root);
  const std::string pipeline_file = "configs/" + spec.defaults_file;
  std::string text = fmt::format(
      "Defaults for {} ({}{}{}), each with where it comes from:\n", index.root.string(),
      index.class_name, pipeline.variant.empty() ? "" : ", recognised as ", pipeline.variant);
  return text + options_help(Command::Generate, [&](const OptionSpec& option) -> std::string {
           const std::string key(option.name);
           if (folder.layer.contains(key))
             return default_value_text(folder.layer[key]) + " from " + folder.file.string();
           if (pipeline.layer.contains(key))
             return default_value_text(pipeline.layer[key]) + " from " + pipeline_file +
                    (pipeline.variant_keys.count(key) ? " (" + pipeline.variant + ")" : "");
           if (option.builtin_default.is_null() || option.type == OptionType::Flag) return {};
           return default_value_text(option.builtin_default) + " (built-in)";
         });
}

}  // namespace

std::string generate_help(const std::vector<std::string>& arguments) {
  std::string text =
      "Usage: mmgen generate --model-path DIR (--prompt TEXT | --prompt-file-path FILE) "
      "[options]\n\n"
      "Settings come from, highest first: these flags, --config FILE, the model folder's "
      "mmgen.yaml, the pipeline's defaults (configs/), built-in defaults.\n"
      "Per component: --<component>-path DIR replaces a component's folder;\n"
      "               --component-attention-backends.<component> NAME sets one component's "
      "attention backend.\n"
      "A flag given twice takes its last value. --seed -1 draws a random seed (logged and stored "
      "with the output).\n"
      "Defaults: a pipeline's configs/ file sets some (\"81 from configs/wan.yaml "
      "(WanPipeline)\"); "
      "the built-in value applies otherwise.\n\n";
  if (const auto model = argument_value(arguments, "--model-path")) {
    try {
      return text + model_options_help(*model, argument_value(arguments, "--revision"));
    } catch (const Error& e) {
      text += fmt::format("(--model-path {}: {}; showing every pipeline's defaults)\n\n", *model,
                          e.what());
    }
  } else {
    text += "Pass --model-path DIR with --help for the defaults that model takes.\n\n";
  }
  return text + options_help(Command::Generate,
                             [](const OptionSpec& option) { return default_description(option); });
}

}  // namespace mmgen::cli
