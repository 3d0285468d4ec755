// Sequence and classifier-free-guidance parallel (issue 24) on the CPU, ranks as threads of this
// process (core/thread_communicator.h): the collectives move the right bytes, the Ulysses
// exchanges are each other's inverse and put every head where the layout says, and a sharded
// transformer forward and a whole sharded pipeline give the single-device result to the bit.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

#include "attention/backend.h"
#include "attention/ulysses.h"
#include "core/error.h"
#include "core/pitched_copy.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "core/thread_communicator.h"
#include "models/dit/wan/wan_random_checkpoint.h"
#include "models/dit/wan/wan_transformer.h"
#include "models/dit/zimage/zimage_random_checkpoint.h"
#include "models/dit/zimage/zimage_transformer.h"
#include "models/vae/tiled_decode.h"
#include "models/vae/tiling.h"
#include "models/vae/wan_vae_decoder.h"
#include "pipeline/model_index.h"
#include "pipeline/parallel_run.h"
#include "pipeline/wan/wan_pipeline.h"
#include "pipeline/zimage/zimage_pipeline.h"
#include "tests/test_support.h"

namespace mmgen {
namespace {

// Runs body(rank, communicator) on `size` threads; a rank's failure aborts the others and is
// rethrown here.
void run_ranks(int size, const std::function<void(int, dist::Communicator&)>& body) {
  dist::ThreadGroup group(size);
  std::vector<std::unique_ptr<dist::Communicator>> members;
  for (int r = 0; r < size; ++r) members.push_back(group.member(r));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, *members[size_t(r)]);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        group.abort();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

Tensor iota(const Shape& shape, float start) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + float(i);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().raw(), b.contiguous().raw(), a.nbytes()) == 0;
}

