// The paged KV memory (attention/paged/kv_memory.h): whole pages handed out and freed by page, a
// request's last partial page filled before a new one, page 0 never handed out, and no page
// leaked or handed out twice across 10,000 random alloc / extend / decode / free operations.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "attention/paged/kv_memory.h"
#include "tests/test_support.h"

namespace mmgen::attention::paged {
namespace {

TEST(PageAllocator, FillsTheLastPartialPageFirst) {
  PageAllocator allocator(64, 4);  // pages 1..16
  std::vector<int64_t> slots;
  ASSERT_TRUE(allocator.alloc_extend(std::vector<int64_t>{0}, std::vector<int64_t>{6},
                                     std::vector<int64_t>{-1}, slots));
  EXPECT_EQ(slots, (std::vector<int64_t>{4, 5, 6, 7, 8, 9}));  // page 1, then page 2
  std::vector<int64_t> more;
  ASSERT_TRUE(allocator.alloc_extend(std::vector<int64_t>{6}, std::vector<int64_t>{11},
                                     std::vector<int64_t>{9}, more));
  EXPECT_EQ(more, (std::vector<int64_t>{10, 11, 12, 13, 14}));  // rest of page 2, then page 3
  std::vector<int64_t> decode;
  ASSERT_TRUE(allocator.alloc_decode(std::vector<int64_t>{12}, std::vector<int64_t>{14}, decode));
  EXPECT_EQ(decode, (std::vector<int64_t>{15}));
  EXPECT_EQ(allocator.available_pages(), 13);
  // The request finishes: its token list frees pages 1, 2, 3 (each once).
  std::vector<int64_t> all = slots;
  all.insert(all.end(), more.begin(), more.end());
  allocator.free(all);
  EXPECT_NE(testing::error_message([&] { allocator.free(decode); }).find("freed twice"),
            std::string::npos);
  EXPECT_EQ(allocator.available_pages(), 16);
}

TEST(PageAllocator, RefusesWhatDoesNotFitWithoutTakingAnything) {
  PageAllocator allocator(32, 16);  // two pages
  std::vector<int64_t> slots;
  EXPECT_FALSE(allocator.alloc_extend(std::vector<int64_t>{0, 0}, std::vector<int64_t>{17, 16},
                                      std::vector<int64_t>{-1, -1}, slots));
  EXPECT_TRUE(slots.empty());
  EXPECT_EQ(allocator.available_pages(), 2);
  EXPECT_FALSE(allocator.alloc(48).has_value());
  EXPECT_NE(testing::error_message([&] { allocator.alloc(5); }).find("whole pages"),
            std::string::npos);
  EXPECT_NE(testing::error_message([&] { PageAllocator(8, 0); }).find("--page-size"),
            std::string::npos);
}

TEST(ReqToTokenPool, HandsOutEachRowOnce) {
  ReqToTokenPool pool(2, 8);
  const auto a = pool.alloc(), b = pool.alloc();
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(pool.alloc().has_value());
  pool.free(*a);
  EXPECT_NE(testing::error_message([&] { pool.free(*a); }).find("freed twice"), std::string::npos);
  EXPECT_EQ(pool.alloc(), a);
}

// 10,000 random operations per page size, checking after each that every page is either free or
// owned by exactly one live request, that no request ever gets page 0, and that a request's
// tokens run contiguously within each of its pages.
TEST(PageAllocator, NeverLeaksAPageAcrossRandomSequences) {
  for (int64_t page_size : {1, 16, 64}) {
    std::mt19937 rng{uint32_t(page_size)};
    PageAllocator allocator(4096, page_size);
    const int64_t pages = allocator.num_pages();
    std::map<int, std::vector<int64_t>> live;  // request -> slots in token order
    std::vector<int> owner(size_t(pages + 1), -1);
    int next_id = 0, failures = 0;
    auto claim = [&](int id, const std::vector<int64_t>& slots, size_t first) {
      std::vector<int64_t>& mine = live[id];
      for (size_t i = first; i < slots.size(); ++i) {
        const int64_t slot = slots[i], page = slot / page_size;
        ASSERT_GE(page, 1) << "page 0 handed out";
        const size_t position = mine.size();
        if (position % size_t(page_size) != 0) {
          ASSERT_EQ(slot, mine.back() + 1) << "tokens not contiguous within a page";
          ASSERT_EQ(owner[size_t(page)], id);
        } else {
          ASSERT_EQ(slot % page_size, 0);
          ASSERT_EQ(owner[size_t(page)], -1) << "page " << page << " handed out twice";
          owner[size_t(page)] = id;
        }
        mine.push_back(slot);
      }
    };
    std::uniform_int_distribution<int> op(0, 9);
    for (int step = 0; step < 10000; ++step) {
      const int choice = op(rng);
      if (live.empty() || choice <= 2) {  // new requests (1 to 3 at once)
        const int count = 1 + int(rng() % 3);
        std::vector<int64_t> zeros(size_t(count), 0), lens, none(size_t(count), -1), slots;
        for (int i = 0; i < count; ++i) lens.push_back(1 + int64_t(rng() % 300));
        const int64_t before = allocator.available_pages();
        if (!allocator.alloc_extend(zeros, lens, none, slots)) {
          ++failures;
          ASSERT_EQ(allocator.available_pages(), before);
          ASSERT_TRUE(slots.empty());
        } else {
          size_t at = 0;
          for (int i = 0; i < count; ++i) {
            const int id = next_id++;
            std::vector<int64_t> mine(slots.begin() + at, slots.begin() + at + size_t(lens[i]));
            claim(id, mine, 0);
            at += size_t(lens[i]);
          }
        }
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        const int id = it->first;
        std::vector<int64_t>& mine = it->second;
        const int64_t length = int64_t(mine.size());
        if (choice <= 5) {  // extend or decode
          const int64_t grow = choice <= 3 ? 1 + int64_t(rng() % 100) : 1;
          std::vector<int64_t> slots;
          const bool ok = grow == 1
                              ? allocator.alloc_decode(std::vector<int64_t>{length + 1},
                                                       std::vector<int64_t>{mine.back()}, slots)
                              : allocator.alloc_extend(std::vector<int64_t>{length},
                                                       std::vector<int64_t>{length + grow},
                                                       std::vector<int64_t>{mine.back()}, slots);
          if (!ok) {
            ++failures;
          } else {
            ASSERT_EQ(int64_t(slots.size()), grow);
            claim(id, slots, 0);
          }
        } else {  // finish: free everything it holds
          allocator.free(mine);
          for (int64_t slot : mine) owner[size_t(slot / page_size)] = -1;
          live.erase(it);
        }
      }
      if (HasFatalFailure()) return;
      int64_t owned = 0;
      for (int64_t p = 1; p <= pages; ++p) owned += owner[size_t(p)] >= 0;
      ASSERT_EQ(owned + allocator.available_pages(), pages) << "step " << step;
    }
    for (auto& [id, mine] : live) allocator.free(mine);
    EXPECT_EQ(allocator.available_pages(), pages) << "page size " << page_size;
    EXPECT_GT(failures, 0) << "the pool never filled up: the test did not reach its limits";
  }
}

}  // namespace
}  // namespace mmgen::attention::paged