TEST(SequenceShards, BalancedWithTheRemainderFirst) {
  const dist::SequenceShards shards = dist::SequenceShards::balanced(10, 4);
  EXPECT_EQ(shards.sizes, (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(shards.offsets, (std::vector<int64_t>{0, 3, 6, 8}));
  EXPECT_EQ(shards.total(), 10);
  EXPECT_THROW(dist::SequenceShards::balanced(3, 4), Error);
}

TEST(ThreadCommunicator, AllToAllBroadcastAndGatherMoveEachRanksBytes) {
  run_ranks(3, [](int rank, dist::Communicator& comm) {
    // Rank r sends (r + 1) · (j + 1) values to rank j, valued 100·r + 10·j + k.
    std::vector<Tensor> send, recv;
    for (int j = 0; j < 3; ++j) {
      send.push_back(iota({(rank + 1) * (j + 1)}, float(100 * rank + 10 * j)));
      recv.push_back(Tensor::empty({(j + 1) * (rank + 1)}));
    }
    comm.all_to_all(send, recv);
    for (int i = 0; i < 3; ++i)
      for (int64_t k = 0; k < recv[size_t(i)].numel(); ++k)
        ASSERT_EQ(recv[size_t(i)].data<float>()[k], float(100 * i + 10 * rank + k));

    Tensor data = rank == 1 ? iota({5}, 7.0f) : Tensor::zeros({5});
    comm.broadcast(data, 1);
    EXPECT_TRUE(same_bits(data, iota({5}, 7.0f)));

    std::vector<Tensor> all{Tensor::empty({2}), Tensor::empty({2}), Tensor::empty({2})};
    comm.all_gather(iota({2}, float(rank * 2)), all);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(all[size_t(i)], iota({2}, float(i * 2))));

    // Mismatched sizes are refused in one line, not read past.
    std::vector<Tensor> wrong{Tensor::empty({1}), Tensor::empty({1}), Tensor::empty({1})};
    EXPECT_THROW(comm.all_gather(Tensor::empty({2}), wrong), Error);
  });
}

TEST(ThreadCommunicator, AFailedRankStopsTheOthersInsteadOfHanging) {
  EXPECT_THROW(run_ranks(2,
                         [](int rank, dist::Communicator& comm) {
                           if (rank == 1) fail("rank 1 fails before the collective");
                           Tensor data = Tensor::zeros({4});
                           comm.broadcast(data, 0);
                         }),
               Error);
}

TEST(PitchedCopy, PacksAndUnpacksAHeadSliceOnTheHost) {
  const Tensor x = iota({2, 3, 4, 5}, 0.0f);  // [B, S, H, D]
  Tensor packed = Tensor::empty({2, 3, 2, 5});
  copy_pitched(packed, x.slice(2, 1, 3));
  EXPECT_TRUE(same_bits(packed, x.slice(2, 1, 3).contiguous()));
  Tensor back = Tensor::zeros({2, 3, 4, 5});
  copy_pitched(back.slice(2, 1, 3), packed);
  EXPECT_TRUE(same_bits(back.slice(2, 1, 3).contiguous(), packed));
  EXPECT_EQ(back.slice(2, 0, 1).contiguous().data<float>()[0], 0.0f);
  // A view that is not rows at one pitch is refused.
  EXPECT_THROW(copy_pitched(Tensor::empty({4, 3}), x.select(0, 0).select(2, 0).permute({1, 0})),
               Error);
}

// Ulysses: the whole sequence for a share of the heads, and back, for uneven shards, a batch, and
// heads that divide over the ranks (6 over 3) or do not (7 over 3: 3, 2, 2).
TEST(Ulysses, ExchangesPutEveryHeadOfTheWholeSequenceOnItsRank) {
  for (const int64_t heads : {6, 7})
    for (const int64_t batch : {1, 2}) {
      const int n = 3;
      const int64_t total = 11, dim = 4;
      const Tensor whole = iota({batch, total, heads, dim}, 0.5f);
      const dist::SequenceShards shards = dist::SequenceShards::balanced(total, n);
      const int64_t first[] = {0, heads == 6 ? 2 : 3, heads == 6 ? 4 : 5, heads};
      run_ranks(n, [&](int rank, dist::Communicator& comm) {
        const int64_t start = shards.offsets[size_t(rank)], rows = shards.sizes[size_t(rank)];
        const Tensor mine = whole.slice(1, start, start + rows).contiguous();
        const Tensor by_heads = attention::sequence_to_heads(mine, shards, comm);
        EXPECT_TRUE(same_bits(by_heads, whole.slice(2, first[rank], first[rank + 1]).contiguous()))
            << heads << " heads, batch " << batch << " rank " << rank;
        EXPECT_TRUE(same_bits(attention::heads_to_sequence(by_heads, shards, comm, heads), mine));
        const Tensor flat = mine.view({batch, rows, heads * dim});
        EXPECT_TRUE(same_bits(attention::gather_sequence(flat, shards, comm),
                              whole.view({batch, total, heads * dim})));
        // Fewer heads than ranks are refused.
        EXPECT_THROW(attention::sequence_to_heads(mine.slice(2, 0, 2).contiguous(), shards, comm),
                     Error);
      });
    }
}

// A random-weight transformer with 6 heads over 2 and 3 ranks, an uneven token count and a batch
// of two: each rank's prediction is the single-device forward's to the bit.
TEST(Ulysses, ShardedTransformerForwardIsTheSingleDeviceForwardToTheBit) {
  dit::WanTransformerConfig config;
  config.num_attention_heads = 6;
  config.attention_head_dim = 8;
  config.ffn_dim = 96;
  config.num_layers = 2;
  config.text_dim = 16;
  config.rope_max_seq_len = 32;
  const fs::path file = testing::scratch_dir("parallel_test") / "transformer.safetensors";
  write_safetensors(file, dit::random_checkpoint(config), {{"format", "pt"}});
  const Tensor latents = dit::random_tensor({2, 16, 3, 6, 10}, 0.0f, 1.5f, 5, DType::F32);
  const Tensor text = dit::random_tensor({2, 7, config.text_dim}, 0.0f, 0.5f, 6, DType::F32);
  // Attention through `fa`, the CPU's automatic choice, whose rows do not depend on the query
  // block they are computed in (the reference's Eigen tiles do, in the last bit).
  const dit::WanTransformer single(config, WeightStore::open_file(file));
  const std::vector<attention::StackTraits> model_stacks = single.attention_stacks();
  const auto fa_attention = [&] {
    return attention::layers_from(model_stacks, [](const attention::StackTraits&, int64_t) {
      return attention::Layer(attention::make_dit_backend("fa", nlohmann::json::object()));
    });
  };
  attention::Layers single_attention = fa_attention();
  const Tensor expected = single.forward(latents, 500.0f, text, {}, &single_attention);
  for (const int n : {2, 3}) {
    run_ranks(n, [&](int rank, dist::Communicator& comm) {
      const dit::WanTransformer model(config, WeightStore::open_file(file));
      // 3 x 3 x 5 = 45 tokens: shards of 23/22 and 15 each.
      const attention::SequenceParallel sequence{&comm, dist::SequenceShards::balanced(45, n)};
      attention::Layers attention = fa_attention();
      const Tensor ours = model.forward(latents, 500.0f, text, {}, &attention, &sequence);
      EXPECT_TRUE(same_bits(ours, expected))
          << n << " ranks, rank " << rank << ": max diff " << testing::max_abs_diff(ours, expected);
    });
  }
}

// A random-weight Z-Image transformer with 3 heads (over 2 ranks: 2 and 1) and a ragged batch of
// two (captions of 7 and 40 tokens, so joint sequences of 64 and 96 rows) over 2 and 3 ranks:
// each rank's predictions are the single-device forward's to the bit.
TEST(Ulysses, ShardedZImageForwardIsTheSingleDeviceForwardToTheBit) {
  const dit::ZImageConfig config = dit::ZImageConfig::from_json({{"dim", 128},
                                                                 {"n_heads", 4},
                                                                 {"n_kv_heads", 4},
                                                                 {"n_layers", 2},
                                                                 {"n_refiner_layers", 1},
                                                                 {"cap_feat_dim", 40},
                                                                 {"axes_dims", {8, 12, 12}},
                                                                 {"axes_lens", {256, 64, 64}}});
  const fs::path folder = testing::scratch_dir("parallel_test_zimage");
  write_safetensors(folder / "diffusion_pytorch_model.safetensors",
                    dit::zimage_random_checkpoint(config, DType::F32));
  const std::vector<dit::ZImageItem> batch = {
      {dit::random_tensor({16, 1, 6, 10}, 0.0f, 1.5f, 5, DType::F32),
       dit::random_tensor({7, 40}, 0.0f, 1.0f, 6, DType::F32), 0.3f},
      {dit::random_tensor({16, 1, 6, 10}, 0.0f, 1.5f, 7, DType::F32),
       dit::random_tensor({40, 40}, 0.0f, 1.0f, 8, DType::F32), 0.3f}};
  const dit::ZImageTransformer single(config, WeightStore::open_folder(folder));
  const std::vector<attention::StackTraits> model_stacks = single.attention_stacks();
  const auto fa_attention = [&] {  // as above: `fa`, whose rows do not depend on their block
    return attention::layers_from(model_stacks, [](const attention::StackTraits&, int64_t) {
      return attention::Layer(attention::make_dit_backend("fa", nlohmann::json::object()));
    });
  };
  attention::Layers single_attention = fa_attention();
  const std::vector<Tensor> expected = single.forward(batch, {}, &single_attention);
  for (const int n : {2, 3}) {
    run_ranks(n, [&](int rank, dist::Communicator& comm) {
      const dit::ZImageTransformer model(config, WeightStore::open_folder(folder));
      attention::Layers attention = fa_attention();
      const std::vector<Tensor> ours = model.forward(batch, {}, &attention, &comm);
      ASSERT_EQ(ours.size(), expected.size());
      for (size_t i = 0; i < ours.size(); ++i)
        EXPECT_TRUE(same_bits(ours[i], expected[i]))
            << n << " ranks, rank " << rank << ", item " << i << ": max diff "
            << testing::max_abs_diff(ours[i], expected[i]);
    });
  }
}

// The wan-tiny pipeline (2 heads) with 2 ranks of sequence parallel, 2 of CFG parallel, and 4
// (2 x 2), and with --vae-tiling's tiles dealt out over 4 ranks: the leader's video is the
// single-process video to the bit; the others return none.
// The decode of several GPUs without --vae-tiling: bands of whole rows, each decoded with the
// tail's halo. 40 latent rows over 2 and 3 ranks (20 + 20; 14 + 13 + 13) with wan-tiny's 10-row
// halo: every band's region leaves rows out, so the halo is cropped for real. Two latent frames,
// so each band carries its causal caches. Rank 0's video is the untiled decode.
TEST(ParallelDecode, BandsOfRowsGiveTheUntiledDecode) {
  const vae::WanVaeDecoder decoder =
      vae::WanVaeDecoder::open_folder(testing::source_dir() / "examples/models/wan-tiny/vae");
  const Tensor latents = decoder.denormalize(randn({1, 16, 2, 40, 12}, 5));
  const Tensor untiled = decoder.decode(latents);
  for (int n : {2, 3}) {
    const vae::TileBlend bands = vae::TileBlend::bands(40, 12, 8, n, decoder.tail_radius());
    ASSERT_EQ(bands.tiles().size(), size_t(n));
    EXPECT_EQ(bands.tiles()[1].y0, n == 2 ? 20 : 14);
    EXPECT_LT(bands.tiles()[0].ry1 - bands.tiles()[0].ry0, 40);
    std::vector<Tensor> videos(static_cast<size_t>(n));
    run_ranks(n, [&](int rank, dist::Communicator& comm) {
      videos[size_t(rank)] = vae::decode_in_bands(decoder, latents, comm);
    });
    // Each output pixel sees exactly the untiled context; only the CPU convolution's summation
    // order changes with the plane's size (Eigen picks its GEMM blocking by shape), so the bands
    // match to float32 rounding (1.3e-6 here) rather than to the bit.
    ASSERT_EQ(videos[0].shape(), untiled.shape());
    const double diff = testing::max_abs_diff(videos[0], untiled);
    std::printf("%d bands vs untiled: max abs diff %.3g\n", n, diff);
    EXPECT_LT(diff, 1e-5) << n << " ranks";
    for (int r = 1; r < n; ++r) EXPECT_FALSE(videos[size_t(r)].defined());
  }
  // A band cut without its halo is not the untiled decode: the halo matters.
  const Tensor no_halo = decoder.decode(latents.slice(3, 20, 40).contiguous());
  EXPECT_GT(testing::max_abs_diff(no_halo, untiled.slice(3, 20 * 8, 40 * 8).contiguous()), 1e-2);
  // No more bands than rows (decode_in_bands asks for one band per rank, at most one per row).
  EXPECT_THROW(vae::TileBlend::bands(2, 12, 8, 3, 10), Error);
}

TEST(ParallelPipeline, SequenceAndCfgParallelGiveTheSingleProcessVideo) {
  if (testing::shared_dir().empty()) GTEST_SKIP() << "../shared not found; reference check skipped";
  const fs::path folder = testing::shared_dir() / "fixtures/wan-tiny/model";
  const ModelIndex index = load_model_index(folder);
  WanGenerationInput input;
  input.prompt = "a red square";
  input.negative_prompt = "blurry";
  input.height = 32;
  input.width = 48;
  input.num_frames = 5;
  input.num_inference_steps = 3;
  input.guidance_scale = 4.0;
  input.max_sequence_length = 16;
  input.seed = 7;
  const Tensor expected = WanPipeline(index).generate(input).frames;
  WanGenerationInput tiled_input = input;
  tiled_input.vae_tiles = vae::TileLayout{2, 1};
  ASSERT_EQ(vae::TileBlend(4, 6, 8, *tiled_input.vae_tiles, 0).tiles().size(), 15u);  // 3 x 5
  const Tensor expected_tiled = WanPipeline(index).generate(tiled_input).frames;
  struct Case {
    ParallelLayout layout;
    bool tiled;
  };
  for (const Case& run_case : {Case{{2, 1}, false}, Case{{2, 2}, false}, Case{{4, 2}, false},
                               Case{{4, 2}, true}, Case{{2, 1}, true}}) {
    const ParallelLayout layout = run_case.layout;

    // The groups as join_ranks makes them: a world, the branches' sequence groups and the rows'
    // guidance groups, each a thread group here.
    dist::ThreadGroup world(layout.world_size);
    std::vector<std::unique_ptr<dist::ThreadGroup>> sequence_groups, guidance_groups;
    for (int b = 0; b < layout.cfg_degree; ++b)
      sequence_groups.push_back(std::make_unique<dist::ThreadGroup>(layout.sequence_degree()));
    for (int s = 0; s < layout.sequence_degree(); ++s)
      guidance_groups.push_back(std::make_unique<dist::ThreadGroup>(layout.cfg_degree));
    std::vector<ParallelRun> runs(size_t(layout.world_size));
    for (int r = 0; r < layout.world_size; ++r) {
      ParallelRun& run = runs[size_t(r)];
      run.layout = layout;
      run.world = world.member(r);
      if (layout.sequence_degree() > 1)
        run.sequence =
            sequence_groups[size_t(layout.branch_of(r))]->member(layout.sequence_rank_of(r));
      if (layout.cfg_degree == 2)
        run.guidance =
            guidance_groups[size_t(layout.sequence_rank_of(r))]->member(layout.branch_of(r));
    }
    std::vector<Tensor> frames(size_t(layout.world_size));
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(size_t(layout.world_size));
    for (int r = 0; r < layout.world_size; ++r)
      threads.emplace_back([&, r] {
        try {
          WanGenerationInput mine = run_case.tiled ? tiled_input : input;
          mine.parallel = &runs[size_t(r)];
          frames[size_t(r)] = WanPipeline(index).generate(mine).frames;
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
          world.abort();
          for (auto& g : sequence_groups) g->abort();
          for (auto& g : guidance_groups) g->abort();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    const std::string name = std::to_string(layout.world_size) + " ranks, cfg degree " +
                             std::to_string(layout.cfg_degree) + (run_case.tiled ? ", tiled" : "");
    EXPECT_TRUE(same_bits(frames[0], run_case.tiled ? expected_tiled : expected)) << name;
    for (int r = 1; r < layout.world_size; ++r) EXPECT_FALSE(frames[size_t(r)].defined()) << name;
  }
}

// The zimage-tiny pipeline (4 heads: 2 and 2 over 2 ranks, 2, 1, 1 over 3) with guidance, so two
// items with captions of different lengths, in sequence parallel: the leader's image is the
// single-process image to the bit; the others return none.
TEST(ParallelPipeline, ZImageSequenceParallelGivesTheSingleProcessImage) {
  if (testing::shared_dir().empty()) GTEST_SKIP() << "../shared not found; reference check skipped";
  const ModelIndex index = load_model_index(testing::shared_dir() / "fixtures/zimage-tiny/model");
  const AttentionPlan plan = plan_attention(index, Request{});
  ZImageGenerationInput input;
  input.prompt = "a red square on a blue field";
  input.negative_prompt = "blurry";
  input.height = 32;
  input.width = 48;
  input.num_inference_steps = 3;
  input.guidance.scale = 4.0;
  input.max_sequence_length = 48;
  input.seed = 7;
  const Tensor expected = ZImagePipeline(index, plan).generate(input).frames;
  for (const int n : {2, 3}) {
    const size_t ranks = static_cast<size_t>(n);
    dist::ThreadGroup world(n), sequence(n);
    std::vector<ParallelRun> runs(ranks);
    for (int r = 0; r < n; ++r) {
      runs[size_t(r)].layout = {n, 1};
      runs[size_t(r)].world = world.member(r);
      runs[size_t(r)].sequence = sequence.member(r);
    }
    std::vector<Tensor> frames(ranks);
    std::vector<std::exception_ptr> errors(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          ZImageGenerationInput mine = input;
          mine.parallel = &runs[size_t(r)];
          frames[size_t(r)] = ZImagePipeline(index, plan).generate(mine).frames;
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
          world.abort();
          sequence.abort();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    EXPECT_TRUE(same_bits(frames[0], expected))
        << n << " ranks: max diff " << testing::max_abs_diff(frames[0], expected);
    for (int r = 1; r < n; ++r) EXPECT_FALSE(frames[size_t(r)].defined()) << n << " ranks";
  }
}

TEST(ParallelLayout, OddGpuCountsCannotSplitTheGuidanceBranches) {
  EXPECT_NO_THROW((ParallelLayout{4, 2}.validate()));
  EXPECT_THROW((ParallelLayout{3, 2}.validate()), Error);
  EXPECT_EQ((ParallelLayout{4, 2}.branch_of(3)), 1);
  EXPECT_EQ((ParallelLayout{4, 2}.sequence_rank_of(3)), 1);
}

}  // namespace
}  // namespace mmgen
